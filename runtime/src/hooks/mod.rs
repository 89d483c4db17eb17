//! Hooks: typed lifecycle events, the decisions handlers may return, the registry that runs
//! them in priority order, and command hooks: GEODE's TOML files and Claude Code's settings JSON
//! read as they are (`claude_code`: Claude Code's names of GEODE's tools and their fields).

pub mod claude_code;
pub mod command;
pub mod decided;
pub mod events;
pub mod registry;

pub use decided::{HookDecided, HookDecisionKind};
pub use events::{HookDecision, HookEnvelope, HookEvent, HookEventKind};
pub use registry::{HookFailure, HookHandler, HookOutcome, HookRegistry, ToolMatcher};
