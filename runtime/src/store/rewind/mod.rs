//! Rewind records: what a person session needs to go back to before a turn (`/rewind`,
//! `geode rewind`). Two kinds of rows, both written before the thing they undo happens:
//! - a **point** per turn: the session's loop state as it was just before the turn's user
//!   message (the agent layer's `state.json` content, kept here as opaque JSON);
//! - a **change** per file a call changed: the file's state before and after the call, with
//!   the contents in a content-addressed blob store, so the file can be put back.
//!
//! Schema `geode.rewind.v1`, one SQLite file per session directory (`rewind.db`, WAL,
//! `synchronous = NORMAL`) and `rewind-blobs/<sha256>`: `points(turn, prompt, state, ts)`,
//! `changes(id, turn, call_id, tool, path, before, after, ts)` and `gaps(turn, call_id, tool,
//! reason)`, the calls whose changes could not all be recorded (a rewind says so rather than
//! claim it restored everything).
//!
//! Recording lives in `history.rs` (which calls change which files), putting files back in
//! `restore.rs`.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::StoreError;

mod history;
mod restore;
pub use history::{FileHistory, Watch};
pub use restore::Restored;

pub(crate) const SCHEMA: &str = "geode.rewind.v1";
pub(crate) const DB_FILE: &str = "rewind.db";
const BLOB_DIR: &str = "rewind-blobs";

/// A file as a change saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FileState {
    /// No file at the path.
    Absent,
    /// A regular file whose bytes are the blob `sha256`, with permission bits `mode`.
    Stored {
        /// The blob's name: the SHA-256 of the bytes, in hex.
        sha256: String,
        /// The file's permission bits, masked with `0o7777`.
        mode: u32,
    },
    /// A file not kept, so not put back: over `history::MAX_BLOB_BYTES`, or beyond what one
    /// workspace watch keeps (`history::MAX_WATCH_BYTES`).
    Unkept {
        /// The file's size in bytes.
        len: u64,
    },
    /// A directory or a symbolic link at the path: not kept, so not put back.
    NotAFile,
}

/// One file one call changed.
#[derive(Debug, Clone, PartialEq)]
pub struct FileChange {
    pub(crate) turn: u32,
    pub(crate) call_id: String,
    pub(crate) tool: String,
    /// Relative to the workspace root.
    pub path: String,
    pub(crate) before: FileState,
    pub(crate) after: FileState,
}

/// A turn a session can go back to the start of.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnPoint {
    /// The turn's number; `/rewind N` goes back to before turn N.
    pub turn: u32,
    /// The turn's prompt, as the person typed it.
    pub prompt: String,
    pub(crate) ts: String,
    /// Files the turn's calls changed (each once, in the order first changed).
    pub files: Vec<String>,
}

