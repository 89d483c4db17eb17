//! Calibration by simulation: false-KEEP rate under the null, interval coverage, and the power
//! function against a measured KEEP rate through the full `decide` path.
//!
//! Debug-build budget: these use B = 300-1000 bootstrap resamples (contracts require >= 1000;
//! fewer resamples only add Monte Carlo noise to each simulated bound) and 30-40 tasks.

use geode_crucible::contract::DecisionRule;
use geode_crucible::pairing::{Pair, PairedTable, PairedTask, SignalTally};
use geode_crucible::power::sample::{bernoulli, beta};
use geode_crucible::seed::{CrucibleRng, rng_from_seed};
use geode_crucible::stats::sample::unit_f64;
use geode_crucible::stats::{StatSeeds, compute};
use geode_crucible::{
    Arm, FamilyId, GateInput, LowerBoundMethod, PowerSpec, Stage, TaskId, Verdict, Vetoes, decide,
    judge, power,
};
use rand::RngCore;

/// A campaign of `tasks` tasks, `k` trials per arm, success probabilities from `probs`.
fn campaign(
    rng: &mut CrucibleRng,
    tasks: usize,
    k: u32,
    mut probs: impl FnMut(&mut CrucibleRng) -> (f64, f64),
) -> PairedTable {
    let tally = SignalTally {
        trials: k,
        ..SignalTally::default()
    };
    PairedTable {
        tasks: (0..tasks)
            .map(|t| {
                let (p, q) = probs(rng);
                PairedTask {
                    task: TaskId::new(format!("t{t}")),
                    family: FamilyId::new(format!("f{}", t % 3)),
                    pairs: (0..k)
                        .map(|_| Pair {
                            baseline: bernoulli(rng, p),
                            candidate: bernoulli(rng, q),
                        })
                        .collect(),
                    dropped: 0,
                    baseline_signals: tally,
                    candidate_signals: tally,
                }
            })
            .collect(),
    }
}

fn sim_rule(b: u32) -> DecisionRule {
    rule_with(b, LowerBoundMethod::Bca)
}

fn rule_with(b: u32, lower_bound: LowerBoundMethod) -> DecisionRule {
    DecisionRule {
        confidence: 0.95,
        bootstrap_resamples: b,
        permutation_resamples: b,
        materiality: 0.0,
        min_tasks: 2,
        min_families: 1,
        candidate_floor: 0.0,
        lower_bound,
        cluster: geode_crucible::Clustering::Task,
    }
}

fn seeds(rng: &mut CrucibleRng) -> StatSeeds {
    StatSeeds {
        bootstrap: rng.next_u64(),
        permutation: rng.next_u64(),
    }
}

/// Under the null (same success probability in both arms, heterogeneous tasks), the gate's
/// false-KEEP rate stays at or below 1 - confidence plus 3 Monte Carlo standard errors: 2000
/// campaigns of 30 tasks x 3 trials, and 1000 small campaigns of 12 tasks x 5 trials (where the
/// bootstrap is at its weakest and the sign-flip test is enumerated exactly).
#[test]
fn null_false_keep_rate_at_most_alpha() {
    let rule = sim_rule(300);
    let vetoes = Vetoes {
        safety_tolerance: 0.05,
        infra_allowance: 0.0,
        ..Vetoes::default()
    };
    let mut rng = rng_from_seed(20_260_704);
    for (n, tasks, k) in [(2000u32, 30usize, 3u32), (1000, 12, 5)] {
        let (mut keeps, mut pct, mut t_lb) = (0u32, 0u32, 0u32);
        for _ in 0..n {
            let table = campaign(&mut rng, tasks, k, |r| {
                let p = unit_f64(r);
                (p, p)
            });
            let j = judge(GateInput {
                rule: &rule,
                vetoes: &vetoes,
                budget: None,
                table: &table,
                seeds: seeds(&mut rng),
            });
            keeps += u32::from(j.verdict == Verdict::Keep);
            let s = &j.statistics;
            pct += u32::from(
                s.bootstrap
                    .as_ref()
                    .is_some_and(|b| b.percentile_lower > 0.0),
            );
            t_lb += u32::from(s.t.is_some_and(|t| t.lower_bound > 0.0));
        }
        let alpha = 1.0 - rule.confidence;
        let limit = alpha + 3.0 * (alpha * (1.0 - alpha) / f64::from(n)).sqrt();
        let rate = f64::from(keeps) / f64::from(n);
        println!(
            "null {n} x ({tasks} tasks, {k} trials): false KEEP (BCa gate) {rate:.4}, percentile bound > 0 {:.4}, t bound > 0 {:.4}, limit {limit:.4}",
            f64::from(pct) / f64::from(n),
            f64::from(t_lb) / f64::from(n)
        );
        assert!(rate <= limit, "false KEEP rate {rate} > {limit}");
    }
}

