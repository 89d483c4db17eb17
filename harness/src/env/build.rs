//! Image preparation: a task's base image (from the image store, a registry, or bootstrapped:
//! [`super::base`]) with its Dockerfile's steps run over it, one cached layer per step.
//!
//! Each RUN and COPY/ADD runs in a build sandbox (with network, as `docker build` has) whose
//! lower layers are the image so far and whose upper becomes the step's layer. A step's cache
//! key chains its parent's key, the instruction as written, and the content of what it copies
//! (the build args of the task enter at the stage's start), so a changed step rebuilds from
//! there and every step before it is reused: across trials, runs and tasks that share lines.
//! Metadata instructions (ENV, ARG, WORKDIR, USER, SHELL) change the key but make no layer.
//! Multi-stage builds build only the stages the last one needs; `COPY --from` exports its
//! sources from the other stage's sandbox into a host folder the step then copies from.
//!
//! `--base host` keeps the older stand-in: the host root under one layer that all the steps
//! write into, cached under `cache_dir/<key>/` (key = sha256 over a builder version and every
//! file of `environment/`), with `image.json` and the `done` marker written last.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::base::Bases;
use super::cgroup::Limits;
use super::dockerfile::{self, Instruction, Step};
use super::image::{ImageConfig, ImageStore, StoredImage};
use super::protocol::{Bind, Network};
use super::sandbox::{BaseMode, Launch, SandboxBackend};
use super::steps::{Builder, StageState, step_name};
use super::{EnvError, EnvironmentSpec, GroupNetwork, ImageRoot, PreparedImage};

/// What results say of a host-root stand-in.
pub(crate) const HOST_SOURCE: &str = "host root (--base host)";
/// Changes whenever the meaning of a step's layer changes, so old layers stop matching.
const STEP_VERSION: &str = "geode.build.step.v1";

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
    match backend.config().base {
        BaseMode::Host => prepare_on_host(backend, spec).await,
        BaseMode::Image => prepare_image(backend, spec).await,
    }
}

/// One `FROM` and the instructions up to the next.
#[derive(Debug)]
pub(crate) struct Stage {
    name: Option<String>,
    from: String,
    steps: Vec<Step>,
}

/// A finished stage: the image it leaves.
#[derive(Debug, Clone)]
pub(crate) struct Built {
    pub layers: Vec<PathBuf>,
    /// The chained key of its last step: what a `COPY --from` of it depends on.
    pub key: String,
    pub state: StageState,
    /// The base image at the bottom of the chain, as named, and where it came from.
    pub from: String,
    pub source: String,
    pub digest: Option<String>,
    pub notes: Vec<String>,
    /// Every step's layer was in the store already.
    pub cache_hit: bool,
}

impl Built {
    /// A stage that starts from a stored image.
    pub(crate) fn from_image(named: &str, image: &StoredImage, notes: Vec<String>) -> Self {
        let c = &image.config;
        Built {
            layers: image.layers.clone(),
            key: chain(STEP_VERSION, &[image.digest.as_bytes()]),
            state: StageState::from_image(c),
            from: named.to_string(),
            source: super::base::describe(&image.source),
            digest: Some(image.digest.clone()),
            notes,
            cache_hit: true,
        }
    }
}

