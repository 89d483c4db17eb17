#![warn(missing_docs)]
//! Environments a trial runs in: the default `sandbox` backend (namespaces + overlayfs over the
//! task's image, no docker engine), a docker engine's containers, a Kubernetes cluster's Pods,
//! and the unisolated `host` backend behind an explicit flag.
//!
//! A backend first *prepares* a task's image (its base from the image store, a registry or a
//! Debian bootstrap, then the Dockerfile's steps as cached layers), then *starts* one sandbox
//! per trial on top of it. The runtime's tools act on the sandbox
//! through its `Workspace`, so the agent never touches the host.
//!
//! A crate of its own below the harness: the rollout uses its backends, the image store and the
//! sandbox entry point, and nothing here knows of packs, runs or the CLI.

// Libraries do not print: the sandbox's processes speak through the protocol, and the
// harness's binary decides what reaches stdout and stderr.
#![deny(clippy::print_stdout, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use geode_runtime::tools::workspace::{ExecOutput, ExecRequest, Workspace};
use tokio_util::sync::CancellationToken;

/// What the task asks of its environment (from task.toml and environment/).
#[derive(Debug, Clone, PartialEq)]
pub struct EnvironmentSpec {
    /// `org/name`, for messages and cache keys.
    pub task_name: String,
    /// The task's `environment/` folder: the Dockerfile and its build context, unless `build`
    /// moves them.
    pub environment_dir: PathBuf,
    /// Where a compose file's `build:` moves the context and the Dockerfile (checked, when the
    /// file was read, to lie inside the task's folder); `None`: `environment_dir` and its
    /// `Dockerfile`. `environment_dir` stays what the host backend copies as the workspace.
    pub build: Option<BuildSource>,
    /// What the trial may reach. Builds always have the network, as `docker build` does.
    pub network: NetworkPolicy,
    /// CPU limit in cores (fractions allowed); `None`: no limit.
    pub cpus: Option<f64>,
    /// Memory limit in MiB; `None`: no limit.
    pub memory_mb: Option<u64>,
    /// Maximum number of processes in the sandbox.
    pub pids_max: Option<u64>,
    /// The trial's disk (its writable layer), in MB; [`disk::DEFAULT_STORAGE_MB`] when unset.
    pub storage_mb: Option<u64>,
    /// How long building the image may take before the build fails.
    pub build_timeout: Duration,
    /// The task's own time limits (its agent's and verifier's, every step's, scaled), for a
    /// backend whose environments must end by themselves if the harness dies (a Pod's
    /// `activeDeadlineSeconds`); `None`: no bound.
    pub time_limits: Option<Duration>,
    /// Extra environment for every process of the trial (task.toml `[environment] env`).
    pub env: Vec<(String, String)>,
    /// A prebuilt image to run instead of building the Dockerfile (`[environment]
    /// docker_image`, as Harbor reads it).
    pub docker_image: Option<String>,
    /// Values for the Dockerfile's ARGs, as `docker build --build-arg` gives them.
    pub build_args: Vec<(String, String)>,
    /// Where the build's steps and their output are appended (the trial's `build.log`).
    pub build_log: Option<PathBuf>,
    /// The compose group this sandbox belongs to; the default is a trial of its own.
    pub group: GroupNetwork,
}

impl EnvironmentSpec {
    /// The folder a build's COPY and ADD read from.
    pub fn context(&self) -> &Path {
        self.build
            .as_ref()
            .map_or(self.environment_dir.as_path(), |b| b.context.as_path())
    }

    /// The Dockerfile the image is built from.
    pub fn dockerfile(&self) -> PathBuf {
        match &self.build {
            Some(build) => build.dockerfile.clone(),
            None => self.environment_dir.join("Dockerfile"),
        }
    }
}

/// A build's context folder and Dockerfile when a compose file names them (Harbor's
/// `build: { context: ${CONTEXT_DIR}/.., dockerfile: ... }`): both absolute, both inside the
/// task's folder.
#[derive(Debug, Clone, PartialEq)]
pub struct BuildSource {
    /// The folder COPY and ADD read from.
    pub context: PathBuf,
    /// The Dockerfile's path.
    pub dockerfile: PathBuf,
}

