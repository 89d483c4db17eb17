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
use std::sync::{Mutex, mpsc};

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::StoreError;
use super::checkpoint::SavePoint;
use crate::conversation::{ImageDigest, Message, StopReason, Usage};
use crate::ids::{SessionId, StepSnapshot};
use crate::policy::Classification;

pub(crate) const SCHEMA: &str = "geode.timeline.v1";

mod outcome;
pub use outcome::{CallOutcome, PipelineStep, UnknownOutcome};

/// One timeline event. The serde tag is the row's `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum TimelineEvent {
    /// The session's first turn started.
    #[serde(rename = "session.started")]
    SessionStarted {
        /// The id of the model it started with.
        model: String,
        /// Its session mode (`repl`, `ipc`, `daemon`, `headless`).
        mode: String,
        /// The generation of its tool plan.
        plan_generation: u64,
        /// The plan's hash (SHA-256 of its canonical JSON).
        plan_hash: String,
        /// The scaffold's hash (SHA-256 of its canonical JSON).
        scaffold_hash: String,
        /// Why its policy differs from the mode's defaults; absent when it does not.
        grant: Option<String>,
    },
    /// A user message joined the conversation (a prompt, tool results, a repair instruction).
    #[serde(rename = "message.user")]
    UserMessage {
        /// The message, its images left out.
        message: Message,
    },
    /// The model replied.
    #[serde(rename = "message.assistant")]
    AssistantMessage {
        /// The reply.
        message: Message,
        /// The call's tokens and cost.
        usage: Usage,
        /// Why the model stopped.
        stop_reason: StopReason,
        /// What the call was bound to: model, tool plan, round.
        snapshot: StepSnapshot,
    },
    /// A tool call entered the pipeline (before any check).
    #[serde(rename = "tool.called")]
    ToolCalled {
        /// The call's id, as the model gave it.
        call_id: String,
        /// The tool the model called.
        tool: String,
        /// The input the model gave.
        input: Value,
        /// The tool's classification; absent when no tool of that name is bound.
        classification: Option<Classification>,
    },
    /// A tool call left the pipeline, run or refused.
    #[serde(rename = "tool.completed")]
    ToolCompleted {
        /// The call's id.
        call_id: String,
        /// The tool called, or the one a middleware rewrote the call to.
        tool: String,
        /// How the call ended.
        outcome: CallOutcome,
        /// True when the model was given an error result.
        is_error: bool,
        /// The tool_result content, capped.
        content: String,
        /// The result's screenshots as hash and size only: the base64 stays in the
        /// conversation (checkpoint), so a timeline row never carries megabytes.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<ImageDigest>,
        /// Milliseconds from entering the pipeline to the result.
        duration_ms: u64,
    },
    /// A hook handler failed.
    #[serde(rename = "hook.failed")]
    HookFailed {
        /// The handler's name.
        hook: String,
        /// The name of the event it was handling.
        event: String,
        /// What went wrong.
        error: String,
    },
    /// The plan was revised (one row per revision).
    #[serde(rename = "plan.revised")]
    PlanRevised {
        /// The revision, as JSON.
        revision: Value,
    },
    /// An answer was verified.
    #[serde(rename = "verification")]
    Verification {
        /// Repairs of the turn before this check (0 for the first answer).
        attempt: u32,
        /// `passed`, `failed`, `repair` (sent back to the model) or `escalated`.
        verdict: String,
        /// What the answer missed; empty when it passed.
        misses: Vec<String>,
    },
    /// A turn ended.
    #[serde(rename = "turn.ended")]
    TurnEnded {
        /// Why, as the termination reason's name.
        termination: String,
        /// Rounds (model calls) the turn ran.
        rounds: u32,
        /// The turn's tokens and cost, all its model calls summed.
        usage: Usage,
    },
    /// The session was closed.
    #[serde(rename = "session.ended")]
    SessionEnded {
        /// Why, as the driver said (`user_exit`, `daemon_drain`, `subagent_done`, ...).
        reason: String,
    },
    /// The context was compacted (or a compaction was deferred by a PreCompact hook, or
    /// failed and left the conversation as it was).
    #[serde(rename = "compaction")]
    Compaction {
        /// `done`, `deferred` or `failed`.
        status: String,
        /// Messages in the conversation before.
        messages_before: usize,
        /// Messages after (the same as before unless `done`).
        messages_after: usize,
        /// The context's estimated size in tokens when the compaction was tried.
        estimated_tokens: u64,
        /// The size in tokens past which a turn compacts by itself.
        threshold_tokens: u64,
        /// Recent messages kept as they were (a PreCompact hook may change it).
        keep_recent: usize,
        /// The SHA-256 of the summary; absent when none was made.
        summary_sha256: Option<String>,
        /// The file the summary was written to, beside the checkpoint; absent when none was.
        artifact: Option<String>,
    },
    /// A session was brought back from its checkpoint.
    #[serde(rename = "session.resumed")]
    SessionResumed {
        /// The session's status before the resume.
        from_status: String,
        /// Messages in the restored conversation.
        messages: usize,
        /// Calls of the batch the interruption left pending.
        pending_calls: usize,
        /// Call ids of every receipt waiting for reconciliation.
        uncertain_calls: Vec<String>,
    },
    /// A person went back to before turn `to_turn` (`/rewind`): the files put back (and
    /// those that could not be), and the conversation's length after.
    #[serde(rename = "session.rewound")]
    SessionRewound {
        /// The turn gone back to before.
        to_turn: u32,
        /// Messages in the conversation after.
        messages: usize,
        /// Files put back.
        files_restored: Vec<String>,
        /// Files that could not be put back.
        files_not_restored: Vec<String>,
    },
    /// A call of the batch pending at the crash, settled at resume without running it
    /// (`uncertain`, `committed` from its receipt, `reconciled`) or by running it again
    /// (`rerun`: it never started, or it has no effect).
    #[serde(rename = "tool.recovered")]
    ToolRecovered {
        /// The call's id.
        call_id: String,
        /// The tool called.
        tool: String,
        /// `uncertain`, `committed`, `reconciled` or `rerun`.
        disposition: String,
        /// The result the model is given for it; empty for a rerun.
        content: String,
    },
    /// The checkpoint could not be saved at this save point.
    #[serde(rename = "checkpoint.failed")]
    CheckpointFailed {
        /// The save point that failed.
        stage: SavePoint,
        /// What went wrong.
        error: String,
    },
    /// `/model` or `/effort` changed the model between turns.
    #[serde(rename = "model.switched")]
    ModelSwitched {
        /// The id of the model before.
        from: String,
        /// The id of the model after.
        to: String,
        /// The route switched to.
        route: String,
        /// The effort asked for, if any.
        effort: Option<String>,
    },
    /// Tools joined the plan between turns (an MCP server that connected after the session
    /// started): a new plan generation, which later step snapshots name.
    #[serde(rename = "plan.extended")]
    PlanExtended {
        /// The new plan's generation.
        plan_generation: u64,
        /// The new plan's hash.
        plan_hash: String,
        /// The names of the tools added.
        added: Vec<String>,
    },
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
            TimelineEvent::Compaction { .. } => "compaction",
            TimelineEvent::SessionResumed { .. } => "session.resumed",
            TimelineEvent::SessionRewound { .. } => "session.rewound",
            TimelineEvent::ToolRecovered { .. } => "tool.recovered",
            TimelineEvent::CheckpointFailed { .. } => "checkpoint.failed",
            TimelineEvent::ModelSwitched { .. } => "model.switched",
            TimelineEvent::PlanExtended { .. } => "plan.extended",
        }
    }

    fn call_id(&self) -> Option<&str> {
        match self {
            TimelineEvent::ToolCalled { call_id, .. }
            | TimelineEvent::ToolCompleted { call_id, .. }
            | TimelineEvent::ToolRecovered { call_id, .. } => Some(call_id),
            _ => None,
        }
    }
}

