//! The rootless sandbox: GEODE started by a user without root runs itself again inside a user
//! namespace of its own, where it is root, and everything the sandbox does as root (mounts,
//! the owners of layers, the trial's user namespace) it then does there.
//!
//! The namespace maps id 0 to the user's own uid and ids [`crate::ids::HOST_BASE`] ..
//! `HOST_BASE + RANGE` to the user's subordinate range from `/etc/subuid` and `/etc/subgid`
//! (written by `newuidmap`/`newgidmap`, Debian's `uidmap`), so the rest of the sandbox keeps
//! its one map: container root is id `HOST_BASE` of the namespace, which is the first id of
//! the user's range on the host. Apptainer, podman and buildah do the same (`buildah
//! unshare`); it is the whole process, not only the sandbox's server, because the harness
//! itself hands layers and folders to container root (a `chown` needs the namespace).
//!
//! What differs from the root sandbox, and is said in every result ([`note`]):
//! - the writable layer lives on a tmpfs of `storage_mb` (loop devices need real root): the
//!   budget holds (`ENOSPC` inside), but what the trial writes is held in memory;
//! - cgroups are joined only where the host delegates a writable group (cgroup v1 never does):
//!   otherwise memory is `RLIMIT_AS` per process and pids and cpu are not limited, as
//!   [`crate::cgroup`]'s notes say;
//! - overlayfs keeps its opaque and whiteout marks in `user.overlay.*` (`userxattr`), so a
//!   rootless user's image store is its own (`$GEODE_HOME`), unpacked with owners mapped
//!   through the namespace ([`crate::ids::to_host`]).
//!
//! Files the sandbox's users wrote (the trial's verifier folder, build layers) belong to the
//! user's subordinate ids on the host, as with podman; `geode unshare rm -rf DIR` removes them.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::ids::{HOST_BASE, RANGE};

/// Set by the re-execution to the namespace's id map, as said in every result.
pub const MAP_VAR: &str = "GEODE_ROOTLESS_MAP";

/// Why the rootless namespace could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RootlessError {
    /// No line of the file gives the user a range of [`RANGE`] ids.
    #[error(
        "{file}: no range of {RANGE} subordinate ids for user {user} (uid {id}); the rootless \
         sandbox maps container ids 0..{RANGE} onto one (as root: `usermod --add-subuids \
         N-M --add-subgids N-M {user}`)"
    )]
    NoRange {
        /// `/etc/subuid` or `/etc/subgid`.
        file: &'static str,
        /// The user's name.
        user: String,
        /// The user's uid or gid.
        id: u32,
    },
    /// A file could not be read.
    #[error("read {file}: {source}")]
    Read {
        /// The file.
        file: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// `newuidmap` or `newgidmap` failed or is missing.
    #[error("{tool} for the rootless sandbox: {message} (the tool is in Debian's `uidmap`)")]
    Map {
        /// The tool.
        tool: &'static str,
        /// Its error output, or why it did not start.
        message: String,
    },
    /// A system call failed.
    #[error("{what}: {source}")]
    Sys {
        /// What was being done.
        what: &'static str,
        /// The error.
        source: nix::Error,
    },
}

/// A subordinate id range (`/etc/subuid` line `user:start:count`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubRange {
    /// The first host id.
    pub start: u32,
    /// How many.
    pub count: u32,
}

/// The first range of at least [`RANGE`] ids `text` (an `/etc/subuid` or `/etc/subgid`) gives
/// the user named `name` or numbered `id`.
pub fn parse_subids(text: &str, name: &str, id: u32) -> Option<SubRange> {
    text.lines().find_map(|line| {
        let mut fields = line.trim().split(':');
        let (Some(who), Some(start), Some(count)) = (fields.next(), fields.next(), fields.next())
        else {
            return None;
        };
        let range = SubRange {
            start: start.parse().ok()?,
            count: count.parse().ok()?,
        };
        ((who == name || who == id.to_string()) && range.count >= RANGE).then_some(range)
    })
}

/// This process runs in a user namespace other than the machine's first (a rootless geode,
/// or one started as root inside a container's namespace): mounts and devices behave as this
/// module says.
pub fn active() -> bool {
    static ACTIVE: OnceLock<bool> = OnceLock::new();
    *ACTIVE.get_or_init(|| {
        std::fs::read_to_string("/proc/self/uid_map")
            .map(|map| !is_initial_map(&map))
            .unwrap_or(false)
    })
}

/// The initial namespace's map is the whole id space onto itself.
fn is_initial_map(map: &str) -> bool {
    let fields: Vec<&str> = map.split_whitespace().collect();
    fields == ["0", "0", "4294967295"]
}

