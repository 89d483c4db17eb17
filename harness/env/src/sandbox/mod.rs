//! The `sandbox` backend: one namespace sandbox per trial, rooted in the task's image, no
//! engine.
//!
//! Each sandbox is a `geode __sandbox-server` process ([`inside::server`]) that lives in its
//! own mount, pid, UTS, IPC (and, without network, net) namespaces, rooted in an overlay of
//! the image's layers whose writable layer is the trial's scratch directory. The harness talks to it over pipes
//! ([`client`]). Set-up and teardown are a process start and a process exit; the kernel
//! unmounts everything when the namespaces die, so the host's mount table never changes.
//!
//! The folder is the sandbox's room, in two halves around its wire ([`protocol`]): the host
//! side (this module, [`launch`], [`handle`], [`client`], [`workspace`], [`scratch`]) and
//! the [`inside`], which runs in the namespaces and knows only the protocol. Image builds
//! run their steps in these sandboxes, so the [`Backend`] impl that joins the two (prepare
//! = build, start = a sandbox) lives with the build, and nothing here depends on it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use self::protocol::{Bind, Network};
use crate::cgroup::Limits;
use crate::{EnvError, EnvironmentSpec, ImageRoot, NetworkPolicy, PreparedImage};

mod client;
pub mod display;
mod handle;
pub(crate) mod inside;
mod launch;
mod launch_spec;
pub(crate) mod netns;
pub mod protocol;
mod scratch;
pub mod workspace;

pub use handle::SandboxHandle;
pub(crate) use handle::exec_output;
pub(crate) use inside::exec::DEFAULT_PATH;
pub(crate) use launch_spec::Launch;
pub use workspace::SandboxWorkspace;

/// Where the sandbox backend keeps its state, and what it shows of the host.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// The executable whose `main` calls [`crate::sandbox_entry`] first (the `geode` binary;
    /// in the harness's tests `env!("CARGO_BIN_EXE_geode")`).
    pub geode_exe: PathBuf,
    /// Built image layers, one directory per cache key (`--base host` builds only; image
    /// builds keep their step layers in the image store).
    pub cache_dir: PathBuf,
    /// Per-sandbox writable layers (a layer and its overlayfs work directory side by side).
    pub scratch_dir: PathBuf,
    /// The image store: pulled, loaded and bootstrapped images and the layers of build steps.
    pub image_store: PathBuf,
    /// A store read, never written, where `image_store` has no such image or layer: the
    /// machine's, under a sealed campaign's store in memory.
    pub parent_image_store: Option<PathBuf>,
    /// `image_store` is read, never written (`[images] read_only`, `GEODE_IMAGES_READ_ONLY`):
    /// a store staged for a cluster's nodes by `geode image stage`. An image or build step it
    /// does not hold is an immediate error naming the task, never a pull, bootstrap or build.
    pub read_only_store: bool,
    /// Registry mirrors, as docker's `registry-mirrors` (registry name -> base URL).
    pub mirrors: std::collections::BTreeMap<String, String>,
    /// Registry aliases (`[images] aliases` and the built-in ECR Public rule): other names a
    /// base is asked for under, before mirrors and stand-ins.
    pub aliases: crate::image::Aliases,
    /// `[images] stand_in_pinned`: a Debian bootstrap may stand in for a base pinned by digest
    /// that no source serves (labelled so in every result); refused otherwise.
    pub stand_in_pinned: bool,
    /// What the trial's root is built on.
    pub base: BaseMode,
    /// `--base host` only: host directories shown empty and read-only inside, besides
    /// `cache_dir` and `scratch_dir` (e.g. the job folder).
    pub hide: Vec<PathBuf>,
    /// `--base host` only: directories that start empty instead of showing the host's content.
    pub fresh_dirs: Vec<String>,
    /// Where progress of long set-ups (pulls, bootstraps, builds) is told.
    pub progress: Progress,
    /// A CA bundle trials with network trust (`[environment] extra_ca_certs`): bound read-only
    /// at [`TRIAL_CA_AT`] and named by the variables the usual clients read. `None`: trials
    /// trust what their image trusts.
    pub trial_ca_bundle: Option<PathBuf>,
}

/// Where a trial with network finds the CA bundle of `[environment] extra_ca_certs`.
pub const TRIAL_CA_AT: &str = "/.geode-extra-ca.crt";

/// A sink for progress lines. The default logs them (`tracing`, info); the `geode` binary
/// prints them on standard error, prefixed `geode: `.
#[derive(Clone)]
pub struct Progress(pub Arc<dyn Fn(&str) + Send + Sync>);

impl Default for Progress {
    fn default() -> Self {
        Progress(Arc::new(|line: &str| tracing::info!("{line}")))
    }
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress")
    }
}

/// What a trial's root is built on: parsed once (by clap from `--base`, or serde from a run's
/// `config.json`), then carried as this enum.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum BaseMode {
    /// The image the task names (pulled, loaded or bootstrapped); nothing of the host.
    #[default]
    Image,
    /// The host's own root with the Dockerfile's steps replayed over it (`--base host`).
    Host,
}

