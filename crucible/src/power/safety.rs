//! The safety veto's operating characteristics by simulation: for a design (tasks x trials per
//! arm) and a contract's vetoes, how often a candidate exactly as safe as the baseline is
//! vetoed (false veto) and how often a candidate whose signal rate exceeds the baseline's by a
//! given amount is (power). Both run the veto a real decision runs ([`safety_veto`]).
//!
//! Model: every trial of either arm raises a signal independently, the baseline's with
//! probability `signal_rate`, the candidate's with `signal_rate` (false veto) or
//! `signal_rate + excess` (power). Independent trials are the optimistic case for the design
//! effect (deff = 1 on average); signals clustered in tasks widen both bounds, lowering the
//! false-veto rate and the power alike.
//!
//! Campaign i draws from rng_from_seed(SHA-256(`"geode.safety.v1"` || seed || i)): reproducible
//! and independent of how campaigns are split.

use serde::{Deserialize, Serialize};

use crate::contract::Vetoes;
use crate::feasibility::Design;
use crate::ids::{FamilyId, TaskId};
use crate::pairing::{PairedTable, PairedTask, SignalTally};
use crate::seed::CrucibleRng;
use crate::stats::interval::{Interval, normal_quantile};
use crate::stats::proportion::wilson;
use crate::veto::safety_veto;

use super::sample::bernoulli;

/// A simulated rate with its 95 % Wilson interval (Monte Carlo uncertainty).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SimulatedRate {
    /// Share of simulated campaigns with the outcome, in [0, 1].
    pub rate: f64,
    /// 95 % Wilson interval of `rate`.
    pub interval: Interval,
}

impl SimulatedRate {
    pub(crate) fn of(hits: u32, of: u32) -> SimulatedRate {
        let n = f64::from(of);
        SimulatedRate {
            rate: f64::from(hits) / n,
            interval: wilson(f64::from(hits), n, normal_quantile(0.975)),
        }
    }
}

/// What the safety veto does on a design.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SafetyCharacteristics {
    /// Signal rate of the baseline (and of an equally safe candidate).
    pub signal_rate: f64,
    /// The excess the power is computed at.
    pub excess: f64,
    /// Simulated campaigns behind each rate.
    pub simulations: u32,
    /// P(veto) of a candidate exactly as safe as the baseline.
    pub false_veto: SimulatedRate,
    /// P(veto) of a candidate whose signal rate is higher by `excess`.
    pub power: SimulatedRate,
}

fn tally(rng: &mut CrucibleRng, trials: u32, p: f64) -> SignalTally {
    let flagged = (0..trials).filter(|_| bernoulli(rng, p) > 0.0).count() as u32;
    SignalTally {
        trials,
        flagged,
        ..SignalTally::default()
    }
}

/// One simulated campaign's signals (no rewards: the safety veto reads none).
fn campaign(design: Design, base: f64, candidate: f64, rng: &mut CrucibleRng) -> PairedTable {
    let tasks = (0..design.tasks)
        .map(|t| PairedTask {
            task: TaskId::new(format!("t{t}")),
            family: FamilyId::new(format!("f{}", t % design.families.max(1))),
            pairs: Vec::new(),
            dropped: 0,
            baseline_signals: tally(rng, design.trials, base),
            candidate_signals: tally(rng, design.trials, candidate),
        })
        .collect();
    PairedTable { tasks }
}

/// Simulates `simulations` campaigns at equal safety and as many at `excess` (rates are
/// clamped to [0, 1]); `decision_confidence` is the rule's, which only a `prove_safe` veto
/// reads.
pub fn safety_characteristics(
    design: Design,
    vetoes: &Vetoes,
    decision_confidence: f64,
    signal_rate: f64,
    excess: f64,
    simulations: u32,
    seed: u64,
) -> SafetyCharacteristics {
    let simulations = simulations.max(1);
    let base = signal_rate.clamp(0.0, 1.0);
    let harmful = (signal_rate + excess).clamp(0.0, 1.0);
    let (mut false_vetoes, mut vetoes_of_harm) = (0u32, 0u32);
    for i in 0..simulations {
        let mut rng = super::stream(b"geode.safety.v1", seed, i);
        // Stream order: the equal-safety campaign, then the harmful one.
        let equal = campaign(design, base, base, &mut rng);
        if safety_veto(&equal, vetoes, decision_confidence).vetoed {
            false_vetoes += 1;
        }
        let worse = campaign(design, base, harmful, &mut rng);
        if safety_veto(&worse, vetoes, decision_confidence).vetoed {
            vetoes_of_harm += 1;
        }
    }
    SafetyCharacteristics {
        signal_rate,
        excess,
        simulations,
        false_veto: SimulatedRate::of(false_vetoes, simulations),
        power: SimulatedRate::of(vetoes_of_harm, simulations),
    }
}
