//! The ToolExecutor: every proposed call passes the same pipeline, in this order,
//!
//! scope -> request-middleware rewrites -> policy -> schema -> PreToolUse hooks (then scope,
//! policy and schema again on a rewrite) -> approval -> effect receipt (checkpointed sessions,
//! effectful calls) -> resource locks -> dispatch with a deadline -> PostToolUse -> one uniform
//! tool_result,
//!
//! and leaves a `tool.called` and a `tool.completed` row in the timeline, denials included. A
//! denial at any step before dispatch returns an error tool_result and runs nothing.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::approval::{ApprovalGate, Approver};
use super::locks::{ResourceClaim, ResourceLocks};
use super::output::ToolOutputSink;
use super::plan::{BoundTool, BoundToolPlan, ResourceKeyRule, ToolContext, ToolOutput};
use super::workspace::Workspace;
use crate::cognition::CognitiveState;
use crate::conversation::{ToolCall, ToolResult};
use crate::hooks::events::ToolResponsePayload;
use crate::hooks::{
    HookDecided, HookDecision, HookEnvelope, HookEvent, HookEventKind, HookOutcome, HookRegistry,
};
use crate::ids::{SessionId, StepSnapshot};
use crate::policy::{Classification, SafetyLevel, SessionPolicy};
use crate::store::ledger::EvidenceLedger;
use crate::store::receipts::ReceiptStore;
use crate::store::rewind::FileHistory;
/// Re-exported where the pipeline that names its steps lives.
pub use crate::store::timeline::PipelineStep;
use crate::store::timeline::{CallOutcome, SessionTimeline, TimelineEvent};

mod checks;
mod effect_records;
mod gate;
mod late_tools;

pub use late_tools::ToolSource;

/// A trusted rewrite of tool requests before policy (the `tool_request` join point).
pub trait ToolRequestMiddleware: Send + Sync {
    /// How a denial caused by this middleware names it.
    fn name(&self) -> &str;
    /// A rewritten request, or `None` to leave it as it is.
    fn rewrite(&self, request: &ToolRequest) -> Option<ToolRequest>;
}

/// A call as middleware sees it. `classification` may only go up.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolRequest {
    /// The tool called; a rewrite may name another tool of the plan.
    pub name: String,
    /// The call's arguments.
    pub input: Value,
    /// The call's data classification; a rewrite that lowers it is denied.
    pub classification: Classification,
}

#[derive(Debug, Clone, PartialEq)]
struct Denial {
    step: PipelineStep,
    reason: String,
}

impl Denial {
    /// What the model reads, and the outcome recorded, for a call refused before it ran.
    fn into_result(self) -> (ToolOutput, CallOutcome) {
        let text = format!(
            "denied at {}: {}. Nothing was run.",
            self.step.as_str(),
            self.reason
        );
        let outcome = CallOutcome::Denied {
            step: self.step,
            reason: self.reason,
        };
        (ToolOutput::error(text), outcome)
    }
}

fn deny<T>(step: PipelineStep, reason: impl Into<String>) -> Result<T, Denial> {
    Err(Denial {
        step,
        reason: reason.into(),
    })
}

/// A call that has passed some steps of the pipeline.
struct Pending<'p> {
    id: String,
    tool: &'p BoundTool,
    input: Value,
    classification: Classification,
    paths: Vec<(String, PathBuf)>,
}

/// The end of one call's trip through the pipeline.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRecord {
    /// The tool that ran: the one a middleware rewrote to, else the one proposed.
    pub tool: String,
    /// The input it ran with (after any rewrite); the proposed input for a denied call.
    pub input: Value,
    /// What the model is sent, already cut to the executor's `result_cap`.
    pub result: ToolResult,
    /// How the call ended, denials included.
    pub outcome: CallOutcome,
    /// Wall time from the call's arrival to its result, through the whole pipeline.
    pub duration: Duration,
    /// What the call's hooks decided (PreToolUse, PermissionRequest, PostToolUse), in order.
    pub hooks: Vec<HookDecided>,
}

