//! How a turn ends, as values: what finishing an answer decided (`Finish`) and the `Ending`
//! every stage hands to `end_turn`. Below the loop and the stages that produce them, so the
//! loop names them without importing a stage.

use super::termination::TerminationReason;
use super::verify::Verdict;

/// What finishing decided.
pub(super) enum Finish {
    /// The turn ends this way.
    End(Ending),
    /// The answer goes back to the model with this instruction.
    Repair(String),
}

/// How a turn ends: its termination, its final text and the verdict on it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Ending {
    pub(super) termination: TerminationReason,
    pub(super) text: String,
    pub(super) verdict: Verdict,
    /// What failed, in words, when the turn ended on a failure (a model call that could not be
    /// made): drivers show it to the person instead of leaving it to a log line.
    pub(super) error: Option<String>,
}

impl Ending {
    pub(super) fn new(termination: TerminationReason, text: String, verdict: Verdict) -> Self {
        Ending {
            termination,
            text,
            verdict,
            error: None,
        }
    }

    /// A turn stopped before an answer: no text, nothing verified.
    pub(super) fn stopped(termination: TerminationReason) -> Self {
        Ending::new(termination, String::new(), Verdict::Skipped)
    }

    /// A turn stopped by a failure, with what failed.
    pub(super) fn failed(termination: TerminationReason, error: String) -> Self {
        Ending {
            error: Some(error),
            ..Ending::stopped(termination)
        }
    }
}
