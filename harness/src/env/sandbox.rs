//! The `sandbox` backend: one namespace sandbox per trial, rooted in the task's image, no
//! engine.
//!
//! Each sandbox is a `geode __sandbox-server` process ([`super::server`]) that lives in its
//! own mount, pid, UTS, IPC (and, without network, net) namespaces, rooted in an overlay of
//! the image's layers whose writable layer is the trial's scratch directory. The harness talks to it over pipes
//! ([`super::client`]). Set-up and teardown are a process start and a process exit; the kernel
//! unmounts everything when the namespaces die, so the host's mount table never changes.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use geode_runtime::tools::workspace::{ExecOutput, ExecRequest, Workspace};
use tokio_util::sync::CancellationToken;

use super::cgroup::{Cgroups, Limits};
use super::client::ServerClient;
use super::netns::Pin;
use super::protocol::{
    self, Bind, ExecResult, ExecSpec, ImageMount, Network, Op, Reply, RootSpec, ServerSpec, View,
};
use super::workspace::SandboxWorkspace;
use super::{
    Backend, EnvError, EnvironmentSpec, GroupNetwork, ImageRoot, NetworkPolicy, PreparedImage,
    Sandbox, SharedNetwork, TeardownReport,
};

/// Where the sandbox backend keeps its state, and what it shows of the host.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// The executable whose `main` calls [`super::sandbox_entry`] first (the `geode` binary;
    /// in the harness's tests `env!("CARGO_BIN_EXE_geode")`).
    pub geode_exe: PathBuf,
    /// Built image layers, one directory per cache key (`--base host` builds only; image
    /// builds keep their step layers in the image store).
    pub cache_dir: PathBuf,
    /// Per-sandbox writable layers (a layer and its overlayfs work directory side by side).
    pub scratch_dir: PathBuf,
    /// The image store: pulled, loaded and bootstrapped images and the layers of build steps.
    pub image_store: PathBuf,
    /// Registry mirrors, as docker's `registry-mirrors` (registry name -> base URL).
    pub mirrors: std::collections::BTreeMap<String, String>,
    /// What the trial's root is built on.
    pub base: BaseMode,
    /// `--base host` only: host directories shown empty and read-only inside, besides
    /// `cache_dir` and `scratch_dir` (e.g. the job folder).
    pub hide: Vec<PathBuf>,
    /// `--base host` only: directories that start empty instead of showing the host's content.
    pub fresh_dirs: Vec<String>,
    /// Where progress of long set-ups (pulls, bootstraps, builds) is told.
    pub progress: Progress,
}

/// A sink for progress lines (default: standard error, prefixed `geode: `).
#[derive(Clone)]
pub struct Progress(pub Arc<dyn Fn(&str) + Send + Sync>);

impl Default for Progress {
    fn default() -> Self {
        Progress(Arc::new(|line: &str| eprintln!("geode: {line}")))
    }
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress")
    }
}

/// What a trial's root is built on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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
            mirrors: Default::default(),
            base: BaseMode::Image,
            hide: Vec::new(),
            fresh_dirs: ["/tmp", "/var/tmp", "/root", "/run"]
                .map(String::from)
                .to_vec(),
            progress: Progress::default(),
        }
    }
}

/// What one sandbox is started with (trial or image build).
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    /// Scratch directory of this sandbox (created; its `upper/` is the writable layer).
    pub dir: PathBuf,
    pub root: ImageRoot,
    pub workdir: String,
    pub env: Vec<(String, String)>,
    pub user: Option<String>,
    pub network: Network,
    /// What a `Network::Allowlist` sandbox may reach (resolved on the host); empty otherwise.
    pub allowed: Vec<Pin>,
    pub limits: Limits,
    pub binds: Vec<Bind>,
    /// The trial's `/logs/verifier` on the host, shown to the verifier only; the agent's
    /// processes see a decoy (`<dir>/decoy`) at that path.
    pub verifier_logs: Option<PathBuf>,
    /// A disk of this many MB for the writable layer (trials on image layers); `None`: the
    /// layer lives on the host's file system (image builds, `--base host`).
    pub disk_mb: Option<u64>,
    /// Remove `dir` at teardown (trials); an image build keeps its upper layer.
    pub remove_dir: bool,
    /// The compose group's network this sandbox joins, and the names of its services.
    pub group: GroupNetwork,
}

