//! What a durable session writes and how it is configured: the content of `state.json`, the
//! checkpoint settings, and the fault-injection hook the crash tests use to stop a real
//! process at an exact point. The writer is `durable_session.rs`.
//!
//! Save points of a checkpointed session (`SavePoint`; each one: the new messages, then
//! `state.json`):
//! - `round0`: the user message, before the first model call of a turn;
//! - `pending_batch`: the assistant reply and the batch it proposes, before any tool runs; if
//!   this save fails the batch does not run and the turn ends with `checkpoint_failed`;
//! - `completed_batch`: the tool results, before the loop goes on;
//! - `compaction`: the compacted view (summary + kept rows), committed before it is used;
//! - `turn_end`: the final answer and the cleared turn;
//! - `model_switched`: a `/model` or `/effort` switch between turns.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::guards::GuardCounters;
use crate::cognition::CognitiveState;
use crate::conversation::{Message, ToolCall, Usage};
use crate::ids::SessionId;
use crate::model::effort::Effort;
use crate::store::checkpoint::SavePoint;

/// Schema of `state.json`.
pub const STATE_SCHEMA: &str = "geode.checkpoint-state.v1";

/// Where a test may stop a running `geode` to kill it (see `FaultInjection`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::Display,
    strum::EnumIter,
)]
#[strum(serialize_all = "snake_case")]
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
        self.into()
    }

    pub fn parse(s: &str) -> Option<FaultPoint> {
        s.parse().ok()
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
    /// The save point that wrote it (`round0`, `pending_batch`, ...); an unknown one makes
    /// the file unreadable (an error naming it).
    pub stage: SavePoint,
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
