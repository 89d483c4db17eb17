//! The workspace the built-in tools act on: files under one root and process execution.
//!
//! The runtime ships `LocalWorkspace` (a directory on this machine). The harness hands the same
//! tools a sandboxed workspace by implementing this trait, so no tool knows where it runs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::tools::computer::action::{ComputerAction, ComputerError};
use crate::tools::computer::screenshot::Screenshot;
use crate::tools::computer::x11;
use crate::tools::confine::Confinement;
pub use crate::tools::confine::{CommandSandbox, SandboxPolicy};
pub use crate::tools::output::OutputCapture;
use crate::tools::output::OutputSink;

/// A model-supplied path that does not stay inside the workspace root.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("path {path:?} is outside the workspace root: {why}")]
pub struct ScopeViolation {
    /// The path as the model gave it.
    pub path: String,
    /// What is wrong with it, for the model to read.
    pub why: String,
}

/// Why a workspace operation failed; the text goes back to the model.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// A file system operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done (`read`, `write`, `list`).
        op: &'static str,
        /// The path it was done to, as the model sees it.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The command's process could not be started.
    #[error("could not start process: {0}")]
    Spawn(std::io::Error),
    /// The command sandbox could not be set up or entered.
    #[error(
        "the command sandbox could not be made ({0}); `--sandbox off` (or `sandbox = \"off\"` \
         in the user's configuration) runs commands unconfined"
    )]
    Sandbox(std::io::Error),
    /// A path outside the workspace root.
    #[error(transparent)]
    Scope(#[from] ScopeViolation),
}

/// One shell command to run in the workspace.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    /// Run by `bash -c`.
    pub command: String,
    /// Working directory relative to the root; the root itself when `None`.
    pub cwd: Option<PathBuf>,
    /// The whole process group is killed when this passes.
    pub timeout: Duration,
    /// Bytes kept of stdout and of stderr each; the rest is dropped with a visible marker.
    pub output_cap: usize,
    /// Variables set for the command on top of the inherited environment.
    pub env: Vec<(String, String)>,
}

/// How a command ended and what it printed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExecOutput {
    /// `None` when the process was killed by a signal (timeout or cancellation included).
    pub exit_code: Option<i32>,
    /// Standard output as lossy UTF-8, with a marker where it was cut.
    pub stdout: String,
    /// Standard error as lossy UTF-8, with a marker where it was cut.
    pub stderr: String,
    /// Whether the command was killed at its timeout.
    pub timed_out: bool,
    /// Whether the command was killed because the call was cancelled.
    pub cancelled: bool,
    /// True when stdout or stderr was cut at `output_cap`.
    pub truncated: bool,
    /// Wall time from the start of the command to its end, in milliseconds.
    pub duration_ms: u64,
}

/// One entry of a listed directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DirEntryInfo {
    /// The entry's file name (lossy UTF-8).
    pub name: String,
    /// Whether it is a directory, or a symlink to one.
    pub is_dir: bool,
    /// Whether the entry itself is a symlink.
    pub is_symlink: bool,
    /// Size in bytes of what it points at (of the link itself when dangling).
    pub len: u64,
}

/// Where the tools act: files under one root and commands run there. The runtime has
/// [`LocalWorkspace`]; the harness implements it for its sandboxes.
#[async_trait]
pub trait Workspace: Send + Sync + std::fmt::Debug {
    /// The directory every path is relative to (canonical).
    fn root(&self) -> &Path;

    /// Resolve a path the model supplied (relative to the root, or absolute inside it) to an
    /// absolute path inside the root. Refuses `..` escapes, absolute paths outside the root and
    /// symlinks (in any existing prefix) that lead outside. The target need not exist.
    fn resolve(&self, path: &str) -> Result<PathBuf, ScopeViolation>;

    /// The whole content of a file; `path` is one [`Workspace::resolve`] returned.
    async fn read_file(&self, path: &Path) -> Result<Vec<u8>, WorkspaceError>;

    /// Creates parent directories as needed.
    async fn write_file(&self, path: &Path, bytes: &[u8]) -> Result<(), WorkspaceError>;

