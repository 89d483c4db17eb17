//! Chat Completions on the gateway's side (`POST /v1/chat/completions`, what litellm and so
//! mini-swe-agent speak): messages read into the runtime's conversation (system and developer
//! messages into the system prompt, `tool` messages as tool results), the reply as a
//! `chat.completion` or as `chat.completion.chunk`s ending in `data: [DONE]` (a usage chunk
//! first when `stream_options.include_usage`), errors as `{error: {message, type, code}}`.

use axum::http::StatusCode;
use geode_runtime::conversation::{
    AssistantTurn, ContentBlock, Image, ImageMediaType, Message, Role, StopReason, Usage,
};
use geode_runtime::model::http::{tool_arguments, tool_input};
use serde_json::{Value, json};

use super::call::{Encoder, Open, Refusal, WireCall};
use super::records::{AgentTool, RecordedRequest, WireFormat};

/// Text of a content that is a string or a list of parts; images kept apart.
fn text_and_images(content: &Value) -> (String, Vec<Image>) {
    match content {
        Value::String(s) => (s.clone(), Vec::new()),
        Value::Array(parts) => {
            let mut texts = Vec::new();
            let mut images = Vec::new();
            for p in parts {
                match p["type"].as_str() {
                    Some("text") => texts.push(p["text"].as_str().unwrap_or_default()),
                    Some("image_url") => {
                        let url = p["image_url"]["url"].as_str().unwrap_or_default();
                        if let Some(data) = url.strip_prefix("data:image/png;base64,") {
                            images.push(Image {
                                media_type: ImageMediaType::Png,
                                data_b64: data.to_string(),
                            });
                        }
                    }
                    _ => {}
                }
            }
            (texts.join("\n"), images)
        }
        _ => (String::new(), Vec::new()),
    }
}

/// Append `blocks` as a message of `role`, merged into the last one when it has that role
/// (consecutive `tool` messages are one user message of results).
fn push(messages: &mut Vec<Message>, role: Role, blocks: Vec<ContentBlock>) {
    match messages.last_mut() {
        Some(last) if last.role == role => last.content.extend(blocks),
        _ => messages.push(Message {
            role,
            content: blocks,
        }),
    }
}

/// Read a Chat Completions request. Errors name the field.
pub(super) fn parse(body: &Value) -> Result<WireCall, String> {
    let model = body["model"].as_str().ok_or("model: missing")?.to_string();
    let raw = body["messages"]
        .as_array()
        .ok_or("messages: missing or not a list")?;
    let mut system = Vec::new();
    let mut messages = Vec::new();
    for (i, m) in raw.iter().enumerate() {
        let (text, images) = text_and_images(&m["content"]);
        match m["role"].as_str() {
            Some("system" | "developer") => system.push(text),
            Some("user") => {
                let mut blocks = Vec::new();
                if !text.is_empty() {
                    blocks.push(ContentBlock::Text { text });
                }
                blocks.extend(images.into_iter().map(ContentBlock::Image));
                push(&mut messages, Role::User, blocks);
            }
            Some("tool") => {
                let mut blocks = vec![ContentBlock::ToolResult {
                    tool_use_id: m["tool_call_id"].as_str().unwrap_or_default().to_string(),
                    content: text,
                    is_error: false,
                }];
                blocks.extend(images.into_iter().map(ContentBlock::Image));
                push(&mut messages, Role::User, blocks);
            }
            Some("assistant") => {
                let mut blocks = Vec::new();
                let thought = m["reasoning_content"].as_str().or(m["reasoning"].as_str());
                if let Some(t) = thought.filter(|t| !t.is_empty()) {
                    blocks.push(ContentBlock::Thinking {
                        thinking: t.to_string(),
                        signature: None,
                    });
                }
                if !text.is_empty() {
                    blocks.push(ContentBlock::Text { text });
                }
                for c in m["tool_calls"].as_array().into_iter().flatten() {
                    let f = &c["function"];
                    blocks.push(ContentBlock::ToolUse {
                        id: c["id"].as_str().unwrap_or_default().to_string(),
                        name: f["name"].as_str().unwrap_or_default().to_string(),
                        input: match &f["arguments"] {
                            Value::String(s) => tool_input(s),
                            other => other.clone(),
                        },
                    });
                }
                push(&mut messages, Role::Assistant, blocks);
            }
            other => return Err(format!("messages[{i}].role: {other:?} is not a chat role")),
        }
    }
    let tools = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["type"] == "function")
        .map(|t| {
            let f = &t["function"];
            AgentTool {
                name: f["name"].as_str().unwrap_or_default().to_string(),
                description: f["description"].as_str().unwrap_or_default().to_string(),
                input_schema: f
                    .get("parameters")
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object"})),
            }
        })
        .collect();
    Ok(WireCall {
        format: WireFormat::ChatCompletions,
        stream: body["stream"].as_bool().unwrap_or(false),
        include_usage: body["stream_options"]["include_usage"]
            .as_bool()
            .unwrap_or(false),
        request: RecordedRequest {
            model,
            system: system.join("\n\n"),
            messages,
            tools,
        },
    })
}

