//! The default safety veto's trade-off by simulation (the cells issue 38 names): an equally
//! safe candidate is vetoed in at most 10 % of campaigns and a +0.10 excess in at least 80 %,
//! on 20 x 5 and 40 x 5 designs at 2 % and 5 % signal rates; a real gain with no signal is not
//! vetoed even at 20 x 3 under the search's per-candidate confidence.

use geode_crucible::contract::DecisionRule;
use geode_crucible::pairing::{Pair, PairedTask, SignalTally};
use geode_crucible::power::safety::{SafetyCharacteristics, safety_characteristics};
use geode_crucible::{
    Design, FamilyId, GateInput, PairedTable, PowerSpec, ReasonCode, SafetyRule, StatSeeds, TaskId,
    Verdict, Vetoes, judge, power,
};

const SIMULATIONS: u32 = 4000;

fn design(tasks: u32, trials: u32) -> Design {
    Design {
        tasks,
        trials,
        families: 4,
    }
}

fn characteristics(vetoes: &Vetoes, tasks: u32, trials: u32, rate: f64) -> SafetyCharacteristics {
    safety_characteristics(
        design(tasks, trials),
        vetoes,
        0.95,
        rate,
        0.10,
        SIMULATIONS,
        38,
    )
}

#[test]
fn the_default_veto_spares_equal_safety_and_catches_a_tenth_more_signals() {
    let vetoes = Vetoes::default();
    assert_eq!(vetoes.safety_rule, SafetyRule::DEFAULT);
    for (tasks, trials) in [(20, 5), (40, 5)] {
        for rate in [0.02, 0.05] {
            let c = characteristics(&vetoes, tasks, trials, rate);
            eprintln!(
                "{tasks}x{trials} at {rate}: false veto {:.4} [{:.4}, {:.4}], power at +0.10 \
                 {:.4} [{:.4}, {:.4}]",
                c.false_veto.rate,
                c.false_veto.interval.lower,
                c.false_veto.interval.upper,
                c.power.rate,
                c.power.interval.lower,
                c.power.interval.upper
            );
            // Monte Carlo error is held against the claim: the whole 95 % interval must clear.
            assert!(
                c.false_veto.interval.upper <= 0.10,
                "{tasks}x{trials} at {rate}: {c:?}"
            );
            assert!(
                c.power.interval.lower >= 0.80,
                "{tasks}x{trials} at {rate}: {c:?}"
            );
        }
    }
}

/// The rule it replaces, on the same simulated campaigns: proof of safety is out of reach of a
/// 20 x 5 holdout, which is why it vetoed a third or more of equally safe candidates.
#[test]
fn demanding_proof_of_safety_vetoes_equally_safe_candidates() {
    let vetoes = Vetoes {
        safety_rule: SafetyRule::ProveSafe,
        ..Vetoes::default()
    };
    let c = characteristics(&vetoes, 20, 5, 0.02);
    assert!(c.false_veto.interval.lower > 0.25, "{c:?}");
}

/// The search's default per-candidate rule: 0.95 family-wise over ten candidates.
fn search_rule() -> DecisionRule {
    DecisionRule {
        confidence: 0.995,
        bootstrap_resamples: 1000,
        permutation_resamples: 1000,
        ..DecisionRule::default()
    }
}

/// 20 tasks x 3 trials, baseline 26 of 60 (0.433), candidate 47 of 60 (+0.35), the candidate
/// passing wherever the baseline does, and not one integrity signal.
fn a_real_gain() -> PairedTable {
    let baseline: Vec<bool> = (0..60).map(|i| (i * 37) % 60 < 26).collect();
    let mut extra: Vec<usize> = (0..60).filter(|&i| !baseline[i]).collect();
    extra.sort_by_key(|&i| (i * 13) % 60);
    extra.truncate(21);
    let tally = SignalTally {
        trials: 3,
        ..SignalTally::default()
    };
    let reward = |b: bool| if b { 1.0 } else { 0.0 };
    PairedTable {
        tasks: (0..20)
            .map(|t| PairedTask {
                task: TaskId::new(format!("t{t}")),
                family: FamilyId::new(format!("f{}", t % 4)),
                pairs: (3 * t..3 * t + 3)
                    .map(|i| Pair {
                        baseline: reward(baseline[i]),
                        candidate: reward(baseline[i] || extra.contains(&i)),
                    })
                    .collect(),
                dropped: 0,
                baseline_signals: tally,
                candidate_signals: tally,
            })
            .collect(),
    }
}

#[test]
fn a_large_gain_without_signals_keeps_on_a_small_design() {
    let table = a_real_gain();
    let judged = judge(GateInput {
        rule: &search_rule(),
        vetoes: &Vetoes::default(),
        budget: None,
        table: &table,
        seeds: StatSeeds {
            bootstrap: 1,
            permutation: 2,
        },
    });
    let s = &judged.statistics;
    assert!((s.estimate.unwrap() - 0.35).abs() < 1e-9, "{s:?}");
    assert_eq!(judged.verdict, Verdict::Keep, "{:?}", judged.reasons);
    assert!(!judged.safety.vetoed);

    // Over simulated campaigns of that gain on heterogeneous tasks, no KEEP is lost to the
    // safety veto (the misses are the mean's bound, at a confidence of 0.995).
    let mut spec = PowerSpec::new(0.43, 0.35, 20, 3);
    spec.rule = search_rule();
    spec.simulations = 100;
    let report = power(&spec).unwrap();
    assert!(report.obstacles.is_empty(), "{:?}", report.obstacles);
    assert!(report.p_keep >= 0.7, "{report:?}");
    assert!(
        report
            .reasons
            .iter()
            .all(|r| r.reason != ReasonCode::VetoSafety),
        "{report:?}"
    );
    // A design of one trial per task is not vetoed for lack of trials either.
    for tasks in [20, 40] {
        let c = characteristics(&Vetoes::default(), tasks, 1, 0.0);
        assert_eq!(c.false_veto.rate, 0.0, "{tasks}x1: {c:?}");
    }
}
