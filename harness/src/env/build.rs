//! Image preparation: run a task's Dockerfile in a build sandbox (with network, as
//! `docker build` has) and keep its writable layer as the task's image.
//!
//! Cache: `cache_dir/<key>/` where key = sha256 over a builder version and every file of the
//! `environment/` folder (relative path, mode, bytes, each length-prefixed; the Dockerfile is
//! one of them). A build runs under a temporary name and is renamed into place only after it
//! succeeded, with `image.json` and the `done` marker written last, so a half-built layer is
//! never reused. The host root stands in for the FROM image; differences worth knowing (another
//! Python version ...) go into the image's notes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::cgroup::Limits;
use super::dockerfile::{self, Step};
use super::sandbox::{Launch, SandboxBackend};
use super::steps::Builder;
use super::{EnvError, EnvironmentSpec, PreparedImage};

/// Changes whenever a build's meaning changes, so old layers stop matching.
const BUILDER_VERSION: &str = "geode.image.v1";
const IMAGE_SCHEMA: &str = "geode.image.v1";

/// `image.json` beside a cached layer.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ImageMeta {
    schema: String,
    from: String,
    workdir: String,
    env: Vec<(String, String)>,
    user: Option<String>,
    notes: Vec<String>,
    build_duration_ms: u64,
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> EnvError {
    let context = context.into();
    move |source| EnvError::Io { context, source }
}

pub(crate) async fn prepare(
    backend: &SandboxBackend,
    spec: &EnvironmentSpec,
) -> Result<PreparedImage, EnvError> {
    let dockerfile = spec.environment_dir.join("Dockerfile");
    if !dockerfile.is_file() {
        return Ok(PreparedImage {
            layer_dir: None,
            workdir: "/".into(),
            env: spec.env.clone(),
            user: None,
            from: String::new(),
            notes: vec!["no environment/Dockerfile: the host root is the image".into()],
            cache_hit: false,
            build_duration: Duration::ZERO,
        });
    }
    let text = tokio::fs::read_to_string(&dockerfile)
        .await
        .map_err(io(format!("read {}", dockerfile.display())))?;
    let steps = dockerfile::parse(&text)?;
    let env_dir = spec.environment_dir.clone();
    let key = tokio::task::spawn_blocking(move || cache_key(&env_dir))
        .await
        .map_err(|e| EnvError::Lost(format!("hashing task: {e}")))?
        .map_err(io(format!("hash {}", spec.environment_dir.display())))?;

    let lock = {
        let mut locks = match backend.build_locks.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        Arc::clone(locks.entry(key.clone()).or_default())
    };
    let _guard = lock.lock().await;
    let final_dir = backend.config().cache_dir.join(&key);
    let (meta, cache_hit) = match load_meta(&final_dir) {
        Some(meta) => (meta, true),
        None => (build(backend, spec, &steps, &key, &final_dir).await?, false),
    };
    let mut env = meta.env.clone();
    env.extend(spec.env.iter().cloned());
    Ok(PreparedImage {
        layer_dir: Some(final_dir.join("upper")),
        workdir: meta.workdir,
        env,
        user: meta.user,
        from: meta.from,
        notes: meta.notes,
        cache_hit,
        build_duration: Duration::from_millis(meta.build_duration_ms),
    })
}

fn load_meta(dir: &Path) -> Option<ImageMeta> {
    if !dir.join("done").is_file() {
        return None;
    }
    let text = std::fs::read_to_string(dir.join("image.json")).ok()?;
    serde_json::from_str::<ImageMeta>(&text)
        .ok()
        .filter(|m| m.schema == IMAGE_SCHEMA)
}

/// sha256 over the builder version and every entry of the build context, in path order.
pub(crate) fn cache_key(env_dir: &Path) -> std::io::Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut h = Sha256::new();
    let field = |h: &mut Sha256, bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(&mut h, BUILDER_VERSION.as_bytes());
    for entry in walkdir::WalkDir::new(env_dir).sort_by_file_name() {
        let entry = entry.map_err(std::io::Error::other)?;
        let rel = entry.path().strip_prefix(env_dir).unwrap_or(entry.path());
        let meta = entry.path().symlink_metadata()?;
        field(&mut h, rel.to_string_lossy().as_bytes());
        h.update(meta.permissions().mode().to_le_bytes());
        if meta.file_type().is_symlink() {
            field(
                &mut h,
                std::fs::read_link(entry.path())?
                    .to_string_lossy()
                    .as_bytes(),
            );
        } else if meta.is_file() {
            field(&mut h, &std::fs::read(entry.path())?);
        }
    }
    Ok(hex::encode(h.finalize()))
}

