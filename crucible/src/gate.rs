//! The promotion gate: the one function that turns a paired table into KEEP or REJECT.
//!
//! [`judge`] is used by real decisions ([`crate::decide::decide`], after the INVALID checks) and
//! by power simulations ([`mod@crate::power`]) alike, so a simulated P(KEEP) is the P(KEEP) of the
//! rule that will actually run.
//!
//! KEEP iff all of: tasks >= min_tasks; families >= min_families; candidate mean >= floor;
//! estimate >= materiality; the contract's lower bound > [`BOUND_TOLERANCE`]; and the safety,
//! budget and coverage vetoes hold. Otherwise REJECT with every failing reason, in the order of
//! [`ReasonCode::ALL`]. A degenerate input (no task, one task, all deltas equal) has no lower
//! bound; its `degenerate:*` code takes the place of `lower_bound_not_positive`.

use serde::{Deserialize, Serialize};

use crate::contract::{Budgets, DecisionRule, Vetoes};
use crate::evidence::Usage;
use crate::pairing::PairedTable;
use crate::stats::{StatSeeds, Statistics, compute};
use crate::verdict::{ReasonCode, Verdict, verdict_for};
use crate::veto::{
    BudgetReport, CoverageReport, SafetyReport, budget_veto, coverage_veto, safety_veto,
};

/// A lower bound must exceed this to count as positive.
///
/// Bounds are quantiles of floating-point sums: a bound that is exactly zero in exact arithmetic
/// (a bootstrap mean of deltas 1/3, -1/3, ...) comes out as +-1e-17, and a `> 0.0` test would
/// KEEP on rounding (about 0.4 points of false KEEP under the null with 2 or more trials). The
/// rounding error of a mean of at most a few thousand deltas in [-1, 1] is below 1e-12, and no
/// improvement below 1e-9 reward units is material, so the tolerance can neither admit rounding
/// nor refuse a real gain.
pub const BOUND_TOLERANCE: f64 = 1e-9;

/// Whether `bound` counts as positive (see [`BOUND_TOLERANCE`]).
pub fn bound_is_positive(bound: f64) -> bool {
    bound > BOUND_TOLERANCE
}

/// What the gate looks at.
#[derive(Debug, Clone, Copy)]
pub struct GateInput<'a> {
    /// The promotion rule to apply.
    pub rule: &'a DecisionRule,
    /// The safety tolerance and rule.
    pub vetoes: &'a Vetoes,
    /// Budgets and metered usage; `None` in simulations, which meter nothing.
    pub budget: Option<(&'a Budgets, &'a Usage)>,
    /// The paired rewards and integrity tallies per task.
    pub table: &'a PairedTable,
    /// Seeds of the bootstrap and the sign-flip test.
    pub seeds: StatSeeds,
}

/// The gate's answer with everything it computed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Judgment {
    /// KEEP or REJECT (the gate never answers INVALID).
    pub verdict: Verdict,
    /// Every failing condition, sorted in the order of [`ReasonCode::ALL`]; empty for KEEP.
    pub reasons: Vec<ReasonCode>,
    /// The estimate, the bounds and the tests of the paired table.
    pub statistics: Statistics,
    /// The safety veto's reading.
    pub safety: SafetyReport,
    /// The budget veto's reading; `None` when no budget was given.
    pub budget: Option<BudgetReport>,
    /// The coverage veto's reading.
    pub coverage: CoverageReport,
}

/// Applies the decision rule and the vetoes.
pub fn judge(input: GateInput<'_>) -> Judgment {
    let rule = input.rule;
    let stats = compute(input.table, rule, input.seeds);
    let safety = safety_veto(input.table, input.vetoes, rule.confidence);
    let budget = input.budget.map(|(b, u)| budget_veto(u, b));
    let coverage = coverage_veto(input.table);

    let mut reasons = Vec::new();
    if stats.tasks < rule.min_tasks {
        reasons.push(ReasonCode::TooFewTasks);
    }
    if stats.families < rule.min_families {
        reasons.push(ReasonCode::TooFewFamilies);
    }
    if !stats
        .candidate_mean
        .is_some_and(|m| m >= rule.candidate_floor)
    {
        reasons.push(ReasonCode::BelowFloor);
    }
    if !stats.estimate.is_some_and(|e| e >= rule.materiality) {
        reasons.push(ReasonCode::BelowMateriality);
    }
    match (stats.degenerate, stats.lower_bound) {
        (Some(d), _) => reasons.push(d.into()),
        (None, Some(lb)) if bound_is_positive(lb) => {}
        (None, _) => reasons.push(ReasonCode::LowerBoundNotPositive),
    }
    if safety.vetoed {
        reasons.push(ReasonCode::VetoSafety);
    }
    if budget.as_ref().is_some_and(|b| b.vetoed) {
        reasons.push(ReasonCode::VetoBudget);
    }
    if coverage.vetoed {
        reasons.push(ReasonCode::VetoCoverage);
    }
    reasons.sort();
    Judgment {
        verdict: verdict_for(&reasons),
        reasons,
        statistics: stats,
        safety,
        budget,
        coverage,
    }
}
