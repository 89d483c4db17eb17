//! The save points of a checkpointed session, as one closed type: `state.json` names the one
//! that wrote it, the timeline and the ledger name the one that failed. An enum rather than a
//! string so a new save point is a compile error wherever save points are classified, and a
//! `state.json` naming an unknown one is refused when it is read.

use serde::{Deserialize, Serialize};

/// Where in a turn the checkpoint was saved. The serde names are the `stage` strings of
/// `state.json` (`geode.checkpoint-state.v1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum SavePoint {
    /// The user message, before the first model call of a turn.
    Round0,
    /// The assistant reply and the batch it proposes, before any tool of it runs.
    PendingBatch,
    /// The tool results of a batch, before the loop goes on.
    CompletedBatch,
    /// The compacted view (summary + kept rows), committed before it is used.
    Compaction,
    /// The final answer and the cleared turn.
    TurnEnd,
    /// A `/model` or `/effort` switch between turns.
    ModelSwitched,
}

impl SavePoint {
    /// The `stage` string of `state.json` (the serde name).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}
