//! The AgenticLoop: one user turn in six stages per round,
//!
//! prepare input -> (prepare call -> provider call -> tool processing -> observe and compact)*
//! -> finish,
//!
//! where finish runs Verify and may send the loop round again for a repair.

use std::sync::{Arc, Mutex};

use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use super::events::LoopEvent;
use super::guards::{GuardSignal, Guards};
use super::prompt::{PromptSources, build_system_prompt};
use super::termination::TerminationReason;
use super::verify::{TurnFacts, Verdict, repair_instruction, rule_misses};
use crate::cognition::{CognitiveState, RevisionTrigger};
use crate::conversation::{
    AssistantTurn, ContentBlock, Message, Role, StopReason, ToolCall, Usage,
};
use crate::hooks::{HookDecision, HookEnvelope, HookEvent, HookOutcome, HookRegistry};
use crate::ids::{CorrelationId, SessionId};
use crate::model::{Model, ModelRequest};
use crate::scaffold::{ReflectionMode, Scaffold, VerifyMode};
use crate::store::timeline::{SessionTimeline, TimelineEvent};
use crate::tools::executor::{CallRecord, StepContext, ToolExecutor};
use crate::tools::plan::StepSnapshot;

use super::reflection::reflect;

/// How a turn ended, for the driver.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    /// The final answer (empty when withheld or when the turn ended without one).
    pub text: String,
    pub termination: TerminationReason,
    pub verdict: Verdict,
    pub rounds: u32,
    pub tool_calls: u32,
    pub usage: Usage,
}

/// The state of the turn in progress.
#[derive(Debug, Default)]
struct Turn {
    rounds: u32,
    tool_calls: u32,
    repairs: u32,
    usage: Usage,
    runtime_hints: Vec<String>,
    last_tool_error: Option<(String, String)>,
}

/// What finishing decided.
enum Finish {
    Done(TurnOutcome),
    Repair(String),
}

/// Everything a loop is built from; the session layer assembles it.
pub struct LoopParts {
    pub session_id: SessionId,
    pub model: Arc<dyn Model>,
    pub executor: Arc<ToolExecutor>,
    pub hooks: Arc<HookRegistry>,
    pub timeline: Option<Arc<SessionTimeline>>,
    pub scaffold: Scaffold,
    pub cognition: Arc<Mutex<CognitiveState>>,
    /// `YYYY-MM-DD` for the prompt; injected so runs are reproducible.
    pub date: String,
    pub events: Option<UnboundedSender<LoopEvent>>,
}

pub struct AgenticLoop {
    p: LoopParts,
    messages: Vec<Message>,
    guards: Guards,
    session_usage: Usage,
    turn_number: u32,
    model_calls: u64,
    started: bool,
}

impl AgenticLoop {
    pub fn new(parts: LoopParts) -> Self {
        let guards = Guards::new(parts.scaffold.guards.clone());
        AgenticLoop {
            p: parts,
            messages: Vec::new(),
            guards,
            session_usage: Usage::default(),
            turn_number: 0,
            model_calls: 0,
            started: false,
        }
    }

    pub fn session_id(&self) -> &SessionId {
        &self.p.session_id
    }

    /// The tools this session's model sees.
    pub fn tool_plan(&self) -> &crate::tools::plan::BoundToolPlan {
        self.p.executor.plan()
    }

    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    pub fn cognition(&self) -> CognitiveState {
        self.p
            .cognition
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default()
    }

    pub fn usage(&self) -> Usage {
        self.session_usage
    }

