//! Where the cluster is and how GEODE may use it: `[kubernetes]` of `$GEODE_HOME/config.toml`
//! (read by the binary, typed here), or, without one, the service account a Pod is given
//! (`/var/run/secrets/kubernetes.io/serviceaccount`), so a coordinator that itself runs in the
//! cluster needs no file.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::EnvError;

/// The in-cluster service account's folder (token, CA, namespace).
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The Pod Security level the trials' Pods are made to pass.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    Deserialize,
    serde::Serialize,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::Display,
    strum::EnumIter,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum PodSecurity {
    /// Pod Security "baseline": no privilege, no host namespaces or paths, the runtime's
    /// default capabilities and seccomp profile; the image's own user, root included. Most
    /// task images run as root (`apt-get` in their tests), which "restricted" forbids.
    #[default]
    Baseline,
    /// Pod Security "restricted": every capability dropped, a non-root uid (the image's, or
    /// `run_as_user` for an image whose user is root), `runAsNonRoot`. Tasks that need root
    /// fail under it.
    Restricted,
}

/// `[kubernetes]` as the configuration file spells it; every key optional but `registry`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesSettings {
    /// The API server (`https://10.0.0.1:6443`); the in-cluster address
    /// (`KUBERNETES_SERVICE_HOST`/`_PORT`) when unset.
    pub server: Option<String>,
    /// The namespace trials' Pods live in; the service account's, else `default`.
    pub namespace: Option<String>,
    /// A file holding the bearer token; the service account's when unset.
    pub token_file: Option<PathBuf>,
    /// The PEM file of the CA that signed the API server's certificate; the service
    /// account's when unset, the machine's roots when neither exists.
    pub ca_file: Option<PathBuf>,
    /// Where task images are pushed: `http(s)://HOST[:PORT]/PREFIX` (the scheme only for the
    /// push; the Pods name the image `HOST[:PORT]/PREFIX/...@sha256:...`).
    pub registry: Option<String>,
    /// The name the cluster's nodes reach the same registry by, when it differs from the
    /// push address (`registry.internal:5000/geode`).
    pub pull_registry: Option<String>,
    /// The user name the push authenticates as (with `registry_password_file`); anonymous
    /// when unset. A registry's `Basic` challenge gets these, a `Bearer` challenge's token
    /// endpoint too (over https, or on the registry's own host).
    pub registry_username: Option<String>,
    /// A file holding the push's password or access token (`gcloud auth print-access-token`,
    /// `aws ecr get-login-password`).
    pub registry_password_file: Option<PathBuf>,
    /// `runtimeClassName` of every trial Pod (`gvisor`, `kata`), when the cluster has one.
    pub runtime_class: Option<String>,
    /// The Pod Security level to pass (`baseline`, the default, or `restricted`).
    #[serde(default)]
    pub pod_security: PodSecurity,
    /// The uid an image whose user is root runs as under `restricted` (65532 when unset).
    pub run_as_user: Option<u32>,
    /// `imagePullSecrets` of every trial Pod, by Secret name.
    #[serde(default)]
    pub image_pull_secrets: Vec<String>,
    /// How long a Pod may take to start (pull included), in seconds (300 when unset).
    pub start_timeout_sec: Option<u64>,
}

/// What the backend reaches the cluster with, resolved from the settings and the service
/// account's files.
#[derive(Debug, Clone)]
pub struct ClusterAccess {
    /// The API server's base URL, without a trailing slash.
    pub server: String,
    /// The trials' namespace.
    pub namespace: String,
    /// The bearer token, when there is one.
    pub token: Option<String>,
    /// The CA certificate (PEM), when the machine's roots are not the ones to trust.
    pub ca_pem: Option<Vec<u8>>,
}

/// A registry address split into what the push speaks to and what the Pods name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryTarget {
    /// `http://HOST:PORT` or `https://HOST`: the distribution API's base.
    pub base_url: String,
    /// The repository prefix (`geode`, `team/geode`), maybe empty.
    pub prefix: String,
    /// `HOST[:PORT]/PREFIX` as the Pods name images (the pull registry when one is set).
    pub pull_name: String,
    /// The push's user and password, when it has them.
    pub credentials: Option<PushCredentials>,
}

/// A user and password for the registry push; the password never shows in `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct PushCredentials {
    /// The user name.
    pub user: String,
    /// The password or access token.
    pub password: String,
}

