//! Verdicts and the reason codes behind them.
//!
//! A reason code is a stable string (`veto:safety`, `lower_bound_not_positive`, ...) that tools
//! and people match on; the enum keeps the set closed. Codes of the INVALID family mean "no
//! comparison was made"; the others explain a REJECT.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The gate's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "UPPERCASE")]
pub enum Verdict {
    /// Promote the candidate.
    Keep,
    /// The comparison was made and the candidate did not earn promotion.
    Reject,
    /// No comparison: identities differ, coverage is not exact, or infrastructure failed too
    /// often. Nothing may be concluded about the candidate.
    Invalid,
}

/// Why the statistics have no interval: reported instead of pretending one exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum Degeneracy {
    /// No task has a valid pair.
    NoTasks,
    /// One task: a mean but no variance between tasks.
    SingleTask,
    /// Every task delta is the same number: the spread is zero, so any interval would be a point.
    ZeroVariance,
}

impl Degeneracy {
    /// The snake_case name it serializes as (`no_tasks`, `single_task`, `zero_variance`).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

macro_rules! reason_codes {
    ($( $(#[$doc:meta])* $variant:ident => $code:literal, $invalid:literal; )*) => {
        /// A reason for a REJECT or an INVALID, serialized as its code string.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub enum ReasonCode {
            $( $(#[$doc])* $variant, )*
        }

        impl ReasonCode {
            /// Every code, in the order reasons are listed in a record.
            pub const ALL: &'static [ReasonCode] = &[$(ReasonCode::$variant),*];

            /// The stable code string.
            pub fn as_str(self) -> &'static str {
                match self { $(ReasonCode::$variant => $code,)* }
            }

            /// True for codes that make the verdict INVALID.
            pub fn is_invalid(self) -> bool {
                match self { $(ReasonCode::$variant => $invalid,)* }
            }
        }

        impl FromStr for ReasonCode {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($code => Ok(ReasonCode::$variant),)*
                    other => Err(format!("unknown reason code {other:?}")),
                }
            }
        }
    };
}

reason_codes! {
    /// The evidence names another contract.
    ContractMismatch => "contract_mismatch", true;
    /// The evidence ran another stage (train vs test) than the contract's.
    StageMismatch => "stage_mismatch", true;
    /// The pack that ran is not the contract's pack for its stage.
    PackHashMismatch => "hash_mismatch:pack", true;
    /// The baseline scaffold that ran is not the contract's.
    BaselineScaffoldMismatch => "hash_mismatch:baseline_scaffold", true;
    /// The candidate scaffold that ran is not the contract's.
    CandidateScaffoldMismatch => "hash_mismatch:candidate_scaffold", true;
    /// The grader configuration that graded is not the contract's.
    GraderHashMismatch => "hash_mismatch:grader", true;
    /// A trial ran with a seed other than the one derived for its (task, trial), or the two arms
    /// of a pair ran with different seeds, or the run seed is not the contract's.
    SeedMismatch => "seed_mismatch", true;
    /// Some (task, trial) of the pack does not have both arms exactly once, or a trial names a
    /// task, family or trial index the pack does not have.
    CoverageNotExact => "coverage_not_exact", true;
    /// A reward outside [0, 1] or a non-finite number, or a wrong schema tag.
    MalformedEvidence => "malformed_evidence", true;
    /// More infrastructure-invalid trials than the contract allows.
    InfraOverAllowance => "infra_over_allowance", true;
    /// A test-stage campaign without an attestation of the sealed pack's opening for this
    /// contract.
    SealedNotAttested => "sealed_not_attested", true;
    /// Fewer compared tasks than `min_tasks`.
    TooFewTasks => "too_few_tasks", false;
    /// Fewer families among the compared tasks than `min_families`.
    TooFewFamilies => "too_few_families", false;
    /// Candidate mean below `candidate_floor`.
    BelowFloor => "below_floor", false;
    /// Point estimate below `materiality`.
    BelowMateriality => "below_materiality", false;
    /// The chosen lower bound is <= 0.
    LowerBoundNotPositive => "lower_bound_not_positive", false;
    /// No task compared: no estimate, no bound.
    DegenerateNoTasks => "degenerate:no_tasks", false;
    /// One task compared: no bound.
    DegenerateSingleTask => "degenerate:single_task", false;
    /// All task deltas equal: no bound.
    DegenerateZeroVariance => "degenerate:zero_variance", false;
    /// The candidate's integrity-signal rate may exceed the baseline's by more than the tolerance.
    VetoSafety => "veto:safety", false;
    /// Metered usage exceeded a budget.
    VetoBudget => "veto:budget", false;
    /// Some task of the pack has no valid pair left (all its pairs infrastructure-invalid).
    VetoCoverage => "veto:coverage", false;
}

impl From<Degeneracy> for ReasonCode {
    fn from(d: Degeneracy) -> Self {
        match d {
            Degeneracy::NoTasks => ReasonCode::DegenerateNoTasks,
            Degeneracy::SingleTask => ReasonCode::DegenerateSingleTask,
            Degeneracy::ZeroVariance => ReasonCode::DegenerateZeroVariance,
        }
    }
}

impl TryFrom<String> for ReasonCode {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<ReasonCode> for String {
    fn from(r: ReasonCode) -> String {
        r.as_str().to_owned()
    }
}

impl fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The verdict implied by a set of reasons: any INVALID code wins, then any code means REJECT.
pub fn verdict_for(reasons: &[ReasonCode]) -> Verdict {
    if reasons.iter().any(|r| r.is_invalid()) {
        Verdict::Invalid
    } else if reasons.is_empty() {
        Verdict::Keep
    } else {
        Verdict::Reject
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_through_json() {
        for &code in ReasonCode::ALL {
            let s = serde_json::to_string(&code).unwrap();
            assert_eq!(s, format!("\"{}\"", code.as_str()));
            assert_eq!(serde_json::from_str::<ReasonCode>(&s).unwrap(), code);
        }
        assert_eq!(
            serde_json::to_string(&Verdict::Invalid).unwrap(),
            "\"INVALID\""
        );
    }

    #[test]
    fn invalid_dominates() {
        use ReasonCode::*;
        assert_eq!(verdict_for(&[]), Verdict::Keep);
        assert_eq!(verdict_for(&[VetoSafety]), Verdict::Reject);
        assert_eq!(
            verdict_for(&[VetoSafety, CoverageNotExact]),
            Verdict::Invalid
        );
    }
}
