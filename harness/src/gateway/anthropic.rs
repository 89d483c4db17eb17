//! Anthropic Messages on the gateway's side (`POST /v1/messages`, `?beta=true` as Claude Code
//! sends it): the request read into the runtime's conversation, the reply written back as a
//! message object or as the stream's events (`message_start`, `content_block_start` / `_delta`
//! (`text_delta`, `thinking_delta`, `input_json_delta`) / `_stop`, `message_delta`,
//! `message_stop`), and errors as `{type: error, error: {type, message}}`.

use axum::http::StatusCode;
use geode_runtime::conversation::{
    AssistantTurn, ContentBlock, Image, ImageMediaType, Message, Role, StopReason, Usage,
};
use geode_runtime::model::anthropic::REDACTED_PREFIX;
use serde_json::{Value, json};

use super::call::{Encoder, Open, Refusal, WireCall, named};
use super::records::{AgentTool, RecordedRequest, WireFormat};

/// Read a Messages request. Errors name the field.
pub(super) fn parse(body: &Value) -> Result<WireCall, String> {
    let model = body["model"].as_str().ok_or("model: missing")?.to_string();
    let system = match &body["system"] {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n\n"),
        _ => return Err("system: not a string or a list of text blocks".into()),
    };
    let raw = body["messages"]
        .as_array()
        .ok_or("messages: missing or not a list")?;
    let mut messages = Vec::new();
    for (i, m) in raw.iter().enumerate() {
        let role = match m["role"].as_str() {
            Some("user") => Role::User,
            // Claude Code (2.1) puts mid-conversation instructions in `system` messages; the
            // runtime's conversation has no such turn, and the model reads them as the user's.
            Some("system") => Role::User,
            Some("assistant") => Role::Assistant,
            other => {
                return Err(format!(
                    "messages[{i}].role: {other:?} is not user or assistant"
                ));
            }
        };
        let content = match &m["content"] {
            Value::String(text) => vec![ContentBlock::Text { text: text.clone() }],
            Value::Array(blocks) => {
                let mut out = Vec::new();
                for (j, b) in blocks.iter().enumerate() {
                    blocks_of(b, &mut out)
                        .map_err(|e| format!("messages[{i}].content[{j}]: {e}"))?;
                }
                out
            }
            _ => return Err(format!("messages[{i}].content: not a string or a list")),
        };
        messages.push(Message { role, content });
    }
    let tools = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        // Server tools (web search, code execution) have a type and no schema: the route's
        // model cannot run them, so they are not offered.
        .filter(|t| t.get("input_schema").is_some())
        .map(|t| AgentTool {
            name: t["name"].as_str().unwrap_or_default().to_string(),
            description: t["description"].as_str().unwrap_or_default().to_string(),
            input_schema: t["input_schema"].clone(),
        })
        .collect();
    Ok(WireCall {
        format: WireFormat::AnthropicMessages,
        stream: body["stream"].as_bool().unwrap_or(false),
        include_usage: true,
        request: RecordedRequest {
            model,
            system,
            messages,
            tools,
        },
    })
}

fn image(source: &Value) -> Option<Image> {
    if source["type"] != "base64" || source["media_type"] != "image/png" {
        return None;
    }
    Some(Image {
        media_type: ImageMediaType::Png,
        data_b64: source["data"].as_str()?.to_string(),
    })
}

/// One wire block as the runtime's blocks (a tool result with images is the result, then them).
fn blocks_of(b: &Value, out: &mut Vec<ContentBlock>) -> Result<(), String> {
    let s = |k: &str| b[k].as_str().unwrap_or_default().to_string();
    match b["type"].as_str() {
        Some("text") => out.push(ContentBlock::Text { text: s("text") }),
        Some("image") => {
            if let Some(i) = image(&b["source"]) {
                out.push(ContentBlock::Image(i));
            } else {
                out.push(ContentBlock::Text {
                    text: "[image the gateway does not carry]".into(),
                });
            }
        }
        Some("tool_use") => out.push(ContentBlock::ToolUse {
            id: s("id"),
            name: s("name"),
            input: b["input"].clone(),
        }),
        Some("tool_result") => {
            let mut images = Vec::new();
            let content = match &b["content"] {
                Value::String(t) => t.clone(),
                Value::Array(parts) => {
                    let mut texts = Vec::new();
                    for p in parts {
                        match p["type"].as_str() {
                            Some("text") => texts.push(p["text"].as_str().unwrap_or_default()),
                            Some("image") => images.extend(image(&p["source"])),
                            _ => {}
                        }
                    }
                    texts.join("\n")
                }
                _ => String::new(),
            };
            out.push(ContentBlock::ToolResult {
                tool_use_id: s("tool_use_id"),
                content,
                is_error: b["is_error"].as_bool().unwrap_or(false),
            });
            out.extend(images.into_iter().map(ContentBlock::Image));
        }
        // An empty signature is none: the gateway may have streamed the block before its
        // signature was known (`Ledger::restore_signatures` puts it back).
        Some("thinking") => out.push(ContentBlock::Thinking {
            thinking: s("thinking"),
            signature: b["signature"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_string),
        }),
        Some("redacted_thinking") => out.push(ContentBlock::Thinking {
            thinking: String::new(),
            signature: Some(format!("{REDACTED_PREFIX}{}", s("data"))),
        }),
        other => return Err(format!("type {other:?} is not a block the gateway reads")),
    }
    Ok(())
}

