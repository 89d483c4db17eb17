//! One call, whatever its format: the agent's tools as a plan, the model run behind it, why a
//! call gets no answer, and the shaping of a reply into a stream of blocks that each format's
//! encoder writes as its own SSE events.

use std::sync::Arc;

use async_trait::async_trait;
use geode_runtime::conversation::{AssistantTurn, ContentBlock};
use geode_runtime::ids::{CorrelationId, StepSnapshot};
use geode_runtime::model::http::tool_arguments;
use geode_runtime::model::{DeltaSink, Model, ModelDelta, ModelError, ModelRequest};
use geode_runtime::policy::{PersonalDataClass, SafetyLevel};
use geode_runtime::tools::plan::{
    BoundTool, BoundToolPlan, ResourceKeyRule, ToolContext, ToolHandler, ToolOutput, ToolSpec,
};
use serde_json::Value;

use super::records::{AgentTool, CallStatus, RecordedRequest, WireFormat};

/// A request read from its wire format.
#[derive(Debug, Clone)]
pub(super) struct WireCall {
    /// The format it came in.
    pub format: WireFormat,
    /// Whether the agent asked for a stream.
    pub stream: bool,
    /// Chat Completions' `stream_options.include_usage`: a last chunk with the usage.
    pub include_usage: bool,
    /// The request in typed terms.
    pub request: RecordedRequest,
}

/// Why a call gets an error instead of an answer; each format has its own shape for each.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Refusal {
    /// No valid per-trial token.
    Unauthorized,
    /// The request is not readable in its format.
    BadRequest(String),
    /// A budget is used up.
    Budget(String),
    /// The model failed in a way a retry may fix.
    Transient(String),
    /// The model failed for good.
    Failed(String),
}

impl Refusal {
    /// The record's status.
    pub fn status(&self) -> CallStatus {
        match self {
            Refusal::Unauthorized => CallStatus::Unauthorized,
            Refusal::BadRequest(_) => CallStatus::BadRequest,
            Refusal::Budget(_) => CallStatus::BudgetExhausted,
            Refusal::Transient(_) | Refusal::Failed(_) => CallStatus::ModelError,
        }
    }

    /// The text the agent reads.
    pub fn message(&self) -> &str {
        match self {
            Refusal::Unauthorized => "invalid gateway token",
            Refusal::BadRequest(m)
            | Refusal::Budget(m)
            | Refusal::Transient(m)
            | Refusal::Failed(m) => m,
        }
    }

    /// A model's failure, the route's secrets cut from its text.
    pub fn from_model(e: &ModelError, secrets: &[String]) -> Self {
        let text = redact(&e.to_string(), secrets);
        if e.retryable() {
            Refusal::Transient(text)
        } else {
            Refusal::Failed(text)
        }
    }
}

/// `text` with every secret replaced.
pub(super) fn redact(text: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .fold(text.to_string(), |t, s| t.replace(s.as_str(), "[redacted]"))
}

/// The agent's tools are run by the agent, never here: the plan only tells the model what it
/// may call. A call of this handler would be a gateway bug, so it says so.
struct AgentRunsIt;

#[async_trait]
impl ToolHandler for AgentRunsIt {
    async fn call(&self, _: &Value, _: &ToolContext) -> ToolOutput {
        ToolOutput::error("this tool is run by the agent under test, not by the gateway")
    }
}

/// The agent's tools as a plan the route's model can call by name (projected back to each
/// provider's tool shape by its adapter).
pub(super) fn plan(tools: &[AgentTool]) -> BoundToolPlan {
    let handler: Arc<dyn ToolHandler> = Arc::new(AgentRunsIt);
    let bound = tools
        .iter()
        .map(|t| BoundTool {
            spec: ToolSpec {
                name: t.name.clone(),
                description: t.description.clone(),
                input_schema: t.input_schema.clone(),
                // What the agent's tool may do is the agent's sandbox's business; the gateway
                // declares the worst so nothing reads the plan as harmless.
                safety: SafetyLevel::Dangerous,
                personal_data: PersonalDataClass::None,
                resource_keys: ResourceKeyRule::None,
                path_args: Vec::new(),
                effectful: true,
                command_arg: None,
                deadline_arg: None,
            },
            binding: format!("agent:{}", t.name),
            handler: handler.clone(),
        })
        .collect();
    BoundToolPlan::new(0, bound)
}

/// Ask `model` for the reply to `request`; its text and thinking go to `deltas` as they come.
pub(super) async fn run(
    model: &dyn Model,
    request: &RecordedRequest,
    plan: &BoundToolPlan,
    seq: u64,
    deltas: DeltaSink,
) -> Result<AssistantTurn, ModelError> {
    let snapshot = StepSnapshot {
        model_id: model.id().to_string(),
        plan_generation: plan.generation(),
        plan_hash: plan.hash().clone(),
        correlation_id: CorrelationId::new(format!("gateway-{seq}")),
        round: u32::try_from(seq).unwrap_or(u32::MAX),
    };
    model
        .complete(&ModelRequest {
            system: &request.system,
            messages: &request.messages,
            plan,
            snapshot: &snapshot,
            force_text: false,
            deltas,
        })
        .await
}

