//! The one restore path: a session's checkpoint back into a loop (messages, cognitive state
//! with plan and hypotheses, guard counters, usage, the interrupted turn with its pending
//! verification), then `resume_turn` settles the batch that was pending at the crash and goes
//! on. The timeline is never replayed; the in-process task graph is not recovered.
//!
//! The pending batch, call by call (never guessing in favour of running something twice):
//! - receipt `accepted` or `uncertain`: the effect started and its outcome is unknown. It is
//!   not run again; the model gets a tool_result saying so, the timeline and the ledger record
//!   it, and the receipt waits for `geode receipts reconcile`.
//! - receipt `committed`: the effect ran to its end before the crash; the model gets the
//!   result kept in the receipt, and nothing runs.
//! - receipt `reconciled`: a person said what happened; the model is told, nothing runs.
//! - no receipt: the call never reached dispatch (a receipt is durable before any effect
//!   starts), or it has no effect. It runs now, through the whole pipeline again (scope,
//!   policy, hooks, approval, a new receipt).

use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::agentic_loop::{AgenticLoop, TurnOutcome};
use super::compaction::pairing_problem;
use super::counters::SessionCounters;
use super::durable::{CheckpointState, PendingBatch, STATE_SCHEMA, TurnState};
use super::durable_session::Durable;
use super::ending::Ending;
use super::termination::TerminationReason;
use super::transcript::Transcript;
use crate::conversation::{Message, ToolCall, ToolResult};
use crate::hooks::{HookEvent, HookEventKind};
use crate::ids::{CorrelationId, SessionId, StepSnapshot};
use crate::store::StoreError;
use crate::store::checkpoint::{CheckpointStore, SessionRow, SessionStatus};
use crate::store::receipts::{Receipt, ReceiptState, ReconcileOutcome};
use crate::store::timeline::{CallOutcome, TimelineEvent};
use crate::tools::executor::CallRecord;

/// What a receipt becomes when a resume finds a receipt still `accepted`.
pub const CRASH_REASON: &str = "the geode process stopped (crash, kill or power loss) after \
                                dispatch and before the outcome was recorded";

/// A session's checkpoint as read from disk, checked for consistency.
#[derive(Debug, Clone)]
pub struct LoadedCheckpoint {
    /// The session's row in the checkpoint store.
    pub row: SessionRow,
    /// The content of `state.json`.
    pub state: CheckpointState,
    /// The conversation: the compaction summary (if any), then the live rows.
    pub messages: Vec<Message>,
}

/// Read a session's checkpoint without resuming it (`geode resume` reads the saved model and
/// effort first; tests inspect what a killed process left).
pub fn load_checkpoint(root: &Path, id: &SessionId) -> Result<LoadedCheckpoint, StoreError> {
    load_from(&CheckpointStore::inspect(root, id)?)
}

/// The session under `root` updated last, for `geode resume --last`.
pub fn latest_session(root: &Path) -> Option<SessionId> {
    let (rows, problems) = CheckpointStore::list(root);
    for p in problems {
        tracing::warn!("skipping an unreadable session: {p}");
    }
    rows.into_iter().next().map(|r| r.session_id)
}

pub(crate) fn load_from(store: &CheckpointStore) -> Result<LoadedCheckpoint, StoreError> {
    let state: CheckpointState = store.read_state(STATE_SCHEMA)?;
    let damaged = |message: String| StoreError::Json {
        path: store.state_path().display().to_string(),
        message: format!("{message}; the checkpoint is damaged and was left as it is"),
    };
    if &state.session_id != store.session_id() {
        return Err(damaged(format!(
            "it belongs to session {}, not {}",
            state.session_id,
            store.session_id()
        )));
    }
    let view = &state.conversation;
    if view.live_from_seq > view.next_seq {
        return Err(damaged(format!(
            "live rows {}..{} are not a range",
            view.live_from_seq, view.next_seq
        )));
    }
    let mut messages = view.prefix.clone();
    messages.extend(store.messages(view.live_from_seq, view.next_seq)?);
    match &state.pending_batch {
        Some(batch) => {
            let last = messages.last().map(Message::tool_calls).unwrap_or_default();
            if last != batch.calls {
                return Err(damaged(
                    "the pending batch is not the last assistant message's tool calls".into(),
                ));
            }
        }
        None => {
            if let Some(problem) = pairing_problem(&messages, false) {
                return Err(damaged(format!(
                    "the conversation is not well paired: {problem}"
                )));
            }
        }
    }
    if let Some(problem) = pairing_problem(&messages, true) {
        return Err(damaged(format!(
            "the conversation is not well paired: {problem}"
        )));
    }
    Ok(LoadedCheckpoint {
        row: store.row()?,
        state,
        messages,
    })
}

