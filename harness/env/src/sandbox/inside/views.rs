//! Who sees what inside a sandbox: the agent's processes in one view, the verifier in another.
//!
//! Harbor keeps the agent's background services running while the verifier runs, and tasks
//! rely on it; but then anything the agent left running could write the reward. So the
//! sandbox's commands live in two views of the same root:
//! - **tool** (every agent command, and image builds): a pid namespace below the sandbox's
//!   and a mount namespace in which `/logs/verifier` is a decoy and the inbox (where `/tests`
//!   is staged) is an empty folder. `kill -9 -1` there reaches only the agent's own processes,
//!   which share a pids group below the sandbox's that leaves the verifier pids of its own.
//! - **verifier**: the sandbox's own pid namespace, from which the agent's services are visible
//!   (`pgrep`, their ports on `lo`) while the verifier is invisible to them (no pid to signal
//!   or to open under `/proc`), and a fresh mount namespace per run with the trial's real
//!   `/logs/verifier` and a private `/tests`.
//!
//! The control process (the sandbox's agent) keeps full capabilities and no filter, since it
//! must enter these namespaces; it is not dumpable, so nothing below it can open it. Every
//! command it starts enters the sandbox's user namespace (container root is host uid 100000,
//! see `ids`), then drops to docker's capability set, `no_new_privs` and the seccomp filter,
//! all between `fork` and `exec`, where only system calls are allowed (no allocation):
//! everything the child needs is prepared before the fork.
//!
//! That is why this module alone may use `unsafe`: `pre_exec` and `fork` are unsafe by
//! nature, and what runs after them has to be raw system calls. Each block says why it holds.
#![allow(unsafe_code)]

use std::ffi::{CString, c_int};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};

use seccompiler::BpfProgram;

use super::user::User;
use crate::sandbox::protocol::{INBOX, UPPER_MOUNT, VERIFIER_MOUNT, View};

/// Capabilities that commands keep: Docker's default set without CAP_MKNOD (with no device
/// cgroup, a new block-device node would open the host's disk). Everything else
/// (CAP_SYS_ADMIN for mount, CAP_DAC_READ_SEARCH for open_by_handle_at, CAP_SYS_PTRACE,
/// CAP_NET_ADMIN ...) leaves the bounding set, so no command can regain it.
const KEEP_CAPS: &[caps::Capability] = &[
    caps::Capability::CAP_CHOWN,
    caps::Capability::CAP_DAC_OVERRIDE,
    caps::Capability::CAP_FSETID,
    caps::Capability::CAP_FOWNER,
    caps::Capability::CAP_NET_RAW,
    caps::Capability::CAP_SETGID,
    caps::Capability::CAP_SETUID,
    caps::Capability::CAP_SETFCAP,
    caps::Capability::CAP_SETPCAP,
    caps::Capability::CAP_NET_BIND_SERVICE,
    caps::Capability::CAP_SYS_CHROOT,
    caps::Capability::CAP_KILL,
    caps::Capability::CAP_AUDIT_WRITE,
];

/// How long the tool view's processes are watched before a verifier starts, and the CPU
/// (clock ticks, 10 ms each at the usual 100 Hz) that makes one busy over that time.
const BUSY_SAMPLE: std::time::Duration = std::time::Duration::from_millis(100);
const BUSY_TICKS: u64 = 2;

/// What every command is reduced to before it runs, prepared once.
struct Confinement {
    drop_caps: Vec<libc::c_ulong>,
    filters: [BpfProgram; 2],
    /// `RLIMIT_NPROC` where no pids cgroup holds the sandbox's processes (the rootless
    /// sandbox on cgroup v1): counted per user of the sandbox's own user namespace.
    nproc: Option<u64>,
}

impl Confinement {
    /// `raw_sockets`: keep CAP_NET_RAW, as docker does; not where the network is an
    /// allowlist, which raw frames would bypass.
    fn new(raw_sockets: bool, nproc: Option<u64>) -> Result<Self, String> {
        let drop_caps = caps::all()
            .into_iter()
            .filter(|cap| {
                !KEEP_CAPS.contains(cap) || (!raw_sockets && *cap == caps::Capability::CAP_NET_RAW)
            })
            .map(|cap| libc::c_ulong::from(cap.index()))
            .collect();
        Ok(Confinement {
            drop_caps,
            filters: super::seccomp::programs()?,
            nproc,
        })
    }

