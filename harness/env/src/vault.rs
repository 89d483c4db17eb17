//! A folder that exists only as long as the process that asked for it: a tmpfs in a mount
//! namespace held by one child process (`geode __vault`), reached through `/proc/PID/root`.
//!
//! A sealed holdout is decrypted into one. If geode is killed (`kill -9` included), the child
//! gets end-of-file on stdin, or SIGKILL through its parent-death signal, and exits; with its
//! last process gone the namespace and its tmpfs go too, so no plaintext stays on any disk.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};

/// The hidden subcommand the vault's process runs (`geode __vault`).
pub const VAULT_ARG: &str = "__vault";

/// Where the tmpfs is mounted inside the vault's namespace (it hides that namespace's `/tmp`).
const MOUNT_POINT: &str = "/tmp";

/// Why a vault could not be made, with the failing step in words.
#[derive(Debug, thiserror::Error)]
#[error("a private folder for decrypted data: {0}")]
pub struct VaultError(String);

/// A running vault; its folder goes when this is dropped, or when the process dies.
#[derive(Debug)]
pub struct Vault {
    child: Child,
    path: PathBuf,
}

impl Vault {
    /// Start a vault with `exe` (the geode binary) as its process.
    pub fn open(exe: &Path) -> Result<Vault, VaultError> {
        let mut child = Command::new(exe)
            .arg(VAULT_ARG)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| VaultError(format!("start {} {VAULT_ARG}: {e}", exe.display())))?;
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            let _ = BufReader::new(out).read_line(&mut line);
        }
        if line.trim() != "ready" {
            let _ = child.kill();
            let _ = child.wait();
            return Err(VaultError(format!(
                "the vault process did not start: {}",
                line.trim()
            )));
        }
        let path = PathBuf::from(format!("/proc/{}/root{MOUNT_POINT}", child.id()));
        Ok(Vault { child, path })
    }

    /// The folder, as this process reaches it.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Vault {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The vault's process: a private mount namespace with a tmpfs, then wait for the end of
/// stdin. Runs before any thread exists (unshare needs a single-threaded process).
pub(crate) fn vault_main() -> std::process::ExitCode {
    let parent = nix::unistd::getppid();
    // Dies with geode even if stdin stays open somewhere (checked after, for the race).
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    if nix::unistd::getppid() != parent {
        return std::process::ExitCode::from(1);
    }
    let made = private_tmpfs();
    let mut out = std::io::stdout();
    match made {
        Ok(()) => {
            let _ = writeln!(out, "ready");
            let _ = out.flush();
        }
        Err(e) => {
            let _ = writeln!(out, "error: {e}");
            return std::process::ExitCode::from(1);
        }
    }
    // End of file: the process that asked is gone or done.
    let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
    std::process::ExitCode::SUCCESS
}

/// As root, a mount namespace of our own; otherwise a user namespace too (mapping only our
/// own ids, so files our parent creates there keep its owner).
fn private_tmpfs() -> Result<(), String> {
    if unshare(CloneFlags::CLONE_NEWNS).is_err() {
        let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
        unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS)
            .map_err(|e| format!("unshare a mount namespace: {e}"))?;
        let write = |file: &str, text: String| {
            std::fs::write(format!("/proc/self/{file}"), text)
                .map_err(|e| format!("write {file}: {e}"))
        };
        write("uid_map", format!("{uid} {uid} 1"))?;
        write("setgroups", "deny".into())?;
        write("gid_map", format!("{gid} {gid} 1"))?;
    }
    super::sandbox::inside::setup::make_private()
        .map_err(|e| format!("make the namespace private: {e}"))?;
    mount(
        Some("tmpfs"),
        MOUNT_POINT,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=0700"),
    )
    .map_err(|e| format!("mount a tmpfs at {MOUNT_POINT}: {e}"))
}

/// Set once this process has a mount namespace of its own ([`enter_private_mounts`]).
static PRIVATE_MOUNTS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Give this process (and every process it starts from now on) a mount namespace of its own,
/// so what [`keep_off_disk`] mounts is seen by it and its children only, and goes when the
/// last of them does (`kill -9` included). Must run before any thread exists: a namespace
/// unshared by one thread of many is that thread's alone.
pub fn enter_private_mounts() -> Result<(), VaultError> {
    unshare(CloneFlags::CLONE_NEWNS)
        .map_err(|e| VaultError(format!("a mount namespace of our own (root only): {e}")))?;
    super::sandbox::inside::setup::make_private()
        .map_err(|e| VaultError(format!("make the mount namespace private: {e}")))?;
    PRIVATE_MOUNTS.store(true, std::sync::atomic::Ordering::SeqCst);
    Ok(())
}

/// Where a sealed campaign writes, kept in memory that goes with this process: a tmpfs over
/// each of `fresh` (the trials, the sandboxes' scratch, the image store its environments are
/// built into), which start empty. Refused without [`enter_private_mounts`]: those mounts
/// would be the whole machine's and outlive a crash.
pub fn keep_off_disk(fresh: &[&Path]) -> Result<(), VaultError> {
    if !PRIVATE_MOUNTS.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(VaultError(
            "this process has no mount namespace of its own to keep a holdout's files in".into(),
        ));
    }
    for at in fresh {
        // Files already at the top (the trials' CA bundle in the scratch) stay in view.
        let kept: Vec<(std::ffi::OsString, Vec<u8>)> = std::fs::read_dir(at)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| Some((e.file_name(), std::fs::read(e.path()).ok()?)))
            .collect();
        tmpfs(at)?;
        for (name, bytes) in kept {
            let to = at.join(name);
            std::fs::write(&to, bytes)
                .map_err(|e| VaultError(format!("write {}: {e}", to.display())))?;
        }
    }
    Ok(())
}

fn tmpfs(at: &Path) -> Result<(), VaultError> {
    std::fs::create_dir_all(at).map_err(|e| VaultError(format!("create {}: {e}", at.display())))?;
    mount(
        Some("tmpfs"),
        at,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=0700"),
    )
    .map_err(|e| VaultError(format!("mount a tmpfs at {}: {e}", at.display())))
}

/// Unmount what [`keep_off_disk`] mounted at `at` (its content is gone with it).
pub fn release(at: &Path) {
    let _ = nix::mount::umount2(at, nix::mount::MntFlags::MNT_DETACH);
}
