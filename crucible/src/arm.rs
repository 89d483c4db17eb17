//! The two sides of every comparison the crucible makes. Its own module because the seeds, the
//! evidence and the pairing all name it and none of them owns the others.

use serde::{Deserialize, Serialize};

/// The two arms of a paired comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arm {
    /// The incumbent the candidate is compared against.
    Baseline,
    /// The challenger proposed for promotion.
    Candidate,
}