/// A row read back.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineRow {
    pub(crate) seq: i64,
    /// When the event was queued (RFC 3339, UTC, microseconds).
    pub ts: String,
    /// The event's kind, as `TimelineEvent::kind` names it.
    pub kind: String,
    /// The call the event is about, for tool rows.
    pub call_id: Option<String>,
    /// The event.
    pub event: TimelineEvent,
}

/// Handle on one timeline database (many sessions may share one file).
///
/// Appends go to one writer thread that commits whatever has queued up in one transaction, so
/// the tool pipeline pays a channel send per row instead of a SQLite commit. The price: rows
/// queued in the last moments before a `kill -9` can be lost. The timeline is an observation
/// log, not the checkpoint, so that is the right trade; `flush` waits for everything queued.
#[derive(Debug)]
pub struct SessionTimeline {
    path: PathBuf,
    tx: Mutex<Option<mpsc::Sender<Command>>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    reader: Mutex<Connection>,
}

enum Command {
    Append {
        session: SessionId,
        ts: String,
        event: TimelineEvent,
    },
    Flush(mpsc::SyncSender<()>),
}

/// The writer thread's state: one connection, the next sequence number of each session.
struct Writer {
    path: String,
    conn: Connection,
    next_seq: HashMap<SessionId, i64>,
}