impl SandboxConfig {
    /// Host-base layers under `state_dir/images`, scratch under `state_dir/sandboxes`, the
    /// image store at `image_store`.
    pub fn new(
        geode_exe: impl Into<PathBuf>,
        state_dir: impl AsRef<Path>,
        image_store: impl Into<PathBuf>,
    ) -> Self {
        let state = state_dir.as_ref();
        SandboxConfig {
            geode_exe: geode_exe.into(),
            cache_dir: state.join("images"),
            scratch_dir: state.join("sandboxes"),
            image_store: image_store.into(),
            parent_image_store: None,
            read_only_store: false,
            mirrors: Default::default(),
            aliases: Default::default(),
            stand_in_pinned: false,
            base: BaseMode::Image,
            hide: Vec::new(),
            fresh_dirs: ["/tmp", "/var/tmp", "/root", "/run"]
                .map(String::from)
                .to_vec(),
            progress: Progress::default(),
            trial_ca_bundle: None,
        }
    }
}

/// What one sandbox is started with (trial or image build).

#[derive(Debug)]
pub struct SandboxBackend {
    config: SandboxConfig,
    /// One build at a time per cache key within this process.
    pub(crate) build_locks: Mutex<std::collections::HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> EnvError {
    let context = context.into();
    move |source| EnvError::Io { context, source }
}

impl SandboxBackend {
    /// Creates the state directories. Refused without root outside a user namespace: the
    /// sandbox needs root, of the machine or of geode's rootless namespace ([`crate::rootless`]).
    pub fn new(mut config: SandboxConfig) -> Result<Self, EnvError> {
        if let Some(why) = crate::rootless::unavailable() {
            return Err(EnvError::Unsupported(why));
        }
        for dir in [&config.cache_dir, &config.scratch_dir, &config.image_store] {
            std::fs::create_dir_all(dir).map_err(io(format!("create {}", dir.display())))?;
        }
        config.image_store = std::fs::canonicalize(&config.image_store)
            .map_err(io(format!("resolve {}", config.image_store.display())))?;
        scratch::remove_stale_sandboxes(&config.scratch_dir);
        config.cache_dir = std::fs::canonicalize(&config.cache_dir)
            .map_err(io(format!("resolve {}", config.cache_dir.display())))?;
        config.scratch_dir = std::fs::canonicalize(&config.scratch_dir)
            .map_err(io(format!("resolve {}", config.scratch_dir.display())))?;
        Ok(SandboxBackend {
            config,
            build_locks: Mutex::new(std::collections::HashMap::new()),
        })
    }

    /// The settings this backend was made with.
    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }

    /// [`Backend::start`] with the concrete handle (its pid namespace and notes are useful to
    /// tests and to the trial's metadata).
    pub async fn start_sandbox(
        &self,
        spec: &EnvironmentSpec,
        image: &PreparedImage,
        trial_dir: &Path,
    ) -> Result<SandboxHandle, EnvError> {
        let mut binds = Vec::new();
        for name in ["agent", "verifier", "artifacts"] {
            let host = match name {
                "agent" => crate::agent_logs(trial_dir),
                _ => trial_dir.join(name),
            };
            std::fs::create_dir_all(&host).map_err(io(format!("create {}", host.display())))?;
            if name != "verifier" {
                binds.push(Bind {
                    host,
                    inside: format!("/logs/{name}"),
                    read_only: false,
                    on_disk: true,
                });
            }
        }
        let mut env = image.env.clone();
        if let Some(bundle) = &self.config.trial_ca_bundle
            && !spec.network.is_off()
        {
            binds.push(Bind {
                host: bundle.clone(),
                inside: TRIAL_CA_AT.into(),
                read_only: true,
                on_disk: false,
            });
            env.extend(crate::build::ca_variables(TRIAL_CA_AT));
        }
        // The task's own variables last: a task that names its own bundle keeps it.
        env.extend(spec.env.iter().cloned());
        let (network, allowed, allow_notes) = match &spec.network {
            NetworkPolicy::Off => (Network::None, Vec::new(), Vec::new()),
            NetworkPolicy::Public => (Network::Private, Vec::new(), Vec::new()),
            NetworkPolicy::Allowlist(hosts) => {
                let (pins, notes) = self::netns::resolve_allowed(hosts).await;
                (Network::Allowlist, pins, notes)
            }
        };
        let dir = self
            .config
            .scratch_dir
            .join(uuid::Uuid::new_v4().simple().to_string());
        let mut handle = self
            .launch(Launch {
                dir,
                root: image.root.clone(),
                workdir: image.workdir.clone(),
                env,
                user: image.user.clone(),
                network,
                allowed,
                limits: Limits {
                    memory_bytes: spec.memory_mb.map(|mb| mb << 20),
                    pids_max: spec.pids_max,
                    cpus: spec.cpus,
                },
                binds,
                verifier_logs: Some(trial_dir.join("verifier")),
                disk_mb: match image.root {
                    ImageRoot::Layers(_) => {
                        Some(spec.storage_mb.unwrap_or(crate::disk::DEFAULT_STORAGE_MB))
                    }
                    ImageRoot::Host { .. } | ImageRoot::Engine(_) | ImageRoot::Registry(_) => None,
                },
                remove_dir: true,
                group: spec.group.clone(),
            })
            .await?;
        handle.notes.extend(image.notes.iter().cloned());
        handle.notes.extend(allow_notes);
        Ok(handle)
    }
}
