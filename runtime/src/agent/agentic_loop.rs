//! The AgenticLoop: one user turn in six stages per round,
//!
//! prepare input -> (prepare call -> provider call -> tool processing -> observe and compact)*
//! -> finish,
//!
//! where input.rs prepares the input and finish (finish.rs) decides whether the answer ends
//! the turn or goes round again for a repair. In a checkpointed session (durable_session.rs)
//! the proposed batch is saved before any tool runs and the completed batch after; restore.rs
//! brings an interrupted turn back into `drive`; compaction (compaction.rs) closes the observe
//! stage. The loop's state is grouped by owner: transcript.rs, counters.rs, lifecycle.rs,
//! guards.rs and durable_session.rs.

use std::sync::{Arc, Mutex};

use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use super::counters::SessionCounters;
use super::durable::{FaultPoint, PendingBatch, TurnState as Turn};
use super::durable_session::{Durable, Save};
use super::ending::{Ending, Finish};
use super::events::LoopEvent;
use super::guards::{GuardSignal, Guards};
use super::lifecycle::Lifecycle;
use super::prompt::{PromptSources, build_system_prompt};
use super::recorder::Recorder;
use super::termination::TerminationReason;
use super::transcript::Transcript;
use super::verify::Verdict;
use crate::cognition::CognitiveState;
use crate::conversation::{AssistantTurn, Message, Role, StopReason, ToolCall, Usage};
use crate::hooks::{HookEvent, HookRegistry};
use crate::ids::{CorrelationId, SessionId, StepSnapshot};
use crate::model::errors::ErrorClass;
use crate::model::{DeltaSink, Model, ModelRequest, ModelSlot};
use crate::scaffold::{ReflectionMode, Scaffold};
use crate::store::checkpoint::SessionStatus;
use crate::store::timeline::{SessionTimeline, TimelineEvent};
use crate::tools::executor::{CallRecord, StepContext, ToolExecutor, ToolSource};

use super::reflection::reflect;

/// How a turn ended, for the driver.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    /// The final answer (empty when withheld or when the turn ended without one).
    pub text: String,
    /// Why the turn ended.
    pub termination: TerminationReason,
    /// What verification said of the final answer (`Skipped` when it did not run).
    pub verdict: Verdict,
    /// Rounds the turn ran.
    pub rounds: u32,
    /// Tool calls the turn made, over all its rounds.
    pub tool_calls: u32,
    /// Tokens (and cost) of the turn's model calls.
    pub usage: Usage,
    /// What failed, when the turn ended on a failure (a model call that could not be made).
    pub error: Option<String>,
}

/// Everything a loop is built from; the session layer assembles it.
pub(crate) struct LoopParts {
    pub session_id: SessionId,
    pub model: Arc<dyn Model>,
    /// Updated with `model` on a switch, for the session's sub-agents.
    pub model_slot: ModelSlot,
    /// Owned: only `add_tools` changes it, between turns.
    pub executor: ToolExecutor,
    pub hooks: Arc<HookRegistry>,
    pub timeline: Option<Arc<SessionTimeline>>,
    pub scaffold: Scaffold,
    pub cognition: Arc<Mutex<CognitiveState>>,
    /// `YYYY-MM-DD` for the prompt; injected so runs are reproducible.
    pub date: String,
    /// Lines on where the session runs (cwd, OS, git), after the date.
    pub environment: Vec<String>,
    pub events: Option<UnboundedSender<LoopEvent>>,
}

/// One session's loop. Its state is grouped by owner: what it is built from, the
/// conversation, the guards, the session's counts, its life (started, how the last turn
/// ended) and its durable side (checkpoint writer, interrupted turn).
pub struct AgenticLoop {
    pub(super) p: LoopParts,
    pub(super) transcript: Transcript,
    pub(super) guards: Guards,
    pub(super) counters: SessionCounters,
    pub(super) lifecycle: Lifecycle,
    /// Where saves, timeline rows, ledger rows and events go.
    pub(super) recorder: Recorder,
    /// A sub-agent's parent's later tools, taken before each round (`None`: between turns,
    /// by the driver).
    late_tools: Option<ToolSource>,
}

