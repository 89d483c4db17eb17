//! The agentic loop and what it consults: guards, verify, prompt, reflection.

pub mod agentic_loop;
pub mod events;
pub mod guards;
pub mod prompt;
pub mod reflection;
pub mod termination;
pub mod verify;

pub use agentic_loop::{AgenticLoop, LoopParts, TurnOutcome};
pub use events::LoopEvent;
pub use termination::TerminationReason;
pub use verify::Verdict;
