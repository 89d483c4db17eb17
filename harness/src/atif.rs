//! ATIF v1.7 trajectories (`agent/trajectory.json`), the format Harbor writes, built from the
//! trial's session timeline so people's Harbor tooling can read GEODE runs.

use std::path::Path;

use base64::Engine as _;
use geode_runtime::conversation::{ContentBlock, ImageMediaType, Message, Role, Usage};
use geode_runtime::store::timeline::{TimelineEvent, TimelineRow};
use serde_json::{Value, json};

/// A tool call's screenshot saved beside the trajectory (ATIF 1.6+ keeps images as files that
/// content parts point to; the timeline holds only their hashes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedImage {
    /// The id of the tool call whose result held the image.
    pub call_id: String,
    /// The image's format.
    pub media_type: ImageMediaType,
    /// Relative to the trajectory's folder.
    pub path: String,
}

/// Writes each tool result's images as `agent_dir/screenshot-<sha256>.png`, flat in that
/// folder: the agent may still run and `agent/` is its folder too, so no subfolder it could
/// swap for a link, and the file itself is never written through one. Returns what was saved
/// and the errors of what was not.
pub fn save_images(agent_dir: &Path, messages: &[Message]) -> (Vec<SavedImage>, Vec<String>) {
    let (mut saved, mut errors) = (Vec::new(), Vec::new());
    for (call_id, image) in messages.iter().flat_map(Message::tool_images) {
        let path = format!("screenshot-{}.png", image.digest().sha256);
        let written = base64::engine::general_purpose::STANDARD
            .decode(&image.data_b64)
            .map_err(|e| e.to_string())
            .and_then(|bytes| {
                geode_graders::safe_fs::write(&agent_dir.join(&path), &bytes)
                    .map_err(|e| e.to_string())
            });
        match written {
            Ok(()) => saved.push(SavedImage {
                call_id: call_id.to_string(),
                media_type: image.media_type,
                path,
            }),
            Err(e) => errors.push(format!("could not save {path}: {e}")),
        }
    }
    (saved, errors)
}

/// One entry of a conversation as a trajectory reads it: what the user side sent, or what the
/// model answered with its usage. A session's timeline rows and a gateway's records (see
/// `gateway::trajectory`) both come down to these.
#[derive(Debug, Clone, Copy)]
pub enum Entry<'a> {
    /// A user message (task text, follow-ups, tool results).
    User {
        /// When it was sent, RFC 3339.
        ts: &'a str,
        /// The message.
        message: &'a Message,
    },
    /// A model's reply.
    Agent {
        /// When the call was made, RFC 3339.
        ts: &'a str,
        /// The reply.
        message: &'a Message,
        /// The call's tokens and cost.
        usage: &'a Usage,
    },
}

/// Build the trajectory document of one session.
pub fn trajectory(
    session_id: &str,
    model_name: &str,
    tool_definitions: Vec<Value>,
    rows: &[TimelineRow],
    images: &[SavedImage],
) -> Value {
    let entries = rows.iter().filter_map(|row| match &row.event {
        TimelineEvent::UserMessage { message } => Some(Entry::User {
            ts: &row.ts,
            message,
        }),
        TimelineEvent::AssistantMessage { message, usage, .. } => Some(Entry::Agent {
            ts: &row.ts,
            message,
            usage,
        }),
        _ => None,
    });
    trajectory_of(
        "geode",
        session_id,
        model_name,
        tool_definitions,
        entries,
        images,
    )
}