/// sha256 over a parent key and length-prefixed parts.
fn chain(parent: &str, parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    h.update((parent.len() as u64).to_le_bytes());
    h.update(parent.as_bytes());
    for part in parts {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    hex::encode(h.finalize())
}

async fn prepare_image(
    backend: &SandboxBackend,
    spec: &EnvironmentSpec,
) -> Result<PreparedImage, EnvError> {
    let started = Instant::now();
    let bases = Bases::open(backend)?;
    if let Some(image) = &spec.docker_image {
        let base = bases.resolve(image).await?;
        return Ok(prepared(base, spec, started));
    }
    let dockerfile = spec.environment_dir.join("Dockerfile");
    if !dockerfile.is_file() {
        return Err(EnvError::Unsupported(format!(
            "{}: no environment/Dockerfile and no [environment] docker_image: nothing names \
             the image this task runs in",
            spec.task_name
        )));
    }
    let text = tokio::fs::read_to_string(&dockerfile)
        .await
        .map_err(io(format!("read {}", dockerfile.display())))?;
    let steps = dockerfile::parse(&text)?;
    let (global, stages) = split_stages(steps, &spec.build_args)?;
    let needed = needed_stages(&stages, &global)?;
    let deadline = started + spec.build_timeout;
    let mut built: Vec<Option<Built>> = Vec::with_capacity(stages.len());
    for (i, stage) in stages.iter().enumerate() {
        if !needed[i] {
            built.push(None);
            continue;
        }
        let from = dockerfile::expand(&stage.from, &|n| lookup(&global, n));
        let base = match stage_index(&stages[..i], &from) {
            Some(j) => match &built[j] {
                Some(b) => {
                    let mut b = b.clone();
                    b.state.args.clear();
                    b.state.ignored.clear();
                    b.state.cmd_set = false;
                    b
                }
                None => return Err(internal("a needed stage was not built")),
            },
            None if from == "scratch" => Built {
                layers: Vec::new(),
                key: chain(STEP_VERSION, &[b"scratch"]),
                state: StageState::from_image(&ImageConfig::default()),
                from: from.clone(),
                source: "scratch (empty)".into(),
                digest: None,
                notes: Vec::new(),
                cache_hit: true,
            },
            None => bases.resolve(&from).await?,
        };
        let stage_built = build_steps(
            backend,
            &bases,
            spec,
            base,
            &stage.steps,
            &stages[..i],
            &built,
            deadline,
        )
        .await?;
        built.push(Some(stage_built));
    }
    match built.pop().flatten() {
        Some(last) => Ok(prepared(last, spec, started)),
        None => Err(internal("the last stage was not built")),
    }
}

fn internal(what: &str) -> EnvError {
    EnvError::Lost(format!("image build: {what}"))
}

fn lookup(args: &[(String, String)], name: &str) -> Option<String> {
    args.iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}

fn prepared(built: Built, spec: &EnvironmentSpec, started: Instant) -> PreparedImage {
    let mut notes = built.notes;
    if !built.state.ignored.is_empty() {
        notes.push(format!(
            "Dockerfile instructions ignored: {}",
            built.state.ignored.join(", ")
        ));
    }
    let mut env = built.state.final_env();
    env.extend(spec.env.iter().cloned());
    PreparedImage {
        root: ImageRoot::Layers(built.layers),
        workdir: built.state.workdir,
        env,
        entrypoint: built.state.entrypoint,
        cmd: built.state.cmd,
        user: built.state.user,
        from: built.from,
        source: built.source,
        digest: built.digest,
        notes,
        cache_hit: built.cache_hit,
        build_duration: started.elapsed(),
    }
}

/// Variable names and values (ARGs, build args).
type Args = Vec<(String, String)>;

/// The ARGs before the first FROM (usable in FROM lines, task values winning) and the stages.
fn split_stages(
    steps: Vec<Step>,
    build_args: &[(String, String)],
) -> Result<(Args, Vec<Stage>), EnvError> {
    let mut global = Vec::new();
    let mut stages: Vec<Stage> = Vec::new();
    for step in steps {
        match &step.instruction {
            Instruction::From { image, alias } => stages.push(Stage {
                name: alias.clone(),
                from: image.clone(),
                steps: Vec::new(),
            }),
            _ => match stages.last_mut() {
                Some(stage) => stage.steps.push(step),
                None => match &step.instruction {
                    Instruction::Arg { name, default } => {
                        let value = lookup(build_args, name)
                            .or_else(|| default.clone())
                            .unwrap_or_default();
                        global.push((name.clone(), value));
                    }
                    _ => {
                        return Err(EnvError::SetupFailed {
                            step: step_name(&step),
                            message: "only ARG may come before the first FROM".into(),
                        });
                    }
                },
            },
        }
    }
    if stages.is_empty() {
        return Err(EnvError::SetupFailed {
            step: "Dockerfile".into(),
            message: "no FROM instruction".into(),
        });
    }
    Ok((global, stages))
}

/// A stage by name (case-insensitive, as docker) or index, among the ones before.
fn stage_index(before: &[Stage], name: &str) -> Option<usize> {
    before
        .iter()
        .rposition(|s| {
            s.name
                .as_deref()
                .is_some_and(|n| n.eq_ignore_ascii_case(name))
        })
        .or_else(|| name.parse::<usize>().ok().filter(|&i| i < before.len()))
}

/// Which stages the last one needs (through FROM and COPY --from), as BuildKit builds them.
fn needed_stages(stages: &[Stage], global: &[(String, String)]) -> Result<Vec<bool>, EnvError> {
    let mut needed = vec![false; stages.len()];
    let mut todo = vec![stages.len() - 1];
    while let Some(i) = todo.pop() {
        if needed[i] {
            continue;
        }
        needed[i] = true;
        let from = dockerfile::expand(&stages[i].from, &|n| lookup(global, n));
        let mut refs = vec![from];
        for step in &stages[i].steps {
            if let Instruction::Copy(copy) = &step.instruction
                && let Some(src) = &copy.from
            {
                refs.push(src.clone());
            }
        }
        for r in refs {
            if let Some(j) = stage_index(&stages[..i], &r) {
                todo.push(j);
            }
        }
    }
    Ok(needed)
}

/// Run a stage's steps over `base`, reusing every step layer the store already has.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn build_steps(
    backend: &SandboxBackend,
    bases: &Bases<'_>,
    spec: &EnvironmentSpec,
    base: Built,
    steps: &[Step],
    earlier: &[Stage],
    built: &[Option<Built>],
    deadline: Instant,
) -> Result<Built, EnvError> {
    let store = bases.store();
    let args_key: Vec<u8> = spec
        .build_args
        .iter()
        .flat_map(|(k, v)| [k.as_bytes(), b"=", v.as_bytes(), b"\n"].concat())
        .collect();
    let mut key = chain(&base.key, &[&args_key]);
    let mut layers = base.layers.clone();
    let mut cache_hit = true;
    let mut builder = Builder::new(
        &spec.environment_dir,
        deadline,
        spec.build_timeout,
        base.state.clone(),
        &spec.build_args,
    );
    for step in steps {
        builder.check_deadline(step)?;
        key = chain(&key, &[step.text.as_bytes()]);
        if builder.apply(step) {
            continue;
        }
        // What the step copies from: the context's files, or another stage or image.
        let mut from_layers = None;
        if let Instruction::Copy(copy) = &step.instruction {
            match &copy.from {
                Some(src) => {
                    let src = builder.expand(src);
                    let other = match stage_index(earlier, &src) {
                        Some(j) => built[j]
                            .clone()
                            .ok_or_else(|| internal("a COPY --from stage was not built"))?,
                        None => Box::pin(bases.resolve(&src)).await?,
                    };
                    key = chain(&key, &[other.key.as_bytes()]);
                    from_layers = Some(other.layers);
                }
                None => {
                    let inputs = builder.copy_inputs(step)?;
                    let context = spec.environment_dir.clone();
                    let digest =
                        tokio::task::spawn_blocking(move || content_digest(&context, &inputs))
                            .await
                            .map_err(|e| internal(&format!("hashing task: {e}")))?
                            .map_err(io(format!(
                                "hash the build context of {}",
                                step_name(step)
                            )))?;
                    key = chain(&key, &[digest.as_bytes()]);
                }
            }
        }
        if let Some(layer) = store.layer(&key) {
            log(spec, &format!("{}: cached\n", step_name(step)));
            layers.push(layer);
            continue;
        }
        cache_hit = false;
        log(spec, &format!("{}\n", step_name(step)));
        let layer = run_step(
            spec,
            backend,
            store,
            &layers,
            &mut builder,
            step,
            from_layers.as_deref(),
            &key,
        )
        .await?;
        layers.push(layer);
    }
    Ok(Built {
        layers,
        key,
        state: builder.state,
        from: base.from,
        source: base.source,
        digest: base.digest,
        notes: base.notes,
        cache_hit: base.cache_hit && cache_hit,
    })
}

