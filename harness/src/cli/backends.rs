//! Choosing an environment backend by name, and where its images live.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use geode_harness::env::Backend;
use geode_harness::env::docker::DockerBackend;
use geode_harness::env::host::HostBackend;
use geode_harness::env::image::Aliases;
use geode_harness::env::kind::BackendKind;
use geode_harness::env::kubernetes::{KubernetesBackend, KubernetesSettings};
use geode_harness::env::sandbox::{BaseMode, Progress, SandboxBackend, SandboxConfig};

/// Where images live, which registries mirror which, which repositories are other names of
/// which, and whether a stand-in may take a digest pin's place: `[images]` in
/// `$GEODE_HOME/config.toml` (`store = "/path"`, `mirrors = { "docker.io" = "http://..." }`,
/// `aliases = { "REGISTRY/PREFIX" = "REGISTRY/PREFIX" }`, `stand_in_pinned = true`,
/// `read_only = true`), with `GEODE_IMAGES` overriding the store and `GEODE_IMAGES_READ_ONLY`
/// (`1`/`true`/`0`/`false`) the read-only switch.
#[derive(Debug, Clone)]
pub struct ImageSettings {
    pub store: PathBuf,
    pub mirrors: BTreeMap<String, String>,
    /// The built-in rule (ECR Public's `docker/library` is Docker Hub's `library`) and the
    /// file's.
    pub aliases: Aliases,
    pub stand_in_pinned: bool,
    /// The store is staged (`geode image stage`) and only read: nothing pulled, bootstrapped,
    /// built or written; a missing image is an immediate error (a cluster's shared store).
    pub read_only: bool,
}

impl ImageSettings {
    pub fn load() -> anyhow::Result<Self> {
        let home = super::assembly::geode_home();
        let file = home.join("config.toml");
        let mut settings = if file.is_file() {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let table: toml::Table =
                toml::from_str(&text).with_context(|| format!("parsing {}", file.display()))?;
            ImageSettings::from_table(&table, &file, home.join("images"))?
        } else {
            ImageSettings::defaults(home.join("images"))
        };
        if let Some(store) = std::env::var_os("GEODE_IMAGES") {
            settings.store = PathBuf::from(store);
        }
        if let Some(value) = std::env::var_os("GEODE_IMAGES_READ_ONLY") {
            settings.read_only = match value.to_string_lossy().trim() {
                "1" | "true" | "yes" => true,
                "" | "0" | "false" | "no" => false,
                other => {
                    bail!("GEODE_IMAGES_READ_ONLY={other:?}: say 1 or true (read-only), 0 or false")
                }
            };
        }
        Ok(settings)
    }

    fn defaults(store: PathBuf) -> Self {
        ImageSettings {
            store,
            mirrors: BTreeMap::new(),
            aliases: Aliases::default(),
            stand_in_pinned: false,
            read_only: false,
        }
    }

    /// The `[images]` table of `file`'s `table` (the defaults when it has none); a key that
    /// is unknown or of the wrong type is an error naming the file and the key.
    fn from_table(table: &toml::Table, file: &Path, store: PathBuf) -> anyhow::Result<Self> {
        let mut settings = ImageSettings::defaults(store);
        let Some(images) = table.get("images") else {
            return Ok(settings);
        };
        let Some(images) = images.as_table() else {
            bail!("{}: [images] must be a table", file.display());
        };
        for (key, value) in images {
            match (key.as_str(), value) {
                ("store", toml::Value::String(s)) => settings.store = PathBuf::from(s),
                ("mirrors", toml::Value::Table(m)) => {
                    for (registry, url) in m {
                        let Some(url) = url.as_str() else {
                            bail!(
                                "{}: images.mirrors.{registry} must be a URL string",
                                file.display()
                            );
                        };
                        settings.mirrors.insert(registry.clone(), url.to_string());
                    }
                }
                ("aliases", toml::Value::Table(m)) => {
                    for (from, to) in m {
                        let Some(to) = to.as_str() else {
                            bail!(
                                "{}: images.aliases.\"{from}\" must be a registry and \
                                 repository prefix string (\"docker.io/library\")",
                                file.display()
                            );
                        };
                        settings.aliases =
                            settings.aliases.clone().with(from, to).with_context(|| {
                                format!("{}: images.aliases.\"{from}\"", file.display())
                            })?;
                    }
                }
                ("stand_in_pinned", toml::Value::Boolean(yes)) => settings.stand_in_pinned = *yes,
                ("read_only", toml::Value::Boolean(yes)) => settings.read_only = *yes,
                (other, _) => bail!(
                    "{}: images.{other}: unknown or mistyped (store = \"PATH\", \
                     mirrors = {{ REGISTRY = \"URL\" }}, aliases = {{ \"REGISTRY/PREFIX\" = \
                     \"REGISTRY/PREFIX\" }}, stand_in_pinned = true|false, read_only = \
                     true|false)",
                    file.display()
                ),
            }
        }
        Ok(settings)
    }
}