    /// In the child, after its namespaces are set: capabilities, user, filter. Only system
    /// calls.
    fn apply(&self, user: Option<&(u32, u32, Vec<u32>)>) -> std::io::Result<()> {
        for &cap in &self.drop_caps {
            // SAFETY: prctl with integer arguments.
            let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
            // EINVAL: a capability newer than the running kernel, nothing to drop.
            if rc != 0 && last_errno() != libc::EINVAL {
                return Err(std::io::Error::last_os_error());
            }
        }
        if let Some((uid, gid, groups)) = user {
            // SAFETY: plain system calls on a list allocated before the fork.
            unsafe {
                if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                    && last_errno() != libc::EPERM
                {
                    return Err(std::io::Error::last_os_error());
                }
                check(libc::setgid(*gid))?;
                check(libc::setuid(*uid))?;
            }
        }
        if let Some(max) = self.nproc {
            let limit = libc::rlimit {
                rlim_cur: max,
                rlim_max: max,
            };
            // SAFETY: setrlimit with a value on the stack.
            check(unsafe { libc::setrlimit(libc::RLIMIT_NPROC, &limit) })?;
        }
        for filter in &self.filters {
            // Sets no_new_privs first; no allocation on success or failure.
            seccompiler::apply_filter(filter).map_err(|_| std::io::Error::last_os_error())?;
        }
        Ok(())
    }
}

fn last_errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn check(rc: c_int) -> std::io::Result<()> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn cstr(text: &str) -> std::io::Result<CString> {
    CString::new(text).map_err(|_| std::io::Error::other(format!("NUL in path {text:?}")))
}

/// The tool view's namespaces, its init, and the confinement of every command.
pub(crate) struct Views {
    own_pid_ns: OwnedFd,
    tool_pid_ns: OwnedFd,
    tool_mnt_ns: OwnedFd,
    /// The inode of the tool view's pid namespace, by which its processes are told apart in
    /// the sandbox's `/proc`.
    tool_ns_ino: u64,
    /// Lines to the tool view's init (`kill`), and its answers.
    tool_ctl: Mutex<(std::fs::File, BufReader<std::fs::File>)>,
    confinement: Arc<Confinement>,
    /// Open `cgroup.procs` files of the agent's view's pids group (the server owns them for as
    /// long as these views live): every process of the view joins it.
    tool_cgroups: Arc<Vec<c_int>>,
    /// The user namespace every command enters last (container root = an unprivileged host
    /// uid); `None` for a sandbox on the host's own root.
    userns: Option<Arc<OwnedFd>>,
}

