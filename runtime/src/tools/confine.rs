//! The sandbox of a person's shell commands (REPL, `geode exec`, the daemon): the workspace
//! writable, the rest of the machine read-only, a private `/tmp`, the daemons' sockets hidden
//! (GEODE's own included), and no network unless allowed.
//!
//! It is made between `fork` and `exec` of each command, from namespaces alone (no helper
//! binary, no image), so a command starts a few milliseconds later than unconfined:
//!
//! 1. a new user, mount and (without network) network namespace, mapping the user to itself;
//! 2. a copy of the workspace's mount tree taken while it is still writable;
//! 3. every mount made read-only (`mount_setattr`, recursive);
//! 4. empty tmpfs over `/tmp`, `/run` and the hidden folders, `/dev/null` over hidden files (a
//!    docker or D-Bus socket, GEODE's own daemon socket, would otherwise let a command act
//!    outside; connecting to a socket ignores a read-only mount);
//! 5. the writable copy attached back at the workspace's path;
//! 6. the loopback interface up, so local servers and tests still work offline;
//! 7. a second user and mount namespace, which locks every mount as it is: even a user who is
//!    root outside cannot remount anything writable from inside.
//!
//! What it does not isolate: process ids (a command sees, and may signal, the user's own
//! processes), and reads (anything the user may read, it may read; with no network it can only
//! show it to the model).

// Namespaces and mounts are made with system calls in the forked child, where nothing else may
// run; every unsafe block says what it relies on.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// How a person's session runs shell commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandSandbox {
    /// Unconfined on the host, as the user (`--sandbox off`).
    Off,
    /// Confined as the module describes.
    WorkspaceWrite(SandboxPolicy),
}

/// What a confined command may still reach.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SandboxPolicy {
    /// The host's network (off: only a loopback of its own).
    pub network: bool,
    /// Paths made empty: a folder becomes an empty one, a file (a daemon's socket) an empty
    /// character device. GEODE's daemon socket is one: a command connecting to it could ask
    /// the daemon for what the sandbox refuses.
    pub hidden: Vec<PathBuf>,
}

/// Folders every confined command gets empty: a private `/tmp`, and `/run` where the system's
/// and the user's daemons keep their sockets.
const ALWAYS_HIDDEN: [&str; 3] = ["/tmp", "/run", "/var/run"];

/// One command's confinement, computed before `fork` (the child may not allocate).
pub(crate) struct Confinement {
    workspace: CString,
    cwd: CString,
    /// (folder, tmpfs options) outside the workspace, outermost first.
    masks: Vec<(CString, CString)>,
    /// The same inside it (GEODE's home under a workspace that is the home folder): applied
    /// after the workspace is attached, which would cover them otherwise.
    inner_masks: Vec<(CString, CString)>,
    /// Files (sockets) covered by `/dev/null`.
    covered: Vec<CString>,
    /// Folders to create inside a mask so the workspace can be attached under it, outermost
    /// first.
    mount_points: Vec<CString>,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    network: bool,
}

