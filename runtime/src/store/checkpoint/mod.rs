//! The checkpoint of one session: the conversation and the loop state a resume brings back.
//!
//! One directory per session, `<root>/<session_id>/`:
//! - `checkpoint.db` (SQLite, WAL, `synchronous = FULL`, schema `geode.checkpoint.v1`):
//!   `messages(session_id, seq, role, content JSON, tool_call_id, tool_calls, tool_name, ts,
//!   tokens, finish_reason, UNIQUE(session_id, seq))`, one `sessions` row (status machine
//!   below) and `meta(key, value)`. `content` (the JSON array of content blocks) is the source
//!   of truth; `tool_call_id` (JSON array of the tool_result ids), `tool_calls` (JSON array of
//!   the tool_use blocks), `tool_name` (JSON array of their names), `tokens` (chars / 4) and
//!   `finish_reason` (`tool_use` / `end_turn` for assistant messages) are for inspection.
//! - `state.json`: the loop state. The agent layer defines its content; this store checks its
//!   `schema` field and writes it atomically (temp file, fsync, rename, fsync of the directory).
//! - `lock`: locked while a process uses the session, so two processes never write one
//!   checkpoint. The kernel drops the lock when the process dies, `kill -9` included.
//!   `inspect` opens a checkpoint read-only without the lock (tests, `geode resume` reading
//!   the saved model before it resumes).
//!
//! Messages are appended, never rewritten: a save inserts only the messages new since the last
//! one, so its cost does not grow with the conversation. `state.json` is the commit point: it
//! names the rows that make up the conversation, so rows of a save that died before its rename
//! are ignored on restore and replaced by the next save (`INSERT OR REPLACE` on `seq`).
//!
//! Status machine of the `sessions` row: `active` (a turn is running) <-> `paused` (between
//! turns); either -> `completed` | `error`. A terminal status is left only through `reopen`.
//!
//! A damaged file is never overwritten: reading it fails with an error naming it, and nothing
//! here writes a state.json or database it could not read.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{Connection, OpenFlags, params};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::StoreError;
use super::files::sync_dir;
pub use super::files::{read_state_file, write_atomic};
use crate::conversation::{ContentBlock, Message, Role};
use crate::ids::SessionId;

pub(crate) const DB_SCHEMA: &str = "geode.checkpoint.v1";
/// The session's database, in its directory.
pub const DB_FILE: &str = "checkpoint.db";
pub(crate) const STATE_FILE: &str = "state.json";
const LOCK_FILE: &str = "lock";

mod db;
mod save_point;
use db::{check_schema, columns, open_db, read_row};
pub use save_point::SavePoint;

/// Where a session is in its life. Stored in the `sessions` row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum SessionStatus {
    /// A turn is running (or was, when the process died).
    Active,
    /// Between turns: the session can take another prompt.
    Paused,
    /// Closed after a last turn that did not fail. Terminal: left only through `reopen`.
    Completed,
    /// Closed after a last turn that failed (model, billing or checkpoint). Terminal too.
    Error,
}

impl SessionStatus {
    /// The name stored in the `sessions` row (the serde name).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub(crate) fn parse(s: &str) -> Option<SessionStatus> {
        s.parse().ok()
    }

    pub(crate) fn is_terminal(self) -> bool {
        matches!(self, SessionStatus::Completed | SessionStatus::Error)
    }

    /// Whether `set_status` may move from `self` to `to`; terminal states only via `reopen`.
    pub fn may_become(self, to: SessionStatus) -> bool {
        self == to || !self.is_terminal()
    }
}

/// The `sessions` row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionRow {
    /// The session the checkpoint belongs to.
    pub session_id: SessionId,
    /// Where the session is in its life.
    pub status: SessionStatus,
    /// When the checkpoint was created (RFC 3339, UTC, microseconds).
    pub created_at: String,
    /// The last append of messages or change of status (RFC 3339, UTC, microseconds).
    pub updated_at: String,
    /// The model the session was created with (a later switch does not update it).
    pub model: String,
    /// The working directory the session was created in.
    pub cwd: String,
}