fn stop_reason(r: StopReason) -> &'static str {
    match r {
        StopReason::EndTurn => "end_turn",
        StopReason::ToolUse => "tool_use",
        StopReason::MaxTokens => "max_tokens",
        StopReason::StopSequence => "stop_sequence",
        StopReason::Refusal => "refusal",
    }
}

/// The usage object: the runtime counts cache reads inside the input, Anthropic apart.
fn usage(u: &Usage) -> Value {
    json!({
        "input_tokens": u.input_tokens.saturating_sub(u.cached_input_tokens),
        "cache_read_input_tokens": u.cached_input_tokens,
        "cache_creation_input_tokens": 0,
        "output_tokens": u.output_tokens,
    })
}

/// A whole reply as a message object.
pub(super) fn reply(turn: &AssistantTurn, model: &str, id: &str) -> Value {
    let content: Vec<Value> = turn
        .message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(json!({"type": "text", "text": text})),
            ContentBlock::ToolUse { id, name, input } => {
                Some(json!({"type": "tool_use", "id": id, "name": name, "input": input}))
            }
            ContentBlock::Thinking {
                thinking,
                signature,
            } => Some(
                match signature
                    .as_deref()
                    .and_then(|s| s.strip_prefix(REDACTED_PREFIX))
                {
                    Some(data) => json!({"type": "redacted_thinking", "data": data}),
                    None => json!({"type": "thinking", "thinking": thinking,
                               "signature": signature.as_deref().unwrap_or_default()}),
                },
            ),
            _ => None,
        })
        .collect();
    json!({
        "id": id, "type": "message", "role": "assistant", "model": model,
        "content": content,
        "stop_reason": stop_reason(turn.stop_reason), "stop_sequence": null,
        "usage": usage(&turn.usage),
    })
}

/// An error in the Messages shape, with the status Anthropic uses for its kind (a used-up
/// budget is `billing_error`: clients do not retry it).
pub(super) fn error(refusal: &Refusal) -> (StatusCode, Value) {
    let (status, kind) = match refusal {
        Refusal::Unauthorized => (StatusCode::UNAUTHORIZED, "authentication_error"),
        Refusal::BadRequest(_) => (StatusCode::BAD_REQUEST, "invalid_request_error"),
        Refusal::Budget(_) => (StatusCode::PAYMENT_REQUIRED, "billing_error"),
        Refusal::Transient(_) => (
            StatusCode::from_u16(529).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
            "overloaded_error",
        ),
        Refusal::Failed(_) => (StatusCode::INTERNAL_SERVER_ERROR, "api_error"),
    };
    (
        status,
        json!({"type": "error", "error": {"type": kind, "message": refusal.message()}}),
    )
}

/// The Messages stream's events.
pub(super) struct Stream {
    id: String,
    model: String,
    index: u64,
    open: Option<Open>,
}

impl Stream {
    pub fn new(model: &str, id: &str) -> Self {
        Stream {
            id: id.to_string(),
            model: model.to_string(),
            index: 0,
            open: None,
        }
    }
}

impl Encoder for Stream {
    fn start(&mut self) -> Vec<String> {
        let message = json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": usage(&Usage::default()),
        });
        vec![named(
            "message_start",
            &json!({"type": "message_start", "message": message}),
        )]
    }

    fn open(&mut self, block: &Open) -> Vec<String> {
        let content_block = match block {
            Open::Text => json!({"type": "text", "text": ""}),
            Open::Thinking => json!({"type": "thinking", "thinking": "", "signature": ""}),
            Open::Tool { id, name } => {
                json!({"type": "tool_use", "id": id, "name": name, "input": {}})
            }
        };
        self.open = Some(block.clone());
        vec![named(
            "content_block_start",
            &json!({"type": "content_block_start", "index": self.index,
                    "content_block": content_block}),
        )]
    }

    fn piece(&mut self, text: &str) -> Vec<String> {
        let delta = match self.open {
            Some(Open::Text) => json!({"type": "text_delta", "text": text}),
            Some(Open::Thinking) => json!({"type": "thinking_delta", "thinking": text}),
            Some(Open::Tool { .. }) => json!({"type": "input_json_delta", "partial_json": text}),
            None => return Vec::new(),
        };
        vec![named(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": self.index, "delta": delta}),
        )]
    }

    fn close(&mut self, signature: Option<&str>) -> Vec<String> {
        let mut out = Vec::new();
        if let (Some(Open::Thinking), Some(sig)) = (&self.open, signature) {
            out.push(named(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": self.index,
                        "delta": {"type": "signature_delta", "signature": sig}}),
            ));
        }
        out.push(named(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": self.index}),
        ));
        self.open = None;
        self.index += 1;
        out
    }

    fn end(&mut self, turn: &AssistantTurn) -> Vec<String> {
        vec![
            named(
                "message_delta",
                &json!({"type": "message_delta",
                        "delta": {"stop_reason": stop_reason(turn.stop_reason), "stop_sequence": null},
                        "usage": usage(&turn.usage)}),
            ),
            named("message_stop", &json!({"type": "message_stop"})),
        ]
    }

    fn fail(&mut self, refusal: &Refusal) -> Vec<String> {
        vec![named("error", &error(refusal).1)]
    }
}
