//! Stage 1 of a turn, preparing the input: the session's start row on its first turn and the
//! UserPromptSubmit hook, which may block or rewrite the prompt before it joins the
//! conversation. Its own file because it is the only stage that runs before the model is
//! consulted; a person's own `!command` between turns is input of that kind too.

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::agentic_loop::AgenticLoop;
use super::events::LoopEvent;
use crate::conversation::{Message, ToolCall};
use crate::hooks::{HookDecision, HookEvent};
use crate::store::timeline::TimelineEvent;
use crate::tools::executor::CallRecord;

impl AgenticLoop {
    /// The session start row (first turn), UserPromptSubmit (block ends the turn, rewrite
    /// replaces the prompt), then the user message. The SessionStart hook follows the first
    /// checkpoint save, in `run_turn`.
    pub(super) async fn prepare_input(&mut self, prompt: &str) -> Result<(), String> {
        let turn = self.counters.start_turn();
        self.guards.start_turn();
        self.recorder.emit(LoopEvent::TurnStarted {
            session_id: self.p.session_id.to_string(),
            turn,
            model: self.model_id().to_string(),
        });
        if self.lifecycle.start() {
            let plan = self.p.executor.plan();
            let policy = self.p.executor.policy();
            self.recorder.record(TimelineEvent::SessionStarted {
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

    /// A person's `!COMMAND` between turns: a `bash` call through the whole pipeline (scope,
    /// policy, hooks, approval, effect receipt, timeline) as the model's calls go, reported with
    /// the same events. Nothing joins the conversation here: the driver shows the record and
    /// hands it to the next prompt, so the model reads it with what the person asks next.
    pub async fn run_user_command(
        &mut self,
        command: &str,
        cancel: &CancellationToken,
    ) -> CallRecord {
        let id = format!("user-{}", uuid::Uuid::new_v4().simple());
        let snapshot = self.step_snapshot(&id, 0);
        let call = ToolCall {
            id,
            name: "bash".into(),
            input: json!({ "command": command }),
        };
        let mut records = self
            .execute_calls(vec![call], &snapshot, cancel, true)
            .await;
        // The executor answers every call it is given with exactly one record.
        let record = records.remove(0);
        for event in LoopEvent::call_ended(&record) {
            self.recorder.emit(event);
        }
        record
    }
}
