//! The loop's conversation edits and what it hands the recorder: appending messages (each a
//! timeline row and an event), ledger rows of a batch, plan revisions, hook dispatch, the
//! loop's side of a checkpoint save. Kept apart from agentic_loop.rs so that file reads as the
//! six stages; `recorder.rs` owns where the records go.

use serde_json::json;

use super::agentic_loop::AgenticLoop;
use super::durable_session::{LoopSide, Save};
use super::events::LoopEvent;
use crate::conversation::{AssistantTurn, ContentBlock, Message, Role, ToolCall};
use crate::hooks::{HookEnvelope, HookEvent, HookOutcome};
use crate::ids::StepSnapshot;
use crate::store::timeline::{CallOutcome, TimelineEvent};
use crate::tools::executor::{CallRecord, hook_failure_rows};

/// What the model sees after a reply the person interrupted.
pub(crate) const INTERRUPTED_NOTE: &str = "[the person interrupted this reply]";

impl AgenticLoop {
    pub(super) fn append_user(&mut self, message: Message) {
        self.recorder.record(TimelineEvent::UserMessage {
            message: message.without_images(),
        });
        self.transcript.push(message);
    }

    pub(super) fn append_assistant(&mut self, reply: AssistantTurn, snapshot: &StepSnapshot) {
        self.recorder.emit(LoopEvent::AssistantMessage {
            text: reply.message.text(),
            // Counted in place: `tool_calls()` would clone every input just to count them.
            tool_calls: reply
                .message
                .content
                .iter()
                .filter(|b| matches!(b, ContentBlock::ToolUse { .. }))
                .count(),
            usage: reply.usage,
        });
        self.recorder.record(TimelineEvent::AssistantMessage {
            message: reply.message.clone(),
            usage: reply.usage,
            stop_reason: reply.stop_reason,
            snapshot: snapshot.clone(),
        });
        self.transcript.push_reply(reply.message, &reply.usage);
    }

    /// Keep every tool_use paired with a tool_result even when the calls never ran.
    pub(super) fn append_unrun_results(&mut self, calls: &[ToolCall], why: &str) {
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

    /// Ledger rows for the notable calls of a batch: denials and uncertain outcomes.
    pub(super) fn evidence_for(&self, records: &[CallRecord]) {
        for r in records {
            let kind = match &r.outcome {
                CallOutcome::Denied { .. } => "tool_denied",
                CallOutcome::TimedOut | CallOutcome::Uncertain { .. } => "uncertain_effect",
                _ => continue,
            };
            self.recorder.evidence(
                kind,
                json!({
                    "call_id": r.result.tool_use_id,
                    "tool": r.tool,
                    "outcome": r.outcome,
                    "input": r.input,
                    "result_first_line": r.result.content.lines().next().unwrap_or(""),
                }),
            );
        }
    }

    pub(super) fn revision_count(&self) -> usize {
        self.p
            .cognition
            .lock()
            .map(|c| c.revisions.len())
            .unwrap_or(0)
    }

    pub(super) fn record_new_revisions(&self, before: usize) {
        let revisions: Vec<_> = match self.p.cognition.lock() {
            Ok(c) => c.revisions.iter().skip(before).cloned().collect(),
            Err(_) => return,
        };
        for r in revisions {
            let revision = serde_json::to_value(&r).unwrap_or_default();
            self.recorder
                .record(TimelineEvent::PlanRevised { revision });
        }
    }

    pub(super) fn record_verification(&self, attempt: u32, verdict: &str, misses: &[String]) {
        self.recorder.emit(LoopEvent::Verification {
            attempt,
            verdict: verdict.to_string(),
            misses: misses.to_vec(),
        });
        self.recorder.record(TimelineEvent::Verification {
            attempt,
            verdict: verdict.to_string(),
            misses: misses.to_vec(),
        });
        if verdict != "passed" {
            self.recorder.evidence(
                "verification_failed",
                json!({"attempt": attempt, "verdict": verdict, "misses": misses}),
            );
        }
    }

    pub(super) async fn hook(
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
                turn: self.counters.turn(),
                plan_generation: self.p.executor.plan().generation(),
                verify_attempt,
                correlation_id,
                cwd: self.p.executor.workspace().root().display().to_string(),
                event,
            })
            .await;
        for f in &outcome.failures {
            let (row, evidence) = hook_failure_rows(f);
            self.recorder.record(row);
            self.recorder.evidence("hook_failed", evidence);
        }
        for decided in &outcome.decided {
            self.recorder.emit(LoopEvent::hook_decision(decided, None));
        }
        outcome
    }

    /// Save the checkpoint at `save` with the loop's side of the state (through the
    /// recorder, which reports a failure).
    pub(super) fn save(&mut self, save: Save<'_>) -> Result<(), String> {
        let side = LoopSide {
            session_id: &self.p.session_id,
            model: self.p.model.id(),
            counters: self.counters,
            system_prompt_hash: self.transcript.system_hash(),
            cognition: self.cognition(),
            guards: self.guards.counters(),
            messages: self.transcript.messages(),
        };
        self.recorder.save(save, side)
    }

    /// A reply the person interrupted: what streamed of it stays as the assistant's (partial)
    /// message, and a note says it was cut off, so the model reads the next prompt as a new
    /// message rather than as more of the one it was answering (as Claude Code does).
    pub(super) fn append_interrupted(&mut self, streamed: &str) {
        if !streamed.trim().is_empty() {
            // Not a reply the model finished (no usage, no stop reason): the conversation's
            // copy only, not a timeline row of a model reply.
            self.transcript.push(Message::assistant_text(streamed));
        }
        self.append_user(Message::user_text(INTERRUPTED_NOTE));
    }
}