fn finish_reason(r: StopReason) -> &'static str {
    match r {
        StopReason::EndTurn | StopReason::StopSequence => "stop",
        StopReason::ToolUse => "tool_calls",
        StopReason::MaxTokens => "length",
        StopReason::Refusal => "content_filter",
    }
}

/// The usage object (`completion_tokens` includes reasoning, as OpenAI counts it).
fn usage(u: &Usage) -> Value {
    let completion = u.output_tokens + u.reasoning_tokens;
    json!({
        "prompt_tokens": u.input_tokens,
        "completion_tokens": completion,
        "total_tokens": u.input_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": u.cached_input_tokens},
        "completion_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
    })
}

/// A whole reply as a `chat.completion`.
pub(super) fn reply(turn: &AssistantTurn, model: &str, id: &str, created: i64) -> Value {
    let text = turn.message.text();
    let calls: Vec<Value> = turn
        .message
        .tool_calls()
        .into_iter()
        .map(|c| {
            json!({"id": c.id, "type": "function",
                   "function": {"name": c.name, "arguments": tool_arguments(&c.input)}})
        })
        .collect();
    let reasoning: Vec<&str> = turn
        .message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Thinking { thinking, .. } if !thinking.is_empty() => {
                Some(thinking.as_str())
            }
            _ => None,
        })
        .collect();
    let mut message = json!({
        "role": "assistant",
        "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { json!(text) },
    });
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    if !reasoning.is_empty() {
        message["reasoning_content"] = json!(reasoning.join("\n\n"));
    }
    json!({
        "id": id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": message,
                     "finish_reason": finish_reason(turn.stop_reason)}],
        "usage": usage(&turn.usage),
    })
}

/// An error in OpenAI's shape; a used-up budget is `insufficient_quota` (429), which OpenAI
/// clients do not retry.
pub(super) fn error(refusal: &Refusal) -> (StatusCode, Value) {
    let (status, kind, code) = match refusal {
        Refusal::Unauthorized => (
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "invalid_api_key",
        ),
        Refusal::BadRequest(_) => (
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "invalid_request",
        ),
        Refusal::Budget(_) => (
            StatusCode::TOO_MANY_REQUESTS,
            "insufficient_quota",
            "insufficient_quota",
        ),
        Refusal::Transient(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "overloaded",
        ),
        Refusal::Failed(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "server_error",
        ),
    };
    (
        status,
        json!({"error": {"message": refusal.message(), "type": kind, "param": null, "code": code}}),
    )
}

/// The chunks of a streamed Chat Completion.
pub(super) struct Stream {
    id: String,
    model: String,
    created: i64,
    include_usage: bool,
    open: Option<Open>,
    calls: u64,
}

impl Stream {
    pub fn new(model: &str, id: &str, created: i64, include_usage: bool) -> Self {
        Stream {
            id: id.to_string(),
            model: model.to_string(),
            created,
            include_usage,
            open: None,
            calls: 0,
        }
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> String {
        let data = json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        });
        format!("data: {data}\n\n")
    }
}

impl Encoder for Stream {
    fn start(&mut self) -> Vec<String> {
        vec![self.chunk(json!({"role": "assistant", "content": ""}), None)]
    }

    fn open(&mut self, block: &Open) -> Vec<String> {
        self.open = Some(block.clone());
        match block {
            Open::Tool { id, name } => vec![self.chunk(
                json!({"tool_calls": [{"index": self.calls, "id": id, "type": "function",
                                       "function": {"name": name, "arguments": ""}}]}),
                None,
            )],
            Open::Text | Open::Thinking => Vec::new(),
        }
    }

    fn piece(&mut self, text: &str) -> Vec<String> {
        let delta = match self.open {
            Some(Open::Text) => json!({"content": text}),
            Some(Open::Thinking) => json!({"reasoning_content": text}),
            Some(Open::Tool { .. }) => {
                json!({"tool_calls": [{"index": self.calls, "function": {"arguments": text}}]})
            }
            None => return Vec::new(),
        };
        vec![self.chunk(delta, None)]
    }

    fn close(&mut self, _: Option<&str>) -> Vec<String> {
        if let Some(Open::Tool { .. }) = self.open.take() {
            self.calls += 1;
        }
        Vec::new()
    }

    fn end(&mut self, turn: &AssistantTurn) -> Vec<String> {
        let mut out = vec![self.chunk(json!({}), Some(finish_reason(turn.stop_reason)))];
        if self.include_usage {
            let data = json!({
                "id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model, "choices": [], "usage": usage(&turn.usage),
            });
            out.push(format!("data: {data}\n\n"));
        }
        out.push("data: [DONE]\n\n".into());
        out
    }

    fn fail(&mut self, refusal: &Refusal) -> Vec<String> {
        vec![
            format!("data: {}\n\n", error(refusal).1),
            "data: [DONE]\n\n".into(),
        ]
    }
}
