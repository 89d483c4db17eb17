//! A decision in words: the rule with its thresholds, every check with what was observed
//! against what it needed (for KEEP as for REJECT), whether the design could have seen a gain
//! of the size observed, and what to do next. Numbers are rounded for reading; the record keeps
//! them exact.

use crate::contract::{SafetyRule, Stage};
use crate::gate::BOUND_TOLERANCE;
use crate::record::{Check, DecisionRecord, Explanation};
use crate::verdict::Verdict;

/// A number for reading: four decimals, no trailing noise.
pub fn round(x: f64) -> String {
    if !x.is_finite() {
        return x.to_string();
    }
    let s = format!("{x:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.into() }
}

fn opt(x: Option<f64>) -> String {
    x.map_or_else(|| "none".into(), round)
}

/// Explains `record`.
pub fn explain(record: &DecisionRecord) -> Explanation {
    let rule = &record.rule;
    let rule_text = format!(
        "KEEP when the one-sided lower bound ({}, confidence {}) of the candidate's mean paired \
         gain is above 0, the gain is at least {} (materiality), the candidate's mean is at \
         least {}, the campaign has at least {} tasks in {} families, and the safety, budget \
         and coverage vetoes hold",
        rule.lower_bound.name(),
        round(rule.confidence),
        round(rule.materiality),
        round(rule.candidate_floor),
        rule.min_tasks,
        rule.min_families,
    );
    let mut checks = Vec::new();
    if let Some(s) = &record.statistics {
        let mut check = |name: &str, passed: bool, observed: String, needed: String| {
            checks.push(Check {
                name: name.into(),
                passed,
                observed,
                needed,
            });
        };
        check(
            "lower bound",
            s.lower_bound.is_some_and(|b| b > BOUND_TOLERANCE) && s.degenerate.is_none(),
            format!(
                "{} ({}; estimate {}, std error {})",
                opt(s.lower_bound),
                s.lower_bound_method.name(),
                opt(s.estimate),
                opt(s.std_error)
            ),
            "> 0".into(),
        );
        check(
            "materiality",
            s.estimate.is_some_and(|e| e >= rule.materiality),
            format!(
                "gain {} (candidate {} vs baseline {})",
                opt(s.estimate),
                opt(s.candidate_mean),
                opt(s.baseline_mean)
            ),
            format!(">= {}", round(rule.materiality)),
        );
        check(
            "candidate floor",
            s.candidate_mean.is_some_and(|m| m >= rule.candidate_floor),
            opt(s.candidate_mean),
            format!(">= {}", round(rule.candidate_floor)),
        );
        check(
            "tasks",
            s.tasks >= rule.min_tasks,
            s.tasks.to_string(),
            format!(">= {}", rule.min_tasks),
        );
        check(
            "families",
            s.families >= rule.min_families,
            s.families.to_string(),
            format!(">= {}", rule.min_families),
        );
    }
    if let Some(safety) = &record.safety {
        let flagged = format!(
            "{} of {} candidate and {} of {} baseline trials flagged; {}, one-sided {}",
            safety.candidate.flagged,
            safety.candidate.trials,
            safety.baseline.flagged,
            safety.baseline.trials,
            safety.method,
            round(safety.confidence)
        );
        let (observed, needed) = match safety.rule {
            SafetyRule::ProveSafe => (
                format!(
                    "upper bound of the candidate's excess signal rate {} ({flagged})",
                    round(safety.upper_bound)
                ),
                format!("<= {}", round(safety.tolerance)),
            ),
            SafetyRule::EvidentHarm { .. } => (
                format!(
                    "candidate's excess signal rate {}, lower bound {} ({flagged})",
                    round(safety.difference),
                    opt(safety.lower_bound)
                ),
                format!("lower bound <= 0 and excess < {}", round(safety.tolerance)),
            ),
        };
        checks.push(Check {
            name: "safety veto".into(),
            passed: !safety.vetoed,
            observed,
            needed,
        });
    }
    if let Some(budget) = &record.budget {
        checks.push(Check {
            name: "budget veto".into(),
            passed: !budget.vetoed,
            observed: if budget.exceeded.is_empty() {
                "within every budget".into()
            } else {
                format!("{} budgets exceeded", budget.exceeded.len())
            },
            needed: "within the contract's budgets".into(),
        });
    }
    if let Some(coverage) = &record.coverage {
        checks.push(Check {
            name: "coverage veto".into(),
            passed: !coverage.vetoed,
            observed: format!(
                "{} of {} tasks compared",
                coverage.tasks_compared, coverage.tasks_in_pack
            ),
            needed: "every task of the pack".into(),
        });
    }
    let stats = record.statistics.as_ref();
    let underpowered = record.verdict == Verdict::Reject
        && stats.is_some_and(|s| {
            matches!(
                (s.estimate, s.minimum_detectable_effect),
                (Some(e), Some(mde)) if e > 0.0 && mde > e
            )
        });
    let next_step = next_step(record, underpowered);
    Explanation {
        verdict: record.verdict,
        rule: rule_text,
        checks,
        underpowered,
        next_step,
    }
}

fn next_step(record: &DecisionRecord, underpowered: bool) -> String {
    let vetoed_for_safety = record.safety.as_ref().is_some_and(|s| s.vetoed);
    match (record.verdict, record.stage) {
        (Verdict::Keep, Stage::Train) => "confirm it where nobody tuned: freeze a test-stage \
             contract on the sealed holdout (`geode crucible freeze --stage test`) and run it \
             once"
            .into(),
        (Verdict::Keep, Stage::Test) => "promote the candidate; this result stands (a \
             replication on fresh seeds, `geode crucible replicate`, is the check)"
            .into(),
        (Verdict::Reject, _) if vetoed_for_safety => "read the candidate's flagged trials \
             (integrity signals) before anything else: its score is not to be trusted"
            .into(),
        (Verdict::Reject, _) if underpowered => {
            let mde = record
                .statistics
                .as_ref()
                .and_then(|s| s.minimum_detectable_effect)
                .map_or_else(|| "?".into(), round);
            format!(
                "underpowered: this design detects gains of about {mde} and the gain observed is \
                 smaller, so this is no evidence against it; more tasks or trials (`geode \
                 crucible power --contract`) before another campaign"
            )
        }
        (Verdict::Reject, _) => {
            "no evidence of a gain this design could see: keep the baseline and try another \
             candidate"
                .into()
        }
        (Verdict::Invalid, _) => "nothing may be concluded: fix what the details name and run \
             a new campaign (for a test stage, a sealed holdout opens once: a new one)"
            .into(),
    }
}

/// The rule, the checks, the power and the next step, one per line (the verdict is the
/// caller's to print).
impl std::fmt::Display for Explanation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "rule: {}", self.rule)?;
        for c in &self.checks {
            writeln!(
                f,
                "  {} {}: {} (needs {})",
                if c.passed { "pass" } else { "FAIL" },
                c.name,
                c.observed,
                c.needed
            )?;
        }
        if self.underpowered {
            writeln!(
                f,
                "underpowered: the gain observed is below what this design can detect"
            )?;
        }
        write!(f, "next: {}", self.next_step)
    }
}

#[cfg(test)]
mod tests {
    use super::round;

    #[test]
    fn numbers_read_as_numbers() {
        assert_eq!(round(0.4333333333333334), "0.4333");
        assert_eq!(round(0.050000000000000044), "0.05");
        assert_eq!(round(1.0), "1");
        assert_eq!(round(-0.00001), "0");
        assert_eq!(round(-0.25), "-0.25");
    }
}
