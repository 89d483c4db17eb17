//! Building a sandbox inside the server process: namespaces, the overlay root, `/dev`, binds,
//! the namespace's init, then `pivot_root`. Runs while the server is still single-threaded
//! (`unshare(CLONE_NEWNS | CLONE_NEWPID)` demands it).
//!
//! The root is an overlay whose upper is the sandbox's own layer. Its lower layers are the
//! image's unpacked layers (bottom first in the spec, top first for the kernel): nothing of the
//! host lies below them, so the host's `/usr`, the pack folder and the harness are simply not
//! in the tree. Only `--base host` puts the host root underneath; a built layer cannot then be
//! a second lower directory (it lives on the host root's filesystem, and overlayfs refuses a
//! lower layer nested inside another: `ELOOP`), so that layer is a read-only overlay of its own
//! over `/` and the trial's overlay stacks on it (depth two, which the kernel allows).
//!
//! The tree itself is [`super::rootfs`]'s; this module is the order of the steps around it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::CloneFlags;

use super::step::{SetupResult, ctx};
use crate::sandbox::protocol::{Network, ServerSpec};

/// The namespace's init, the agent that serves requests, and what set-up recorded.
pub(crate) struct Entered {
    pub init: Child,
    /// Init exits when this closes.
    pub init_in: ChildStdin,
    pub agent: Child,
    pub pid_namespace: String,
    pub notes: Vec<String>,
}

/// Make every mount of this (new) mount namespace private: nothing mounted here propagates
/// back to the namespace it was copied from.
pub(crate) fn make_private() -> nix::Result<()> {
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
}

/// Enter the sandbox. On success the process's root is the sandbox root and its cwd the
/// workdir; every process it starts from now on is inside.
pub(crate) fn enter(spec: &ServerSpec) -> SetupResult<Entered> {
    let mut notes = Vec::new();
    if spec.userns {
        crate::fsops::give_created_entries_to_root();
    }
    unshare_namespaces(spec)?;
    super::rootfs::build(spec, &mut notes)?;
    ctx(nix::unistd::sethostname(&spec.hostname), || {
        "set the hostname".into()
    })?;
    open_network(spec, &mut notes);

    let (mut init, init_in) = start_init(spec)?;
    let pid_namespace = ctx(
        std::fs::read_link(format!("/proc/{}/ns/pid", init.id())),
        || "read the sandbox's pid namespace".into(),
    )?
    .to_string_lossy()
    .into_owned();

    // The agent starts now, while the geode executable is still reachable by its host path;
    // pivot_root below moves its root along with ours, and it acts on nothing before the
    // first request, which comes after our `ready`.
    let agent = match start_agent(spec) {
        Ok(agent) => agent,
        Err(e) => {
            let _ = init.kill();
            let _ = init.wait();
            return Err(e);
        }
    };
    pivot_into(spec)?;
    Ok(Entered {
        init,
        init_in,
        agent,
        pid_namespace,
        notes,
    })
}