/// Two-sided 95 % intervals (t, percentile, BCa) cover the true mean task delta 93-97 % of the
/// time. Truth: p ~ U(0.2, 0.6), per-task effect ~ U(0, 0.3), so the mean delta is 0.15 (no
/// clamping can occur).
#[test]
fn intervals_cover_the_true_delta() {
    const N: u32 = 2000;
    const TRUTH: f64 = 0.15;
    let rule = sim_rule(400);
    let mut rng = rng_from_seed(4242);
    let (mut t_cov, mut p_cov, mut b_cov) = (0u32, 0u32, 0u32);
    for _ in 0..N {
        let table = campaign(&mut rng, 40, 3, |r| {
            let p = 0.2 + 0.4 * unit_f64(r);
            (p, p + 0.3 * unit_f64(r))
        });
        let s = compute(&table, &rule, seeds(&mut rng));
        t_cov += u32::from(s.t.unwrap().interval.contains(TRUTH));
        let b = s.bootstrap.unwrap();
        p_cov += u32::from(b.percentile_interval.contains(TRUTH));
        b_cov += u32::from(b.bca_interval.contains(TRUTH));
    }
    let n = f64::from(N);
    let (t, p, b) = (
        f64::from(t_cov) / n,
        f64::from(p_cov) / n,
        f64::from(b_cov) / n,
    );
    println!("coverage: t {t:.4}, percentile {p:.4}, BCa {b:.4}");
    for (name, c) in [("t", t), ("percentile", p), ("bca", b)] {
        assert!((0.93..=0.97).contains(&c), "{name} coverage {c}");
    }
}

/// The power function's P(KEEP) matches the KEEP rate measured by running the full
/// contract -> evidence -> decide path on campaigns drawn from the same model.
#[test]
fn power_function_matches_measured_keep_rate() {
    const N: u32 = 1000;
    let (p_base, effect, t, k) = (0.4, 0.10, 30u32, 3u32);
    let mut spec = PowerSpec::new(p_base, effect, t, k);
    spec.families = 3;
    spec.simulations = N;
    spec.seed = 11;
    spec.rule = sim_rule(1000);
    spec.vetoes = Vetoes {
        safety_tolerance: 0.05,
        infra_allowance: 0.0,
        ..Vetoes::default()
    };
    let report = power(&spec).unwrap();

    // Measured: real contracts (one per campaign, fresh run seed) and real evidence rows.
    let task_list = super::common::tasks(t as usize, 3);
    let mut keeps = 0u32;
    let mut rng = rng_from_seed(777);
    for i in 0..N {
        let mut c = super::common::contract(Stage::Train, k, 1_000 + u64::from(i));
        c.decision_rule = spec.rule.clone();
        c.vetoes = spec.vetoes.clone();
        let c = c.freeze().unwrap();
        let probs: Vec<(f64, f64)> = (0..t)
            .map(|_| {
                let p = beta(
                    &mut rng,
                    p_base * spec.concentration,
                    (1.0 - p_base) * spec.concentration,
                );
                (p, (p + effect).clamp(0.0, 1.0))
            })
            .collect();
        let draws: Vec<[f64; 2]> = (0..t * k)
            .map(|j| {
                let (p, q) = probs[(j / k) as usize];
                [bernoulli(&mut rng, p), bernoulli(&mut rng, q)]
            })
            .collect();
        let e = super::common::evidence(&c, &task_list, |task, trial, arm| {
            draws[task * k as usize + trial as usize][usize::from(arm == Arm::Candidate)]
        });
        let r = decide(&c, &e);
        assert_ne!(r.verdict, Verdict::Invalid, "{:?}", r.details);
        keeps += u32::from(r.verdict == Verdict::Keep);
    }
    let measured = f64::from(keeps) / f64::from(N);
    let se = ((report.p_keep * (1.0 - report.p_keep) + measured * (1.0 - measured)) / f64::from(N))
        .sqrt();
    println!(
        "power: function {:.4} [{:.4}, {:.4}], measured {measured:.4}, tolerance {:.4}, MDE {:.4}",
        report.p_keep,
        report.p_keep_interval.lower,
        report.p_keep_interval.upper,
        3.0 * se,
        report.minimum_detectable_effect.unwrap()
    );
    assert!((report.p_keep - measured).abs() <= 3.0 * se);
    assert!(report.p_keep_interval.contains(report.p_keep));
    // The planned effect is below the normal-approximation MDE, so power is below 80 %.
    assert!(report.p_keep < 0.8);
}

