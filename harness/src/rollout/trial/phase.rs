//! A trial's phases: the one name each has on disk (`result.json`'s `phase_seconds` and Harbor's
//! timing keys, the store's `phases_json`) and the word a progress display shows for it.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A timed phase of a trial.
///
/// The variants are declared in the alphabetical order of their names: the phase maps are
/// `BTreeMap`s keyed by this type, and their JSON (`phases_json`, `phase_seconds`) must list
/// the keys in the order the former string keys had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum TrialPhase {
    /// The agent working on the task.
    AgentExecution,
    /// Preparing the sandbox: its image, the sandbox and any sidecars, until healthy.
    EnvironmentSetup,
    /// Collecting the sandbox's logs and tearing it down.
    Teardown,
    /// Grading what the agent left with the task's verifier.
    Verifier,
}

impl TrialPhase {
    /// The name on disk (and Harbor's key for the phase's timing).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The shorter word a progress display shows while the phase runs.
    pub fn label(self) -> &'static str {
        match self {
            TrialPhase::AgentExecution => "agent",
            TrialPhase::EnvironmentSetup => "environment",
            TrialPhase::Teardown => "teardown",
            TrialPhase::Verifier => "verifier",
        }
    }
}

/// What a `PhaseObserver` is told as a trial moves on: a timed phase, or the start of a
/// multi-step task's step (whose own agent and verifier phases follow).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhaseEvent<'a> {
    /// A timed phase starts.
    Phase(TrialPhase),
    /// A multi-step task's step starts; the name is the step's.
    Step(&'a str),
}

impl fmt::Display for PhaseEvent<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PhaseEvent::Phase(phase) => f.write_str(phase.label()),
            PhaseEvent::Step(name) => write!(f, "step {name}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    const ALL: [TrialPhase; 4] = [
        TrialPhase::AgentExecution,
        TrialPhase::EnvironmentSetup,
        TrialPhase::Teardown,
        TrialPhase::Verifier,
    ];

    #[test]
    fn serde_names_are_the_names_on_disk() {
        for phase in ALL {
            let json = serde_json::to_string(&phase).unwrap();
            assert_eq!(json, format!("\"{}\"", phase.as_str()));
            let back: TrialPhase = serde_json::from_str(&json).unwrap();
            assert_eq!(back, phase);
        }
    }

    #[test]
    fn a_phase_map_keeps_the_string_keyed_order() {
        let typed: BTreeMap<TrialPhase, f64> = ALL.iter().rev().map(|p| (*p, 1.0)).collect();
        let strings: BTreeMap<&str, f64> = ALL.iter().map(|p| (p.as_str(), 1.0)).collect();
        assert_eq!(
            serde_json::to_string(&typed).unwrap(),
            serde_json::to_string(&strings).unwrap()
        );
    }

    #[test]
    fn progress_words_are_unchanged() {
        let words: Vec<String> = ALL
            .iter()
            .map(|p| PhaseEvent::Phase(*p).to_string())
            .collect();
        assert_eq!(words, ["agent", "environment", "teardown", "verifier"]);
        assert_eq!(PhaseEvent::Step("build").to_string(), "step build");
    }
}
