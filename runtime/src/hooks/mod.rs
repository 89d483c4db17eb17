//! Hooks: typed lifecycle events, the decisions handlers may return, the registry that runs
//! them in priority order, and command hooks configured the way Claude Code users write them.

pub mod command;
pub mod decided;
pub mod events;
pub mod registry;

pub use decided::{HookDecided, HookDecisionKind};
pub use events::{HookDecision, HookEnvelope, HookEvent, HookEventKind};
pub use registry::{HookFailure, HookHandler, HookOutcome, HookRegistry};
