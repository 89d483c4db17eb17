//! Reading and writing files in folders an agent under evaluation could have touched (a trial's
//! `agent/`, `verifier/` and `artifacts/`, which are bound into its sandbox): never through a
//! symbolic link. An agent that plants `reward.txt -> /etc/shadow` or `trajectory.json ->
//! /root/.bashrc` must make the harness neither read nor write a host file.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

fn no_follow() -> i32 {
    nix::fcntl::OFlag::O_NOFOLLOW.bits()
}

/// The file's text; a link (even to a real file) is an error, `ELOOP`.
pub fn read_to_string(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(no_follow())
        .open(path)?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(text)
}

/// Whether `path` is a regular file itself (not a link to one).
pub fn is_file(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file())
}

/// Replace `path` with a new file holding `bytes`: whatever stood there (a link included) is
/// unlinked, never followed, and the new file is created exclusively, so a link planted in
/// between makes the write fail instead of landing elsewhere.
pub fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    create(path)?.write_all(bytes)
}

/// [`write`]'s new file, open for writing, for content that arrives in parts.
pub fn create(path: &Path) -> std::io::Result<std::fs::File> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path)?,
        Ok(_) => std::fs::remove_file(path)?,
        Err(_) => {}
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(no_follow())
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_neither_read_nor_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "host data").unwrap();
        let link = dir.path().join("reward.txt");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(read_to_string(&link).is_err());
        assert!(!is_file(&link));
        write(&link, b"1").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "host data");
        assert_eq!(read_to_string(&link).unwrap(), "1");
        assert!(is_file(&link));
    }
}
