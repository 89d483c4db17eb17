//! Going back to before a turn (`/rewind N` in a session, `geode rewind` on a stopped one): the
//! workspace files turns N and later changed are put back as they were, then the conversation
//! and loop state become the point recorded before turn N, and the records of those turns are
//! forgotten (their numbers are used again by the turns that follow).
//!
//! Files first: when the workspace refuses (a file changed since, by someone else) nothing
//! else moves. A rewind that fails after the files were put back can be run again (a file
//! already in its old state is not a conflict). The timeline, receipts and ledger keep what
//! happened; only the checkpoint forgets it.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::agentic_loop::AgenticLoop;
use super::durable::{CheckpointState, STATE_SCHEMA};
use super::restore::load_from;
use crate::ids::SessionId;
use crate::store::StoreError;
use crate::store::checkpoint::CheckpointStore;
use crate::store::rewind::{Restored, RewindStore, TurnPoint};
use crate::store::timeline::TimelineEvent;

/// What a rewind did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RewindReport {
    /// The session rewound.
    pub session_id: SessionId,
    /// The turn the session went back to the start of.
    pub turn: u32,
    /// Messages in the conversation after the rewind.
    pub messages: usize,
    /// The workspace files put back, those that could not be, and the recording gaps.
    pub files: Restored,
}

/// Why a rewind did not happen.
#[derive(Debug, thiserror::Error)]
pub enum RewindError {
    /// The session is not durable.
    #[error("session {0} has no checkpoint, so nothing to go back to")]
    NotDurable(SessionId),
    /// No rewind point at the start of the asked turn.
    #[error("session {session} has no rewind point before turn {turn} ({available})")]
    NoPoint {
        /// The session asked about.
        session: SessionId,
        /// The turn asked for.
        turn: u32,
        /// The turns that have a point, as a phrase for the message.
        available: String,
    },
    /// The saved state of the point does not parse.
    #[error("{path}: the rewind point does not parse: {source}")]
    DamagedPoint {
        /// The rewind database the point was read from.
        path: PathBuf,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// The checkpoint or rewind store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The turns `rewind` can go back to, with what each changed.
pub fn rewind_points(root: &Path, id: &SessionId) -> Result<Vec<TurnPoint>, RewindError> {
    let store = CheckpointStore::inspect(root, id)?;
    Ok(RewindStore::open(store.dir())?.points()?)
}

/// Rewind a session no process holds (`geode rewind`): files under the session's workspace,
/// then its checkpoint. `force` puts back files changed since the session changed them.
pub fn rewind_session(
    root: &Path,
    id: &SessionId,
    turn: u32,
    force: bool,
) -> Result<RewindReport, RewindError> {
    let store = CheckpointStore::open(root, id)?;
    let current: CheckpointState = store.read_state(STATE_SCHEMA)?;
    let rewind = RewindStore::open(store.dir())?;
    let (_, files) = rewind_stores(&store, &rewind, Path::new(&current.cwd), turn, force)?;
    let messages = load_from(&store)?.messages.len();
    Ok(RewindReport {
        session_id: id.clone(),
        turn,
        messages,
        files,
    })
}

/// The part a live session and `geode rewind` share: files, then state.json, then forget.
fn rewind_stores(
    store: &CheckpointStore,
    rewind: &RewindStore,
    workspace: &Path,
    turn: u32,
    force: bool,
) -> Result<(CheckpointState, Restored), RewindError> {
    let Some(json) = rewind.point_state(turn)? else {
        let turns: Vec<String> = rewind
            .points()?
            .iter()
            .map(|p| p.turn.to_string())
            .collect();
        return Err(RewindError::NoPoint {
            session: store.session_id().clone(),
            turn,
            available: if turns.is_empty() {
                "it has none".into()
            } else {
                format!("turns with one: {}", turns.join(", "))
            },
        });
    };
    let mut state: CheckpointState =
        serde_json::from_str(&json).map_err(|source| RewindError::DamagedPoint {
            path: store.dir().join(crate::store::rewind::DB_FILE),
            source,
        })?;
    let files = rewind.restore_files(workspace, turn, force)?;
    state.saved_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    store.write_state(&state)?;
    rewind.forget_from(turn)?;
    Ok((state, files))
}

impl AgenticLoop {
    /// The turns this session can go back to.
    pub fn rewind_points(&self) -> Result<Vec<TurnPoint>, RewindError> {
        let (_, files) = self
            .recorder
            .durable
            .rewind_parts()
            .ok_or_else(|| RewindError::NotDurable(self.p.session_id.clone()))?;
        Ok(files.store().points()?)
    }

    /// Go back to before `turn`, between turns: files, conversation and loop state.
    pub fn rewind_to(&mut self, turn: u32, force: bool) -> Result<RewindReport, RewindError> {
        let (store, files) = self
            .recorder
            .durable
            .rewind_parts()
            .ok_or_else(|| RewindError::NotDurable(self.p.session_id.clone()))?;
        let (state, restored) = rewind_stores(store, files.store(), files.root(), turn, force)?;
        let loaded = load_from(store)?;
        let saved = loaded.messages.len();
        self.take_state(&state, loaded.messages);
        self.recorder.durable.rewound(state.conversation, saved);
        self.recorder.record(TimelineEvent::SessionRewound {
            to_turn: turn,
            messages: saved,
            files_restored: restored.restored.clone(),
            files_not_restored: restored.not_restored.clone(),
        });
        Ok(RewindReport {
            session_id: self.p.session_id.clone(),
            turn,
            messages: saved,
            files: restored,
        })
    }
}

/// The turns a session can go back to, as `/rewind` and `geode rewind` list them.
pub fn describe_points(points: &[TurnPoint]) -> String {
    if points.is_empty() {
        return "no turn to go back to yet (a point is recorded before each turn)".into();
    }
    let mut lines = vec!["turns to go back to the start of (`/rewind N`):".to_string()];
    for p in points {
        let prompt: String = p
            .prompt
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(60)
            .collect();
        let files = match p.files.len() {
            0 => "no files changed".to_string(),
            n => format!(
                "{n} file{} changed: {}",
                if n == 1 { "" } else { "s" },
                p.files.join(", ")
            ),
        };
        lines.push(format!("  {:>3}  {prompt:?}  ({files})", p.turn));
    }
    lines.join("\n")
}

impl std::fmt::Display for RewindReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "session {} is back before turn {} ({} messages); ",
            self.session_id, self.turn, self.messages
        )?;
        match self.files.restored.len() {
            0 => write!(f, "no file needed putting back")?,
            n => write!(f, "{n} put back: {}", self.files.restored.join(", "))?,
        }
        for why in &self.files.not_restored {
            write!(f, "\nnot put back: {why}")?;
        }
        for gap in &self.files.gaps {
            write!(f, "\nnot fully recorded, so possibly not put back: {gap}")?;
        }
        Ok(())
    }
}
