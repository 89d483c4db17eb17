//! The OpenAI-compatible Chat Completions adapter (`POST {base}/chat/completions`, streamed):
//! Z.ai GLM (base `https://api.z.ai/api/paas/v4`), OpenRouter, and local servers (llama.cpp,
//! vLLM, Ollama) through `compat:BASE_URL:MODEL`.
//!
//! The dialects differ in small ways, chosen by the route's provider: GLM switches thinking
//! with `thinking.type`, streams tool arguments only when asked (`tool_stream`) and takes its
//! `reasoning_content` back on models that bind thinking; OpenRouter takes `reasoning.effort`
//! and reports each call's cost (which wins over catalog prices); local servers get
//! `reasoning_effort` only when an effort was configured. Reasoning text arrives as
//! `reasoning_content` (GLM, vLLM, llama.cpp) or `reasoning` (OpenRouter).

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::catalog::{Catalog, ModelInfo, Prices, ProviderKind, ProviderRoute};
use super::effort::Effort;
use super::errors::{Failure, classify};
use super::http::{
    Assembler, Driver, KeyHeader, ProviderConfig, event_json, tool_arguments, tool_input,
    usage_with_reasoning,
};
use super::sse::SseEvent;
use super::{DeltaSink, Model, ModelDelta, ModelError, ModelRequest};
use crate::conversation::{AssistantTurn, ContentBlock, Message, Role, StopReason};
use crate::tools::plan::ToolSchemaShape;

pub(crate) struct ChatModel {
    route: ProviderRoute,
    config: ProviderConfig,
    driver: Driver,
    /// Catalog prices of the model; for OpenRouter ids like `vendor/model` the catalog entry of
    /// `model`, as an estimate when OpenRouter reports no cost.
    prices: Prices,
    efforts: Vec<Effort>,
}

impl ChatModel {
    pub fn new(route: ProviderRoute, config: ProviderConfig, driver: Driver) -> Self {
        let catalog = Catalog::builtin().ok();
        let known: Option<ModelInfo> = route.info.clone().or_else(|| {
            let (_, bare) = route.model.rsplit_once('/')?;
            catalog?.model(bare).cloned()
        });
        let efforts = match &route.info {
            Some(info) => info.efforts.clone(),
            None => catalog
                .and_then(|c| c.provider(route.provider))
                .map(|p| p.efforts.clone())
                .unwrap_or_default(),
        };
        ChatModel {
            prices: known.map(|m| m.prices).unwrap_or_default(),
            efforts,
            route,
            config,
            driver,
        }
    }

    /// The configured effort (or the catalog default), clamped; local servers only get one
    /// when it was configured.
    fn effort(&self) -> Option<Effort> {
        let wanted = match &self.route.info {
            Some(info) => self.config.effort.or(info.default_effort),
            None => self.config.effort,
        }?;
        if self.efforts.is_empty() {
            return Some(wanted);
        }
        Some(wanted.clamp_to(&self.efforts))
    }

    fn replays_reasoning(&self) -> bool {
        self.route.provider == ProviderKind::Glm
            && self.route.info.as_ref().is_some_and(|i| i.binds_thinking)
    }

