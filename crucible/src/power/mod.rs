//! Power analysis by simulation: P(KEEP) of a planned campaign under a planned effect, computed
//! by running simulated campaigns through the same gate ([`crate::gate::judge`]) a real decision
//! uses, so the answer includes every rule and veto, not a textbook formula.
//!
//! Model of a campaign: task t has baseline success probability p_t ~ Beta(P k, (1 - P) k)
//! (mean P, concentration k: small k = very heterogeneous tasks, as real packs are); the
//! candidate's is clamp(p_t + D, 0, 1); each of K trials per arm is an independent Bernoulli
//! reward (independent arms: conservative, since real paired trials sharing a seed are
//! positively correlated, which only shrinks the variance of a delta). Tasks are spread
//! round-robin over F families. Nothing is metered (no budget veto) and no integrity signal is
//! raised, but the safety veto still runs: with few trials per arm even a clean candidate cannot
//! bound its excess below the tolerance, and the power analysis says so.
//!
//! Campaign i draws from its own stream rng_from_seed(SHA-256(`"geode.power.v1"` || seed || i)),
//! first its two statistics seeds, then the tasks in order: the result is reproducible and does
//! not depend on how campaigns are split across threads.

pub mod outlook;
pub mod safety;
pub mod sample;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::contract::{DecisionRule, Vetoes};
use crate::error::PowerError;
use crate::feasibility::{Design, Obstacle, obstacles};
use crate::gate::{GateInput, judge};
use crate::ids::{FamilyId, TaskId};
use crate::pairing::{Pair, PairedTable, PairedTask, SignalTally};
use crate::seed::{CrucibleRng, rng_from_seed};
use crate::stats::StatSeeds;
use crate::stats::interval::{Interval, minimum_detectable_effect, normal_quantile};
use crate::stats::proportion::wilson;
use crate::verdict::{ReasonCode, Verdict};

use self::safety::{SafetyCharacteristics, safety_characteristics};
use self::sample::{bernoulli, beta};
use rand::RngCore;

/// Schema tag of a power report.
pub const POWER_SCHEMA: &str = "geode.power.v1";

/// A planned campaign.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerSpec {
    /// Mean baseline success rate P, in (0, 1).
    pub baseline_rate: f64,
    /// Planned effect D added to each task's success probability, in [-1, 1].
    pub effect: f64,
    /// Tasks T (>= 1).
    pub tasks: u32,
    /// Trials per task per arm K (>= 1).
    pub trials: u32,
    /// Families F, 1 <= F <= T.
    pub families: u32,
    /// Beta concentration k of task difficulty (> 0).
    pub concentration: f64,
    /// Simulated campaigns (>= 1).
    pub simulations: u32,
    /// Seed every simulated campaign's stream is derived from.
    pub seed: u64,
    /// The decision rule the simulated campaigns are judged by.
    pub rule: DecisionRule,
    /// The vetoes the simulated campaigns are judged by.
    pub vetoes: Vetoes,
    /// Share of trials raising an integrity signal in the baseline (and in an equally safe
    /// candidate) for the safety veto's characteristics; in [0, 1).
    #[serde(default = "default_signal_rate")]
    pub signal_rate: f64,
    /// The candidate's excess of signals the veto's power is computed at; in (0, 1].
    #[serde(default = "default_signal_excess")]
    pub signal_excess: f64,
}

fn default_signal_rate() -> f64 {
    0.02
}

fn default_signal_excess() -> f64 {
    0.10
}

/// Simulated campaigns behind the safety veto's characteristics (cheap: no bootstrap).
const SAFETY_SIMULATIONS: u32 = 2000;

