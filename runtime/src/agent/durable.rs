//! What makes a session durable: its checkpoint (`state.json` content and the save points of
//! the loop), its effect receipts and evidence ledger, and the fault-injection hook the crash
//! tests use to stop a real process at an exact point.
//!
//! Save points of a checkpointed session (each one: the new messages, then `state.json`):
//! - `round0`: the user message, before the first model call of a turn;
//! - `pending_batch`: the assistant reply and the batch it proposes, before any tool runs; if
//!   this save fails the batch does not run and the turn ends with `checkpoint_failed`;
//! - `completed_batch`: the tool results, before the loop goes on;
//! - `compaction`: the compacted view (summary + kept rows), committed before it is used;
//! - `turn_end`: the final answer and the cleared turn.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::agentic_loop::AgenticLoop;
use super::guards::GuardCounters;
use crate::cognition::CognitiveState;
use crate::conversation::{Message, ToolCall, Usage};
use crate::ids::SessionId;
use crate::model::effort::Effort;
use crate::store::StoreError;
use crate::store::checkpoint::{CheckpointStore, SessionStatus};
use crate::store::ledger::EvidenceLedger;
use crate::store::receipts::{self, ReceiptStore};
use crate::store::timeline::TimelineEvent;

/// Schema of `state.json`.
pub const STATE_SCHEMA: &str = "geode.checkpoint-state.v1";

/// Where a test may stop a running `geode` to kill it (see `FaultInjection`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPoint {
    /// The pending batch is saved; no tool of it has been dispatched.
    BeforeDispatch,
    /// Every tool of the batch has returned; the completed batch is not saved yet.
    AfterDispatch,
    /// The compaction summary artifact is written; the compacted view is not committed yet.
    DuringCompaction,
}

impl FaultPoint {
    pub fn as_str(self) -> &'static str {
        match self {
            FaultPoint::BeforeDispatch => "before_dispatch",
            FaultPoint::AfterDispatch => "after_dispatch",
            FaultPoint::DuringCompaction => "during_compaction",
        }
    }

    pub fn parse(s: &str) -> Option<FaultPoint> {
        [
            FaultPoint::BeforeDispatch,
            FaultPoint::AfterDispatch,
            FaultPoint::DuringCompaction,
        ]
        .into_iter()
        .find(|p| p.as_str() == s)
    }
}

/// A test hook, off unless a driver turns it on: at `pause_at`, write the marker file (its
/// content is the point's name) and sleep, so a test can `kill -9` the process at exactly that
/// point. `geode` reads it from `GEODE_FAULT_PAUSE=before_dispatch|after_dispatch|
/// during_compaction` and `GEODE_FAULT_MARKER=FILE`; when unset it does nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultInjection {
    pub pause_at: Option<FaultPoint>,
    pub marker: Option<PathBuf>,
}

/// How long a fault pause lasts: far longer than any test waits before killing the process,
/// short enough that a forgotten variable does not hang a machine forever.
const FAULT_PAUSE: Duration = Duration::from_secs(600);

impl FaultInjection {
    pub const PAUSE_VAR: &'static str = "GEODE_FAULT_PAUSE";
    pub const MARKER_VAR: &'static str = "GEODE_FAULT_MARKER";

    /// Read the two variables. An unknown point is an error, so a typo never silently turns
    /// a crash test into one that kills the process somewhere else.
    pub fn from_env() -> Result<Self, String> {
        let Some(point) = std::env::var_os(Self::PAUSE_VAR) else {
            return Ok(FaultInjection::default());
        };
        let point = point.to_string_lossy();
        let pause_at = FaultPoint::parse(&point).ok_or_else(|| {
            format!(
                "{}={point:?} is not a fault point (before_dispatch, after_dispatch, \
                 during_compaction)",
                Self::PAUSE_VAR
            )
        })?;
        Ok(FaultInjection {
            pause_at: Some(pause_at),
            marker: std::env::var_os(Self::MARKER_VAR).map(PathBuf::from),
        })
    }

    pub async fn pause_if(&self, point: FaultPoint) {
        if self.pause_at != Some(point) {
            return;
        }
        if let Some(marker) = &self.marker
            && let Err(e) = std::fs::write(marker, point.as_str())
        {
            tracing::warn!("fault marker {}: {e}", marker.display());
        }
        tracing::warn!("fault injection: pausing at {}", point.as_str());
        tokio::time::sleep(FAULT_PAUSE).await;
    }
}