async fn build(
    backend: &SandboxBackend,
    spec: &EnvironmentSpec,
    steps: &[Step],
    key: &str,
    final_dir: &Path,
) -> Result<ImageMeta, EnvError> {
    let started = Instant::now();
    let tmp = backend
        .config()
        .cache_dir
        .join(format!(".build-{key}-{}", uuid::Uuid::new_v4().simple()));
    let handle = backend
        .launch(Launch {
            dir: tmp.clone(),
            layer: None,
            workdir: "/".into(),
            env: Vec::new(),
            user: None,
            network: true,
            limits: Limits {
                memory_bytes: None,
                pids_max: None,
                cpus: None,
            },
            binds: Vec::new(),
            remove_dir: false,
        })
        .await?;
    let deadline = started + spec.build_timeout;
    let mut builder = Builder::new(&handle, &spec.environment_dir, deadline, spec.build_timeout);
    let outcome = builder.run(steps).await;
    let built = builder.finish();
    let mut handle = handle;
    let shutdown = handle.shutdown().await;
    let remove_tmp = |tmp: PathBuf| async move {
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(tmp)).await;
    };
    if let Err(e) = outcome.and(shutdown.map(|_| ())) {
        remove_tmp(tmp).await;
        return Err(e);
    }
    let mut notes = from_notes(&built.from);
    if !built.ignored.is_empty() {
        notes.push(format!(
            "Dockerfile instructions ignored: {}",
            built.ignored.join(", ")
        ));
    }
    let meta = ImageMeta {
        schema: IMAGE_SCHEMA.into(),
        from: built.from,
        workdir: built.workdir,
        env: built.env,
        user: built.user,
        notes,
        build_duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    };
    let (tmp2, final_dir, meta2) = (tmp.clone(), final_dir.to_path_buf(), meta.clone());
    let finished = tokio::task::spawn_blocking(move || seal(&tmp2, &final_dir, &meta2))
        .await
        .map_err(|e| EnvError::Lost(format!("sealing task: {e}")))?;
    if let Err(e) = finished {
        remove_tmp(tmp).await;
        return Err(e);
    }
    Ok(meta)
}

/// Keep only the layer and its metadata, then move it into place (`done` last).
fn seal(tmp: &Path, final_dir: &Path, meta: &ImageMeta) -> Result<(), EnvError> {
    for name in ["work", "root", "inbox"] {
        let _ = std::fs::remove_dir_all(tmp.join(name));
    }
    // The inbox's mount point, created in the layer while the build ran.
    let inbox = tmp
        .join("upper")
        .join(super::protocol::INBOX.trim_start_matches('/'));
    let _ = std::fs::remove_dir(inbox);
    let json = serde_json::to_string_pretty(meta).map_err(|e| EnvError::Io {
        context: "encode image.json".into(),
        source: std::io::Error::other(e),
    })?;
    std::fs::write(tmp.join("image.json"), json).map_err(io("write image.json"))?;
    std::fs::write(tmp.join("done"), b"").map_err(io("write the done marker"))?;
    if let Err(e) = std::fs::rename(tmp, final_dir) {
        // Another process finished the same build first: theirs is as good as ours.
        if final_dir.join("done").is_file() {
            let _ = std::fs::remove_dir_all(tmp);
            return Ok(());
        }
        return Err(EnvError::Io {
            context: format!("move the layer to {}", final_dir.display()),
            source: e,
        });
    }
    Ok(())
}

/// What the host root offers in place of the FROM image, where they differ visibly.
pub(crate) fn from_notes(from: &str) -> Vec<String> {
    let image = from.split_whitespace().next().unwrap_or_default();
    let name_tag = image.rsplit('/').next().unwrap_or(image);
    let (name, tag) = name_tag.split_once(':').unwrap_or((name_tag, "latest"));
    let wanted: String = tag
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let host_version = |program: &str, arg: &str| -> Option<String> {
        let out = std::process::Command::new(program).arg(arg).output().ok()?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .find(|w| w.contains('.'))
            .map(str::to_string)
    };
    let tool = match name {
        "python" | "pypy" => Some(("python3", "--version", "Python")),
        "node" => Some(("node", "--version", "Node.js")),
        "golang" => Some(("go", "version", "Go")),
        "rust" => Some(("rustc", "--version", "Rust")),
        "openjdk" | "eclipse-temurin" => Some(("java", "-version", "Java")),
        _ => None,
    };
    let mut notes = Vec::new();
    if let Some((program, arg, label)) = tool {
        match host_version(program, arg) {
            None => notes.push(format!(
                "FROM {image}: the host root has no {label} ({program})"
            )),
            Some(have)
                if !(wanted.is_empty()
                    || have == wanted
                    || have.starts_with(&format!("{wanted}."))) =>
            {
                notes.push(format!(
                    "FROM {image} wants {label} {wanted}; the host root has {have}"
                ))
            }
            Some(_) => {}
        }
    }
    if matches!(name, "ubuntu" | "debian") {
        let os = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
        let field = |k: &str| {
            os.lines()
                .find_map(|l| l.strip_prefix(&format!("{k}=")))
                .map(|v| v.trim_matches('"').to_string())
                .unwrap_or_default()
        };
        let (id, version, codename) = (field("ID"), field("VERSION_ID"), field("VERSION_CODENAME"));
        let same = id == name
            && (tag == "latest"
                || tag == version
                || tag == codename
                || tag.starts_with(&format!("{codename}-")));
        if !same {
            notes.push(format!(
                "FROM {image}; the host root is {id} {version} ({codename})"
            ));
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_changes_with_content_and_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("Dockerfile"), "FROM x\n").unwrap();
        let a = cache_key(dir.path()).unwrap();
        assert_eq!(a, cache_key(dir.path()).unwrap());
        std::fs::write(dir.path().join("data.txt"), "1").unwrap();
        let b = cache_key(dir.path()).unwrap();
        assert_ne!(a, b);
        std::fs::set_permissions(
            dir.path().join("data.txt"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        assert_ne!(b, cache_key(dir.path()).unwrap());
    }

    #[test]
    fn python_mismatch_is_noted() {
        let notes = from_notes("python:2.1-slim");
        assert!(
            notes.iter().any(|n| n.contains("wants Python 2.1")),
            "{notes:?}"
        );
        assert!(from_notes("alpine:3").is_empty());
    }
}
