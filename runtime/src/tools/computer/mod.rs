//! The `computer` tool: the model sees an X display through screenshots and acts on it with
//! the mouse and keyboard.
//!
//! The action is typed ([`ComputerAction`]); where it runs is the workspace's business
//! ([`Workspace::computer`](crate::tools::workspace::Workspace::computer)): a local workspace
//! talks to `$DISPLAY`, a sandbox would talk to the display inside it. Every action answers
//! with a fresh screenshot, so the model always sees the effect of what it just did.
//! Coordinates are in the screenshot's pixels; the display side maps them to the screen.

pub mod keys;
pub mod screenshot;
pub mod x11;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::conversation::{Image, ImageMediaType};
use crate::policy::{COMPUTER_TOOL, PersonalDataClass, SafetyLevel};
use crate::tools::input::{input_schema, parse_input};
use crate::tools::plan::{ResourceKeyRule, ToolContext, ToolHandler, ToolOutput, ToolSpec};

pub use screenshot::Screenshot;

/// The longest `wait` the tool grants; a longer pause is the model's mistake, not a need.
pub const MAX_WAIT_MS: u64 = 10_000;

/// A point in the screenshot's pixels, `[x, y]` from the top-left corner.
pub type Point = [u32; 2];

/// One action on the display. The tag is `action`, the names are Anthropic's computer-use
/// vocabulary, so a model trained on it needs no translation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum ComputerAction {
    /// Only take a screenshot.
    Screenshot,
    /// Move the pointer to `coordinate`.
    MouseMove { coordinate: Point },
    /// Click the left button (at `coordinate`, else where the pointer is).
    LeftClick { coordinate: Option<Point> },
    /// Click the right button.
    RightClick { coordinate: Option<Point> },
    /// Click the middle button.
    MiddleClick { coordinate: Option<Point> },
    /// Click the left button twice.
    DoubleClick { coordinate: Option<Point> },
    /// Press the left button at `start_coordinate`, move to `coordinate`, release.
    LeftClickDrag {
        start_coordinate: Point,
        coordinate: Point,
    },
    /// Type `text` as key strokes into the focused window (the one under the pointer when no
    /// window manager runs). `\n` is Return, `\t` is Tab.
    Type { text: String },
    /// Press a key or chord, xdotool style: `Return`, `ctrl+a`, `shift+Tab`, `F5`.
    Key { text: String },
    /// Turn the wheel `scroll_amount` clicks (at `coordinate`, else where the pointer is).
    Scroll {
        coordinate: Option<Point>,
        scroll_direction: ScrollDirection,
        #[schemars(range(min = 1, max = 50))]
        scroll_amount: u32,
    },
    /// Wait `duration_ms` (at most 10000) for the screen to change, then take a screenshot.
    Wait {
        #[schemars(range(min = 0, max = MAX_WAIT_MS))]
        duration_ms: u64,
    },
}

/// Which way the wheel turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ScrollDirection {
    Up,
    Down,
    Left,
    Right,
}

/// Why an action could not be done; the text goes back to the model.
#[derive(Debug, thiserror::Error)]
pub enum ComputerError {
    #[error("this workspace has no display for the computer tool")]
    NoDisplay,
    #[error("cannot open the X display ({0}); is $DISPLAY set?")]
    Connect(#[from] ::x11rb::errors::ConnectError),
    #[error("X connection: {0}")]
    Connection(#[from] ::x11rb::errors::ConnectionError),
    #[error("X request failed: {0}")]
    Reply(#[from] ::x11rb::errors::ReplyError),
    #[error("the X server has no XTEST extension, so input cannot be sent")]
    NoXtest,
    #[error("unsupported screen format: depth {depth}, {bits_per_pixel} bits per pixel")]
    Format { depth: u8, bits_per_pixel: u8 },
    #[error("unknown key name {0:?} (use X keysym names such as Return, Tab, ctrl+a, F5)")]
    UnknownKey(String),
    #[error("the keyboard map has no key for {0:?}")]
    Unmapped(String),
    #[error("point [{x}, {y}] is outside the {width}x{height} screenshot")]
    OutOfScreen {
        x: u32,
        y: u32,
        width: u32,
        height: u32,
    },
    #[error("PNG encoding failed: {0}")]
    Png(#[from] png::EncodingError),
    #[error("the display worker stopped: {0}")]
    Worker(String),
}

/// The input of `computer`: one action.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct ComputerInput(pub ComputerAction);

/// The `computer` tool, bound as `builtin:computer`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ComputerTool;

impl ComputerTool {
    pub fn spec() -> ToolSpec {
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
        let ComputerInput(action) = match parse_input(input) {
            Ok(input) => input,
            Err(e) => return ToolOutput::error(e.to_string()),
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

    #[test]
    fn actions_parse_from_the_anthropic_vocabulary() {
        let a: ComputerInput =
            parse_input(&json!({"action": "left_click", "coordinate": [10, 20]})).unwrap();
        assert_eq!(
            a.0,
            ComputerAction::LeftClick {
                coordinate: Some([10, 20])
            }
        );
        let a: ComputerInput = parse_input(&json!({"action": "screenshot"})).unwrap();
        assert_eq!(a.0, ComputerAction::Screenshot);
        let a: ComputerInput = parse_input(
            &json!({"action": "scroll", "scroll_direction": "down", "scroll_amount": 3}),
        )
        .unwrap();
        assert!(matches!(
            a.0,
            ComputerAction::Scroll {
                scroll_direction: ScrollDirection::Down,
                ..
            }
        ));
    }

    #[test]
    fn unknown_actions_and_fields_are_refused() {
        assert!(parse_input::<ComputerInput>(&json!({"action": "teleport"})).is_err());
        assert!(
            parse_input::<ComputerInput>(&json!({"action": "type", "text": "a", "x": 1})).is_err()
        );
        assert!(parse_input::<ComputerInput>(&json!({"action": "mouse_move"})).is_err());
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
        assert!(spec.input_schema.to_string().contains("left_click_drag"));
    }
}
