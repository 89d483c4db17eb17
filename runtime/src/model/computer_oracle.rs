//! The oracle of a desktop task: plays the task's `solution/computer.json`, a list of
//! `computer` actions, as tool calls through the full pipeline (policy, approval, the
//! workspace's display), one per turn, then reports.
//!
//! One call per turn because the display has one pointer and one keyboard, and because each
//! action's screenshot is the state the next action was written against.

use std::path::Path;

use async_trait::async_trait;
use serde_json::Value;

use super::{Model, ModelError, ModelRequest};
use crate::conversation::{AssistantTurn, ContentBlock, Message, Role, StopReason, Usage};
use crate::policy::COMPUTER_TOOL;
use crate::tools::computer::ComputerInput;
use crate::tools::input::parse_input;

/// The file of a task's solution that makes the oracle use the screen instead of `solve.sh`.
pub const COMPUTER_SOLUTION: &str = "computer.json";

/// Call ids are this prefix and the action's index, so the oracle finds its own results.
const CALL_PREFIX: &str = "oracle_computer_";

/// Proposes the solution's `computer` actions in order, one per turn, then a final text.
#[derive(Debug, Clone)]
pub struct ComputerOracle {
    actions: Vec<Value>,
}

impl ComputerOracle {
    /// Reads `path` (a JSON list of `computer` inputs); every action is checked here, so a
    /// bad solution fails before the trial, naming the file and the action's index.
    pub fn load(path: &Path) -> Result<Self, ModelError> {
        let err = |message: String| ModelError::Script {
            path: path.display().to_string(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let value: Value = serde_json::from_str(&text).map_err(|e| err(e.to_string()))?;
        Self::from_json(value).map_err(err)
    }

    /// The actions of a parsed `computer.json`; the error names the action's index.
    pub fn from_json(value: Value) -> Result<Self, String> {
        let Value::Array(actions) = value else {
            return Err("expected a JSON list of computer actions".into());
        };
        if actions.is_empty() {
            return Err("the list of computer actions is empty".into());
        }
        for (i, action) in actions.iter().enumerate() {
            parse_input::<ComputerInput>(action)
                .map_err(|e| e.to_string())
                .and_then(ComputerInput::into_action)
                .map_err(|e| format!("action [{i}]: {e}"))?;
        }
        Ok(ComputerOracle { actions })
    }
}

fn text_turn(text: String) -> AssistantTurn {
    AssistantTurn {
        message: Message::assistant_text(&text),
        usage: Usage::default(),
        stop_reason: StopReason::EndTurn,
    }
}

#[async_trait]
impl Model for ComputerOracle {
    fn id(&self) -> &str {
        "oracle"
    }

    async fn complete(&self, request: &ModelRequest<'_>) -> Result<AssistantTurn, ModelError> {
        let results: Vec<(&str, bool)> = request
            .messages
            .iter()
            .flat_map(|m| m.content.iter())
            .filter_map(|b| match b {
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                } if tool_use_id.starts_with(CALL_PREFIX) => Some((content.as_str(), *is_error)),
                _ => None,
            })
            .collect();
        if let Some((content, _)) = results.iter().find(|(_, is_error)| *is_error) {
            return Ok(text_turn(format!(
                "A computer action of the reference solution failed ({content}); the task is \
                 probably not solved."
            )));
        }
        let done = results.len();
        if done >= self.actions.len() {
            return Ok(text_turn(format!(
                "The reference solution's {done} computer actions ran; the task should now be \
                 solved."
            )));
        }
        if request.force_text {
            return Ok(text_turn(
                "The oracle had no round left to finish the computer actions.".into(),
            ));
        }
        Ok(AssistantTurn {
            message: Message {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolUse {
                    id: format!("{CALL_PREFIX}{done}"),
                    name: COMPUTER_TOOL.into(),
                    input: self.actions[done].clone(),
                }],
            },
            usage: Usage::default(),
            stop_reason: StopReason::ToolUse,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bad_solutions_are_refused_naming_the_action() {
        assert!(ComputerOracle::from_json(json!({"action": "screenshot"})).is_err());
        assert!(ComputerOracle::from_json(json!([])).is_err());
        let err = ComputerOracle::from_json(json!([
            {"action": "screenshot"},
            {"action": "type"}
        ]))
        .unwrap_err();
        assert_eq!(err, "action [1]: type needs `text`");
        assert!(ComputerOracle::from_json(json!([{"action": "screenshot"}])).is_ok());
    }
}