/// How the sandboxes of one compose group share a network, as a pod's containers do: one
/// network namespace (the main sandbox's, which the others join), where every service's name
/// is the group's loopback. Ports are therefore shared between the services of a group.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupNetwork {
    /// The main sandbox's network, to join; `None` makes a new one.
    pub join: Option<SharedNetwork>,
    /// Names `/etc/hosts` maps to `127.0.0.1` (the group's service names).
    pub names: Vec<String>,
}

/// A sandbox's network as the other sandboxes of its compose group join it (each backend
/// joins only its own kind).
#[derive(Debug, Clone, PartialEq)]
pub enum SharedNetwork {
    /// A network namespace (`/proc/PID/ns/net`): the sandbox backend's.
    Namespace(PathBuf),
    /// A docker engine's container, by id (`--network container:ID`).
    Container(String),
}

/// What a trial may reach on the network (task.toml `network_mode`, `allowed_hosts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetworkPolicy {
    /// `no-network` (or `allow_internet = false`): only the trial's own loopback.
    Off,
    /// `public`: outbound to anywhere but the host's loopback and other trials.
    Public,
    /// `allowlist`: only these hosts (names or IP literals, as `allowed_hosts` lists them);
    /// names are resolved once on the host and pinned in the trial's `/etc/hosts`.
    Allowlist(Vec<String>),
}

impl NetworkPolicy {
    /// No network at all (`Off`).
    pub fn is_off(&self) -> bool {
        matches!(self, NetworkPolicy::Off)
    }
}

/// What a sandbox's root is made of, below the trial's own writable layer.
#[derive(Debug, Clone, PartialEq)]
pub enum ImageRoot {
    /// The image's unpacked layers, bottom first (base image layers, then one per build step).
    Layers(Vec<PathBuf>),
    /// The host's own root with at most one built layer over it: `--base host` only, and
    /// labelled so in every result it produces.
    Host {
        /// The built layer's directory; `None` runs the bare host root.
        layer: Option<PathBuf>,
    },
    /// An image a docker engine holds, by id (`sha256:...`): the docker backend's.
    Engine(String),
    /// An image a registry holds, as a cluster's nodes pull it (`HOST/REPO@sha256:...`): the
    /// kubernetes backend's.
    Registry(String),
}

/// A built (or cached) image: what every trial of the task starts from.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedImage {
    /// What the sandbox's root is made of.
    pub root: ImageRoot,
    /// The image's WORKDIR (`/app` in most tasks); `/` when none.
    pub workdir: String,
    /// The image's Env, then the Dockerfile's ENV values, then the spec's env.
    pub env: Vec<(String, String)>,
    /// The image's USER, if any.
    pub user: Option<String>,
    /// What a container of the image runs: its ENTRYPOINT and CMD (exec form; empty when
    /// unset). A trial's main environment runs the ENTRYPOINT with Harbor's command in place
    /// of the CMD ([`entrypoint`]); a compose sidecar runs both (or its service's).
    pub entrypoint: Vec<String>,
    /// The image's CMD (exec form; empty when unset).
    pub cmd: Vec<String>,
    /// The base image as the Dockerfile's final `FROM` (or `docker_image`) names it.
    pub from: String,
    /// Where the base came from: `pulled from URL`, `loaded from FILE`, `bootstrapped from the
    /// Debian archive (bookworm)`, `host root (--base host)`.
    pub source: String,
    /// The base image's manifest digest (`sha256:...`), when it has one.
    pub digest: Option<String>,
    /// What the trial's metadata should say about the image (ignored instructions, a stand-in's
    /// differences from the official image).
    pub notes: Vec<String>,
    /// How the base was had beyond `source`: the alias, the mirror, the stand-in, the pin.
    pub origin: BaseOrigin,
    /// The image came from the cache: no build step had to run.
    pub cache_hit: bool,
    /// Wall-clock time spent preparing the image; zero when nothing was built.
    pub build_duration: Duration,
}