/// How a call of the pending batch is settled at resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum Disposition {
    /// Started, outcome unknown: not run again, reported.
    Uncertain,
    /// Ran to its end before the crash: its receipt's result is used.
    Committed,
    /// A person recorded its outcome.
    Reconciled,
    /// Never started (or has no effect): runs again through the pipeline.
    Rerun,
}

impl Disposition {
    /// The disposition's snake_case name, as it is reported.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A call of the interrupted batch and how the resume settled it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PendingCall {
    /// The id the model gave the call.
    pub call_id: String,
    /// The tool's name.
    pub tool: String,
    /// How the resume settled it.
    pub disposition: Disposition,
}

/// What a resume found, for the driver to report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RestoreReport {
    /// The session resumed.
    pub session_id: SessionId,
    /// The session's status before the resume.
    pub from_status: SessionStatus,
    /// Messages in the restored conversation.
    pub messages: usize,
    /// A turn (or a batch of it) was interrupted and is left to finish.
    pub turn_in_progress: bool,
    /// The calls of the interrupted batch, in the model's order.
    pub pending: Vec<PendingCall>,
    /// Receipts still `accepted` at the resume, now `uncertain`.
    pub newly_uncertain: Vec<Receipt>,
    /// Every receipt of the session waiting for reconciliation.
    pub unresolved: Vec<Receipt>,
}

/// Why a session could not be resumed.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// Finishing was asked of a session with no interrupted turn.
    #[error("session {0} has no interrupted turn to finish; give a prompt to continue the session")]
    NothingToFinish(SessionId),
    /// The checkpoint could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn disposition(receipt: Option<&Receipt>) -> Disposition {
    match receipt.map(|r| r.state) {
        None => Disposition::Rerun,
        Some(ReceiptState::Committed) => Disposition::Committed,
        Some(ReceiptState::Reconciled) => Disposition::Reconciled,
        Some(ReceiptState::Accepted | ReceiptState::Uncertain) => Disposition::Uncertain,
    }
}