#[derive(Debug)]
pub struct SandboxBackend {
    config: SandboxConfig,
    /// One build at a time per cache key within this process.
    pub(crate) build_locks: Mutex<std::collections::HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// The most one `copy_out` brings to the host.
const MAX_COPY_OUT_BYTES: u64 = 1 << 30;

/// A server's refusal to read `path`, as an I/O error naming it.
fn reply_io(path: &str, e: protocol::ReplyError) -> EnvError {
    EnvError::Io {
        context: format!("copy {path} out of the sandbox"),
        source: std::io::Error::other(e.message),
    }
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> EnvError {
    let context = context.into();
    move |source| EnvError::Io { context, source }
}

impl SandboxBackend {
    /// Creates the state directories. Needs root (namespaces, mounts) at `start` time.
    pub fn new(mut config: SandboxConfig) -> Result<Self, EnvError> {
        for dir in [&config.cache_dir, &config.scratch_dir, &config.image_store] {
            std::fs::create_dir_all(dir).map_err(io(format!("create {}", dir.display())))?;
        }
        config.image_store = std::fs::canonicalize(&config.image_store)
            .map_err(io(format!("resolve {}", config.image_store.display())))?;
        remove_stale_sandboxes(&config.scratch_dir);
        config.cache_dir = std::fs::canonicalize(&config.cache_dir)
            .map_err(io(format!("resolve {}", config.cache_dir.display())))?;
        config.scratch_dir = std::fs::canonicalize(&config.scratch_dir)
            .map_err(io(format!("resolve {}", config.scratch_dir.display())))?;
        Ok(SandboxBackend {
            config,
            build_locks: Mutex::new(std::collections::HashMap::new()),
        })
    }

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
            let host = trial_dir.join(name);
            std::fs::create_dir_all(&host).map_err(io(format!("create {}", host.display())))?;
            if name != "verifier" {
                binds.push(Bind {
                    host,
                    inside: format!("/logs/{name}"),
                    read_only: false,
                });
            }
        }
        let mut env = image.env.clone();
        env.extend(spec.env.iter().cloned());
        let (network, allowed, allow_notes) = match &spec.network {
            NetworkPolicy::Off => (Network::None, Vec::new(), Vec::new()),
            NetworkPolicy::Public => (Network::Private, Vec::new(), Vec::new()),
            NetworkPolicy::Allowlist(hosts) => {
                let (pins, notes) = super::netns::resolve_allowed(hosts).await;
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
                        Some(spec.storage_mb.unwrap_or(super::disk::DEFAULT_STORAGE_MB))
                    }
                    ImageRoot::Host { .. } | ImageRoot::Engine(_) => None,
                },
                remove_dir: true,
                group: spec.group.clone(),
            })
            .await?;
        handle.notes.extend(image.notes.iter().cloned());
        handle.notes.extend(allow_notes);
        Ok(handle)
    }

    pub(crate) async fn launch(&self, launch: Launch) -> Result<SandboxHandle, EnvError> {
        let join_network = match &launch.group.join {
            None => None,
            Some(SharedNetwork::Namespace(netns)) => Some(netns.clone()),
            Some(SharedNetwork::Container(_)) => {
                return Err(EnvError::Unsupported(
                    "a sandbox cannot join a docker container's network".into(),
                ));
            }
        };
        let dir = &launch.dir;
        let sub = |name: &str| dir.join(name);
        let host_layer = match &launch.root {
            ImageRoot::Host { layer } => layer.clone(),
            ImageRoot::Layers(_) | ImageRoot::Engine(_) => None,
        };
        let mut dirs = vec![sub("upper"), sub("work"), sub("root"), sub("inbox")];
        if host_layer.is_some() {
            dirs.extend([sub("image"), sub("image-work")]);
        }
        // The lock first: a killed run leaves folders the next start can tell are stale.
        std::fs::create_dir_all(dir).map_err(io(format!("create {}", dir.display())))?;
        let held = if launch.remove_dir {
            Some(hold_lock(dir)?)
        } else {
            None
        };
        for d in &dirs {
            std::fs::create_dir_all(d).map_err(io(format!("create {}", d.display())))?;
        }
        let name = cgroup_name(dir);
        let hostname = format!("geode-{name}");
        let mut binds = launch.binds.clone();
        if launch.verifier_logs.is_some() {
            let decoy = sub("decoy");
            std::fs::create_dir_all(&decoy).map_err(io(format!("create {}", decoy.display())))?;
            binds.push(Bind {
                host: decoy,
                inside: "/logs/verifier".into(),
                read_only: false,
            });
        }
        let root = match &launch.root {
            ImageRoot::Layers(lower) => {
                // What docker gives every container: its own hosts file, and the host's
                // resolver when it has the network.
                let hosts = sub("hosts");
                let mut text = format!(
                    "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{hostname}\n"
                );
                // The compose group's services: all on the group's loopback.
                for name in &launch.group.names {
                    text.push_str(&format!("127.0.0.1\t{name}\n"));
                }
                // An allowlist's names, pinned to what they resolved to on the host.
                for pin in &launch.allowed {
                    if let Some(name) = &pin.name {
                        text.push_str(&format!("{}\t{name}\n", pin.addr));
                    }
                }
                std::fs::write(&hosts, text).map_err(io(format!("write {}", hosts.display())))?;
                binds.push(Bind {
                    host: hosts,
                    inside: "/etc/hosts".into(),
                    read_only: false,
                });
                match launch.network {
                    Network::Host if Path::new("/etc/resolv.conf").exists() => {
                        binds.push(Bind {
                            host: PathBuf::from("/etc/resolv.conf"),
                            inside: "/etc/resolv.conf".into(),
                            read_only: true,
                        });
                    }
                    Network::Private | Network::Allowlist => {
                        let resolv = sub("resolv.conf");
                        let text = if launch.network == Network::Private {
                            format!("nameserver {}\n", super::netns::SLIRP_DNS)
                        } else {
                            "# allowlist: no resolver; the allowed names are in /etc/hosts\n"
                                .to_string()
                        };
                        std::fs::write(&resolv, text)
                            .map_err(io(format!("write {}", resolv.display())))?;
                        binds.push(Bind {
                            host: resolv,
                            inside: "/etc/resolv.conf".into(),
                            read_only: true,
                        });
                    }
                    _ => {}
                }
                RootSpec::Layers {
                    lower: lower.clone(),
                }
            }
            ImageRoot::Engine(id) => {
                return Err(EnvError::Unsupported(format!(
                    "the image {id} lives in a docker engine: run it with --env docker"
                )));
            }
            ImageRoot::Host { .. } => {
                let mut hide = vec![
                    self.config.cache_dir.clone(),
                    self.config.scratch_dir.clone(),
                    self.config.image_store.clone(),
                ];
                hide.extend(self.config.hide.iter().cloned());
                RootSpec::Host {
                    image: host_layer.map(|layer| ImageMount {
                        layer,
                        work: sub("image-work"),
                        mount: sub("image"),
                    }),
                    hide,
                    fresh_dirs: self.config.fresh_dirs.clone(),
                }
            }
        };
        let disk = match launch.disk_mb {
            Some(mb) => {
                let cache = self.config.cache_dir.clone();
                let image = sub("disk.img");
                let to = image.clone();
                tokio::task::spawn_blocking(move || {
                    super::disk::clone_sparse(&super::disk::template(&cache, mb)?, &to)
                })
                .await
                .map_err(|e| EnvError::Lost(format!("disk task: {e}")))??;
                Some(image)
            }
            None => None,
        };
        // An image sandbox runs in a user namespace: its layers' owners and the host folders
        // it writes to must be host ids of its users (see `ids`).
        let userns = matches!(launch.root, ImageRoot::Layers(_));
        if userns {
            let mut lower = match &launch.root {
                ImageRoot::Layers(lower) => lower.clone(),
                ImageRoot::Host { .. } | ImageRoot::Engine(_) => Vec::new(),
            };
            // A writable layer on the host may come filled: a Debian bootstrap's new root.
            if launch.disk_mb.is_none() {
                lower.push(sub("upper"));
            }
            let writable: Vec<PathBuf> = binds
                .iter()
                .filter(|b| !b.read_only)
                .map(|b| b.host.clone())
                .chain(launch.verifier_logs.clone())
                .collect();
            tokio::task::spawn_blocking(move || {
                for layer in &lower {
                    super::ids::shift_layer(layer)
                        .map_err(io(format!("shift the owners of {}", layer.display())))?;
                }
                for host in &writable {
                    super::ids::give_to_root(host)
                        .map_err(io(format!("give {} to the sandbox's root", host.display())))?;
                }
                Ok::<_, EnvError>(())
            })
            .await
            .map_err(|e| EnvError::Lost(format!("ownership task: {e}")))??;
        }
        let mut cgroups = Cgroups::create(&name, launch.limits);
        let spec = ServerSpec {
            schema: protocol::SERVER_SCHEMA.into(),
            geode_exe: self.config.geode_exe.clone(),
            root_mount: sub("root"),
            root,
            upper: sub("upper"),
            work: sub("work"),
            inbox: sub("inbox"),
            binds,
            verifier_logs: launch.verifier_logs.clone(),
            disk,
            hostname,
            network: launch.network,
            join_network,
            cgroup_procs: cgroups.procs.clone(),
            rlimit_as: cgroups.rlimit_as,
            workdir: launch.workdir.clone(),
            env: launch.env.clone(),
            user: launch.user.clone(),
            userns,
        };
        let client = match ServerClient::start(&self.config.geode_exe, &spec).await {
            Ok(client) => client,
            Err(e) => {
                cgroups.remove(Duration::from_secs(2));
                if launch.remove_dir {
                    let _ = std::fs::remove_dir_all(dir);
                }
                return Err(e);
            }
        };
        let slirp = match launch.network {
            // A joined namespace has its network (and its routes) from the group's first.
            _ if launch.group.join.is_some() => None,
            Network::Private | Network::Allowlist => match start_network(&client, &launch).await {
                Ok(child) => Some(child),
                Err(e) => {
                    drop(client);
                    cgroups.remove(Duration::from_secs(2));
                    if launch.remove_dir {
                        let _ = std::fs::remove_dir_all(dir);
                    }
                    return Err(e);
                }
            },
            _ => None,
        };
        let client = Arc::new(client);
        let mut notes = std::mem::take(&mut cgroups.notes);
        notes.extend(client.ready.notes.iter().cloned());
        let workspace = Arc::new(SandboxWorkspace::new(
            Arc::clone(&client),
            PathBuf::from(&launch.workdir),
        ));
        Ok(SandboxHandle {
            server_pid: client.pid().await,
            client,
            cgroups: Mutex::new(cgroups),
            inbox: sub("inbox"),
            staged: AtomicU64::new(0),
            workspace,
            notes,
            launch,
            _slirp: slirp,
            _lock: held,
            torn_down: false,
        })
    }
}

