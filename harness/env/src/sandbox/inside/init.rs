//! `geode __sandbox-init`: PID 1 of a sandbox's pid namespace.
//!
//! The server starts it right after `unshare(CLONE_NEWPID)`, with its working directory at the
//! sandbox's root mount. It mounts `/proc` for the namespace (only a process inside the
//! namespace gets the namespace's view), then reaps orphans forever. Its stdin is a pipe from
//! the server: end of file (the server exited or was killed) makes it exit, and the kernel then kills
//! everything left in the namespace. So no sandbox process can outlive its server.
//! The same init, forked by the agent, is PID 1 of the tool view's pid namespace
//! ([`super::views`]), where a `kill` line ends every agent process at once.

use std::io::{BufRead, Read, Write};
use std::process::ExitCode;

use nix::mount::MsFlags;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

pub(crate) fn init_main() -> ExitCode {
    ExitCode::from(u8::try_from(serve_as_init(std::io::stdin(), std::io::stdout())).unwrap_or(1))
}

/// Be a pid namespace's init, in its mount namespace with the working directory at its root:
/// mount and harden `/proc`, say `ready` on `reply`, then reap orphans forever. A `kill` line
/// on `ctl` kills every other process of the namespace and answers how many were alive; end
/// of `ctl` ends the init, and with it the namespace.
pub(crate) fn serve_as_init(
    ctl: impl Read + Send + 'static,
    mut reply: impl Write + Send + 'static,
) -> i32 {
    hide_executable();
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    // Relative target: our cwd is the future root, before and after the server's pivot_root.
    if let Err(e) = nix::mount::mount(Some("proc"), "proc", Some("proc"), flags, None::<&str>) {
        let _ = writeln!(reply, "error: mount /proc: {e}");
        return 1;
    }
    if let Err(e) = harden_proc() {
        let _ = writeln!(reply, "error: {e}");
        return 1;
    }
    // SIGCHLD stays blocked in every thread (the reader below inherits the mask), so `wait`
    // below receives it instead of a default disposition that would drop it.
    let mut chld = SigSet::empty();
    chld.add(Signal::SIGCHLD);
    if let Err(e) = chld.thread_block() {
        let _ = writeln!(reply, "error: block SIGCHLD: {e}");
        return 1;
    }
    let _ = writeln!(reply, "ready");
    let _ = reply.flush();
    std::thread::spawn(move || command_loop(ctl, reply));
    loop {
        reap_all();
        if chld.wait().is_err() {
            // Only EINVAL is possible, and the set is valid: avoid a hot loop regardless.
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// What docker's default keeps read-only: the kernel's knobs (`/proc/sys/kernel/core_pattern`
/// names a program the host kernel runs as host root on a crash), and entries that act on the
/// whole machine.
const READ_ONLY: &[&str] = &[
    "proc/sys",
    "proc/sysrq-trigger",
    "proc/irq",
    "proc/bus",
    "proc/fs",
];
/// What docker's default masks: host memory, keys, timers and hardware inventories.
const MASKED: &[&str] = &[
    "proc/kcore",
    "proc/keys",
    "proc/timer_list",
    "proc/sched_debug",
    "proc/latency_stats",
    "proc/acpi",
    "proc/asound",
    "proc/scsi",
    "sys/firmware",
    "sys/devices/virtual/powercap",
];

/// Relative paths: our cwd is the sandbox root. Runs while init still has CAP_SYS_ADMIN; no
/// process started after it has, so none can undo it.
fn harden_proc() -> Result<(), String> {
    use nix::mount::mount;
    let ro = MsFlags::MS_BIND
        | MsFlags::MS_REMOUNT
        | MsFlags::MS_RDONLY
        | MsFlags::MS_NOSUID
        | MsFlags::MS_NODEV
        | MsFlags::MS_NOEXEC;
    for path in READ_ONLY {
        if !std::path::Path::new(path).exists() {
            continue;
        }
        mount(
            Some(*path),
            *path,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .and_then(|()| mount(None::<&str>, *path, None::<&str>, ro, None::<&str>))
        .map_err(|e| format!("make /{path} read-only: {e}"))?;
    }
    for path in MASKED {
        let Ok(meta) = std::fs::metadata(path) else {
            continue;
        };
        let masked = if meta.is_dir() {
            mount(
                Some("tmpfs"),
                *path,
                Some("tmpfs"),
                MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                Some("size=0"),
            )
        } else {
            mount(
                Some("dev/null"),
                *path,
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )
        };
        masked.map_err(|e| format!("mask /{path}: {e}"))?;
    }
    Ok(())
}

/// Not dumpable: the sandbox's processes (whose capabilities lack CAP_SYS_PTRACE) can then
/// neither open `/proc/PID/exe` of init or the agent (the harness's own binary) nor read their
/// memory. `exec` resets it, so the commands they start are ordinary.
pub(crate) fn hide_executable() {
    let _ = nix::sys::prctl::set_dumpable(false);
}

fn reap_all() {
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

fn command_loop(ctl: impl Read, mut reply: impl Write) {
    // Processes that were already stopped when the namespace was frozen stay stopped after.
    let mut stopped_before = Vec::new();
    for line in std::io::BufReader::new(ctl).lines() {
        let answer = match line.as_deref().map(str::trim) {
            Ok("kill") => kill_all_but_me().to_string(),
            Ok("stop") => {
                // The /proc here is this namespace's own (mounted by this init).
                stopped_before = processes("/proc")
                    .into_iter()
                    .filter(|(_, state)| matches!(state.as_str(), "T" | "t"))
                    .map(|(pid, _)| pid)
                    .collect();
                // kill(-1) signals the whole namespace at once: a fork in flight is restarted
                // with the signal pending, so nothing new runs on unseen.
                let _ = nix::sys::signal::kill(Pid::from_raw(-1), Signal::SIGSTOP);
                "stopped".to_string()
            }
            Ok("cont") => {
                for (pid, _) in processes("/proc") {
                    if pid != 1 && !stopped_before.contains(&pid) {
                        let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGCONT);
                    }
                }
                "continued".to_string()
            }
            Ok(_) => continue,
            Err(_) => break,
        };
        let _ = writeln!(reply, "{answer}");
        let _ = reply.flush();
    }
    // Whoever held the other end is gone: leaving takes the whole namespace down with us.
    std::process::exit(0)
}

/// From a process of the namespace: kill every other process of it except init; the number
/// that were alive (zombies, already dead and waiting for their parent, are not counted).
pub(crate) fn kill_all_but_me() -> usize {
    let me = i32::try_from(std::process::id()).unwrap_or(0);
    let count = live_processes("/proc")
        .into_iter()
        .filter(|&pid| pid != 1 && pid != me)
        .count();
    // kill(-1) reaches every process we may signal except ourselves and the namespace's init.
    let _ = nix::sys::signal::kill(Pid::from_raw(-1), Signal::SIGKILL);
    count
}

/// Pids listed in a procfs that are not zombies.
pub(crate) fn live_processes(proc_dir: &str) -> Vec<i32> {
    processes(proc_dir)
        .into_iter()
        .map(|(pid, _)| pid)
        .collect()
}

/// Pids listed in a procfs that are not zombies, with their state (`R`, `S`, `T` ...).
fn processes(proc_dir: &str) -> Vec<(i32, String)> {
    let Ok(dir) = std::fs::read_dir(proc_dir) else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // The state follows the parenthesised command name, which may itself contain spaces.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next());
        match state {
            Some("Z" | "X") | None => continue,
            Some(state) => pids.push((pid, state.to_string())),
        }
    }
    pids
}