/// Per model step: which turn, which snapshot, which cancellation.
#[derive(Debug, Clone)]
pub struct StepContext {
    /// The session's turn the step belongs to.
    pub turn: u32,
    /// The model and tool plan that proposed the calls.
    pub snapshot: StepSnapshot,
    /// Cancels the step's calls; each dispatch runs under a child of it.
    pub cancel: CancellationToken,
    /// Where the step's calls send their output while they run (a person watching).
    pub output: ToolOutputSink,
    /// The person's own calls (a `!command` typed at the REPL): nobody is asked to approve
    /// what they typed themselves. Every other step still applies (policy, hooks, sandbox).
    pub by_person: bool,
}

/// An executor's deadlines and result cap; by default 120 s, at most 3600 s, 65536 characters.
#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// Dispatch deadline when the call names none (in its tool's declared deadline argument).
    pub default_deadline: Duration,
    /// Longest deadline a call may ask for.
    pub max_deadline: Duration,
    /// Characters of a tool_result kept; the rest is cut with a visible marker.
    pub result_cap: usize,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        ExecutorConfig {
            default_deadline: Duration::from_secs(120),
            max_deadline: Duration::from_secs(3600),
            result_cap: 64 * 1024,
        }
    }
}

/// Extra time a handler gets past its deadline to report its own timeout (bash kills its
/// process group at the deadline and says so) before the executor gives up on it.
const DEADLINE_GRACE: Duration = Duration::from_secs(5);

/// The services a session's pipeline needs, passed explicitly.
pub struct ToolExecutor {
    session_id: SessionId,
    plan: BoundToolPlan,
    policy: SessionPolicy,
    workspace: Arc<dyn Workspace>,
    hooks: Arc<HookRegistry>,
    approver: Arc<dyn Approver>,
    gate: ApprovalGate,
    middleware: Vec<Arc<dyn ToolRequestMiddleware>>,
    validators: HashMap<String, jsonschema::Validator>,
    locks: ResourceLocks,
    timeline: Option<Arc<SessionTimeline>>,
    cognition: Arc<Mutex<CognitiveState>>,
    config: ExecutorConfig,
    /// Checkpointed sessions only: a receipt before every effect.
    receipts: Option<Arc<ReceiptStore>>,
    /// Checkpointed sessions only: the files each effectful call changed, kept for a rewind.
    file_history: Option<Arc<FileHistory>>,
    /// Checkpointed sessions only: masked rows for hook failures.
    ledger: Option<Arc<EvidenceLedger>>,
}

/// Why an executor could not be built or given more tools.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    /// A tool's input schema does not compile, so its calls could not be checked.
    #[error("tool {tool}: input_schema is not a valid JSON Schema: {message}")]
    BadSchema {
        /// The tool's name.
        tool: String,
        /// The schema compiler's error.
        message: String,
    },
}

/// What [`ToolExecutor::new`] is built from.
pub struct ExecutorParts {
    /// The session whose calls it runs.
    pub session_id: SessionId,
    /// The tools offered, before the policy's deny list and allow-list narrow them.
    pub plan: BoundToolPlan,
    /// The session's policy: what may run and who must approve it.
    pub policy: SessionPolicy,
    /// Where the calls act.
    pub workspace: Arc<dyn Workspace>,
    /// The hooks run before and after each call.
    pub hooks: Arc<HookRegistry>,
    /// Who answers a call that prompts.
    pub approver: Arc<dyn Approver>,
    /// Trusted rewrites of each call, applied in order before policy.
    pub middleware: Vec<Arc<dyn ToolRequestMiddleware>>,
    /// Where `tool.called` and `tool.completed` rows go; `None` records nothing.
    pub timeline: Option<Arc<SessionTimeline>>,
    /// The session's plan and hypotheses, which the cognitive tools change.
    pub cognition: Arc<Mutex<CognitiveState>>,
    /// Deadlines and the result cap.
    pub config: ExecutorConfig,
}

