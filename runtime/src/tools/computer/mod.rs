//! The `computer` tool: the model sees an X display through screenshots and acts on it with
//! the mouse and keyboard.
//!
//! The action is typed ([`ComputerAction`]); where it runs is the workspace's business
//! ([`Workspace::computer`](crate::tools::workspace::Workspace::computer)): a local workspace
//! talks to `$DISPLAY`, a sandbox asks its inside to act on the sandbox's own Xvfb. Every
//! action answers with a fresh screenshot, so the model always sees the effect of what it just
//! did.
//! Coordinates are in the screenshot's pixels; the display side maps them to the screen.

pub mod action;
pub mod keys;
pub mod screenshot;
pub mod x11;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::conversation::{Image, ImageMediaType};
use crate::policy::{COMPUTER_TOOL, PersonalDataClass, SafetyLevel};
use crate::tools::input::{input_schema, parse_input};
use crate::tools::plan::{ResourceKeyRule, ToolContext, ToolHandler, ToolOutput, ToolSpec};

pub(crate) use action::ActionKind;
pub use action::{ComputerAction, ComputerError, MAX_WAIT_MS, Point, ScrollDirection};
pub use screenshot::Screenshot;

/// The input of `computer` as the model sends it: one flat object, because the providers take
/// only an object schema (no `oneOf` at the top), parsed at once into a [`ComputerAction`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ComputerInput {
    /// What to do.
    pub action: ActionKind,
    /// [x, y] in the screenshot's pixels: where mouse_move goes and left_click_drag ends;
    /// where a click or scroll happens (default: where the pointer is).
    pub coordinate: Option<Point>,
    /// [x, y] where left_click_drag starts.
    pub start_coordinate: Option<Point>,
    /// The text of `type`; the key or chord of `key` (Return, ctrl+a, shift+Tab).
    pub text: Option<String>,
    /// The wheel's direction for `scroll`.
    pub scroll_direction: Option<ScrollDirection>,
    /// Wheel clicks for `scroll`.
    #[schemars(range(min = 1, max = 50))]
    pub scroll_amount: Option<u32>,
    /// How long `wait` waits, in milliseconds.
    #[schemars(range(min = 0, max = MAX_WAIT_MS))]
    pub duration_ms: Option<u64>,
}

impl ComputerInput {
    /// The typed action, refused when an argument it needs is missing or one it does not
    /// take is given (the error names the field, for the model to fix).
    pub fn into_action(self) -> Result<ComputerAction, String> {
        let kind = self.action;
        let given = [
            ("coordinate", self.coordinate.is_some()),
            ("start_coordinate", self.start_coordinate.is_some()),
            ("text", self.text.is_some()),
            ("scroll_direction", self.scroll_direction.is_some()),
            ("scroll_amount", self.scroll_amount.is_some()),
            ("duration_ms", self.duration_ms.is_some()),
        ];
        let takes: &[&str] = match kind {
            ActionKind::Screenshot => &[],
            ActionKind::MouseMove
            | ActionKind::LeftClick
            | ActionKind::RightClick
            | ActionKind::MiddleClick
            | ActionKind::DoubleClick => &["coordinate"],
            ActionKind::LeftClickDrag => &["coordinate", "start_coordinate"],
            ActionKind::Type | ActionKind::Key => &["text"],
            ActionKind::Scroll => &["coordinate", "scroll_direction", "scroll_amount"],
            ActionKind::Wait => &["duration_ms"],
        };
        if let Some((field, _)) = given.iter().find(|(f, on)| *on && !takes.contains(f)) {
            return Err(format!("{kind} takes no `{field}`"));
        }
        let need = |field: &str| format!("{kind} needs `{field}`");
        Ok(match kind {
            ActionKind::Screenshot => ComputerAction::Screenshot,
            ActionKind::MouseMove => ComputerAction::MouseMove {
                coordinate: self.coordinate.ok_or_else(|| need("coordinate"))?,
            },
            ActionKind::LeftClick => ComputerAction::LeftClick {
                coordinate: self.coordinate,
            },
            ActionKind::RightClick => ComputerAction::RightClick {
                coordinate: self.coordinate,
            },
            ActionKind::MiddleClick => ComputerAction::MiddleClick {
                coordinate: self.coordinate,
            },
            ActionKind::DoubleClick => ComputerAction::DoubleClick {
                coordinate: self.coordinate,
            },
            ActionKind::LeftClickDrag => ComputerAction::LeftClickDrag {
                start_coordinate: self
                    .start_coordinate
                    .ok_or_else(|| need("start_coordinate"))?,
                coordinate: self.coordinate.ok_or_else(|| need("coordinate"))?,
            },
            ActionKind::Type => ComputerAction::Type {
                text: self.text.ok_or_else(|| need("text"))?,
            },
            ActionKind::Key => ComputerAction::Key {
                text: self.text.ok_or_else(|| need("text"))?,
            },
            ActionKind::Scroll => ComputerAction::Scroll {
                coordinate: self.coordinate,
                scroll_direction: self
                    .scroll_direction
                    .ok_or_else(|| need("scroll_direction"))?,
                scroll_amount: self.scroll_amount.unwrap_or(3),
            },
            ActionKind::Wait => ComputerAction::Wait {
                duration_ms: self.duration_ms.ok_or_else(|| need("duration_ms"))?,
            },
        })
    }
}

