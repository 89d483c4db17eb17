//! The wire format between the harness and a sandbox server (`geode __sandbox-server`).
//!
//! The harness starts the server with one argument, a [`ServerSpec`] as JSON (schema
//! `geode.sandbox.server.v1`). The server answers with one [`Response`] line (`ready` or
//! `error`), then reads newline-delimited [`Request`]s on stdin and writes one [`Response`] line
//! per request on stdout, in completion order (requests run concurrently; `id` pairs them).
//! Bytes travel as base64 so every line stays valid JSON.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Value of [`ServerSpec::schema`] this server understands.
pub const SERVER_SCHEMA: &str = "geode.sandbox.server.v1";

/// Everything the server needs to build the sandbox. Paths are host paths unless noted.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServerSpec {
    /// Always [`SERVER_SCHEMA`]; a server refuses a spec of another schema.
    pub schema: String,
    /// The executable that provides `sandbox_entry`, run again as the namespace's init.
    pub geode_exe: PathBuf,
    /// Where the sandbox's root is mounted (in the server's private mount namespace only).
    pub root_mount: PathBuf,
    /// What the sandbox's root is made of, below its own writable layer.
    pub root: RootSpec,
    /// The writable layer of this sandbox and overlayfs' work directory beside it.
    pub upper: PathBuf,
    /// Overlayfs' work directory, on the same file system as `upper`.
    pub work: PathBuf,
    /// Host directory shown read-only at [`INBOX`] inside; `copy_in` stages files here.
    pub inbox: PathBuf,
    /// Host directories (or files) bind-mounted inside (`/logs/agent`, `/etc/resolv.conf` ...).
    pub binds: Vec<Bind>,
    /// The trial's real `/logs/verifier`: shown only to the verifier (see [`View`]); the
    /// agent's processes see whatever `binds` put at that path.
    #[serde(default)]
    pub verifier_logs: Option<PathBuf>,
    /// The trial's own disk that holds the writable layer, so its writes are bounded;
    /// `None`: the layer is `upper` on the host's file system.
    #[serde(default)]
    pub disk: Option<Disk>,
    /// Hostname inside the sandbox's UTS namespace.
    pub hostname: String,
    /// What the sandbox's processes can reach.
    pub network: Network,
    /// A network namespace to join (a compose group's, `/proc/PID/ns/net` of its main
    /// sandbox's server) instead of making one; `network` still says what it may reach.
    #[serde(default)]
    pub join_network: Option<PathBuf>,
    /// `cgroup.procs` files the server joins before it starts any process.
    pub cgroup_procs: Vec<PathBuf>,
    /// `cgroup.procs` files every process of the agent's view joins (a pids group below the
    /// sandbox's that leaves the verifier pids of its own).
    #[serde(default)]
    pub tool_cgroup_procs: Vec<PathBuf>,
    /// Fallback memory limit (bytes of address space per process) when no cgroup is writable.
    pub rlimit_as: Option<u64>,
    /// Set when the pids limit could not go into a cgroup: every command's `RLIMIT_NPROC`.
    #[serde(default)]
    pub rlimit_nproc: Option<u64>,
    /// Work directory inside (created when missing).
    pub workdir: String,
    /// Environment of every process, after the defaults (PATH, HOME, HOSTNAME).
    pub env: Vec<(String, String)>,
    /// Default user of every process (`name`, `uid` or `uid:gid`); root when `None`.
    pub user: Option<String>,
    /// Every process runs in a user namespace (container root = host uid
    /// [`crate::ids::HOST_BASE`]); the layers' owners are host ids already.
    #[serde(default)]
    pub userns: bool,
}

/// A sandbox's network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// A network namespace of its own with only `lo` (tasks without network).
    None,
    /// A network namespace of its own whose outbound traffic `slirp4netns` carries, as a user
    /// process on the host: the host's loopback and other trials are out of reach.
    Private,
    /// As `Private`, with routes to the allowed hosts' addresses only (set from the host once
    /// slirp4netns is up) and no raw sockets, which could hand slirp a frame for any address.
    Allowlist,
    /// The host's network namespace: image builds only (`docker build` has the network too).
    Host,
}

