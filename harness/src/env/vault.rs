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
