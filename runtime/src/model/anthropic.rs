//! The Anthropic Messages API adapter (`POST {base}/v1/messages`, streamed).
//!
//! Effort: models with adaptive thinking get `thinking: {type: adaptive}` and
//! `output_config.effort`; older ones `thinking: {type: enabled, budget_tokens}`; both clamped
//! to the levels the catalog lists for the model. Thinking blocks come back with their
//! signature and are replayed verbatim while thinking is on (the API checks them). Prompt
//! caching: the system prompt and the newest message carry cache breakpoints, and the usage
//! fields for cache reads and writes are priced apart.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::catalog::{ModelInfo, ProviderRoute, ThinkingStyle};
use super::effort::Effort;
use super::errors::{Failure, classify};
use super::http::{Assembler, Driver, KeyHeader, ProviderConfig, event_json, tool_input};
use super::sse::SseEvent;
use super::{DeltaSink, Model, ModelDelta, ModelError, ModelRequest};
use crate::conversation::{AssistantTurn, ContentBlock, Image, Message, Role, StopReason, Usage};
use crate::tools::plan::ToolSchemaShape;

pub(crate) const API_VERSION: &str = "2023-06-01";

/// A `Thinking` block whose signature starts with this holds a `redacted_thinking` block's
/// opaque data, replayed as such.
pub const REDACTED_PREFIX: &str = "redacted_thinking:";

pub(crate) struct AnthropicModel {
    route: ProviderRoute,
    info: ModelInfo,
    config: ProviderConfig,
    driver: Driver,
}

impl AnthropicModel {
    pub fn new(
        route: ProviderRoute,
        config: ProviderConfig,
        driver: Driver,
    ) -> Result<Self, ModelError> {
        let info = route.listed_info("Anthropic")?;
        Ok(AnthropicModel {
            route,
            info,
            config,
            driver,
        })
    }

    fn max_tokens(&self) -> u64 {
        self.config
            .max_output_tokens
            .map_or(self.info.max_output, |m| m.min(self.info.max_output))
    }

    /// The `thinking` (and `output_config`) fields, or nothing when thinking is off.
    fn thinking(&self, max_tokens: u64) -> Option<(Value, Option<Value>)> {
        let effort = self.info.effort(self.config.effort)?;
        match self.info.thinking {
            ThinkingStyle::Adaptive => Some((
                json!({"type": "adaptive"}),
                Some(json!({"effort": effort.as_str()})),
            )),
            _ => {
                let budget = budget_tokens(effort)?.min(max_tokens.saturating_sub(1));
                // The API's floor; below it thinking is better left off.
                (budget >= 1024)
                    .then(|| (json!({"type": "enabled", "budget_tokens": budget}), None))
            }
        }
    }

    pub fn request_body(&self, request: &ModelRequest<'_>) -> Value {
        let max_tokens = self.max_tokens();
        let thinking = self.thinking(max_tokens);
        let mut body = json!({
            "model": self.route.model,
            "max_tokens": max_tokens,
            "stream": true,
            "messages": messages(request.messages, thinking.is_some()),
        });
        if !request.system.is_empty() {
            body["system"] = json!([{
                "type": "text", "text": request.system, "cache_control": {"type": "ephemeral"},
            }]);
        }
        let tools = request.plan.project(ToolSchemaShape::AnthropicMessages);
        if !tools.is_empty() {
            body["tools"] = Value::Array(tools);
            let choice = if request.force_text { "none" } else { "auto" };
            body["tool_choice"] = json!({"type": choice});
        }
        if let Some((thinking, output_config)) = thinking {
            body["thinking"] = thinking;
            if let Some(oc) = output_config {
                body["output_config"] = oc;
            }
        }
        body
    }
}

/// Budget tokens per effort level for models without adaptive thinking.
fn budget_tokens(effort: Effort) -> Option<u64> {
    match effort {
        Effort::None => None,
        Effort::Minimal => Some(1024),
        Effort::Low => Some(4096),
        Effort::Medium => Some(10_000),
        Effort::High => Some(20_000),
        Effort::Xhigh => Some(32_000),
        Effort::Max => Some(63_999),
    }
}