/// slirp4netns for a sandbox with network, and an allowlist's routes once it is up.
async fn start_network(
    client: &ServerClient,
    launch: &Launch,
) -> Result<tokio::process::Child, EnvError> {
    let pid = client.pid().await;
    let slirp = super::netns::start_slirp(pid).await?;
    if launch.network == Network::Allowlist {
        let addrs: Vec<_> = launch.allowed.iter().map(|pin| pin.addr).collect();
        let pid = pid.ok_or_else(|| EnvError::Lost("the sandbox server has no pid".into()))?;
        super::netns::allow_only(pid, &addrs).map_err(|message| EnvError::SetupFailed {
            step: "network".into(),
            message,
        })?;
    }
    Ok(slirp)
}

#[async_trait]
impl Backend for SandboxBackend {
    fn name(&self) -> &'static str {
        "sandbox"
    }

    async fn prepare(&self, spec: &EnvironmentSpec) -> Result<PreparedImage, EnvError> {
        super::build::prepare(self, spec).await
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

/// One running sandbox. Dropping it without [`Sandbox::teardown`] still kills every process
/// (the server dies with its handle, init with the server); cleanup of the scratch directory
/// then happens on a background thread.
#[derive(Debug)]
pub struct SandboxHandle {
    client: Arc<ServerClient>,
    server_pid: Option<u32>,
    cgroups: Mutex<Cgroups>,
    inbox: PathBuf,
    staged: AtomicU64,
    workspace: Arc<SandboxWorkspace>,
    notes: Vec<String>,
    launch: Launch,
    /// The network helper of a trial with network; it dies with the handle.
    _slirp: Option<tokio::process::Child>,
    /// Held while the sandbox lives (see [`remove_stale_sandboxes`]).
    _lock: Option<nix::fcntl::Flock<std::fs::File>>,
    torn_down: bool,
}

impl SandboxHandle {
    /// `pid:[inode]` of the sandbox's pid namespace: a host process whose
    /// `/proc/PID/ns/pid` reads the same belongs to this sandbox.
    pub fn pid_namespace(&self) -> &str {
        &self.client.ready.pid_namespace
    }

    /// Host pid of the namespace's init.
    pub fn init_pid(&self) -> u32 {
        self.client.ready.init_pid
    }

    /// Host pid of the sandbox server.
    pub fn server_pid(&self) -> Option<u32> {
        self.server_pid
    }

    /// Differences from what was asked (limits applied another way, `lo` down, FROM image
    /// differences), for the trial's metadata.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// This sandbox's scratch directory (its writable layer is `upper/`).
    pub fn scratch_dir(&self) -> &Path {
        &self.launch.dir
    }

    pub fn workdir(&self) -> &str {
        &self.launch.workdir
    }

    /// Run a command with a chosen shell and user (image builds: `/bin/sh -c`, USER).
    pub(crate) async fn exec_as(
        &self,
        req: ExecRequest,
        shell: Option<Vec<String>>,
        user: Option<String>,
        cancel: CancellationToken,
    ) -> Result<ExecResult, EnvError> {
        let spec = exec_spec(req, shell, user, View::Tool);
        self.client.exec(spec, cancel).await
    }

    /// Copy `host_src` into the inbox under a fresh name; the name and the host path.
    /// Copy `host_src` into the inbox. `mounted`: the copy is shown inside as it is (the
    /// verifier's `/tests`), so in a user namespace it is a real copy given to container root
    /// (hard links would hand the task's own files over); else the server copies it into place.
    async fn stage(&self, host_src: &Path, mounted: bool) -> Result<(String, PathBuf), EnvError> {
        let item = format!("item-{}", self.staged.fetch_add(1, Ordering::Relaxed));
        let staged = self.inbox.join(&item);
        let src = host_src.to_path_buf();
        let stage_to = staged.clone();
        let own = mounted && matches!(self.launch.root, ImageRoot::Layers(_));
        tokio::task::spawn_blocking(move || {
            super::fsops::copy_tree_with(&src, &stage_to, !own)?;
            if own {
                for entry in walkdir::WalkDir::new(&stage_to).follow_links(false) {
                    super::ids::give_to_root(entry.map_err(std::io::Error::other)?.path())?;
                }
            }
            Ok::<_, std::io::Error>(())
        })
        .await
        .map_err(|e| EnvError::Lost(format!("staging task: {e}")))?
        .map_err(io(format!("stage {} for the sandbox", host_src.display())))?;
        Ok((item, staged))
    }

    /// A folder's entries, or `None` for what is not a folder.
    async fn list(&self, path: &str) -> Result<Option<Vec<protocol::DirEntry>>, EnvError> {
        let op = Op::ListDir {
            path: path.to_string(),
            scope: None,
        };
        match self.client.call(op).await? {
            Reply::Dir { entries } => Ok(Some(entries)),
            Reply::Error(e) if e.kind == protocol::ErrorKind::NotADirectory => Ok(None),
            Reply::Error(e) => Err(reply_io(path, e)),
            other => Err(EnvError::Lost(format!("unexpected reply {other:?}"))),
        }
    }

    /// One regular file out to `host` (created anew, never through a link), within `budget`.
    async fn copy_file_out(
        &self,
        path: &str,
        host: &Path,
        budget: &mut u64,
        left_out: &mut Vec<String>,
    ) -> Result<(), EnvError> {
        let op = Op::ReadFile {
            path: path.to_string(),
            scope: None,
        };
        let bytes = match self.client.call(op).await? {
            Reply::File { data_b64 } => protocol::decode(&data_b64).map_err(EnvError::Lost)?,
            Reply::Error(e) if e.kind == protocol::ErrorKind::InvalidInput => {
                left_out.push(format!("{path}: {}", e.message));
                return Ok(());
            }
            Reply::Error(e) => return Err(reply_io(path, e)),
            other => return Err(EnvError::Lost(format!("unexpected reply {other:?}"))),
        };
        let Some(rest) = budget.checked_sub(bytes.len() as u64) else {
            left_out.push(format!(
                "{path}: over the {} MiB copied out of one sandbox",
                MAX_COPY_OUT_BYTES >> 20
            ));
            return Ok(());
        };
        *budget = rest;
        geode_graders::safe_fs::write(host, &bytes).map_err(io(format!("write {}", host.display())))
    }

    /// Stage `host_src` in the inbox and have the server copy it to `dst` inside.
    pub(crate) async fn install(
        &self,
        host_src: &Path,
        dst: &str,
        merge: bool,
    ) -> Result<(), EnvError> {
        if !dst.starts_with('/') {
            return Err(EnvError::Io {
                context: format!("copy into the sandbox at {dst:?}"),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "not an absolute path",
                ),
            });
        }
        let (item, staged) = self.stage(host_src, false).await?;
        let reply = self
            .client
            .call(Op::Install {
                from: item,
                to: dst.to_string(),
                merge,
            })
            .await;
        let _ = tokio::task::spawn_blocking(move || remove_any(&staged)).await;
        match reply? {
            Reply::Done => Ok(()),
            Reply::Error(e) => Err(EnvError::Io {
                context: format!("copy {} to {dst} in the sandbox", host_src.display()),
                source: std::io::Error::new(e.kind.io_kind(), e.message),
            }),
            other => Err(EnvError::Lost(format!("unexpected reply {other:?}"))),
        }
    }

    pub(crate) async fn shutdown(&mut self) -> Result<TeardownReport, EnvError> {
        let started = Instant::now();
        self.torn_down = true;
        let killed = match self.client.call(Op::Shutdown).await {
            Ok(Reply::Killed { count }) => count,
            _ => 0,
        };
        self.client.wait_exit(Duration::from_secs(10)).await;
        let mut cgroups = std::mem::take(&mut *lock(&self.cgroups));
        let dir = self.launch.dir.clone();
        let remove_dir = self.launch.remove_dir;
        let (failures, removed) = tokio::task::spawn_blocking(move || {
            let failures = cgroups.remove(Duration::from_secs(5));
            let removed = if remove_dir { remove_any(&dir) } else { Ok(()) };
            (failures, removed)
        })
        .await
        .map_err(|e| EnvError::Lost(format!("teardown task: {e}")))?;
        for failure in failures {
            tracing::warn!("{failure}");
        }
        removed.map_err(io(format!("remove {}", self.launch.dir.display())))?;
        Ok(TeardownReport {
            killed_processes: killed,
            duration: started.elapsed(),
        })
    }
}

