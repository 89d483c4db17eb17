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
    /// The point's snake_case name, as `GEODE_FAULT_PAUSE` spells it.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The point named `s` (snake_case); `None` for an unknown name.
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
    /// Where to pause; `None` turns the hook off.
    pub pause_at: Option<FaultPoint>,
    /// A file to write the point's name to just before pausing; `None`: no file.
    pub marker: Option<PathBuf>,
}

/// How long a fault pause lasts: far longer than any test waits before killing the process,
/// short enough that a forgotten variable does not hang a machine forever.
const FAULT_PAUSE: Duration = Duration::from_secs(600);

impl FaultInjection {
    pub(crate) const PAUSE_VAR: &'static str = "GEODE_FAULT_PAUSE";
    pub(crate) const MARKER_VAR: &'static str = "GEODE_FAULT_MARKER";

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

    pub(crate) async fn pause_if(&self, point: FaultPoint) {
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
    /// The reasoning effort the model was built with, restored with it on a resume.
    pub effort: Option<Effort>,
    /// The crash-test pause; off by default.
    pub faults: FaultInjection,
}

/// The turn in progress: what a resume needs to finish it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TurnState {
    /// Rounds started so far in this turn.
    pub rounds: u32,
    /// Tool calls made so far in this turn.
    pub tool_calls: u32,
    /// Repairs already spent on this turn's answer (the pending verification).
    pub repairs: u32,
    /// The misses of the last rejected answer, while a repair is under way.
    pub pending_misses: Vec<String>,
    /// Tokens and cost of this turn's model calls so far.
    pub usage: Usage,
    /// Guard hints for the next round's system prompt, replaced after every batch.
    pub runtime_hints: Vec<String>,
    /// The last call's tool and the first line of its error, when that call failed.
    pub last_tool_error: Option<(String, String)>,
}

/// A verification whose repair is under way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingVerification {
    /// Repairs already spent on the answer.
    pub repairs_used: u32,
    /// What the verifier found missing in the rejected answer.
    pub misses: Vec<String>,
}

/// The batch a model reply proposed, saved before any of it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingBatch {
    /// The session turn the batch belongs to.
    pub turn: u32,
    /// The round of that turn that proposed it (1-based).
    pub round: u32,
    /// The id (`Model::id`) of the model that proposed it.
    pub model_id: String,
    /// The correlation id of the model call that proposed it.
    pub correlation_id: String,
    /// The proposed tool calls, in the model's order.
    pub calls: Vec<ToolCall>,
}

/// Which rows of `checkpoint.db` make up the conversation: `prefix` (the compaction summary)
/// followed by rows `live_from_seq..next_seq`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConversationView {
    /// Messages before the live rows: the compaction summary, empty before any compaction.
    pub prefix: Vec<Message>,
    /// First row of `checkpoint.db` still in the conversation.
    pub live_from_seq: u64,
    /// The row the next saved message gets (one past the last live row).
    pub next_seq: u64,
    /// Compactions so far in the session.
    pub compactions: u32,
    /// SHA-256 of the last compaction summary; `None` before the first compaction.
    pub last_summary_sha256: Option<String>,
}

/// The content of `state.json` (`geode.checkpoint-state.v1`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointState {
    /// Always `STATE_SCHEMA`.
    pub schema: String,
    /// The session this state belongs to.
    pub session_id: SessionId,
    /// When it was written: RFC 3339, UTC, microseconds.
    pub saved_at: String,
    /// The save point that wrote it (`round0`, `pending_batch`, ...); an unknown one makes
    /// the file unreadable (an error naming it).
    pub stage: SavePoint,
    /// Turns started in the session so far.
    pub turn_number: u32,
    /// Model calls so far; correlation ids continue from it after a resume.
    #[serde(default)]
    pub model_calls: u64,
    /// The round index of the turn in progress (0 between turns).
    pub round: u32,
    /// The id (`Model::id`) of the model the session was calling.
    pub model: String,
    /// The route that model was built from; a resume rebuilds it (see `CheckpointSettings`).
    pub model_route: String,
    /// `anthropic`, `openai`, ... or `embedded`.
    pub provider: String,
    /// The reasoning effort the model was built with.
    pub effort: Option<Effort>,
    /// The workspace root, as a path string.
    pub cwd: String,
    /// Hash of the system prompt of the last model call; `None` before the first call.
    pub system_prompt_hash: Option<String>,
    /// Plan (with revisions), hypotheses and confidence.
    pub cognition: CognitiveState,
    /// The guards' counters, so repeats and failure streaks survive a resume.
    pub guards: GuardCounters,
    /// The turn in progress; `None` between turns.
    pub turn: Option<TurnState>,
    /// The verification whose repair was under way, if any.
    pub pending_verification: Option<PendingVerification>,
    /// The batch proposed and not yet completed; only a `pending_batch` save writes it.
    pub pending_batch: Option<PendingBatch>,
    /// Which `checkpoint.db` rows make up the conversation.
    pub conversation: ConversationView,
    /// Tokens and cost of every model call of the session so far.
    pub session_usage: Usage,
}