impl Writer {
    fn run(mut self, rx: mpsc::Receiver<Command>) {
        while let Ok(first) = rx.recv() {
            let mut batch = vec![first];
            batch.extend(rx.try_iter());
            let mut acks = Vec::new();
            let mut rows = Vec::new();
            for cmd in batch {
                match cmd {
                    Command::Flush(ack) => acks.push(ack),
                    Command::Append { session, ts, event } => rows.push((session, ts, event)),
                }
            }
            if !rows.is_empty()
                && let Err(e) = self.commit(rows)
            {
                tracing::warn!("timeline {}: rows lost: {e}", self.path);
            }
            for ack in acks {
                // The flusher may have given up waiting; nothing to do then.
                let _ = ack.send(());
            }
        }
    }

    fn next_seq(&mut self, session: &SessionId) -> rusqlite::Result<i64> {
        if let Some(s) = self.next_seq.get(session) {
            return Ok(*s);
        }
        let max: Option<i64> = self.conn.query_row(
            "SELECT MAX(seq) FROM timeline WHERE session_id = ?1",
            params![session.as_str()],
            |r| r.get(0),
        )?;
        Ok(max.map_or(0, |m| m + 1))
    }

    fn commit(&mut self, rows: Vec<(SessionId, String, TimelineEvent)>) -> rusqlite::Result<()> {
        let mut assigned = Vec::with_capacity(rows.len());
        for (session, ts, event) in rows {
            let seq = self.next_seq(&session)?;
            self.next_seq.insert(session.clone(), seq + 1);
            assigned.push((session, seq, ts, event));
        }
        let tx = self.conn.transaction()?;
        {
            let mut st = tx.prepare_cached(
                "INSERT INTO timeline(session_id, seq, ts, kind, call_id, payload)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?;
            for (session, seq, ts, event) in &assigned {
                let payload = serde_json::to_string(event)
                    .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
                st.execute(params![
                    session.as_str(),
                    seq,
                    ts,
                    event.kind(),
                    event.call_id(),
                    payload
                ])?;
            }
        }
        let result = tx.commit();
        if result.is_err() {
            // Sequence numbers of a failed batch are not reused; read them again.
            self.next_seq.clear();
        }
        result
    }
}

impl SessionTimeline {
    /// Open or create the database at `path` (WAL mode) and start its writer thread.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let shown = path.display().to_string();
        let err = |source| StoreError::Sqlite {
            path: shown.clone(),
            source,
        };
        let conn = Connection::open(&path).map_err(err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(err)?;
        // WAL + NORMAL never corrupts the file; a power cut may lose the last commits, which
        // an observation log can afford.
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
        let reader = Connection::open(&path).map_err(err)?;
        let (tx, rx) = mpsc::channel();
        let writer = Writer {
            path: shown.clone(),
            conn,
            next_seq: HashMap::new(),
        };
        let handle = std::thread::Builder::new()
            .name("geode-timeline".into())
            .spawn(move || writer.run(rx))
            .map_err(|source| StoreError::Io {
                path: shown.clone(),
                source,
            })?;
        Ok(SessionTimeline {
            path,
            tx: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(handle)),
            reader: Mutex::new(reader),
        })
    }