/// The conversation in Messages API shape: consecutive messages of one role merged, tool
/// results first in their user message (the API requires it), empty text dropped, and a cache
/// breakpoint on the last block.
fn messages(conversation: &[Message], thinking_on: bool) -> Value {
    let mut out: Vec<(Role, Vec<Value>)> = Vec::new();
    for m in conversation {
        let mut blocks: Vec<Value> = Vec::new();
        for b in &m.content {
            match (m.role, b) {
                (Role::User, ContentBlock::Image(image)) => attach_image(&mut blocks, image),
                _ => blocks.extend(block(m.role, b, thinking_on)),
            }
        }
        match out.last_mut() {
            Some((role, existing)) if *role == m.role => existing.extend(blocks),
            _ => out.push((m.role, blocks)),
        }
    }
    let count = out.len();
    let shaped: Vec<Value> = out
        .into_iter()
        .enumerate()
        .map(|(i, (role, mut blocks))| {
            blocks.sort_by_key(|b| b["type"] != "tool_result");
            if blocks.is_empty() {
                blocks.push(json!({"type": "text", "text": "(empty)"}));
            }
            if i + 1 == count
                && let Some(last) = blocks.last_mut()
                && !matches!(
                    last["type"].as_str(),
                    Some("thinking" | "redacted_thinking")
                )
            {
                last["cache_control"] = json!({"type": "ephemeral"});
            }
            let role = match role {
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            json!({"role": role, "content": blocks})
        })
        .collect();
    Value::Array(shaped)
}

/// A screenshot goes inside the tool_result it follows (its content becomes an array of a text
/// and image blocks), so tool results stay first in their message as the API requires; an
/// image with no result before it is a block of its own.
fn attach_image(blocks: &mut Vec<Value>, image: &Image) {
    let image = json!({
        "type": "image",
        "source": {"type": "base64", "media_type": image.media_type.as_str(), "data": image.data_b64},
    });
    match blocks.last_mut() {
        Some(last) if last["type"] == "tool_result" => {
            if let Some(text) = last["content"].as_str() {
                last["content"] = json!([{"type": "text", "text": text}]);
            }
            if let Some(parts) = last["content"].as_array_mut() {
                parts.push(image);
            }
        }
        _ => blocks.push(image),
    }
}

fn block(role: Role, b: &ContentBlock, thinking_on: bool) -> Option<Value> {
    match (role, b) {
        (_, ContentBlock::Text { text }) if text.is_empty() => None,
        (_, ContentBlock::Text { text }) => Some(json!({"type": "text", "text": text})),
        (
            Role::User,
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            },
        ) => Some(json!({
            "type": "tool_result", "tool_use_id": tool_use_id, "content": content,
            "is_error": is_error,
        })),
        (Role::Assistant, ContentBlock::ToolUse { id, name, input }) => {
            Some(json!({"type": "tool_use", "id": id, "name": name, "input": input}))
        }
        // Unsigned thinking (another provider's, or a script's) cannot be verified by the API.
        (
            Role::Assistant,
            ContentBlock::Thinking {
                thinking,
                signature: Some(sig),
            },
        ) if thinking_on => Some(match sig.strip_prefix(REDACTED_PREFIX) {
            Some(data) => json!({"type": "redacted_thinking", "data": data}),
            None => json!({"type": "thinking", "thinking": thinking, "signature": sig}),
        }),
        _ => None,
    }
}

#[async_trait]
impl Model for AnthropicModel {
    fn id(&self) -> &str {
        self.driver.model_id()
    }

    async fn complete(&self, request: &ModelRequest<'_>) -> Result<AssistantTurn, ModelError> {
        let wire = self.config.sse_request(
            "/v1/messages",
            &[("anthropic-version", API_VERSION)],
            KeyHeader::Plain("x-api-key"),
            self.request_body(request),
        );
        let fresh = || StreamState::streaming_to(request.deltas.clone());
        let asm = self.driver.call(&wire, fresh).await?;
        Ok(asm.finish(&self.info))
    }
}

#[derive(Debug)]
enum Block {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
    Thinking {
        text: String,
        signature: String,
    },
    Redacted(String),
}

/// The reply as it streams in: blocks by index, usage, stop reason.
#[derive(Debug, Default)]
pub struct StreamState {
    blocks: BTreeMap<u64, Block>,
    input: u64,
    cache_read: u64,
    cache_write: u64,
    output: u64,
    stop: Option<String>,
    visible: bool,
    deltas: DeltaSink,
}