impl std::fmt::Debug for PushCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushCredentials")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl KubernetesSettings {
    /// The cluster as these settings and the machine's service account describe it; an error
    /// names the setting or the file at fault.
    pub fn access(&self) -> Result<ClusterAccess, EnvError> {
        let sa = Path::new(SERVICE_ACCOUNT_DIR);
        let server = match &self.server {
            Some(server) => server.trim_end_matches('/').to_string(),
            None => {
                let host = std::env::var("KUBERNETES_SERVICE_HOST").map_err(|_| {
                    EnvError::Unsupported(
                        "the kubernetes backend needs [kubernetes] server = \"https://...\" in \
                         $GEODE_HOME/config.toml, or to run inside a cluster \
                         (KUBERNETES_SERVICE_HOST)"
                            .into(),
                    )
                })?;
                let port =
                    std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
                let host = if host.contains(':') {
                    format!("[{host}]")
                } else {
                    host
                };
                format!("https://{host}:{port}")
            }
        };
        let read = |path: &Path, key: &str| {
            std::fs::read(path).map_err(|e| EnvError::Io {
                context: format!("kubernetes.{key}: reading {}", path.display()),
                source: e,
            })
        };
        let token = match &self.token_file {
            Some(file) => Some(read(file, "token_file")?),
            None if sa.join("token").is_file() => Some(read(&sa.join("token"), "token_file")?),
            None => None,
        }
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_string());
        let ca_pem = match &self.ca_file {
            Some(file) => Some(read(file, "ca_file")?),
            None if sa.join("ca.crt").is_file() => Some(read(&sa.join("ca.crt"), "ca_file")?),
            None => None,
        };
        let namespace = match &self.namespace {
            Some(ns) => ns.clone(),
            None => std::fs::read_to_string(sa.join("namespace"))
                .map(|ns| ns.trim().to_string())
                .unwrap_or_else(|_| "default".into()),
        };
        Ok(ClusterAccess {
            server,
            namespace,
            token,
            ca_pem,
        })
    }

    /// The registry task images go to; an error when none is set or it does not parse.
    pub fn registry_target(&self) -> Result<RegistryTarget, EnvError> {
        let Some(registry) = &self.registry else {
            return Err(EnvError::Unsupported(
                "the kubernetes backend pushes task images to a registry the cluster pulls \
                 from: set [kubernetes] registry = \"https://HOST/PREFIX\""
                    .into(),
            ));
        };
        let bad =
            |why: &str| EnvError::Unsupported(format!("kubernetes.registry = {registry:?}: {why}"));
        let (scheme, rest) = registry
            .split_once("://")
            .ok_or_else(|| bad("name the scheme (http:// or https://)"))?;
        if scheme != "http" && scheme != "https" {
            return Err(bad("the scheme is http or https"));
        }
        let rest = rest.trim_end_matches('/');
        let (host, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let pull_name = match &self.pull_registry {
            Some(pull) => pull.trim_end_matches('/').to_string(),
            None => rest.to_string(),
        };
        let credentials = match (&self.registry_username, &self.registry_password_file) {
            (None, None) => None,
            (Some(user), Some(file)) => {
                let password = std::fs::read_to_string(file).map_err(|e| EnvError::Io {
                    context: format!(
                        "kubernetes.registry_password_file: reading {}",
                        file.display()
                    ),
                    source: e,
                })?;
                Some(PushCredentials {
                    user: user.clone(),
                    password: password.trim().to_string(),
                })
            }
            _ => {
                return Err(EnvError::Unsupported(
                    "kubernetes.registry_username and registry_password_file go together".into(),
                ));
            }
        };
        Ok(RegistryTarget {
            base_url: format!("{scheme}://{host}"),
            prefix: prefix.to_string(),
            pull_name,
            credentials,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registry_splits_into_push_url_prefix_and_pull_name() {
        let settings = KubernetesSettings {
            registry: Some("http://127.0.0.1:5000/geode/tasks/".into()),
            ..Default::default()
        };
        let target = settings.registry_target().unwrap();
        assert_eq!(target.base_url, "http://127.0.0.1:5000");
        assert_eq!(target.prefix, "geode/tasks");
        assert_eq!(target.pull_name, "127.0.0.1:5000/geode/tasks");
        let moved = KubernetesSettings {
            pull_registry: Some("registry.internal:5000/geode".into()),
            ..settings
        };
        assert_eq!(
            moved.registry_target().unwrap().pull_name,
            "registry.internal:5000/geode"
        );
        for bad in ["127.0.0.1:5000/x", "ftp://h/x", "http:///x"] {
            let settings = KubernetesSettings {
                registry: Some(bad.into()),
                ..Default::default()
            };
            let err = settings.registry_target().unwrap_err().to_string();
            assert!(err.contains("kubernetes.registry"), "{bad}: {err}");
        }
        assert!(
            KubernetesSettings::default()
                .registry_target()
                .unwrap_err()
                .to_string()
                .contains("[kubernetes] registry")
        );
    }
}
