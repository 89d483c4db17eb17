//! Stage 6 of the loop, finish: Verify a text answer (rules, PreVerify, PostVerify, Stop) and
//! decide, as a value, whether it goes back for a repair within the budget or ends the turn;
//! the loop acts on the decision. Ending a turn (timeline row, ledger row for guard stops, the
//! `turn_end` checkpoint, the event to the driver) is `end_turn`, shared by every way a turn
//! ends.

use super::agentic_loop::{AgenticLoop, TurnOutcome};
use super::durable::TurnState as Turn;
use super::durable_session::Save;
use super::ending::{Ending, Finish};
use super::events::LoopEvent;
use super::termination::TerminationReason;
use super::verify::{TurnFacts, Verdict, repair_instruction, rule_misses};
use crate::cognition::RevisionTrigger;
use crate::hooks::{HookDecision, HookEvent};
use crate::scaffold::VerifyMode;
use crate::store::checkpoint::SessionStatus;
use crate::store::timeline::TimelineEvent;

impl AgenticLoop {
    // --- stage 6: finish ----------------------------------------------------------------------

    /// Verify a text answer: rules, PreVerify, PostVerify, Stop. A rejected answer is repaired
    /// within the budget; past it the turn ends with the verdict `failed`.
    pub(super) async fn finish(
        &mut self,
        turn: &mut Turn,
        reason: TerminationReason,
        text: String,
    ) -> Finish {
        let attempt = turn.repairs;
        let mut misses = Vec::new();
        let mut instruction = None;
        if self.p.scaffold.verify == VerifyMode::RuleBased {
            misses = rule_misses(&TurnFacts {
                final_text: &text,
                tool_calls: turn.tool_calls,
                last_tool_error: turn.last_tool_error.clone(),
            });
            let pre = self
                .hook(
                    HookEvent::PreVerify {
                        final_text: text.clone(),
                        misses: misses.clone(),
                    },
                    None,
                    attempt,
                )
                .await;
            misses.extend(pre.added_misses);
            let post = self
                .hook(
                    HookEvent::PostVerify {
                        final_text: text.clone(),
                        misses: misses.clone(),
                    },
                    None,
                    attempt,
                )
                .await;
            match post.decision {
                HookDecision::Accept => misses.clear(),
                HookDecision::Revise(i) => instruction = Some(i),
                HookDecision::Escalate(why) => {
                    self.record_verification(attempt, "escalated", &misses);
                    let verdict = Verdict::Escalated { reason: why };
                    return Finish::End(Ending::new(
                        TerminationReason::ExternalVerificationRequired,
                        String::new(),
                        verdict,
                    ));
                }
                _ => {}
            }
        }
        if misses.is_empty() && instruction.is_none() {
            let stop = self
                .hook(
                    HookEvent::Stop {
                        final_text: text.clone(),
                        termination: reason.to_string(),
                    },
                    None,
                    attempt,
                )
                .await;
            if let HookDecision::ContinueWith(i) = stop.decision {
                instruction = Some(i);
            }
        }
        let accepted = misses.is_empty() && instruction.is_none();
        if !accepted && turn.repairs < self.p.scaffold.repair_budget {
            turn.repairs += 1;
            turn.pending_misses = misses.clone();
            self.record_verification(attempt, "repair", &misses);
            let before = self.revision_count();
            if let Ok(mut c) = self.p.cognition.lock() {
                c.arm_replan(RevisionTrigger::VerifyFailed {
                    misses: misses.clone(),
                });
            }
            self.record_new_revisions(before);
            return Finish::Repair(repair_instruction(&misses, instruction.as_deref()));
        }
        let verdict = match (self.p.scaffold.verify, accepted) {
            (_, true) if self.p.scaffold.verify == VerifyMode::Off => Verdict::Skipped,
            (_, true) => Verdict::Passed,
            (_, false) => {
                let mut all = misses;
                all.extend(instruction);
                Verdict::Failed { misses: all }
            }
        };
        if verdict != Verdict::Skipped {
            let misses = match &verdict {
                Verdict::Failed { misses } => misses.clone(),
                _ => Vec::new(),
            };
            self.record_verification(attempt, verdict.name(), &misses);
        }
        Finish::End(Ending::new(reason, text, verdict))
    }

    pub(super) fn end_turn(&mut self, turn: &mut Turn, ending: Ending) -> TurnOutcome {
        use TerminationReason as T;
        let Ending {
            termination,
            text,
            verdict,
            error,
        } = ending;
        self.recorder.record(TimelineEvent::TurnEnded {
            termination: termination.to_string(),
            rounds: turn.rounds,
            usage: turn.usage,
        });
        if matches!(
            termination,
            T::MaxRounds
                | T::TimeBudgetExpired
                | T::TokenBudgetExceeded
                | T::CostBudgetExceeded
                | T::ConvergenceDetected
                | T::RepeatedSuccessNoProgress
        ) {
            let detail = serde_json::json!({"reason": termination, "rounds": turn.rounds});
            self.recorder.evidence("guard_stop", detail);
        }
        self.lifecycle.turn_ended(termination);
        turn.pending_misses.clear();
        if termination != T::CheckpointFailed {
            // The turn is over: the final messages, no turn in progress. A failure here is
            // recorded; the answer stands.
            let _ = self.save(Save::TurnEnd);
        }
        self.recorder.durable.set_status(SessionStatus::Paused);
        let outcome = TurnOutcome {
            text,
            termination,
            verdict,
            rounds: turn.rounds,
            tool_calls: turn.tool_calls,
            usage: turn.usage,
            error,
        };
        self.recorder.emit(LoopEvent::TurnEnded {
            termination,
            verdict: outcome.verdict.clone(),
            text: outcome.text.clone(),
            rounds: outcome.rounds,
            tool_calls: outcome.tool_calls,
            usage: outcome.usage,
            error: outcome.error.clone(),
        });
        outcome
    }
}
