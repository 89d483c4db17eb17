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

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::CloneFlags;
use nix::sys::stat::{Mode, SFlag};

use super::protocol::{INBOX, Network, RootSpec, ServerSpec, UPPER_MOUNT, VERIFIER_MOUNT};

/// The namespace's init, the agent that serves requests, and what set-up recorded.
pub(crate) struct Entered {
    pub init: Child,
    /// Init exits when this closes.
    pub init_in: ChildStdin,
    pub agent: Child,
    pub pid_namespace: String,
    pub notes: Vec<String>,
}

type SetupResult<T> = Result<T, String>;

fn ctx<T, E: std::fmt::Display>(r: Result<T, E>, what: impl FnOnce() -> String) -> SetupResult<T> {
    r.map_err(|e| format!("{}: {e}", what()))
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
        super::fsops::give_created_entries_to_root();
    }
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

    let root = &spec.root_mount;
    // The sandbox's own folder: `upper/`, `work/` and `root/` side by side.
    let scratch = spec.upper.parent().unwrap_or(Path::new("/"));
    let (lower, host_root) = match &spec.root {
        RootSpec::Layers { lower } => {
            if lower.is_empty() {
                return Err("an image with no layers (FROM scratch with nothing added)".into());
            }
            // Short relative names (links in the sandbox's own folder, which is our cwd while
            // the overlay is mounted): `/proc/self/mountinfo` inside then names no host path,
            // and forty layers still fit the one page of mount options. overlayfs lists lower
            // layers top first.
            let mut names = Vec::with_capacity(lower.len());
            for (i, layer) in lower.iter().enumerate() {
                let name = format!("l{i}");
                ctx(
                    std::os::unix::fs::symlink(layer, scratch.join(&name)),
                    || format!("link layer {}", layer.display()),
                )?;
                names.push(name);
            }
            names.reverse();
            if let Some(image) = &spec.disk {
                let disk = scratch.join("disk");
                ctx(std::fs::create_dir_all(&disk), || {
                    "create the disk's mount point".into()
                })?;
                super::disk::mount_image(image, &disk)?;
                for dir in ["upper", "work"] {
                    ctx(std::fs::create_dir(disk.join(dir)), || {
                        format!("create {dir} on the trial disk")
                    })?;
                }
            }
            (names.join(":"), None)
        }
        RootSpec::Host {
            image,
            hide,
            fresh_dirs,
        } => {
            let lower = match image {
                Some(image) => {
                    let opts = format!(
                        "lowerdir=/,upperdir={},workdir={}",
                        opt_path(&image.layer)?,
                        opt_path(&image.work)?
                    );
                    ctx(
                        mount(
                            Some("overlay"),
                            &image.mount,
                            Some("overlay"),
                            MsFlags::MS_RDONLY,
                            Some(opts.as_str()),
                        ),
                        || format!("mount image layer {}", image.layer.display()),
                    )?;
                    opt_path(&image.mount)?
                }
                None => {
                    for dir in fresh_dirs {
                        whiteout(&spec.upper, dir)?;
                    }
                    "/".to_string()
                }
            };
            (lower, Some((image.is_none(), hide, fresh_dirs)))
        }
    };
    let (upper, work) = match host_root {
        Some(_) => (opt_path(&spec.upper)?, opt_path(&spec.work)?),
        None if spec.disk.is_some() => ("disk/upper".to_string(), "disk/work".to_string()),
        None => ("upper".to_string(), "work".to_string()),
    };
    let opts = format!("lowerdir={lower},upperdir={upper},workdir={work}");
    // One page is all the kernel takes of mount options.
    if opts.len() >= 4096 {
        return Err(format!(
            "the image has too many layers for one overlay mount ({} bytes of options)",
            opts.len()
        ));
    }
    if spec.userns {
        // The merged root takes the upper folder's owner: container root's.
        let top = scratch.join(&upper);
        ctx(super::ids::give_to_root(&top), || {
            format!("give {} to the sandbox's root", top.display())
        })?;
    }
    let cwd = ctx(std::env::current_dir(), || {
        "read the working directory".into()
    })?;
    ctx(nix::unistd::chdir(scratch), || {
        format!("enter {}", scratch.display())
    })?;
    ctx(
        mount(
            Some("overlay"),
            root,
            Some("overlay"),
            MsFlags::empty(),
            Some(opts.as_str()),
        ),
        || "mount the sandbox root".into(),
    )?;
    // Host paths given relative (a trial folder under `jobs/`) still mean what they meant.
    ctx(nix::unistd::chdir(&cwd), || {
        format!("return to {}", cwd.display())
    })?;
    if let Some((true, _, fresh_dirs)) = &host_root {
        for dir in fresh_dirs.iter() {
            fresh_dir(root, dir)?;
        }
    }

    // Mount points an image may lack (FROM scratch): /proc for init, /sys below.
    for dir in ["/proc", "/sys"] {
        ctx(std::fs::create_dir_all(inside(root, dir)), || {
            format!("create {dir}")
        })?;
    }
    mount_dev(root, spec.userns, &mut notes)?;
    let sys = inside(root, "/sys");
    if let Err(e) = mount(
        Some("sysfs"),
        &sys,
        Some("sysfs"),
        MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    ) {
        notes.push(format!("/sys not mounted: {e}"));
    }
    for bind in &spec.binds {
        let target = inside(root, &bind.inside);
        if bind.host.is_dir() {
            ctx(std::fs::create_dir_all(&target), || {
                format!("create {}", bind.inside)
            })?;
        } else {
            mount_point_file(&target, &bind.inside)?;
        }
        bind_mount(&bind.host, &target, bind.read_only)?;
    }
    if let Some(real) = &spec.verifier_logs {
        // Out of the agent's sight: only a verifier's view binds it at /logs/verifier.
        let hidden = inside(root, VERIFIER_MOUNT);
        ctx(std::fs::create_dir_all(&hidden), || {
            "create the verifier folder's mount point".into()
        })?;
        bind_mount(real, &hidden, false)?;
        // The writable layer (relative to the sandbox's folder, or absolute), for the control
        // processes' evidence scan only.
        let shown = inside(root, UPPER_MOUNT);
        ctx(std::fs::create_dir_all(&shown), || {
            "create the layer's mount point".into()
        })?;
        bind_mount(&scratch.join(&upper), &shown, true)?;
    }
    let inbox = inside(root, INBOX);
    ctx(std::fs::create_dir_all(&inbox), || {
        "create the inbox".into()
    })?;
    bind_mount(&spec.inbox, &inbox, true)?;
    for hidden in host_root.iter().flat_map(|(_, hide, _)| hide.iter()) {
        let target = inside(root, &hidden.to_string_lossy());
        if !target.is_dir() {
            continue;
        }
        ctx(
            mount(
                Some("tmpfs"),
                &target,
                Some("tmpfs"),
                MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                Some("size=4k,mode=755"),
            ),
            || format!("hide {}", hidden.display()),
        )?;
    }
    ctx(nix::unistd::sethostname(&spec.hostname), || {
        "set the hostname".into()
    })?;
    if spec.network != Network::Host
        && let Err(e) = super::netns::loopback_up()
    {
        notes.push(format!("loopback interface left down: {e}"));
    }
    // Container root has no capability over the network namespace (the host's user
    // namespace owns it): let it bind low ports and ping, as docker's root may.
    if spec.userns && spec.network != Network::Host {
        for (knob, value) in [
            ("ipv4/ip_unprivileged_port_start", "0"),
            ("ipv4/ping_group_range", "0 2147483647"),
        ] {
            if let Err(e) = std::fs::write(format!("/proc/sys/net/{knob}"), value) {
                notes.push(format!("net.{knob} not set: {e}"));
            }
        }
    }

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
    // pivot_root(".", ".") stacks the old root on the new one; detaching it leaves only the
    // sandbox. Unlike chroot, a root process inside cannot climb back out.
    ctx(nix::unistd::chdir(root.as_path()), || {
        "enter the sandbox root".into()
    })?;
    ctx(nix::unistd::pivot_root(".", "."), || "pivot_root".into())?;
    ctx(umount2(".", MntFlags::MNT_DETACH), || {
        "detach the host root".into()
    })?;
    ctx(nix::unistd::chdir("/"), || "chdir /".into())?;
    ctx(super::fsops::create_dirs(Path::new(&spec.workdir)), || {
        format!("create workdir {}", spec.workdir)
    })?;
    ctx(nix::unistd::chdir(spec.workdir.as_str()), || {
        format!("enter workdir {}", spec.workdir)
    })?;
    Ok(Entered {
        init,
        init_in,
        agent,
        pid_namespace,
        notes,
    })
}

