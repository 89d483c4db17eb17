//! OpenAI Responses on the gateway's side (`POST /v1/responses`, what Codex CLI speaks, with
//! `store: false`): `instructions` and the input items (messages, `function_call`,
//! `function_call_output`, `reasoning`) read into the runtime's conversation, the reply as a
//! `response` object or as its stream (`response.created`, `response.output_item.added`,
//! `response.output_text.delta`, `response.function_call_arguments.delta`,
//! `response.output_item.done`, `response.completed`), errors in OpenAI's shape (`chat.rs`).

use geode_runtime::conversation::{
    AssistantTurn, ContentBlock, Image, ImageMediaType, Message, Role, StopReason, Usage,
};
use geode_runtime::model::http::{tool_arguments, tool_input};
use serde_json::{Value, json};

use super::call::{Encoder, Open, Refusal, WireCall, named, reply_id};
use super::records::{AgentTool, RecordedRequest, WireFormat};

fn push(messages: &mut Vec<Message>, role: Role, block: ContentBlock) {
    match messages.last_mut() {
        Some(last) if last.role == role => last.content.push(block),
        _ => messages.push(Message {
            role,
            content: vec![block],
        }),
    }
}

/// The parts of a message's or an output's content: texts joined, PNG data URLs as images.
fn parts(content: &Value) -> (String, Vec<Image>) {
    match content {
        Value::String(s) => (s.clone(), Vec::new()),
        Value::Array(parts) => {
            let mut texts = Vec::new();
            let mut images = Vec::new();
            for p in parts {
                if let Some(t) = p["text"].as_str() {
                    texts.push(t);
                }
                let url = p["image_url"].as_str().unwrap_or_default();
                if let Some(data) = url.strip_prefix("data:image/png;base64,") {
                    images.push(Image {
                        media_type: ImageMediaType::Png,
                        data_b64: data.to_string(),
                    });
                }
            }
            (texts.join("\n"), images)
        }
        _ => (String::new(), Vec::new()),
    }
}

/// The function tools of a `tools` list, namespaces opened. Hosted tools (web_search,
/// file_search) and custom grammars have no JSON schema the route's model could fill; only
/// functions are offered.
fn function_tools(list: &Value, out: &mut Vec<AgentTool>) {
    for t in list.as_array().into_iter().flatten() {
        match t["type"].as_str() {
            Some("function") => out.push(AgentTool {
                name: t["name"].as_str().unwrap_or_default().to_string(),
                description: t["description"].as_str().unwrap_or_default().to_string(),
                input_schema: t
                    .get("parameters")
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object"})),
            }),
            Some("namespace") => function_tools(&t["tools"], out),
            _ => {}
        }
    }
}