fn n(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

impl StreamState {
    pub(crate) fn streaming_to(deltas: DeltaSink) -> Self {
        StreamState {
            deltas,
            ..StreamState::default()
        }
    }

    fn usage(&mut self, u: &Value) {
        // message_start carries the prompt side; message_delta the running output count (and,
        // on newer API versions, the prompt side again).
        self.input = n(u, "input_tokens").unwrap_or(self.input);
        self.cache_read = n(u, "cache_read_input_tokens").unwrap_or(self.cache_read);
        self.cache_write = n(u, "cache_creation_input_tokens").unwrap_or(self.cache_write);
        self.output = n(u, "output_tokens").unwrap_or(self.output);
    }

    pub(crate) fn finish(self, info: &ModelInfo) -> AssistantTurn {
        let content = self
            .blocks
            .into_values()
            .filter_map(|b| match b {
                Block::Text(text) if text.is_empty() => None,
                Block::Text(text) => Some(ContentBlock::Text { text }),
                Block::ToolUse { id, name, json } => Some(ContentBlock::ToolUse {
                    id,
                    name,
                    input: tool_input(&json),
                }),
                Block::Thinking { text, signature } => Some(ContentBlock::Thinking {
                    thinking: text,
                    signature: (!signature.is_empty()).then_some(signature),
                }),
                Block::Redacted(data) => Some(ContentBlock::Thinking {
                    thinking: String::new(),
                    signature: Some(format!("{REDACTED_PREFIX}{data}")),
                }),
            })
            .collect();
        let mut usage = Usage {
            input_tokens: self.input + self.cache_read + self.cache_write,
            cached_input_tokens: self.cache_read,
            output_tokens: self.output,
            reasoning_tokens: 0,
            cost_usd: 0.0,
        };
        usage.cost_usd = info.prices.cost(&usage, self.cache_write);
        AssistantTurn {
            message: Message {
                role: Role::Assistant,
                content,
            },
            usage,
            stop_reason: match self.stop.as_deref() {
                Some("tool_use") => StopReason::ToolUse,
                Some("max_tokens" | "model_context_window_exceeded") => StopReason::MaxTokens,
                Some("stop_sequence") => StopReason::StopSequence,
                Some("refusal") => StopReason::Refusal,
                _ => StopReason::EndTurn,
            },
        }
    }
}

impl Assembler for StreamState {
    fn on_event(&mut self, event: &SseEvent) -> Result<bool, Failure> {
        if event.event == "ping" {
            return Ok(false);
        }
        let v = event_json(event)?;
        let kind = v["type"].as_str().unwrap_or(event.event.as_str());
        let index = n(&v, "index").unwrap_or(0);
        match kind {
            "message_start" => self.usage(&v["message"]["usage"]),
            "content_block_start" => {
                let b = &v["content_block"];
                let s = |k: &str| b[k].as_str().unwrap_or_default().to_string();
                let block = match b["type"].as_str() {
                    Some("tool_use") => Block::ToolUse {
                        id: s("id"),
                        name: s("name"),
                        json: String::new(),
                    },
                    Some("thinking") => Block::Thinking {
                        text: s("thinking"),
                        signature: s("signature"),
                    },
                    Some("redacted_thinking") => Block::Redacted(s("data")),
                    _ => Block::Text(s("text")),
                };
                self.blocks.insert(index, block);
            }
            "content_block_delta" => {
                let d = &v["delta"];
                let piece = |k: &str| d[k].as_str().unwrap_or_default();
                let block = self
                    .blocks
                    .entry(index)
                    .or_insert(Block::Text(String::new()));
                match (d["type"].as_str(), block) {
                    (Some("text_delta"), Block::Text(t)) => {
                        t.push_str(piece("text"));
                        self.deltas.send(ModelDelta::Text(piece("text").into()));
                    }
                    (Some("input_json_delta"), Block::ToolUse { json, .. }) => {
                        json.push_str(piece("partial_json"))
                    }
                    (Some("thinking_delta"), Block::Thinking { text, .. }) => {
                        text.push_str(piece("thinking"));
                        self.deltas
                            .send(ModelDelta::Thinking(piece("thinking").into()));
                    }
                    (Some("signature_delta"), Block::Thinking { signature, .. }) => {
                        signature.push_str(piece("signature"));
                        return Ok(false);
                    }
                    _ => return Ok(false),
                }
                self.visible = true;
            }
            "message_delta" => {
                if let Some(stop) = v["delta"]["stop_reason"].as_str() {
                    self.stop = Some(stop.to_string());
                }
                self.usage(&v["usage"]);
            }
            "message_stop" => return Ok(true),
            "error" => return Err(classify(0, &event.data)),
            _ => {}
        }
        Ok(false)
    }

    fn visible(&self) -> bool {
        self.visible
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::screenshot_turn;

    #[test]
    fn a_screenshot_goes_inside_its_tool_result() {
        let body = messages(&screenshot_turn(), false);
        let result = &body[1]["content"][0];
        assert_eq!(result["type"], "tool_result");
        assert_eq!(
            result["content"][0],
            json!({"type": "text", "text": "screenshot 1x1"})
        );
        assert_eq!(
            result["content"][1],
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/png",
                   "data": "iVBORw0K"}})
        );
        assert_eq!(body[1]["content"].as_array().unwrap().len(), 1);
    }
}
