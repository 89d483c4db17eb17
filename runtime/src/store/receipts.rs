//! Effect receipts: for every call that changes the world, a durable row written before it is
//! dispatched, so a crash can never make the runtime forget that an effect started.
//!
//! States, keyed by (session, call id):
//!
//! `accepted` (written and fsynced before dispatch) -> `committed` (the handler returned; the
//! outcome and a capped copy of the result are kept) | `uncertain` (timeout, cancellation, a
//! crash: the outside work may or may not have happened) -> `reconciled` (a person said
//! `done` or `not-done` with `geode receipts reconcile`).
//!
//! On resume every receipt still `accepted` becomes `uncertain`. An uncertain effect is never
//! re-run automatically; the model is told its outcome is unknown. A call id that already has a
//! receipt is never dispatched again (`accept` refuses it).
//!
//! Schema `geode.receipts.v1`, one SQLite file per session directory (`receipts.db`, WAL,
//! `synchronous = FULL`): `receipts(session_id, call_id, tool, input JSON, input_sha256, state,
//! outcome, result, is_error, turn, round, accepted_at, settled_at, note,
//! PRIMARY KEY(session_id, call_id))`.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::StoreError;
use crate::ids::{SessionId, canonical_sha256};

pub(crate) const SCHEMA: &str = "geode.receipts.v1";
/// The receipts database, in the session's checkpoint directory.
pub const DB_FILE: &str = "receipts.db";
/// Characters of a result kept in a committed receipt (enough to tell the model what happened
/// when the result itself was lost with the process).
const RESULT_CAP: usize = 8 * 1024;

/// Where a receipt is in its life (see the module comment for the moves).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum ReceiptState {
    /// Written before dispatch; the handler has not returned yet.
    Accepted,
    /// The handler returned: the outcome and a capped result are kept.
    Committed,
    /// The outcome is unknown (timeout, cancellation, a crash): never re-run automatically.
    Uncertain,
    /// A person checked an uncertain effect and said `done` or `not-done`.
    Reconciled,
}

impl ReceiptState {
    /// The name stored in the database (the serde name).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    fn parse(s: &str) -> Option<ReceiptState> {
        s.parse().ok()
    }
}

/// What a person found when they checked an uncertain effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "kebab-case")]
pub enum ReconcileOutcome {
    /// The effect happened.
    Done,
    /// The effect did not happen.
    NotDone,
}

impl ReconcileOutcome {
    /// `done` or `not-done`, as stored in the receipt's outcome.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The outcome named `done` or `not-done`; `None` for anything else.
    pub fn parse(s: &str) -> Option<ReconcileOutcome> {
        s.parse().ok()
    }
}

/// One receipt as stored: the call, its state, and how it was settled.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Receipt {
    /// The session that made the call.
    pub session_id: SessionId,
    /// The call's id, unique in the session.
    pub call_id: String,
    /// The tool called.
    pub tool: String,
    /// The call's input as dispatched.
    pub input: Value,
    pub(crate) input_sha256: String,
    /// Where the receipt is in its life.
    pub state: ReceiptState,
    /// `succeeded` / `failed` when committed, the reason when uncertain, `done` / `not-done`
    /// when reconciled.
    pub outcome: Option<String>,
    /// The tool_result content when committed (capped).
    pub result: Option<String>,
    pub(crate) is_error: Option<bool>,
    pub(crate) turn: u32,
    pub(crate) round: u32,
    /// When the receipt was written, before dispatch (RFC 3339, UTC, microseconds).
    pub accepted_at: String,
    pub(crate) settled_at: Option<String>,
    pub(crate) note: Option<String>,
}

/// The call an `accept` is for.
#[derive(Debug, Clone, Copy)]
pub struct NewReceipt<'a> {
    pub(crate) call_id: &'a str,
    pub(crate) tool: &'a str,
    pub(crate) input: &'a Value,
    pub(crate) turn: u32,
    pub(crate) round: u32,
}