impl PowerSpec {
    /// A spec with the default rule and vetoes, concentration 2 (uniform difficulty at P = 0.5),
    /// min(T, 4) families, 1000 simulations and seed 0.
    pub fn new(baseline_rate: f64, effect: f64, tasks: u32, trials: u32) -> PowerSpec {
        PowerSpec {
            baseline_rate,
            effect,
            tasks,
            trials,
            families: tasks.clamp(1, 4),
            concentration: 2.0,
            simulations: 1000,
            seed: 0,
            rule: DecisionRule::default(),
            vetoes: Vetoes::default(),
            signal_rate: default_signal_rate(),
            signal_excess: default_signal_excess(),
        }
    }

    fn check(&self) -> Result<(), PowerError> {
        let bad = |field, message: String| Err(PowerError::Field { field, message });
        let p = self.baseline_rate;
        if !(p.is_finite() && p > 0.0 && p < 1.0) {
            return bad("baseline_rate", format!("must be in (0, 1), got {p}"));
        }
        if !(self.effect.is_finite() && (-1.0..=1.0).contains(&self.effect)) {
            return bad("effect", format!("must be in [-1, 1], got {}", self.effect));
        }
        if self.tasks < 1 {
            return bad("tasks", "must be >= 1".into());
        }
        if self.trials < 1 {
            return bad("trials", "must be >= 1".into());
        }
        if self.families < 1 || self.families > self.tasks {
            return bad(
                "families",
                format!("must be in [1, tasks], got {}", self.families),
            );
        }
        if !(self.concentration.is_finite() && self.concentration > 0.0) {
            return bad(
                "concentration",
                format!("must be > 0, got {}", self.concentration),
            );
        }
        if !(self.signal_rate.is_finite() && (0.0..1.0).contains(&self.signal_rate)) {
            return bad(
                "signal_rate",
                format!("must be in [0, 1), got {}", self.signal_rate),
            );
        }
        if !(self.signal_excess.is_finite()
            && self.signal_excess > 0.0
            && self.signal_excess <= 1.0)
        {
            return bad(
                "signal_excess",
                format!("must be in (0, 1], got {}", self.signal_excess),
            );
        }
        if self.simulations < 1 {
            return bad("simulations", "must be >= 1".into());
        }
        // Simulations may use fewer resamples than a contract (>= 1000) to save time.
        self.rule.check(1).map_err(|e| PowerError::Field {
            field: "rule",
            message: e.to_string(),
        })
    }
}

/// How many campaigns failed for one reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasonCount {
    /// A reason the gate gave for not keeping.
    pub reason: ReasonCode,
    /// Simulated campaigns whose judgment gave it.
    pub campaigns: u32,
}

/// What `geode crucible power` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerReport {
    /// Always [`POWER_SCHEMA`].
    pub schema: String,
    /// The spec simulated.
    pub spec: PowerSpec,
    /// Simulated campaigns that were KEEP.
    pub keeps: u32,
    /// P(KEEP) = keeps / simulations.
    pub p_keep: f64,
    /// 95 % Wilson interval of P(KEEP) (Monte Carlo uncertainty).
    pub p_keep_interval: Interval,
    /// Mean task-clustered standard error over the simulated campaigns.
    pub mean_std_error: Option<f64>,
    /// (z_c + z_0.8) * mean standard error: the effect the design detects with 80 % power;
    /// `None` when an obstacle makes every campaign of the design fail.
    pub minimum_detectable_effect: Option<f64>,
    /// Rules no campaign of this design can pass (P(KEEP) is then 0 by rule, whatever the
    /// effect), each with what would lift it.
    pub obstacles: Vec<Obstacle>,
    /// Reasons of the non-KEEP campaigns (a campaign can have several).
    pub reasons: Vec<ReasonCount>,
    /// The safety veto on this design: false vetoes at equal safety, power at the excess.
    pub safety: SafetyCharacteristics,
}

fn campaign_rng(seed: u64, index: u32) -> CrucibleRng {
    stream(b"geode.power.v1", seed, index)
}

