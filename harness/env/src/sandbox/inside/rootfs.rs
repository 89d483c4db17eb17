//! The sandbox's file tree, mounted under the server's root mount before `pivot_root`: the
//! overlay root over the image's layers (or the host's root), a private `/dev`, `/sys`, the
//! binds, the verifier's hidden folders, the inbox, and what `--base host` hides.
//!
//! Everything here is mount work on host paths, done once while the server is still
//! single-threaded; [`super::setup`] decides when it runs.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::mount::{MsFlags, mount};
use nix::sys::stat::{Mode, SFlag};

use super::step::{SetupResult, ctx};
use crate::sandbox::protocol::{Disk, INBOX, RootSpec, ServerSpec, UPPER_MOUNT, VERIFIER_MOUNT};

/// What `--base host` adds to the root.
struct HostRoot<'a> {
    /// The host's root itself is the lower layer (no built layer over it), so the fresh
    /// folders must be made here.
    bare: bool,
    hide: &'a [PathBuf],
    fresh_dirs: &'a [String],
}

/// Mount the sandbox's whole tree under `spec.root_mount`.
pub(super) fn build(spec: &ServerSpec, notes: &mut Vec<String>) -> SetupResult<()> {
    let root = &spec.root_mount;
    // The sandbox's own folder: `upper/`, `work/` and `root/` side by side.
    let scratch = spec.upper.parent().unwrap_or(Path::new("/"));
    let (lower, host_root) = lower_layers(spec, scratch)?;
    let upper = mount_overlay(spec, scratch, &lower, host_root.is_some())?;
    if let Some(host) = host_root.as_ref().filter(|host| host.bare) {
        for dir in host.fresh_dirs {
            fresh_dir(root, dir)?;
        }
    }
    // Mount points an image may lack (FROM scratch): /proc for init, /sys below.
    for dir in ["/proc", "/sys"] {
        ctx(std::fs::create_dir_all(inside(root, dir)), || {
            format!("create {dir}")
        })?;
    }
    mount_dev(root, spec.userns, notes)?;
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
    mount_binds(spec, scratch, &scratch.join(&upper))?;
    if let Some(host) = &host_root {
        hide_host_dirs(root, host.hide)?;
    }
    Ok(())
}

/// overlayfs' `lowerdir`: the image's layers, or the host's root (with its built layer).
fn lower_layers<'a>(
    spec: &'a ServerSpec,
    scratch: &Path,
) -> SetupResult<(String, Option<HostRoot<'a>>)> {
    match &spec.root {
        RootSpec::Layers { lower } => Ok((image_layers(spec, lower, scratch)?, None)),
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
            let host = HostRoot {
                bare: image.is_none(),
                hide,
                fresh_dirs,
            };
            Ok((lower, Some(host)))
        }
    }
}

/// The image's layers as `lowerdir`, and the trial's disk mounted when it has one.
fn image_layers(spec: &ServerSpec, lower: &[PathBuf], scratch: &Path) -> SetupResult<String> {
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
    if let Some(kind) = &spec.disk {
        let disk = scratch.join("disk");
        ctx(std::fs::create_dir_all(&disk), || {
            "create the disk's mount point".into()
        })?;
        match kind {
            Disk::Image(image) => crate::disk::mount_image(image, &disk)?,
            Disk::Tmpfs(mb) => crate::disk::mount_tmpfs(*mb, &disk)?,
        }
        for dir in ["upper", "work"] {
            ctx(std::fs::create_dir(disk.join(dir)), || {
                format!("create {dir} on the trial disk")
            })?;
        }
    }
    Ok(names.join(":"))
}

