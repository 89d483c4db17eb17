//! The promotion gate: the one function that turns a paired table into KEEP or REJECT.
//!
//! [`judge`] is used by real decisions ([`crate::decide::decide`], after the INVALID checks) and
//! by power simulations ([`mod@crate::power`]) alike, so a simulated P(KEEP) is the P(KEEP) of the
//! rule that will actually run.
//!
//! KEEP iff all of: tasks >= min_tasks; families >= min_families; candidate mean >= floor;
//! estimate >= materiality; the contract's lower bound (BCa by default) > 0; and the safety,
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

/// What the gate looks at.
#[derive(Debug, Clone, Copy)]
pub struct GateInput<'a> {
    pub rule: &'a DecisionRule,
    pub vetoes: &'a Vetoes,
    /// Budgets and metered usage; `None` in simulations, which meter nothing.
    pub budget: Option<(&'a Budgets, &'a Usage)>,
    pub table: &'a PairedTable,
    pub seeds: StatSeeds,
}

/// The gate's answer with everything it computed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Judgment {
    pub verdict: Verdict,
    pub reasons: Vec<ReasonCode>,
    pub statistics: Statistics,
    pub safety: SafetyReport,
    pub budget: Option<BudgetReport>,
    pub coverage: CoverageReport,
}

/// Applies the decision rule and the vetoes.
pub fn judge(input: GateInput<'_>) -> Judgment {
    let rule = input.rule;
    let stats = compute(input.table, rule, input.seeds);
    let safety = safety_veto(input.table, input.vetoes.safety_tolerance, rule.confidence);
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
        (None, Some(lb)) if lb > 0.0 => {}
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
