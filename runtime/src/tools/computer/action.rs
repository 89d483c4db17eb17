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
    MouseMove {
        /// Where the pointer goes, in screenshot pixels.
        coordinate: Point,
    },
    /// Click the left button (at `coordinate`, else where the pointer is).
    LeftClick {
        /// Where to click; `None` clicks where the pointer is.
        coordinate: Option<Point>,
    },
    /// Click the right button.
    RightClick {
        /// Where to click; `None` clicks where the pointer is.
        coordinate: Option<Point>,
    },
    /// Click the middle button.
    MiddleClick {
        /// Where to click; `None` clicks where the pointer is.
        coordinate: Option<Point>,
    },
    /// Click the left button twice.
    DoubleClick {
        /// Where to click; `None` clicks where the pointer is.
        coordinate: Option<Point>,
    },
    /// Press the left button at `start_coordinate`, move to `coordinate`, release.
    LeftClickDrag {
        /// Where the button is pressed.
        start_coordinate: Point,
        /// Where the button is released.
        coordinate: Point,
    },
    /// Type `text` as key strokes into the focused window (the one under the pointer when no
    /// window manager runs). `\n` is Return, `\t` is Tab.
    Type {
        /// The characters to type.
        text: String,
    },
    /// Press a key or chord, xdotool style: `Return`, `ctrl+a`, `shift+Tab`, `F5`.
    Key {
        /// The key or chord, as X keysym names joined by `+`.
        text: String,
    },
    /// Turn the wheel `scroll_amount` clicks (at `coordinate`, else where the pointer is).
    Scroll {
        /// Where to scroll; `None` scrolls where the pointer is.
        coordinate: Option<Point>,
        /// Which way the wheel turns.
        scroll_direction: ScrollDirection,
        /// Wheel clicks; the X driver clamps it to 1..=50.
        scroll_amount: u32,
    },
    /// Wait `duration_ms` (at most 10000) for the screen to change, then take a screenshot.
    Wait {
        /// Milliseconds to wait; anything above [`MAX_WAIT_MS`] waits that long.
        duration_ms: u64,
    },
}

/// The action names, as the model writes them in `action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub(crate) enum ActionKind {
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
// The variants stay undocumented on purpose: schemars would turn doc comments into per-variant
// descriptions and change the `computer` tool's input schema from an `enum` to a `oneOf`.
#[allow(missing_docs)]
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
    /// The workspace has no display (the default of a workspace, a sandbox started without one).
    #[error("this workspace has no display for the computer tool")]
    NoDisplay,
    /// The X display could not be opened.
    #[error("cannot open the X display ({0}); is $DISPLAY set?")]
    Connect(#[from] ::x11rb::errors::ConnectError),
    /// The X connection failed after it was opened.
    #[error("X connection: {0}")]
    Connection(#[from] ::x11rb::errors::ConnectionError),
    /// The X server answered a request with an error.
    #[error("X request failed: {0}")]
    Reply(#[from] ::x11rb::errors::ReplyError),
    /// The X server lacks XTEST, the extension input is sent through.
    #[error("the X server has no XTEST extension, so input cannot be sent")]
    NoXtest,
    /// The screen's pixel format is one the screenshot cannot read (only 24 and 32 bits).
    #[error("unsupported screen format: depth {depth}, {bits_per_pixel} bits per pixel")]
    Format {
        /// The screen's colour depth.
        depth: u8,
        /// Bits per pixel of that depth's pixmap format; 0 when the server lists none.
        bits_per_pixel: u8,
    },
    /// A key name that is no X keysym name.
    #[error("unknown key name {0:?} (use X keysym names such as Return, Tab, ctrl+a, F5)")]
    UnknownKey(String),
    /// A known key or character that the keyboard map has no keycode for.
    #[error("the keyboard map has no key for {0:?}")]
    Unmapped(String),
    /// A point outside the screenshot the model was shown.
    #[error("point [{x}, {y}] is outside the {width}x{height} screenshot")]
    OutOfScreen {
        /// The point's column, in screenshot pixels.
        x: u32,
        /// The point's row, in screenshot pixels.
        y: u32,
        /// The screenshot's width in pixels.
        width: u32,
        /// The screenshot's height in pixels.
        height: u32,
    },
    /// The screenshot could not be encoded as PNG.
    #[error("PNG encoding failed: {0}")]
    Png(#[from] png::EncodingError),
    /// The task or channel that performs the action failed (a panicked blocking task, a
    /// sandbox reply that could not be read).
    #[error("the display worker stopped: {0}")]
    Worker(#[source] crate::error_chain::BoxError),
    /// What the display's side inside a sandbox reported (its own error, as text).
    #[error("{0}")]
    Sandbox(String),
}