/// The wire form of a harness-side command (no scope: only the agent's workspace has one).
fn exec_spec(
    req: ExecRequest,
    shell: Option<Vec<String>>,
    user: Option<String>,
    view: View,
) -> ExecSpec {
    ExecSpec {
        command: req.command,
        shell,
        cwd: req.cwd.map(|c| c.to_string_lossy().into_owned()),
        timeout_ms: u64::try_from(req.timeout.as_millis()).unwrap_or(u64::MAX),
        output_cap: req.output_cap,
        env: req.env,
        user,
        scope: None,
        view,
    }
}

/// The lock every live sandbox holds on `<scratch>/<id>/lock`: held by the harness process
/// that started it, so it is free exactly when that process is gone.
fn hold_lock(dir: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, EnvError> {
    let path = dir.join("lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io(format!("create {}", path.display())))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(
        |(_, errno)| EnvError::Io {
            context: format!("lock {}", path.display()),
            source: std::io::Error::from(errno),
        },
    )
}

/// Scratch folders and cgroups of sandboxes whose harness was killed (`kill -9` of `geode`
/// leaves them; the namespaces themselves die with their init): removed on the next start.
fn remove_stale_sandboxes(scratch: &Path) {
    let Ok(entries) = std::fs::read_dir(scratch) else {
        return;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        if !dir.is_dir() {
            continue;
        }
        // A folder without a lock file is one being made right now (its lock comes a moment
        // after it), or one whose run was killed in that moment: stale once a minute old.
        if !dir.join("lock").exists() {
            let young = std::fs::metadata(&dir)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_none_or(|age| age < Duration::from_secs(60));
            if young {
                continue;
            }
            let _ = remove_any(&dir);
            continue;
        }
        let Ok(_held) = hold_lock(&dir) else {
            continue;
        };
        let name = cgroup_name(&dir);
        let _ = Cgroups::leftovers(&name).remove(Duration::from_millis(200));
        let _ = remove_any(&dir);
    }
    // Groups whose folder is gone: a minute leaves alone what another run is still setting up.
    Cgroups::sweep_orphans(Duration::from_secs(60));
}

/// The uuid's tail: unique enough for a hostname and cgroup name, and free of dots.
fn cgroup_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| {
            let chars: Vec<char> = n.to_string_lossy().chars().collect();
            chars[chars.len().saturating_sub(12)..]
                .iter()
                .collect::<String>()
        })
        .unwrap_or_else(|| "sandbox".into())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

