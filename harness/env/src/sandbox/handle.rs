//! A running sandbox as the harness holds it: the [`Sandbox`] the trial uses, over the
//! server's client.
//!
//! Files cross into the sandbox through its inbox (staged on the host, copied into place by
//! the server) and out of it as the server reads them, one file at a time within a budget.
//! Dropping a handle still ends the sandbox; teardown only does it in order.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use geode_runtime::tools::workspace::{ExecOutput, ExecRequest, Workspace};
use tokio_util::sync::CancellationToken;

use super::client::ServerClient;
use super::io;
use super::launch_spec::Launch;
use super::protocol::{self, ExecResult, ExecSpec, Network, Op, Reply, View};
use super::scratch::remove_any;
use super::workspace::SandboxWorkspace;
use crate::cgroup::Cgroups;
use crate::{ChangedInputs, EnvError, ImageRoot, Judgment, Sandbox, SharedNetwork, TeardownReport};

/// The most one `copy_out` brings to the host: bytes, and files (each an inode on the host).
const MAX_COPY_OUT_BYTES: u64 = 1 << 30;
const MAX_COPY_OUT_FILES: u64 = 100_000;

/// What is left of one `copy_out`'s allowance.
struct CopyBudget {
    bytes: u64,
    files: u64,
}

/// Move what `from` holds into `to` where `to` has nothing of that name yet, folder by folder.
fn merge_new(from: &Path, to: &Path) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(from) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let dest = to.join(entry.file_name());
        match std::fs::symlink_metadata(&dest) {
            Err(_) => std::fs::rename(entry.path(), &dest)?,
            Ok(m) if m.is_dir() && entry.file_type()?.is_dir() => merge_new(&entry.path(), &dest)?,
            Ok(_) => {}
        }
    }
    Ok(())
}