/// Simulated campaign `index`'s own stream under `tag`: rng_from_seed of the first 8 bytes of
/// SHA-256(tag || seed || index).
pub(crate) fn stream(tag: &[u8], seed: u64, index: u32) -> CrucibleRng {
    let mut h = Sha256::new();
    h.update(tag);
    h.update(seed.to_le_bytes());
    h.update(index.to_le_bytes());
    let d = h.finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    rng_from_seed(u64::from_le_bytes(b))
}

/// Simulates campaign `index` of `spec`: its paired table and its statistics seeds.
pub fn simulate_campaign(spec: &PowerSpec, index: u32) -> (PairedTable, StatSeeds) {
    let mut rng = campaign_rng(spec.seed, index);
    let seeds = StatSeeds {
        bootstrap: rng.next_u64(),
        permutation: rng.next_u64(),
    };
    let a = spec.baseline_rate * spec.concentration;
    let b = (1.0 - spec.baseline_rate) * spec.concentration;
    let k = spec.trials;
    let tally = SignalTally {
        trials: k,
        ..SignalTally::default()
    };
    let tasks = (0..spec.tasks)
        .map(|t| {
            let p = beta(&mut rng, a, b);
            let q = (p + spec.effect).clamp(0.0, 1.0);
            let pairs = (0..k)
                .map(|_| Pair {
                    baseline: bernoulli(&mut rng, p),
                    candidate: bernoulli(&mut rng, q),
                })
                .collect();
            PairedTask {
                task: TaskId::new(format!("t{t}")),
                family: FamilyId::new(format!("f{}", t % spec.families)),
                pairs,
                dropped: 0,
                baseline_signals: tally,
                candidate_signals: tally,
            }
        })
        .collect();
    (PairedTable { tasks }, seeds)
}

/// Runs the power analysis.
pub fn power(spec: &PowerSpec) -> Result<PowerReport, PowerError> {
    spec.check()?;
    let mut keeps = 0u32;
    let mut se_sum = 0.0;
    let mut se_n = 0u32;
    let mut counts = vec![0u32; ReasonCode::ALL.len()];
    for i in 0..spec.simulations {
        let (table, seeds) = simulate_campaign(spec, i);
        let j = judge(GateInput {
            rule: &spec.rule,
            vetoes: &spec.vetoes,
            budget: None,
            table: &table,
            seeds,
        });
        if j.verdict == Verdict::Keep {
            keeps += 1;
        }
        for r in &j.reasons {
            if let Some(pos) = ReasonCode::ALL.iter().position(|c| c == r) {
                counts[pos] += 1;
            }
        }
        if let Some(se) = j.statistics.std_error {
            se_sum += se;
            se_n += 1;
        }
    }
    let n = f64::from(spec.simulations);
    let mean_std_error = (se_n > 0).then(|| se_sum / f64::from(se_n));
    let design = Design {
        tasks: spec.tasks,
        trials: spec.trials,
        families: spec.families,
    };
    let obstacles = obstacles(&spec.rule, &spec.vetoes, design);
    Ok(PowerReport {
        schema: POWER_SCHEMA.to_owned(),
        spec: spec.clone(),
        keeps,
        p_keep: f64::from(keeps) / n,
        p_keep_interval: wilson(f64::from(keeps), n, normal_quantile(0.975)),
        mean_std_error,
        minimum_detectable_effect: mean_std_error
            .filter(|_| obstacles.is_empty())
            .map(|se| minimum_detectable_effect(se, spec.rule.confidence)),
        obstacles,
        reasons: ReasonCode::ALL
            .iter()
            .zip(counts)
            .filter(|(_, c)| *c > 0)
            .map(|(r, c)| ReasonCount {
                reason: *r,
                campaigns: c,
            })
            .collect(),
        safety: safety_characteristics(
            design,
            &spec.vetoes,
            spec.rule.confidence,
            spec.signal_rate,
            spec.signal_excess,
            SAFETY_SIMULATIONS,
            spec.seed,
        ),
    })
}