/// How a base image was had, as a trial's `image` metadata records it: which of its names
/// served it, through which mirror, whether a bootstrap stood in for it, and whether its
/// digest pin was honoured. The default says nothing beyond the image's `source`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct BaseOrigin {
    /// The name that served the image, when it is a registry alias of the one named
    /// (`docker.io/library/debian:bookworm-slim` for
    /// `public.ecr.aws/docker/library/debian:bookworm-slim`).
    pub alias: Option<String>,
    /// The mirror (its base URL) that served the pull, when one did.
    pub mirror: Option<String>,
    /// A bootstrap from the Debian archive stood in for the image named.
    pub stand_in: bool,
    /// The digest the name pinned, when it pinned one.
    pub pin: Option<DigestPin>,
}

/// A digest pin, and whether the image used is that image.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DigestPin {
    /// The pinned digest (`sha256:...`).
    pub digest: String,
    /// `false` only for a stand-in under `[images] stand_in_pinned = true`.
    pub honoured: bool,
}

/// Failures of an environment: infrastructure, except [`EnvError::BrokenFromInside`].
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// A Dockerfile step failed (exit code, output tail), or the build timed out.
    #[error("environment set-up failed at {step}: {message}")]
    SetupFailed {
        /// Which part of set-up failed: a Dockerfile instruction, `network`, `sandbox` ...
        step: String,
        /// Why: exit code and output tail, or the timeout.
        message: String,
    },
    /// The task needs something this host cannot give (a GPU, an unsupported instruction).
    #[error("environment unsupported: {0}")]
    Unsupported(String),
    /// The sandbox process died or stopped answering.
    #[error("sandbox lost: {0}")]
    Lost(String),
    /// A process inside the sandbox took its server down: the agent's doing, not an
    /// infrastructure failure.
    #[error("sandbox broken from inside: {0}")]
    BrokenFromInside(String),
    /// A host I/O operation of the backend failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// When a trial's writable layer is judged for changes to what the verifier runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Judgment {
    /// As the agent hands over to the verifier.
    HandOver,
    /// Once the verifier is done.
    AfterVerifier,
}

/// What a judgment of the layer found among the verifier's inputs (absolute paths).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChangedInputs {
    /// Changed, and there as the layer was read.
    pub present: Vec<String>,
    /// Written while the verifier ran and gone again by the end: what a verifier installs
    /// stays, so a file that came and went under it is a planted one covering its tracks.
    #[serde(default)]
    pub vanished: Vec<String>,
}

/// What teardown observed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TeardownReport {
    /// Processes still alive at teardown that had to be killed.
    pub killed_processes: usize,
    /// How long teardown took.
    pub duration: Duration,
}

/// One running trial environment.
#[async_trait]
pub trait Sandbox: Send + Sync {
    /// The work directory as the runtime's tools see it (root = the image's WORKDIR; paths
    /// outside it are refused by the tools' scope step; writes by processes land in the
    /// trial's own layer, never on the host).
    fn workspace(&self) -> Arc<dyn Workspace>;

    /// What this environment says of itself in the trial's result: how it is isolated where
    /// that differs from the default (the rootless sandbox), limits it could not apply.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }

    /// Run a shell command inside the sandbox (`cwd` relative to the workdir, or absolute).
    /// A timeout or a cancel kills it with everything in its process group; what it leaves in
    /// the background when it returns by itself (`server &`) keeps running, as under `docker
    /// exec`, until teardown.
    async fn exec(
        &self,
        req: ExecRequest,
        cancel: CancellationToken,
    ) -> Result<ExecOutput, EnvError>;

    /// Copy a host file or directory into the sandbox at an absolute path (replacing it).
    async fn copy_in(&self, host_src: &Path, sandbox_dst: &str) -> Result<(), EnvError>;

