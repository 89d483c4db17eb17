//! The OpenAI Responses API adapter (`POST {base}/responses`, streamed, `store: false`).
//!
//! Nothing is stored server-side, so reasoning is carried by the conversation: every reasoning
//! item comes back with `encrypted_content` (asked for with `include`), is kept in a
//! `Thinking` block's signature, and is sent back verbatim as a `reasoning` input item on the
//! next call. Effort goes out as `reasoning.effort`, clamped to the model's levels.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::catalog::{ModelInfo, ProviderRoute};
use super::errors::{ErrorClass, Failure, classify};
use super::http::{
    Assembler, Driver, KeyHeader, ProviderConfig, event_json, tool_arguments, tool_input,
    usage_with_reasoning,
};
use super::login::ChatgptAuth;
use super::sse::SseEvent;
use super::{DeltaSink, Model, ModelDelta, ModelError, ModelRequest};
use crate::conversation::{AssistantTurn, ContentBlock, Image, Message, Role, StopReason};
use crate::tools::plan::ToolSchemaShape;

pub(crate) struct ResponsesModel {
    route: ProviderRoute,
    info: ModelInfo,
    config: ProviderConfig,
    driver: Driver,
    /// Calls covered by a subscription: usage is reported, no price is applied.
    subscription: bool,
    /// The ChatGPT sign-in whose bearer token (and account header) replace the API key.
    login: Option<Arc<ChatgptAuth>>,
}

impl ResponsesModel {
    pub fn new(
        route: ProviderRoute,
        config: ProviderConfig,
        driver: Driver,
    ) -> Result<Self, ModelError> {
        let info = route.listed_info("OpenAI")?;
        Ok(ResponsesModel {
            route,
            info,
            config,
            driver,
            subscription: false,
            login: None,
        })
    }

    /// The subscription route: same wire, the sign-in's token instead of a key, no price.
    pub fn subscription(mut self, subscription: bool, login: Option<Arc<ChatgptAuth>>) -> Self {
        self.subscription = subscription;
        self.login = login;
        self
    }

    pub fn request_body(&self, request: &ModelRequest<'_>) -> Value {
        let mut body = json!({
            "model": self.route.model,
            "instructions": request.system,
            "input": input_items(request.messages),
            "stream": true,
            "store": false,
            "include": ["reasoning.encrypted_content"],
        });
        let tools = request.plan.project(ToolSchemaShape::OpenAiResponses);
        if !tools.is_empty() {
            body["tools"] = Value::Array(tools);
            body["tool_choice"] = json!(if request.force_text { "none" } else { "auto" });
            body["parallel_tool_calls"] = json!(true);
        }
        if let Some(effort) = self.info.effort(self.config.effort) {
            body["reasoning"] = json!({"effort": effort.as_str(), "summary": "auto"});
        }
        // The subscription endpoint refuses `max_output_tokens`; its plan sets the limit.
        if let Some(max) = self.config.max_output_tokens.filter(|_| !self.subscription) {
            body["max_output_tokens"] = json!(max.min(self.info.max_output));
        }
        body
    }
}

/// Puts a screenshot into the function_call_output item before it (a user message of its own
/// when there is none).
fn attach_image(items: &mut Vec<Value>, image: &Image) {
    let part = json!({"type": "input_image", "image_url": image.data_url()});
    match items.last_mut() {
        Some(last) if last["type"] == "function_call_output" => {
            if let Some(text) = last["output"].as_str() {
                last["output"] = json!([{"type": "input_text", "text": text}]);
            }
            if let Some(parts) = last["output"].as_array_mut() {
                parts.push(part);
            }
        }
        _ => items.push(json!({"type": "message", "role": "user", "content": [part]})),
    }
}