/// How a session is made durable; `SessionConfig::checkpoint`.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointSettings {
    /// The directory holding one sub-directory per session (`$GEODE_HOME/sessions`).
    pub root: PathBuf,
    /// The route the model was built from (`scripted:FILE`, `anthropic:MODEL`), kept so a
    /// resume can build the same model.
    pub model_route: String,
    /// `anthropic`, `openai`, ... or `embedded`.
    pub provider: String,
    pub effort: Option<Effort>,
    pub faults: FaultInjection,
}

/// The turn in progress: what a resume needs to finish it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TurnState {
    pub rounds: u32,
    pub tool_calls: u32,
    /// Repairs already spent on this turn's answer (the pending verification).
    pub repairs: u32,
    /// The misses of the last rejected answer, while a repair is under way.
    pub pending_misses: Vec<String>,
    pub usage: Usage,
    pub runtime_hints: Vec<String>,
    pub last_tool_error: Option<(String, String)>,
}

/// A verification whose repair is under way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingVerification {
    pub repairs_used: u32,
    pub misses: Vec<String>,
}

/// The batch a model reply proposed, saved before any of it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingBatch {
    pub turn: u32,
    pub round: u32,
    pub model_id: String,
    pub correlation_id: String,
    pub calls: Vec<ToolCall>,
}

/// Which rows of `checkpoint.db` make up the conversation: `prefix` (the compaction summary)
/// followed by rows `live_from_seq..next_seq`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConversationView {
    pub prefix: Vec<Message>,
    pub live_from_seq: u64,
    pub next_seq: u64,
    pub compactions: u32,
    pub last_summary_sha256: Option<String>,
}

/// The content of `state.json` (`geode.checkpoint-state.v1`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointState {
    pub schema: String,
    pub session_id: SessionId,
    pub saved_at: String,
    /// The save point that wrote it (`round0`, `pending_batch`, ...).
    pub stage: String,
    pub turn_number: u32,
    /// Model calls so far; correlation ids continue from it after a resume.
    #[serde(default)]
    pub model_calls: u64,
    /// The round index of the turn in progress (0 between turns).
    pub round: u32,
    pub model: String,
    pub model_route: String,
    pub provider: String,
    pub effort: Option<Effort>,
    pub cwd: String,
    pub system_prompt_hash: Option<String>,
    /// Plan (with revisions), hypotheses and confidence.
    pub cognition: CognitiveState,
    pub guards: GuardCounters,
    pub turn: Option<TurnState>,
    pub pending_verification: Option<PendingVerification>,
    pub pending_batch: Option<PendingBatch>,
    pub conversation: ConversationView,
    pub session_usage: Usage,
}

/// A durable session's stores, owned by its loop.
#[derive(Debug)]
pub(crate) struct Durable {
    pub(crate) store: CheckpointStore,
    pub(crate) receipts: Arc<ReceiptStore>,
    pub(crate) ledger: Arc<EvidenceLedger>,
    pub(crate) settings: CheckpointSettings,
    pub(crate) cwd: String,
    pub(crate) view: ConversationView,
    /// How many of the loop's messages (prefix included) the checkpoint holds.
    pub(crate) saved: usize,
}

impl Durable {
    /// The stores of a new session (its directory must not exist yet).
    pub(crate) fn create(
        settings: &CheckpointSettings,
        id: &SessionId,
        model_id: &str,
        cwd: &std::path::Path,
    ) -> Result<Self, StoreError> {
        let store = CheckpointStore::create(&settings.root, id, model_id, cwd)?;
        Self::with_store(store, settings, cwd, true)
    }

    /// The stores of an existing session; its receipts database must exist (a missing one
    /// would forget effects that started).
    pub(crate) fn resume(
        store: CheckpointStore,
        settings: &CheckpointSettings,
        cwd: &std::path::Path,
    ) -> Result<Self, StoreError> {
        Self::with_store(store, settings, cwd, false)
    }

    fn with_store(
        store: CheckpointStore,
        settings: &CheckpointSettings,
        cwd: &std::path::Path,
        create: bool,
    ) -> Result<Self, StoreError> {
        let id = store.session_id().clone();
        let receipts = ReceiptStore::open(&store.dir().join(receipts::DB_FILE), &id, create)?;
        let ledger = EvidenceLedger::open(store.dir(), &id)?;
        Ok(Durable {
            receipts: Arc::new(receipts),
            ledger: Arc::new(ledger),
            settings: settings.clone(),
            cwd: cwd.display().to_string(),
            view: ConversationView::default(),
            saved: 0,
            store,
        })
    }