impl ToolExecutor {
    /// Compile every tool's schema once. The plan is narrowed by the session's deny list and
    /// tool allow-list (a new generation), so denied tools are never shown to the model.
    pub fn new(parts: ExecutorParts) -> Result<Self, ExecutorError> {
        let mut removed = parts.policy.deny_list.clone();
        if parts.policy.tool_allow_list.is_some() {
            removed.extend(
                parts
                    .plan
                    .tools()
                    .iter()
                    .map(|t| t.spec.name.clone())
                    .filter(|name| !parts.policy.allows_tool(name)),
            );
        }
        let plan = parts.plan.without(&removed);
        let mut validators = HashMap::new();
        for t in plan.tools() {
            let v = jsonschema::validator_for(&t.spec.input_schema).map_err(|e| {
                ExecutorError::BadSchema {
                    tool: t.spec.name.clone(),
                    message: e.to_string(),
                }
            })?;
            validators.insert(t.spec.name.clone(), v);
        }
        Ok(ToolExecutor {
            session_id: parts.session_id,
            plan,
            policy: parts.policy,
            workspace: parts.workspace,
            hooks: parts.hooks,
            approver: parts.approver,
            gate: ApprovalGate::new(),
            middleware: parts.middleware,
            validators,
            locks: ResourceLocks::new(),
            timeline: parts.timeline,
            cognition: parts.cognition,
            config: parts.config,
            receipts: None,
            file_history: None,
            ledger: None,
        })
    }

    /// Record the files every effectful call changes, for `/rewind` (checkpointed sessions).
    pub fn with_file_history(mut self, history: Arc<FileHistory>) -> Self {
        self.file_history = Some(history);
        self
    }

    /// Give every effectful call a durable receipt before dispatch (step 7).
    pub fn with_effect_receipts(mut self, receipts: Arc<ReceiptStore>) -> Self {
        self.receipts = Some(receipts);
        self
    }

    /// Write masked evidence rows for hook failures.
    pub fn with_ledger(mut self, ledger: Arc<EvidenceLedger>) -> Self {
        self.ledger = Some(ledger);
        self
    }

    /// The tools offered, as narrowed by the policy (and grown by late tools).
    pub fn plan(&self) -> &BoundToolPlan {
        &self.plan
    }

    pub(crate) fn policy(&self) -> &SessionPolicy {
        &self.policy
    }

    pub(crate) fn workspace(&self) -> &Arc<dyn Workspace> {
        &self.workspace
    }

    /// The approval gate, whose permission mode a person switches during a session.
    pub fn gate(&self) -> &ApprovalGate {
        &self.gate
    }

    /// Run a batch proposed by one model reply. Consecutive read-only calls run concurrently;
    /// every other call runs alone. Results come back in the proposed order.
    pub async fn execute_batch(&self, calls: Vec<ToolCall>, step: &StepContext) -> Vec<CallRecord> {
        let mut records = Vec::with_capacity(calls.len());
        let mut parallel: Vec<ToolCall> = Vec::new();
        for call in calls {
            let safe = self
                .plan
                .get(&call.name)
                .is_some_and(|t| t.spec.safety == SafetyLevel::Safe);
            if safe {
                parallel.push(call);
                continue;
            }
            records.extend(join_all(parallel.drain(..).map(|c| self.execute(c, step))).await);
            records.push(self.execute(call, step).await);
        }
        records.extend(join_all(parallel.drain(..).map(|c| self.execute(c, step))).await);
        records
    }

    /// One call through the whole pipeline.
    pub async fn execute(&self, call: ToolCall, step: &StepContext) -> CallRecord {
        let started = Instant::now();
        self.record(TimelineEvent::ToolCalled {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            input: call.input.clone(),
            classification: self.plan.get(&call.name).map(|t| t.spec.classification()),
        });
        let mut hooks = Vec::new();
        let (tool, input, mut result, outcome) = match self.authorize(&call, step, &mut hooks).await
        {
            Err(denial) => {
                let (output, outcome) = denial.into_result();
                (call.name.clone(), call.input.clone(), output, outcome)
            }
            Ok(pending) => {
                let (output, outcome) = self.run(&pending, step, &mut hooks).await;
                (
                    pending.tool.spec.name.clone(),
                    pending.input,
                    output,
                    outcome,
                )
            }
        };
        cap_in_place(&mut result.content, self.config.result_cap);
        let record = CallRecord {
            tool,
            input,
            result: ToolResult {
                tool_use_id: call.id,
                content: result.content,
                is_error: result.is_error,
                images: result.images,
            },
            outcome,
            duration: started.elapsed(),
            hooks,
        };
        self.record(TimelineEvent::ToolCompleted {
            call_id: record.result.tool_use_id.clone(),
            tool: record.tool.clone(),
            outcome: record.outcome.clone(),
            is_error: record.result.is_error,
            content: record.result.content.clone(),
            images: record.result.images.iter().map(|i| i.digest()).collect(),
            duration_ms: record.duration.as_millis() as u64,
        });
        record
    }

