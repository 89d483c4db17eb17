//! Data governance: privacy review, near-duplicate detection, split isolation, source allowlists
//! and immutable, content-addressed releases of task packs.
//!
//! Everything here is deterministic: random choices (MinHash permutations, split shuffles) come
//! from an explicit seed through ChaCha, and every document written to disk carries a `schema`
//! field and is hashed in canonical JSON (`geode_crucible::canonical`).

pub mod allowlist;
pub mod minhash;
pub mod privacy;
pub mod release;
pub mod split;

use std::path::{Path, PathBuf};

use crate::pack::{PackError, Task};

/// Errors of the governance commands; each names the file (and field) at fault.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// A task pack could not be loaded.
    #[error(transparent)]
    Pack(#[from] PackError),
    /// A file or folder could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder at fault.
        path: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A file or argument whose content is refused.
    #[error("{path}: {message}")]
    Invalid {
        /// The file (or option, such as `--name`) at fault.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// A document whose `schema` field is not the one this version reads.
    #[error("{path}: unsupported schema {found:?} (expected {expected:?})")]
    Schema {
        /// The file at fault.
        path: String,
        /// The `schema` it declares.
        found: String,
        /// The `schema` expected.
        expected: String,
    },
    /// A value could not be written as canonical JSON.
    #[error("canonical JSON: {0}")]
    Canonical(#[source] geode_crucible::CanonicalError),
}

pub(crate) fn io_err(path: &Path, source: std::io::Error) -> DatasetError {
    DatasetError::Io {
        path: path.display().to_string(),
        source,
    }
}

pub(crate) fn invalid(path: &Path, message: impl Into<String>) -> DatasetError {
    DatasetError::Invalid {
        path: path.display().to_string(),
        message: message.into(),
    }
}

pub(crate) fn check_schema(path: &Path, found: &str, expected: &str) -> Result<(), DatasetError> {
    if found == expected {
        Ok(())
    } else {
        Err(DatasetError::Schema {
            path: path.display().to_string(),
            found: found.to_string(),
            expected: expected.to_string(),
        })
    }
}

/// Canonical JSON text (sorted keys, no spaces) of a serializable document.
pub fn canonical_json<T: serde::Serialize>(value: &T) -> Result<String, DatasetError> {
    geode_crucible::to_canonical_json(value).map_err(DatasetError::Canonical)
}

/// SHA-256 (hex) of the canonical JSON of a document.
pub fn canonical_hash<T: serde::Serialize>(value: &T) -> Result<String, DatasetError> {
    geode_crucible::canonical_sha256(value)
        .map(hex::encode)
        .map_err(DatasetError::Canonical)
}

/// Write a document as pretty JSON, refusing to replace an existing file: released and
/// checkpointed documents are immutable once written.
pub fn write_new_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), DatasetError> {
    use std::io::Write;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io_err(parent, e))?;
    }
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| invalid(path, format!("cannot serialize: {e}")))?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| io_err(path, e))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.write_all(b"\n"))
        .map_err(|e| io_err(path, e))
}

/// Read and parse a JSON document.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, DatasetError> {
    let text = std::fs::read_to_string(path).map_err(|e| io_err(path, e))?;
    serde_json::from_str(&text).map_err(|e| invalid(path, e.to_string()))
}

/// Every regular file below `dir`, relative, in path order (symlinks are skipped: the task hash
/// covers their targets, and their content is not ours to scan or copy).
pub fn files_below(dir: &Path) -> Result<Vec<PathBuf>, DatasetError> {
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(dir).sort_by_file_name() {
        let entry = entry.map_err(|e| invalid(dir, format!("cannot walk: {e}")))?;
        if entry.file_type().is_file() {
            let rel = entry.path().strip_prefix(dir).unwrap_or(entry.path());
            out.push(rel.to_path_buf());
        }
    }
    Ok(out)
}

/// Files and symbolic links below `dir` (relative), in path order.
pub(crate) fn entries_below(dir: &Path) -> Result<Vec<PathBuf>, DatasetError> {
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(dir).sort_by_file_name() {
        let entry = entry.map_err(|e| invalid(dir, format!("cannot walk: {e}")))?;
        if !entry.file_type().is_dir() {
            out.push(
                entry
                    .path()
                    .strip_prefix(dir)
                    .unwrap_or(entry.path())
                    .to_path_buf(),
            );
        }
    }
    Ok(out)
}

/// Copy a folder's files and symbolic links (modes kept) into `to`.
pub(crate) fn copy_tree(from: &Path, to: &Path) -> Result<(), DatasetError> {
    for rel in entries_below(from)? {
        let (src, dst) = (from.join(&rel), to.join(&rel));
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io_err(parent, e))?;
        }
        let meta = std::fs::symlink_metadata(&src).map_err(|e| io_err(&src, e))?;
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&src).map_err(|e| io_err(&src, e))?;
            std::os::unix::fs::symlink(&target, &dst).map_err(|e| io_err(&dst, e))?;
        } else {
            // fs::copy keeps the permission bits, which the task hash covers.
            std::fs::copy(&src, &dst).map_err(|e| io_err(&dst, e))?;
        }
    }
    Ok(())
}

/// The text that defines what a task asks and checks: the instruction, then every file of
/// `tests/` and `solution/`. Near-duplicate detection compares tasks on this text, so two tasks
/// with the same instruction and checks but a different Dockerfile still count as duplicates.
pub fn task_text(task: &Task) -> Result<String, DatasetError> {
    let mut text = task.instruction.clone();
    for sub in ["tests", "solution"] {
        let dir = task.dir.join(sub);
        if !dir.is_dir() {
            continue;
        }
        for rel in files_below(&dir)? {
            let path = dir.join(&rel);
            let bytes = std::fs::read(&path).map_err(|e| io_err(&path, e))?;
            text.push('\n');
            text.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    Ok(text)
}
