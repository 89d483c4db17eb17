//! The agentic loop and what it consults: guards, verify, prompt, reflection, compaction, and
//! the durable side (checkpoint save points, restore).

pub mod agentic_loop;
pub mod compaction;
mod compaction_stage;
mod counters;
pub mod durable;
pub(crate) mod durable_session;
mod ending;
pub mod events;
mod finish;
pub mod guards;
mod input;
mod lifecycle;
pub mod model_switch;
pub mod prompt;
mod recorder;
mod records;
pub mod reflection;
pub mod restore;
pub mod rewind;
pub mod termination;
mod transcript;
pub mod verify;

pub(crate) use agentic_loop::LoopParts;
pub use agentic_loop::{AgenticLoop, TurnOutcome};
pub use durable::{CheckpointSettings, CheckpointState, FaultInjection, FaultPoint};
pub use events::LoopEvent;
pub use model_switch::ModelSwitch;
pub use restore::{RestoreReport, ResumeError};
pub use termination::TerminationReason;
pub use verify::Verdict;
