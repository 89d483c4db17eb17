//! Why a turn ended: a closed set, so drivers can map each to an exit code or a message.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum TerminationReason {
    /// The model answered with text.
    Natural,
    /// The model answered with text because the wrap-up rule forced it.
    ForcedText,
    MaxRounds,
    TimeBudgetExpired,
    SessionTimeBudgetExpired,
    ContextExhausted,
    TokenBudgetExceeded,
    CostBudgetExceeded,
    BillingError,
    ModelActionRequired,
    ModelRefusal,
    UserClarificationNeeded,
    ConvergenceDetected,
    RepeatedSuccessNoProgress,
    InputBlocked,
    UserCancelled,
    ExternalVerificationRequired,
    /// The checkpoint could not save the pending batch, so it did not run.
    CheckpointFailed,
    LlmError,
}

impl TerminationReason {
    /// The name on the wire (the timeline, `geode exec --json`, exit messages).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Only a text answer goes through Verify.
    pub fn verifiable(self) -> bool {
        matches!(
            self,
            TerminationReason::Natural | TerminationReason::ForcedText
        )
    }
}
