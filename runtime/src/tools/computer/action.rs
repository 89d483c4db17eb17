//! What the computer tool does to a display, as data: an action with exactly its arguments,
//! and why one could not be done. Below the tool, the X11 driver and the workspaces that run
//! actions (locally, or inside a sandbox).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The longest `wait` the tool grants; a longer pause is the model's mistake, not a need.
pub const MAX_WAIT_MS: u64 = 10_000;

/// A point in the screenshot's pixels, `[x, y]` from the top-left corner.
pub type Point = [u32; 2];

/// One action on the display, each with exactly the arguments it needs. The names are
/// Anthropic's computer-use vocabulary, so a model trained on it needs no translation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
        scroll_amount: u32,
    },
    /// Wait `duration_ms` (at most 10000) for the screen to change, then take a screenshot.
    Wait { duration_ms: u64 },
}

/// The action names, as the model writes them in `action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum ActionKind {
    Screenshot,
    MouseMove,
    LeftClick,
    RightClick,
    MiddleClick,
    DoubleClick,
    LeftClickDrag,
    Type,
    Key,
    Scroll,
    Wait,
}

/// Which way the wheel turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
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
    Worker(#[source] crate::error_chain::BoxError),
    /// What the display's side inside a sandbox reported (its own error, as text).
    #[error("{0}")]
    Sandbox(String),
}