    /// Run one user turn to its end.
    pub async fn run_turn(&mut self, prompt: &str, cancel: &CancellationToken) -> TurnOutcome {
        let mut turn = Turn::default();
        if let Err(reason) = self.prepare_input(prompt).await {
            return self.end_turn(
                &mut turn,
                TerminationReason::InputBlocked,
                reason,
                Verdict::Skipped,
            );
        }
        loop {
            if cancel.is_cancelled() {
                return self.end_turn(
                    &mut turn,
                    TerminationReason::UserCancelled,
                    String::new(),
                    Verdict::Skipped,
                );
            }
            if let Some(reason) = self.guards.before_round(turn.rounds, &self.session_usage) {
                return self.end_turn(&mut turn, reason, String::new(), Verdict::Skipped);
            }
            turn.rounds += 1;
            let force_text = self.guards.must_wrap_up(turn.rounds);
            self.emit(LoopEvent::RoundStarted {
                round: turn.rounds,
                force_text,
            });
            let (system, snapshot) = self.prepare_call(&turn);
            let reply = match self
                .provider_call(&system, &snapshot, force_text, &mut turn, cancel)
                .await
            {
                Ok(reply) => reply,
                Err(reason) => {
                    return self.end_turn(&mut turn, reason, String::new(), Verdict::Skipped);
                }
            };
            let calls = reply.message.tool_calls();
            let text = reply.message.text();
            self.append_assistant(reply, &snapshot);
            if calls.is_empty() {
                let reason = if force_text {
                    TerminationReason::ForcedText
                } else {
                    TerminationReason::Natural
                };
                match self.finish(&mut turn, reason, text).await {
                    Finish::Done(outcome) => return outcome,
                    Finish::Repair(instruction) => {
                        self.append_user(Message::user_text(instruction));
                        continue;
                    }
                }
            }
            if force_text && turn.rounds >= self.guards.limits().max_rounds {
                // The model ignored the wrap-up rule on the last round: nothing more may run.
                self.append_unrun_results(&calls, "the turn reached its round limit");
                return self.end_turn(
                    &mut turn,
                    TerminationReason::MaxRounds,
                    text,
                    Verdict::Skipped,
                );
            }
            let revisions_before = self.revision_count();
            let records = self
                .process_tools(calls, &snapshot, &mut turn, cancel)
                .await;
            if let Some(reason) = self
                .observe_and_compact(&mut turn, &records, revisions_before, &system, &snapshot)
                .await
            {
                return self.end_turn(&mut turn, reason, String::new(), Verdict::Skipped);
            }
        }
    }

    /// End the session: a `session.ended` row and the SessionEnd hook.
    pub async fn close(&mut self, reason: &str) {
        if !self.started {
            return;
        }
        self.hook(
            HookEvent::SessionEnd {
                reason: reason.to_string(),
            },
            None,
            0,
        )
        .await;
        self.record(TimelineEvent::SessionEnded {
            reason: reason.to_string(),
        });
    }

    // --- stage 1: prepare input ---------------------------------------------------------------

    /// UserPromptSubmit (block ends the turn, rewrite replaces the prompt), then the session
    /// start (first turn), then the user message.
    async fn prepare_input(&mut self, prompt: &str) -> Result<(), String> {
        self.turn_number += 1;
        self.guards.start_turn();
        self.emit(LoopEvent::TurnStarted {
            session_id: self.p.session_id.to_string(),
            turn: self.turn_number,
        });
        if !self.started {
            self.started = true;
            let plan = self.p.executor.plan();
            let policy = self.p.executor.policy();
            self.record(TimelineEvent::SessionStarted {
                model: self.p.model.id().to_string(),
                mode: serde_json::to_value(policy.mode)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                plan_generation: plan.generation(),
                plan_hash: plan.hash().to_string(),
                scaffold_hash: self.p.scaffold.hash(),
                grant: policy.grant_reason.clone(),
            });
            self.hook(
                HookEvent::SessionStart {
                    source: "startup".into(),
                },
                None,
                0,
            )
            .await;
        }
        let outcome = self
            .hook(
                HookEvent::UserPromptSubmit {
                    prompt: prompt.to_string(),
                },
                None,
                0,
            )
            .await;
        if let HookDecision::Block(reason) = outcome.decision {
            return Err(format!("The prompt was blocked by a hook: {reason}"));
        }
        let mut text = match outcome.rewrite {
            Some(serde_json::Value::String(s)) => s,
            _ => prompt.to_string(),
        };
        for context in outcome.added_context {
            text.push_str("\n\n");
            text.push_str(&context);
        }
        self.append_user(Message::user_text(text));
        Ok(())
    }

    // --- stage 2: prepare call ----------------------------------------------------------------

    fn prepare_call(&mut self, turn: &Turn) -> (String, StepSnapshot) {
        self.model_calls += 1;
        let cognitive_hints = self
            .p
            .cognition
            .lock()
            .map(|c| c.prompt_hints())
            .unwrap_or_default();
        let system = build_system_prompt(&PromptSources {
            sections: &self.p.scaffold.system_prompt,
            date: &self.p.date,
            cognitive_hints,
            runtime_hints: &turn.runtime_hints,
        });
        let plan = self.p.executor.plan();
        let snapshot = StepSnapshot {
            model_id: self.p.model.id().to_string(),
            plan_generation: plan.generation(),
            plan_hash: plan.hash().clone(),
            correlation_id: CorrelationId::new(format!(
                "{}:{}:{}",
                self.p.session_id, self.turn_number, self.model_calls
            )),
            round: turn.rounds,
        };
        (system, snapshot)
    }

    // --- stage 3: provider call ---------------------------------------------------------------