/// What kind of block a stream opens.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Open {
    /// Text.
    Text,
    /// Reasoning.
    Thinking,
    /// A tool call.
    Tool {
        /// The call's id.
        id: String,
        /// The tool.
        name: String,
    },
}

/// A format's SSE writer: each method returns the frames to send, in order.
pub(super) trait Encoder: Send {
    /// The frames that open the reply, sent before the model is asked.
    fn start(&mut self) -> Vec<String>;
    /// Open a block.
    fn open(&mut self, block: &Open) -> Vec<String>;
    /// A piece of the open block (text, reasoning or a tool call's arguments).
    fn piece(&mut self, text: &str) -> Vec<String>;
    /// Close the open block; a thinking block gets its signature here.
    fn close(&mut self, signature: Option<&str>) -> Vec<String>;
    /// The end of the reply: stop reason and usage.
    fn end(&mut self, turn: &AssistantTurn) -> Vec<String>;
    /// The model failed after the stream began.
    fn fail(&mut self, refusal: &Refusal) -> Vec<String>;
}

/// Turns the model's deltas, then its whole reply, into block events: text and thinking as
/// they arrive, then whatever the reply holds that the deltas did not (a provider that sent
/// none, the tool calls), so the agent receives exactly the reply that is recorded.
pub(super) struct Shaper {
    encoder: Box<dyn Encoder>,
    open: Option<Open>,
    text: String,
    thinking: String,
}

impl Shaper {
    pub fn new(encoder: Box<dyn Encoder>) -> Self {
        Shaper {
            encoder,
            open: None,
            text: String::new(),
            thinking: String::new(),
        }
    }

    pub fn start(&mut self) -> Vec<String> {
        self.encoder.start()
    }

    fn switch_to(&mut self, kind: Open, out: &mut Vec<String>) {
        if self.open.as_ref() != Some(&kind) {
            out.extend(self.close(None));
            out.extend(self.encoder.open(&kind));
            self.open = Some(kind);
        }
    }

    fn close(&mut self, signature: Option<&str>) -> Vec<String> {
        match self.open.take() {
            Some(_) => self.encoder.close(signature),
            None => Vec::new(),
        }
    }

    pub fn delta(&mut self, delta: &ModelDelta) -> Vec<String> {
        let mut out = Vec::new();
        match delta {
            ModelDelta::Text(t) => {
                self.switch_to(Open::Text, &mut out);
                self.text.push_str(t);
                out.extend(self.encoder.piece(t));
            }
            ModelDelta::Thinking(t) => {
                self.switch_to(Open::Thinking, &mut out);
                self.thinking.push_str(t);
                out.extend(self.encoder.piece(t));
            }
        }
        out
    }

    pub fn finish(&mut self, turn: &AssistantTurn) -> Vec<String> {
        let mut out = Vec::new();
        let (mut thinking, mut text, mut signature) = (String::new(), String::new(), None);
        for block in &turn.message.content {
            match block {
                ContentBlock::Thinking {
                    thinking: t,
                    signature: s,
                } => {
                    thinking.push_str(t);
                    signature = signature.or(s.as_deref());
                }
                ContentBlock::Text { text: t } => text.push_str(t),
                _ => {}
            }
        }
        // What the deltas did not carry; a reply that differs from its own deltas keeps
        // what was sent (the record holds the reply).
        let rest = |full: &str, sent: &str| full.strip_prefix(sent).unwrap_or("").to_string();
        let (more_thinking, more_text) = (rest(&thinking, &self.thinking), rest(&text, &self.text));
        if !more_thinking.is_empty() || (signature.is_some() && self.thinking.is_empty()) {
            self.switch_to(Open::Thinking, &mut out);
            out.extend(self.encoder.piece(&more_thinking));
        }
        if self.open == Some(Open::Thinking) {
            out.extend(self.close(signature));
        }
        if !more_text.is_empty() {
            self.switch_to(Open::Text, &mut out);
            out.extend(self.encoder.piece(&more_text));
        }
        for call in turn.message.tool_calls() {
            out.extend(self.close(None));
            let kind = Open::Tool {
                id: call.id,
                name: call.name,
            };
            out.extend(self.encoder.open(&kind));
            self.open = Some(kind);
            out.extend(self.encoder.piece(&tool_arguments(&call.input)));
        }
        out.extend(self.close(None));
        out.extend(self.encoder.end(turn));
        out
    }

    pub fn fail(&mut self, refusal: &Refusal) -> Vec<String> {
        let mut out = self.close(None);
        out.extend(self.encoder.fail(refusal));
        out
    }
}

/// One SSE frame with an event name.
pub(super) fn named(event: &str, data: &Value) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

/// A fresh id for a reply, with the format's prefix (`msg_`, `chatcmpl-`, `resp_`).
pub(super) fn reply_id(prefix: &str) -> String {
    format!("{prefix}{}", uuid::Uuid::new_v4().simple())
}