/// A session id becomes a directory name, so it is limited to `[A-Za-z0-9._-]`, at most 128
/// characters, and may not start with a dot.
pub fn validate_session_id(id: &SessionId) -> Result<(), String> {
    let s = id.as_str();
    let ok_chars = s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if s.is_empty() || s.len() > 128 || s.starts_with('.') || !ok_chars {
        return Err(format!(
            "session id {s:?} cannot name a checkpoint directory (use 1-128 of A-Z a-z 0-9 . _ -, \
             not starting with a dot)"
        ));
    }
    Ok(())
}

pub(crate) fn session_dir(root: &Path, id: &SessionId) -> PathBuf {
    root.join(id.as_str())
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// Handle on one session's checkpoint; holds the session's lock while it lives.
#[derive(Debug)]
pub struct CheckpointStore {
    session_id: SessionId,
    dir: PathBuf,
    db_path: PathBuf,
    state_path: PathBuf,
    conn: Mutex<Connection>,
    /// `None` when opened by `inspect`: then every write is refused.
    lock: Option<File>,
}

impl CheckpointStore {
    /// Create the checkpoint of a new session under `root`. Refuses when the session already
    /// has one (resume it instead), so an existing checkpoint is never overwritten.
    pub fn create(
        root: &Path,
        id: &SessionId,
        model: &str,
        cwd: &Path,
    ) -> Result<Self, StoreError> {
        validate_session_id(id).map_err(|m| StoreError::refused(root, m))?;
        std::fs::create_dir_all(root).map_err(|e| StoreError::io(root, e))?;
        let dir = session_dir(root, id);
        if let Err(e) = std::fs::create_dir(&dir) {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                return Err(StoreError::refused(
                    &dir,
                    format!(
                        "session {id} already has a checkpoint; continue it with `geode resume \
                         {id}` or pick another session id"
                    ),
                ));
            }
            return Err(StoreError::io(&dir, e));
        }
        let store = Self::open_in(dir, id, true)?;
        {
            let conn = store.lock_conn();
            let ts = now();
            conn.execute(
                "INSERT INTO sessions(session_id, status, created_at, updated_at, model, cwd)
                 VALUES (?1, 'active', ?2, ?2, ?3, ?4)",
                params![id.as_str(), ts, model, cwd.display().to_string()],
            )
            .map_err(|e| StoreError::sqlite(&store.db_path, e))?;
        }
        // The new directory entry and database must survive a power cut like the rows do.
        sync_dir(&store.dir)?;
        sync_dir(root)?;
        Ok(store)
    }

    /// Open the checkpoint of an existing session. Creates nothing: a missing database or a
    /// file that is not one is an error naming it.
    pub fn open(root: &Path, id: &SessionId) -> Result<Self, StoreError> {
        validate_session_id(id).map_err(|m| StoreError::refused(root, m))?;
        let dir = session_dir(root, id);
        if !dir.join(DB_FILE).is_file() {
            return Err(StoreError::NotFound {
                path: dir.join(DB_FILE).display().to_string(),
                message: format!("session {id} has no checkpoint here"),
            });
        }
        let store = Self::open_in(dir, id, false)?;
        store.row()?;
        Ok(store)
    }

    /// Open an existing checkpoint read-only, without taking the session's lock: reading
    /// while another process runs the session is safe (WAL readers see committed data).
    pub fn inspect(root: &Path, id: &SessionId) -> Result<Self, StoreError> {
        validate_session_id(id).map_err(|m| StoreError::refused(root, m))?;
        let dir = session_dir(root, id);
        let db_path = dir.join(DB_FILE);
        if !db_path.is_file() {
            return Err(StoreError::NotFound {
                path: db_path.display().to_string(),
                message: format!("session {id} has no checkpoint here"),
            });
        }
        let err = |e| StoreError::sqlite(&db_path, e);
        let conn = Connection::open_with_flags(
            &db_path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(err)?;
        check_schema(&conn, &db_path)?;
        let store = CheckpointStore {
            session_id: id.clone(),
            state_path: dir.join(STATE_FILE),
            dir,
            db_path,
            conn: Mutex::new(conn),
            lock: None,
        };
        store.row()?;
        Ok(store)
    }

    fn writable(&self) -> Result<(), StoreError> {
        match self.lock {
            Some(_) => Ok(()),
            None => Err(StoreError::refused(
                &self.dir,
                "the checkpoint was opened for inspection; it is not written",
            )),
        }
    }

    fn open_in(dir: PathBuf, id: &SessionId, create: bool) -> Result<Self, StoreError> {
        let lock_path = dir.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(|e| StoreError::io(&lock_path, e))?;
        if lock.try_lock().is_err() {
            return Err(StoreError::refused(
                &dir,
                format!("session {id} is in use by another geode process"),
            ));
        }
        let db_path = dir.join(DB_FILE);
        let conn = open_db(&db_path, create)?;
        Ok(CheckpointStore {
            session_id: id.clone(),
            state_path: dir.join(STATE_FILE),
            dir,
            db_path,
            conn: Mutex::new(conn),
            lock: Some(lock),
        })
    }

    pub(crate) fn session_id(&self) -> &SessionId {
        &self.session_id
    }

    /// The session's directory, `<root>/<session_id>/`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The session's database, `checkpoint.db` in its directory.
    pub fn db_path(&self) -> &Path {
        &self.db_path
    }

    pub(crate) fn state_path(&self) -> &Path {
        &self.state_path
    }

    fn lock_conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave the connection half-used: every write
        // is one transaction that SQLite rolls back when it is not committed.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Insert `messages` as rows `first_seq..`, in one transaction (durable on return).
    pub fn append_messages(&self, first_seq: u64, messages: &[Message]) -> Result<(), StoreError> {
        self.writable()?;
        let err = |e| StoreError::sqlite(&self.db_path, e);
        let mut conn = self.lock_conn();
        let tx = conn.transaction().map_err(err)?;
        {
            let mut st = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO messages(session_id, seq, role, content,
                     tool_call_id, tool_calls, tool_name, ts, tokens, finish_reason)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                )
                .map_err(err)?;
            let ts = now();
            for (i, m) in messages.iter().enumerate() {
                let c = columns(m).map_err(|e| StoreError::Json {
                    path: self.db_path.display().to_string(),
                    message: format!("message {} does not serialize: {e}", first_seq + i as u64),
                })?;
                st.execute(params![
                    self.session_id.as_str(),
                    (first_seq + i as u64) as i64,
                    c.role,
                    c.content,
                    c.tool_call_id,
                    c.tool_calls,
                    c.tool_name,
                    ts,
                    c.tokens,
                    c.finish_reason
                ])
                .map_err(err)?;
            }
            tx.execute(
                "UPDATE sessions SET updated_at = ?2 WHERE session_id = ?1",
                params![self.session_id.as_str(), ts],
            )
            .map_err(err)?;
        }
        tx.commit().map_err(err)
    }

    /// Rows `from..to` as messages. Fewer rows than asked, or a row that does not parse, is a
    /// `Corrupt` error naming the database and row.
    pub fn messages(&self, from: u64, to: u64) -> Result<Vec<Message>, StoreError> {
        let err = |e| StoreError::sqlite(&self.db_path, e);
        let conn = self.lock_conn();
        let mut st = conn
            .prepare(
                "SELECT seq, role, content FROM messages
                 WHERE session_id = ?1 AND seq >= ?2 AND seq < ?3 ORDER BY seq",
            )
            .map_err(err)?;
        let rows = st
            .query_map(
                params![self.session_id.as_str(), from as i64, to as i64],
                |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                    ))
                },
            )
            .map_err(err)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?;
        let corrupt = |row: i64, message: String| StoreError::Corrupt {
            path: self.db_path.display().to_string(),
            row,
            message,
        };
        let mut out = Vec::with_capacity(rows.len());
        for (expected, (seq, role, content)) in (from as i64..).zip(rows) {
            if seq != expected {
                return Err(corrupt(
                    expected,
                    format!("message seq {expected} is missing (state.json names {from}..{to})"),
                ));
            }
            let role = match role.as_str() {
                "user" => Role::User,
                "assistant" => Role::Assistant,
                other => return Err(corrupt(seq, format!("unknown role {other:?}"))),
            };
            let content: Vec<ContentBlock> = serde_json::from_str(&content)
                .map_err(|e| corrupt(seq, format!("content is not a list of blocks: {e}")))?;
            out.push(Message { role, content });
        }
        if (out.len() as u64) < to.saturating_sub(from) {
            return Err(corrupt(
                from as i64 + out.len() as i64,
                format!(
                    "state.json names messages {from}..{to} but the database holds only {}",
                    out.len()
                ),
            ));
        }
        Ok(out)
    }

    /// Write `state.json` atomically.
    pub fn write_state<T: Serialize>(&self, state: &T) -> Result<(), StoreError> {
        self.writable()?;
        let mut bytes = serde_json::to_vec_pretty(state).map_err(|e| StoreError::Json {
            path: self.state_path.display().to_string(),
            message: format!("the state does not serialize: {e}"),
        })?;
        bytes.push(b'\n');
        write_atomic(&self.state_path, &bytes)
    }

    /// Read `state.json`, checking its `schema` field. A damaged file is reported, never
    /// touched.
    pub fn read_state<T: DeserializeOwned>(&self, schema: &str) -> Result<T, StoreError> {
        read_state_file(&self.state_path, schema)
    }

    pub(crate) fn row(&self) -> Result<SessionRow, StoreError> {
        let conn = self.lock_conn();
        read_row(&conn, &self.db_path, &self.session_id)
    }

    /// The session's status, read from its row now.
    pub fn status(&self) -> Result<SessionStatus, StoreError> {
        Ok(self.row()?.status)
    }

    /// Move the status along the machine; leaving `completed` or `error` is refused (use
    /// `reopen`).
    pub fn set_status(&self, to: SessionStatus) -> Result<(), StoreError> {
        let from = self.status()?;
        if !from.may_become(to) {
            return Err(StoreError::refused(
                &self.db_path,
                format!(
                    "session {} is {from}; it becomes {to} only through an explicit reopen",
                    self.session_id
                ),
            ));
        }
        self.write_status(to)
    }

    /// Leave a terminal status for `active` (an explicit decision to continue the session).
    /// Returns the status it had.
    pub fn reopen(&self) -> Result<SessionStatus, StoreError> {
        let from = self.status()?;
        self.write_status(SessionStatus::Active)?;
        Ok(from)
    }

    fn write_status(&self, to: SessionStatus) -> Result<(), StoreError> {
        self.writable()?;
        let conn = self.lock_conn();
        conn.execute(
            "UPDATE sessions SET status = ?2, updated_at = ?3 WHERE session_id = ?1",
            params![self.session_id.as_str(), to.as_str(), now()],
        )
        .map_err(|e| StoreError::sqlite(&self.db_path, e))?;
        Ok(())
    }

    /// The sessions under `root`, newest update first, and the problems of those that could
    /// not be read (each naming its file). Takes no locks: it only reads.
    pub fn list(root: &Path) -> (Vec<SessionRow>, Vec<StoreError>) {
        let mut rows = Vec::new();
        let mut problems = Vec::new();
        let entries = match std::fs::read_dir(root) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (rows, problems),
            Err(e) => return (rows, vec![StoreError::io(root, e)]),
        };
        for entry in entries.flatten() {
            let db = entry.path().join(DB_FILE);
            if !db.is_file() {
                continue;
            }
            let id = SessionId::new(entry.file_name().to_string_lossy().into_owned());
            match CheckpointStore::inspect(root, &id).and_then(|s| s.row()) {
                Ok(r) => rows.push(r),
                Err(e) => problems.push(e),
            }
        }
        rows.sort_by(|a, b| b.updated_at.cmp(&a.updated_at));
        (rows, problems)
    }
}