/// Why this geode has no rootless namespace though it runs without root, when
/// [`enter_if_unprivileged`] failed: the sandbox backend refuses with it.
static UNAVAILABLE: OnceLock<String> = OnceLock::new();

/// Why the sandbox cannot start in this process, if it cannot: it runs without root and
/// outside any user namespace.
pub fn unavailable() -> Option<String> {
    if nix::unistd::geteuid().is_root() || active() {
        return None;
    }
    Some(UNAVAILABLE.get().cloned().unwrap_or_else(|| {
        "the sandbox needs root or geode's rootless user namespace, which this command did \
         not enter"
            .into()
    }))
}

/// The line every sandbox of a rootless geode adds to its notes (and so to every result).
pub fn note() -> Option<String> {
    if !active() {
        return None;
    }
    let map =
        std::env::var(MAP_VAR).unwrap_or_else(|_| "a user namespace not made by geode".into());
    Some(format!(
        "sandbox: rootless ({map}; writable layer on a tmpfs of storage_mb, held in memory)"
    ))
}

/// For a command that starts sandboxes: when this process runs without root, run it again in
/// a rootless namespace and return its exit code once it ends; `None` when this process
/// should go on (it is root, in a namespace already, or the namespace cannot be made: then
/// the sandbox backend refuses with the reason, and other backends still work).
///
/// Must be called while the process is single-threaded (before any runtime starts).
pub fn enter_if_unprivileged() -> Option<i32> {
    if nix::unistd::geteuid().is_root() || active() {
        return None;
    }
    match enter() {
        Ok(code) => Some(code),
        Err(e) => {
            let _ = UNAVAILABLE.set(e.to_string());
            None
        }
    }
}

/// The child's pid, for the parent's signal forwarding.
static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(signal: libc::c_int) {
    let child = CHILD.load(Ordering::Relaxed);
    if child > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(child, signal) };
    }
}

fn sys(what: &'static str) -> impl FnOnce(nix::Error) -> RootlessError {
    move |source| RootlessError::Sys { what, source }
}

fn enter() -> Result<i32, RootlessError> {
    let uid = nix::unistd::getuid();
    let gid = nix::unistd::getgid();
    let name = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |u| u.name);
    let range = |file: &'static str, id: u32| -> Result<SubRange, RootlessError> {
        let text =
            std::fs::read_to_string(file).map_err(|source| RootlessError::Read { file, source })?;
        parse_subids(&text, &name, id).ok_or_else(|| RootlessError::NoRange {
            file,
            user: name.clone(),
            id,
        })
    };
    let subuid = range("/etc/subuid", uid.as_raw())?;
    let subgid = range("/etc/subgid", uid.as_raw())?;
    let map = format!(
        "user namespace of uid {uid}: ids 0..{RANGE} inside are host ids {}..{} from /etc/subuid",
        subuid.start,
        subuid.start + RANGE
    );
    // Everything the child needs, made before the fork.
    let exe = CString::new("/proc/self/exe").map_err(|_| sys("exe path")(nix::Error::EINVAL))?;
    let args: Vec<CString> = std::env::args_os()
        .filter_map(|a| CString::new(a.into_encoded_bytes()).ok())
        .collect();
    let mut env: Vec<CString> = std::env::vars_os()
        .filter(|(k, _)| k != MAP_VAR)
        .filter_map(|(k, v)| {
            let mut kv = k.into_encoded_bytes();
            kv.push(b'=');
            kv.extend(v.into_encoded_bytes());
            CString::new(kv).ok()
        })
        .collect();
    env.push(
        CString::new(format!("{MAP_VAR}={map}"))
            .map_err(|_| sys("map text")(nix::Error::EINVAL))?,
    );
    let (ready_r, ready_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(sys("pipe"))?;
    let (go_r, go_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(sys("pipe"))?;
    // SAFETY: the caller's contract: single-threaded, so the child may run ordinary code.
    match unsafe { nix::unistd::fork() }.map_err(sys("fork"))? {
        nix::unistd::ForkResult::Child => {
            drop(ready_r);
            drop(go_w);
            child(ready_w, go_r, &exe, &args, &env)
        }
        nix::unistd::ForkResult::Parent { child } => {
            drop(ready_w);
            drop(go_r);
            parent(
                child,
                ready_r,
                go_w,
                (uid.as_raw(), subuid),
                (gid.as_raw(), subgid),
            )
        }
    }
}

/// In the child: a user namespace, the parent's word that its maps are written, then geode
/// again as root inside.
fn child(ready: OwnedFd, go: OwnedFd, exe: &CString, args: &[CString], env: &[CString]) -> ! {
    let made = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER).is_ok();
    let _ = nix::unistd::write(&ready, if made { b"1" } else { b"0" });
    drop(ready);
    let mut byte = [0u8; 1];
    if made && matches!(nix::unistd::read(&go, &mut byte), Ok(1)) && byte[0] == b'1' {
        let root = nix::unistd::Uid::from_raw(0);
        let group = nix::unistd::Gid::from_raw(0);
        let _ = nix::unistd::setresgid(group, group, group);
        let _ = nix::unistd::setresuid(root, root, root);
        let _ = nix::unistd::execve(exe, args, env);
    }
    // SAFETY: _exit leaves without the parent's atexit handlers.
    unsafe { libc::_exit(125) }
}