/// sha256 over the relative path, mode and bytes (or link target) of every file under the
/// given context paths, in path order, after a version tag.
fn content_digest(context: &Path, inputs: &[PathBuf]) -> std::io::Result<String> {
    digest_tree(STEP_VERSION, context, inputs)
}

fn digest_tree(version: &str, context: &Path, inputs: &[PathBuf]) -> std::io::Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut h = Sha256::new();
    let field = |h: &mut Sha256, bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(&mut h, version.as_bytes());
    for input in inputs {
        for entry in walkdir::WalkDir::new(input).sort_by_file_name() {
            let entry = entry.map_err(std::io::Error::other)?;
            let rel = entry.path().strip_prefix(context).unwrap_or(entry.path());
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
    }
    Ok(hex::encode(h.finalize()))
}

/// An empty lower layer, for a sandbox whose whole root is its upper (FROM scratch, a
/// bootstrap's finishing run).
pub(crate) fn empty_layer(store: &ImageStore) -> Result<PathBuf, EnvError> {
    const EMPTY: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    if let Some(layer) = store.layer(EMPTY) {
        return Ok(layer);
    }
    let tmp = store.temp_dir().map_err(image_error)?;
    let dir = tmp.join("fs");
    std::fs::create_dir_all(&dir).map_err(io(format!("create {}", dir.display())))?;
    let layer = store.adopt_layer(EMPTY, &dir).map_err(image_error);
    let _ = std::fs::remove_dir_all(&tmp);
    layer
}

