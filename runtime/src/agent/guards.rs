//! The loop's guards: round, time, token and cost budgets, convergence on one error, repeated
//! identical successes, repeated identical calls, and the wrap-up rule.

use std::collections::{HashMap, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::termination::TerminationReason;
use crate::conversation::Usage;
use crate::scaffold::GuardLimits;
use crate::store::timeline::CallOutcome;
use crate::tools::executor::CallRecord;

/// With this little time left in the turn, the next call is forced text-only.
const WRAP_UP_TIME: Duration = Duration::from_secs(30);

/// What the guards say after observing a round.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum GuardSignal {
    Proceed,
    /// Tell the model something in the next prompt.
    Hint(String),
    Stop(TerminationReason),
}

/// Counters that survive a resume (persisted with the checkpoint).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GuardCounters {
    /// `tool: first line` of the latest failed calls, at most `convergence_window` of them; a
    /// success clears it. All the same over the full window stops the turn.
    pub recent_error_keys: VecDeque<String>,
    /// Successes per fingerprint of tool, input and output; at `repeated_success_limit` the
    /// turn stops.
    pub success_repeats: HashMap<u64, usize>,
    /// Calls per fingerprint of tool and input; at `repeated_call_limit` the model gets a hint.
    pub call_repeats: HashMap<u64, usize>,
    /// Model calls failed in a row; a success resets it.
    pub consecutive_llm_failures: u32,
}

#[derive(Debug, Clone)]
pub(crate) struct Guards {
    limits: GuardLimits,
    counters: GuardCounters,
    turn_started: Instant,
}

fn fingerprint(parts: &[&str]) -> u64 {
    let mut h = DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

impl Guards {
    pub fn new(limits: GuardLimits) -> Self {
        Guards {
            limits,
            counters: GuardCounters::default(),
            turn_started: Instant::now(),
        }
    }

    pub fn limits(&self) -> &GuardLimits {
        &self.limits
    }

    /// The counters a checkpoint persists.
    pub fn counters(&self) -> &GuardCounters {
        &self.counters
    }

    /// The counters a checkpoint saved, at a resume.
    pub fn restore(&mut self, counters: GuardCounters) {
        self.counters = counters;
    }

    /// A model call succeeded: the failure streak ends.
    pub fn llm_succeeded(&mut self) {
        self.counters.consecutive_llm_failures = 0;
    }

    /// A model call failed; returns the length of the failure streak.
    pub fn llm_failed(&mut self) -> u32 {
        self.counters.consecutive_llm_failures += 1;
        self.counters.consecutive_llm_failures
    }

    /// A new user turn: the round count and the per-turn clock start again.
    pub fn start_turn(&mut self) {
        self.turn_started = Instant::now();
    }

    /// Time left in the turn's budget (`None`: no budget).
    pub fn time_left(&self) -> Option<Duration> {
        self.limits
            .turn_time_budget()
            .map(|b| b.saturating_sub(self.turn_started.elapsed()))
    }

    /// Checked before every round (`round` is the number of rounds already run).
    pub fn before_round(&self, round: u32, usage: &Usage) -> Option<TerminationReason> {
        if round >= self.limits.max_rounds {
            return Some(TerminationReason::MaxRounds);
        }
        if self.time_left() == Some(Duration::ZERO) {
            return Some(TerminationReason::TimeBudgetExpired);
        }
        if let Some(budget) = self.limits.token_budget
            && usage.total_tokens() >= budget
        {
            return Some(TerminationReason::TokenBudgetExceeded);
        }
        if let Some(budget) = self.limits.cost_budget_usd
            && usage.cost_usd >= budget
        {
            return Some(TerminationReason::CostBudgetExceeded);
        }
        None
    }

    /// Whether the round about to run (1-based `round`) must be text-only.
    pub fn must_wrap_up(&self, round: u32) -> bool {
        let last_rounds = round + self.limits.wrap_up_rounds > self.limits.max_rounds;
        let little_time = self.time_left().is_some_and(|t| t <= WRAP_UP_TIME);
        last_rounds || little_time
    }

    /// Update the counters with one round's calls.
    pub fn observe(&mut self, records: &[CallRecord]) -> GuardSignal {
        let limits = &self.limits;
        let c = &mut self.counters;
        let mut hint = None;
        for r in records {
            let input = r.input.to_string();
            let call_key = fingerprint(&[&r.tool, &input]);
            let calls = c.call_repeats.entry(call_key).or_insert(0);
            *calls += 1;
            if *calls == limits.repeated_call_limit {
                hint = Some(format!(
                    "You have called {} with the same input {} times. Try a different approach.",
                    r.tool, calls
                ));
            }
            match &r.outcome {
                CallOutcome::Succeeded => {
                    c.recent_error_keys.clear();
                    let key = fingerprint(&[&r.tool, &input, &r.result.content]);
                    let n = c.success_repeats.entry(key).or_insert(0);
                    *n += 1;
                    if *n >= limits.repeated_success_limit {
                        return GuardSignal::Stop(TerminationReason::RepeatedSuccessNoProgress);
                    }
                }
                _ => {
                    let first_line = r.result.content.lines().next().unwrap_or("");
                    c.recent_error_keys
                        .push_back(format!("{}: {first_line}", r.tool));
                    while c.recent_error_keys.len() > limits.convergence_window {
                        c.recent_error_keys.pop_front();
                    }
                    let window = &c.recent_error_keys;
                    if limits.convergence_window > 0
                        && window.len() == limits.convergence_window
                        && window.iter().all(|k| k == &window[0])
                    {
                        return GuardSignal::Stop(TerminationReason::ConvergenceDetected);
                    }
                }
            }
        }
        if !records.is_empty() && records.iter().all(|r| r.result.is_error) {
            return GuardSignal::Hint(hint.unwrap_or_else(|| {
                "Every tool call of the last round failed. Read the errors before retrying."
                    .to_string()
            }));
        }
        hint.map_or(GuardSignal::Proceed, GuardSignal::Hint)
    }

    /// Backoff before retry `n` (1-based) of a failed model call: min(2^n, 30) s.
    pub fn llm_backoff(n: u32) -> Duration {
        Duration::from_secs(2u64.saturating_pow(n).min(30))
    }
}