    /// Entries sorted by name.
    async fn list_dir(&self, path: &Path) -> Result<Vec<DirEntryInfo>, WorkspaceError>;

    /// Run one command to its end, its timeout or `cancel`, whichever comes first.
    async fn exec(
        &self,
        req: ExecRequest,
        cancel: CancellationToken,
    ) -> Result<ExecOutput, WorkspaceError>;

    /// `exec`, also handing the output to `live` as it is read, for a person watching a long
    /// command. The result is the one `exec` returns. Workspaces that cannot stream (the
    /// benchmark sandboxes, where nobody watches) run `exec`, which is the default.
    async fn exec_live(
        &self,
        req: ExecRequest,
        cancel: CancellationToken,
        live: OutputSink,
    ) -> Result<ExecOutput, WorkspaceError> {
        let _ = live;
        self.exec(req, cancel).await
    }

    /// Whether commands run confined ([`CommandSandbox::WorkspaceWrite`]), so that a call
    /// asking to run outside needs a person's approval.
    fn confines_commands(&self) -> bool {
        false
    }

    /// `exec_live` outside the command sandbox, for a call a person approved as such. A
    /// workspace that does not confine commands per call (a benchmark sandbox is confined as
    /// a whole) runs `exec_live`, which is the default.
    async fn exec_escalated(
        &self,
        req: ExecRequest,
        cancel: CancellationToken,
        live: OutputSink,
    ) -> Result<ExecOutput, WorkspaceError> {
        self.exec_live(req, cancel, live).await
    }

    /// Performs a `computer` action on this workspace's display and returns the screenshot
    /// after it. Workspaces without a display refuse, which is the default.
    async fn computer(&self, action: &ComputerAction) -> Result<Screenshot, ComputerError> {
        let _ = action;
        Err(ComputerError::NoDisplay)
    }
}

/// A directory on this machine. The path checks of `resolve` keep the file tools inside the
/// root; commands run as the current user, unconfined or in the command sandbox
/// ([`LocalWorkspace::with_sandbox`]).
///
/// Each command runs in its own process group, and that whole group is killed when the call
/// ends — on timeout, on cancellation, on a dropped future and also after a normal exit. The
/// bash tool's contract is that nothing it starts outlives its call: a forgotten `server &`
/// would otherwise keep ports, files and the output pipes of later calls busy. Commands that
/// escape their group on purpose (`setsid`, double forks into a new session) are not contained.
#[derive(Debug, Clone)]
pub struct LocalWorkspace {
    root: PathBuf,
    sandbox: CommandSandbox,
}

/// How long to keep reading output once the command is gone; a grandchild that left its own
/// process group can hold the pipes open forever.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

impl LocalWorkspace {
    /// A workspace rooted at `root` (canonicalised), commands unconfined; refused when
    /// `root` is not an existing directory.
    pub fn new(root: impl AsRef<Path>) -> Result<Self, WorkspaceError> {
        let given = root.as_ref();
        let io_err = |source| WorkspaceError::Io {
            op: "open workspace root",
            path: given.display().to_string(),
            source,
        };
        let root = std::fs::canonicalize(given).map_err(io_err)?;
        if !root.is_dir() {
            return Err(io_err(std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                "not a directory",
            )));
        }
        Ok(LocalWorkspace {
            root,
            sandbox: CommandSandbox::Off,
        })
    }

    /// Runs every command under `sandbox` (a person's session; see [`crate::tools::confine`]).
    pub fn with_sandbox(mut self, sandbox: CommandSandbox) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// The path as the model should see it: relative to the root.
    fn shown(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => path.display().to_string(),
        }
    }

    fn io_error(&self, op: &'static str, path: &Path, source: std::io::Error) -> WorkspaceError {
        WorkspaceError::Io {
            op,
            path: self.shown(path),
            source,
        }
    }
}

