//! `--base host`: the older stand-in for an image, the host's root with the Dockerfile's
//! steps replayed over it into one layer, cached under `cache_dir/<key>/` (key = sha256 over
//! a builder version and every file of `environment/`), with `image.json` and the `done`
//! marker written last. Its results say so, and note where the host differs visibly from
//! the image the Dockerfile names.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{digest_tree, io};
use crate::cgroup::Limits;
use crate::dockerfile::{self, Instruction, Step};
use crate::image::ImageConfig;
use crate::protocol::Network;
use crate::sandbox::{Launch, SandboxBackend, SandboxHandle};
use crate::steps::{Builder, StageState};
use crate::{EnvError, EnvironmentSpec, GroupNetwork, ImageRoot, PreparedImage};

/// What results say of a host-root stand-in.
pub(crate) const HOST_SOURCE: &str = "host root (--base host)";
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

/// `--base host`: the Dockerfile's steps replayed over the host root into one cached layer.
pub(super) async fn prepare_on_host(
    backend: &SandboxBackend,
    spec: &EnvironmentSpec,
) -> Result<PreparedImage, EnvError> {
    let dockerfile = spec.dockerfile();
    if !dockerfile.is_file() {
        return Ok(PreparedImage {
            root: ImageRoot::Host { layer: None },
            workdir: "/".into(),
            env: spec.env.clone(),
            user: None,
            entrypoint: Vec::new(),
            cmd: Vec::new(),
            from: String::new(),
            source: HOST_SOURCE.into(),
            digest: None,
            notes: vec!["no environment/Dockerfile: the host root is the image".into()],
            origin: Default::default(),
            cache_hit: false,
            build_duration: Duration::ZERO,
        });
    }
    let text = tokio::fs::read_to_string(&dockerfile)
        .await
        .map_err(io(format!("read {}", dockerfile.display())))?;
    let steps = dockerfile::parse(&text)?;
    let context = spec.context().to_path_buf();
    // A Dockerfile a compose file names may lie outside the context: it is hashed too.
    let named = spec.build.as_ref().map(|_| dockerfile.clone());
    let key = tokio::task::spawn_blocking(move || cache_key(&context, named.as_deref()))
        .await
        .map_err(|e| EnvError::Lost(format!("hashing task: {e}")))?
        .map_err(io(format!("hash {}", spec.context().display())))?;

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
        None => (
            build_on_host(backend, spec, &steps, &key, &final_dir).await?,
            false,
        ),
    };
    let mut env = meta.env.clone();
    env.extend(spec.env.iter().cloned());
    Ok(PreparedImage {
        root: ImageRoot::Host {
            layer: Some(final_dir.join("upper")),
        },
        workdir: meta.workdir,
        env,
        user: meta.user,
        entrypoint: Vec::new(),
        cmd: Vec::new(),
        from: meta.from,
        source: HOST_SOURCE.into(),
        digest: None,
        notes: meta.notes,
        origin: Default::default(),
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

/// sha256 over the builder version and every entry of the build context, in path order (and
/// the Dockerfile, when it is named apart from the context).
pub(crate) fn cache_key(context: &Path, dockerfile: Option<&Path>) -> std::io::Result<String> {
    let mut inputs = vec![context.to_path_buf()];
    inputs.extend(dockerfile.map(Path::to_path_buf));
    digest_tree(BUILDER_VERSION, context, &inputs)
}

async fn build_on_host(
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
            root: ImageRoot::Host { layer: None },
            workdir: "/".into(),
            env: Vec::new(),
            user: None,
            network: Network::Host,
            allowed: Vec::new(),
            limits: Limits::default(),
            binds: Vec::new(),
            verifier_logs: None,
            disk_mb: None,
            remove_dir: false,
            group: GroupNetwork::default(),
        })
        .await?;
    let deadline = started + spec.build_timeout;
    let mut builder = Builder::new(
        spec.context(),
        deadline,
        spec.build_timeout,
        StageState::from_image(&ImageConfig::default()),
        &spec.build_args,
    );
    let (from, outcome) = replay(&mut builder, &handle, steps).await;
    let state = builder.state;
    let mut handle = handle;
    let shutdown = handle.shutdown().await;
    let remove_tmp = |tmp: PathBuf| async move {
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(tmp)).await;
    };
    if let Err(e) = outcome.and(shutdown.map(|_| ())) {
        remove_tmp(tmp).await;
        return Err(e);
    }
    let mut notes = from_notes(&from);
    if !state.ignored.is_empty() {
        notes.push(format!(
            "Dockerfile instructions ignored: {}",
            state.ignored.join(", ")
        ));
    }
    let meta = ImageMeta {
        schema: IMAGE_SCHEMA.into(),
        from,
        workdir: state.workdir.clone(),
        env: state.final_env(),
        user: state.user.clone(),
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

/// Replay the Dockerfile's steps in the build sandbox, stopping at the first failure; the
/// FROM image as named, and how the steps went.
async fn replay(
    builder: &mut Builder<'_>,
    handle: &SandboxHandle,
    steps: &[Step],
) -> (String, Result<(), EnvError>) {
    let mut from = String::new();
    for step in steps {
        if let Instruction::From { image, .. } = &step.instruction {
            if !from.is_empty() {
                let second = EnvError::Unsupported(format!(
                    "Dockerfile line {}: a second FROM (multi-stage builds need an image base, \
                     not --base host)",
                    step.line
                ));
                return (from, Err(second));
            }
            from = builder.expand(image);
            if is_python_image(&from) {
                // Official python images install packages system-wide with pip; a Debian
                // host root marks its Python as externally managed (PEP 668), so the
                // stand-in would refuse the `RUN pip install` every such task starts with.
                builder
                    .state
                    .env
                    .push(("PIP_BREAK_SYSTEM_PACKAGES".into(), "1".into()));
                builder
                    .state
                    .env
                    .push(("PIP_ROOT_USER_ACTION".into(), "ignore".into()));
            }
            continue;
        }
        if builder.apply(step) {
            continue;
        }
        if let Err(e) = builder.execute(handle, step, None).await {
            return (from, Err(e));
        }
    }
    (from, Ok(()))
}

/// Keep only the layer and its metadata, then move it into place (`done` last).
fn seal(tmp: &Path, final_dir: &Path, meta: &ImageMeta) -> Result<(), EnvError> {
    for name in ["work", "root", "inbox"] {
        let _ = std::fs::remove_dir_all(tmp.join(name));
    }
    // The inbox's mount point, created in the layer while the build ran.
    let inbox = tmp
        .join("upper")
        .join(crate::protocol::INBOX.trim_start_matches('/'));
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

/// `python:3.11-slim`, `docker.io/library/python:3.12`, ...
fn is_python_image(from: &str) -> bool {
    let name = from.split(':').next().unwrap_or("");
    name == "python" || name.ends_with("/python")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_changes_with_content_and_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("Dockerfile"), "FROM x\n").unwrap();
        let a = cache_key(dir.path(), None).unwrap();
        assert_eq!(a, cache_key(dir.path(), None).unwrap());
        std::fs::write(dir.path().join("data.txt"), "1").unwrap();
        let b = cache_key(dir.path(), None).unwrap();
        assert_ne!(a, b);
        std::fs::set_permissions(
            dir.path().join("data.txt"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        assert_ne!(b, cache_key(dir.path(), None).unwrap());
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