/// `[environment] extra_ca_certs` of `$GEODE_HOME/config.toml`: PEM files that trials with
/// network trust beside the machine's own roots (off when absent). Behind a TLS-intercepting
/// proxy a task's `pip` or `uv` then works at verify time as it does during builds.
fn extra_ca_certs() -> anyhow::Result<Vec<PathBuf>> {
    let file = super::assembly::geode_home().join("config.toml");
    if !file.is_file() {
        return Ok(Vec::new());
    }
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let table: toml::Table =
        toml::from_str(&text).with_context(|| format!("parsing {}", file.display()))?;
    let Some(environment) = table.get("environment") else {
        return Ok(Vec::new());
    };
    let Some(environment) = environment.as_table() else {
        bail!("{}: [environment] must be a table", file.display());
    };
    let mut out = Vec::new();
    for (key, value) in environment {
        match (key.as_str(), value) {
            ("extra_ca_certs", toml::Value::Array(paths)) => {
                for (i, p) in paths.iter().enumerate() {
                    let Some(p) = p.as_str() else {
                        bail!(
                            "{}: environment.extra_ca_certs[{i}] must be a path string",
                            file.display()
                        );
                    };
                    out.push(PathBuf::from(p));
                }
            }
            (other, _) => bail!(
                "{}: environment.{other}: unknown or mistyped (extra_ca_certs = [\"PEM FILE\", ...])",
                file.display()
            ),
        }
    }
    Ok(out)
}