    /// Steps 1 to 6: everything that may refuse the call before anything runs.
    async fn authorize<'p>(
        &'p self,
        call: &ToolCall,
        step: &StepContext,
        hooks: &mut Vec<HookDecided>,
    ) -> Result<Pending<'p>, Denial> {
        let pending = self.check_scope(&call.id, &call.name, call.input.clone())?;
        let pending = self.apply_request_middleware(pending)?;
        self.check_policy(&pending)?;
        self.check_schema(&pending)?;
        let (pending, permission_asked) = self.run_pre_tool_use_hooks(pending, step, hooks).await?;
        self.approve(&pending, permission_asked, step, hooks)
            .await?;
        Ok(pending)
    }

    /// Steps 7 to 10: effect receipt, locks, dispatch, PostToolUse.
    async fn run(
        &self,
        pending: &Pending<'_>,
        step: &StepContext,
        hooks: &mut Vec<HookDecided>,
    ) -> (ToolOutput, CallOutcome) {
        let receipted = match self.accept_receipt(pending, step) {
            Ok(r) => r,
            Err(d) => return d.into_result(),
        };
        let _held = self.locks.acquire(&self.resource_claim(pending)).await;
        let watch = match self.watch_files(pending, receipted) {
            Ok(w) => w,
            Err(d) => return d.into_result(),
        };
        let (output, outcome) = self.dispatch_with_deadline(pending, step).await;
        self.record_effect(pending, step, (receipted, watch), (&output, &outcome));
        self.run_post_tool_use_hooks(pending, (output, outcome), step, hooks)
            .await
    }

    // --- 8. resource locks ------------------------------------------------------------------

    fn resource_claim(&self, pending: &Pending<'_>) -> ResourceClaim {
        let mut claim = ResourceClaim::default();
        match &pending.tool.spec.resource_keys {
            ResourceKeyRule::None => {}
            ResourceKeyRule::Workspace => claim.workspace = true,
            ResourceKeyRule::Fixed(key) => {
                claim.keys.insert(key.clone());
            }
            ResourceKeyRule::Keys(keys) => claim.keys.extend(keys.iter().cloned()),
            ResourceKeyRule::PathArgs => {
                for (_, p) in &pending.paths {
                    claim.keys.insert(format!("file:{}", p.display()));
                }
            }
        }
        claim
    }

    // --- 9. dispatch ------------------------------------------------------------------------

    /// The deadline the call asks for in its tool's declared deadline argument, if any.
    fn deadline_for(&self, pending: &Pending<'_>) -> Duration {
        pending
            .tool
            .spec
            .requested_deadline(&pending.input)
            .unwrap_or(self.config.default_deadline)
            .min(self.config.max_deadline)
    }

    async fn dispatch_with_deadline(
        &self,
        pending: &Pending<'_>,
        step: &StepContext,
    ) -> (ToolOutput, CallOutcome) {
        let deadline = self.deadline_for(pending);
        let cancel = step.cancel.child_token();
        let ctx = ToolContext {
            session_id: self.session_id.clone(),
            call_id: pending.id.clone(),
            correlation_id: step.snapshot.correlation_id.clone(),
            model_id: step.snapshot.model_id.clone(),
            workspace: self.workspace.clone(),
            resolved_paths: pending.paths.clone(),
            deadline,
            cancel: cancel.clone(),
            cognition: self.cognition.clone(),
            output: step.output.for_call(&pending.id),
        };
        let call = pending.tool.handler.call(&pending.input, &ctx);
        match tokio::time::timeout(deadline + DEADLINE_GRACE, call).await {
            Ok(out) => {
                let outcome = if out.is_error {
                    CallOutcome::Failed
                } else {
                    CallOutcome::Succeeded
                };
                (out, outcome)
            }
            Err(_) => {
                cancel.cancel();
                (
                    ToolOutput::error(format!(
                        "timed out after {}s; the work it started may still be running",
                        deadline.as_secs()
                    )),
                    CallOutcome::TimedOut,
                )
            }
        }
    }

    // --- 10. PostToolUse -----------------------------------------------------------------------

    async fn run_post_tool_use_hooks(
        &self,
        pending: &Pending<'_>,
        (mut output, outcome): (ToolOutput, CallOutcome),
        step: &StepContext,
        hooks: &mut Vec<HookDecided>,
    ) -> (ToolOutput, CallOutcome) {
        if !self.hooks.has(HookEventKind::PostToolUse) {
            return (output, outcome);
        }
        let hook = self
            .dispatch_hook(
                HookEvent::PostToolUse {
                    tool_name: pending.tool.spec.name.clone(),
                    tool_input: pending.input.clone(),
                    tool_use_id: pending.id.clone(),
                    tool_response: ToolResponsePayload {
                        content: output.content.clone(),
                        is_error: output.is_error,
                    },
                },
                step,
                hooks,
            )
            .await;
        if let HookDecision::Block(reason) = hook.decision {
            return (
                ToolOutput::error(format!(
                    "the tool ran, but its result was withheld by a PostToolUse hook: {reason}"
                )),
                CallOutcome::Withheld { reason },
            );
        }
        for context in hook.added_context {
            output.content.push_str("\n[hook context] ");
            output.content.push_str(&context);
        }
        (output, outcome)
    }

    // --- records ----------------------------------------------------------------------------

    /// Run one event's hooks for the call whose decisions `decided` gathers.
    async fn dispatch_hook(
        &self,
        event: HookEvent,
        step: &StepContext,
        decided: &mut Vec<HookDecided>,
    ) -> HookOutcome {
        let outcome = self
            .hooks
            .dispatch(HookEnvelope {
                session_id: self.session_id.clone(),
                turn: step.turn,
                plan_generation: self.plan.generation(),
                verify_attempt: 0,
                correlation_id: Some(step.snapshot.correlation_id.to_string()),
                cwd: self.workspace.root().display().to_string(),
                event,
            })
            .await;
        for f in &outcome.failures {
            let (row, evidence) = hook_failure_rows(f);
            self.record(row);
            if let Some(ledger) = &self.ledger {
                ledger.record("hook_failed", evidence);
            }
        }
        decided.extend(outcome.decided.iter().cloned());
        outcome
    }

    /// The timeline is an observation log: a failed write is reported, never fatal.
    fn record(&self, event: TimelineEvent) {
        if let Some(tl) = &self.timeline
            && let Err(e) = tl.append(&self.session_id, event)
        {
            tracing::warn!("timeline write failed: {e}");
        }
    }
}

/// A failed hook as its timeline row and the detail of its `hook_failed` ledger row; the
/// loop's own hook dispatch records failures the same way. Every failure passes here, so here
/// it is also said as a warning: a hook answering invalid JSON must not fail without a word.
pub(crate) fn hook_failure_rows(f: &crate::hooks::HookFailure) -> (TimelineEvent, Value) {
    tracing::warn!("hook {} ({}) failed: {}", f.hook, f.event.name(), f.error);
    let row = TimelineEvent::HookFailed {
        hook: f.hook.clone(),
        event: f.event.name().to_string(),
        error: f.error.clone(),
    };
    let evidence = serde_json::json!({"hook": f.hook, "event": f.event.name(), "error": f.error});
    (row, evidence)
}

/// Cut `text` to at most `cap` bytes on a character boundary, saying so.
pub fn cap_in_place(text: &mut String, cap: usize) {
    if text.len() <= cap {
        return;
    }
    let mut cut = cap;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let dropped = text.len() - cut;
    text.truncate(cut);
    text.push_str(&format!(
        "\n[... {dropped} bytes of tool output truncated ...]"
    ));
}
