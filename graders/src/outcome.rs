//! The closed set of trial outcomes.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum TrialOutcome {
    // Agent outcomes: they count in scores.
    Passed,
    Failed,
    AgentTimeout,
    AgentError,
    // Infrastructure: INVALID, excluded from scores and counted separately.
    EnvironmentUnsupported,
    EnvironmentSetupFailed,
    VerifierCrashed,
    VerifierTimeout,
    RewardMissing,
    RewardMalformed,
    SandboxLost,
    ProviderUnavailable,
    TaskHashMismatch,
    Cancelled,
}

impl TrialOutcome {
    pub const ALL: [TrialOutcome; 14] = [
        TrialOutcome::Passed,
        TrialOutcome::Failed,
        TrialOutcome::AgentTimeout,
        TrialOutcome::AgentError,
        TrialOutcome::EnvironmentUnsupported,
        TrialOutcome::EnvironmentSetupFailed,
        TrialOutcome::VerifierCrashed,
        TrialOutcome::VerifierTimeout,
        TrialOutcome::RewardMissing,
        TrialOutcome::RewardMalformed,
        TrialOutcome::SandboxLost,
        TrialOutcome::ProviderUnavailable,
        TrialOutcome::TaskHashMismatch,
        TrialOutcome::Cancelled,
    ];

    /// True for outcomes that say nothing about the agent. Every variant is named on one side
    /// or the other, so a new outcome does not compile until it is classified.
    pub fn is_infrastructure(self) -> bool {
        match self {
            TrialOutcome::Passed
            | TrialOutcome::Failed
            | TrialOutcome::AgentTimeout
            | TrialOutcome::AgentError => false,
            TrialOutcome::EnvironmentUnsupported
            | TrialOutcome::EnvironmentSetupFailed
            | TrialOutcome::VerifierCrashed
            | TrialOutcome::VerifierTimeout
            | TrialOutcome::RewardMissing
            | TrialOutcome::RewardMalformed
            | TrialOutcome::SandboxLost
            | TrialOutcome::ProviderUnavailable
            | TrialOutcome::TaskHashMismatch
            | TrialOutcome::Cancelled => true,
        }
    }

    /// Whether a harness should try the trial again (bounded): infrastructure that may pass.
    /// Agent outcomes are never retried, and neither are causes that a retry cannot change.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            TrialOutcome::SandboxLost
                | TrialOutcome::ProviderUnavailable
                | TrialOutcome::VerifierCrashed
        )
    }

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(s: &str) -> Option<TrialOutcome> {
        s.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_classes_partition() {
        for o in TrialOutcome::ALL {
            assert_eq!(TrialOutcome::parse(o.as_str()), Some(o));
            let json = serde_json::to_string(&o).unwrap();
            assert_eq!(json, format!("\"{}\"", o.as_str()));
        }
        let agent = TrialOutcome::ALL
            .iter()
            .filter(|o| !o.is_infrastructure())
            .count();
        assert_eq!(agent, 4);
        assert!(!TrialOutcome::Failed.retryable());
    }
}