/// Read a Responses request. Errors name the field.
pub(super) fn parse(body: &Value) -> Result<WireCall, String> {
    let model = body["model"].as_str().ok_or("model: missing")?.to_string();
    let mut system: Vec<String> = body["instructions"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .into_iter()
        .collect();
    let mut messages = Vec::new();
    let mut extra_tools = Vec::new();
    let items = match &body["input"] {
        Value::String(text) => vec![json!({"type": "message", "role": "user", "content": text})],
        Value::Array(items) => items.clone(),
        _ => return Err("input: not a string or a list of items".into()),
    };
    for (i, item) in items.iter().enumerate() {
        let s = |k: &str| item[k].as_str().unwrap_or_default().to_string();
        // A message item may leave out its `type`.
        match item["type"].as_str().unwrap_or("message") {
            "message" => {
                let (text, images) = parts(&item["content"]);
                let role = match item["role"].as_str() {
                    Some("system" | "developer") => {
                        system.push(text);
                        continue;
                    }
                    Some("user") => Role::User,
                    Some("assistant") => Role::Assistant,
                    other => return Err(format!("input[{i}].role: {other:?} is not a role")),
                };
                if !text.is_empty() {
                    push(&mut messages, role, ContentBlock::Text { text });
                }
                for image in images {
                    push(&mut messages, role, ContentBlock::Image(image));
                }
            }
            "function_call" => push(
                &mut messages,
                Role::Assistant,
                ContentBlock::ToolUse {
                    id: s("call_id"),
                    name: s("name"),
                    input: tool_input(&s("arguments")),
                },
            ),
            "function_call_output" => {
                let (text, images) = parts(&item["output"]);
                push(
                    &mut messages,
                    Role::User,
                    ContentBlock::ToolResult {
                        tool_use_id: s("call_id"),
                        content: text,
                        is_error: false,
                    },
                );
                for image in images {
                    push(&mut messages, Role::User, ContentBlock::Image(image));
                }
            }
            "reasoning" => push(
                &mut messages,
                Role::Assistant,
                ContentBlock::Thinking {
                    thinking: parts(&item["summary"]).0,
                    signature: item["encrypted_content"].as_str().map(str::to_string),
                },
            ),
            // Codex CLI (0.17x) declares its tools in an input item as well as in `tools`.
            "additional_tools" => function_tools(&item["tools"], &mut extra_tools),
            // A freeform tool (Codex's apply_patch): its text is the call's one input.
            "custom_tool_call" => push(
                &mut messages,
                Role::Assistant,
                ContentBlock::ToolUse {
                    id: s("call_id"),
                    name: s("name"),
                    input: json!({"input": s("input")}),
                },
            ),
            "custom_tool_call_output" => push(
                &mut messages,
                Role::User,
                ContentBlock::ToolResult {
                    tool_use_id: s("call_id"),
                    content: parts(&item["output"]).0,
                    is_error: false,
                },
            ),
            other => {
                return Err(format!(
                    "input[{i}].type: {other:?} is not an item the gateway reads"
                ));
            }
        }
    }
    let mut tools = Vec::new();
    function_tools(&body["tools"], &mut tools);
    for tool in extra_tools {
        if !tools.iter().any(|t: &AgentTool| t.name == tool.name) {
            tools.push(tool);
        }
    }
    Ok(WireCall {
        format: WireFormat::OpenaiResponses,
        stream: body["stream"].as_bool().unwrap_or(false),
        include_usage: true,
        request: RecordedRequest {
            model,
            system: system.join("\n\n"),
            messages,
            tools,
        },
    })
}

fn usage(u: &Usage) -> Value {
    let output = u.output_tokens + u.reasoning_tokens;
    json!({
        "input_tokens": u.input_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_input_tokens},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
        "total_tokens": u.input_tokens + output,
    })
}

/// The output items of a reply, each with a fresh id.
fn output_items(turn: &AssistantTurn) -> Vec<Value> {
    turn.message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(message_item(&reply_id("msg_"), text)),
            ContentBlock::ToolUse { id, name, input } => Some(call_item(
                &reply_id("fc_"),
                id,
                name,
                &tool_arguments(input),
                "completed",
            )),
            ContentBlock::Thinking {
                thinking,
                signature,
            } => Some(reasoning_item(
                &reply_id("rs_"),
                thinking,
                signature.as_deref(),
            )),
            _ => None,
        })
        .collect()
}

