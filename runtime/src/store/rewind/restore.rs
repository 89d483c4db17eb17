//! Putting files back as they were before a turn: each file the turn (and every later one)
//! changed gets the state its first recorded change found.
//!
//! A file changed since the session last changed it (by the person, an editor, another
//! program) is a conflict: the whole rewind is refused, naming every such file, unless the
//! caller forces it. A file already back in its old state is not a conflict, so a rewind that
//! stopped half-way can be run again. Nothing is written through a symbolic link that leads
//! out of the workspace: the records name paths inside it, and a link planted since must not
//! turn a rewind into a write elsewhere.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::history::{MAX_BLOB_BYTES, MAX_WATCH_BYTES};
use super::{FileChange, FileState, RewindStore};
use crate::store::StoreError;
use crate::store::files::write_atomic;

/// What a rewind did to the workspace.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Restored {
    /// Files put back (rewritten or removed).
    pub restored: Vec<String>,
    /// Files that could not be put back, each with why.
    pub not_restored: Vec<String>,
    /// Calls whose changes were not all recorded (see `history.rs`).
    pub gaps: Vec<String>,
}

/// The first and last recorded change of each path.
fn span_per_path(changes: Vec<FileChange>) -> BTreeMap<String, (FileState, FileState)> {
    let mut spans: BTreeMap<String, (FileState, FileState)> = BTreeMap::new();
    for c in changes {
        spans
            .entry(c.path)
            .and_modify(|(_, last)| *last = c.after.clone())
            .or_insert((c.before, c.after));
    }
    spans
}

/// Whether the file at `path` is in `state` (compared by content, not kept).
fn is_in(path: &Path, state: &FileState) -> Result<bool, StoreError> {
    let meta = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(*state == FileState::Absent);
        }
        Err(e) => return Err(StoreError::io(path, e)),
        Ok(m) => m,
    };
    Ok(match state {
        FileState::Absent => false,
        FileState::NotAFile => !meta.is_file(),
        FileState::Unkept { len } => meta.is_file() && meta.len() == *len,
        FileState::Stored { sha256, .. } => {
            meta.is_file()
                && meta.len() <= MAX_BLOB_BYTES
                && std::fs::read(path)
                    .map(|b| hex::encode(Sha256::digest(&b)) == *sha256)
                    .map_err(|e| StoreError::io(path, e))?
        }
    })
}

/// Whether writing `rel` under `root` stays inside `root` (no component is a link that leads
/// out of it).
fn stays_inside(root: &Path, rel: &str) -> bool {
    let Ok(root) = root.canonicalize() else {
        return false;
    };
    let mut at = root.clone();
    for part in Path::new(rel).components() {
        let std::path::Component::Normal(name) = part else {
            return false;
        };
        at.push(name);
        if let Ok(meta) = std::fs::symlink_metadata(&at)
            && meta.file_type().is_symlink()
        {
            match at.canonicalize() {
                Ok(target) if target.starts_with(&root) => at = target,
                _ => return false,
            }
        }
    }
    true
}

impl RewindStore {
    /// Put back the files that turns `from` and later changed, under `root`, as they were
    /// before turn `from`. Refused, naming each, when files were changed since the session
    /// last changed them, unless `force`.
    pub fn restore_files(
        &self,
        root: &Path,
        from: u32,
        force: bool,
    ) -> Result<Restored, StoreError> {
        let spans = span_per_path(self.changes_from(from)?);
        if !force {
            let mut conflicts = Vec::new();
            for (rel, (first, last)) in &spans {
                let path = root.join(rel);
                if !is_in(&path, last)? && !is_in(&path, first)? {
                    conflicts.push(rel.clone());
                }
            }
            if !conflicts.is_empty() {
                return Err(StoreError::refused(
                    root,
                    format!(
                        "{} changed since this session last changed them: {}; nothing was \
                         restored (force it to put them back anyway)",
                        if conflicts.len() == 1 {
                            "1 file was".to_string()
                        } else {
                            format!("{} files were", conflicts.len())
                        },
                        conflicts.join(", ")
                    ),
                ));
            }
        }
        let mut done = Restored {
            gaps: self.gaps_from(from)?,
            ..Restored::default()
        };
        for (rel, (first, _)) in spans {
            let path = root.join(&rel);
            if !stays_inside(root, &rel) {
                done.not_restored.push(format!(
                    "{rel}: a link on its path leads out of the workspace"
                ));
                continue;
            }
            match first {
                FileState::Absent => match std::fs::symlink_metadata(&path) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(StoreError::io(&path, e)),
                    Ok(meta) if meta.is_dir() => {
                        done.not_restored
                            .push(format!("{rel}: it did not exist, and is now a directory"));
                        continue;
                    }
                    Ok(_) => std::fs::remove_file(&path).map_err(|e| StoreError::io(&path, e))?,
                },
                FileState::Stored { sha256, mode } => {
                    let bytes = self.blob(&sha256)?;
                    if let Some(dir) = path.parent() {
                        std::fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
                    }
                    if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
                        done.not_restored
                            .push(format!("{rel}: a directory stands where the file was"));
                        continue;
                    }
                    write_atomic(&path, &bytes)?;
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                        .map_err(|e| StoreError::io(&path, e))?;
                }
                FileState::Unkept { len } => {
                    done.not_restored.push(format!(
                        "{rel}: {len} bytes before the turn, not kept (at most {} MiB a file \
                         and {} MiB a workspace are)",
                        MAX_BLOB_BYTES >> 20,
                        MAX_WATCH_BYTES >> 20
                    ));
                    continue;
                }
                FileState::NotAFile => {
                    done.not_restored
                        .push(format!("{rel}: it was a directory or a link; not kept"));
                    continue;
                }
            }
            done.restored.push(rel);
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::rewind::FileHistory;
    use std::sync::Arc;