/// At the MDE the power function reports, the simulated power is near 80 % (normal
/// approximation; BCa at 30 tasks loses a little).
#[test]
fn power_at_the_mde_is_near_eighty_percent() {
    let mut spec = PowerSpec::new(0.4, 0.10, 30, 3);
    spec.families = 3;
    spec.simulations = 300;
    spec.seed = 12;
    spec.rule = sim_rule(300);
    spec.vetoes = Vetoes {
        safety_tolerance: 0.05,
        infra_allowance: 0.0,
        ..Vetoes::default()
    };
    let mde = power(&spec).unwrap().minimum_detectable_effect.unwrap();
    spec.effect = mde;
    let at_mde = power(&spec).unwrap();
    println!("MDE {mde:.4}: P(KEEP) {:.4}", at_mde.p_keep);
    assert!((0.65..=0.92).contains(&at_mde.p_keep), "{}", at_mde.p_keep);
}

/// How a cell draws a task's baseline success rate.
#[derive(Clone, Copy)]
enum Rates {
    Uniform,
    /// Beta(0.5, 4.5): mean 0.1, most tasks near 0 (the skewed cell).
    Skewed,
}

impl Rates {
    fn draw(self, rng: &mut CrucibleRng) -> f64 {
        match self {
            Rates::Uniform => unit_f64(rng),
            Rates::Skewed => beta(rng, 0.5, 4.5),
        }
    }

    fn mean(self) -> f64 {
        match self {
            Rates::Uniform => 0.5,
            Rates::Skewed => 0.1,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Rates::Uniform => "U(0,1)",
            Rates::Skewed => "Beta(0.5,4.5)",
        }
    }
}

/// The four bounds a contract may choose, read from one computation.
const METHODS: [LowerBoundMethod; 4] = [
    LowerBoundMethod::Percentile,
    LowerBoundMethod::Bca,
    LowerBoundMethod::T,
    LowerBoundMethod::TAndBca,
];

fn bound_of(s: &geode_crucible::stats::Statistics, method: LowerBoundMethod) -> Option<f64> {
    let t = s.t.map(|t| t.lower_bound);
    let b = s.bootstrap.as_ref();
    match method {
        LowerBoundMethod::Percentile => b.map(|b| b.percentile_lower),
        LowerBoundMethod::Bca => b.map(|b| b.bca_lower),
        LowerBoundMethod::T => t,
        LowerBoundMethod::TAndBca => Some(t?.min(b?.bca_lower)),
    }
}