/// The record a pending call settles to without running; `None` for `Rerun`. A receipt keeps
/// the raw result, from before PostToolUse; with PostToolUse hooks configured (they may
/// withhold results) only the outcome is shown.
fn settled_record(
    call: &ToolCall,
    receipt: Option<&Receipt>,
    session: &SessionId,
    post_hooks: bool,
) -> Option<CallRecord> {
    let (content, is_error, outcome) = match (disposition(receipt), receipt) {
        (Disposition::Committed, Some(r)) => {
            let failed = r.is_error.unwrap_or(false);
            let result = if post_hooks {
                format!(
                    "(it {}; its result is not shown because PostToolUse hooks could not review \
                     it after the restart)",
                    if failed { "failed" } else { "succeeded" }
                )
            } else {
                r.result.clone().unwrap_or_default()
            };
            (
                format!(
                    "[recovered from the effect receipt: this call ran to its end before the \
                     runtime restarted, and it was not run again]\n{result}"
                ),
                failed,
                if failed {
                    CallOutcome::Failed
                } else {
                    CallOutcome::Succeeded
                },
            )
        }
        (Disposition::Reconciled, Some(r)) => {
            let done = r.outcome.as_deref() == Some(ReconcileOutcome::Done.as_str());
            (
                format!(
                    "[reconciled by hand] This call was dispatched before the runtime stopped \
                     and its result was lost. A person checked and recorded that its effect {}. \
                     It was not run again.",
                    if done {
                        "took place"
                    } else {
                        "did not take place"
                    }
                ),
                !done,
                if done {
                    CallOutcome::Succeeded
                } else {
                    CallOutcome::Failed
                },
            )
        }
        (Disposition::Uncertain, _) => (
            format!(
                "outcome unknown: this call was dispatched, then the runtime stopped (crash, kill \
                 or power loss) before its result was saved. It was NOT run again, because \
                 running it twice could repeat its effect. Check what it did (files, processes) \
                 before relying on it or running it again. A person can record the outcome with \
                 `geode receipts reconcile {} --session {session} --outcome done|not-done`.",
                call.id
            ),
            true,
            CallOutcome::Uncertain {
                reason: CRASH_REASON.into(),
            },
        ),
        _ => return None,
    };
    Some(CallRecord {
        tool: call.name.clone(),
        input: call.input.clone(),
        result: ToolResult {
            tool_use_id: call.id.clone(),
            content,
            is_error,
            images: Vec::new(),
        },
        outcome,
        duration: Duration::ZERO,
        // Its hooks, if any ran, answered before the crash; their words were not kept.
        hooks: Vec::new(),
    })
}

impl AgenticLoop {
    /// Put a loaded checkpoint into this freshly built loop.
    pub(crate) fn restore(
        &mut self,
        loaded: LoadedCheckpoint,
        durable: Durable,
        newly_uncertain: Vec<Receipt>,
    ) -> Result<RestoreReport, StoreError> {
        let LoadedCheckpoint {
            row,
            state,
            messages,
        } = loaded;
        let mut pending = Vec::new();
        if let Some(batch) = &state.pending_batch {
            for call in &batch.calls {
                let receipt = durable.receipt(&call.id)?;
                pending.push(PendingCall {
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    disposition: disposition(receipt.as_ref()),
                });
            }
        }
        let unresolved = durable.uncertain_receipts()?;
        let report = RestoreReport {
            session_id: self.p.session_id.clone(),
            from_status: row.status,
            messages: messages.len(),
            turn_in_progress: state.turn.is_some() || state.pending_batch.is_some(),
            pending,
            newly_uncertain,
            unresolved,
        };
        let saved = messages.len();
        self.take_state(&state, messages);
        self.lifecycle.resumed();
        let interrupted = report
            .turn_in_progress
            .then(|| (state.turn.unwrap_or_default(), state.pending_batch));
        self.recorder
            .durable
            .restore(durable, state.conversation, saved, interrupted);
        self.recorder.record(TimelineEvent::SessionResumed {
            from_status: report.from_status.to_string(),
            messages: report.messages,
            pending_calls: report.pending.len(),
            uncertain_calls: report
                .unresolved
                .iter()
                .map(|r| r.call_id.clone())
                .collect(),
        });
        for r in &report.newly_uncertain {
            self.recorder.evidence(
                "uncertain_effect",
                serde_json::json!({"call_id": r.call_id, "tool": r.tool, "input": r.input,
                                   "reason": CRASH_REASON}),
            );
        }
        Ok(report)
    }

    /// The conversation and loop state of a checkpoint, into this loop (a resume, a rewind).
    pub(super) fn take_state(&mut self, state: &CheckpointState, messages: Vec<Message>) {
        self.transcript = Transcript::restored(messages, state.system_prompt_hash.clone());
        if let Ok(mut c) = self.p.cognition.lock() {
            *c = state.cognition.clone();
        }
        self.guards.restore(state.guards.clone());
        self.counters =
            SessionCounters::restored(state.session_usage, state.turn_number, state.model_calls);
    }

