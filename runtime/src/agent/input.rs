//! Stage 1 of a turn, preparing the input: the session's start row on its first turn and the
//! UserPromptSubmit hook, which may block or rewrite the prompt before it joins the
//! conversation. Its own file because it is the only stage that runs before the model is
//! consulted.

use super::agentic_loop::AgenticLoop;
use super::events::LoopEvent;
use crate::conversation::Message;
use crate::hooks::{HookDecision, HookEvent};
use crate::store::timeline::TimelineEvent;

impl AgenticLoop {
    /// The session start row (first turn), UserPromptSubmit (block ends the turn, rewrite
    /// replaces the prompt), then the user message. The SessionStart hook follows the first
    /// checkpoint save, in `run_turn`.
    pub(super) async fn prepare_input(&mut self, prompt: &str) -> Result<(), String> {
        let turn = self.counters.start_turn();
        self.guards.start_turn();
        self.emit(LoopEvent::TurnStarted {
            session_id: self.p.session_id.to_string(),
            turn,
            model: self.model_id().to_string(),
        });
        if self.lifecycle.start() {
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
}
