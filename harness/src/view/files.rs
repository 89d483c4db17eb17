//! Reading files in folders that someone other than the viewer wrote: a trial's `agent/` and
//! `verifier/` (bound into the agent's sandbox), decision and search folders. A file is opened
//! without following a link at any step below the folder it is asked of, without blocking (a
//! FIFO planted as `trajectory.json` must not hang the server), only when it is a regular
//! file, and read up to a cap.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::ViewError;

/// `base/parts...`, opened only if every folder on the way is a real folder and the file is a
/// regular file; `Ok(None)` when it is not there.
pub fn open_inside(
    base: &Path,
    parts: &[&str],
) -> Result<Option<(std::fs::File, PathBuf)>, ViewError> {
    let mut path = base.to_path_buf();
    let (file, folders) = match parts.split_last() {
        Some(split) => split,
        None => return Ok(None),
    };
    for folder in folders {
        path.push(folder);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_dir() => {}
            _ => return Ok(None),
        }
    }
    path.push(file);
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path);
    let f = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Ok(None),
        Err(e) => return Err(ViewError::io(&path)(e)),
    };
    let meta = f.metadata().map_err(ViewError::io(&path))?;
    Ok(meta.file_type().is_file().then_some((f, path)))
}

/// A text file's last `cap` bytes (lossy UTF-8) and how many bytes before them were left out.
#[derive(Debug, Clone, Serialize)]
pub struct TextFile {
    pub(crate) name: String,
    pub(crate) text: String,
    pub(crate) omitted_bytes: u64,
}

pub(crate) fn read_tail(
    base: &Path,
    parts: &[&str],
    cap: u64,
) -> Result<Option<TextFile>, ViewError> {
    let Some((mut f, path)) = open_inside(base, parts)? else {
        return Ok(None);
    };
    let len = f.metadata().map_err(ViewError::io(&path))?.len();
    let skip = len.saturating_sub(cap);
    f.seek(SeekFrom::Start(skip))
        .map_err(ViewError::io(&path))?;
    let mut bytes = Vec::new();
    f.take(cap)
        .read_to_end(&mut bytes)
        .map_err(ViewError::io(&path))?;
    Ok(Some(TextFile {
        name: parts.join("/"),
        text: String::from_utf8_lossy(&bytes).into_owned(),
        omitted_bytes: skip,
    }))
}

/// A JSON file read whole up to `cap` (a larger one is an error naming it).
pub fn read_json(base: &Path, parts: &[&str], cap: u64) -> Result<Option<Value>, ViewError> {
    let Some((f, path)) = open_inside(base, parts)? else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    f.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(ViewError::io(&path))?;
    if bytes.len() as u64 > cap {
        return Err(ViewError::BadRequest {
            field: "trial",
            message: format!("{} is larger than {cap} bytes", path.display()),
        });
    }
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| ViewError::Json { path, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_fifos_and_linked_folders_are_not_files_of_a_folder() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path();
        std::fs::create_dir_all(t.join("agent")).unwrap();
        std::fs::write(t.join("agent/plain.txt"), "hello").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", t.join("agent/link.txt")).unwrap();
        nix::unistd::mkfifo(
            &t.join("agent/fifo.txt"),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        std::os::unix::fs::symlink("/etc", t.join("linked")).unwrap();
        assert!(open_inside(t, &["agent", "plain.txt"]).unwrap().is_some());
        assert!(open_inside(t, &["agent", "link.txt"]).unwrap().is_none());
        // A FIFO opens without blocking and is refused as not a regular file.
        assert!(open_inside(t, &["agent", "fifo.txt"]).unwrap().is_none());
        assert!(open_inside(t, &["linked", "passwd"]).unwrap().is_none());
        assert!(open_inside(t, &["agent", "missing"]).unwrap().is_none());
    }

    #[test]
    fn long_text_keeps_its_end_and_says_what_it_left_out() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("out.txt"), "a".repeat(10) + "END").unwrap();
        let f = read_tail(d.path(), &["out.txt"], 5).unwrap().unwrap();
        assert_eq!((f.text.as_str(), f.omitted_bytes), ("aaEND", 8));
    }
}