fn c_string(bytes: &[u8]) -> std::io::Result<CString> {
    CString::new(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in a path"))
}

fn c_path(p: &Path) -> std::io::Result<CString> {
    c_string(p.as_os_str().as_bytes())
}

impl Confinement {
    /// `workspace` and `cwd` (inside it) are canonical.
    pub(crate) fn new(
        workspace: &Path,
        cwd: &Path,
        policy: &SandboxPolicy,
    ) -> std::io::Result<Confinement> {
        let mut hidden: Vec<PathBuf> = ALWAYS_HIDDEN.iter().map(PathBuf::from).collect();
        hidden.extend(policy.hidden.iter().cloned());
        let covered = hidden
            .iter()
            .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| !m.is_dir() && !m.is_symlink()))
            .map(|p| c_path(p))
            .collect::<std::io::Result<Vec<_>>>()?;
        // Only real folders: `/var/run` is usually a link to `/run`, and a mount follows links.
        let mut folders: Vec<PathBuf> = hidden
            .into_iter()
            .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()))
            .filter_map(|p| std::fs::canonicalize(p).ok())
            // Hiding the workspace itself, or a folder holding it whole, is attaching it back.
            .filter(|p| p != workspace)
            .collect();
        folders.sort_by(|a, b| (a.components().count(), a).cmp(&(b.components().count(), b)));
        folders.dedup();
        let mask = |p: &PathBuf| {
            let mode = if p == Path::new("/tmp") {
                "1777"
            } else {
                "0755"
            };
            Ok((c_path(p)?, c_string(format!("mode={mode}").as_bytes())?))
        };
        let (inner, outer): (Vec<&PathBuf>, Vec<&PathBuf>) =
            folders.iter().partition(|p| p.starts_with(workspace));
        let masks = outer
            .into_iter()
            .map(mask)
            .collect::<std::io::Result<Vec<_>>>()?;
        let inner_masks = inner
            .into_iter()
            .map(mask)
            .collect::<std::io::Result<Vec<_>>>()?;
        // Under the deepest mask holding the workspace, its path must be made again.
        let mount_points = match folders.iter().rev().find(|m| workspace.starts_with(m)) {
            Some(mask) => workspace
                .ancestors()
                .take_while(|a| a != mask)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .map(c_path)
                .collect::<std::io::Result<Vec<_>>>()?,
            None => Vec::new(),
        };
        // SAFETY: getuid and getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Ok(Confinement {
            workspace: c_path(workspace)?,
            cwd: c_path(cwd)?,
            masks,
            inner_masks,
            covered,
            mount_points,
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            network: policy.network,
        })
    }

    /// Confines the calling process. Runs in the child between `fork` and `exec`: system
    /// calls only, no allocation.
    pub(crate) fn apply(&self) -> std::io::Result<()> {
        let net = if self.network { 0 } else { libc::CLONE_NEWNET };
        // SAFETY: system calls on valid C strings and descriptors we own.
        unsafe {
            check(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS | net))?;
            self.map_ids()?;
            check(libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            let tree = libc::syscall(
                libc::SYS_open_tree,
                libc::AT_FDCWD,
                self.workspace.as_ptr(),
                OPEN_TREE_CLONE | AT_RECURSIVE | libc::O_CLOEXEC as libc::c_uint,
            );
            if tree < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let tree = tree as libc::c_int;
            let read_only = MountAttr {
                attr_set: MOUNT_ATTR_RDONLY,
                attr_clr: 0,
                propagation: 0,
                userns_fd: 0,
            };
            check_long(libc::syscall(
                libc::SYS_mount_setattr,
                libc::AT_FDCWD,
                c"/".as_ptr(),
                AT_RECURSIVE,
                &read_only as *const MountAttr,
                std::mem::size_of::<MountAttr>(),
            ))?;
            // The second user namespace's id maps are written through /proc, so it stays
            // writable (what /proc lets a write change is checked against the caller's
            // namespaces, in which it is nobody on the host).
            let writable = MountAttr {
                attr_set: 0,
                attr_clr: MOUNT_ATTR_RDONLY,
                propagation: 0,
                userns_fd: 0,
            };
            check_long(libc::syscall(
                libc::SYS_mount_setattr,
                libc::AT_FDCWD,
                c"/proc".as_ptr(),
                0,
                &writable as *const MountAttr,
                std::mem::size_of::<MountAttr>(),
            ))?;
            for (folder, options) in &self.masks {
                mount_tmpfs(folder, options)?;
            }
            for dir in &self.mount_points {
                if libc::mkdir(dir.as_ptr(), 0o755) != 0
                    && std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST)
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            check_long(libc::syscall(
                libc::SYS_move_mount,
                tree,
                c"".as_ptr(),
                libc::AT_FDCWD,
                self.workspace.as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH,
            ))?;
            libc::close(tree);
            for (folder, options) in &self.inner_masks {
                mount_tmpfs(folder, options)?;
            }
            for file in &self.covered {
                check(libc::mount(
                    c"/dev/null".as_ptr(),
                    file.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                ))?;
            }
            if !self.network {
                loopback_up()?;
            }
            // Mounts copied into a less privileged namespace are locked as they are.
            check(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS))?;
            self.map_ids()?;
            check(libc::chdir(self.cwd.as_ptr()))?;
        }
        Ok(())
    }

    /// Maps the user (and group) to itself in the namespace just made.
    ///
    /// # Safety
    /// System calls only.
    unsafe fn map_ids(&self) -> std::io::Result<()> {
        // SAFETY: the caller's contract.
        unsafe {
            write_file(c"/proc/self/setgroups", b"deny")?;
            write_file(c"/proc/self/uid_map", &self.uid_map)?;
            write_file(c"/proc/self/gid_map", &self.gid_map)
        }
    }
}

const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOUNT_ATTR_RDONLY: u64 = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

fn check(rc: libc::c_int) -> std::io::Result<()> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn check_long(rc: libc::c_long) -> std::io::Result<()> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// # Safety
/// System calls only.
unsafe fn mount_tmpfs(folder: &std::ffi::CStr, options: &std::ffi::CStr) -> std::io::Result<()> {
    // SAFETY: valid C strings.
    check(unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            folder.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            options.as_ptr().cast(),
        )
    })
}

/// # Safety
/// System calls only.
unsafe fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> std::io::Result<()> {
    // SAFETY: a valid path; the descriptor is closed on every path out.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if n < 0 || n as usize != bytes.len() {
            return Err(err);
        }
    }
    Ok(())
}

/// Brings up `lo` in the new network namespace.
///
/// # Safety
/// System calls only.
unsafe fn loopback_up() -> std::io::Result<()> {
    // SAFETY: an ifreq zeroed then named; the socket is closed on every path out.
    unsafe {
        let sock = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if sock < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
            *dst = *src as libc::c_char;
        }
        let mut rc = libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut req);
        if rc == 0 {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            rc = libc::ioctl(sock, libc::SIOCSIFFLAGS, &req);
        }
        let err = std::io::Error::last_os_error();
        libc::close(sock);
        if rc < 0 {
            return Err(err);
        }
    }
    Ok(())
}
