//! The optional reflection call (scaffold `reflection = "model_call"`): after a round, ask the
//! model for its hypotheses, confidence and next action as JSON. It costs one model call per
//! round, so it is off by default. The answer never enters the conversation.

use std::sync::Mutex;

use serde::Deserialize;

use crate::cognition::{CognitiveState, Hypothesis};
use crate::conversation::{Message, Usage};
use crate::model::{Model, ModelRequest};

const ASK: &str = "[reflection] Without calling tools, reply with JSON only: \
{\"hypotheses\": [{\"statement\": str, \"confidence\": 0..1, \"refuted_by\": optional regex}], \
\"next_action\": str}";

#[derive(Deserialize)]
struct Reflection {
    hypotheses: Vec<Hypothesis>,
    next_action: Option<String>,
}

/// Ask for a reflection and record it. Returns the call's usage, or `None` when the call
/// failed or the answer was not a reflection (both ignored: reflection is advisory).
pub async fn reflect(
    model: &dyn Model,
    base: &ModelRequest<'_>,
    cognition: &Mutex<CognitiveState>,
) -> Option<Usage> {
    let mut messages = base.messages.to_vec();
    messages.push(Message::user_text(ASK));
    let request = ModelRequest {
        messages: &messages,
        force_text: true,
        // A reflection is the loop's own note, not part of the reply a person watches.
        deltas: Default::default(),
        ..base.clone()
    };
    let reply = model.complete(&request).await.ok()?;
    let text = reply.message.text();
    let json = text
        .find('{')
        .and_then(|start| text.rfind('}').map(|end| &text[start..=end]))?;
    if let Ok(r) = serde_json::from_str::<Reflection>(json)
        && let Ok(mut c) = cognition.lock()
    {
        c.record_reflection(r.hypotheses, r.next_action);
    }
    Some(reply.usage)
}
