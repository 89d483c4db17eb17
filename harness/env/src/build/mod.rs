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
//!
//! This module is the image build's plan (stages, keys, the store's layers); [`step`] runs
//! one step in its sandbox, and [`host_base`] is the `--base host` stand-in.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use self::host_base::prepare_on_host;
use self::step::run_step;
use super::base::Bases;
use super::dockerfile::{self, Instruction, Step};
use super::image::{ImageConfig, ImageStore, StoredImage};
use super::sandbox::{BaseMode, SandboxBackend};
use super::steps::{Builder, StageState, step_name};
use super::{Backend, BaseOrigin, EnvError, EnvironmentSpec, ImageRoot, PreparedImage, Sandbox};

mod host_base;
mod step;

pub(crate) use self::step::{ca_variables, clean_layer};

/// Changes whenever the meaning of a step's layer changes, so old layers stop matching.
const STEP_VERSION: &str = "geode.build.step.v1";

pub(super) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> EnvError {
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

/// The sandbox backend: its images are built here, its trials start in a sandbox.
#[async_trait]
impl Backend for SandboxBackend {
    fn kind(&self) -> crate::kind::BackendKind {
        crate::kind::BackendKind::Sandbox
    }

    async fn prepare(&self, spec: &EnvironmentSpec) -> Result<PreparedImage, EnvError> {
        prepare(self, spec).await
    }

    async fn start(
        &self,
        spec: &EnvironmentSpec,
        image: &PreparedImage,
        trial_dir: &Path,
    ) -> Result<Box<dyn Sandbox>, EnvError> {
        Ok(Box::new(self.start_sandbox(spec, image, trial_dir).await?))
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
    /// How the base was had: the alias, the mirror, the stand-in, the pin.
    pub origin: BaseOrigin,
    /// Every step's layer was in the store already.
    pub cache_hit: bool,
}

impl Built {
    /// A stage that starts from a stored image.
    pub(crate) fn from_image(
        named: &str,
        image: &StoredImage,
        notes: Vec<String>,
        origin: BaseOrigin,
    ) -> Self {
        let c = &image.config;
        Built {
            layers: image.layers.clone(),
            key: chain(STEP_VERSION, &[image.digest.as_bytes()]),
            state: StageState::from_image(c),
            from: named.to_string(),
            source: crate::base::describe(&image.source),
            digest: Some(image.digest.clone()),
            notes,
            origin,
            cache_hit: true,
        }
    }
}

/// sha256 over a parent key and length-prefixed parts.
pub(super) fn chain(parent: &str, parts: &[&[u8]]) -> String {
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
    let bases = Bases::open(backend, &spec.task_name)?;
    if let Some(image) = &spec.docker_image {
        let base = bases.resolve(image).await?;
        return Ok(prepared(base, spec, started));
    }
    let dockerfile = spec.dockerfile();
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
                origin: BaseOrigin::default(),
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

pub(super) fn internal(what: &str) -> EnvError {
    EnvError::Lost(format!("image build: {what}"))
}

pub(super) fn lookup(args: &[(String, String)], name: &str) -> Option<String> {
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
        origin: built.origin,
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
        spec.context(),
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
                    let context = spec.context().to_path_buf();
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
        bases.refuse_if_read_only(
            &step_name(step),
            &format!("the layer of its build step {}", step_name(step)),
        )?;
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
        origin: base.origin,
        cache_hit: base.cache_hit && cache_hit,
    })
}

/// sha256 over the relative path, mode and bytes (or link target) of every file under the
/// given context paths, in path order, after a version tag.
fn content_digest(context: &Path, inputs: &[PathBuf]) -> std::io::Result<String> {
    digest_tree(STEP_VERSION, context, inputs)
}

pub(super) fn digest_tree(
    version: &str,
    context: &Path,
    inputs: &[PathBuf],
) -> std::io::Result<String> {
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

pub(crate) fn image_error(e: crate::image::ImageError) -> EnvError {
    EnvError::SetupFailed {
        step: "image store".into(),
        message: e.to_string(),
    }
}

/// Append to the build log the spec names (the trial's `build.log`); a log that cannot be
/// written loses lines, never the build.
pub(super) fn log(spec: &EnvironmentSpec, text: &str) {
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