    pub fn request_body(&self, request: &ModelRequest<'_>) -> Value {
        let mut body = json!({
            "model": self.route.model,
            "messages": messages(request.system, request.messages, self.replays_reasoning()),
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        let tools = request.plan.project(ToolSchemaShape::ChatCompletions);
        let has_tools = !tools.is_empty();
        if has_tools {
            body["tools"] = Value::Array(tools);
            body["tool_choice"] = json!(if request.force_text { "none" } else { "auto" });
        }
        if let Some(max) = self.config.max_output_tokens {
            body["max_tokens"] = json!(max);
        }
        let effort = self.effort();
        match self.route.provider {
            ProviderKind::Glm => {
                let on = effort.is_some_and(|e| e != Effort::None);
                body["thinking"] = json!({"type": if on { "enabled" } else { "disabled" }});
                if has_tools {
                    body["tool_stream"] = json!(true);
                }
            }
            ProviderKind::Openrouter => {
                body["usage"] = json!({"include": true});
                if let Some(e) = effort {
                    body["reasoning"] = if e == Effort::None {
                        json!({"enabled": false})
                    } else {
                        json!({"effort": e.as_str()})
                    };
                }
            }
            _ => {
                if let Some(e) = effort.filter(|e| *e != Effort::None) {
                    body["reasoning_effort"] = json!(e.as_str());
                }
            }
        }
        body
    }
}

/// The conversation as chat messages: system first, tool results as `tool` messages right
/// after the assistant message that called them, then any user text.
fn messages(system: &str, conversation: &[Message], with_reasoning: bool) -> Value {
    let mut out = Vec::new();
    if !system.is_empty() {
        out.push(json!({"role": "system", "content": system}));
    }
    for m in conversation {
        let mut texts = Vec::new();
        match m.role {
            Role::User => {
                // A `tool` message carries text only: screenshots follow the batch's tool
                // messages as one user message of image_url parts.
                let mut images = Vec::new();
                for b in &m.content {
                    match b {
                        ContentBlock::ToolResult {
                            tool_use_id,
                            content,
                            ..
                        } => out.push(json!({
                            "role": "tool", "tool_call_id": tool_use_id, "content": content,
                        })),
                        ContentBlock::Text { text } if !text.is_empty() => {
                            texts.push(text.as_str())
                        }
                        ContentBlock::Image(image) => images.push(json!({
                            "type": "image_url", "image_url": {"url": image.data_url()},
                        })),
                        _ => {}
                    }
                }
                if !images.is_empty() {
                    out.push(json!({"role": "user", "content": images}));
                }
                if !texts.is_empty() {
                    out.push(json!({"role": "user", "content": texts.join("\n\n")}));
                }
            }
            Role::Assistant => {
                let mut calls = Vec::new();
                let mut reasoning = Vec::new();
                for b in &m.content {
                    match b {
                        ContentBlock::Text { text } if !text.is_empty() => {
                            texts.push(text.as_str())
                        }
                        ContentBlock::ToolUse { id, name, input } => calls.push(json!({
                            "id": id, "type": "function",
                            "function": {"name": name, "arguments": tool_arguments(input)},
                        })),
                        ContentBlock::Thinking { thinking, .. } if !thinking.is_empty() => {
                            reasoning.push(thinking.as_str())
                        }
                        _ => {}
                    }
                }
                let mut msg = json!({"role": "assistant"});
                msg["content"] = if texts.is_empty() {
                    Value::Null
                } else {
                    json!(texts.join("\n\n"))
                };
                if !calls.is_empty() {
                    msg["tool_calls"] = Value::Array(calls);
                }
                if with_reasoning && !reasoning.is_empty() {
                    msg["reasoning_content"] = json!(reasoning.join("\n\n"));
                }
                if msg["content"].is_null() && msg.get("tool_calls").is_none() {
                    msg["content"] = json!("");
                }
                out.push(msg);
            }
        }
    }
    Value::Array(out)
}

#[async_trait]
impl Model for ChatModel {
    fn id(&self) -> &str {
        self.driver.model_id()
    }

    async fn complete(&self, request: &ModelRequest<'_>) -> Result<AssistantTurn, ModelError> {
        let wire = self.config.sse_request(
            "/chat/completions",
            &[],
            KeyHeader::Bearer,
            self.request_body(request),
        );
        let fresh = || StreamState::streaming_to(request.deltas.clone());
        let asm = self.driver.call(&wire, fresh).await?;
        Ok(asm.finish(&self.prices))
    }
}

#[derive(Debug, Default)]
struct Call {
    id: String,
    name: String,
    args: String,
}

/// The reply as it streams in.
#[derive(Debug, Default)]
pub struct StreamState {
    text: String,
    reasoning: String,
    calls: BTreeMap<u64, Call>,
    finish: Option<String>,
    usage: Value,
    visible: bool,
    deltas: DeltaSink,
}

impl StreamState {
    pub(crate) fn streaming_to(deltas: DeltaSink) -> Self {
        StreamState {
            deltas,
            ..StreamState::default()
        }
    }

    pub(crate) fn finish(self, prices: &Prices) -> AssistantTurn {
        let mut content = Vec::new();
        if !self.reasoning.is_empty() {
            content.push(ContentBlock::Thinking {
                thinking: self.reasoning,
                signature: None,
            });
        }
        if !self.text.is_empty() {
            content.push(ContentBlock::Text { text: self.text });
        }
        let has_calls = !self.calls.is_empty();
        for (i, call) in self.calls {
            content.push(ContentBlock::ToolUse {
                // Some local servers send no ids; the index is unique within the reply.
                id: if call.id.is_empty() {
                    format!("call_{i}")
                } else {
                    call.id
                },
                name: call.name,
                input: tool_input(&call.args),
            });
        }
        let mut usage = usage_with_reasoning(
            &self.usage,
            "/prompt_tokens",
            "/prompt_tokens_details/cached_tokens",
            "/completion_tokens",
            "/completion_tokens_details/reasoning_tokens",
        );
        usage.cost_usd = self.usage["cost"]
            .as_f64()
            .unwrap_or_else(|| prices.cost(&usage, 0));
        let stop_reason = match self.finish.as_deref() {
            Some("length") => StopReason::MaxTokens,
            Some("content_filter") => StopReason::Refusal,
            _ if has_calls => StopReason::ToolUse,
            _ => StopReason::EndTurn,
        };
        AssistantTurn {
            message: Message {
                role: Role::Assistant,
                content,
            },
            usage,
            stop_reason,
        }
    }
}

impl Assembler for StreamState {
    fn on_event(&mut self, event: &SseEvent) -> Result<bool, Failure> {
        if event.data.trim() == "[DONE]" {
            return Ok(true);
        }
        let v = event_json(event)?;
        if v.get("error").is_some_and(|e| !e.is_null()) {
            return Err(classify(0, &event.data));
        }
        if v.get("usage").is_some_and(Value::is_object) {
            self.usage = v["usage"].clone();
        }
        let Some(choice) = v["choices"].get(0) else {
            return Ok(false);
        };
        let d = &choice["delta"];
        if let Some(t) = d["content"].as_str().filter(|t| !t.is_empty()) {
            self.text.push_str(t);
            self.deltas.send(ModelDelta::Text(t.into()));
            self.visible = true;
        }
        let thought = d["reasoning_content"].as_str().or(d["reasoning"].as_str());
        if let Some(t) = thought.filter(|t| !t.is_empty()) {
            self.reasoning.push_str(t);
            self.deltas.send(ModelDelta::Thinking(t.into()));
            self.visible = true;
        }
        for (i, tc) in d["tool_calls"].as_array().into_iter().flatten().enumerate() {
            let index = tc["index"].as_u64().unwrap_or(i as u64);
            let call = self.calls.entry(index).or_default();
            if let Some(id) = tc["id"].as_str().filter(|s| !s.is_empty()) {
                call.id = id.to_string();
            }
            let f = &tc["function"];
            if let Some(name) = f["name"].as_str().filter(|s| !s.is_empty()) {
                call.name = name.to_string();
            }
            match &f["arguments"] {
                Value::String(args) => call.args.push_str(args),
                // A few servers send the arguments as an object rather than JSON text.
                Value::Object(_) => call.args = f["arguments"].to_string(),
                _ => {}
            }
            self.visible = true;
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.finish = Some(reason.to_string());
        }
        Ok(false)
    }

    fn visible(&self) -> bool {
        self.visible
    }

    fn complete_at_eof(&self) -> bool {
        self.finish.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::screenshot_turn;

    #[test]
    fn a_screenshot_follows_the_tool_messages_as_a_user_image() {
        let body = messages("", &screenshot_turn(), false);
        assert_eq!(body[1]["role"], "tool");
        assert_eq!(body[1]["content"], "screenshot 1x1");
        assert_eq!(body[2]["role"], "user");
        assert_eq!(
            body[2]["content"][0],
            json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}})
        );
    }
}