/// In the parent: write the child's maps, then wait for it, passing on the signals a job
/// scheduler or a terminal's hang-up sends (the terminal's own Ctrl-C reaches both).
fn parent(
    child: nix::unistd::Pid,
    ready: OwnedFd,
    go: OwnedFd,
    uid: (u32, SubRange),
    gid: (u32, SubRange),
) -> Result<i32, RootlessError> {
    let mut byte = [0u8; 1];
    let unshared = matches!(nix::unistd::read(&ready, &mut byte), Ok(1)) && byte[0] == b'1';
    let mapped = if unshared {
        new_map("newuidmap", child, uid).and_then(|()| new_map("newgidmap", child, gid))
    } else {
        Err(RootlessError::Sys {
            what: "unshare a user namespace",
            source: nix::Error::EPERM,
        })
    };
    if mapped.is_ok() {
        let _ = nix::unistd::write(&go, b"1");
    }
    drop(go);
    CHILD.store(child.as_raw(), Ordering::Relaxed);
    use nix::sys::signal::{SigHandler, Signal, signal};
    for (sig, handler) in [
        (Signal::SIGTERM, SigHandler::Handler(forward)),
        (Signal::SIGHUP, SigHandler::Handler(forward)),
        (Signal::SIGUSR1, SigHandler::Handler(forward)),
        (Signal::SIGUSR2, SigHandler::Handler(forward)),
        (Signal::SIGINT, SigHandler::SigIgn),
        (Signal::SIGQUIT, SigHandler::SigIgn),
    ] {
        // SAFETY: the handler only calls kill.
        let _ = unsafe { signal(sig, handler) };
    }
    let status = loop {
        match nix::sys::wait::waitpid(child, None) {
            Err(nix::Error::EINTR) => continue,
            other => break other.map_err(sys("wait for the rootless geode"))?,
        }
    };
    mapped?;
    Ok(match status {
        nix::sys::wait::WaitStatus::Exited(_, code) => code,
        nix::sys::wait::WaitStatus::Signaled(_, sig, _) => 128 + sig as i32,
        _ => 1,
    })
}

/// `newuidmap PID 0 ID 1 HOST_BASE START RANGE`: the user as root, and the range at the ids
/// the sandbox gives its containers.
fn new_map(
    tool: &'static str,
    child: nix::unistd::Pid,
    (id, range): (u32, SubRange),
) -> Result<(), RootlessError> {
    let out = std::process::Command::new(tool)
        .arg(child.to_string())
        .args(["0", &id.to_string(), "1"])
        .args([
            HOST_BASE.to_string(),
            range.start.to_string(),
            RANGE.to_string(),
        ])
        .output()
        .map_err(|e| RootlessError::Map {
            tool,
            message: e.to_string(),
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(RootlessError::Map {
            tool,
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// The prefix of overlayfs' own extended attributes here: `trusted.overlay.` for host root,
/// `user.overlay.` in a user namespace (overlayfs' `userxattr`; `trusted.*` needs root of the
/// machine).
pub fn overlay_xattr_prefix() -> &'static str {
    if active() {
        "user.overlay."
    } else {
        "trusted.overlay."
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_s_range_is_found_by_name_or_uid_and_must_be_whole() {
        let text = "alice:100000:65536\nbob:165536:1000\n1002:300000:70000\n";
        assert_eq!(
            parse_subids(text, "alice", 1000),
            Some(SubRange {
                start: 100_000,
                count: 65_536
            })
        );
        assert_eq!(parse_subids(text, "bob", 1001), None, "too small a range");
        assert_eq!(
            parse_subids(text, "carol", 1002).map(|r| r.start),
            Some(300_000)
        );
        assert_eq!(parse_subids(text, "dave", 1003), None);
    }

    #[test]
    fn only_the_identity_map_is_the_machine_s() {
        assert!(is_initial_map("         0          0 4294967295\n"));
        assert!(!is_initial_map("         0       1000          1\n"));
    }
}
