//! The closed set of trial outcomes.

use serde::{Deserialize, Serialize};

/// How one trial ended: exactly one per trial, either the agent's doing (scored) or the
/// infrastructure's (INVALID: excluded from scores and counted separately).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum TrialOutcome {
    // Agent outcomes: they count in scores.
    /// The verifier ran and the reward reached the pass threshold.
    Passed,
    /// The verifier ran and the reward fell short of the pass threshold.
    Failed,
    /// The agent used up its time.
    AgentTimeout,
    /// The agent ended with an error of its own (a non-zero exit).
    AgentError,
    // Infrastructure: INVALID, excluded from scores and counted separately.
    /// The task needs something this environment cannot give (hardware, an image no source
    /// serves, a kind of task GEODE does not run).
    EnvironmentUnsupported,
    /// The environment could not be built or started.
    EnvironmentSetupFailed,
    /// The verifier could not run or broke (a missing `tests/test.sh`, a failed grader).
    VerifierCrashed,
    /// The verifier used up its time.
    VerifierTimeout,
    /// The verifier left no reward (no file, or an empty one).
    RewardMissing,
    /// The verifier left a reward that cannot be read.
    RewardMalformed,
    /// The sandbox went away or stopped answering during the trial.
    SandboxLost,
    /// The model provider (the agent's, or a judge's) could not be reached or refused.
    ProviderUnavailable,
    /// The task's content does not match its recorded hash.
    TaskHashMismatch,
    /// The trial was stopped before it ended (a cancelled run or job).
    Cancelled,
}

impl TrialOutcome {
    /// Every outcome, agent outcomes first, in declaration order.
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

    /// The snake_case name, as in JSON and the run store.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The outcome a snake_case name stands for; `None` for any other text.
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