    /// Continue a restored session: settle the batch pending at the crash, then finish the
    /// interrupted turn (`prompt = None`) or start a new one. A completed or failed session is
    /// reopened only when a new prompt asks for it.
    pub async fn resume_turn(
        &mut self,
        prompt: Option<&str>,
        cancel: &CancellationToken,
    ) -> Result<TurnOutcome, ResumeError> {
        let interrupted = self.recorder.durable.take_interrupted();
        if interrupted.is_none() && prompt.is_none() {
            return Err(ResumeError::NothingToFinish(self.p.session_id.clone()));
        }
        self.recorder.durable.reopen_if_closed()?;
        let start = HookEvent::SessionStart {
            source: "resume".into(),
        };
        self.hook(start, None, 0).await;
        self.recorder.durable.set_status(SessionStatus::Active);
        if let Some((mut turn, pending)) = interrupted {
            self.guards.start_turn();
            if let Some(batch) = pending
                && let Some(reason) = self.recover_batch(&mut turn, batch, cancel).await
                && (prompt.is_none() || reason == TerminationReason::CheckpointFailed)
            {
                return Ok(self.end_turn(&mut turn, Ending::stopped(reason)));
            }
            if prompt.is_none() {
                return Ok(self.drive(turn, cancel).await);
            }
        }
        match prompt {
            Some(p) => Ok(self.run_turn(p, cancel).await),
            None => Err(ResumeError::NothingToFinish(self.p.session_id.clone())),
        }
    }

    /// Settle the pending batch (see the module comment), save it as a completed batch, then
    /// observe and compact as after any batch.
    async fn recover_batch(
        &mut self,
        turn: &mut TurnState,
        batch: PendingBatch,
        cancel: &CancellationToken,
    ) -> Option<TerminationReason> {
        let plan = self.p.executor.plan();
        let snapshot = StepSnapshot {
            model_id: batch.model_id.clone(),
            plan_generation: plan.generation(),
            plan_hash: plan.hash().clone(),
            correlation_id: CorrelationId::new(batch.correlation_id.clone()),
            round: batch.round,
        };
        let session = self.p.session_id.clone();
        let post_hooks = self.p.hooks.has(HookEventKind::PostToolUse);
        let mut settled = Vec::with_capacity(batch.calls.len());
        let mut rerun = Vec::new();
        for call in &batch.calls {
            // An unreadable receipt counts as an uncertain one: never run on a guess.
            let receipt = self.recorder.durable.receipt(&call.id).unwrap_or_else(|e| {
                tracing::warn!("receipt of {}: {e}", call.id);
                Some(uncertain_placeholder(call, &session))
            });
            let record = settled_record(call, receipt.as_ref(), &session, post_hooks);
            self.recorder.record(TimelineEvent::ToolRecovered {
                call_id: call.id.clone(),
                tool: call.name.clone(),
                disposition: disposition(receipt.as_ref()).as_str().to_string(),
                content: record
                    .as_ref()
                    .map(|r| r.result.content.clone())
                    .unwrap_or_default(),
            });
            if record.is_none() {
                rerun.push(call.clone());
            }
            settled.push(record);
        }
        let revisions_before = self.revision_count();
        let mut reran = self
            .execute_calls(rerun, &snapshot, cancel, false)
            .await
            .into_iter();
        let records: Vec<CallRecord> = settled
            .into_iter()
            .filter_map(|s| s.or_else(|| reran.next()))
            .collect();
        self.take_results(turn, &records);
        let system = self.system_prompt(turn);
        self.after_batch(turn, &records, revisions_before, &system, &snapshot)
            .await
    }
}

fn uncertain_placeholder(call: &ToolCall, session: &SessionId) -> Receipt {
    Receipt {
        session_id: session.clone(),
        call_id: call.id.clone(),
        tool: call.name.clone(),
        input: call.input.clone(),
        input_sha256: String::new(),
        state: ReceiptState::Uncertain,
        outcome: Some("the receipt could not be read".into()),
        result: None,
        is_error: None,
        turn: 0,
        round: 0,
        accepted_at: String::new(),
        settled_at: None,
        note: None,
    }
}