/// An empty regular file to bind a host file over (an image's `/etc/resolv.conf` may be a
/// dangling link or missing; a link would send the bind somewhere else in the tree).
fn mount_point_file(target: &Path, shown: &str) -> SetupResult<()> {
    if let Some(parent) = target.parent() {
        ctx(std::fs::create_dir_all(parent), || {
            format!("create the parent of {shown}")
        })?;
    }
    match std::fs::symlink_metadata(target) {
        Ok(m) if m.is_file() => return Ok(()),
        Ok(m) if m.is_dir() => return Err(format!("{shown} is a directory in the image")),
        Ok(_) => ctx(std::fs::remove_file(target), || format!("replace {shown}"))?,
        Err(_) => {}
    }
    ctx(std::fs::write(target, b""), || format!("create {shown}"))
}

/// overlayfs splits its options on `,` and lower layers on `:`.
fn opt_path(path: &Path) -> SetupResult<String> {
    let text = path.to_string_lossy().into_owned();
    if text.contains([',', ':', '\\']) {
        return Err(format!(
            "path {text:?} cannot be an overlay layer (`,` `:` or `\\`)"
        ));
    }
    Ok(text)
}

/// `inside_path` (absolute, as seen in the sandbox) under the host-side root mount.
fn inside(root: &Path, inside_path: &str) -> PathBuf {
    root.join(inside_path.trim_start_matches('/'))
}