/// Leave the host's namespaces (joining the compose group's network when there is one) and
/// take on the sandbox's limits.
fn unshare_namespaces(spec: &ServerSpec) -> SetupResult<()> {
    let mut flags = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWIPC;
    if let Some(path) = &spec.join_network {
        let ns = ctx(std::fs::File::open(path), || {
            format!("open the group's network namespace {}", path.display())
        })?;
        ctx(nix::sched::setns(&ns, CloneFlags::CLONE_NEWNET), || {
            "join the group's network namespace".into()
        })?;
    } else if spec.network != Network::Host {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    ctx(nix::sched::unshare(flags), || "unshare namespaces".into())?;
    // Nothing we mount may propagate back to the host's mount table.
    ctx(make_private(), || "make / private".into())?;
    if let Some(bytes) = spec.rlimit_as {
        use nix::sys::resource::{Resource, setrlimit};
        ctx(setrlimit(Resource::RLIMIT_AS, bytes, bytes), || {
            "set RLIMIT_AS".into()
        })?;
    }
    for procs in &spec.cgroup_procs {
        let me = std::process::id().to_string();
        ctx(std::fs::write(procs, me), || {
            format!("join cgroup {}", procs.display())
        })?;
    }
    Ok(())
}

/// `lo` up, and what docker's root may do on its network; failures are notes, not errors.
fn open_network(spec: &ServerSpec, notes: &mut Vec<String>) {
    if spec.network != Network::Host
        && let Err(e) = crate::sandbox::netns::loopback_up()
    {
        notes.push(format!("loopback interface left down: {e}"));
    }
    // Container root has no capability over the network namespace (the host's user
    // namespace owns it): let it bind low ports and ping, as docker's root may.
    if spec.userns && spec.network != Network::Host {
        // Group ids as this namespace writes them: in the rootless one only container ids
        // (and the user) are mapped, and a range with unmapped ids is refused.
        let ping_groups = if crate::rootless::active() {
            let base = crate::ids::HOST_BASE;
            format!("{base} {}", base + crate::ids::RANGE - 1)
        } else {
            "0 2147483647".to_string()
        };
        for (knob, value) in [
            ("ipv4/ip_unprivileged_port_start", "0"),
            ("ipv4/ping_group_range", ping_groups.as_str()),
        ] {
            if let Err(e) = std::fs::write(format!("/proc/sys/net/{knob}"), value) {
                notes.push(format!("net.{knob} not set: {e}"));
            }
        }
    }
}

/// Make the sandbox's root our own and enter the workdir.
fn pivot_into(spec: &ServerSpec) -> SetupResult<()> {
    // pivot_root(".", ".") stacks the old root on the new one; detaching it leaves only the
    // sandbox. Unlike chroot, a root process inside cannot climb back out.
    ctx(nix::unistd::chdir(spec.root_mount.as_path()), || {
        "enter the sandbox root".into()
    })?;
    ctx(nix::unistd::pivot_root(".", "."), || "pivot_root".into())?;
    ctx(umount2(".", MntFlags::MNT_DETACH), || {
        "detach the host root".into()
    })?;
    ctx(nix::unistd::chdir("/"), || "chdir /".into())?;
    ctx(crate::fsops::create_dirs(Path::new(&spec.workdir)), || {
        format!("create workdir {}", spec.workdir)
    })?;
    ctx(nix::unistd::chdir(spec.workdir.as_str()), || {
        format!("enter workdir {}", spec.workdir)
    })
}

/// Start the namespace's init (the first child after `unshare(CLONE_NEWPID)` is its PID 1)
/// and wait until it has mounted `/proc`.
fn start_init(spec: &ServerSpec) -> SetupResult<(Child, ChildStdin)> {
    let mut child = ctx(
        Command::new(&spec.geode_exe)
            .arg(crate::INIT_ARG)
            .current_dir(&spec.root_mount)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn(),
        || format!("start the sandbox init ({})", spec.geode_exe.display()),
    )?;
    let (Some(init_in), Some(out)) = (child.stdin.take(), child.stdout.take()) else {
        return Err("init pipes missing".into());
    };
    let mut init_out = BufReader::new(out);
    let mut line = String::new();
    ctx(init_out.read_line(&mut line), || {
        "wait for the sandbox init".into()
    })?;
    if line.trim() != "ready" {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!("sandbox init failed: {}", line.trim()));
    }
    Ok((child, init_in))
}

/// Start the agent: the process inside the namespaces that serves the harness's requests on
/// the server's own stdin and stdout. It is a child, not the server itself, because a process
/// that unshared CLONE_NEWPID may not create threads (clone with CLONE_THREAD fails with
/// EINVAL), and serving wants one thread per running command.
///
/// Returns once the agent runs its own code: its dynamic loader has then mapped the host's
/// libraries. A `pivot_root` any earlier would have the loader open the image's libc, which
/// fails (or, worse, half-works) wherever the image's glibc is not the host's.
fn start_agent(spec: &ServerSpec) -> SetupResult<Child> {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let json = ctx(serde_json::to_string(spec), || "encode the spec".into())?;
    let (ready_r, ready_w) = ctx(nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC), || {
        "make the agent's ready pipe".into()
    })?;
    // The write end alone is inherited (every other descriptor of ours is close-on-exec).
    ctx(
        nix::fcntl::fcntl(
            &ready_w,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
        ),
        || "hand the ready pipe to the agent".into(),
    )?;
    let mut command = Command::new(&spec.geode_exe);
    command
        .arg(crate::AGENT_ARG)
        .arg(json)
        .arg(ready_w.as_raw_fd().to_string())
        .current_dir(&spec.root_mount)
        .env_clear()
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    let mut agent = ctx(command.spawn(), || {
        format!("start the sandbox agent ({})", spec.geode_exe.display())
    })?;
    drop(ready_w);
    let mut byte = [0u8; 1];
    let mut ready = std::fs::File::from(ready_r);
    if !matches!(ready.read(&mut byte), Ok(1)) {
        let _ = agent.kill();
        let status = agent.wait();
        return Err(format!(
            "the sandbox agent ended before it started ({status:?})"
        ));
    }
    Ok(agent)
}