/// The `computer` tool, bound as `builtin:computer`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ComputerTool;

impl ComputerTool {
    pub(crate) fn spec() -> ToolSpec {
        ToolSpec {
            name: COMPUTER_TOOL.to_string(),
            description: "Use the computer's screen, mouse and keyboard. Every action returns a \
                screenshot; coordinates are pixels of that screenshot, [x, y] from the top-left. \
                Actions: screenshot, mouse_move, left_click, right_click, middle_click, \
                double_click, left_click_drag, type (text; \\n is Return), key (xdotool names: \
                Return, ctrl+a, shift+Tab), scroll (scroll_direction, scroll_amount), wait \
                (duration_ms). Keys go to the window under the pointer."
                .to_string(),
            input_schema: input_schema::<ComputerInput>(),
            // Arbitrary input to whatever runs on the display: as dangerous as a shell.
            safety: SafetyLevel::Dangerous,
            // A screenshot shows whatever is on the screen, names and addresses included.
            personal_data: PersonalDataClass::Personal,
            // One pointer and one keyboard: calls must not interleave their strokes.
            resource_keys: ResourceKeyRule::Fixed("display".to_string()),
            path_args: Vec::new(),
            effectful: true,
            command_arg: None,
            deadline_arg: None,
        }
    }
}

#[async_trait]
impl ToolHandler for ComputerTool {
    async fn call(&self, input: &Value, ctx: &ToolContext) -> ToolOutput {
        let parsed = parse_input::<ComputerInput>(input).map_err(|e| e.to_string());
        let action = match parsed.and_then(ComputerInput::into_action) {
            Ok(action) => action,
            Err(e) => return ToolOutput::error(e),
        };
        match ctx.workspace.computer(&action).await {
            Ok(shot) => screenshot_output(&shot),
            Err(e) => ToolOutput::error(e.to_string()),
        }
    }
}

/// The model reads the screenshot's frame in text too: the coordinates it gives next are in it.
fn screenshot_output(shot: &Screenshot) -> ToolOutput {
    use base64::Engine as _;
    let text = format!(
        "screenshot {}x{} (screen {}x{}); give coordinates in the screenshot's pixels",
        shot.width, shot.height, shot.screen_width, shot.screen_height
    );
    ToolOutput {
        content: text,
        is_error: false,
        images: vec![Image {
            media_type: ImageMediaType::Png,
            data_b64: base64::engine::general_purpose::STANDARD.encode(&shot.png),
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn action(input: Value) -> Result<ComputerAction, String> {
        parse_input::<ComputerInput>(&input)
            .map_err(|e| e.to_string())
            .and_then(ComputerInput::into_action)
    }

    #[test]
    fn actions_parse_from_the_anthropic_vocabulary() {
        assert_eq!(
            action(json!({"action": "left_click", "coordinate": [10, 20]})),
            Ok(ComputerAction::LeftClick {
                coordinate: Some([10, 20])
            })
        );
        assert_eq!(
            action(json!({"action": "screenshot"})),
            Ok(ComputerAction::Screenshot)
        );
        assert_eq!(
            action(json!({"action": "scroll", "scroll_direction": "down"})),
            Ok(ComputerAction::Scroll {
                coordinate: None,
                scroll_direction: ScrollDirection::Down,
                scroll_amount: 3
            })
        );
        assert_eq!(
            action(
                json!({"action": "left_click_drag", "start_coordinate": [1, 2],
                          "coordinate": [3, 4]})
            ),
            Ok(ComputerAction::LeftClickDrag {
                start_coordinate: [1, 2],
                coordinate: [3, 4]
            })
        );
    }

    #[test]
    fn unknown_actions_missing_and_foreign_fields_are_refused_by_name() {
        assert!(action(json!({"action": "teleport"})).is_err());
        assert!(action(json!({"action": "type", "text": "a", "x": 1})).is_err());
        assert_eq!(
            action(json!({"action": "mouse_move"})),
            Err("mouse_move needs `coordinate`".to_string())
        );
        assert_eq!(
            action(json!({"action": "screenshot", "text": "hi"})),
            Err("screenshot takes no `text`".to_string())
        );
    }

    #[test]
    fn the_spec_is_dangerous_and_serialized_on_one_display() {
        let spec = ComputerTool::spec();
        assert_eq!(spec.name, "computer");
        assert_eq!(spec.safety, SafetyLevel::Dangerous);
        assert_eq!(
            spec.resource_keys,
            ResourceKeyRule::Fixed("display".to_string())
        );
        let schema = &spec.input_schema;
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["required"], json!(["action"]));
        assert!(
            schema["properties"]["action"]
                .to_string()
                .contains("left_click_drag")
        );
    }
}
