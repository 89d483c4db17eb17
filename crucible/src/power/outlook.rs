//! What a campaign of a design can expect, printed before its first trial (`freeze`,
//! `crucible run`, `search run`): the simulated P(KEEP) of a modest gain, what the safety veto
//! does, and the design's obstacles. It simulates (`power`) and reads the analytic checks
//! (`feasibility`), so it lives beside the simulation, above both.

use serde::{Deserialize, Serialize};

use super::PowerSpec;
use super::safety::{SafetyCharacteristics, SimulatedRate};
use crate::contract::{DecisionRule, Vetoes};
use crate::feasibility::{Design, Obstacle, obstacles};

/// What a campaign of a design can expect, printed before its first trial: P(KEEP) of a
/// candidate that gains [`Outlook::EFFECT`] over a baseline of [`Outlook::BASELINE_RATE`]
/// (the rate where rewards vary most), and what the safety veto does at equal safety and at
/// an excess of [`Outlook::EXCESS`] with a baseline signal rate of [`Outlook::SIGNAL_RATE`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outlook {
    /// The design looked at.
    pub design: Design,
    /// Simulated P(KEEP) of the [`Outlook::EFFECT`] gain; 0 when the rule fails its checks.
    pub p_keep: SimulatedRate,
    /// Simulated campaigns behind `p_keep`.
    pub keep_simulations: u32,
    /// The safety veto on the design; `None` when the rule fails its own checks.
    pub safety: Option<SafetyCharacteristics>,
    /// Rules no campaign of the design can pass.
    pub obstacles: Vec<Obstacle>,
}

impl Outlook {
    /// The candidate's gain P(KEEP) is simulated at, in reward units.
    pub const EFFECT: f64 = 0.10;
    /// Mean baseline success rate of the simulation.
    pub const BASELINE_RATE: f64 = 0.5;
    /// Baseline share of trials raising an integrity signal, for the safety veto.
    pub const SIGNAL_RATE: f64 = 0.02;
    /// The candidate's excess signal rate the veto's power is simulated at.
    pub const EXCESS: f64 = 0.10;
    /// Simulated campaigns behind P(KEEP): each runs the gate's bootstrap and permutation,
    /// so fewer than the safety veto's cheap ones.
    const KEEP_SIMULATIONS: u32 = 200;
    /// Resamples per simulated bound: fewer than a contract's only add Monte Carlo noise to
    /// each simulated campaign, and keep the outlook to about a second.
    const RESAMPLES: u32 = 500;
}

/// The outlook of a campaign of `design` under `rule` and `vetoes` (reproducible: fixed seeds).
pub fn outlook(rule: &DecisionRule, vetoes: &Vetoes, design: Design) -> Outlook {
    let mut spec = PowerSpec::new(
        Outlook::BASELINE_RATE,
        Outlook::EFFECT,
        design.tasks.max(1),
        design.trials.max(1),
    );
    spec.families = design.families.clamp(1, spec.tasks);
    spec.simulations = Outlook::KEEP_SIMULATIONS;
    spec.rule = DecisionRule {
        bootstrap_resamples: rule.bootstrap_resamples.min(Outlook::RESAMPLES),
        permutation_resamples: rule.permutation_resamples.min(Outlook::RESAMPLES),
        ..rule.clone()
    };
    spec.vetoes = vetoes.clone();
    spec.signal_rate = Outlook::SIGNAL_RATE;
    spec.signal_excess = Outlook::EXCESS;
    let (p_keep, safety) = match super::power(&spec) {
        Ok(r) => (
            SimulatedRate {
                rate: r.p_keep,
                interval: r.p_keep_interval,
            },
            Some(r.safety),
        ),
        // Only a rule that fails its own checks (a hand-edited contract) gets here; the
        // contract's validation names the field.
        Err(_) => (SimulatedRate::of(0, 1), None),
    };
    Outlook {
        design,
        p_keep,
        keep_simulations: Outlook::KEEP_SIMULATIONS,
        safety,
        obstacles: obstacles(rule, vetoes, design),
    }
}

fn percent(r: &SimulatedRate) -> String {
    format!(
        "{:.1}% [{:.1}, {:.1}]",
        100.0 * r.rate,
        100.0 * r.interval.lower,
        100.0 * r.interval.upper
    )
}

impl std::fmt::Display for Outlook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = &self.design;
        write!(
            f,
            "design {} tasks x {} trials per arm ({} families): P(KEEP) {} for a candidate \
             {:+} over a {} baseline ({} simulated campaigns)",
            d.tasks,
            d.trials,
            d.families,
            percent(&self.p_keep),
            Outlook::EFFECT,
            Outlook::BASELINE_RATE,
            self.keep_simulations,
        )?;
        if let Some(s) = &self.safety {
            write!(f, "; the safety veto {}", SafetyLine(s))?;
        }
        Ok(())
    }
}

/// The safety veto's characteristics in one clause.
pub struct SafetyLine<'a>(pub &'a SafetyCharacteristics);

impl std::fmt::Display for SafetyLine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.0;
        write!(
            f,
            "vetoes {} of equally safe candidates and {} of those with {:+} more flagged \
             trials ({} baseline signal rate, {} simulated campaigns)",
            percent(&s.false_veto),
            percent(&s.power),
            s.excess,
            s.signal_rate,
            s.simulations
        )
    }
}