pub(crate) fn image_error(e: super::image::ImageError) -> EnvError {
    EnvError::SetupFailed {
        step: "image store".into(),
        message: e.to_string(),
    }
}

/// Append to the build log the spec names (the trial's `build.log`); a log that cannot be
/// written loses lines, never the build.
fn log(spec: &EnvironmentSpec, text: &str) {
    use std::io::Write;
    let Some(path) = &spec.build_log else { return };
    if text.is_empty() {
        return;
    }
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
    {
        let _ = file.write_all(text.as_bytes());
    }
}

/// Run one RUN or COPY step in a sandbox over `lower` and keep its upper as layer `id`.
#[allow(clippy::too_many_arguments)]
async fn run_step(
    spec: &EnvironmentSpec,
    backend: &SandboxBackend,
    store: &ImageStore,
    lower: &[PathBuf],
    builder: &mut Builder<'_>,
    step: &Step,
    from_layers: Option<&[PathBuf]>,
    id: &str,
) -> Result<PathBuf, EnvError> {
    let tmp = store.temp_dir().map_err(image_error)?;
    let result = async {
        let exported = match (from_layers, &step.instruction) {
            (Some(layers), Instruction::Copy(copy)) => {
                let sources: Vec<String> = copy.sources.iter().map(|s| builder.expand(s)).collect();
                Some(export(backend, layers, &sources, &tmp.join("export"), step).await?)
            }
            _ => None,
        };
        let dir = tmp.join("step");
        let handle = backend
            .launch(Launch {
                dir: dir.clone(),
                root: ImageRoot::Layers(nonempty(store, lower)?),
                workdir: builder.state.workdir.clone(),
                env: build_env(),
                user: None,
                network: Network::Host,
                allowed: Vec::new(),
                limits: Limits::default(),
                binds: build_binds(),
                verifier_logs: None,
                disk_mb: None,
                remove_dir: false,
                group: GroupNetwork::default(),
            })
            .await?;
        let outcome = builder.execute(&handle, step, exported.as_deref()).await;
        let mut handle = handle;
        let shutdown = handle.shutdown().await;
        match &outcome {
            Ok(output) => log(spec, output),
            Err(e) => log(spec, &format!("FAILED: {e}\n")),
        }
        outcome?;
        shutdown?;
        let upper = dir.join("upper");
        clean_layer(&upper);
        store.adopt_layer(id, &upper).map_err(image_error)
    }
    .await;
    let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(tmp)).await;
    result
}

fn nonempty(store: &ImageStore, lower: &[PathBuf]) -> Result<Vec<PathBuf>, EnvError> {
    if lower.is_empty() {
        Ok(vec![empty_layer(store)?])
    } else {
        Ok(lower.to_vec())
    }
}