/// One bundle for trials: the machine's roots, then each extra certificate file, written into
/// the scratch folder (`None` when no extra certificate is configured).
fn trial_ca_bundle(scratch: &Path) -> anyhow::Result<Option<PathBuf>> {
    let extra = extra_ca_certs()?;
    if extra.is_empty() {
        return Ok(None);
    }
    let mut bundle =
        std::fs::read_to_string("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default();
    for path in &extra {
        let pem = std::fs::read_to_string(path)
            .with_context(|| format!("environment.extra_ca_certs: reading {}", path.display()))?;
        if !pem.contains("-----BEGIN CERTIFICATE-----") {
            bail!(
                "environment.extra_ca_certs: {} holds no PEM certificate",
                path.display()
            );
        }
        if !bundle.is_empty() && !bundle.ends_with('\n') {
            bundle.push('\n');
        }
        bundle.push_str(&pem);
    }
    std::fs::create_dir_all(scratch).with_context(|| format!("creating {}", scratch.display()))?;
    let out = scratch.join("trial-ca.crt");
    std::fs::write(&out, bundle).with_context(|| format!("writing {}", out.display()))?;
    Ok(Some(out))
}

/// Progress of long set-ups (pulls, bootstraps, builds) as the user sees it.
pub fn stderr_progress() -> Progress {
    Progress(Arc::new(|line: &str| say!("geode: {line}")))
}

/// The default backend, as the commands that do not take `--env` use it.
pub fn sandbox(jobs_dir: &Path) -> anyhow::Result<Arc<dyn Backend>> {
    make_with_base(BackendKind::Sandbox, false, jobs_dir, BaseMode::Image)
}

/// The sandbox backend of a sealed campaign: its environments are built into `store` (in
/// memory, `crucible::open`), over the machine's image store, which is read and never
/// written.
pub fn sandbox_over(jobs_dir: &Path, store: &Path) -> anyhow::Result<Arc<dyn Backend>> {
    make_sandbox(jobs_dir, BaseMode::Image, Some(store))
}

/// `sandbox` keeps trial scratch (and `--base host` layers) in the jobs folder's scratch
/// (`geode_harness::home::scratch_dir`) and the images in the image store.
pub fn make_with_base(
    kind: BackendKind,
    allow_host: bool,
    jobs_dir: &Path,
    base: BaseMode,
) -> anyhow::Result<Arc<dyn Backend>> {
    std::fs::create_dir_all(jobs_dir)
        .with_context(|| format!("creating {}", jobs_dir.display()))?;
    let jobs = std::fs::canonicalize(jobs_dir)?;
    match kind {
        BackendKind::Sandbox => make_sandbox(jobs_dir, base, None),
        BackendKind::Host if allow_host => Ok(Arc::new(HostBackend::new(
            geode_harness::home::scratch_dir(&jobs).join("host"),
        ))),
        BackendKind::Host => {
            bail!("the host backend runs tasks without isolation: pass --allow-host to use it")
        }
        BackendKind::Docker => Ok(Arc::new(DockerBackend::connect()?)),
        BackendKind::Kubernetes => {
            // Images are built here by the sandbox backend, then pushed for the cluster.
            let builder = make_sandbox(jobs_dir, base, None)?;
            let scratch = geode_harness::home::scratch_dir(&jobs).join("kubernetes");
            Ok(Arc::new(KubernetesBackend::new(
                kubernetes_settings()?,
                builder,
                scratch,
            )?))
        }
    }
}

/// `[kubernetes]` of `$GEODE_HOME/config.toml` (the defaults, which only work inside a
/// cluster and still need a registry, when there is none); a bad key is an error naming the
/// file and the key.
fn kubernetes_settings() -> anyhow::Result<KubernetesSettings> {
    let file = super::assembly::geode_home().join("config.toml");
    if !file.is_file() {
        return Ok(KubernetesSettings::default());
    }
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let table: toml::Table =
        toml::from_str(&text).with_context(|| format!("parsing {}", file.display()))?;
    kubernetes_from_table(&table, &file)
}

fn kubernetes_from_table(table: &toml::Table, file: &Path) -> anyhow::Result<KubernetesSettings> {
    match table.get("kubernetes") {
        None => Ok(KubernetesSettings::default()),
        Some(section) => section
            .clone()
            .try_into()
            .with_context(|| format!("{}: [kubernetes]", file.display())),
    }
}

/// The sandbox backend; with `over`, building into that store over the machine's.
fn make_sandbox(
    jobs_dir: &Path,
    base: BaseMode,
    over: Option<&Path>,
) -> anyhow::Result<Arc<dyn Backend>> {
    std::fs::create_dir_all(jobs_dir)
        .with_context(|| format!("creating {}", jobs_dir.display()))?;
    let jobs = std::fs::canonicalize(jobs_dir)?;
    let exe = std::env::current_exe().context("locating the geode executable")?;
    let images = ImageSettings::load()?;
    let scratch = geode_harness::home::scratch_dir(&jobs);
    let mut config = match over {
        Some(store) => {
            let mut c = SandboxConfig::new(exe, &scratch, store);
            c.parent_image_store = Some(images.store);
            c
        }
        None => SandboxConfig::new(exe, &scratch, images.store),
    };
    config.trial_ca_bundle = trial_ca_bundle(&scratch)?;
    config.mirrors = images.mirrors;
    config.aliases = images.aliases;
    config.stand_in_pinned = images.stand_in_pinned;
    // A sealed campaign's own store is written; the machine's under it never is anyway.
    config.read_only_store = images.read_only && over.is_none();
    config.base = base;
    config.progress = stderr_progress();
    config.hide.push(jobs);
    Ok(Arc::new(SandboxBackend::new(config)?))
}

/// The sandbox backend `geode image stage` prepares images with: the image store at `store`
/// (written, whatever `read_only` says: staging is what fills it), build sandboxes' scratch
/// under `$GEODE_HOME/stage`.
pub fn stage_sandbox(store: &Path) -> anyhow::Result<Arc<dyn Backend>> {
    let exe = std::env::current_exe().context("locating the geode executable")?;
    let images = ImageSettings::load()?;
    let scratch = super::assembly::geode_home().join("stage");
    std::fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    let mut config = SandboxConfig::new(exe, &scratch, store);
    config.trial_ca_bundle = trial_ca_bundle(&scratch)?;
    config.mirrors = images.mirrors;
    config.aliases = images.aliases;
    config.stand_in_pinned = images.stand_in_pinned;
    config.progress = stderr_progress();
    Ok(Arc::new(SandboxBackend::new(config)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> anyhow::Result<ImageSettings> {
        let table: toml::Table = toml::from_str(text).unwrap();
        ImageSettings::from_table(&table, Path::new("config.toml"), PathBuf::from("/s"))
    }

    #[test]
    fn kubernetes_settings_are_typed_and_a_bad_key_names_the_file_and_key() {
        let table: toml::Table = toml::from_str(
            "[kubernetes]\nserver = \"https://k:6443\"\nregistry = \"http://r:5000/g\"\n\
             pod_security = \"restricted\"\nruntime_class = \"gvisor\"\n",
        )
        .unwrap();
        let s = kubernetes_from_table(&table, Path::new("config.toml")).unwrap();
        assert_eq!(
            s.pod_security,
            geode_harness::env::kubernetes::PodSecurity::Restricted
        );
        assert_eq!(s.runtime_class.as_deref(), Some("gvisor"));
        for bad in [
            "[kubernetes]\nregistyr = \"x\"\n",
            "[kubernetes]\npod_security = \"open\"\n",
        ] {
            let table: toml::Table = toml::from_str(bad).unwrap();
            let err = format!(
                "{:#}",
                kubernetes_from_table(&table, Path::new("config.toml")).unwrap_err()
            );
            assert!(err.starts_with("config.toml: [kubernetes]"), "{bad}: {err}");
            assert!(
                err.contains("registyr") || err.contains("open"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn images_aliases_add_to_the_built_in_rule_and_stand_ins_for_pins_are_off_by_default() {
        let defaults = parsed("").unwrap();
        assert_eq!(defaults.aliases, Aliases::default());
        assert!(!defaults.stand_in_pinned);
        assert!(
            !defaults.read_only,
            "a store is written unless it is said to be staged"
        );
        assert!(parsed("[images]\nread_only = true\n").unwrap().read_only);
        let s = parsed(
            "[images]\naliases = { \"mirror.gcr.io/library\" = \"docker.io/library\" }\n\
             stand_in_pinned = true\n",
        )
        .unwrap();
        assert!(s.stand_in_pinned);
        let rules = s.aliases.describe();
        assert_eq!(
            rules,
            [
                "public.ecr.aws/docker/library <-> docker.io/library",
                "mirror.gcr.io/library <-> docker.io/library",
            ]
        );
    }

    #[test]
    fn bad_images_settings_name_the_file_and_key() {
        for (text, names) in [
            (
                "[images]\naliases = { \"library\" = \"docker.io/library\" }\n",
                "images.aliases.\"library\"",
            ),
            (
                "[images]\naliases = { \"x.io/a\" = 3 }\n",
                "images.aliases.\"x.io/a\"",
            ),
            (
                "[images]\nstand_in_pinned = \"yes\"\n",
                "images.stand_in_pinned",
            ),
            ("[images]\nalias = {}\n", "images.alias"),
            ("[images]\nread_only = \"yes\"\n", "images.read_only"),
        ] {
            let err = format!("{:#}", parsed(text).unwrap_err());
            assert!(
                err.starts_with("config.toml: ") && err.contains(names),
                "{text}: {err}"
            );
        }
    }
}