    /// The model call with bounded retries of transient failures, under the turn's time budget
    /// and the cancellation token.
    async fn provider_call(
        &mut self,
        system: &str,
        snapshot: &StepSnapshot,
        force_text: bool,
        turn: &mut Turn,
        cancel: &CancellationToken,
    ) -> Result<AssistantTurn, TerminationReason> {
        loop {
            let request = ModelRequest {
                system,
                messages: &self.messages,
                plan: self.p.executor.plan(),
                snapshot,
                force_text,
            };
            let call = self.p.model.complete(&request);
            let budget = self.guards.time_left();
            let result = tokio::select! {
                _ = cancel.cancelled() => return Err(TerminationReason::UserCancelled),
                r = async {
                    match budget {
                        Some(left) => tokio::time::timeout(left, call).await.ok(),
                        None => Some(call.await),
                    }
                } => r,
            };
            let Some(result) = result else {
                return Err(TerminationReason::TimeBudgetExpired);
            };
            match result {
                Ok(reply) => {
                    self.guards.counters.consecutive_llm_failures = 0;
                    turn.usage.add(&reply.usage);
                    self.session_usage.add(&reply.usage);
                    if reply.stop_reason == StopReason::Refusal {
                        return Err(TerminationReason::ModelRefusal);
                    }
                    return Ok(reply);
                }
                Err(e) => {
                    tracing::warn!("model call failed: {e}");
                    self.guards.counters.consecutive_llm_failures += 1;
                    let failures = self.guards.counters.consecutive_llm_failures;
                    if !e.retryable() || failures > self.guards.limits().max_llm_retries {
                        return Err(TerminationReason::LlmError);
                    }
                    let wait = Guards::llm_backoff(failures);
                    tokio::select! {
                        _ = cancel.cancelled() => return Err(TerminationReason::UserCancelled),
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
    }

    // --- stage 4: tool processing -------------------------------------------------------------

    async fn process_tools(
        &mut self,
        calls: Vec<ToolCall>,
        snapshot: &StepSnapshot,
        turn: &mut Turn,
        cancel: &CancellationToken,
    ) -> Vec<CallRecord> {
        for c in &calls {
            self.emit(LoopEvent::ToolStarted {
                call_id: c.id.clone(),
                tool: c.name.clone(),
                input: c.input.clone(),
            });
        }
        turn.tool_calls += calls.len() as u32;
        let step = StepContext {
            turn: self.turn_number,
            snapshot: snapshot.clone(),
            cancel: cancel.clone(),
        };
        let records = self.p.executor.execute_batch(calls, &step).await;
        let mut results = Vec::with_capacity(records.len());
        for r in &records {
            self.emit(LoopEvent::ToolEnded {
                call_id: r.result.tool_use_id.clone(),
                tool: r.tool.clone(),
                outcome: r.outcome.clone(),
                is_error: r.result.is_error,
            });
            results.push(ContentBlock::from(r.result.clone()));
        }
        turn.last_tool_error = records.last().filter(|r| r.result.is_error).map(|r| {
            (
                r.tool.clone(),
                r.result.content.lines().next().unwrap_or("").to_string(),
            )
        });
        self.append_user(Message {
            role: Role::User,
            content: results,
        });
        records
    }

    // --- stage 5: observe and compact ---------------------------------------------------------

    /// Feed results to the cognitive state and the guards; an optional reflection call.
    /// Compaction joins this stage with durable sessions.
    async fn observe_and_compact(
        &mut self,
        turn: &mut Turn,
        records: &[CallRecord],
        revisions_before: usize,
        system: &str,
        snapshot: &StepSnapshot,
    ) -> Option<TerminationReason> {
        if let Ok(mut c) = self.p.cognition.lock() {
            for r in records {
                c.observe_tool_result(&r.result.content);
            }
        }
        turn.runtime_hints.clear();
        match self.guards.observe(records) {
            GuardSignal::Stop(reason) => {
                self.record_new_revisions(revisions_before);
                return Some(reason);
            }
            GuardSignal::Hint(h) => turn.runtime_hints.push(h),
            GuardSignal::Proceed => {}
        }
        if self.p.scaffold.reflection == ReflectionMode::ModelCall {
            let request = ModelRequest {
                system,
                messages: &self.messages,
                plan: self.p.executor.plan(),
                snapshot,
                force_text: true,
            };
            if let Some(usage) = reflect(self.p.model.as_ref(), &request, &self.p.cognition).await {
                turn.usage.add(&usage);
                self.session_usage.add(&usage);
            }
        }
        self.record_new_revisions(revisions_before);
        None
    }

    // --- stage 6: finish ----------------------------------------------------------------------

    /// Verify a text answer: rules, PreVerify, PostVerify, Stop. A rejected answer is repaired
    /// within the budget; past it the turn ends with the verdict `failed`.
    async fn finish(&mut self, turn: &mut Turn, reason: TerminationReason, text: String) -> Finish {
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
                    return Finish::Done(self.end_turn(
                        turn,
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
        Finish::Done(self.end_turn(turn, reason, text, verdict))
    }

    fn end_turn(
        &mut self,
        turn: &mut Turn,
        termination: TerminationReason,
        text: String,
        verdict: Verdict,
    ) -> TurnOutcome {
        self.record(TimelineEvent::TurnEnded {
            termination: termination.to_string(),
            rounds: turn.rounds,
            usage: turn.usage,
        });
        let outcome = TurnOutcome {
            text,
            termination,
            verdict,
            rounds: turn.rounds,
            tool_calls: turn.tool_calls,
            usage: turn.usage,
        };
        self.emit(LoopEvent::TurnEnded {
            termination,
            verdict: outcome.verdict.clone(),
            text: outcome.text.clone(),
            rounds: outcome.rounds,
            tool_calls: outcome.tool_calls,
            usage: outcome.usage,
        });
        outcome
    }

    // --- conversation and records -------------------------------------------------------------

    fn append_user(&mut self, message: Message) {
        self.record(TimelineEvent::UserMessage {
            message: message.clone(),
        });
        self.messages.push(message);
    }

    fn append_assistant(&mut self, reply: AssistantTurn, snapshot: &StepSnapshot) {
        self.emit(LoopEvent::AssistantMessage {
            text: reply.message.text(),
            tool_calls: reply.message.tool_calls().len(),
            usage: reply.usage,
        });
        self.record(TimelineEvent::AssistantMessage {
            message: reply.message.clone(),
            usage: reply.usage,
            stop_reason: reply.stop_reason,
            snapshot: snapshot.clone(),
        });
        self.messages.push(reply.message);
    }

    /// Keep every tool_use paired with a tool_result even when the calls never ran.
    fn append_unrun_results(&mut self, calls: &[ToolCall], why: &str) {
        let content = calls
            .iter()
            .map(|c| ContentBlock::ToolResult {
                tool_use_id: c.id.clone(),
                content: format!("not run: {why}"),
                is_error: true,
            })
            .collect();
        self.append_user(Message {
            role: Role::User,
            content,
        });
    }

    fn revision_count(&self) -> usize {
        self.p
            .cognition
            .lock()
            .map(|c| c.revisions.len())
            .unwrap_or(0)
    }

    fn record_new_revisions(&self, before: usize) {
        let revisions: Vec<_> = match self.p.cognition.lock() {
            Ok(c) => c.revisions.iter().skip(before).cloned().collect(),
            Err(_) => return,
        };
        for r in revisions {
            let revision = serde_json::to_value(&r).unwrap_or_default();
            self.record(TimelineEvent::PlanRevised { revision });
        }
    }

    fn record_verification(&self, attempt: u32, verdict: &str, misses: &[String]) {
        self.emit(LoopEvent::Verification {
            attempt,
            verdict: verdict.to_string(),
            misses: misses.to_vec(),
        });
        self.record(TimelineEvent::Verification {
            attempt,
            verdict: verdict.to_string(),
            misses: misses.to_vec(),
        });
    }

    async fn hook(
        &self,
        event: HookEvent,
        correlation_id: Option<String>,
        verify_attempt: u32,
    ) -> HookOutcome {
        let outcome = self
            .p
            .hooks
            .dispatch(HookEnvelope {
                session_id: self.p.session_id.clone(),
                turn: self.turn_number,
                plan_generation: self.p.executor.plan().generation(),
                verify_attempt,
                correlation_id,
                cwd: self.p.executor.workspace().root().display().to_string(),
                event,
            })
            .await;
        for f in &outcome.failures {
            self.record(TimelineEvent::HookFailed {
                hook: f.hook.clone(),
                event: f.event.name().to_string(),
                error: f.error.clone(),
            });
        }
        outcome
    }

    fn record(&self, event: TimelineEvent) {
        if let Some(tl) = &self.p.timeline
            && let Err(e) = tl.append(&self.p.session_id, event)
        {
            tracing::warn!("timeline write failed: {e}");
        }
    }

    fn emit(&self, event: LoopEvent) {
        if let Some(tx) = &self.p.events {
            // A driver that stopped listening does not stop the turn.
            let _ = tx.send(event);
        }
    }
}
