//! One trial: environment -> agent -> verifier -> teardown, each phase timed and bounded.
//!
//! The agent is always the GEODE runtime (HEADLESS, tools auto-approved inside the sandbox)
//! with its tools bound to the sandbox's workspace. An agent timeout is recorded and the
//! verifier still runs. The agent's background services keep running through verification
//! (as in Harbor), but the verifier runs in a view of its own (`Sandbox::run_verifier`): the
//! tests arrive only then, and its `/logs/verifier` is one the agent's processes never saw.
//! With `environment_mode = "separate"` the verifier runs in a fresh sandbox instead, which
//! receives only the task's declared artifacts.

mod agent;
mod artifacts;
mod attempt;
mod environment;
mod external;
pub(crate) mod phase;
pub(crate) mod plan;
mod record;
mod result;
mod run;
mod skills;
mod steps;
mod verifier;

pub use agent::SOLUTION_DIR;
pub use artifacts::WORKSPACE_DIR;
pub use environment::environment_spec;
pub(crate) use environment::verifier_environment_spec;
pub use phase::{PhaseEvent, TrialPhase};
pub use plan::{PhaseObserver, TrialPlan};
pub use run::{lost_trial, run_trial};
