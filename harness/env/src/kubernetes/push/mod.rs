//! A task's image, as GEODE's own builder left it (unpacked layers in the image store), pushed
//! to the registry the cluster pulls from through the distribution API: each layer packed back
//! into a gzip tar (`image::layer_tar`, the inverse of unpacking), uploaded unless the registry
//! has it (`HEAD` first), the config, then the manifest `PUT` by its own digest. The Pods name
//! the image by that digest, so a tag moved by someone else can never change what a trial runs.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use super::settings::RegistryTarget;
use crate::{EnvError, PreparedImage};

/// One layer as the registry holds it.
#[derive(Debug, Clone)]
struct PackedLayer {
    /// The gzip blob's digest.
    digest: String,
    /// The uncompressed tar's digest (the config's diff id).
    diff_id: String,
    /// The gzip blob's size.
    size: u64,
    /// The gzip blob on disk, for an upload.
    file: PathBuf,
}

/// Pushes images to one registry, packing each store layer once per process.
#[derive(Debug)]
pub struct Pusher {
    http: reqwest::Client,
    target: RegistryTarget,
    scratch: PathBuf,
    packed: Mutex<HashMap<PathBuf, PackedLayer>>,
    /// The `Authorization` each repository's challenge asked for, once answered.
    authorization: tokio::sync::Mutex<HashMap<String, String>>,
}

/// What an upload sends: a packed layer's file, or bytes in memory.
#[derive(Debug, Clone)]
enum Blob {
    File(PathBuf),
    Bytes(Vec<u8>),
}

impl Blob {
    /// A fresh body for one attempt.
    fn body(&self) -> Result<reqwest::Body, EnvError> {
        match self {
            Blob::Bytes(bytes) => Ok(reqwest::Body::from(bytes.clone())),
            Blob::File(path) => {
                let file = std::fs::File::open(path).map_err(|e| EnvError::Io {
                    context: format!("open {}", path.display()),
                    source: e,
                })?;
                Ok(reqwest::Body::from(tokio::fs::File::from_std(file)))
            }
        }
    }
}

fn failed(what: String) -> EnvError {
    EnvError::SetupFailed {
        step: "push to the cluster's registry".into(),
        message: what,
    }
}

fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

impl Pusher {
    /// A pusher to `target`, packing layers into `scratch`.
    pub fn new(target: RegistryTarget, scratch: PathBuf) -> Result<Pusher, EnvError> {
        let http = reqwest::Client::builder()
            .build()
            .map_err(|e| EnvError::Unsupported(format!("registry client: {e}")))?;
        Ok(Pusher {
            http,
            target,
            scratch,
            packed: Mutex::new(HashMap::new()),
            authorization: tokio::sync::Mutex::new(HashMap::new()),
        })
    }