/// The gate's bound holds its level where BCa alone does not (issue 17, items 1 and 2).
///
/// Cells: 10 tasks x 5 trials, 30 x 3, 89 x 1 with U(0, 1) task rates, and 30 x 3 and 10 x 5
/// with skewed Beta(0.5, 4.5) rates; 2000 campaigns per cell under the null (candidate rate =
/// baseline rate) for false KEEP, and 2000 under an effect (candidate rate p + 0.2 (1 - p), so
/// the population mean task delta is 0.2 (1 - E p)) for one-sided coverage (bound <= truth; a
/// campaign with no bound, all deltas equal, claims nothing and counts as covering). The table
/// prints every method; the assertions are on the contract default `t_and_bca` through the full
/// gate: false KEEP <= 0.05 + 3 MC se, coverage >= 0.95 - 3 MC se.
#[test]
fn gate_bound_holds_one_sided_coverage() {
    const N: u32 = 2000;
    const EFFECT: f64 = 0.2;
    let default_rule = DecisionRule::default();
    assert_eq!(default_rule.lower_bound, LowerBoundMethod::TAndBca);
    let rule = rule_with(1000, default_rule.lower_bound);
    // No trial has an integrity signal, so the safety veto stays out of the bound's
    // measurement.
    let vetoes = Vetoes {
        safety_tolerance: 0.5,
        infra_allowance: 0.0,
        ..Vetoes::default()
    };
    let alpha = 1.0 - rule.confidence;
    let mc = 3.0 * (alpha * (1.0 - alpha) / f64::from(N)).sqrt();
    let mut rng = rng_from_seed(17_2026);
    println!(
        "cell                              | false KEEP: bca>0 (old gate) pct    bca    t      t_and_bca (gate) | one-sided coverage: pct    bca    t      t_and_bca"
    );
    let mut failures = Vec::new();
    for (tasks, k, rates) in [
        (10usize, 5u32, Rates::Uniform),
        (30, 3, Rates::Uniform),
        (89, 1, Rates::Uniform),
        (30, 3, Rates::Skewed),
        (10, 5, Rates::Skewed),
    ] {
        let mut positive = [0u32; 4];
        let (mut gate_keeps, mut old_gate) = (0u32, 0u32);
        for _ in 0..N {
            let table = campaign(&mut rng, tasks, k, |r| {
                let p = rates.draw(r);
                (p, p)
            });
            let j = judge(GateInput {
                rule: &rule,
                vetoes: &vetoes,
                budget: None,
                table: &table,
                seeds: seeds(&mut rng),
            });
            gate_keeps += u32::from(j.verdict == Verdict::Keep);
            // The gate before issue 17: BCa, compared with 0.0 exactly.
            old_gate += u32::from(
                j.statistics.degenerate.is_none()
                    && bound_of(&j.statistics, LowerBoundMethod::Bca).is_some_and(|lb| lb > 0.0),
            );
            for (i, m) in METHODS.iter().enumerate() {
                let lb = bound_of(&j.statistics, *m).filter(|_| j.statistics.degenerate.is_none());
                positive[i] += u32::from(lb.is_some_and(geode_crucible::gate::bound_is_positive));
            }
        }
        let truth = EFFECT * (1.0 - rates.mean());
        let mut covered = [0u32; 4];
        for _ in 0..N {
            let table = campaign(&mut rng, tasks, k, |r| {
                let p = rates.draw(r);
                (p, p + EFFECT * (1.0 - p))
            });
            let s = compute(&table, &rule, seeds(&mut rng));
            for (i, m) in METHODS.iter().enumerate() {
                let lb = bound_of(&s, *m).filter(|_| s.degenerate.is_none());
                covered[i] += u32::from(lb.is_none_or(|lb| lb <= truth));
            }
        }
        let rate = |c: u32| f64::from(c) / f64::from(N);
        println!(
            "{tasks:>2} tasks x {k} trials {:<13} | {:.4}                   {:.4} {:.4} {:.4} {:.4}           | {:.4} {:.4} {:.4} {:.4}",
            rates.name(),
            rate(old_gate),
            rate(positive[0]),
            rate(positive[1]),
            rate(positive[2]),
            rate(gate_keeps),
            rate(covered[0]),
            rate(covered[1]),
            rate(covered[2]),
            rate(covered[3]),
        );
        let cell = format!("{tasks}x{k} {}", rates.name());
        if rate(gate_keeps) > alpha + mc {
            failures.push(format!("{cell}: false KEEP {}", rate(gate_keeps)));
        }
        if rate(covered[3]) < rule.confidence - mc {
            failures.push(format!("{cell}: one-sided coverage {}", rate(covered[3])));
        }
    }
    println!(
        "limits: false KEEP <= {:.4}, coverage >= {:.4}",
        alpha + mc,
        rule.confidence - mc
    );
    assert!(failures.is_empty(), "{failures:?}");
}

