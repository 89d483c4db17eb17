//! The session's running counts: turns started, model calls made, tokens used. They number the
//! correlation ids and feed the budgets, and a resume must continue them where the checkpoint
//! left them, so they live together and change only through these methods.

use crate::conversation::Usage;

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct SessionCounters {
    usage: Usage,
    turn_number: u32,
    model_calls: u64,
}

impl SessionCounters {
    /// The counts a checkpoint saved.
    pub(super) fn restored(usage: Usage, turn_number: u32, model_calls: u64) -> Self {
        SessionCounters {
            usage,
            turn_number,
            model_calls,
        }
    }

    /// A new turn starts; returns its number (the first is 1).
    pub(super) fn start_turn(&mut self) -> u32 {
        self.turn_number += 1;
        self.turn_number
    }

    /// A model call is about to be made; returns its number in the session (the first is 1).
    pub(super) fn count_call(&mut self) -> u64 {
        self.model_calls += 1;
        self.model_calls
    }

    pub(super) fn add_usage(&mut self, usage: &Usage) {
        self.usage.add(usage);
    }

    pub(super) fn usage(&self) -> Usage {
        self.usage
    }

    /// Turns started so far; the number of the current turn while one runs.
    pub(super) fn turn(&self) -> u32 {
        self.turn_number
    }

    pub(super) fn model_calls(&self) -> u64 {
        self.model_calls
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restored_session_counts_on_from_its_checkpoint() {
        let mut c = SessionCounters::restored(Usage::default(), 3, 10);
        assert_eq!(c.start_turn(), 4);
        assert_eq!(c.count_call(), 11);
        c.add_usage(&Usage {
            output_tokens: 5,
            ..Usage::default()
        });
        assert_eq!(
            (c.turn(), c.model_calls(), c.usage().output_tokens),
            (4, 11, 5)
        );
    }
}
