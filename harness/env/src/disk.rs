//! A trial's disk: its writable layer lives on an ext4 file system of its own, the size of
//! the task's `storage_mb`, so a full disk is `ENOSPC` inside and nothing on the host.
//!
//! The file system is a sparse image file in the trial's scratch folder, attached to a loop
//! device with auto-clear and mounted in the sandbox server's private mount namespace only:
//! when the server's namespace goes (teardown, a crash, `kill -9` of the harness) the kernel
//! unmounts it and frees the loop device, and no host mount is ever left behind. Making the
//! file system is done once per size ([`template`]); a trial copies the template's few
//! allocated blocks ([`clone_sparse`]): 10 GiB of ext4 is 132 KiB of data.
//!
//! The loop device is configured with two `ioctl`s, which is why this module alone (with
//! `views`) may use `unsafe`.
#![allow(unsafe_code)]

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::EnvError;

/// Harbor's default `storage_mb` when a task names none.
pub const DEFAULT_STORAGE_MB: u64 = 10 * 1024;

/// The smallest disk that holds a file system and a writable layer.
const MIN_STORAGE_MB: u64 = 16;

fn io(context: String) -> impl FnOnce(std::io::Error) -> EnvError {
    move |source| EnvError::Io { context, source }
}

/// An empty ext4 image of `size_mb` under `cache`, made once (the first caller to finish
/// wins; others reuse it).
pub(crate) fn template(cache: &Path, size_mb: u64) -> Result<PathBuf, EnvError> {
    let size_mb = size_mb.max(MIN_STORAGE_MB);
    let dir = cache.join("disks");
    let path = dir.join(format!("ext4-{size_mb}m.img"));
    if path.is_file() {
        return Ok(path);
    }
    std::fs::create_dir_all(&dir).map_err(io(format!("create {}", dir.display())))?;
    let tmp = dir.join(format!(
        ".ext4-{size_mb}m.{}",
        uuid::Uuid::new_v4().simple()
    ));
    let file = std::fs::File::create(&tmp).map_err(io(format!("create {}", tmp.display())))?;
    file.set_len(size_mb << 20)
        .map_err(io(format!("size {}", tmp.display())))?;
    drop(file);
    // No journal (the layer dies with the trial), no reserved blocks, no resize room, and
    // inode tables left unwritten: the image stays a few blocks until the trial writes.
    let out = std::process::Command::new("mkfs.ext4")
        .args([
            "-q",
            "-F",
            "-m",
            "0",
            "-O",
            "^has_journal,^resize_inode,sparse_super2",
            "-E",
            "lazy_itable_init=1,nodiscard,num_backup_sb=0,root_owner=0:0",
        ])
        .arg(&tmp)
        .output();
    let failed = match out {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        Err(e) => Some(format!("{e} (mkfs.ext4 is in Debian's e2fsprogs)")),
    };
    if let Some(why) = failed {
        let _ = std::fs::remove_file(&tmp);
        return Err(EnvError::SetupFailed {
            step: "trial disk".into(),
            message: format!("mkfs.ext4 for a {size_mb} MB disk: {why}"),
        });
    }
    std::fs::rename(&tmp, &path).map_err(io(format!("install {}", path.display())))?;
    Ok(path)
}

/// Copy `from` to `to` with its holes: only the allocated extents are read and written.
pub(crate) fn clone_sparse(from: &Path, to: &Path) -> Result<(), EnvError> {
    let mut src = std::fs::File::open(from).map_err(io(format!("open {}", from.display())))?;
    let len = src
        .metadata()
        .map_err(io(format!("stat {}", from.display())))?
        .len();
    let mut dst = std::fs::File::create(to).map_err(io(format!("create {}", to.display())))?;
    dst.set_len(len)
        .map_err(io(format!("size {}", to.display())))?;
    let mut at: i64 = 0;
    let end = i64::try_from(len).unwrap_or(i64::MAX);
    let mut buf = vec![0u8; 1 << 16];
    while at < end {
        let Ok(data) = nix::unistd::lseek(&src, at, nix::unistd::Whence::SeekData) else {
            break; // ENXIO: only a hole is left.
        };
        let hole = nix::unistd::lseek(&src, data, nix::unistd::Whence::SeekHole).unwrap_or(end);
        src.seek(SeekFrom::Start(data.unsigned_abs()))
            .and_then(|_| dst.seek(SeekFrom::Start(data.unsigned_abs())))
            .map_err(io(format!("seek in {}", from.display())))?;
        let mut left = (hole - data).unsigned_abs();
        while left > 0 {
            let want = usize::try_from(left.min(buf.len() as u64)).unwrap_or(buf.len());
            let n = src
                .read(&mut buf[..want])
                .map_err(io(format!("read {}", from.display())))?;
            if n == 0 {
                break;
            }
            dst.write_all(&buf[..n])
                .map_err(io(format!("write {}", to.display())))?;
            left -= n as u64;
        }
        at = hole;
    }
    Ok(())
}