    /// Copy `sandbox_src` (an absolute path, a file or a folder) out to `host_dst`, which
    /// must not exist, leaving out names `skip` matches. Links and special files inside are
    /// left out, never followed; what was left out is returned. Call it with no agent process
    /// running: nothing may change the tree while it is read.
    async fn copy_out(
        &self,
        sandbox_src: &str,
        host_dst: &Path,
        skip: &(dyn for<'n> Fn(&'n str) -> bool + Sync),
    ) -> Result<Vec<String>, EnvError> {
        let _ = (sandbox_src, host_dst, skip);
        Err(EnvError::Unsupported(
            "this backend cannot copy files out of its sandboxes".into(),
        ))
    }

    /// Run the verifier with `tests` (a host folder) at [`TESTS_DIR`] and the trial's own
    /// `/logs/verifier`, while the agent's background services keep running. A backend with
    /// views gives it a mount view of its own, out of the services' reach.
    async fn run_verifier(&self, tests: &Path, req: ExecRequest) -> Result<ExecOutput, EnvError> {
        self.copy_in(tests, TESTS_DIR).await?;
        self.exec(req, CancellationToken::new()).await
    }

    /// The host folder the agent's processes saw as `/logs/verifier`, when it is not the
    /// trial's own (`None`: it was the trial's).
    fn verifier_decoy(&self) -> Option<PathBuf> {
        None
    }

    /// Start a private X display of `width`x`height` inside the sandbox and the image's X
    /// application on it, and give the workspace's `computer` tool that display. Only a
    /// backend whose agent can reach the display from inside has one.
    async fn start_display(&self, width: u32, height: u32) -> Result<(), EnvError> {
        let _ = (width, height);
        Err(EnvError::Unsupported(
            "environment.display: this backend cannot give a sandbox an X display".into(),
        ))
    }

    /// A TCP listener on `127.0.0.1:port` (0: any free port) as the sandbox's processes see
    /// their loopback, accepted on from the host: how an agent in a sandbox without network
    /// reaches the trial's model gateway, and nothing else of the host. A backend that cannot
    /// make one says so.
    async fn listen_inside(&self, port: u16) -> Result<std::net::TcpListener, EnvError> {
        let _ = port;
        Err(EnvError::Unsupported(
            "this backend cannot listen inside its sandbox".into(),
        ))
    }

    /// Kill every process the agent's commands left (its background services included, and
    /// the image ENTRYPOINT's). Trials no longer call it before the verifier, whose semantics
    /// keep the services running; teardown ends everything regardless. Returns how many were
    /// killed.
    async fn kill_all_processes(&self) -> Result<usize, EnvError>;

    /// Stop everything and remove the trial's writable layer.
    async fn teardown(self: Box<Self>) -> Result<TeardownReport, EnvError>;

    /// Bring what the trial's processes wrote to `/logs/agent` and `/logs/artifacts` back to the
    /// trial's folders where those live on the trial's own disk (bounded like every copy out;
    /// what the host already holds there is kept). Once, with the agent's processes gone;
    /// teardown does it if nobody did. Notes of what was left out.
    async fn sync_logs(&self) -> Vec<String> {
        Vec::new()
    }

    /// What the trial's writable layer shows of changes to what the verifier runs
    /// (interpreters, `PATH` folders, site-packages hooks, `/tests`), outside `exempt` (the
    /// workdir); empty where there is no layer to read. `when` the layer is judged: at the
    /// hand-over, where a backend that can also starts watching what is written next, and after
    /// the verifier, where what was written meanwhile joins what is there.
    async fn changed_verifier_inputs(&self, exempt: &str, when: Judgment) -> ChangedInputs {
        let _ = (exempt, when);
        ChangedInputs::default()
    }

    /// Packets sent towards hosts the sandbox may not reach: anything beyond `lo` without
    /// network, anything off the allowlist with one (0 with the public network, or where the
    /// backend cannot tell).
    async fn network_attempts(&self) -> u64 {
        0
    }

    /// The sandbox's network, for the sidecars of a compose group to join; `None` where the
    /// backend has none to share.
    fn shared_network(&self) -> Option<SharedNetwork> {
        None
    }

    /// The sandbox of a compose sidecar service started beside this one, by its name.
    fn sidecar(&self, name: &str) -> Option<&dyn Sandbox> {
        let _ = name;
        None
    }
}