/// The read-only part of a sandbox's root.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum RootSpec {
    /// An image: its unpacked layers, bottom first. Nothing of the host lies below them.
    Layers {
        /// Unpacked layer directories, bottom first.
        lower: Vec<PathBuf>,
    },
    /// The host's own root (`--base host` only), with at most one built layer over it.
    Host {
        /// The built layer over the host's root, if any.
        image: Option<ImageMount>,
        /// Host directories covered by an empty read-only tmpfs inside (the image cache,
        /// other trials' layers, the job folder).
        hide: Vec<PathBuf>,
        /// Directories (inside paths) that start empty instead of showing the host's content
        /// (`/tmp`, `/root`), created in this sandbox's own layer. Only applied when there is
        /// no image layer (the layer already carries them).
        fresh_dirs: Vec<String>,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
/// A built layer mounted read-only over the host's root (`--base host`).
pub struct ImageMount {
    /// The cached layer (a former overlay upper directory).
    pub layer: PathBuf,
    /// A private work directory for the read-only image overlay, and its mount point.
    pub work: PathBuf,
    /// Where that image overlay is mounted on the host.
    pub mount: PathBuf,
}

/// The file system a trial's writable layer lives on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Disk {
    /// An ext4 image file (see `disk.rs`) on a loop device: needs root of the machine.
    Image(PathBuf),
    /// A tmpfs of this many MB (the rootless sandbox: a user namespace may mount one, not a
    /// loop device); what the trial writes is held in memory.
    Tmpfs(u64),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
/// A host path bind-mounted into the sandbox.
pub struct Bind {
    /// Host path (directory or file) to bind.
    pub host: PathBuf,
    /// Absolute path inside.
    pub inside: String,
    /// Mounted read-only inside.
    pub read_only: bool,
    /// A writable folder whose content lives on the trial's disk when it has one: what the
    /// agent writes there counts against its storage like any other write (bound from the
    /// host, it went past the budget onto the host's disk), and comes back to `host`, bounded,
    /// when the sandbox syncs or ends. `host`'s content at the start is copied in.
    #[serde(default)]
    pub on_disk: bool,
}

/// The id of the server's last line when the sandbox's agent died while its init lived: a
/// process inside killed it (`kill -9 -1`, or the memory limit it exhausted). From outside
/// (a crash, an OOM kill of init) init dies first, and no such line is sent.
pub const FAREWELL_ID: u64 = u64::MAX - 1;

/// Where the inbox appears inside the sandbox.
pub const INBOX: &str = "/.geode-inbox";

/// Where the real verifier folder waits, in the control processes' mount view only, until a
/// verifier's view binds it at `/logs/verifier`.
pub const VERIFIER_MOUNT: &str = "/dev/.geode-verifier";

/// Where the trial's writable layer is shown to the control processes (for evidence of what
/// the agent changed), never to the agent's or the verifier's.
pub const UPPER_MOUNT: &str = "/dev/.geode-upper";

/// Which processes a command joins, and what it sees.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum View {
    /// The agent's processes: a pid namespace below the sandbox's (its own `kill -9 -1`
    /// reaches only them) and a mount view without the inbox or the real `/logs/verifier`.
    #[default]
    Tool,
    /// The verifier: the sandbox's own pid namespace (it sees the agent's services, they do
    /// not see it) and a mount view of its own with the real `/logs/verifier` and, at
    /// `/tests`, the inbox entry `tests` (writable, private to it).
    Verifier {
        /// Inbox entry bound at `/tests`; `None` leaves `/tests` as the sandbox has it.
        tests: Option<String>,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
/// One request line from the harness to the server.
pub struct Request {
    /// Chosen by the harness; the server's reply to it carries the same id.
    pub id: u64,
    #[serde(flatten)]
    /// What to do.
    pub op: Op,
}

/// `scope`: when set, the server refuses a path that leaves this directory after following
/// symlinks (the workspace's root); harness operations pass `None`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Run a command and reply with its [`ExecResult`].
    Exec(ExecSpec),
    /// Kill the process group of a running `exec` (its reply says `cancelled`).
    Cancel {
        /// The `id` of the exec request to cancel.
        target: u64,
    },
    /// The bytes of the file `path` (inside path), whole.
    ReadFile {
        /// Inside path of the file.
        path: String,
        /// See [`Op`].
        scope: Option<String>,
    },
    /// At most `len` bytes of the regular file `path` from `offset` (copies out, which stream
    /// a file in parts instead of holding it whole).
    ReadChunk {
        /// Inside path of the regular file.
        path: String,
        /// Byte offset to start at.
        offset: u64,
        /// Most bytes to return.
        len: u64,
    },
    /// Write (create or replace) the file `path` with the given bytes.
    WriteFile {
        /// Inside path of the file.
        path: String,
        /// The file's new content, base64.
        data_b64: String,
        /// See [`Op`].
        scope: Option<String>,
    },
    /// The entries of the directory `path`.
    ListDir {
        /// Inside path of the directory.
        path: String,
        /// See [`Op`].
        scope: Option<String>,
    },
    /// Copy `INBOX/<from>` to `to`; `merge` copies a directory's content into an existing
    /// directory (Dockerfile COPY), otherwise `to` is replaced.
    Install {
        /// Entry name under [`INBOX`].
        from: String,
        /// Absolute inside path to install at.
        to: String,
        /// Copy into an existing directory instead of replacing `to`.
        merge: bool,
    },
    /// SIGKILL every process of the sandbox except its init.
    KillAll,
    /// What the writable layer shows of changes to what a verifier runs (paths under
    /// `exempt`, the workdir, are the agent's to change).
    ChangedInputs {
        /// Inside path (the workdir) whose changes are not counted.
        exempt: String,
        /// At the hand-over the server starts watching the layer; after the verifier it adds
        /// what was written meanwhile.
        when: crate::Judgment,
    },
    /// Packets the sandbox's network namespace had no route for: attempts to reach beyond
    /// `lo` in a sandbox without network.
    UnroutedPackets,
    /// A `computer` action on the X display `display` (`:99`), whose socket exists only in the
    /// sandbox's mount view: the agent connects there and answers with the screenshot.
    Computer {
        /// X display name, such as `:99`.
        display: String,
        /// The mouse or keyboard action to perform.
        action: geode_runtime::tools::computer::ComputerAction,
    },
    /// Kill everything, unmount, exit.
    Shutdown,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
/// A command to run inside the sandbox.
pub struct ExecSpec {
    /// Run as `shell... command` (default `bash -c`).
    pub command: String,
    /// The shell argv `command` is appended to; `None` is `bash -c`.
    pub shell: Option<Vec<String>>,
    /// Absolute path inside, or relative to the sandbox's workdir.
    pub cwd: Option<String>,
    /// Kill the command's process group after this many milliseconds.
    pub timeout_ms: u64,
    /// Most bytes of stdout, and of stderr, kept; the rest is dropped and `truncated` set.
    pub output_cap: usize,
    /// Extra environment of the command, over the sandbox's.
    pub env: Vec<(String, String)>,
    /// Overrides the sandbox's default user.
    pub user: Option<String>,
    /// Checked against `cwd` like the file operations' scope.
    pub scope: Option<String>,
    #[serde(default)]
    /// Which processes the command joins and what it sees.
    pub view: View,
    /// Processes the command leaves in the background (`cmd &`, `nohup cmd &`) live on after
    /// it returns, as under `docker exec`, until `kill_all` or teardown; otherwise its whole
    /// process group is killed when it returns (image build steps, the verifier). A timeout
    /// or a cancel kills the group either way.
    #[serde(default)]
    pub keep_background: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
/// One reply line from the server to the harness.
pub struct Response {
    /// The id of the request this answers (0 for the ready line).
    pub id: u64,
    #[serde(flatten)]
    /// The outcome.
    pub reply: Reply,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
/// What the server answers to a request.
pub enum Reply {
    /// The sandbox is up (id 0).
    Ready(ReadyInfo),
    /// The command ran (or timed out or was cancelled).
    Exec(ExecResult),
    /// A whole file's bytes (`read_file`).
    File {
        /// The file's bytes, base64.
        data_b64: String,
    },
    /// Part of a file, and the file's size when it was read.
    Chunk {
        /// The bytes read, base64.
        data_b64: String,
        /// The file's size in bytes.
        size: u64,
    },
    /// A directory's entries (`list_dir`).
    Dir {
        /// One entry per name in the directory.
        entries: Vec<DirEntry>,
    },
    /// The operation succeeded and has nothing to return.
    Done,
    /// Processes killed (`kill_all`, `shutdown`).
    Killed {
        /// How many processes were killed.
        count: usize,
    },
    /// What the agent changed of the verifier's inputs (`changed_inputs`).
    Changed(crate::ChangedInputs),
    /// A count (`unrouted_packets`).
    Counted {
        /// The number counted.
        count: u64,
    },
    /// The screenshot after a `computer` action (PNG, base64).
    Screenshot {
        /// The PNG picture, base64.
        png_b64: String,
        /// The picture's width in pixels: the frame the model's coordinates are in.
        width: u32,
        /// The picture's height in pixels.
        height: u32,
        /// The screen's width in pixels, before scaling.
        screen_width: u32,
        /// The screen's height in pixels, before scaling.
        screen_height: u32,
    },
    /// The operation failed.
    Error(ReplyError),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
/// What the server reports once the sandbox is up.
pub struct ReadyInfo {
    /// Host pid of the namespace's init.
    pub init_pid: u32,
    /// `pid:[inode]` of the sandbox's pid namespace, to find its processes from the host.
    pub pid_namespace: String,
    /// Things set up differently than asked (no `lo`, no sysfs), for the trial's notes.
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
/// How a command ended, and its output.
pub struct ExecResult {
    /// Exit code; `None` when a signal ended it.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if any.
    pub signal: Option<i32>,
    /// Standard output, at most `output_cap` bytes of it.
    pub stdout: String,
    /// Standard error, at most `output_cap` bytes of it.
    pub stderr: String,
    /// The timeout ended it.
    pub timed_out: bool,
    /// A `cancel` request ended it.
    pub cancelled: bool,
    /// Some of stdout or stderr was dropped past `output_cap`.
    pub truncated: bool,
    /// Wall-clock time from start to exit, in milliseconds.
    pub duration_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
/// One entry of a listed directory.
pub struct DirEntry {
    /// The entry's file name (not a path).
    pub name: String,
    /// A directory (what a link points at, for a link).
    pub is_dir: bool,
    /// The entry itself is a symbolic link.
    pub is_symlink: bool,
    /// A regular file (what a link points at, for a link); not a fifo, socket or device.
    #[serde(default)]
    pub is_file: bool,
    /// Size in bytes (what a link points at, for a link).
    pub len: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
/// Why a request failed.
pub struct ReplyError {
    /// The kind of failure, for the harness to map back to an `io::Error`.
    pub kind: ErrorKind,
    /// Human-readable detail.
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
/// Failure kinds a reply can carry; most mirror `std::io::ErrorKind`.
pub enum ErrorKind {
    /// The path leaves the scope (after symlinks).
    Scope,
    /// No such file or directory.
    NotFound,
    /// Access refused.
    PermissionDenied,
    /// The path already exists.
    AlreadyExists,
    /// A path component is not a directory.
    NotADirectory,
    /// A directory where a file was expected.
    IsADirectory,
    /// A malformed request argument.
    InvalidInput,
    /// The trial's disk is full (ENOSPC).
    StorageFull,
    /// No process could be made (EAGAIN from `fork`): the trial's pids are all held.
    OutOfProcesses,
    /// Anything else, including failures to start a process.
    Other,
}

impl ErrorKind {
    /// The kind that stands for an I/O error on the wire (`WouldBlock` is `OutOfProcesses`).
    pub fn of(e: &std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        match e.kind() {
            K::NotFound => ErrorKind::NotFound,
            K::PermissionDenied => ErrorKind::PermissionDenied,
            K::AlreadyExists => ErrorKind::AlreadyExists,
            K::NotADirectory => ErrorKind::NotADirectory,
            K::IsADirectory => ErrorKind::IsADirectory,
            K::InvalidInput => ErrorKind::InvalidInput,
            K::StorageFull => ErrorKind::StorageFull,
            K::WouldBlock => ErrorKind::OutOfProcesses,
            _ => ErrorKind::Other,
        }
    }

    /// The `io::ErrorKind` the harness raises for this kind (`Scope` is `PermissionDenied`).
    pub fn io_kind(self) -> std::io::ErrorKind {
        use std::io::ErrorKind as K;
        match self {
            ErrorKind::NotFound => K::NotFound,
            ErrorKind::PermissionDenied | ErrorKind::Scope => K::PermissionDenied,
            ErrorKind::AlreadyExists => K::AlreadyExists,
            ErrorKind::NotADirectory => K::NotADirectory,
            ErrorKind::IsADirectory => K::IsADirectory,
            ErrorKind::InvalidInput => K::InvalidInput,
            ErrorKind::StorageFull => K::StorageFull,
            ErrorKind::OutOfProcesses => K::WouldBlock,
            ErrorKind::Other => K::Other,
        }
    }
}

/// Base64 (standard alphabet) of `bytes`, as file data travels on the wire.
pub fn encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The bytes of base64 `text`; refuses text that is not standard base64.
pub fn decode(text: &str) -> Result<Vec<u8>, String> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("bad base64: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_as_one_line() {
        let req = Request {
            id: 7,
            op: Op::ReadFile {
                path: "/app/x".into(),
                scope: Some("/app".into()),
            },
        };
        let line = serde_json::to_string(&req).unwrap();
        assert!(!line.contains('\n'));
        assert!(line.contains(r#""op":"read_file""#), "{line}");
        let back: Request = serde_json::from_str(&line).unwrap();
        assert_eq!(back.id, 7);
        let resp = Response {
            id: 7,
            reply: Reply::Killed { count: 3 },
        };
        let line = serde_json::to_string(&resp).unwrap();
        let back: Response = serde_json::from_str(&line).unwrap();
        assert!(matches!(back.reply, Reply::Killed { count: 3 }));
    }
}