/// Build the trajectory document of one conversation, written by agent `agent_name`.
pub fn trajectory_of<'a>(
    agent_name: &str,
    session_id: &str,
    model_name: &str,
    tool_definitions: Vec<Value>,
    entries: impl IntoIterator<Item = Entry<'a>>,
    images: &[SavedImage],
) -> Value {
    let mut steps: Vec<Value> = Vec::new();
    let (mut prompt, mut completion, mut cached, mut cost) = (0u64, 0u64, 0u64, 0f64);
    for entry in entries {
        match entry {
            Entry::User { ts, message } => {
                if let Some(last) = steps.last_mut()
                    && attach_observations(last, message, images)
                {
                    continue;
                }
                steps.push(json!({
                    "step_id": steps.len() + 1,
                    "timestamp": ts,
                    "source": "user",
                    "message": message.text(),
                }));
            }
            Entry::Agent { ts, message, usage } => {
                prompt += usage.input_tokens;
                completion += usage.output_tokens;
                cached += usage.cached_input_tokens;
                cost += usage.cost_usd;
                let reasoning: Vec<&str> = message
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::Thinking { thinking, .. } => Some(thinking.as_str()),
                        _ => None,
                    })
                    .collect();
                let calls: Vec<Value> = message
                    .tool_calls()
                    .into_iter()
                    .map(|c| {
                        json!({"tool_call_id": c.id, "function_name": c.name,
                               "arguments": arguments_object(&c.input)})
                    })
                    .collect();
                let mut step = json!({
                    "step_id": steps.len() + 1,
                    "timestamp": ts,
                    "source": "agent",
                    "message": message.text(),
                    "metrics": {
                        "prompt_tokens": usage.input_tokens,
                        "cached_tokens": usage.cached_input_tokens,
                        "completion_tokens": usage.output_tokens,
                        "cost_usd": usage.cost_usd,
                    },
                });
                if !reasoning.is_empty() {
                    step["reasoning_content"] = json!(reasoning.join("\n"));
                }
                if !calls.is_empty() {
                    step["tool_calls"] = json!(calls);
                }
                steps.push(step);
            }
        }
    }
    json!({
        "schema_version": "ATIF-v1.7",
        "session_id": session_id,
        "agent": {
            "name": agent_name,
            "version": env!("CARGO_PKG_VERSION"),
            "model_name": model_name,
            "tool_definitions": tool_definitions,
        },
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": prompt,
            "total_completion_tokens": completion,
            "total_cached_tokens": cached,
            "total_cost_usd": cost,
            "total_steps": steps.len(),
        },
    })
}

/// Tool results belong to the agent step that called them, as its observation.
fn attach_observations(step: &mut Value, message: &Message, images: &[SavedImage]) -> bool {
    if message.role != Role::User || step["source"] != "agent" || step.get("tool_calls").is_none() {
        return false;
    }
    let results: Vec<Value> = message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                ..
            } => Some(json!({
                "source_call_id": tool_use_id,
                "content": observed(tool_use_id, content, images),
            })),
            _ => None,
        })
        .collect();
    if results.is_empty() {
        return false;
    }
    step["observation"] = json!({ "results": results });
    true
}

/// A result's content: its text, or with screenshots a list of content parts (text, then
/// each image as a file reference).
fn observed(call_id: &str, text: &str, images: &[SavedImage]) -> Value {
    let mut parts: Vec<Value> = images
        .iter()
        .filter(|i| i.call_id == call_id)
        .map(|i| {
            json!({"type": "image", "source": {"media_type": i.media_type.as_str(), "path": i.path}})
        })
        .collect();
    if parts.is_empty() {
        return json!(text);
    }
    parts.insert(0, json!({"type": "text", "text": text}));
    Value::Array(parts)
}

/// ATIF's `arguments` is an object. A model may send anything (a string it failed to encode,
/// an array): that is kept whole under `raw`, and no arguments at all are `{}`.
fn arguments_object(input: &Value) -> Value {
    match input {
        Value::Object(_) => input.clone(),
        Value::Null => json!({}),
        other => json!({ "raw": other }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_always_an_object() {
        let object = json!({"command": "ls"});
        assert_eq!(arguments_object(&object), object);
        assert_eq!(arguments_object(&Value::Null), json!({}));
        assert_eq!(
            arguments_object(&json!("{\"command\": \"ls\"")),
            json!({"raw": "{\"command\": \"ls\""})
        );
        assert_eq!(arguments_object(&json!([1, 2])), json!({"raw": [1, 2]}));
    }

    #[test]
    fn screenshots_become_image_parts_that_name_their_files() {
        use geode_runtime::conversation::{Image, ToolResult};
        let dir = tempfile::tempdir().unwrap();
        let image = Image {
            media_type: ImageMediaType::Png,
            data_b64: base64::engine::general_purpose::STANDARD.encode(b"\x89PNG fake"),
        };
        let result = ToolResult {
            tool_use_id: "c1".into(),
            content: "screenshot 1x1".into(),
            is_error: false,
            images: vec![image.clone()],
        };
        let message = Message {
            role: Role::User,
            content: result.into_blocks(),
        };
        let (saved, errors) = save_images(dir.path(), std::slice::from_ref(&message));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(saved.len(), 1);
        let file = dir.path().join(&saved[0].path);
        assert_eq!(std::fs::read(file).unwrap(), b"\x89PNG fake");
        let parts = observed("c1", "screenshot 1x1", &saved);
        assert_eq!(parts[0], json!({"type": "text", "text": "screenshot 1x1"}));
        assert_eq!(parts[1]["type"], "image");
        assert_eq!(parts[1]["source"]["media_type"], "image/png");
        assert_eq!(parts[1]["source"]["path"], saved[0].path);
        // Other calls keep plain text content.
        assert_eq!(observed("c2", "ok", &saved), json!("ok"));
    }
}
