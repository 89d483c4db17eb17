//! Golden vectors: exact results for fixed small inputs and seeds. A change here means decisions
//! would no longer be reproducible from their records; it needs a schema or derivation bump.

use geode_crucible::contract::DecisionRule;
use geode_crucible::pairing::{Pair, PairedTable, PairedTask, SignalTally};
use geode_crucible::stats::permutation::PermutationMethod;
use geode_crucible::stats::{StatSeeds, compute};
use geode_crucible::{FamilyId, LowerBoundMethod, PowerSpec, TaskId, Vetoes, power};

/// `n` tasks over two families, three trials each, rewards in quarters.
fn table(n: usize) -> PairedTable {
    let rewards = |t: usize, k: usize| -> (f64, f64) {
        let b = ((t * 7 + k * 3) % 5) as f64 / 4.0;
        let bonus = if (t + k).is_multiple_of(3) {
            0.5
        } else if (t * k) % 4 == 1 {
            -0.25
        } else {
            0.0
        };
        (b, (b + bonus).clamp(0.0, 1.0))
    };
    PairedTable {
        tasks: (0..n)
            .map(|t| PairedTask {
                task: TaskId::new(format!("t{t}")),
                family: FamilyId::new(format!("f{}", t % 2)),
                pairs: (0..3)
                    .map(|k| {
                        let (baseline, candidate) = rewards(t, k);
                        Pair {
                            baseline,
                            candidate,
                        }
                    })
                    .collect(),
                dropped: 0,
                baseline_signals: SignalTally::default(),
                candidate_signals: SignalTally::default(),
            })
            .collect(),
    }
}

fn rule() -> DecisionRule {
    DecisionRule {
        confidence: 0.9,
        bootstrap_resamples: 2000,
        permutation_resamples: 2000,
        materiality: 0.0,
        min_tasks: 2,
        min_families: 1,
        candidate_floor: 0.0,
        lower_bound: LowerBoundMethod::Bca,
        cluster: geode_crucible::Clustering::Task,
    }
}

const SEEDS: StatSeeds = StatSeeds {
    bootstrap: 17,
    permutation: 23,
};

#[test]
fn golden_statistics_small_exact() {
    let s = compute(&table(8), &rule(), SEEDS);
    let b = s.bootstrap.clone().unwrap();
    let t = s.t.unwrap();
    let p = s.permutation.unwrap();
    assert_eq!(s.estimate, Some(0.12499999999999999));
    assert_eq!(s.std_error, Some(0.0222717701593687));
    assert_eq!(t.lower_bound, 0.09348713949037658);
    assert_eq!(
        (t.interval.lower, t.interval.upper),
        (0.08280438075857802, 0.16719561924142196)
    );
    assert_eq!(b.percentile_lower, 0.09375);
    assert_eq!(b.bca_lower, 0.08333333333333333);
    assert_eq!(s.lower_bound, Some(b.bca_lower));
    assert_eq!(
        (b.bca_interval.lower, b.bca_interval.upper),
        (0.07291666666666666, 0.15625)
    );
    assert_eq!(b.bias_correction_z0, -0.05391862204527398);
    assert_eq!(b.std_error, 0.020786066001495154);
    assert_eq!(b.acceleration, -0.062499999999999875);
    assert_eq!(b.expansion, (8.0f64 / 7.0).sqrt());
    assert_eq!(b.expanded_z, -1.5126173044619233);
    assert_eq!(
        (b.percentile_interval.lower, b.percentile_interval.upper),
        (0.08333333333333333, 0.16666666666666666)
    );
    assert_eq!(p.p_value, 2.0 / 256.0);
    assert_eq!(p.method, PermutationMethod::Exact { sign_vectors: 256 });
    assert_eq!(s.minimum_detectable_effect, Some(0.047286816590568784));
}

#[test]
fn golden_statistics_monte_carlo_permutation() {
    let s = compute(&table(25), &rule(), SEEDS);
    let p = s.permutation.unwrap();
    assert_eq!(
        p.method,
        PermutationMethod::MonteCarlo {
            resamples: 2000,
            seed: 23
        }
    );
    assert_eq!(p.p_value, 1.0 / 2001.0);
    assert_eq!(s.estimate, Some(0.10666666666666666));
    assert_eq!(s.lower_bound, Some(0.08666666666666666));
}

#[test]
fn golden_power() {
    let mut spec = PowerSpec::new(0.5, 0.2, 24, 3);
    spec.simulations = 50;
    spec.seed = 5;
    spec.rule = rule();
    spec.rule.bootstrap_resamples = 500;
    spec.rule.permutation_resamples = 500;
    spec.vetoes = Vetoes {
        safety_tolerance: 0.1,
        infra_allowance: 0.0,
        ..Vetoes::default()
    };
    let r = power(&spec).unwrap();
    assert_eq!(r.keeps, 40);
    assert_eq!(r.mean_std_error, Some(0.06701399120551192));
    assert_eq!(r.minimum_detectable_effect, Some(0.1422822832878433));
}