    /// The database file it was opened on.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sqlite_err(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sqlite {
            path: self.path.display().to_string(),
            source,
        }
    }

    fn send(&self, cmd: Command) -> Result<(), StoreError> {
        // A panic elsewhere while holding this lock leaves the sender intact.
        let guard = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        let sent = guard.as_ref().map(|tx| tx.send(cmd).is_ok());
        if sent == Some(true) {
            Ok(())
        } else {
            Err(StoreError::Io {
                path: self.path.display().to_string(),
                source: std::io::Error::other("the timeline writer has stopped"),
            })
        }
    }

    /// Queue one event. Its sequence number within the session follows the order of calls.
    pub fn append(&self, session: &SessionId, event: TimelineEvent) -> Result<(), StoreError> {
        let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        self.send(Command::Append {
            session: session.clone(),
            ts,
            event,
        })
    }

    /// Wait until every event queued so far is committed (or its batch failed and was logged).
    pub fn flush(&self) -> Result<(), StoreError> {
        let (ack, done) = mpsc::sync_channel(1);
        self.send(Command::Flush(ack))?;
        done.recv().map_err(|_| StoreError::Io {
            path: self.path.display().to_string(),
            source: std::io::Error::other("the timeline writer stopped before flushing"),
        })
    }

    /// Every row of a session in order (after a flush). A row whose payload does not parse is
    /// an error naming the file and row, not a panic.
    pub fn rows(&self, session: &SessionId) -> Result<Vec<TimelineRow>, StoreError> {
        self.flush()?;
        let reader = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        let mut st = reader
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

    /// The session with the newest row, if any (after a flush).
    pub fn latest_session(&self) -> Result<Option<SessionId>, StoreError> {
        self.flush()?;
        let reader = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        reader
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

impl Drop for SessionTimeline {
    /// Closing the channel lets the writer commit what is queued and end; wait for it.
    fn drop(&mut self) {
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
        if let Ok(mut w) = self.writer.lock()
            && let Some(handle) = w.take()
        {
            let _ = handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(i: usize) -> TimelineEvent {
        TimelineEvent::SessionEnded {
            reason: format!("r{i}"),
        }
    }

    #[test]
    fn rows_are_append_only_and_ordered() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.db");
        let tl = SessionTimeline::open(&p).unwrap();
        let s = SessionId::new("s1");
        for i in 0..3 {
            tl.append(&s, ended(i)).unwrap();
        }
        let rows = tl.rows(&s).unwrap();
        assert_eq!(rows.iter().map(|r| r.seq).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(rows[2].event, ended(2));
        assert_eq!(rows[0].kind, "session.ended");
        // The kind column and the serde tag must agree.
        let tagged = serde_json::to_value(&rows[0].event).unwrap();
        assert_eq!(tagged["kind"], rows[0].kind.as_str());
        let other = Connection::open(&p).unwrap();
        let err = other.execute("DELETE FROM timeline", []).unwrap_err();
        assert!(err.to_string().contains("append-only"));
        let err = other
            .execute("UPDATE timeline SET kind = 'x'", [])
            .unwrap_err();
        assert!(err.to_string().contains("append-only"));
    }

    #[test]
    fn kind_matches_the_serde_tag_of_the_recovery_events() {
        let events = [
            TimelineEvent::Compaction {
                status: "done".into(),
                messages_before: 5,
                messages_after: 3,
                estimated_tokens: 10,
                threshold_tokens: 5,
                keep_recent: 2,
                summary_sha256: None,
                artifact: None,
            },
            TimelineEvent::SessionResumed {
                from_status: "active".into(),
                messages: 2,
                pending_calls: 1,
                uncertain_calls: vec!["c".into()],
            },
            TimelineEvent::ToolRecovered {
                call_id: "c".into(),
                tool: "bash".into(),
                disposition: "uncertain".into(),
                content: String::new(),
            },
            TimelineEvent::SessionRewound {
                to_turn: 2,
                messages: 3,
                files_restored: vec!["a.txt".into()],
                files_not_restored: Vec::new(),
            },
            TimelineEvent::CheckpointFailed {
                stage: SavePoint::PendingBatch,
                error: "x".into(),
            },
        ];
        for e in events {
            let tagged = serde_json::to_value(&e).unwrap();
            assert_eq!(tagged["kind"], e.kind());
            assert_eq!(serde_json::from_value::<TimelineEvent>(tagged).unwrap(), e);
        }
    }

    #[test]
    fn reopening_continues_the_sequence_and_drop_commits() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.db");
        let s = SessionId::new("s1");
        {
            let tl = SessionTimeline::open(&p).unwrap();
            tl.append(&s, ended(0)).unwrap();
            // No flush: dropping the handle must still commit the queued row.
        }
        let tl = SessionTimeline::open(&p).unwrap();
        tl.append(&s, ended(1)).unwrap();
        let seqs: Vec<i64> = tl.rows(&s).unwrap().iter().map(|r| r.seq).collect();
        assert_eq!(seqs, [0, 1]);
    }

    #[test]
    fn a_corrupt_payload_names_the_file_and_row() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.db");
        let tl = SessionTimeline::open(&p).unwrap();
        let other = Connection::open(&p).unwrap();
        other
            .execute(
                "INSERT INTO timeline(session_id, seq, ts, kind, payload) VALUES ('s', 0, 't', 'x', '{bad')",
                [],
            )
            .unwrap();
        let err = tl.rows(&SessionId::new("s")).unwrap_err().to_string();
        assert!(err.contains("t.db") && err.contains("row 1"), "{err}");
    }
}
