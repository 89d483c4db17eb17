//! The judge-only role: a model held for decisions (graders, tournaments), never a session's
//! root model. It has its own type so the compiler keeps it out of sessions.

use std::sync::Arc;

use crate::conversation::{Message, Usage};
use crate::ids::{CorrelationId, StepSnapshot};
use crate::model::{Model, ModelError, ModelRequest};
use crate::tools::plan::BoundToolPlan;

/// A model held for decisions only. It deliberately does not implement `Model`, so it cannot
/// be handed to a session as its root model; it sees no tools and must answer with text.
pub struct JudgeModel {
    inner: Arc<dyn Model>,
    id: String,
    plan: BoundToolPlan,
}

/// A judge's answer and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgeDecision {
    /// The answer's text.
    pub text: String,
    /// What the call used.
    pub usage: Usage,
}

impl JudgeModel {
    /// A judge over `inner`; its id is `judge:` and the inner model's id.
    pub fn new(inner: Arc<dyn Model>) -> Self {
        let id = format!("judge:{}", inner.id());
        JudgeModel {
            inner,
            id,
            plan: BoundToolPlan::new(0, Vec::new()),
        }
    }

    /// `judge:` followed by the inner model's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Ask one question; the answer is text (tool calls are not offered).
    pub async fn decide(&self, system: &str, prompt: &str) -> Result<JudgeDecision, ModelError> {
        let messages = [Message::user_text(prompt)];
        let snapshot = StepSnapshot {
            model_id: self.id.clone(),
            plan_generation: self.plan.generation(),
            plan_hash: self.plan.hash().clone(),
            correlation_id: CorrelationId::new("judge"),
            round: 0,
        };
        let reply = self
            .inner
            .complete(&ModelRequest {
                system,
                messages: &messages,
                plan: &self.plan,
                snapshot: &snapshot,
                force_text: true,
                deltas: Default::default(),
            })
            .await?;
        Ok(JudgeDecision {
            text: reply.message.text(),
            usage: reply.usage,
        })
    }
}
