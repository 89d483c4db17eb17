//! Where the session stands in its life as hooks and the timeline see it: not started yet,
//! started with its SessionStart hook still owed (it fires only after the first checkpoint save
//! succeeded), and how its last turn ended, which decides the status it closes with.

use super::termination::TerminationReason;
use crate::store::checkpoint::SessionStatus;

#[derive(Debug, Clone, Default)]
pub(super) struct Lifecycle {
    started: bool,
    announce_start: bool,
    last_termination: Option<TerminationReason>,
}

impl Lifecycle {
    /// The first turn begins: true only the first time, when the caller writes the
    /// `session.started` row; the SessionStart hook is then owed.
    pub(super) fn start(&mut self) -> bool {
        if self.started {
            return false;
        }
        self.started = true;
        self.announce_start = true;
        true
    }

    /// A session restored from its checkpoint started long ago; it announces its resume itself.
    pub(super) fn resumed(&mut self) {
        self.started = true;
    }

    /// Whether the SessionStart hook is owed now; true once.
    pub(super) fn take_announce(&mut self) -> bool {
        std::mem::take(&mut self.announce_start)
    }

    pub(super) fn is_started(&self) -> bool {
        self.started
    }

    pub(super) fn turn_ended(&mut self, termination: TerminationReason) {
        self.last_termination = Some(termination);
    }

    /// `error` when the last turn ended on a failure of the model or the checkpoint.
    pub(super) fn closing_status(&self) -> SessionStatus {
        let failed = matches!(
            self.last_termination,
            Some(
                TerminationReason::LlmError
                    | TerminationReason::BillingError
                    | TerminationReason::CheckpointFailed
            )
        );
        if failed {
            SessionStatus::Error
        } else {
            SessionStatus::Completed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_is_announced_once_and_failures_close_in_error() {
        let mut l = Lifecycle::default();
        assert!(!l.is_started());
        assert!(l.start());
        assert!(!l.start());
        assert!(l.take_announce());
        assert!(!l.take_announce());
        assert_eq!(l.closing_status(), SessionStatus::Completed);
        l.turn_ended(TerminationReason::CheckpointFailed);
        assert_eq!(l.closing_status(), SessionStatus::Error);
    }
}