/// The lexical half of `Workspace::resolve`, shared by every implementation: refuses empty
/// paths, NUL bytes, `..` escapes and absolute paths outside `root`. Symlinks are each
/// implementation's to check, since they live where its files live.
pub fn resolve_lexically(root: &Path, path: &str) -> Result<PathBuf, ScopeViolation> {
    let violation = |why: &str| ScopeViolation {
        path: path.to_string(),
        why: why.to_string(),
    };
    if path.is_empty() {
        return Err(violation("the path is empty"));
    }
    if path.contains('\0') {
        return Err(violation("the path contains a NUL byte"));
    }
    let given = Path::new(path);
    let Some(lexical) = normalise(root, given) else {
        return Err(violation("`..` climbs above the workspace root"));
    };
    if !lexical.starts_with(root) {
        return Err(violation(if given.is_absolute() {
            "absolute paths must lie inside the workspace root"
        } else {
            "`..` climbs above the workspace root"
        }));
    }
    Ok(lexical)
}

/// Lexically normalise `path` against `root`; `None` when `..` climbs out of the root.
fn normalise(root: &Path, path: &Path) -> Option<PathBuf> {
    use std::path::Component;
    let mut out = if path.is_absolute() {
        PathBuf::new()
    } else {
        root.to_path_buf()
    };
    let floor = out.components().count();
    for comp in path.components() {
        match comp {
            Component::Prefix(_) | Component::RootDir => out.push(comp.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                if out.components().count() <= floor.max(1) {
                    return None;
                }
                out.pop();
            }
            Component::Normal(name) => out.push(name),
        }
    }
    Some(out)
}

impl LocalWorkspace {
    /// Follow symlinks in the longest existing prefix of `lexical` and re-append the rest.
    ///
    /// Existence is tested with `symlink_metadata`, so a dangling symlink counts as existing and
    /// then fails to canonicalize: it is refused, because writing through it would create its
    /// target wherever that points.
    fn canonical(&self, raw: &str, lexical: &Path) -> Result<PathBuf, ScopeViolation> {
        let violation = |why: String| ScopeViolation {
            path: raw.to_string(),
            why,
        };
        let mut prefix = lexical.to_path_buf();
        let mut rest: Vec<std::ffi::OsString> = Vec::new();
        while std::fs::symlink_metadata(&prefix).is_err() {
            let Some(name) = prefix.file_name() else {
                return Err(violation("no part of the path exists".to_string()));
            };
            rest.push(name.to_os_string());
            if !prefix.pop() {
                return Err(violation("no part of the path exists".to_string()));
            }
        }
        let mut resolved = std::fs::canonicalize(&prefix).map_err(|e| {
            violation(format!(
                "{} cannot be resolved (a dangling or looping symlink?): {e}",
                self.shown(&prefix)
            ))
        })?;
        if !resolved.starts_with(&self.root) {
            return Err(violation(format!(
                "{} resolves through a symlink to {}",
                self.shown(&prefix),
                resolved.display()
            )));
        }
        for name in rest.iter().rev() {
            if name == ".." || name == "." {
                return Err(violation("unexpected `..` after normalisation".to_string()));
            }
            resolved.push(name);
        }
        Ok(resolved)
    }
}

/// A process group of ours (a command's, an MCP server's): killed when the guard drops, so
/// even an abandoned `exec` future leaves nothing running, and by the [`Reaper`] if this
/// process dies first.
pub(crate) struct GroupGuard(Option<nix::unistd::Pid>);

impl GroupGuard {
    pub(crate) fn new(pgid: Option<nix::unistd::Pid>) -> Self {
        if let Some(pgid) = pgid {
            Reaper::get().send('+', pgid);
        }
        GroupGuard(pgid)
    }