impl AgenticLoop {
    pub(crate) fn new(mut parts: LoopParts) -> Self {
        let guards = Guards::new(parts.scaffold.guards.clone());
        // The recorder is the one owner of the timeline and the event channel.
        let recorder = Recorder::new(
            parts.session_id.clone(),
            parts.timeline.take(),
            parts.events.take(),
        );
        AgenticLoop {
            p: parts,
            transcript: Transcript::default(),
            guards,
            counters: SessionCounters::default(),
            lifecycle: Lifecycle::default(),
            recorder,
            late_tools: None,
        }
    }

    /// Take the tools `source` adds before every round, not only between turns: a sub-agent
    /// runs inside one of its parent's turns, so it would otherwise never see a server that
    /// connects while it works.
    pub(crate) fn take_late_tools_each_round(&mut self, source: ToolSource) {
        self.late_tools = Some(source);
    }

    /// Make this new session durable (`create_session`).
    pub(crate) fn set_durable(&mut self, durable: Durable) {
        self.recorder.durable.install(durable);
    }

    /// The id of the session this loop runs.
    pub fn session_id(&self) -> &SessionId {
        &self.p.session_id
    }

    /// The person's permission mode (`/mode`, Shift-Tab).
    pub fn permission_mode(&self) -> crate::tools::approval::PermissionMode {
        self.p.executor.gate().permission_mode()
    }

    /// Change the person's permission mode for the calls that follow.
    pub fn set_permission_mode(&mut self, mode: crate::tools::approval::PermissionMode) {
        self.p.executor.gate().set_permission_mode(mode);
    }

    /// The workspace the session's tools act on.
    pub fn workspace(&self) -> &std::sync::Arc<dyn crate::tools::workspace::Workspace> {
        self.p.executor.workspace()
    }

    /// The tools this session's model sees.
    pub fn tool_plan(&self) -> &crate::tools::plan::BoundToolPlan {
        self.p.executor.plan()
    }

    /// Give the model `tools` from the next turn on (those not in the plan yet): a new plan
    /// generation, recorded on the timeline. Between turns only (the driver owns the loop
    /// mutably). Returns the names added.
    pub fn add_tools(
        &mut self,
        tools: Vec<crate::tools::plan::BoundTool>,
    ) -> Result<Vec<String>, crate::tools::executor::ExecutorError> {
        let added = self.p.executor.add_tools(tools)?;
        if !added.is_empty() {
            let plan = self.p.executor.plan();
            self.recorder.record(TimelineEvent::PlanExtended {
                plan_generation: plan.generation(),
                plan_hash: plan.hash().to_string(),
                added: added.clone(),
            });
        }
        Ok(added)
    }

    /// The conversation so far, compaction summary included.
    pub fn messages(&self) -> &[Message] {
        self.transcript.messages()
    }

    /// A copy of the session's plan, revisions and hypotheses (default if its lock is poisoned).
    pub fn cognition(&self) -> CognitiveState {
        self.p
            .cognition
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default()
    }

    /// Tokens and cost of every model call of the session so far.
    pub fn usage(&self) -> Usage {
        self.counters.usage()
    }

    /// Hash of the system prompt of the last model call (recorded per turn by drivers and in
    /// the checkpoint), `None` before the first call.
    pub fn system_prompt_hash(&self) -> Option<&str> {
        self.transcript.system_hash()
    }

    /// The model route id this session calls.
    pub fn model_id(&self) -> &str {
        self.p.model.id()
    }

    /// Why the session's model cannot answer, when it cannot (see `Model::unavailable`).
    pub fn model_unavailable(&self) -> Option<&str> {
        self.p.model.unavailable()
    }

    /// Turns started so far.
    pub fn turns(&self) -> u32 {
        self.counters.turn()
    }

    /// The guards' counters (persisted in the checkpoint).
    pub fn guard_counters(&self) -> &super::guards::GuardCounters {
        self.guards.counters()
    }

    /// The session's checkpoint directory, when it has one.
    pub fn checkpoint_dir(&self) -> Option<&std::path::Path> {
        self.recorder.durable.dir()
    }