/// Mount the root overlay; returns its upper layer (relative to `scratch`, or absolute).
fn mount_overlay(
    spec: &ServerSpec,
    scratch: &Path,
    lower: &str,
    on_host: bool,
) -> SetupResult<String> {
    let (upper, work) = if on_host {
        (opt_path(&spec.upper)?, opt_path(&spec.work)?)
    } else if spec.disk.is_some() {
        ("disk/upper".to_string(), "disk/work".to_string())
    } else {
        ("upper".to_string(), "work".to_string())
    };
    let mut opts = format!("lowerdir={lower},upperdir={upper},workdir={work}");
    // In a user namespace overlayfs may not use `trusted.*`: its marks are `user.overlay.*`.
    if crate::rootless::active() {
        opts.push_str(",userxattr");
    }
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
        ctx(crate::ids::give_to_root(&top), || {
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
            &spec.root_mount,
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
    Ok(upper)
}

/// The spec's binds, the verifier's hidden folders, and the read-only inbox.
fn mount_binds(spec: &ServerSpec, scratch: &Path, upper: &Path) -> SetupResult<()> {
    let root = &spec.root_mount;
    for (i, bind) in spec.binds.iter().enumerate() {
        let target = inside(root, &bind.inside);
        let source = if bind.host.is_dir() {
            ctx(std::fs::create_dir_all(&target), || {
                format!("create {}", bind.inside)
            })?;
            folder_on_trial_disk(spec, scratch, bind, i)?
        } else {
            mount_point_file(&target, &bind.inside)?;
            on_trial_disk(spec, scratch, bind, i)?
        };
        bind_mount(&source, &target, bind.read_only)?;
    }
    if let Some(real) = &spec.verifier_logs {
        // Out of the agent's sight: only a verifier's view binds it at /logs/verifier.
        let hidden = inside(root, VERIFIER_MOUNT);
        ctx(std::fs::create_dir_all(&hidden), || {
            "create the verifier folder's mount point".into()
        })?;
        bind_mount(real, &hidden, false)?;
        // The writable layer, for the control processes' evidence scan only.
        let shown = inside(root, UPPER_MOUNT);
        ctx(std::fs::create_dir_all(&shown), || {
            "create the layer's mount point".into()
        })?;
        bind_mount(upper, &shown, true)?;
    }
    let inbox = inside(root, INBOX);
    ctx(std::fs::create_dir_all(&inbox), || {
        "create the inbox".into()
    })?;
    bind_mount(&spec.inbox, &inbox, true)
}

/// What a file bind shows: a writable one (`/etc/hosts`) is a copy on the trial's disk, so
/// what the agent writes into it counts against the trial's storage like every other write
/// (bound from the host, 1.5 GB went past a 300 MB budget onto the host's disk); a read-only
/// one, or any without a trial disk, is the host file itself.
fn on_trial_disk(
    spec: &ServerSpec,
    scratch: &Path,
    bind: &crate::sandbox::protocol::Bind,
    index: usize,
) -> SetupResult<PathBuf> {
    if bind.read_only || spec.disk.is_none() {
        return Ok(bind.host.clone());
    }
    let dir = scratch.join("disk").join("binds");
    ctx(std::fs::create_dir_all(&dir), || {
        "create the binds' folder on the trial disk".into()
    })?;
    let copy = dir.join(index.to_string());
    ctx(std::fs::copy(&bind.host, &copy), || {
        format!("copy {} onto the trial disk", bind.inside)
    })?;
    if spec.userns {
        ctx(crate::ids::give_to_root(&copy), || {
            format!("give {} to the sandbox's root", bind.inside)
        })?;
    }
    Ok(copy)
}

/// What a folder bind shows: an `on_disk` one is a folder on the trial's disk holding a copy
/// of the host folder's content (regular files and folders; links are left out, never
/// followed), given to the sandbox's root; any other, or any without a trial disk, is the host
/// folder itself.
fn folder_on_trial_disk(
    spec: &ServerSpec,
    scratch: &Path,
    bind: &crate::sandbox::protocol::Bind,
    index: usize,
) -> SetupResult<PathBuf> {
    if !bind.on_disk || bind.read_only || spec.disk.is_none() {
        return Ok(bind.host.clone());
    }
    let copy = scratch.join("disk").join("binds").join(index.to_string());
    ctx(copy_folder(&bind.host, &copy, spec.userns), || {
        format!("copy {} onto the trial disk", bind.inside)
    })?;
    Ok(copy)
}

fn copy_folder(from: &Path, to: &Path, userns: bool) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    // Its mode too: a service's log folder is open to every user of its image.
    std::fs::set_permissions(to, std::fs::metadata(from)?.permissions())?;
    if userns {
        crate::ids::give_to_root(to)?;
    }
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let dest = to.join(entry.file_name());
        if kind.is_dir() {
            copy_folder(&entry.path(), &dest, userns)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &dest)?;
            if userns {
                crate::ids::give_to_root(&dest)?;
            }
        }
    }
    Ok(())
}

/// Cover the host folders a `--base host` sandbox must not see with an empty read-only tmpfs.
fn hide_host_dirs(root: &Path, hide: &[PathBuf]) -> SetupResult<()> {
    for hidden in hide {
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
    Ok(())
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
        format!(",uid={0},gid={0}", crate::ids::HOST_BASE)
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
