//! ATIF v1.7 trajectories (`agent/trajectory.json`), the format Harbor writes, built from the
//! trial's session timeline so people's Harbor tooling can read GEODE runs.

use geode_runtime::conversation::{ContentBlock, Message, Role};
use geode_runtime::store::timeline::{TimelineEvent, TimelineRow};
use serde_json::{Value, json};

/// Build the trajectory document of one session.
pub fn trajectory(
    session_id: &str,
    model_name: &str,
    tool_definitions: Vec<Value>,
    rows: &[TimelineRow],
) -> Value {
    let mut steps: Vec<Value> = Vec::new();
    let (mut prompt, mut completion, mut cached, mut cost) = (0u64, 0u64, 0u64, 0f64);
    for row in rows {
        match &row.event {
            TimelineEvent::UserMessage { message } => {
                if let Some(last) = steps.last_mut()
                    && attach_observations(last, message)
                {
                    continue;
                }
                steps.push(json!({
                    "step_id": steps.len() + 1,
                    "timestamp": row.ts,
                    "source": "user",
                    "message": message.text(),
                }));
            }
            TimelineEvent::AssistantMessage { message, usage, .. } => {
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
                    "timestamp": row.ts,
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
            _ => {}
        }
    }
    json!({
        "schema_version": "ATIF-v1.7",
        "session_id": session_id,
        "agent": {
            "name": "geode",
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
fn attach_observations(step: &mut Value, message: &Message) -> bool {
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
            } => Some(json!({"source_call_id": tool_use_id, "content": content})),
            _ => None,
        })
        .collect();
    if results.is_empty() {
        return false;
    }
    step["observation"] = json!({ "results": results });
    true
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
}
