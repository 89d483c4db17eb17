//! The SessionTimeline: an append-only SQLite table with one row per event of a session.
//!
//! A row is an observation: it proves no external effect and is never replayed as state (the
//! `replay` model reads assistant messages from it to re-drive a loop, which is a different
//! thing). Triggers refuse UPDATE and DELETE, so "append-only" holds for every writer.
//!
//! Schema `geode.timeline.v1`:
//! `timeline(id INTEGER PRIMARY KEY, session_id TEXT, seq INTEGER, ts TEXT (RFC 3339),
//! kind TEXT, call_id TEXT NULL, payload TEXT (JSON of TimelineEvent), UNIQUE(session_id, seq))`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::StoreError;
use crate::conversation::{Message, StopReason, Usage};
use crate::ids::SessionId;
use crate::policy::Classification;
use crate::tools::plan::StepSnapshot;

pub const SCHEMA: &str = "geode.timeline.v1";

/// How a tool call ended, as the pipeline saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum CallOutcome {
    /// The handler ran and returned success.
    Succeeded,
    /// The handler ran and returned an error.
    Failed,
    /// Dispatch passed its deadline; the outside work may still be running.
    TimedOut,
    /// Refused before dispatch; nothing ran.
    Denied { step: String, reason: String },
    /// The handler ran, a PostToolUse hook withheld the result.
    Withheld { reason: String },
}

impl CallOutcome {
    pub fn dispatched(&self) -> bool {
        !matches!(self, CallOutcome::Denied { .. })
    }
}

/// One timeline event. The serde tag is the row's `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum TimelineEvent {
    #[serde(rename = "session.started")]
    SessionStarted {
        model: String,
        mode: String,
        plan_generation: u64,
        plan_hash: String,
        scaffold_hash: String,
        grant: Option<String>,
    },
    #[serde(rename = "message.user")]
    UserMessage { message: Message },
    #[serde(rename = "message.assistant")]
    AssistantMessage {
        message: Message,
        usage: Usage,
        stop_reason: StopReason,
        snapshot: StepSnapshot,
    },
    #[serde(rename = "tool.called")]
    ToolCalled {
        call_id: String,
        tool: String,
        input: Value,
        classification: Option<Classification>,
    },
    #[serde(rename = "tool.completed")]
    ToolCompleted {
        call_id: String,
        tool: String,
        outcome: CallOutcome,
        is_error: bool,
        /// The tool_result content, capped.
        content: String,
        duration_ms: u64,
    },
    #[serde(rename = "hook.failed")]
    HookFailed {
        hook: String,
        event: String,
        error: String,
    },
    #[serde(rename = "plan.revised")]
    PlanRevised { revision: Value },
    #[serde(rename = "verification")]
    Verification {
        attempt: u32,
        verdict: String,
        misses: Vec<String>,
    },
    #[serde(rename = "turn.ended")]
    TurnEnded {
        termination: String,
        rounds: u32,
        usage: Usage,
    },
    #[serde(rename = "session.ended")]
    SessionEnded { reason: String },
}

impl TimelineEvent {
    /// The row's `kind` column; equal to the serde tag.
    pub fn kind(&self) -> &'static str {
        match self {
            TimelineEvent::SessionStarted { .. } => "session.started",
            TimelineEvent::UserMessage { .. } => "message.user",
            TimelineEvent::AssistantMessage { .. } => "message.assistant",
            TimelineEvent::ToolCalled { .. } => "tool.called",
            TimelineEvent::ToolCompleted { .. } => "tool.completed",
            TimelineEvent::HookFailed { .. } => "hook.failed",
            TimelineEvent::PlanRevised { .. } => "plan.revised",
            TimelineEvent::Verification { .. } => "verification",
            TimelineEvent::TurnEnded { .. } => "turn.ended",
            TimelineEvent::SessionEnded { .. } => "session.ended",
        }
    }

    fn call_id(&self) -> Option<&str> {
        match self {
            TimelineEvent::ToolCalled { call_id, .. }
            | TimelineEvent::ToolCompleted { call_id, .. } => Some(call_id),
            _ => None,
        }
    }
}

/// A row read back.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineRow {
    pub seq: i64,
    pub ts: String,
    pub kind: String,
    pub call_id: Option<String>,
    pub event: TimelineEvent,
}

/// Handle on one timeline database (many sessions may share one file).
#[derive(Debug)]
pub struct SessionTimeline {
    path: PathBuf,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    conn: Connection,
    next_seq: HashMap<SessionId, i64>,
}