/// Handle on one session's receipts.
#[derive(Debug)]
pub struct ReceiptStore {
    path: PathBuf,
    session_id: SessionId,
    conn: Mutex<Connection>,
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

const COLUMNS: &str = "session_id, call_id, tool, input, input_sha256, state, outcome, result, \
                       is_error, turn, round, accepted_at, settled_at, note";

impl ReceiptStore {
    /// Open (creating when `create`) the receipts of `session` at `path`.
    pub fn open(path: &Path, session: &SessionId, create: bool) -> Result<Self, StoreError> {
        let err = |e| StoreError::sqlite(path, e);
        if !create && !path.is_file() {
            return Err(StoreError::NotFound {
                path: path.display().to_string(),
                message: "no receipts database".into(),
            });
        }
        let conn = Connection::open(path).map_err(err)?;
        if !create {
            // Fail on a file that is not a receipts database before writing anything to it.
            conn.query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
                r.get::<_, String>(0)
            })
            .map_err(err)?;
        }
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(err)?;
        // An `accepted` row must be on disk before the effect starts.
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(err)?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS receipts (
                session_id TEXT NOT NULL,
                call_id TEXT NOT NULL,
                tool TEXT NOT NULL,
                input TEXT NOT NULL,
                input_sha256 TEXT NOT NULL,
                state TEXT NOT NULL
                    CHECK (state IN ('accepted', 'committed', 'uncertain', 'reconciled')),
                outcome TEXT,
                result TEXT,
                is_error INTEGER,
                turn INTEGER NOT NULL,
                round INTEGER NOT NULL,
                accepted_at TEXT NOT NULL,
                settled_at TEXT,
                note TEXT,
                PRIMARY KEY (session_id, call_id)
            );",
        )
        .map_err(err)?;
        conn.execute(
            "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', ?1)",
            params![SCHEMA],
        )
        .map_err(err)?;
        Ok(ReceiptStore {
            path: path.to_path_buf(),
            session_id: session.clone(),
            conn: Mutex::new(conn),
        })
    }

    /// The database file it was opened on.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        // Every write is one statement, so a panic elsewhere cannot leave it half done.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn err(&self, e: rusqlite::Error) -> StoreError {
        StoreError::sqlite(&self.path, e)
    }

    /// Record that the call is about to be dispatched. Durable on return. A call id that
    /// already has a receipt is refused: it must never be dispatched twice.
    pub fn accept(&self, r: NewReceipt<'_>) -> Result<(), StoreError> {
        if let Some(existing) = self.get(r.call_id)? {
            return Err(StoreError::refused(
                &self.path,
                format!(
                    "call {} already has a receipt ({}); a call id is never dispatched twice",
                    r.call_id,
                    existing.state.as_str()
                ),
            ));
        }
        let input = r.input.to_string();
        self.conn()
            .execute(
                "INSERT INTO receipts(session_id, call_id, tool, input, input_sha256, state,
                 turn, round, accepted_at) VALUES (?1, ?2, ?3, ?4, ?5, 'accepted', ?6, ?7, ?8)",
                params![
                    self.session_id.as_str(),
                    r.call_id,
                    r.tool,
                    input,
                    canonical_sha256(r.input),
                    r.turn,
                    r.round,
                    now()
                ],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The handler returned: keep its outcome (`succeeded` / `failed`) and a capped result.
    pub fn commit(
        &self,
        call_id: &str,
        outcome: &str,
        result: &str,
        is_error: bool,
    ) -> Result<(), StoreError> {
        let mut kept = result.to_string();
        if kept.len() > RESULT_CAP {
            let mut cut = RESULT_CAP;
            while !kept.is_char_boundary(cut) {
                cut -= 1;
            }
            kept.truncate(cut);
            kept.push_str("\n[... cut in the receipt ...]");
        }
        self.settle(
            call_id,
            ReceiptState::Committed,
            outcome,
            Some((&kept, is_error)),
            None,
        )
    }

    /// The outcome is unknown (timeout, cancellation, lost process).
    pub fn mark_uncertain(&self, call_id: &str, reason: &str) -> Result<(), StoreError> {
        self.settle(call_id, ReceiptState::Uncertain, reason, None, None)
    }

    /// Only `accepted` receipts settle; a settled one is never rewritten by the runtime.
    fn settle(
        &self,
        call_id: &str,
        to: ReceiptState,
        outcome: &str,
        result: Option<(&str, bool)>,
        note: Option<&str>,
    ) -> Result<(), StoreError> {
        let changed = self
            .conn()
            .execute(
                "UPDATE receipts SET state = ?3, outcome = ?4, result = ?5, is_error = ?6,
                 settled_at = ?7, note = ?8
                 WHERE session_id = ?1 AND call_id = ?2 AND state = 'accepted'",
                params![
                    self.session_id.as_str(),
                    call_id,
                    to.as_str(),
                    outcome,
                    result.map(|r| r.0),
                    result.map(|r| r.1),
                    now(),
                    note
                ],
            )
            .map_err(|e| self.err(e))?;
        if changed == 0 {
            return Err(StoreError::refused(
                &self.path,
                format!("call {call_id} has no accepted receipt to settle"),
            ));
        }
        Ok(())
    }

    /// At resume: every receipt still `accepted` belonged to a process that died mid-effect.
    /// They become `uncertain`; returns them.
    pub fn mark_accepted_uncertain(&self, reason: &str) -> Result<Vec<Receipt>, StoreError> {
        let accepted: Vec<Receipt> = self
            .list()?
            .into_iter()
            .filter(|r| r.state == ReceiptState::Accepted)
            .collect();
        for r in &accepted {
            self.mark_uncertain(&r.call_id, reason)?;
        }
        accepted
            .iter()
            .map(|r| {
                self.get(&r.call_id)?.ok_or_else(|| {
                    StoreError::refused(&self.path, format!("receipt {} vanished", r.call_id))
                })
            })
            .collect()
    }

    /// A person checked an uncertain effect. Only `uncertain` receipts can be reconciled.
    pub fn reconcile(
        &self,
        call_id: &str,
        outcome: ReconcileOutcome,
        note: Option<&str>,
    ) -> Result<Receipt, StoreError> {
        let Some(current) = self.get(call_id)? else {
            return Err(StoreError::NotFound {
                path: self.path.display().to_string(),
                message: format!(
                    "no receipt for call {call_id} in session {}",
                    self.session_id
                ),
            });
        };
        if current.state != ReceiptState::Uncertain {
            return Err(StoreError::refused(
                &self.path,
                format!(
                    "call {call_id} is {}; only uncertain receipts are reconciled",
                    current.state.as_str()
                ),
            ));
        }
        self.conn()
            .execute(
                "UPDATE receipts SET state = 'reconciled', outcome = ?3, settled_at = ?4,
                 note = ?5 WHERE session_id = ?1 AND call_id = ?2 AND state = 'uncertain'",
                params![
                    self.session_id.as_str(),
                    call_id,
                    outcome.as_str(),
                    now(),
                    note
                ],
            )
            .map_err(|e| self.err(e))?;
        self.get(call_id)?
            .ok_or_else(|| StoreError::refused(&self.path, format!("receipt {call_id} vanished")))
    }

    /// The session's receipt for `call_id`; `None` when the call has none.
    pub fn get(&self, call_id: &str) -> Result<Option<Receipt>, StoreError> {
        let conn = self.conn();
        let raw = conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM receipts WHERE session_id = ?1 AND call_id = ?2"),
                params![self.session_id.as_str(), call_id],
                raw_row,
            )
            .optional()
            .map_err(|e| self.err(e))?;
        raw.map(|r| self.parse(r)).transpose()
    }

    /// Every receipt of the session, in the order they were accepted.
    pub fn list(&self) -> Result<Vec<Receipt>, StoreError> {
        let conn = self.conn();
        let mut st = conn
            .prepare(&format!(
                "SELECT {COLUMNS} FROM receipts WHERE session_id = ?1 ORDER BY accepted_at, rowid"
            ))
            .map_err(|e| self.err(e))?;
        let raw = st
            .query_map(params![self.session_id.as_str()], raw_row)
            .map_err(|e| self.err(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.err(e))?;
        raw.into_iter().map(|r| self.parse(r)).collect()
    }

    fn parse(&self, r: RawRow) -> Result<Receipt, StoreError> {
        let corrupt = |message: String| StoreError::Corrupt {
            path: self.path.display().to_string(),
            row: 0,
            message: format!("receipt {}: {message}", r.call_id),
        };
        let state = ReceiptState::parse(&r.state)
            .ok_or_else(|| corrupt(format!("unknown state {:?}", r.state)))?;
        let input = serde_json::from_str(&r.input)
            .map_err(|e| corrupt(format!("input is not JSON: {e}")))?;
        Ok(Receipt {
            session_id: SessionId::new(r.session_id.clone()),
            call_id: r.call_id.clone(),
            tool: r.tool,
            input,
            input_sha256: r.input_sha256,
            state,
            outcome: r.outcome,
            result: r.result,
            is_error: r.is_error,
            turn: r.turn,
            round: r.round,
            accepted_at: r.accepted_at,
            settled_at: r.settled_at,
            note: r.note,
        })
    }
}

