//! The terminal face of the CLI: what a person sees and types, apart from what the commands do.
//! `render` draws a session's events (Markdown answers through `markdown`, a running command's
//! last lines through `live_tail`); `picker` is the full-screen chooser; `input` the REPL's
//! line editing, completion and history; `progress` the run and campaign progress lines.

pub(super) mod input;
pub(super) mod live_tail;
pub(super) mod markdown;
pub(super) mod picker;
pub(super) mod progress;
pub(super) mod render;