/// Copy `sources` (absolute paths of the other stage or image) out of a sandbox of `layers`
/// into `out` on the host, keeping their paths: `COPY --from` then copies from there.
async fn export(
    backend: &SandboxBackend,
    layers: &[PathBuf],
    sources: &[String],
    out: &Path,
    step: &Step,
) -> Result<PathBuf, EnvError> {
    const AT: &str = "/.geode-export";
    std::fs::create_dir_all(out).map_err(io(format!("create {}", out.display())))?;
    let handle = backend
        .launch(Launch {
            dir: out.with_extension("sandbox"),
            root: ImageRoot::Layers(layers.to_vec()),
            workdir: "/".into(),
            env: Vec::new(),
            user: None,
            network: Network::None,
            allowed: Vec::new(),
            limits: Limits::default(),
            binds: vec![Bind {
                host: out.to_path_buf(),
                inside: AT.into(),
                read_only: false,
            }],
            verifier_logs: None,
            disk_mb: None,
            remove_dir: true,
            group: GroupNetwork::default(),
        })
        .await?;
    // Patterns stay unquoted so the shell expands them, as docker matches them.
    let words: Vec<String> = sources
        .iter()
        .map(|s| {
            let rel = format!("./{}", s.trim_start_matches('/'));
            if rel.contains(['*', '?', '[']) {
                rel
            } else {
                dockerfile::shell_quote(&rel)
            }
        })
        .collect();
    let command = format!("cd / && cp -a --parents -- {} {AT}/", words.join(" "));
    let req = geode_runtime::tools::workspace::ExecRequest {
        command: command.clone(),
        cwd: Some(PathBuf::from("/")),
        timeout: Duration::from_secs(600),
        output_cap: 64 << 10,
        env: Vec::new(),
    };
    let result = handle
        .exec_as(
            req,
            Some(vec!["/bin/sh".into(), "-c".into()]),
            Some("0".into()),
            tokio_util::sync::CancellationToken::new(),
        )
        .await;
    let mut handle = handle;
    let _ = handle.shutdown().await;
    let result = result?;
    if result.exit_code != Some(0) {
        return Err(EnvError::SetupFailed {
            step: step_name(step),
            message: format!(
                "copying {} out of the other stage failed: {}{}",
                sources.join(" "),
                result.stdout,
                result.stderr
            ),
        });
    }
    Ok(out.to_path_buf())
}

/// The host's CA bundle, for a build step's downloads. A machine whose egress re-signs TLS (a
/// proxy with its own CA, as here) would otherwise fail every `pip install` and `curl https://`
/// of a build, as `docker build` on it would. The bundle is bound at a path of its own (the
/// image's `/etc/ssl` stays the image's, so `apt-get install ca-certificates` still works) and
/// named by the variables the usual clients read; no layer keeps it.
const HOST_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
const BUILD_CA_AT: &str = "/.geode-host-ca.crt";

fn build_binds() -> Vec<Bind> {
    if Path::new(HOST_CA_BUNDLE).is_file() {
        vec![Bind {
            host: PathBuf::from(HOST_CA_BUNDLE),
            inside: BUILD_CA_AT.into(),
            read_only: true,
        }]
    } else {
        Vec::new()
    }
}

fn build_env() -> Vec<(String, String)> {
    if !Path::new(HOST_CA_BUNDLE).is_file() {
        return Vec::new();
    }
    [
        "SSL_CERT_FILE",
        "PIP_CERT",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
        "NODE_EXTRA_CA_CERTS",
    ]
    .iter()
    .map(|k| (k.to_string(), BUILD_CA_AT.to_string()))
    .collect()
}

/// Remove what the sandbox itself put into a step's upper layer: the inbox's mount point and
/// the empty files that `/etc/hosts`, `/etc/resolv.conf` and the CA bundle were bound over.
pub(crate) fn clean_layer(upper: &Path) {
    let _ = std::fs::remove_dir(upper.join(super::protocol::INBOX.trim_start_matches('/')));
    for file in [
        "etc/hosts",
        "etc/resolv.conf",
        BUILD_CA_AT.trim_start_matches('/'),
    ] {
        let path = upper.join(file);
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file() && m.len() == 0) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// `--base host`: the Dockerfile's steps replayed over the host root into one cached layer.
async fn prepare_on_host(
    backend: &SandboxBackend,
    spec: &EnvironmentSpec,
) -> Result<PreparedImage, EnvError> {
    let dockerfile = spec.environment_dir.join("Dockerfile");
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
    digest_tree(BUILDER_VERSION, env_dir, &[env_dir.to_path_buf()])
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
    let mut state = StageState::from_image(&ImageConfig::default());
    let mut from = String::new();
    let mut outcome = Ok(());
    let mut builder = Builder::new(
        &spec.environment_dir,
        deadline,
        spec.build_timeout,
        state.clone(),
        &spec.build_args,
    );
    for step in steps {
        if let Instruction::From { image, .. } = &step.instruction {
            if !from.is_empty() {
                outcome = Err(EnvError::Unsupported(format!(
                    "Dockerfile line {}: a second FROM (multi-stage builds need an image base, \
                     not --base host)",
                    step.line
                )));
                break;
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
        if let Err(e) = builder.execute(&handle, step, None).await {
            outcome = Err(e);
            break;
        }
    }
    state = builder.state;
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