fn bind_mount(host: &Path, target: &Path, read_only: bool) -> SetupResult<()> {
    ctx(
        mount(
            Some(host),
            target,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        ),
        || format!("bind {} at {}", host.display(), target.display()),
    )?;
    if read_only {
        ctx(
            mount(
                None::<&str>,
                target,
                None::<&str>,
                MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
                None::<&str>,
            ),
            || format!("make {} read-only", target.display()),
        )?;
    }
    Ok(())
}

/// A whiteout (char device 0:0) in the upper layer hides the host's directory; the `mkdir` in
/// [`fresh_dir`] then makes overlayfs create an opaque, empty directory in its place.
fn whiteout(upper: &Path, dir: &str) -> SetupResult<()> {
    let host = Path::new(dir);
    if !host.is_dir() {
        return Ok(());
    }
    let at = upper.join(dir.trim_start_matches('/'));
    if let Some(parent) = at.parent() {
        mirror_parents(upper, parent)?;
    }
    ctx(
        nix::sys::stat::mknod(&at, SFlag::S_IFCHR, Mode::empty(), 0),
        || format!("hide the host's {dir}"),
    )
}

/// Create `upper_dir`'s missing ancestors with the modes of the host directories they shadow
/// (an upper directory's attributes win in the merged view).
fn mirror_parents(upper: &Path, upper_dir: &Path) -> SetupResult<()> {
    let Ok(rel) = upper_dir.strip_prefix(upper) else {
        return Ok(());
    };
    let mut host = PathBuf::from("/");
    let mut at = upper.to_path_buf();
    for part in rel.components() {
        host.push(part);
        at.push(part);
        if at.exists() {
            continue;
        }
        let mode = std::fs::metadata(&host).map_or(0o755, |m| m.permissions().mode() & 0o7777);
        ctx(std::fs::DirBuilder::new().mode(mode).create(&at), || {
            format!("create {}", at.display())
        })?;
        ctx(
            std::fs::set_permissions(&at, std::fs::Permissions::from_mode(mode)),
            || format!("chmod {}", at.display()),
        )?;
    }
    Ok(())
}

fn fresh_dir(root: &Path, dir: &str) -> SetupResult<()> {
    let Ok(meta) = std::fs::metadata(dir) else {
        return Ok(());
    };
    let at = inside(root, dir);
    if at.exists() {
        return Ok(());
    }
    let mode = meta.permissions().mode() & 0o7777;
    ctx(std::fs::create_dir(&at), || format!("create a fresh {dir}"))?;
    ctx(
        std::fs::set_permissions(&at, std::fs::Permissions::from_mode(mode)),
        || format!("chmod {dir}"),
    )
}

/// A private `/dev`: a tmpfs with the harmless host devices bound in, its own `pts` and `shm`.
/// Binding the host's whole `/dev` would hand the sandbox the host's disks.
fn mount_dev(root: &Path, userns: bool, notes: &mut Vec<String>) -> SetupResult<()> {
    let dev = inside(root, "/dev");
    ctx(std::fs::create_dir_all(&dev), || "create /dev".into())?;
    // Container root's, as docker's /dev is.
    let owner = if userns {
        format!(",uid={0},gid={0}", super::ids::HOST_BASE)
    } else {
        String::new()
    };
    ctx(
        mount(
            Some("tmpfs"),
            &dev,
            Some("tmpfs"),
            MsFlags::MS_NOSUID,
            Some(format!("mode=755,size=65536k{owner}").as_str()),
        ),
        || "mount /dev".into(),
    )?;
    for name in ["null", "zero", "full", "random", "urandom", "tty"] {
        let host = Path::new("/dev").join(name);
        if !host.exists() {
            continue;
        }
        let target = dev.join(name);
        ctx(std::fs::write(&target, b""), || {
            format!("create /dev/{name}")
        })?;
        bind_mount(&host, &target, false)?;
    }
    for (name, to) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ] {
        ctx(std::os::unix::fs::symlink(to, dev.join(name)), || {
            format!("link /dev/{name}")
        })?;
    }
    let pts = dev.join("pts");
    ctx(std::fs::DirBuilder::new().mode(0o755).create(&pts), || {
        "create /dev/pts".into()
    })?;
    if let Err(e) = mount(
        Some("devpts"),
        &pts,
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=620"),
    ) {
        notes.push(format!("/dev/pts not mounted: {e}"));
    }
    let shm = dev.join("shm");
    ctx(std::fs::create_dir(&shm), || "create /dev/shm".into())?;
    ctx(
        mount(
            Some("tmpfs"),
            &shm,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=1777,size=65536k"),
        ),
        || "mount /dev/shm".into(),
    )
}

/// Start the namespace's init (the first child after `unshare(CLONE_NEWPID)` is its PID 1)
/// and wait until it has mounted `/proc`.
fn start_init(spec: &ServerSpec) -> SetupResult<(Child, ChildStdin)> {
    let mut child = ctx(
        Command::new(&spec.geode_exe)
            .arg(super::INIT_ARG)
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
        .arg(super::AGENT_ARG)
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