fn message_item(id: &str, text: &str) -> Value {
    json!({"type": "message", "id": id, "status": "completed", "role": "assistant",
           "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

fn call_item(id: &str, call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({"type": "function_call", "id": id, "call_id": call_id, "name": name,
           "arguments": arguments, "status": status})
}

fn reasoning_item(id: &str, thinking: &str, encrypted: Option<&str>) -> Value {
    let summary: Vec<Value> = if thinking.is_empty() {
        Vec::new()
    } else {
        vec![json!({"type": "summary_text", "text": thinking})]
    };
    let mut item = json!({"type": "reasoning", "id": id, "summary": summary});
    if let Some(e) = encrypted {
        item["encrypted_content"] = json!(e);
    }
    item
}

/// The response object: `in_progress` with no output at the start of a stream, whole at its
/// end and for a call that did not stream.
fn response(
    id: &str,
    model: &str,
    created: i64,
    turn: Option<(&AssistantTurn, Vec<Value>)>,
) -> Value {
    let mut r = json!({
        "id": id, "object": "response", "created_at": created, "model": model,
        "status": "in_progress", "output": [], "error": null, "incomplete_details": null,
        "parallel_tool_calls": true, "store": false,
    });
    if let Some((turn, output)) = turn {
        r["status"] = json!(match turn.stop_reason {
            StopReason::MaxTokens => "incomplete",
            _ => "completed",
        });
        if turn.stop_reason == StopReason::MaxTokens {
            r["incomplete_details"] = json!({"reason": "max_output_tokens"});
        }
        r["output"] = Value::Array(output);
        r["usage"] = usage(&turn.usage);
    }
    r
}

/// A whole reply as a response object.
pub(super) fn reply(turn: &AssistantTurn, model: &str, id: &str, created: i64) -> Value {
    response(id, model, created, Some((turn, output_items(turn))))
}

/// The Responses stream's events, numbered.
pub(super) struct Stream {
    id: String,
    model: String,
    created: i64,
    seq: u64,
    output: Vec<Value>,
    open: Option<(Open, String, String)>,
}

impl Stream {
    pub fn new(model: &str, id: &str, created: i64) -> Self {
        Stream {
            id: id.to_string(),
            model: model.to_string(),
            created,
            seq: 0,
            output: Vec::new(),
            open: None,
        }
    }

    fn event(&mut self, kind: &str, mut data: Value) -> String {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        named(kind, &data)
    }

    fn index(&self) -> usize {
        self.output.len()
    }
}

impl Encoder for Stream {
    fn start(&mut self) -> Vec<String> {
        let r = response(&self.id, &self.model, self.created, None);
        vec![
            self.event("response.created", json!({"response": r})),
            self.event("response.in_progress", json!({"response": r})),
        ]
    }

    fn open(&mut self, block: &Open) -> Vec<String> {
        let (item_id, item) = match block {
            Open::Text => {
                let id = reply_id("msg_");
                let item = json!({"type": "message", "id": id, "status": "in_progress",
                                  "role": "assistant", "content": []});
                (id, item)
            }
            Open::Thinking => {
                let id = reply_id("rs_");
                let item = json!({"type": "reasoning", "id": id, "summary": []});
                (id, item)
            }
            Open::Tool { id: call_id, name } => {
                let id = reply_id("fc_");
                let item = call_item(&id, call_id, name, "", "in_progress");
                (id, item)
            }
        };
        let index = self.index();
        let mut out = vec![self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        )];
        match block {
            Open::Text => out.push(self.event(
                "response.content_part.added",
                json!({"item_id": item_id, "output_index": index, "content_index": 0,
                       "part": {"type": "output_text", "text": "", "annotations": []}}),
            )),
            Open::Thinking => out.push(self.event(
                "response.reasoning_summary_part.added",
                json!({"item_id": item_id, "output_index": index, "summary_index": 0,
                       "part": {"type": "summary_text", "text": ""}}),
            )),
            Open::Tool { .. } => {}
        }
        self.open = Some((block.clone(), item_id, String::new()));
        out
    }

    fn piece(&mut self, text: &str) -> Vec<String> {
        let index = self.index();
        let Some((block, item_id, so_far)) = &mut self.open else {
            return Vec::new();
        };
        so_far.push_str(text);
        let (kind, data) = match block {
            Open::Text => (
                "response.output_text.delta",
                json!({"item_id": item_id, "output_index": index, "content_index": 0,
                       "delta": text}),
            ),
            Open::Thinking => (
                "response.reasoning_summary_text.delta",
                json!({"item_id": item_id, "output_index": index, "summary_index": 0,
                       "delta": text}),
            ),
            Open::Tool { .. } => (
                "response.function_call_arguments.delta",
                json!({"item_id": item_id, "output_index": index, "delta": text}),
            ),
        };
        vec![self.event(kind, data)]
    }

    fn close(&mut self, signature: Option<&str>) -> Vec<String> {
        let index = self.index();
        let Some((block, item_id, text)) = self.open.take() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let item = match &block {
            Open::Text => {
                out.push(self.event(
                    "response.output_text.done",
                    json!({"item_id": item_id, "output_index": index, "content_index": 0,
                           "text": text}),
                ));
                out.push(self.event(
                    "response.content_part.done",
                    json!({"item_id": item_id, "output_index": index, "content_index": 0,
                           "part": {"type": "output_text", "text": text, "annotations": []}}),
                ));
                message_item(&item_id, &text)
            }
            Open::Thinking => reasoning_item(&item_id, &text, signature),
            Open::Tool { id, name } => {
                out.push(self.event(
                    "response.function_call_arguments.done",
                    json!({"item_id": item_id, "output_index": index, "arguments": text}),
                ));
                call_item(&item_id, id, name, &text, "completed")
            }
        };
        out.push(self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        ));
        self.output.push(item);
        out
    }

    fn end(&mut self, turn: &AssistantTurn) -> Vec<String> {
        let output = std::mem::take(&mut self.output);
        let r = response(&self.id, &self.model, self.created, Some((turn, output)));
        let kind = if turn.stop_reason == StopReason::MaxTokens {
            "response.incomplete"
        } else {
            "response.completed"
        };
        vec![self.event(kind, json!({"response": r}))]
    }

    fn fail(&mut self, refusal: &Refusal) -> Vec<String> {
        let mut r = response(&self.id, &self.model, self.created, None);
        r["status"] = json!("failed");
        let (_, body) = super::chat::error(refusal);
        r["error"] = json!({"code": body["error"]["code"], "message": refusal.message()});
        vec![self.event("response.failed", json!({"response": r}))]
    }
}
