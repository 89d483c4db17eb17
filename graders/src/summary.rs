//! Score summaries that show both ways of treating infrastructure errors, so a reader sees
//! how much validity costs: "infra excluded" (the score) and "infra as zero" (the worst case).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::outcome::TrialOutcome;

/// Means over a set of trials.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreSummary {
    pub trials: usize,
    /// Trials with an agent outcome (they count in scores).
    pub valid: usize,
    /// Trials with an infrastructure outcome, by class.
    pub infra: BTreeMap<TrialOutcome, usize>,
    /// Mean reward over valid trials; `None` when there is none.
    pub mean_infra_excluded: Option<f64>,
    /// Mean reward over every trial, infrastructure ones counted as 0; `None` when empty.
    pub mean_infra_as_zero: Option<f64>,
    /// Passed / valid trials.
    pub pass_rate_infra_excluded: Option<f64>,
    /// Passed / all trials.
    pub pass_rate_infra_as_zero: Option<f64>,
}

impl ScoreSummary {
    pub fn infra_total(&self) -> usize {
        self.infra.values().sum()
    }
}

/// Summarize `(outcome, reward)` pairs. A valid trial with no reward (an agent timeout whose
/// verifier wrote none) counts as 0; an infrastructure trial's reward is ignored.
pub fn summarize(trials: &[(TrialOutcome, Option<f64>)]) -> ScoreSummary {
    let mut infra = BTreeMap::new();
    let (mut valid, mut sum, mut passed) = (0usize, 0.0f64, 0usize);
    for (outcome, reward) in trials {
        if outcome.is_infrastructure() {
            *infra.entry(*outcome).or_default() += 1;
            continue;
        }
        valid += 1;
        sum += reward.filter(|r| r.is_finite()).unwrap_or(0.0);
        if *outcome == TrialOutcome::Passed {
            passed += 1;
        }
    }
    let n = trials.len();
    let ratio = |x: f64, d: usize| (d > 0).then(|| x / d as f64);
    ScoreSummary {
        trials: n,
        valid,
        infra,
        mean_infra_excluded: ratio(sum, valid),
        mean_infra_as_zero: ratio(sum, n),
        pass_rate_infra_excluded: ratio(passed as f64, valid),
        pass_rate_infra_as_zero: ratio(passed as f64, n),
    }
}