    /// Push `layers` with `image`'s settings as `<prefix>/<repo>`; the reference the Pods use
    /// (`HOST/PREFIX/REPO@sha256:...`).
    pub async fn push(
        &self,
        repo: &str,
        layers: &[PathBuf],
        image: &PreparedImage,
    ) -> Result<String, EnvError> {
        let repo = match self.target.prefix.as_str() {
            "" => repo.to_string(),
            prefix => format!("{prefix}/{repo}"),
        };
        let mut packed = Vec::new();
        for layer in layers {
            packed.push(self.pack(layer).await?);
        }
        for layer in &packed {
            if !self.has_blob(&repo, &layer.digest).await? {
                self.upload(&repo, &layer.digest, Blob::File(layer.file.clone()))
                    .await?;
            }
        }
        let diff_ids: Vec<&str> = packed.iter().map(|l| l.diff_id.as_str()).collect();
        let config = serde_json::to_vec(&config_json(image, &diff_ids))
            .map_err(|e| failed(format!("encode the image config: {e}")))?;
        let config_digest = digest_of(&config);
        if !self.has_blob(&repo, &config_digest).await? {
            self.upload(&repo, &config_digest, Blob::Bytes(config.clone()))
                .await?;
        }
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": config.len(),
            },
            "layers": packed.iter().map(|l| serde_json::json!({
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": l.digest,
                "size": l.size,
            })).collect::<Vec<_>>(),
        }))
        .map_err(|e| failed(format!("encode the manifest: {e}")))?;
        let manifest_digest = digest_of(&manifest);
        let url = format!(
            "{}/v2/{repo}/manifests/{manifest_digest}",
            self.target.base_url
        );
        let resp = self
            .send(&repo, &format!("PUT {url}"), || {
                Ok(self
                    .http
                    .put(&url)
                    .header("content-type", "application/vnd.oci.image.manifest.v1+json")
                    .body(manifest.clone()))
            })
            .await?;
        if !resp.status().is_success() {
            let status = resp.status();
            let body = resp.text().await.unwrap_or_default();
            return Err(failed(format!("PUT {url}: {status}: {}", body.trim())));
        }
        Ok(format!(
            "{}/{}@{manifest_digest}",
            self.target.pull_name,
            repo_tail(&repo, &self.target.prefix)
        ))
    }

    async fn has_blob(&self, repo: &str, digest: &str) -> Result<bool, EnvError> {
        let url = format!("{}/v2/{repo}/blobs/{digest}", self.target.base_url);
        let resp = self
            .send(repo, &format!("HEAD {url}"), || Ok(self.http.head(&url)))
            .await?;
        Ok(resp.status().is_success())
    }

    /// A monolithic upload: `POST uploads/`, then `PUT` of the whole blob at the location.
    async fn upload(&self, repo: &str, digest: &str, blob: Blob) -> Result<(), EnvError> {
        let start_url = format!("{}/v2/{repo}/blobs/uploads/", self.target.base_url);
        let start = self
            .send(repo, &format!("POST {start_url}"), || {
                Ok(self.http.post(&start_url))
            })
            .await?;
        if start.status().as_u16() != 202 {
            let status = start.status();
            let body = start.text().await.unwrap_or_default();
            return Err(failed(format!(
                "POST {start_url}: {status}: {}",
                body.trim()
            )));
        }
        let location = start
            .headers()
            .get("location")
            .and_then(|l| l.to_str().ok())
            .ok_or_else(|| failed(format!("POST {start_url}: no Location")))?;
        let url = if location.starts_with("http") {
            location.to_string()
        } else {
            format!("{}{location}", self.target.base_url)
        };
        let sep = if url.contains('?') { '&' } else { '?' };
        let put_url = format!("{url}{sep}digest={digest}");
        let resp = self
            .send(repo, &format!("upload of {digest}"), || {
                Ok(self
                    .http
                    .put(&put_url)
                    .header("content-type", "application/octet-stream")
                    .body(blob.body()?))
            })
            .await?;
        if resp.status().as_u16() != 201 {
            let status = resp.status();
            let body = resp.text().await.unwrap_or_default();
            return Err(failed(format!(
                "upload of {digest}: {status}: {}",
                body.trim()
            )));
        }
        Ok(())
    }

    /// Send the request `make` builds with the repository's authorization; a 401 is answered
    /// once (its challenge: `Basic` with the credentials, `Bearer` with a token from the realm
    /// for `pull,push` on the repository) and the request made again.
    async fn send(
        &self,
        repo: &str,
        what: &str,
        make: impl Fn() -> Result<reqwest::RequestBuilder, EnvError>,
    ) -> Result<reqwest::Response, EnvError> {
        let mut answered = false;
        loop {
            let mut req = make()?;
            if let Some(auth) = self.authorization.lock().await.get(repo) {
                req = req.header(reqwest::header::AUTHORIZATION, auth);
            }
            let resp = req
                .send()
                .await
                .map_err(|e| failed(format!("{what}: {e}")))?;
            if resp.status() != reqwest::StatusCode::UNAUTHORIZED {
                return Ok(resp);
            }
            if answered {
                return Err(failed(format!(
                    "{what}: 401 Unauthorized with the credentials given \
                     (kubernetes.registry_username, registry_password_file)"
                )));
            }
            let challenge = resp
                .headers()
                .get(reqwest::header::WWW_AUTHENTICATE)
                .and_then(|c| c.to_str().ok())
                .unwrap_or_default()
                .to_string();
            let auth = self.answer(repo, what, &challenge).await?;
            self.authorization
                .lock()
                .await
                .insert(repo.to_string(), auth);
            answered = true;
        }
    }

    /// The `Authorization` value a `WWW-Authenticate` challenge asks for.
    async fn answer(&self, repo: &str, what: &str, challenge: &str) -> Result<String, EnvError> {
        use base64::Engine as _;
        let basic = self.target.credentials.as_ref().map(|c| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD
                    .encode(format!("{}:{}", c.user, c.password))
            )
        });
        let (scheme, rest) = challenge.split_once(' ').unwrap_or((challenge, ""));
        let no_credentials = || {
            failed(format!(
                "{what}: the registry wants credentials ({challenge}): set \
                 kubernetes.registry_username and registry_password_file"
            ))
        };
        match scheme.to_ascii_lowercase().as_str() {
            "basic" => basic.ok_or_else(no_credentials),
            "bearer" => {
                let params = challenge_params(rest);
                let realm = params
                    .get("realm")
                    .ok_or_else(|| failed(format!("{what}: a bearer challenge without a realm")))?;
                let mut url = reqwest::Url::parse(realm)
                    .map_err(|e| failed(format!("{what}: bad token realm {realm:?}: {e}")))?;
                url.query_pairs_mut()
                    .extend_pairs(params.get("service").map(|s| ("service", s.as_str())))
                    .append_pair("scope", &format!("repository:{repo}:pull,push"));
                let mut req = self.http.get(url.clone());
                // Credentials go to the realm only over https or on the registry's own host.
                let registry_host = reqwest::Url::parse(&self.target.base_url)
                    .ok()
                    .and_then(|u| u.host_str().map(str::to_string));
                if let Some(basic) = &basic
                    && (url.scheme() == "https"
                        || url.host_str().map(str::to_string) == registry_host)
                {
                    req = req.header(reqwest::header::AUTHORIZATION, basic);
                }
                let resp = req
                    .send()
                    .await
                    .map_err(|e| failed(format!("{what}: token from {realm}: {e}")))?;
                if !resp.status().is_success() {
                    let hint = if basic.is_none() {
                        " (no credentials were given: set kubernetes.registry_username and \
                         registry_password_file)"
                    } else {
                        ""
                    };
                    return Err(failed(format!(
                        "{what}: the token endpoint {realm} answered {}{hint}",
                        resp.status()
                    )));
                }
                let body: serde_json::Value = resp
                    .json()
                    .await
                    .map_err(|e| failed(format!("{what}: token from {realm}: {e}")))?;
                let token = body["token"]
                    .as_str()
                    .or(body["access_token"].as_str())
                    .filter(|t| !t.is_empty())
                    .ok_or_else(|| failed(format!("{what}: {realm} gave no token")))?;
                Ok(format!("Bearer {token}"))
            }
            _ => Err(no_credentials()),
        }
    }

    /// The layer as a gzip blob in the scratch folder, made once per process.
    async fn pack(&self, layer: &Path) -> Result<PackedLayer, EnvError> {
        if let Some(known) = self.lock().get(layer) {
            return Ok(known.clone());
        }
        let (layer_owned, scratch) = (layer.to_path_buf(), self.scratch.clone());
        let packed = tokio::task::spawn_blocking(move || pack_layer(&layer_owned, &scratch))
            .await
            .map_err(|e| failed(format!("packing {}: {e}", layer.display())))??;
        self.lock().insert(layer.to_path_buf(), packed.clone());
        Ok(packed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, PackedLayer>> {
        // A panic while holding it left a map of finished entries: still good.
        self.packed.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `realm="...",service="..."` -> {realm, service}.
fn challenge_params(text: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut rest = text.trim();
    while let Some((key, after)) = rest.split_once('=') {
        let key = key
            .trim()
            .trim_start_matches(',')
            .trim()
            .to_ascii_lowercase();
        let (value, next) = match after.strip_prefix('"') {
            Some(quoted) => match quoted.find('"') {
                Some(end) => (&quoted[..end], &quoted[end + 1..]),
                None => (quoted, ""),
            },
            None => after.split_once(',').unwrap_or((after, "")),
        };
        out.insert(key, value.to_string());
        rest = next.trim_start_matches(',').trim();
    }
    out
}

/// The repository after the prefix, for the pull name (which carries its own prefix).
fn repo_tail<'r>(repo: &'r str, prefix: &str) -> &'r str {
    match prefix {
        "" => repo,
        prefix => repo
            .strip_prefix(prefix)
            .map_or(repo, |rest| rest.trim_start_matches('/')),
    }
}

/// Tar and gzip one unpacked layer into `scratch`, hashing both forms on the way.
fn pack_layer(layer: &Path, scratch: &Path) -> Result<PackedLayer, EnvError> {
    let io = |what: String| {
        move |e: std::io::Error| EnvError::Io {
            context: what,
            source: e,
        }
    };
    std::fs::create_dir_all(scratch).map_err(io(format!("create {}", scratch.display())))?;
    let file = scratch.join(format!("layer-{}.tar.gz", uuid::Uuid::new_v4().simple()));
    let out = std::fs::File::create(&file).map_err(io(format!("create {}", file.display())))?;
    let hashing = HashingWriter {
        inner: std::io::BufWriter::new(out),
        hash: Sha256::new(),
        size: 0,
    };
    let mut gz = flate2::write::GzEncoder::new(hashing, flate2::Compression::fast());
    let diff_id = crate::image::layer_tar(layer, &mut gz)
        .map_err(|e| failed(format!("packing {}: {e}", layer.display())))?;
    let mut hashing = gz
        .finish()
        .map_err(io(format!("write {}", file.display())))?;
    hashing
        .inner
        .flush()
        .map_err(io(format!("write {}", file.display())))?;
    Ok(PackedLayer {
        digest: format!("sha256:{}", hex::encode(hashing.hash.finalize())),
        diff_id,
        size: hashing.size,
        file,
    })
}

struct HashingWriter<W> {
    inner: W,
    hash: Sha256,
    size: u64,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The OCI config of a prepared image: what a container of it gets (env, workdir, user,
/// entrypoint, cmd) and its layers' diff ids.
fn config_json(image: &PreparedImage, diff_ids: &[&str]) -> serde_json::Value {
    let env: Vec<String> = image.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": env,
            "WorkingDir": image.workdir,
            "User": image.user.clone().unwrap_or_default(),
            "Entrypoint": image.entrypoint,
            "Cmd": image.cmd,
        },
        "rootfs": { "type": "layers", "diff_ids": diff_ids },
    })
}

#[cfg(test)]
mod tests;
