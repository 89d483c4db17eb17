//! Graders: what a trial's verifier left behind, turned into rewards and a validity class.
//!
//! A benchmark number is only worth its validity: an infrastructure failure must never count as
//! an agent failure, so every trial ends in exactly one `TrialOutcome`, and the infrastructure
//! ones are excluded from scores (and counted separately).

pub mod outcome;
pub mod reward;

pub use outcome::TrialOutcome;
pub use reward::{RewardError, Rewards, read_rewards};