    fn fixture() -> (tempfile::TempDir, tempfile::TempDir, FileHistory) {
        let ws = tempfile::tempdir().unwrap();
        let sessions = tempfile::tempdir().unwrap();
        let store = Arc::new(RewindStore::open(sessions.path()).unwrap());
        let history = FileHistory::new(store, ws.path(), vec![sessions.path().to_path_buf()]);
        (ws, sessions, history)
    }

    #[test]
    fn a_named_edit_and_a_workspace_command_are_both_put_back() {
        let (ws, _s, history) = fixture();
        let root = ws.path();
        std::fs::write(root.join("kept.txt"), "original").unwrap();
        std::fs::create_dir(root.join("target")).unwrap();

        let watch = history.before(Some(&[root.join("kept.txt")])).unwrap();
        std::fs::write(root.join("kept.txt"), "edited").unwrap();
        assert_eq!(history.after(watch, 1, "c1", "edit_file").unwrap(), 1);

        let watch = history.before(None).unwrap();
        std::fs::write(root.join("kept.txt"), "by bash").unwrap();
        std::fs::write(root.join("new.txt"), "created").unwrap();
        std::fs::write(root.join("target/out.o"), "regenerated").unwrap();
        assert_eq!(history.after(watch, 2, "c2", "bash").unwrap(), 2);

        let done = history.store().restore_files(root, 1, false).unwrap();
        assert_eq!(done.restored, ["kept.txt", "new.txt"]);
        assert_eq!(
            std::fs::read_to_string(root.join("kept.txt")).unwrap(),
            "original"
        );
        assert!(!root.join("new.txt").exists());
        assert!(
            root.join("target/out.o").exists(),
            "regenerated trees are not watched"
        );
    }

    #[test]
    fn a_file_changed_since_is_a_conflict_unless_forced_and_a_rerun_is_not() {
        let (ws, _s, history) = fixture();
        let root = ws.path();
        std::fs::write(root.join("a.txt"), "one").unwrap();
        let watch = history.before(None).unwrap();
        std::fs::write(root.join("a.txt"), "two").unwrap();
        history.after(watch, 3, "c", "bash").unwrap();
        std::fs::write(root.join("a.txt"), "the person's").unwrap();

        let err = history
            .store()
            .restore_files(root, 3, false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("a.txt") && err.contains("nothing was restored"),
            "{err}"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("a.txt")).unwrap(),
            "the person's"
        );

        history.store().restore_files(root, 3, true).unwrap();
        assert_eq!(std::fs::read_to_string(root.join("a.txt")).unwrap(), "one");
        let again = history.store().restore_files(root, 3, false).unwrap();
        assert_eq!(again.restored, ["a.txt"]);
    }

    #[test]
    fn a_file_too_large_to_keep_is_named_not_restored() {
        let (ws, _s, history) = fixture();
        let root = ws.path();
        let big = vec![b'x'; MAX_BLOB_BYTES as usize + 1];
        std::fs::write(root.join("big.bin"), &big).unwrap();
        let watch = history.before(None).unwrap();
        std::fs::write(root.join("big.bin"), b"small now").unwrap();
        history.after(watch, 1, "c", "bash").unwrap();

        let done = history.store().restore_files(root, 1, false).unwrap();
        assert!(done.restored.is_empty());
        assert!(done.not_restored[0].starts_with("big.bin:"), "{done:?}");
    }

    #[test]
    fn a_link_planted_on_the_path_is_not_written_through() {
        let (ws, _s, history) = fixture();
        let outside = tempfile::tempdir().unwrap();
        let root = ws.path();
        std::fs::create_dir(root.join("src")).unwrap();
        std::fs::write(root.join("src/x"), "before").unwrap();
        let watch = history.before(Some(&[root.join("src/x")])).unwrap();
        std::fs::write(root.join("src/x"), "after").unwrap();
        history.after(watch, 1, "c", "write_file").unwrap();
        std::fs::remove_dir_all(root.join("src")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("src")).unwrap();

        let done = history.store().restore_files(root, 1, true).unwrap();
        assert!(done.restored.is_empty());
        assert!(done.not_restored[0].contains("leads out"), "{done:?}");
        assert!(!outside.path().join("x").exists());
    }
}
