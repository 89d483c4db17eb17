//! A sandbox's users and the host's: every process of an image sandbox runs in a user
//! namespace where container id `n` is host id `HOST_BASE + n` (for `n` below `RANGE`), so
//! container root is an unprivileged host uid, as with docker's `userns-remap`.
//!
//! Files follow the same map on disk: an image layer's owners are shifted once, when it
//! enters the image store (and, for a layer from elsewhere, the first time a sandbox uses
//! it; `geode image stage` does it for every layer a pack needs, since a read-only store
//! cannot take it at use time); what the sandbox's own control process creates (uploads, the
//! tools' writes, build `COPY`s) is given to container root; host folders bound inside are
//! given to container root too. Ids at or above `RANGE` are not mapped and show as `nobody`.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Host id of container id 0.
pub const HOST_BASE: u32 = 100_000;
/// How many ids are mapped (0..RANGE inside).
pub const RANGE: u32 = 65_536;

/// The `uid_map`/`gid_map` line of a sandbox's user namespace.
pub fn map_line() -> String {
    format!("0 {HOST_BASE} {RANGE}")
}

/// The host id of container id `id`; ids outside the map stay as they are.
pub fn to_host(id: u32) -> u32 {
    if id < RANGE { id + HOST_BASE } else { id }
}

/// The container id of host id `id` (the inverse of [`to_host`] on the mapped range).
pub fn to_container(id: u32) -> u32 {
    if (HOST_BASE..HOST_BASE + RANGE).contains(&id) {
        id - HOST_BASE
    } else {
        id
    }
}

/// Give `path` (never following a link) to container root.
pub fn give_to_root(path: &Path) -> std::io::Result<()> {
    std::os::unix::fs::lchown(path, Some(HOST_BASE), Some(HOST_BASE))
}

/// The marker beside a layer folder that says its owners are host ids already.
fn marker(layer: &Path) -> PathBuf {
    let mut name = layer.as_os_str().to_os_string();
    name.push(".host-ids");
    PathBuf::from(name)
}

/// Whether `layer`'s owners are host ids already (its marker is there), through links.
pub fn is_shifted(layer: &Path) -> bool {
    std::fs::canonicalize(layer).is_ok_and(|layer| marker(&layer).exists())
}

/// Shift the owners of every entry of `layer` (an unpacked image layer) to host ids, once.
/// Idempotent entry by entry (only ids below `RANGE` move), so two sandboxes starting on
/// the same new layer at once do no harm. `chown` clears set-id bits: they are put back.
pub fn shift_layer(layer: &Path) -> std::io::Result<()> {
    // The store hands out short links to its layers: walk, and mark, the folder itself.
    let layer = &std::fs::canonicalize(layer)?;
    if marker(layer).exists() {
        return Ok(());
    }
    for entry in walkdir::WalkDir::new(layer).follow_links(false) {
        let entry = entry.map_err(std::io::Error::other)?;
        let path = entry.path();
        let meta = std::fs::symlink_metadata(path)?;
        let (uid, gid) = (meta.uid(), meta.gid());
        if uid >= RANGE && gid >= RANGE {
            continue;
        }
        std::os::unix::fs::lchown(path, Some(to_host(uid)), Some(to_host(gid)))?;
        let mode = meta.permissions().mode();
        if !meta.file_type().is_symlink() && mode & 0o6000 != 0 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o7777))?;
        }
    }
    std::fs::write(marker(layer), b"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_map_both_ways_on_the_range_only() {
        assert_eq!(to_host(0), HOST_BASE);
        assert_eq!(to_host(1000), HOST_BASE + 1000);
        assert_eq!(to_host(RANGE), RANGE);
        assert_eq!(to_container(HOST_BASE + 42), 42);
        assert_eq!(to_container(7), 7);
        assert_eq!(map_line(), "0 100000 65536");
    }

    /// Root only (chown): owners move once, set-id bits survive, links are not followed.
    #[test]
    fn a_layer_is_shifted_once_and_keeps_its_modes() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let layer = dir.path().join("layer");
        std::fs::create_dir(&layer).unwrap();
        let tool = layer.join("tool");
        std::fs::write(&tool, b"x").unwrap();
        std::os::unix::fs::lchown(&tool, Some(1000), Some(50)).unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o4755)).unwrap();
        let outside = dir.path().join("outside");
        std::fs::write(&outside, b"y").unwrap();
        std::os::unix::fs::symlink(&outside, layer.join("link")).unwrap();
        // Through a link, as the store names its layers.
        let short = dir.path().join("short");
        std::os::unix::fs::symlink(&layer, &short).unwrap();
        shift_layer(&short).unwrap();
        assert_eq!(std::fs::metadata(&layer).unwrap().uid(), HOST_BASE);
        assert!(marker(&layer).exists() && !marker(&short).exists());
        let meta = std::fs::metadata(&tool).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (HOST_BASE + 1000, HOST_BASE + 50));
        assert_eq!(meta.permissions().mode() & 0o7777, 0o4755);
        assert_eq!(
            std::fs::metadata(&outside).unwrap().uid(),
            0,
            "followed a link"
        );
        assert_eq!(
            std::fs::symlink_metadata(layer.join("link")).unwrap().uid(),
            HOST_BASE
        );
        // Once: the marker stops a second walk.
        std::os::unix::fs::lchown(&tool, Some(0), Some(0)).unwrap();
        shift_layer(&layer).unwrap();
        assert_eq!(std::fs::metadata(&tool).unwrap().uid(), 0);
    }
}