/// A bound that is zero in exact arithmetic never KEEPs (issue 17, item 1): with three trials
/// per task the deltas are thirds, whose sums round; among null campaigns some bound comes out
/// as a positive sliver below 1e-12, and the gate must still say lower_bound_not_positive.
#[test]
fn a_rounding_sliver_is_not_a_positive_bound() {
    let rule = rule_with(1000, LowerBoundMethod::Bca);
    let vetoes = Vetoes {
        safety_tolerance: 0.05,
        infra_allowance: 0.0,
        ..Vetoes::default()
    };
    let mut rng = rng_from_seed(7e17 as u64);
    let mut slivers = 0;
    for _ in 0..4000 {
        let table = campaign(&mut rng, 20, 3, |r| {
            let p = unit_f64(r);
            (p, p)
        });
        let j = judge(GateInput {
            rule: &rule,
            vetoes: &vetoes,
            budget: None,
            table: &table,
            seeds: seeds(&mut rng),
        });
        let Some(lb) = j.statistics.lower_bound else {
            continue;
        };
        if lb > 0.0 && lb < 1e-12 {
            slivers += 1;
            assert_ne!(j.verdict, Verdict::Keep, "bound {lb:e} kept");
            assert!(
                j.reasons
                    .contains(&geode_crucible::ReasonCode::LowerBoundNotPositive),
                "{:?}",
                j.reasons
            );
        }
    }
    println!("rounding slivers among 4000 null campaigns: {slivers}");
    assert!(
        slivers > 0,
        "no sliver drawn: the test would not see the bug"
    );
}

/// Effects that move together by family (issue 17, item 9): under the null the family effects
/// average zero over the population of families, but a pack holds four, so their shared draws
/// do not average out and a task-level bound claims gains that are only the pack's luck.
/// 2000 campaigns of 4 families x 10 tasks x 3 trials, family effect ~ U(-0.15, 0.15): a
/// contract that declares families (`cluster = family`) keeps false KEEP <= 0.05 + 3 MC se;
/// the task-level gate does not.
#[test]
fn family_clustered_effects_do_not_promote() {
    const N: u32 = 2000;
    let vetoes = Vetoes {
        safety_tolerance: 0.5,
        infra_allowance: 0.0,
        ..Vetoes::default()
    };
    let mut task_rule = rule_with(1000, LowerBoundMethod::TAndBca);
    task_rule.min_families = 2;
    let family_rule = DecisionRule {
        cluster: geode_crucible::Clustering::Family,
        ..task_rule.clone()
    };
    let tally = SignalTally {
        trials: 3,
        ..SignalTally::default()
    };
    let mut rng = rng_from_seed(9_2026);
    let (mut task_keeps, mut family_keeps) = (0u32, 0u32);
    for _ in 0..N {
        let effects: Vec<f64> = (0..4).map(|_| 0.3 * unit_f64(&mut rng) - 0.15).collect();
        let tasks = (0..40)
            .map(|t| {
                let p = 0.2 + 0.45 * unit_f64(&mut rng);
                let q = p + effects[t % 4];
                PairedTask {
                    task: TaskId::new(format!("t{t}")),
                    family: FamilyId::new(format!("f{}", t % 4)),
                    pairs: (0..3)
                        .map(|_| Pair {
                            baseline: bernoulli(&mut rng, p),
                            candidate: bernoulli(&mut rng, q),
                        })
                        .collect(),
                    dropped: 0,
                    baseline_signals: tally,
                    candidate_signals: tally,
                }
            })
            .collect();
        let table = PairedTable { tasks };
        let s = seeds(&mut rng);
        for (rule, keeps) in [
            (&task_rule, &mut task_keeps),
            (&family_rule, &mut family_keeps),
        ] {
            let j = judge(GateInput {
                rule,
                vetoes: &vetoes,
                budget: None,
                table: &table,
                seeds: s,
            });
            *keeps += u32::from(j.verdict == Verdict::Keep);
        }
    }
    let alpha = 0.05;
    let limit = alpha + 3.0 * (alpha * (1.0 - alpha) / f64::from(N)).sqrt();
    let rate = |k: u32| f64::from(k) / f64::from(N);
    println!(
        "family-clustered null, 4 families x 10 tasks x 3 trials: false KEEP task-level {:.4}, \
         family-clustered {:.4}, limit {limit:.4}",
        rate(task_keeps),
        rate(family_keeps)
    );
    assert!(rate(family_keeps) <= limit, "{}", rate(family_keeps));
    assert!(
        rate(task_keeps) > limit,
        "the cell no longer shows the task-level failure"
    );
}
