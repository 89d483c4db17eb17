//! Content identity of tasks and packs: a task's hash covers every file of its folder, a
//! pack's the ordered task hashes plus the trials per task, so renaming a folder or a pack
//! changes nothing.

use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{PackError, invalid, io_err};

/// A pack's hash: ordered task hashes plus trials per task. The crucible's type, so a
/// contract pins the very value a run locks, without a parse between them.
pub use geode_crucible::PackHash;

/// SHA-256 (hex) of a task folder's content.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TaskHash(pub String);

impl fmt::Display for TaskHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The pack hash over (id, task hash) pairs in id order plus the trials per task.
pub fn pack_hash<'a>(
    tasks: impl Iterator<Item = (&'a str, &'a TaskHash)>,
    trials_per_task: u32,
) -> PackHash {
    let mut entries: Vec<(&str, &TaskHash)> = tasks.collect();
    entries.sort();
    let canonical = serde_json::json!({
        "schema": "geode.pack.v1",
        "tasks": entries.iter().map(|(id, h)| serde_json::json!([id, h.0])).collect::<Vec<_>>(),
        "trials_per_task": trials_per_task,
    });
    PackHash::from_digest(Sha256::digest(canonical.to_string().as_bytes()).into())
}

fn put(hasher: &mut Sha256, bytes: &[u8]) {
    hasher.update((bytes.len() as u64).to_le_bytes());
    hasher.update(bytes);
}

/// SHA-256 over (relative path, mode, content) of every file below `dir`, in path order.
/// Symbolic links contribute their target, not what they point to.
pub fn hash_task_dir(dir: &Path) -> Result<TaskHash, PackError> {
    let mut hasher = Sha256::new();
    hasher.update(b"geode.task.v1\0");
    let walker = walkdir::WalkDir::new(dir)
        .follow_links(false)
        .sort_by_file_name();
    for entry in walker {
        let entry = entry.map_err(|e| {
            invalid(
                e.path().unwrap_or(dir),
                format!("cannot walk the task folder: {e}"),
            )
        })?;
        let ft = entry.file_type();
        if ft.is_dir() {
            continue;
        }
        let path = entry.path();
        let rel = path.strip_prefix(dir).unwrap_or(path);
        let meta = entry.metadata().map_err(|e| invalid(path, e.to_string()))?;
        put(&mut hasher, rel.to_string_lossy().as_bytes());
        hasher.update(meta.permissions().mode().to_le_bytes());
        if ft.is_symlink() {
            let target = std::fs::read_link(path).map_err(|e| io_err(path, e))?;
            put(&mut hasher, target.to_string_lossy().as_bytes());
        } else {
            let bytes = std::fs::read(path).map_err(|e| io_err(path, e))?;
            put(&mut hasher, &bytes);
        }
    }
    Ok(TaskHash(hex::encode(hasher.finalize())))
}