/// The host folder a trial's processes see as `/logs/agent`: `agent/logs/` of the trial. The
/// host's own records of the agent (its timeline, trajectory and images) sit in `agent/` above
/// it, out of their reach: an agent that deleted its `timeline.db` used to leave a trial with
/// no trajectory, no flags and no note.
pub fn agent_logs(trial_dir: &Path) -> PathBuf {
    trial_dir.join("agent").join("logs")
}

/// Where trial environments come from.
#[async_trait]
pub trait Backend: Send + Sync {
    /// Which backend this is, as results and Harbor's locks name it.
    fn kind(&self) -> kind::BackendKind;

    /// Build the task's image, or reuse the cached layer (keyed by the hash of the Dockerfile
    /// and its build context).
    async fn prepare(&self, spec: &EnvironmentSpec) -> Result<PreparedImage, EnvError>;

    /// Start one trial's sandbox. `trial_dir` holds `agent/logs/` ([`agent_logs`]),
    /// `verifier/`, `artifacts/`, which appear inside as `/logs/agent`, `/logs/verifier`,
    /// `/logs/artifacts`.
    async fn start(
        &self,
        spec: &EnvironmentSpec,
        image: &PreparedImage,
        trial_dir: &Path,
    ) -> Result<Box<dyn Sandbox>, EnvError>;
}

mod base;
pub mod bootstrap;
mod build;
pub mod cgroup;
pub mod compose;
pub mod disk;
pub mod docker;
pub mod dockerfile;
pub mod entrypoint;
pub mod evidence;
pub mod fsops;
mod healthcheck;
pub mod host;
pub mod ids;
pub mod image;
pub mod kind;
pub mod kubernetes;
pub mod rootless;
pub mod sandbox;
mod scripted;
mod steps;
pub mod vault;

pub use base::{SourceRules, describe as describe_source, source_plan};
pub use healthcheck::Healthcheck;
pub use host::HostBackend;
pub use sandbox::{BaseMode, Progress, SandboxBackend, SandboxConfig, SandboxHandle};
pub use sandbox::{SandboxWorkspace, protocol, workspace};

/// Where a task's `tests/` appear for its verifier.
pub const TESTS_DIR: &str = "/tests";

/// The hidden subcommand that runs a sandbox server (`geode __sandbox-server SPEC_JSON`).
pub const SERVER_ARG: &str = "__sandbox-server";
/// The hidden subcommand that runs as PID 1 of a sandbox's pid namespace.
pub const INIT_ARG: &str = "__sandbox-init";
/// The hidden subcommand that serves requests inside a sandbox.
pub const AGENT_ARG: &str = "__sandbox-agent";

/// Run the sandbox's own processes when the binary was started as one of them: `Some(code)`
/// when `args[1]` is a hidden sandbox subcommand, `None` otherwise.
///
/// The binary must call this first thing in `main`, before argument parsing and before any
/// async runtime or other thread starts: the server unshares namespaces, which the kernel
/// allows only to a single-threaded process. Neither entry needs tokio.
pub fn sandbox_entry(args: &[String]) -> Option<std::process::ExitCode> {
    match args.get(1).map(String::as_str) {
        Some(SERVER_ARG) => Some(match args.get(2) {
            Some(spec) => sandbox::inside::server::server_main(spec),
            None => {
                // The server process's own main: its standard error is its log.
                #[allow(clippy::print_stderr)]
                {
                    eprintln!("{SERVER_ARG}: missing the spec argument");
                }
                std::process::ExitCode::from(2)
            }
        }),
        Some(AGENT_ARG) => Some(match args.get(2) {
            Some(spec) => {
                sandbox::inside::server::agent_main(spec, args.get(3).map(String::as_str))
            }
            None => std::process::ExitCode::from(2),
        }),
        Some(INIT_ARG) => Some(sandbox::inside::init::init_main()),
        Some(vault::VAULT_ARG) => Some(vault::vault_main()),
        _ => None,
    }
}