    /// Run one user turn to its end.
    pub async fn run_turn(&mut self, prompt: &str, cancel: &CancellationToken) -> TurnOutcome {
        let mut turn = Turn::default();
        if let Err(reason) = self.prepare_input(prompt).await {
            let blocked = Ending::new(TerminationReason::InputBlocked, reason, Verdict::Skipped);
            return self.end_turn(&mut turn, blocked);
        }
        self.recorder.durable.set_status(SessionStatus::Active);
        if self.save(Save::Round0(&turn)).is_err() {
            return self.end_turn(
                &mut turn,
                Ending::stopped(TerminationReason::CheckpointFailed),
            );
        }
        if self.lifecycle.take_announce() {
            // Public only once the session's first save succeeded.
            let start = HookEvent::SessionStart {
                source: "startup".into(),
            };
            self.hook(start, None, 0).await;
        }
        self.drive(turn, cancel).await
    }

    /// The rounds of a turn, from its next model call to its end.
    pub(super) async fn drive(
        &mut self,
        mut turn: Turn,
        cancel: &CancellationToken,
    ) -> TurnOutcome {
        loop {
            if cancel.is_cancelled() {
                return self.end_turn(&mut turn, Ending::stopped(TerminationReason::UserCancelled));
            }
            let usage = self.counters.usage();
            if let Some(reason) = self.guards.before_round(turn.rounds, &usage) {
                return self.end_turn(&mut turn, Ending::stopped(reason));
            }
            if let Some(source) = self.late_tools.clone()
                && let Err(e) = self.add_tools(source())
            {
                tracing::warn!("late tools not added: {e}");
            }
            turn.rounds += 1;
            let force_text = self.guards.must_wrap_up(turn.rounds);
            self.recorder.emit(LoopEvent::RoundStarted {
                round: turn.rounds,
                force_text,
            });
            let (system, snapshot) = self.prepare_call(&turn);
            let reply = match self
                .provider_call(&system, &snapshot, force_text, &mut turn, cancel)
                .await
            {
                Ok(reply) => reply,
                Err(ending) => return self.end_turn(&mut turn, ending),
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
                    Finish::End(ending) => return self.end_turn(&mut turn, ending),
                    Finish::Repair(instruction) => {
                        self.append_user(Message::user_text(instruction));
                        continue;
                    }
                }
            }
            if force_text && turn.rounds >= self.guards.limits().max_rounds {
                // The model ignored the wrap-up rule on the last round: nothing more may run.
                self.append_unrun_results(&calls, "the turn reached its round limit");
                let ending = Ending::new(TerminationReason::MaxRounds, text, Verdict::Skipped);
                return self.end_turn(&mut turn, ending);
            }
            // The batch is saved before any of it runs; a batch that cannot be saved never runs.
            let pending = self.pending_batch(&calls, &snapshot);
            if self.save(Save::PendingBatch(&turn, pending)).is_err() {
                let why = "the checkpoint could not save the batch, so none of it ran";
                self.append_unrun_results(&calls, why);
                return self.end_turn(
                    &mut turn,
                    Ending::stopped(TerminationReason::CheckpointFailed),
                );
            }
            self.recorder
                .durable
                .fault(FaultPoint::BeforeDispatch)
                .await;
            let revisions_before = self.revision_count();
            let records = self
                .process_tools(calls, &snapshot, &mut turn, cancel)
                .await;
            if let Some(reason) = self
                .after_batch(&mut turn, &records, revisions_before, &system, &snapshot)
                .await
            {
                return self.end_turn(&mut turn, Ending::stopped(reason));
            }
        }
    }

    fn pending_batch(&self, calls: &[ToolCall], snapshot: &StepSnapshot) -> PendingBatch {
        PendingBatch {
            turn: self.counters.turn(),
            round: snapshot.round,
            model_id: snapshot.model_id.clone(),
            correlation_id: snapshot.correlation_id.to_string(),
            calls: calls.to_vec(),
        }
    }

    /// End the session: a `session.ended` row, the SessionEnd hook and the final status
    /// (`error` when the last turn ended on a failure of the model or the checkpoint).
    pub async fn close(&mut self, reason: &str) {
        if !self.lifecycle.is_started() {
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
        self.recorder.record(TimelineEvent::SessionEnded {
            reason: reason.to_string(),
        });
        self.recorder
            .durable
            .set_status(self.lifecycle.closing_status());
    }

    // --- stage 2: prepare call ----------------------------------------------------------------

    fn prepare_call(&mut self, turn: &Turn) -> (String, StepSnapshot) {
        let call = self.counters.count_call();
        let system = self.system_prompt(turn);
        self.transcript.sent_with(&system);
        let snapshot = self.step_snapshot(&call.to_string(), turn.rounds);
        (system, snapshot)
    }

    /// What the records of one step name: model, plan, and `session:turn:step` as its
    /// correlation id.
    pub(super) fn step_snapshot(&self, step: &str, round: u32) -> StepSnapshot {
        let plan = self.p.executor.plan();
        StepSnapshot {
            model_id: self.p.model.id().to_string(),
            plan_generation: plan.generation(),
            plan_hash: plan.hash().clone(),
            correlation_id: CorrelationId::new(format!(
                "{}:{}:{step}",
                self.p.session_id,
                self.counters.turn()
            )),
            round,
        }
    }

    /// This round's system prompt: static sections, then plan, reflection and runtime hints.
    pub(super) fn system_prompt(&self, turn: &Turn) -> String {
        let cognitive_hints = self
            .p
            .cognition
            .lock()
            .map(|c| c.prompt_hints())
            .unwrap_or_default();
        build_system_prompt(&PromptSources {
            sections: &self.p.scaffold.system_prompt,
            date: &self.p.date,
            environment: &self.p.environment,
            cognitive_hints,
            runtime_hints: &turn.runtime_hints,
        })
    }

    // --- stage 3: provider call ---------------------------------------------------------------

    /// A call on the conversation so far, with this session's tools; its deltas go to `deltas`.
    fn model_request<'a>(
        &'a self,
        system: &'a str,
        snapshot: &'a StepSnapshot,
        force_text: bool,
        deltas: DeltaSink,
    ) -> ModelRequest<'a> {
        ModelRequest {
            system,
            messages: self.transcript.messages(),
            plan: self.p.executor.plan(),
            snapshot,
            force_text,
            deltas,
        }
    }

    /// The model call with bounded retries of transient failures, under the turn's time budget
    /// and the cancellation token.
    async fn provider_call(
        &mut self,
        system: &str,
        snapshot: &StepSnapshot,
        force_text: bool,
        turn: &mut Turn,
        cancel: &CancellationToken,
    ) -> Result<AssistantTurn, Ending> {
        let stopped = |reason| Err(Ending::stopped(reason));
        let mut compacted_for_overflow = false;
        let streamed = Arc::new(Mutex::new(String::new()));
        loop {
            // A retry starts the reply again: only the last attempt's text is the reply's.
            streamed.lock().unwrap_or_else(|p| p.into_inner()).clear();
            let deltas = self.recorder.collecting_sink(streamed.clone());
            let request = self.model_request(system, snapshot, force_text, deltas);
            let call = self.p.model.complete(&request);
            let budget = self.guards.time_left();
            let result = tokio::select! {
                _ = cancel.cancelled() => None,
                r = async {
                    match budget {
                        Some(left) => tokio::time::timeout(left, call).await.ok(),
                        None => Some(call.await),
                    }
                } => Some(r),
            };
            let Some(result) = result else {
                let partial =
                    std::mem::take(&mut *streamed.lock().unwrap_or_else(|p| p.into_inner()));
                self.append_interrupted(&partial);
                return stopped(TerminationReason::UserCancelled);
            };
            let Some(result) = result else {
                return stopped(TerminationReason::TimeBudgetExpired);
            };
            match result {
                Ok(reply) => {
                    self.guards.llm_succeeded();
                    turn.usage.add(&reply.usage);
                    self.counters.add_usage(&reply.usage);
                    if reply.stop_reason == StopReason::Refusal {
                        return stopped(TerminationReason::ModelRefusal);
                    }
                    return Ok(reply);
                }
                Err(e) => {
                    // Not a log line: a call that ends the turn says why in the turn's end.
                    tracing::debug!("model call failed: {e}");
                    match e.class() {
                        // Retrying cannot help, and it is not the model's failure.
                        Some(ErrorClass::Billing) => {
                            return Err(Ending::failed(
                                TerminationReason::BillingError,
                                e.to_string(),
                            ));
                        }
                        // Compact, then retry once; a context that cannot shrink is exhausted.
                        Some(ErrorClass::ContextOverflow) => {
                            if compacted_for_overflow || !self.compact_now(turn, system).await {
                                return Err(Ending::failed(
                                    TerminationReason::ContextExhausted,
                                    e.to_string(),
                                ));
                            }
                            compacted_for_overflow = true;
                            continue;
                        }
                        _ => {}
                    }
                    let failures = self.guards.llm_failed();
                    if !e.retryable() || failures > self.guards.limits().max_llm_retries {
                        return Err(Ending::failed(TerminationReason::LlmError, e.to_string()));
                    }
                    let wait = Guards::llm_backoff(failures);
                    self.recorder.emit(LoopEvent::ModelRetry {
                        attempt: failures,
                        error: e.to_string(),
                        wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                    });
                    tokio::select! {
                        _ = cancel.cancelled() => {
                            self.append_interrupted("");
                            return stopped(TerminationReason::UserCancelled);
                        }
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
        let records = self.execute_calls(calls, snapshot, cancel, false).await;
        self.take_results(turn, &records);
        records
    }

    /// Run calls through the executor's pipeline; `by_person`: the person's own (see
    /// `StepContext::by_person`).
    pub(super) async fn execute_calls(
        &mut self,
        calls: Vec<ToolCall>,
        snapshot: &StepSnapshot,
        cancel: &CancellationToken,
        by_person: bool,
    ) -> Vec<CallRecord> {
        for c in &calls {
            self.recorder.emit(LoopEvent::ToolStarted {
                call_id: c.id.clone(),
                tool: c.name.clone(),
                input: c.input.clone(),
            });
        }
        let step = StepContext {
            turn: self.counters.turn(),
            snapshot: snapshot.clone(),
            cancel: cancel.clone(),
            output: self.recorder.tool_output_sink(),
            by_person,
        };
        self.p.executor.execute_batch(calls, &step).await
    }

    /// A batch's records become one user message of tool_results, in the proposed order.
    pub(super) fn take_results(&mut self, turn: &mut Turn, records: &[CallRecord]) {
        turn.tool_calls += records.len() as u32;
        let mut results = Vec::with_capacity(records.len());
        for r in records {
            for event in LoopEvent::call_ended(r) {
                self.recorder.emit(event);
            }
            results.extend(r.result.clone().into_blocks());
        }
        self.evidence_for(records);
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
    }

    // --- stage 5: observe and compact ---------------------------------------------------------

    /// A batch's results are in the conversation: save them; feed them to the cognitive state
    /// and the guards; an optional reflection call; then compaction when the context passed its
    /// threshold (compaction.rs).
    pub(super) async fn after_batch(
        &mut self,
        turn: &mut Turn,
        records: &[CallRecord],
        revisions_before: usize,
        system: &str,
        snapshot: &StepSnapshot,
    ) -> Option<TerminationReason> {
        self.recorder.durable.fault(FaultPoint::AfterDispatch).await;
        if self.save(Save::CompletedBatch(turn)).is_err() {
            // The effects ran and their receipts say so; nothing more runs unsaved.
            return Some(TerminationReason::CheckpointFailed);
        }
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
            let request = self.model_request(system, snapshot, true, self.recorder.delta_sink());
            if let Some(usage) = reflect(self.p.model.as_ref(), &request, &self.p.cognition).await {
                turn.usage.add(&usage);
                self.counters.add_usage(&usage);
            }
        }
        self.record_new_revisions(revisions_before);
        self.compact_if_needed(turn, system).await;
        None
    }
}