    fn kill(&self) {
        if let Some(pgid) = self.0 {
            // ESRCH (the group is already empty) and EPERM are both "nothing left we may kill".
            let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
        if let Some(pgid) = self.0 {
            Reaper::get().send('-', pgid);
        }
    }
}

/// Tool processes die with the geode process that started them, even one killed with
/// SIGKILL that runs no cleanup of its own. One watcher per process (`bash`, which the tool
/// needs anyway, in a process group of its own) reads the groups we register on a pipe whose
/// only write end is ours (std opens it close-on-exec, so no command inherits it). End of
/// file means we are gone, however we went: it kills every group still registered.
struct Reaper {
    input: std::sync::Mutex<Option<std::process::ChildStdin>>,
}

const REAPER_SCRIPT: &str = r#"trap '' INT TERM HUP
declare -A live
while IFS= read -r line; do
  case "$line" in
    +*) live[${line#+}]=1 ;;
    -*) unset "live[${line#-}]" ;;
  esac
done
for g in "${!live[@]}"; do kill -KILL -- "-$g" 2> /dev/null; done"#;

impl Reaper {
    fn get() -> &'static Reaper {
        static REAPER: std::sync::OnceLock<Reaper> = std::sync::OnceLock::new();
        REAPER.get_or_init(|| {
            use std::os::unix::process::CommandExt;
            let input = std::process::Command::new("bash")
                .arg("-c")
                .arg(REAPER_SCRIPT)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .process_group(0)
                .spawn()
                // Without a watcher, commands still die with their calls; only a crash of
                // this process would leave them behind.
                .map_err(|e| tracing::warn!("no watcher for tool processes: {e}"))
                .ok()
                .and_then(|mut child| child.stdin.take());
            Reaper {
                input: std::sync::Mutex::new(input),
            }
        })
    }

    fn send(&self, sign: char, pgid: nix::unistd::Pid) {
        use std::io::Write;
        let mut input = match self.input.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(pipe) = input.as_mut() {
            let _ = writeln!(pipe, "{sign}{pgid}");
        }
    }
}

#[async_trait]
impl Workspace for LocalWorkspace {
    fn root(&self) -> &Path {
        &self.root
    }

    fn resolve(&self, path: &str) -> Result<PathBuf, ScopeViolation> {
        let lexical = resolve_lexically(&self.root, path)?;
        self.canonical(path, &lexical)
    }

    async fn read_file(&self, path: &Path) -> Result<Vec<u8>, WorkspaceError> {
        tokio::fs::read(path)
            .await
            .map_err(|e| self.io_error("read", path, e))
    }

