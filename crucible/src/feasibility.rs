//! Whether a campaign's design can KEEP at all, before it spends its budget.
//!
//! Some rules refuse every campaign of a design whatever its outcome: fewer tasks or families
//! than the rule's minimum, or, under the `prove_safe` safety rule, too few trials per arm for
//! the safety bound to fall below its tolerance even when neither arm raises a single integrity
//! signal (the best case the veto can see: with no signal the design effect is 1, so the bound
//! is a function of the trial counts alone). The default `evident_harm` rule never vetoes a
//! campaign without signals; what it costs a design is simulated by
//! `power::safety` (and `power::outlook` prints both before a campaign). [`obstacles`] lists each such rule with what would lift it; `geode crucible freeze`
//! warns with it and `geode crucible power` reports it instead of a minimum detectable effect.

use serde::{Deserialize, Serialize};

use crate::contract::{DecisionRule, SafetyRule, Vetoes};
use crate::stats::interval::normal_quantile;
use crate::stats::proportion::newcombe_difference_upper;

/// The shape of a planned campaign.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Design {
    /// Tasks in the pack.
    pub tasks: u32,
    /// Trials per task per arm.
    pub trials: u32,
    /// Task families among those tasks.
    pub families: u32,
}

/// A rule no campaign of the design can pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum Obstacle {
    /// The design has fewer tasks than the rule's `min_tasks`.
    TooFewTasks {
        /// Tasks in the design.
        tasks: u32,
        /// The rule's minimum.
        min_tasks: u32,
    },
    /// The design has fewer families than the rule's `min_families`.
    TooFewFamilies {
        /// Families in the design.
        families: u32,
        /// The rule's minimum.
        min_families: u32,
    },
    /// Even with no integrity signal in either arm the safety bound exceeds the tolerance.
    SafetyUnreachable {
        /// Tasks times trials per task.
        trials_per_arm: u64,
        /// The safety bound of a clean campaign of this design.
        clean_bound: f64,
        /// The contract's safety tolerance.
        tolerance: f64,
        /// Fewest trials per arm at which a clean campaign passes (None: beyond 10^7).
        trials_needed: Option<u64>,
    },
}

impl std::fmt::Display for Obstacle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Obstacle::TooFewTasks { tasks, min_tasks } => write!(
                f,
                "min_tasks: {tasks} tasks < {min_tasks}; use a pack of at least {min_tasks} tasks \
                 or lower decision_rule.min_tasks"
            ),
            Obstacle::TooFewFamilies {
                families,
                min_families,
            } => write!(
                f,
                "min_families: {families} families < {min_families}; add tasks of other \
                 categories or lower decision_rule.min_families"
            ),
            Obstacle::SafetyUnreachable {
                trials_per_arm,
                clean_bound,
                tolerance,
                trials_needed,
            } => {
                write!(
                    f,
                    "safety veto: with {trials_per_arm} trials per arm the safety bound of a \
                     campaign without any integrity signal is {clean_bound:.4} > tolerance \
                     {tolerance}; "
                )?;
                match trials_needed {
                    Some(n) => write!(
                        f,
                        "run at least {n} trials per arm (more tasks or trials) or raise \
                         vetoes.safety_tolerance to {clean_bound:.4}"
                    ),
                    None => write!(f, "raise vetoes.safety_tolerance"),
                }
            }
        }
    }
}

/// The safety bound of a campaign with `n` trials per arm and no signal in either.
pub fn clean_safety_bound(n: u64, confidence: f64) -> f64 {
    let n = n as f64;
    newcombe_difference_upper(0.0, n, 0.0, n, normal_quantile(confidence))
}

/// Fewest trials per arm for which a clean campaign's safety bound is within `tolerance`
/// (the bound falls as n grows; `None` beyond ten million).
pub fn trials_for_safety(tolerance: f64, confidence: f64) -> Option<u64> {
    const LIMIT: u64 = 10_000_000;
    let passes = |n: u64| clean_safety_bound(n, confidence) <= tolerance;
    if !passes(LIMIT) {
        return None;
    }
    let (mut lo, mut hi) = (1u64, LIMIT);
    if passes(lo) {
        return Some(lo);
    }
    // Invariant: passes(hi) and !passes(lo).
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if passes(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi)
}

/// Every rule of `rule` and `vetoes` that no campaign of `design` can pass (empty: KEEP is
/// possible, though perhaps unlikely; see [`crate::power()`]).
pub fn obstacles(rule: &DecisionRule, vetoes: &Vetoes, design: Design) -> Vec<Obstacle> {
    let mut found = Vec::new();
    if design.tasks < rule.min_tasks {
        found.push(Obstacle::TooFewTasks {
            tasks: design.tasks,
            min_tasks: rule.min_tasks,
        });
    }
    if design.families < rule.min_families {
        found.push(Obstacle::TooFewFamilies {
            families: design.families,
            min_families: rule.min_families,
        });
    }
    if vetoes.safety_rule != SafetyRule::ProveSafe {
        // A campaign without signals never shows evident harm.
        return found;
    }
    let per_arm = u64::from(design.tasks) * u64::from(design.trials);
    let clean_bound = clean_safety_bound(per_arm, rule.confidence);
    // The veto passes a bound equal to the tolerance; NaN (no trial) never passes.
    if clean_bound.is_nan() || clean_bound > vetoes.safety_tolerance {
        found.push(Obstacle::SafetyUnreachable {
            trials_per_arm: per_arm,
            clean_bound,
            tolerance: vetoes.safety_tolerance,
            trials_needed: trials_for_safety(vetoes.safety_tolerance, rule.confidence),
        });
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_tolerance_needs_about_52_trials_per_arm() {
        let n = trials_for_safety(0.05, 0.95).unwrap();
        assert!((45..=60).contains(&n), "{n}");
        assert!(clean_safety_bound(n, 0.95) <= 0.05);
        assert!(clean_safety_bound(n - 1, 0.95) > 0.05);
    }

    #[test]
    fn obstacles_name_each_rule() {
        let rule = DecisionRule::default();
        let vetoes = Vetoes {
            safety_rule: SafetyRule::ProveSafe,
            ..Vetoes::default()
        };
        let small = Design {
            tasks: 5,
            trials: 2,
            families: 1,
        };
        let found = obstacles(&rule, &vetoes, small);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[2].to_string().contains("trials per arm"));
        let fine = Design {
            tasks: 30,
            trials: 3,
            families: 3,
        };
        assert!(obstacles(&rule, &vetoes, fine).is_empty());
        // The default rule has no trial count of its own to reach.
        let found = obstacles(&rule, &Vetoes::default(), small);
        assert_eq!(found.len(), 2, "{found:?}");
    }
}