/// A server's refusal to read `path`, as an I/O error naming it.
fn reply_io(path: &str, e: protocol::ReplyError) -> EnvError {
    EnvError::Io {
        context: format!("copy {path} out of the sandbox"),
        source: std::io::Error::other(e.message),
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
    pub(super) notes: Vec<String>,
    launch: Launch,
    /// The network helper of a trial with network; it dies with the handle.
    _slirp: Option<tokio::process::Child>,
    /// Held while the sandbox lives (see [`super::scratch::remove_stale_sandboxes`]).
    _lock: Option<nix::fcntl::Flock<std::fs::File>>,
    torn_down: bool,
    /// The `on_disk` folders were brought back to the host.
    logs_synced: std::sync::atomic::AtomicBool,
}

impl SandboxHandle {
    /// The handle of a sandbox whose server is up (and whose network is, when it has one).
    pub(super) async fn new(
        client: Arc<ServerClient>,
        mut cgroups: Cgroups,
        launch: Launch,
        slirp: Option<tokio::process::Child>,
        held: Option<nix::fcntl::Flock<std::fs::File>>,
    ) -> Self {
        let mut notes: Vec<String> = crate::rootless::note().into_iter().collect();
        notes.append(&mut cgroups.notes);
        notes.extend(client.ready.notes.iter().cloned());
        let workspace = Arc::new(SandboxWorkspace::new(
            Arc::clone(&client),
            PathBuf::from(&launch.workdir),
        ));
        SandboxHandle {
            server_pid: client.pid().await,
            client,
            cgroups: Mutex::new(cgroups),
            inbox: launch.dir.join("inbox"),
            staged: AtomicU64::new(0),
            workspace,
            notes,
            launch,
            _slirp: slirp,
            _lock: held,
            torn_down: false,
            logs_synced: std::sync::atomic::AtomicBool::new(false),
        }
    }

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

    /// The work directory inside the sandbox (the image's WORKDIR).
    pub fn workdir(&self) -> &str {
        &self.launch.workdir
    }

    /// Run a command with a chosen shell and user (image builds: `/bin/sh -c`, USER); its
    /// whole process group ends with it, as a build step's container does.
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
            crate::fsops::copy_tree_with(&src, &stage_to, !own)?;
            if own {
                for entry in walkdir::WalkDir::new(&stage_to).follow_links(false) {
                    crate::ids::give_to_root(entry.map_err(std::io::Error::other)?.path())?;
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

    /// One regular file out to `host` (created anew, never through a link), within `budget`,
    /// in parts of at most [`crate::fsops::CHUNK_MAX`], each written as it
    /// arrives: neither the server nor the harness ever holds the file whole. A file over what
    /// is left of `budget` is left out (its size is what the server saw, so a sparse file counts
    /// what it would take on the host).
    async fn copy_file_out(
        &self,
        path: &str,
        host: &Path,
        budget: &mut CopyBudget,
        left_out: &mut Vec<String>,
    ) -> Result<(), EnvError> {
        use std::io::Write;
        if budget.files == 0 {
            left_out.push(format!(
                "{path}: over the {MAX_COPY_OUT_FILES} files copied out of one sandbox"
            ));
            return Ok(());
        }
        budget.files -= 1;
        let mut file: Option<std::fs::File> = None;
        let mut offset = 0u64;
        loop {
            let op = Op::ReadChunk {
                path: path.to_string(),
                offset,
                len: crate::fsops::CHUNK_MAX,
            };
            let (bytes, size) = match self.client.call(op).await? {
                Reply::Chunk { data_b64, size } => {
                    (protocol::decode(&data_b64).map_err(EnvError::Lost)?, size)
                }
                Reply::Error(e) if e.kind == protocol::ErrorKind::InvalidInput => {
                    left_out.push(format!("{path}: {}", e.message));
                    return Ok(());
                }
                Reply::Error(e) => return Err(reply_io(path, e)),
                other => return Err(EnvError::Lost(format!("unexpected reply {other:?}"))),
            };
            let out = match file.as_mut() {
                Some(out) => out,
                None => {
                    if size > budget.bytes {
                        left_out.push(format!(
                            "{path}: {} MiB, over the {} MiB left of what is copied out of one sandbox",
                            size >> 20,
                            budget.bytes >> 20
                        ));
                        return Ok(());
                    }
                    file.insert(
                        geode_graders::safe_fs::create(host)
                            .map_err(io(format!("create {}", host.display())))?,
                    )
                }
            };
            let n = bytes.len() as u64;
            // The file grew past what was counted (a process still writing): cut it there.
            let Some(rest) = budget.bytes.checked_sub(n) else {
                left_out.push(format!("{path}: cut where it outgrew the copy's budget"));
                return Ok(());
            };
            budget.bytes = rest;
            out.write_all(&bytes)
                .map_err(io(format!("write {}", host.display())))?;
            offset += n;
            if n == 0 || offset >= size {
                return Ok(());
            }
        }
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
        for note in self.sync_logs().await {
            tracing::warn!("{note}");
        }
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
        keep_background: false,
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
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
    fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }

    fn workspace(&self) -> Arc<dyn Workspace> {
        Arc::clone(&self.workspace) as Arc<dyn Workspace>
    }

    async fn exec(
        &self,
        req: ExecRequest,
        cancel: CancellationToken,
    ) -> Result<ExecOutput, EnvError> {
        // A trial's command, as `docker exec` runs it: what it leaves in the background lives.
        let spec = ExecSpec {
            keep_background: true,
            ..exec_spec(req, None, None, View::Tool)
        };
        self.client.exec(spec, cancel).await.map(exec_output)
    }

    async fn copy_in(&self, host_src: &Path, sandbox_dst: &str) -> Result<(), EnvError> {
        self.install(host_src, sandbox_dst, false).await
    }

    async fn start_display(&self, width: u32, height: u32) -> Result<(), EnvError> {
        let req = ExecRequest {
            command: super::display::start_script(width, height),
            cwd: None,
            timeout: Duration::from_secs(60),
            output_cap: 4096,
            env: Vec::new(),
        };
        let out = self
            .exec_as(req, None, None, CancellationToken::new())
            .await?;
        if out.exit_code != Some(0) {
            return Err(EnvError::SetupFailed {
                step: format!("environment.display = \"{width}x{height}\""),
                message: format!("{}{}", out.stdout, out.stderr).trim().to_string(),
            });
        }
        self.workspace.set_display(super::display::DISPLAY);
        Ok(())
    }

    async fn copy_out(
        &self,
        sandbox_src: &str,
        host_dst: &Path,
        skip: &(dyn for<'n> Fn(&'n str) -> bool + Sync),
    ) -> Result<Vec<String>, EnvError> {
        let mut left_out = Vec::new();
        let mut budget = CopyBudget {
            bytes: MAX_COPY_OUT_BYTES,
            files: MAX_COPY_OUT_FILES,
        };
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

    async fn listen_inside(&self, port: u16) -> Result<std::net::TcpListener, EnvError> {
        let pid = self.client.ready.init_pid;
        tokio::task::spawn_blocking(move || super::netns::listen_in(pid, port))
            .await
            .map_err(|e| EnvError::Lost(format!("listening task: {e}")))?
            .map_err(EnvError::Lost)
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

    async fn sync_logs(&self) -> Vec<String> {
        use std::sync::atomic::Ordering;
        if self.launch.disk_mb.is_none() || self.logs_synced.swap(true, Ordering::SeqCst) {
            return Vec::new();
        }
        let mut notes = Vec::new();
        for bind in self
            .launch
            .binds
            .iter()
            .filter(|b| b.on_disk && !b.read_only)
        {
            // Copied beside the host folder first, then merged in: a copy out makes its
            // destination, and the host folder may hold what the harness put there.
            let name = bind.host.file_name().unwrap_or_default().to_string_lossy();
            let landing = bind.host.with_file_name(format!(".{name}.sync"));
            let _ = remove_any(&landing);
            match self.copy_out(&bind.inside, &landing, &|_| false).await {
                Ok(left_out) => notes.extend(
                    left_out
                        .into_iter()
                        .map(|l| format!("{}: left out {l}", bind.inside)),
                ),
                Err(e) => notes.push(format!("{} not brought back: {e}", bind.inside)),
            }
            if let Err(e) = merge_new(&landing, &bind.host) {
                notes.push(format!("{} not brought back: {e}", bind.inside));
            }
            let _ = remove_any(&landing);
        }
        notes
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

    async fn changed_verifier_inputs(&self, exempt: &str, when: Judgment) -> ChangedInputs {
        let op = Op::ChangedInputs {
            exempt: exempt.to_string(),
            when,
        };
        match self.client.call(op).await {
            Ok(Reply::Changed(changed)) => changed,
            _ => ChangedInputs::default(),
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