    async fn write_file(&self, path: &Path, bytes: &[u8]) -> Result<(), WorkspaceError> {
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| self.io_error("create directory", parent, e))?;
        }
        tokio::fs::write(path, bytes)
            .await
            .map_err(|e| self.io_error("write", path, e))
    }

    async fn list_dir(&self, path: &Path) -> Result<Vec<DirEntryInfo>, WorkspaceError> {
        let mut dir = tokio::fs::read_dir(path)
            .await
            .map_err(|e| self.io_error("list", path, e))?;
        let mut entries = Vec::new();
        while let Some(entry) = dir
            .next_entry()
            .await
            .map_err(|e| self.io_error("list", path, e))?
        {
            let entry_path = entry.path();
            let link_meta = tokio::fs::symlink_metadata(&entry_path)
                .await
                .map_err(|e| self.io_error("stat", &entry_path, e))?;
            let is_symlink = link_meta.file_type().is_symlink();
            // A symlink reports what it points at; a dangling one reports itself.
            let meta = if is_symlink {
                tokio::fs::metadata(&entry_path).await.unwrap_or(link_meta)
            } else {
                link_meta
            };
            entries.push(DirEntryInfo {
                name: entry.file_name().to_string_lossy().into_owned(),
                is_dir: meta.is_dir(),
                is_symlink,
                len: meta.len(),
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    async fn exec(
        &self,
        req: ExecRequest,
        cancel: CancellationToken,
    ) -> Result<ExecOutput, WorkspaceError> {
        self.exec_live(req, cancel, OutputSink::default()).await
    }

    async fn exec_live(
        &self,
        req: ExecRequest,
        cancel: CancellationToken,
        live: OutputSink,
    ) -> Result<ExecOutput, WorkspaceError> {
        self.run(req, cancel, live, &self.sandbox).await
    }

    fn confines_commands(&self) -> bool {
        matches!(self.sandbox, CommandSandbox::WorkspaceWrite(_))
    }

    async fn exec_escalated(
        &self,
        req: ExecRequest,
        cancel: CancellationToken,
        live: OutputSink,
    ) -> Result<ExecOutput, WorkspaceError> {
        self.run(req, cancel, live, &CommandSandbox::Off).await
    }

    /// The user's own display (`$DISPLAY`): the REPL's computer use acts on the desktop the
    /// person sits at, after they approve each call.
    async fn computer(&self, action: &ComputerAction) -> Result<Screenshot, ComputerError> {
        let action = action.clone();
        tokio::task::spawn_blocking(move || x11::perform(None, &action))
            .await
            .map_err(|e| ComputerError::Worker(e.into()))?
    }
}

impl LocalWorkspace {
    /// One command, confined by `sandbox`.
    async fn run(
        &self,
        req: ExecRequest,
        cancel: CancellationToken,
        live: OutputSink,
        sandbox: &CommandSandbox,
    ) -> Result<ExecOutput, WorkspaceError> {
        let cwd = match &req.cwd {
            None => self.root.clone(),
            Some(dir) => self.resolve(&dir.to_string_lossy())?,
        };
        let started = std::time::Instant::now();
        let mut command = tokio::process::Command::new("bash");
        command
            .arg("-c")
            .arg(&req.command)
            .current_dir(&cwd)
            .envs(req.env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        let spawn_error = match sandbox {
            CommandSandbox::Off => WorkspaceError::Spawn,
            CommandSandbox::WorkspaceWrite(policy) => {
                let confinement =
                    Confinement::new(&self.root, &cwd, policy).map_err(WorkspaceError::Sandbox)?;
                // SAFETY: `apply` makes system calls only, on memory computed before the fork.
                #[allow(unsafe_code)]
                unsafe {
                    command.pre_exec(move || confinement.apply());
                }
                WorkspaceError::Sandbox
            }
        };
        let mut child = command.spawn().map_err(spawn_error)?;
        // With `process_group(0)` the child leads a group whose id is its pid.
        let group = GroupGuard::new(
            child
                .id()
                .and_then(|pid| i32::try_from(pid).ok())
                .map(nix::unistd::Pid::from_raw),
        );
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let mut out = OutputCapture::new(req.output_cap);
        let mut err = OutputCapture::new(req.output_cap);

        let (status, timed_out, cancelled) = {
            let reading =
                async { tokio::join!(out.pump_live(stdout, &live), err.pump_live(stderr, &live)) };
            tokio::pin!(reading);
            let sleep = tokio::time::sleep(req.timeout);
            tokio::pin!(sleep);
            let mut read_all = false;
            let (exited, timed_out, cancelled) = loop {
                tokio::select! {
                    status = child.wait() => break (Some(status), false, false),
                    () = &mut sleep => break (None, true, false),
                    () = cancel.cancelled() => break (None, false, true),
                    _ = &mut reading, if !read_all => read_all = true,
                }
            };
            // Kill before draining: grandchildren still holding the pipes would otherwise
            // keep the reads below pending.
            group.kill();
            let status = match exited {
                Some(status) => status,
                None => child.wait().await,
            }
            .map_err(|e| self.io_error("wait for command in", &cwd, e))?;
            if !read_all {
                let _ = tokio::time::timeout(DRAIN_GRACE, &mut reading).await;
            }
            (status, timed_out, cancelled)
        };

        let truncated = out.truncated() || err.truncated();
        Ok(ExecOutput {
            exit_code: status.code(),
            stdout: out.into_text(),
            stderr: err.into_text(),
            timed_out,
            cancelled,
            truncated,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_scope_needs_no_filesystem() {
        let root = Path::new("/app");
        assert_eq!(
            resolve_lexically(root, "a/../b").unwrap(),
            PathBuf::from("/app/b")
        );
        assert_eq!(
            resolve_lexically(root, "/app/x/y").unwrap(),
            PathBuf::from("/app/x/y")
        );
        for bad in ["..", "a/../../b", "/etc/x", "", "a\0b"] {
            assert!(resolve_lexically(root, bad).is_err(), "{bad:?}");
        }
    }
}