    /// Append the unsaved messages, then commit `state` (with the new view) atomically.
    fn save(&mut self, messages: &[Message], mut state: CheckpointState) -> Result<(), StoreError> {
        let Some(unsaved) = messages.get(self.saved..) else {
            return Err(StoreError::refused(
                self.store.dir(),
                format!(
                    "the conversation has {} messages but {} were saved: it was changed without \
                     the checkpoint",
                    messages.len(),
                    self.saved
                ),
            ));
        };
        let first = self.view.next_seq;
        if !unsaved.is_empty() {
            self.store.append_messages(first, unsaved)?;
        }
        let mut view = self.view.clone();
        view.next_seq = first + unsaved.len() as u64;
        state.conversation = view.clone();
        self.store.write_state(&state)?;
        self.view = view;
        self.saved = messages.len();
        Ok(())
    }

    /// Commit a compacted view: the first `cut` messages (all saved) are replaced by `summary`.
    /// Nothing changes when the commit fails.
    pub(crate) fn commit_compaction(
        &mut self,
        cut: usize,
        summary: Message,
        sha256: String,
        new_len: usize,
        mut state: CheckpointState,
    ) -> Result<(), StoreError> {
        let dropped_rows = cut.saturating_sub(self.view.prefix.len()) as u64;
        let view = ConversationView {
            prefix: vec![summary],
            live_from_seq: self.view.live_from_seq + dropped_rows,
            next_seq: self.view.next_seq,
            compactions: self.view.compactions + 1,
            last_summary_sha256: Some(sha256),
        };
        state.conversation = view.clone();
        self.store.write_state(&state)?;
        self.view = view;
        self.saved = new_len;
        Ok(())
    }
}

impl AgenticLoop {
    pub(crate) fn set_durable(&mut self, durable: Durable) {
        self.durable = Some(durable);
    }

    /// The state.json content for the loop as it stands.
    pub(super) fn checkpoint_state(
        &self,
        turn: Option<&TurnState>,
        pending: Option<PendingBatch>,
        stage: &str,
    ) -> Option<CheckpointState> {
        let d = self.durable.as_ref()?;
        Some(CheckpointState {
            schema: STATE_SCHEMA.to_string(),
            session_id: self.p.session_id.clone(),
            saved_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            stage: stage.to_string(),
            turn_number: self.turn_number,
            model_calls: self.model_calls,
            round: turn.map_or(0, |t| t.rounds),
            model: self.p.model.id().to_string(),
            model_route: d.settings.model_route.clone(),
            provider: d.settings.provider.clone(),
            effort: d.settings.effort,
            cwd: d.cwd.clone(),
            system_prompt_hash: self.last_system_hash.clone(),
            cognition: self.cognition(),
            guards: self.guards.counters.clone(),
            turn: turn.cloned(),
            pending_verification: turn.filter(|t| !t.pending_misses.is_empty()).map(|t| {
                PendingVerification {
                    repairs_used: t.repairs,
                    misses: t.pending_misses.clone(),
                }
            }),
            pending_batch: pending,
            conversation: d.view.clone(),
            session_usage: self.session_usage,
        })
    }

    /// Save the checkpoint (a no-op without one). A failure is recorded in the timeline and
    /// the ledger and returned; the caller decides what may no longer run.
    pub(super) fn save_checkpoint(
        &mut self,
        turn: Option<&TurnState>,
        pending: Option<PendingBatch>,
        stage: &str,
    ) -> Result<(), String> {
        let Some(state) = self.checkpoint_state(turn, pending, stage) else {
            return Ok(());
        };
        let Some(d) = self.durable.as_mut() else {
            return Ok(());
        };
        let Err(e) = d.save(&self.messages, state) else {
            return Ok(());
        };
        let error = e.to_string();
        self.checkpoint_failed(stage, &error);
        Err(error)
    }

    pub(super) fn checkpoint_failed(&self, stage: &str, error: &str) {
        tracing::warn!("checkpoint ({stage}) failed: {error}");
        self.record(TimelineEvent::CheckpointFailed {
            stage: stage.to_string(),
            error: error.to_string(),
        });
        self.evidence("checkpoint_failed", json!({"stage": stage, "error": error}));
    }

    /// Move the session's status; refused moves (a closed session) are logged, not fatal.
    pub(super) fn set_status(&self, to: SessionStatus) {
        if let Some(d) = &self.durable
            && let Err(e) = d.store.set_status(to)
        {
            tracing::warn!("session status: {e}");
        }
    }

    /// A best-effort, masked diagnostic row (durable sessions only).
    pub(super) fn evidence(&self, kind: &str, detail: Value) {
        if let Some(d) = &self.durable {
            d.ledger.record(kind, detail);
        }
    }

    pub(super) async fn fault(&self, point: FaultPoint) {
        if let Some(d) = &self.durable {
            d.settings.faults.pause_if(point).await;
        }
    }
}