/// Handle on one session's rewind records.
#[derive(Debug)]
pub struct RewindStore {
    path: PathBuf,
    blobs: PathBuf,
    conn: Mutex<Connection>,
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

impl RewindStore {
    /// Open the rewind records of the session in `dir`, creating them when missing (sessions
    /// checkpointed before rewind existed get them at their next open, with no points for
    /// their earlier turns).
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let path = dir.join(DB_FILE);
        let err = |e| StoreError::sqlite(&path, e);
        let conn = Connection::open(&path).map_err(err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(err)?;
        // NORMAL: in WAL mode a crash of the process loses nothing, and a power cut only the
        // newest rows; every command pays this commit, so FULL's extra fsync is not worth it
        // for records whose loss costs a rewind, never an effect.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(err)?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS points (
                turn INTEGER PRIMARY KEY,
                prompt TEXT NOT NULL,
                state TEXT NOT NULL,
                ts TEXT NOT NULL
            );
            CREATE TABLE IF NOT EXISTS changes (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                turn INTEGER NOT NULL,
                call_id TEXT NOT NULL,
                tool TEXT NOT NULL,
                path TEXT NOT NULL,
                before TEXT NOT NULL,
                after TEXT NOT NULL,
                ts TEXT NOT NULL
            );
            CREATE TABLE IF NOT EXISTS gaps (
                turn INTEGER NOT NULL,
                call_id TEXT NOT NULL,
                tool TEXT NOT NULL,
                reason TEXT NOT NULL
            );",
        )
        .map_err(err)?;
        conn.execute(
            "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', ?1)",
            params![SCHEMA],
        )
        .map_err(err)?;
        let schema: String = conn
            .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
                r.get(0)
            })
            .map_err(err)?;
        if schema != SCHEMA {
            return Err(StoreError::Json {
                path: path.display().to_string(),
                message: format!("schema {schema:?}, expected {SCHEMA:?}"),
            });
        }
        Ok(RewindStore {
            blobs: dir.join(BLOB_DIR),
            path,
            conn: Mutex::new(conn),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        // Every write is one statement or transaction SQLite rolls back when unfinished, so a
        // panic elsewhere cannot leave the connection half-used.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn sqlite(&self, e: rusqlite::Error) -> StoreError {
        StoreError::sqlite(&self.path, e)
    }

    /// Keep `bytes` (once per content) and return its sha256.
    ///
    /// Written whole (a temp file renamed into place) but not fsynced: the first watch of a
    /// workspace keeps thousands of files, and a sync each made it take seconds. A killed
    /// process loses nothing (the page cache outlives it); a power cut may lose the newest
    /// copies, and a rewind then names the file whose copy is damaged instead of writing it.
    pub fn put_blob(&self, bytes: &[u8]) -> Result<String, StoreError> {
        let sha = hex::encode(Sha256::digest(bytes));
        let path = self.blobs.join(&sha);
        if !path.is_file() {
            std::fs::create_dir_all(&self.blobs).map_err(|e| StoreError::io(&self.blobs, e))?;
            let tmp = self.blobs.join(format!("{sha}.tmp"));
            std::fs::write(&tmp, bytes).map_err(|e| StoreError::io(&tmp, e))?;
            std::fs::rename(&tmp, &path).map_err(|e| StoreError::io(&path, e))?;
        }
        Ok(sha)
    }

    /// The bytes of a blob, checked against its name (a damaged blob is never written back).
    pub fn blob(&self, sha256: &str) -> Result<Vec<u8>, StoreError> {
        let path = self.blobs.join(sha256);
        let bytes = std::fs::read(&path).map_err(|e| StoreError::io(&path, e))?;
        if hex::encode(Sha256::digest(&bytes)) != sha256 {
            return Err(StoreError::Json {
                path: path.display().to_string(),
                message: "the kept copy does not match its hash; it was not used".into(),
            });
        }
        Ok(bytes)
    }

    /// The point before `turn`: the loop state (JSON) and the prompt that started it.
    pub fn record_point(&self, turn: u32, prompt: &str, state: &str) -> Result<(), StoreError> {
        self.lock()
            .execute(
                "INSERT OR REPLACE INTO points(turn, prompt, state, ts) VALUES (?1, ?2, ?3, ?4)",
                params![turn, prompt, state, now()],
            )
            .map_err(|e| self.sqlite(e))?;
        Ok(())
    }

    /// The loop state recorded before `turn`, if any.
    pub fn point_state(&self, turn: u32) -> Result<Option<String>, StoreError> {
        self.lock()
            .query_row(
                "SELECT state FROM points WHERE turn = ?1",
                params![turn],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.sqlite(e))
    }

    pub(crate) fn record_changes(&self, changes: &[FileChange]) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction().map_err(|e| self.sqlite(e))?;
        let ts = now();
        for c in changes {
            let json = |s: &FileState| serde_json::to_string(s).unwrap_or_default();
            tx.execute(
                "INSERT INTO changes(turn, call_id, tool, path, before, after, ts)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    c.turn,
                    c.call_id,
                    c.tool,
                    c.path,
                    json(&c.before),
                    json(&c.after),
                    ts
                ],
            )
            .map_err(|e| self.sqlite(e))?;
        }
        tx.commit().map_err(|e| self.sqlite(e))
    }

    /// A call whose changes could not all be recorded, and why.
    pub fn record_gap(
        &self,
        turn: u32,
        call_id: &str,
        tool: &str,
        reason: &str,
    ) -> Result<(), StoreError> {
        self.lock()
            .execute(
                "INSERT INTO gaps(turn, call_id, tool, reason) VALUES (?1, ?2, ?3, ?4)",
                params![turn, call_id, tool, reason],
            )
            .map_err(|e| self.sqlite(e))?;
        Ok(())
    }

    /// Changes of turns `from` and later, in the order they happened.
    pub fn changes_from(&self, from: u32) -> Result<Vec<FileChange>, StoreError> {
        let conn = self.lock();
        let mut st = conn
            .prepare(
                "SELECT id, turn, call_id, tool, path, before, after FROM changes
                 WHERE turn >= ?1 ORDER BY id",
            )
            .map_err(|e| self.sqlite(e))?;
        let rows = st
            .query_map(params![from], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, u32>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, String>(5)?,
                    r.get::<_, String>(6)?,
                ))
            })
            .map_err(|e| self.sqlite(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.sqlite(e))?;
        let mut out = Vec::with_capacity(rows.len());
        for (id, turn, call_id, tool, path, before, after) in rows {
            let state = |text: &str| {
                serde_json::from_str::<FileState>(text).map_err(|e| StoreError::Corrupt {
                    path: self.path.display().to_string(),
                    row: id,
                    message: format!("file state {text:?} does not parse: {e}"),
                })
            };
            out.push(FileChange {
                turn,
                call_id,
                tool,
                path,
                before: state(&before)?,
                after: state(&after)?,
            });
        }
        Ok(out)
    }

    /// Why calls of turns `from` and later could not be fully recorded.
    pub fn gaps_from(&self, from: u32) -> Result<Vec<String>, StoreError> {
        let conn = self.lock();
        let mut st = conn
            .prepare("SELECT turn, tool, reason FROM gaps WHERE turn >= ?1 ORDER BY rowid")
            .map_err(|e| self.sqlite(e))?;
        st.query_map(params![from], |r| {
            Ok(format!(
                "turn {}, {}: {}",
                r.get::<_, u32>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?
            ))
        })
        .map_err(|e| self.sqlite(e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| self.sqlite(e))
    }

    /// The turns a session can go back to, oldest first, with the files each changed.
    pub fn points(&self) -> Result<Vec<TurnPoint>, StoreError> {
        let mut points: Vec<TurnPoint> = {
            let conn = self.lock();
            let mut st = conn
                .prepare("SELECT turn, prompt, ts FROM points ORDER BY turn")
                .map_err(|e| self.sqlite(e))?;
            st.query_map([], |r| {
                Ok(TurnPoint {
                    turn: r.get(0)?,
                    prompt: r.get(1)?,
                    ts: r.get(2)?,
                    files: Vec::new(),
                })
            })
            .map_err(|e| self.sqlite(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.sqlite(e))?
        };
        for change in self.changes_from(0)? {
            if let Some(p) = points.iter_mut().find(|p| p.turn == change.turn)
                && !p.files.contains(&change.path)
            {
                p.files.push(change.path);
            }
        }
        Ok(points)
    }

    /// Forget the points, changes and gaps of turns `from` and later (after a rewind to before
    /// `from`: those turns no longer happened, and their numbers are used again).
    pub fn forget_from(&self, from: u32) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction().map_err(|e| self.sqlite(e))?;
        for table in ["points", "changes", "gaps"] {
            tx.execute(
                &format!("DELETE FROM {table} WHERE turn >= ?1"),
                params![from],
            )
            .map_err(|e| self.sqlite(e))?;
        }
        tx.commit().map_err(|e| self.sqlite(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_changes_and_gaps_round_trip_and_are_forgotten_from_a_turn_on() {
        let dir = tempfile::tempdir().unwrap();
        let store = RewindStore::open(dir.path()).unwrap();
        let sha = store.put_blob(b"old").unwrap();
        assert_eq!(store.blob(&sha).unwrap(), b"old");
        store.record_point(1, "first", "{\"a\":1}").unwrap();
        store.record_point(2, "second", "{\"a\":2}").unwrap();
        let change = |turn, path: &str| FileChange {
            turn,
            call_id: format!("c{turn}"),
            tool: "edit_file".into(),
            path: path.into(),
            before: FileState::Stored {
                sha256: sha.clone(),
                mode: 0o644,
            },
            after: FileState::Absent,
        };
        store
            .record_changes(&[change(1, "a.txt"), change(2, "b.txt"), change(2, "a.txt")])
            .unwrap();
        store.record_gap(2, "c2", "bash", "too many files").unwrap();
        let points = store.points().unwrap();
        assert_eq!(points.len(), 2);
        assert_eq!(points[1].files, ["b.txt", "a.txt"]);
        assert_eq!(store.changes_from(2).unwrap().len(), 2);
        assert_eq!(store.gaps_from(1).unwrap().len(), 1);
        assert_eq!(store.point_state(2).unwrap().as_deref(), Some("{\"a\":2}"));

        store.forget_from(2).unwrap();
        drop(store);
        let store = RewindStore::open(dir.path()).unwrap();
        assert_eq!(store.points().unwrap().len(), 1);
        assert_eq!(store.changes_from(0).unwrap().len(), 1);
        assert!(store.gaps_from(0).unwrap().is_empty());
        assert_eq!(store.point_state(2).unwrap(), None);
    }

    #[test]
    fn a_damaged_blob_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = RewindStore::open(dir.path()).unwrap();
        let sha = store.put_blob(b"content").unwrap();
        std::fs::write(dir.path().join(BLOB_DIR).join(&sha), b"tampered").unwrap();
        let err = store.blob(&sha).unwrap_err().to_string();
        assert!(err.contains("does not match its hash"), "{err}");
    }
}