impl Views {
    /// Make the tool view. Must run while the process is single-threaded (a process whose
    /// children go to another pid namespace may not create threads), after the sandbox's
    /// `pivot_root` (the new mount namespace copies the current one).
    pub(crate) fn prepare(
        raw_sockets: bool,
        userns: bool,
        tool_cgroups: Vec<c_int>,
        nproc: Option<u64>,
    ) -> Result<Views, String> {
        let confinement = Arc::new(Confinement::new(raw_sockets, nproc)?);
        let userns = if userns {
            Some(Arc::new(create_userns()?))
        } else {
            None
        };
        let own_pid_ns = open_ns("/proc/self/ns/pid")?;
        let (ctl_r, ctl_w) = pipe()?;
        let (reply_r, reply_w) = pipe()?;
        // SAFETY: unshare with a flag.
        if unsafe { libc::unshare(libc::CLONE_NEWPID) } != 0 {
            return Err(format!(
                "unshare the tool pid namespace: {}",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: the process is single-threaded here (the caller's contract), so the child
        // may run ordinary code before it becomes the tool view's init.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            drop(ctl_w);
            drop(reply_r);
            // What the tool view's init forks (the ENTRYPOINT's orphans it adopts) is in the
            // group too. A failed join leaves it in the sandbox's.
            let _ = join_groups(&tool_cgroups);
            let code = tool_init_main(ctl_r, reply_w);
            // SAFETY: _exit leaves without the parent's atexit handlers or destructors.
            unsafe { libc::_exit(code) };
        }
        let forked = std::io::Error::last_os_error();
        // Back to our own namespace for children, so we may make threads again.
        set_ns(&own_pid_ns, libc::CLONE_NEWPID)
            .map_err(|e| format!("return to the sandbox's pid namespace: {e}"))?;
        if pid < 0 {
            return Err(format!("start the tool view's init: {forked}"));
        }
        drop(ctl_r);
        drop(reply_w);
        let mut reply = BufReader::new(std::fs::File::from(reply_r));
        let mut line = String::new();
        let _ = reply.read_line(&mut line);
        if line.trim() != "ready" {
            return Err(format!("tool view's init failed: {}", line.trim()));
        }
        let tool_ns_ino = std::os::unix::fs::MetadataExt::ino(
            &std::fs::metadata(format!("/proc/{pid}/ns/pid"))
                .map_err(|e| format!("read the tool view's pid namespace: {e}"))?,
        );
        Ok(Views {
            tool_ns_ino,
            tool_pid_ns: open_ns(&format!("/proc/{pid}/ns/pid"))?,
            tool_mnt_ns: open_ns(&format!("/proc/{pid}/ns/mnt"))?,
            own_pid_ns,
            tool_ctl: Mutex::new((std::fs::File::from(ctl_w), reply)),
            confinement,
            tool_cgroups: Arc::new(tool_cgroups),
            userns,
        })
    }

    /// SIGKILL every process of the tool view but its init; how many were alive.
    pub(crate) fn kill_tools(&self) -> usize {
        self.tell_tool_init("kill").parse().unwrap_or(0)
    }

    /// `what` with every process of the tool view stopped (SIGSTOP, which none can catch),
    /// then continued: what the agent left running cannot change what `what` reads meanwhile.
    /// A process the agent had stopped itself stays stopped.
    pub(crate) fn with_tools_stopped<T>(&self, what: impl FnOnce() -> T) -> T {
        self.tell_tool_init("stop");
        let out = what();
        self.tell_tool_init("cont");
        out
    }

    /// One command to the tool view's init, and its one-line answer.
    fn tell_tool_init(&self, command: &str) -> String {
        let mut ctl = match self.tool_ctl.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let (to, from) = &mut *ctl;
        if writeln!(to, "{command}").is_err() {
            return String::new();
        }
        let mut line = String::new();
        let _ = from.read_line(&mut line);
        line.trim().to_string()
    }

    /// Give the processes of the tool view that are busy on the CPU when a verifier starts
    /// the lowest priority (nice 19); how many were lowered. A busy loop the agent left behind
    /// then cannot starve the verifier into a timeout, while an idle service (a server waiting
    /// for the tests' requests) keeps its priority, so a test that measures it measures what
    /// it would under Harbor. Busy means at least [`BUSY_TICKS`] of CPU over [`BUSY_SAMPLE`];
    /// the sample is skipped when the view holds nothing but its init. The agent's processes
    /// hold no CAP_SYS_NICE, so none can raise itself back, and what a lowered one forks
    /// inherits its value.
    pub(crate) fn lower_busy_tools(&self) -> usize {
        let before = self.tool_cpu_ticks();
        if before.len() <= 1 {
            return 0;
        }
        std::thread::sleep(BUSY_SAMPLE);
        let mut lowered = 0;
        for (pid, ticks) in self.tool_cpu_ticks() {
            let used = ticks.saturating_sub(before.get(&pid).copied().unwrap_or(0));
            let Ok(id) = libc::id_t::try_from(pid) else {
                continue;
            };
            // SAFETY: setpriority with integer arguments; a process gone meanwhile is ESRCH.
            if used >= BUSY_TICKS && unsafe { libc::setpriority(libc::PRIO_PROCESS, id, 19) } == 0 {
                lowered += 1;
            }
        }
        lowered
    }

    /// CPU time (user + system, in clock ticks) of every live process of the tool view, by
    /// its pid in the sandbox's `/proc`.
    fn tool_cpu_ticks(&self) -> std::collections::HashMap<i32, u64> {
        use std::os::unix::fs::MetadataExt;
        super::init::live_processes("/proc")
            .into_iter()
            .filter(|pid| {
                std::fs::metadata(format!("/proc/{pid}/ns/pid"))
                    .is_ok_and(|m| m.ino() == self.tool_ns_ino)
            })
            .filter_map(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                // Fields 14 and 15 (utime, stime), counted after the parenthesised name.
                let (_, rest) = stat.rsplit_once(')')?;
                let fields: Vec<&str> = rest.split_whitespace().collect();
                let user: u64 = fields.get(11)?.parse().ok()?;
                let system: u64 = fields.get(12)?.parse().ok()?;
                Some((pid, user + system))
            })
            .collect()
    }

    /// Start `cmd` in `view`, in `cwd` (absolute), as `user`.
    pub(crate) fn spawn(
        &self,
        cmd: &mut Command,
        view: &View,
        cwd: &str,
        user: Option<&User>,
    ) -> std::io::Result<Child> {
        let cwd = cstr(cwd)?;
        let user = user.map(|u| (u.uid, u.gid, u.groups.clone()));
        let confinement = Arc::clone(&self.confinement);
        let userns = self.userns.clone();
        match view {
            View::Tool => {
                let mnt = self.tool_mnt_ns.as_raw_fd();
                let groups = Arc::clone(&self.tool_cgroups);
                // SAFETY: the closure makes only system calls.
                unsafe {
                    cmd.pre_exec(move || {
                        // Best effort: the sandbox's own limits hold regardless.
                        let _ = join_groups(&groups);
                        check(libc::setns(mnt, libc::CLONE_NEWNS))?;
                        check(libc::chdir(cwd.as_ptr()))?;
                        enter_userns(userns.as_deref())?;
                        confinement.apply(user.as_ref())
                    });
                }
                // Children of this thread go to the tool pid namespace until we return.
                set_ns(&self.tool_pid_ns, libc::CLONE_NEWPID)?;
                let spawned = cmd.spawn();
                let back = set_ns(&self.own_pid_ns, libc::CLONE_NEWPID);
                let child = spawned?;
                back?;
                Ok(child)
            }
            View::Verifier { tests } => {
                let tests = match tests {
                    Some(name) => {
                        fresh_tests_dir()?;
                        Some(cstr(&format!("{INBOX}/{name}"))?)
                    }
                    None => None,
                };
                let real = cstr(VERIFIER_MOUNT)?;
                let layer = cstr(UPPER_MOUNT)?;
                let logs = cstr("/logs/verifier")?;
                let inbox = cstr(INBOX)?;
                let tests_dir = cstr(crate::TESTS_DIR)?;
                let root = cstr("/")?;
                // SAFETY: the closure makes only system calls.
                unsafe {
                    cmd.pre_exec(move || {
                        check(libc::unshare(libc::CLONE_NEWNS))?;
                        check(libc::mount(
                            std::ptr::null(),
                            root.as_ptr(),
                            std::ptr::null(),
                            libc::MS_REC | libc::MS_PRIVATE,
                            std::ptr::null(),
                        ))?;
                        if let Some(from) = &tests {
                            // Never through a link the agent left at /tests.
                            let at = libc::open(
                                tests_dir.as_ptr(),
                                libc::O_PATH
                                    | libc::O_NOFOLLOW
                                    | libc::O_DIRECTORY
                                    | libc::O_CLOEXEC,
                            );
                            check(at)?;
                            attach_clone(from, at, false)?;
                            libc::close(at);
                        }
                        if libc::access(real.as_ptr(), libc::F_OK) == 0 {
                            let at = libc::open(
                                logs.as_ptr(),
                                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                            );
                            check(at)?;
                            attach_clone(&real, at, true)?;
                            libc::close(at);
                            check(libc::umount2(real.as_ptr(), libc::MNT_DETACH))?;
                        }
                        check(libc::umount2(inbox.as_ptr(), libc::MNT_DETACH))?;
                        // Absent in image builds.
                        let _ = libc::umount2(layer.as_ptr(), libc::MNT_DETACH);
                        check(libc::chdir(cwd.as_ptr()))?;
                        enter_userns(userns.as_deref())?;
                        confinement.apply(user.as_ref())
                    });
                }
                cmd.spawn()
            }
        }
    }
}

/// In the child, after its mounts: join the sandbox's user namespace as its root (the user
/// `Confinement::apply` then switches to is an id inside). Only system calls.
fn enter_userns(userns: Option<&OwnedFd>) -> std::io::Result<()> {
    let Some(ns) = userns else {
        return Ok(());
    };
    // SAFETY: setns on an open namespace descriptor, then plain id calls.
    unsafe {
        check(libc::setns(ns.as_raw_fd(), libc::CLONE_NEWUSER))?;
        check(libc::setresgid(0, 0, 0))?;
        check(libc::setresuid(0, 0, 0))?;
    }
    Ok(())
}

/// A user namespace mapping container ids 0..RANGE to host ids from HOST_BASE: a forked
/// child unshares it, we write its maps (as host root, so `setgroups` stays allowed inside)
/// and keep a descriptor, and the child exits. Runs while the process is single-threaded.
fn create_userns() -> Result<OwnedFd, String> {
    let (ready_r, ready_w) = pipe()?;
    let (hold_r, hold_w) = pipe()?;
    // SAFETY: the process is single-threaded here (prepare's contract), so the child may run
    // ordinary code.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        drop(ready_r);
        drop(hold_w);
        // SAFETY: unshare with a flag.
        let made = unsafe { libc::unshare(libc::CLONE_NEWUSER) } == 0;
        let _ = std::fs::File::from(ready_w).write_all(if made { b"1" } else { b"0" });
        let mut byte = [0u8; 1];
        let _ = std::io::Read::read(&mut std::fs::File::from(hold_r), &mut byte);
        // SAFETY: _exit leaves without the parent's atexit handlers or destructors.
        unsafe { libc::_exit(0) };
    }
    if pid < 0 {
        return Err(format!(
            "fork for the user namespace: {}",
            std::io::Error::last_os_error()
        ));
    }
    drop(ready_w);
    drop(hold_r);
    let mut byte = [0u8; 1];
    let answered = std::io::Read::read(&mut std::fs::File::from(ready_r), &mut byte);
    let made = (|| {
        if !matches!(answered, Ok(1)) || byte[0] != b'1' {
            return Err("unshare a user namespace: refused".to_string());
        }
        let map = crate::ids::map_line();
        for file in ["uid_map", "gid_map"] {
            std::fs::write(format!("/proc/{pid}/{file}"), &map)
                .map_err(|e| format!("write the user namespace's {file}: {e}"))?;
        }
        open_ns(&format!("/proc/{pid}/ns/user"))
    })();
    drop(hold_w);
    // SAFETY: waitpid on our own child.
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    made
}

/// Attach a writable copy of the mount at `from` on the folder `at` (an `O_PATH` descriptor
/// opened in this mount namespace). `rec` copies the mounts below it too.
///
/// # Safety
/// System calls only; `from` is a valid C string.
unsafe fn attach_clone(from: &CString, at: c_int, rec: bool) -> std::io::Result<()> {
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    const AT_RECURSIVE: libc::c_uint = 0x8000;
    const MOUNT_ATTR_RDONLY: u64 = 1;
    const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
    const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }
    let empty = c"";
    let flags =
        OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | if rec { AT_RECURSIVE } else { 0 };
    // SAFETY: the caller's contract; the arguments are valid for these system calls.
    unsafe {
        let tree = libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, from.as_ptr(), flags);
        if tree < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let tree = tree as c_int;
        // A staged copy lives under the read-only inbox: the verifier may write its own.
        let attr = MountAttr {
            attr_set: 0,
            attr_clr: MOUNT_ATTR_RDONLY,
            propagation: 0,
            userns_fd: 0,
        };
        let rc = libc::syscall(
            libc::SYS_mount_setattr,
            tree,
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        );
        if rc < 0 {
            libc::close(tree);
            return Err(std::io::Error::last_os_error());
        }
        let rc = libc::syscall(
            libc::SYS_move_mount,
            tree,
            empty.as_ptr(),
            at,
            empty.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        );
        libc::close(tree);
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `/tests` as a real folder to mount on, whatever the agent left there (a file, a link);
/// what a folder holds is covered by the mount.
fn fresh_tests_dir() -> std::io::Result<()> {
    let dir = std::path::Path::new(crate::TESTS_DIR);
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(_) => std::fs::remove_file(dir)?,
        Err(_) => {}
    }
    std::fs::create_dir(dir)?;
    // Container root's, as a folder the image had would be.
    crate::fsops::created(dir)
}