/// The conversation as Responses input items, in order.
fn input_items(conversation: &[Message]) -> Value {
    let mut items = Vec::new();
    for m in conversation {
        for b in &m.content {
            let item = match (m.role, b) {
                (_, ContentBlock::Text { text }) if text.is_empty() => continue,
                (Role::User, ContentBlock::Text { text }) => json!({
                    "type": "message", "role": "user",
                    "content": [{"type": "input_text", "text": text}],
                }),
                (Role::Assistant, ContentBlock::Text { text }) => json!({
                    "type": "message", "role": "assistant",
                    "content": [{"type": "output_text", "text": text}],
                }),
                (
                    Role::User,
                    ContentBlock::ToolResult {
                        tool_use_id,
                        content,
                        ..
                    },
                ) => json!({
                    "type": "function_call_output", "call_id": tool_use_id, "output": content,
                }),
                // Responses takes a function_call_output's output as a string or as a list of
                // input_text / input_image parts: a screenshot joins the output it follows.
                (Role::User, ContentBlock::Image(image)) => {
                    attach_image(&mut items, image);
                    continue;
                }
                (Role::Assistant, ContentBlock::ToolUse { id, name, input }) => json!({
                    "type": "function_call", "call_id": id, "name": name,
                    "arguments": tool_arguments(input),
                }),
                // Only reasoning this API produced (encrypted) can be replayed.
                (
                    Role::Assistant,
                    ContentBlock::Thinking {
                        thinking,
                        signature: Some(encrypted),
                    },
                ) => {
                    let summary: Vec<Value> = if thinking.is_empty() {
                        Vec::new()
                    } else {
                        vec![json!({"type": "summary_text", "text": thinking})]
                    };
                    json!({"type": "reasoning", "summary": summary, "encrypted_content": encrypted})
                }
                _ => continue,
            };
            items.push(item);
        }
    }
    Value::Array(items)
}

#[async_trait]
impl Model for ResponsesModel {
    fn id(&self) -> &str {
        self.driver.model_id()
    }

    async fn complete(&self, request: &ModelRequest<'_>) -> Result<AssistantTurn, ModelError> {
        let body = self.request_body(request);
        let wire = match &self.login {
            None => self
                .config
                .sse_request("/responses", &[], KeyHeader::Bearer, body),
            Some(login) => {
                let (token, account) = login.bearer().await.map_err(|e| ModelError::Provider {
                    model: self.route.text.clone(),
                    class: ErrorClass::Auth,
                    message: e.to_string(),
                })?;
                let config = ProviderConfig {
                    api_key: Some(token),
                    ..self.config.clone()
                };
                let headers = [("chatgpt-account-id", account.as_str())];
                config.sse_request("/responses", &headers, KeyHeader::Bearer, body)
            }
        };
        let fresh = || StreamState::streaming_to(request.deltas.clone());
        let asm = self.driver.call(&wire, fresh).await?;
        let mut turn = asm.finish(&self.info);
        if self.subscription {
            turn.usage.cost_usd = 0.0;
        }
        Ok(turn)
    }
}

#[derive(Debug)]
enum Item {
    Text(String),
    Refusal(String),
    Call {
        call_id: String,
        name: String,
        args: String,
    },
    Reasoning {
        summary: String,
        encrypted: Option<String>,
    },
}

/// The reply as it streams in: output items by `output_index`, usage, end state.
#[derive(Debug, Default)]
pub struct StreamState {
    items: BTreeMap<u64, Item>,
    usage: Value,
    incomplete: Option<String>,
    visible: bool,
    deltas: DeltaSink,
}

fn item_from(v: &Value) -> Item {
    let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
    match v["type"].as_str() {
        Some("function_call") => Item::Call {
            call_id: s("call_id"),
            name: s("name"),
            args: s("arguments"),
        },
        Some("reasoning") => Item::Reasoning {
            summary: joined(&v["summary"]),
            encrypted: v["encrypted_content"].as_str().map(str::to_string),
        },
        _ => Item::Text(joined(&v["content"])),
    }
}

/// The `text` of every part of a content or summary array, joined.
fn joined(parts: &Value) -> String {
    parts
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| p["text"].as_str().or_else(|| p["refusal"].as_str()))
                .collect::<Vec<_>>()
                .join("\n\n")
        })
        .unwrap_or_default()
}

impl StreamState {
    pub(crate) fn streaming_to(deltas: DeltaSink) -> Self {
        StreamState {
            deltas,
            ..StreamState::default()
        }
    }

