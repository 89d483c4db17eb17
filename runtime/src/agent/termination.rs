//! Why a turn ended: a closed set, so drivers can map each to an exit code or a message.

use serde::{Deserialize, Serialize};

/// Why a turn ended; the snake_case name is what the timeline and `--json` carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum TerminationReason {
    /// The model answered with text.
    Natural,
    /// The model answered with text because the wrap-up rule forced it.
    ForcedText,
    /// The turn used its `max_rounds` rounds.
    MaxRounds,
    /// The turn's time budget ran out (before a round or during a model call).
    TimeBudgetExpired,
    /// The session's time budget ran out. Nothing in the runtime ends a turn with it yet.
    SessionTimeBudgetExpired,
    /// The context overflowed and compaction could not make it fit.
    ContextExhausted,
    /// The session's tokens reached the scaffold's `token_budget`.
    TokenBudgetExceeded,
    /// The session's cost reached the scaffold's `cost_budget_usd`.
    CostBudgetExceeded,
    /// The provider refused the call for billing; retrying cannot help.
    BillingError,
    /// The model needs an action outside the run. Nothing in the runtime produces it yet.
    ModelActionRequired,
    /// The model refused to answer (its stop reason was a refusal).
    ModelRefusal,
    /// The model needs the person to clarify. Nothing in the runtime produces it yet.
    UserClarificationNeeded,
    /// The same failure repeated over the whole convergence window.
    ConvergenceDetected,
    /// The same call succeeded with the same output too often.
    RepeatedSuccessNoProgress,
    /// A UserPromptSubmit hook blocked the prompt.
    InputBlocked,
    /// The driver cancelled the turn.
    UserCancelled,
    /// A PostVerify hook escalated the answer to an outside check; the text was withheld.
    ExternalVerificationRequired,
    /// The checkpoint could not save the pending batch, so it did not run.
    CheckpointFailed,
    /// A model call failed and could not be retried (not retryable, or retries used up).
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
