//! Why a turn ended: a closed set, so drivers can map each to an exit code or a message.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
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
    pub fn as_str(self) -> &'static str {
        match self {
            TerminationReason::Natural => "natural",
            TerminationReason::ForcedText => "forced_text",
            TerminationReason::MaxRounds => "max_rounds",
            TerminationReason::TimeBudgetExpired => "time_budget_expired",
            TerminationReason::SessionTimeBudgetExpired => "session_time_budget_expired",
            TerminationReason::ContextExhausted => "context_exhausted",
            TerminationReason::TokenBudgetExceeded => "token_budget_exceeded",
            TerminationReason::CostBudgetExceeded => "cost_budget_exceeded",
            TerminationReason::BillingError => "billing_error",
            TerminationReason::ModelActionRequired => "model_action_required",
            TerminationReason::ModelRefusal => "model_refusal",
            TerminationReason::UserClarificationNeeded => "user_clarification_needed",
            TerminationReason::ConvergenceDetected => "convergence_detected",
            TerminationReason::RepeatedSuccessNoProgress => "repeated_success_no_progress",
            TerminationReason::InputBlocked => "input_blocked",
            TerminationReason::UserCancelled => "user_cancelled",
            TerminationReason::ExternalVerificationRequired => "external_verification_required",
            TerminationReason::CheckpointFailed => "checkpoint_failed",
            TerminationReason::LlmError => "llm_error",
        }
    }

    /// Only a text answer goes through Verify.
    pub fn verifiable(self) -> bool {
        matches!(
            self,
            TerminationReason::Natural | TerminationReason::ForcedText
        )
    }
}

impl std::fmt::Display for TerminationReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