/// Move the calling process into each group whose `cgroup.procs` is open as `fds` ("0" names
/// the writer). Only system calls: it runs between `fork` and `exec`.
fn join_groups(fds: &[c_int]) -> std::io::Result<()> {
    for &fd in fds {
        // SAFETY: write of a static buffer to a descriptor the server keeps open.
        if unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) } != 1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

fn open_ns(path: &str) -> Result<OwnedFd, String> {
    std::fs::File::open(path)
        .map(OwnedFd::from)
        .map_err(|e| format!("open {path}: {e}"))
}

fn set_ns(fd: &OwnedFd, kind: c_int) -> std::io::Result<()> {
    // SAFETY: setns with an open namespace descriptor.
    check(unsafe { libc::setns(fd.as_raw_fd(), kind) })
}

fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: pipe2 fills two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: both descriptors were just opened and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The forked child: PID 1 of the tool pid namespace, in a mount namespace of its own
/// without the real verifier folder and with an empty inbox, then an init like the sandbox's.
/// Forked from a single-threaded process, so ordinary (allocating) code is safe here.
fn tool_init_main(ctl: OwnedFd, reply: OwnedFd) -> c_int {
    use nix::mount::{MntFlags, MsFlags, mount, umount2};
    let mut reply = std::fs::File::from(reply);
    let made = (|| -> Result<(), String> {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
            .map_err(|e| format!("unshare the tool mount namespace: {e}"))?;
        super::setup::make_private().map_err(|e| format!("make the tool view private: {e}"))?;
        // Absent in sandboxes without a verifier folder (image builds).
        let verified = std::path::Path::new(VERIFIER_MOUNT).exists();
        for hidden in [VERIFIER_MOUNT, UPPER_MOUNT] {
            let _ = umount2(hidden, MntFlags::MNT_DETACH);
        }
        if verified {
            // The verifier's private `/tests` is mounted on this folder in its own namespace;
            // removing or renaming the folder from another namespace would detach that mount
            // (the kernel allows it since 3.18) and give the verifier the agent's folder. A
            // mount point in the agent's own namespace cannot be removed or renamed (EBUSY).
            fresh_tests_dir().map_err(|e| format!("make {}: {e}", crate::TESTS_DIR))?;
            mount(
                Some(crate::TESTS_DIR),
                crate::TESTS_DIR,
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )
            .map_err(|e| format!("pin {}: {e}", crate::TESTS_DIR))?;
        }
        mount(
            Some("tmpfs"),
            INBOX,
            Some("tmpfs"),
            MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            Some("size=4k,mode=755"),
        )
        .map_err(|e| format!("hide the inbox: {e}"))?;
        nix::unistd::chdir("/").map_err(|e| format!("chdir /: {e}"))
    })();
    if let Err(e) = made {
        let _ = writeln!(reply, "error: {e}");
        return 1;
    }
    super::init::serve_as_init(std::fs::File::from(ctl), reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_keep_exactly_docker_s_set_without_mknod() {
        let c = Confinement::new(true, None).unwrap();
        let kept = caps::all().len() - c.drop_caps.len();
        assert_eq!(kept, KEEP_CAPS.len());
        let raw = libc::c_ulong::from(caps::Capability::CAP_NET_RAW.index());
        assert!(!c.drop_caps.contains(&raw));
        assert!(
            Confinement::new(false, None)
                .unwrap()
                .drop_caps
                .contains(&raw)
        );
        assert!(c.drop_caps.contains(&libc::c_ulong::from(
            caps::Capability::CAP_SYS_ADMIN.index()
        )));
        assert!(
            !c.drop_caps
                .contains(&libc::c_ulong::from(caps::Capability::CAP_KILL.index()))
        );
    }
}
