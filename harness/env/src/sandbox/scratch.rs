//! The scratch folders of sandboxes on the host (`<scratch>/<id>/`): the lock a live one
//! holds, and the clean-up of those a killed harness left behind.
//!
//! A sandbox's namespaces die with its init, but its folder and cgroups outlive a `kill -9`
//! of the harness; the lock is how the next start tells them apart from live ones.

use std::path::Path;
use std::time::Duration;

use super::io;
use crate::EnvError;
use crate::cgroup::Cgroups;

/// The lock every live sandbox holds on `<scratch>/<id>/lock`: held by the harness process
/// that started it, so it is free exactly when that process is gone.
pub(super) fn hold_lock(dir: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, EnvError> {
    let path = dir.join("lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io(format!("create {}", path.display())))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(
        |(_, errno)| EnvError::Io {
            context: format!("lock {}", path.display()),
            source: std::io::Error::from(errno),
        },
    )
}

/// Scratch folders and cgroups of sandboxes whose harness was killed (`kill -9` of `geode`
/// leaves them; the namespaces themselves die with their init): removed on the next start.
pub(super) fn remove_stale_sandboxes(scratch: &Path) {
    let Ok(entries) = std::fs::read_dir(scratch) else {
        return;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        if !dir.is_dir() {
            continue;
        }
        // A folder without a lock file is one being made right now (its lock comes a moment
        // after it), or one whose run was killed in that moment: stale once a minute old.
        if !dir.join("lock").exists() {
            let young = std::fs::metadata(&dir)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_none_or(|age| age < Duration::from_secs(60));
            if young {
                continue;
            }
            let _ = remove_any(&dir);
            continue;
        }
        let Ok(_held) = hold_lock(&dir) else {
            continue;
        };
        let name = cgroup_name(&dir);
        let _ = Cgroups::leftovers(&name).remove(Duration::from_millis(200));
        let _ = remove_any(&dir);
    }
    // Groups whose folder is gone: a minute leaves alone what another run is still setting up.
    Cgroups::sweep_orphans(Duration::from_secs(60));
}

/// The uuid's tail: unique enough for a hostname and cgroup name, and free of dots.
pub(super) fn cgroup_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| {
            let chars: Vec<char> = n.to_string_lossy().chars().collect();
            chars[chars.len().saturating_sub(12)..]
                .iter()
                .collect::<String>()
        })
        .unwrap_or_else(|| "sandbox".into())
}

/// Remove a file or a folder, if it is there.
pub(super) fn remove_any(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
    }
}