impl SessionTimeline {
    /// Open or create the database at `path` (WAL mode).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let err = |source| StoreError::Sqlite {
            path: path.display().to_string(),
            source,
        };
        let conn = Connection::open(&path).map_err(err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(err)?;
        // WAL + NORMAL is durable at checkpoints and never corrupts; the timeline is an
        // observation log, not the checkpoint, so it does not pay an fsync per row.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(err)?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS timeline (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                session_id TEXT NOT NULL,
                seq INTEGER NOT NULL,
                ts TEXT NOT NULL,
                kind TEXT NOT NULL,
                call_id TEXT,
                payload TEXT NOT NULL,
                UNIQUE(session_id, seq)
            );
            CREATE INDEX IF NOT EXISTS timeline_kind ON timeline(session_id, kind);
            CREATE TRIGGER IF NOT EXISTS timeline_no_update BEFORE UPDATE ON timeline
                BEGIN SELECT RAISE(ABORT, 'timeline is append-only'); END;
            CREATE TRIGGER IF NOT EXISTS timeline_no_delete BEFORE DELETE ON timeline
                BEGIN SELECT RAISE(ABORT, 'timeline is append-only'); END;
            CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
        )
        .map_err(err)?;
        conn.execute(
            "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', ?1)",
            params![SCHEMA],
        )
        .map_err(err)?;
        Ok(SessionTimeline {
            path,
            inner: Mutex::new(Inner {
                conn,
                next_seq: HashMap::new(),
            }),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sqlite_err(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sqlite {
            path: self.path.display().to_string(),
            source,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a half-written row (SQLite statements
        // are atomic), so a poisoned lock is still safe to use.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Append one event; returns its sequence number within the session.
    pub fn append(&self, session: &SessionId, event: &TimelineEvent) -> Result<i64, StoreError> {
        let payload = serde_json::to_string(event).map_err(|e| StoreError::Corrupt {
            path: self.path.display().to_string(),
            row: -1,
            message: format!("cannot serialize event: {e}"),
        })?;
        let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        let mut inner = self.lock();
        let seq = match inner.next_seq.get(session) {
            Some(s) => *s,
            None => {
                let max: Option<i64> = inner
                    .conn
                    .query_row(
                        "SELECT MAX(seq) FROM timeline WHERE session_id = ?1",
                        params![session.as_str()],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(|e| self.sqlite_err(e))?
                    .flatten();
                max.map_or(0, |m| m + 1)
            }
        };
        inner
            .conn
            .prepare_cached(
                "INSERT INTO timeline(session_id, seq, ts, kind, call_id, payload)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    session.as_str(),
                    seq,
                    ts,
                    event.kind(),
                    event.call_id(),
                    payload
                ])
            })
            .map_err(|e| self.sqlite_err(e))?;
        inner.next_seq.insert(session.clone(), seq + 1);
        Ok(seq)
    }

    /// Every row of a session in order. A row whose payload does not parse is an error naming
    /// the file and row, not a panic.
    pub fn rows(&self, session: &SessionId) -> Result<Vec<TimelineRow>, StoreError> {
        let inner = self.lock();
        let mut st = inner
            .conn
            .prepare(
                "SELECT id, seq, ts, kind, call_id, payload FROM timeline
                 WHERE session_id = ?1 ORDER BY seq",
            )
            .map_err(|e| self.sqlite_err(e))?;
        let raw = st
            .query_map(params![session.as_str()], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, Option<String>>(4)?,
                    r.get::<_, String>(5)?,
                ))
            })
            .map_err(|e| self.sqlite_err(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.sqlite_err(e))?;
        raw.into_iter()
            .map(|(id, seq, ts, kind, call_id, payload)| {
                let event = serde_json::from_str(&payload).map_err(|e| StoreError::Corrupt {
                    path: self.path.display().to_string(),
                    row: id,
                    message: format!("payload is not a timeline event: {e}"),
                })?;
                Ok(TimelineRow {
                    seq,
                    ts,
                    kind,
                    call_id,
                    event,
                })
            })
            .collect()
    }

    /// The session with the newest row, if any.
    pub fn latest_session(&self) -> Result<Option<SessionId>, StoreError> {
        let inner = self.lock();
        inner
            .conn
            .query_row(
                "SELECT session_id FROM timeline ORDER BY id DESC LIMIT 1",
                [],
                |r| r.get::<_, String>(0),
            )
            .optional()
            .map(|o| o.map(SessionId::new))
            .map_err(|e| self.sqlite_err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_append_only_and_ordered() {
        let dir = tempfile::tempdir().unwrap();
        let tl = SessionTimeline::open(dir.path().join("t.db")).unwrap();
        let s = SessionId::new("s1");
        for i in 0..3 {
            let seq = tl
                .append(
                    &s,
                    &TimelineEvent::SessionEnded {
                        reason: format!("r{i}"),
                    },
                )
                .unwrap();
            assert_eq!(seq, i);
        }
        let rows = tl.rows(&s).unwrap();
        assert_eq!(rows.len(), 3);
        // The kind column and the serde tag must agree.
        let tagged = serde_json::to_value(&rows[0].event).unwrap();
        assert_eq!(tagged["kind"], rows[0].kind.as_str());
        assert_eq!(rows[0].kind, "session.ended");
        let inner = tl.lock();
        let err = inner.conn.execute("DELETE FROM timeline", []).unwrap_err();
        assert!(err.to_string().contains("append-only"));
        let err = inner
            .conn
            .execute("UPDATE timeline SET kind = 'x'", [])
            .unwrap_err();
        assert!(err.to_string().contains("append-only"));
    }

    #[test]
    fn reopening_continues_the_sequence() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.db");
        let s = SessionId::new("s1");
        let ev = TimelineEvent::SessionEnded { reason: "x".into() };
        SessionTimeline::open(&p).unwrap().append(&s, &ev).unwrap();
        let seq = SessionTimeline::open(&p).unwrap().append(&s, &ev).unwrap();
        assert_eq!(seq, 1);
    }
}