const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LO_FLAGS_AUTOCLEAR: u32 = 4;

/// `struct loop_info64` of `<linux/loop.h>`.
#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// `struct loop_config` of `<linux/loop.h>`.
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

/// Attach `image` to a free loop device (freed by the kernel once nothing holds it) and
/// mount it at `at`. In the server, inside its private mount namespace.
pub(crate) fn mount_image(image: &Path, at: &Path) -> Result<(), String> {
    let backing = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(image)
        .map_err(|e| format!("open {}: {e}", image.display()))?;
    let control = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/loop-control")
        .map_err(|e| format!("open /dev/loop-control: {e}"))?;
    // Another process may take the free device between the two calls: try again.
    for _ in 0..16 {
        // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns a device number.
        let n = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE) };
        if n < 0 {
            return Err(format!(
                "find a free loop device: {}",
                std::io::Error::last_os_error()
            ));
        }
        let dev = format!("/dev/loop{n}");
        let device = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&dev)
            .map_err(|e| format!("open {dev}: {e}"))?;
        let config = LoopConfig {
            fd: u32::try_from(backing.as_raw_fd()).unwrap_or(u32::MAX),
            block_size: 0,
            info: LoopInfo64 {
                lo_device: 0,
                lo_inode: 0,
                lo_rdevice: 0,
                lo_offset: 0,
                lo_sizelimit: 0,
                lo_number: 0,
                lo_encrypt_type: 0,
                lo_encrypt_key_size: 0,
                lo_flags: LO_FLAGS_AUTOCLEAR,
                lo_file_name: [0; 64],
                lo_crypt_name: [0; 64],
                lo_encrypt_key: [0; 32],
                lo_init: [0; 2],
            },
            reserved: [0; 8],
        };
        // SAFETY: LOOP_CONFIGURE reads one `struct loop_config`, which `config` is.
        let rc = unsafe {
            libc::ioctl(
                device.as_raw_fd(),
                LOOP_CONFIGURE,
                &config as *const LoopConfig,
            )
        };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EBUSY) {
                continue;
            }
            return Err(format!("attach {} to {dev}: {e}", image.display()));
        }
        // The mount holds the device open; closing ours lets auto-clear free it with the
        // mount.
        return nix::mount::mount(
            Some(dev.as_str()),
            at,
            Some("ext4"),
            nix::mount::MsFlags::empty(),
            Some("noinit_itable"),
        )
        .map_err(|e| format!("mount the trial disk {dev}: {e}"));
    }
    Err("no loop device stayed free".into())
}

/// Mount a tmpfs of `size_mb` at `at`: the rootless sandbox's trial disk. A user namespace
/// may mount a tmpfs (not a loop device), and its `size` holds the budget as ext4's blocks
/// do: `ENOSPC` inside. Its pages are memory (and swap), not the host's disk.
pub(crate) fn mount_tmpfs(size_mb: u64, at: &Path) -> Result<(), String> {
    let size_mb = size_mb.max(MIN_STORAGE_MB);
    nix::mount::mount(
        Some("tmpfs"),
        at,
        Some("tmpfs"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some(format!("size={size_mb}m,mode=755").as_str()),
    )
    .map_err(|e| format!("mount the trial's tmpfs disk ({size_mb} MB): {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_config_has_the_kernel_s_layout() {
        assert_eq!(std::mem::size_of::<LoopInfo64>(), 232);
        assert_eq!(std::mem::size_of::<LoopConfig>(), 304);
    }

    #[test]
    fn a_sparse_clone_keeps_content_and_holes() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("from");
        let mut f = std::fs::File::create(&from).unwrap();
        f.set_len(64 << 20).unwrap();
        f.seek(SeekFrom::Start(40 << 20)).unwrap();
        f.write_all(b"middle").unwrap();
        f.seek(SeekFrom::Start(0)).unwrap();
        f.write_all(b"start").unwrap();
        drop(f);
        let to = dir.path().join("to");
        clone_sparse(&from, &to).unwrap();
        let (a, b) = (std::fs::read(&from).unwrap(), std::fs::read(&to).unwrap());
        assert!(a == b, "content differs");
        use std::os::unix::fs::MetadataExt;
        let blocks = std::fs::metadata(&to).unwrap().blocks();
        assert!(blocks * 512 < 1 << 20, "{blocks} blocks: holes were filled");
    }
}