    pub(crate) fn finish(self, info: &ModelInfo) -> AssistantTurn {
        let mut content = Vec::new();
        let mut refused = false;
        for item in self.items.into_values() {
            match item {
                Item::Text(text) if text.is_empty() => {}
                Item::Text(text) => content.push(ContentBlock::Text { text }),
                Item::Refusal(text) => {
                    refused = true;
                    content.push(ContentBlock::Text { text });
                }
                Item::Call {
                    call_id,
                    name,
                    args,
                } => content.push(ContentBlock::ToolUse {
                    id: call_id,
                    name,
                    input: tool_input(&args),
                }),
                Item::Reasoning { summary, encrypted } => {
                    if !summary.is_empty() || encrypted.is_some() {
                        content.push(ContentBlock::Thinking {
                            thinking: summary,
                            signature: encrypted,
                        });
                    }
                }
            }
        }
        let mut usage = usage_with_reasoning(
            &self.usage,
            "/input_tokens",
            "/input_tokens_details/cached_tokens",
            "/output_tokens",
            "/output_tokens_details/reasoning_tokens",
        );
        usage.cost_usd = info.prices.cost(&usage, 0);
        let has_calls = content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolUse { .. }));
        let stop_reason = match self.incomplete.as_deref() {
            _ if refused => StopReason::Refusal,
            Some("content_filter") => StopReason::Refusal,
            Some(_) => StopReason::MaxTokens,
            None if has_calls => StopReason::ToolUse,
            None => StopReason::EndTurn,
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

    fn item(&mut self, index: u64) -> &mut Item {
        self.items
            .entry(index)
            .or_insert_with(|| Item::Text(String::new()))
    }
}

impl Assembler for StreamState {
    fn on_event(&mut self, event: &SseEvent) -> Result<bool, Failure> {
        let v = event_json(event)?;
        let kind = v["type"].as_str().unwrap_or(event.event.as_str());
        let index = v["output_index"].as_u64().unwrap_or(0);
        let delta = v["delta"].as_str().unwrap_or_default();
        match kind {
            "response.output_item.added" => {
                self.items.insert(index, item_from(&v["item"]));
            }
            "response.output_text.delta" => {
                if let Item::Text(t) = self.item(index) {
                    t.push_str(delta);
                }
                self.deltas.send(ModelDelta::Text(delta.into()));
                self.visible = true;
            }
            "response.refusal.delta" => {
                match self.item(index) {
                    Item::Refusal(t) => t.push_str(delta),
                    other => *other = Item::Refusal(delta.to_string()),
                }
                self.visible = true;
            }
            "response.function_call_arguments.delta" => {
                if let Item::Call { args, .. } = self.item(index) {
                    args.push_str(delta);
                }
                self.visible = true;
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                if let Item::Reasoning { summary, .. } = self.item(index) {
                    summary.push_str(delta);
                }
                self.deltas.send(ModelDelta::Thinking(delta.into()));
                self.visible = true;
            }
            "response.reasoning_summary_part.added" => {
                if let Item::Reasoning { summary, .. } = self.item(index)
                    && !summary.is_empty()
                {
                    summary.push_str("\n\n");
                }
            }
            "response.output_item.done" => {
                // The finished item is authoritative; fragments fill in what it leaves out.
                let done = item_from(&v["item"]);
                let slot = self.item(index);
                *slot = match (done, std::mem::replace(slot, Item::Text(String::new()))) {
                    (
                        Item::Call {
                            call_id,
                            name,
                            args,
                        },
                        Item::Call { args: streamed, .. },
                    ) => Item::Call {
                        call_id,
                        name,
                        args: if args.is_empty() { streamed } else { args },
                    },
                    (
                        Item::Reasoning { summary, encrypted },
                        Item::Reasoning { summary: s, .. },
                    ) => Item::Reasoning {
                        summary: if summary.is_empty() { s } else { summary },
                        encrypted,
                    },
                    (Item::Text(t), Item::Text(streamed)) => {
                        Item::Text(if t.is_empty() { streamed } else { t })
                    }
                    (_, Item::Refusal(r)) => Item::Refusal(r),
                    (done, _) => done,
                };
            }
            "response.completed" => {
                self.usage = v["response"]["usage"].clone();
                return Ok(true);
            }
            "response.incomplete" => {
                self.usage = v["response"]["usage"].clone();
                let reason = v["response"]["incomplete_details"]["reason"].as_str();
                self.incomplete = Some(reason.unwrap_or("unknown").to_string());
                return Ok(true);
            }
            "response.failed" => {
                let error = &v["response"]["error"];
                return Err(classify(0, &json!({ "error": error }).to_string()));
            }
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
    fn a_screenshot_joins_its_function_call_output() {
        let items = input_items(&screenshot_turn());
        let output = &items[1];
        assert_eq!(output["type"], "function_call_output");
        assert_eq!(
            output["output"][0],
            json!({"type": "input_text", "text": "screenshot 1x1"})
        );
        assert_eq!(
            output["output"][1],
            json!({"type": "input_image", "image_url": "data:image/png;base64,iVBORw0K"})
        );
        assert_eq!(items.as_array().unwrap().len(), 2);
    }
}