struct RawRow {
    session_id: String,
    call_id: String,
    tool: String,
    input: String,
    input_sha256: String,
    state: String,
    outcome: Option<String>,
    result: Option<String>,
    is_error: Option<bool>,
    turn: u32,
    round: u32,
    accepted_at: String,
    settled_at: Option<String>,
    note: Option<String>,
}

fn raw_row(r: &Row<'_>) -> rusqlite::Result<RawRow> {
    Ok(RawRow {
        session_id: r.get(0)?,
        call_id: r.get(1)?,
        tool: r.get(2)?,
        input: r.get(3)?,
        input_sha256: r.get(4)?,
        state: r.get(5)?,
        outcome: r.get(6)?,
        result: r.get(7)?,
        is_error: r.get(8)?,
        turn: r.get(9)?,
        round: r.get(10)?,
        accepted_at: r.get(11)?,
        settled_at: r.get(12)?,
        note: r.get(13)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn receipts_move_through_their_states() {
        let dir = tempfile::tempdir().unwrap();
        let s = SessionId::new("s");
        let store = ReceiptStore::open(&dir.path().join(DB_FILE), &s, true).unwrap();
        let input = json!({"command": "touch x"});
        let new = |id| NewReceipt {
            call_id: id,
            tool: "bash",
            input: &input,
            turn: 1,
            round: 1,
        };
        store.accept(new("a")).unwrap();
        store.accept(new("b")).unwrap();
        store.accept(new("c")).unwrap();
        let err = store.accept(new("a")).unwrap_err().to_string();
        assert!(
            err.contains("never dispatched twice") && err.contains("receipts.db"),
            "{err}"
        );
        store.commit("a", "succeeded", "ok", false).unwrap();
        store.mark_uncertain("b", "timed out").unwrap();
        assert!(store.commit("a", "succeeded", "again", false).is_err());
        let uncertain = store.mark_accepted_uncertain("the process died").unwrap();
        assert_eq!(uncertain.len(), 1);
        assert_eq!(uncertain[0].call_id, "c");
        assert!(store.reconcile("a", ReconcileOutcome::Done, None).is_err());
        let r = store
            .reconcile("b", ReconcileOutcome::NotDone, Some("checked"))
            .unwrap();
        assert_eq!(r.state, ReceiptState::Reconciled);
        assert_eq!(r.outcome.as_deref(), Some("not-done"));
        let states: Vec<_> = store.list().unwrap().iter().map(|r| r.state).collect();
        assert_eq!(
            states,
            [
                ReceiptState::Committed,
                ReceiptState::Reconciled,
                ReceiptState::Uncertain
            ]
        );
    }
}