fn remove_any(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
    }
}

pub(crate) fn exec_output(r: ExecResult) -> ExecOutput {
    ExecOutput {
        exit_code: r.exit_code,
        stdout: r.stdout,
        stderr: r.stderr,
        timed_out: r.timed_out,
        cancelled: r.cancelled,
        truncated: r.truncated,
        duration_ms: r.duration_ms,
    }
}

#[async_trait]
impl Sandbox for SandboxHandle {
    fn workspace(&self) -> Arc<dyn Workspace> {
        Arc::clone(&self.workspace) as Arc<dyn Workspace>
    }

    async fn exec(
        &self,
        req: ExecRequest,
        cancel: CancellationToken,
    ) -> Result<ExecOutput, EnvError> {
        self.exec_as(req, None, None, cancel).await.map(exec_output)
    }

    async fn copy_in(&self, host_src: &Path, sandbox_dst: &str) -> Result<(), EnvError> {
        self.install(host_src, sandbox_dst, false).await
    }

    async fn copy_out(
        &self,
        sandbox_src: &str,
        host_dst: &Path,
        skip: &(dyn for<'n> Fn(&'n str) -> bool + Sync),
    ) -> Result<Vec<String>, EnvError> {
        let mut left_out = Vec::new();
        let mut budget = MAX_COPY_OUT_BYTES;
        // The source itself may be a folder or a file (a link to either is followed: it is
        // what the task names).
        let mut pending = match self.list(sandbox_src).await? {
            Some(entries) => vec![(sandbox_src.to_string(), host_dst.to_path_buf(), entries)],
            None => {
                self.copy_file_out(sandbox_src, host_dst, &mut budget, &mut left_out)
                    .await?;
                return Ok(left_out);
            }
        };
        while let Some((inside, host, entries)) = pending.pop() {
            std::fs::create_dir(&host).map_err(io(format!("create {}", host.display())))?;
            for entry in entries {
                let from = format!("{}/{}", inside.trim_end_matches('/'), entry.name);
                let to = host.join(&entry.name);
                if skip(&entry.name) {
                    continue;
                }
                if entry.is_symlink || !(entry.is_dir || entry.is_file) {
                    left_out.push(format!("{from}: a link or special file"));
                } else if entry.is_dir {
                    let listed = self.list(&from).await?.unwrap_or_default();
                    pending.push((from, to, listed));
                } else {
                    self.copy_file_out(&from, &to, &mut budget, &mut left_out)
                        .await?;
                }
            }
        }
        Ok(left_out)
    }

    async fn run_verifier(&self, tests: &Path, req: ExecRequest) -> Result<ExecOutput, EnvError> {
        let (item, staged) = self.stage(tests, true).await?;
        let spec = exec_spec(req, None, None, View::Verifier { tests: Some(item) });
        let out = self.client.exec(spec, CancellationToken::new()).await;
        let _ = tokio::task::spawn_blocking(move || remove_any(&staged)).await;
        out.map(exec_output)
    }

    fn verifier_decoy(&self) -> Option<PathBuf> {
        self.launch
            .verifier_logs
            .as_ref()
            .map(|_| self.launch.dir.join("decoy"))
    }

    async fn kill_all_processes(&self) -> Result<usize, EnvError> {
        match self.client.call(Op::KillAll).await? {
            Reply::Killed { count } => Ok(count),
            Reply::Error(e) => Err(EnvError::Lost(e.message)),
            other => Err(EnvError::Lost(format!("unexpected reply {other:?}"))),
        }
    }

    async fn teardown(mut self: Box<Self>) -> Result<TeardownReport, EnvError> {
        self.shutdown().await
    }

    async fn network_attempts(&self) -> u64 {
        if !matches!(self.launch.network, Network::None | Network::Allowlist) {
            return 0;
        }
        match self.client.call(Op::UnroutedPackets).await {
            Ok(Reply::Counted { count }) => count,
            _ => 0,
        }
    }

    fn shared_network(&self) -> Option<SharedNetwork> {
        self.server_pid
            .map(|pid| SharedNetwork::Namespace(PathBuf::from(format!("/proc/{pid}/ns/net"))))
    }

    async fn changed_verifier_inputs(&self, exempt: &str) -> Vec<String> {
        let op = Op::ChangedInputs {
            exempt: exempt.to_string(),
        };
        match self.client.call(op).await {
            Ok(Reply::Changed { paths }) => paths,
            _ => Vec::new(),
        }
    }
}

impl Drop for SandboxHandle {
    fn drop(&mut self) {
        if self.torn_down {
            return;
        }
        // The server gets SIGKILL when its client goes (kill_on_drop), init sees its pipe
        // close and takes the namespace down; once init is gone, clean up what is left.
        if let Some(pid) = self.server_pid.and_then(|p| i32::try_from(p).ok()) {
            // Not yet reaped (our client holds the child), so the pid is still this server's,
            // even while the workspace keeps the client alive.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let init = self.client.ready.init_pid;
        let mut cgroups = std::mem::take(&mut *lock(&self.cgroups));
        let dir = self.launch.dir.clone();
        let remove_dir = self.launch.remove_dir;
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(30);
            while Path::new(&format!("/proc/{init}")).exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            cgroups.remove(Duration::from_secs(5));
            if remove_dir {
                let _ = remove_any(&dir);
            }
        });
    }
}
