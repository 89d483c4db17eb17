//! Cluster bootstrap cost: 10 000 resamples over 1 000 tasks x 5 trials (target < 100 ms).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use geode_crucible::contract::DecisionRule;
use geode_crucible::pairing::{Pair, PairedTable, PairedTask, SignalTally};
use geode_crucible::power::sample::{bernoulli, beta};
use geode_crucible::seed::rng_from_seed;
use geode_crucible::stats::bootstrap::cluster_bootstrap;
use geode_crucible::stats::means::summarize_tasks;
use geode_crucible::stats::{StatSeeds, compute};
use geode_crucible::{FamilyId, TaskId};

fn table(tasks: usize, trials: u32) -> PairedTable {
    let mut rng = rng_from_seed(1);
    PairedTable {
        tasks: (0..tasks)
            .map(|t| {
                let p = beta(&mut rng, 1.0, 1.0);
                let q = (p + 0.05).min(1.0);
                PairedTask {
                    task: TaskId::new(format!("t{t}")),
                    family: FamilyId::new(format!("f{}", t % 10)),
                    pairs: (0..trials)
                        .map(|_| Pair {
                            baseline: bernoulli(&mut rng, p),
                            candidate: bernoulli(&mut rng, q),
                        })
                        .collect(),
                    dropped: 0,
                    baseline_signals: SignalTally::default(),
                    candidate_signals: SignalTally::default(),
                }
            })
            .collect(),
    }
}

fn bench(c: &mut Criterion) {
    let t = table(1000, 5);
    let deltas: Vec<f64> = summarize_tasks(&t).iter().map(|s| s.delta).collect();
    c.bench_function("cluster_bootstrap_10000x1000_tasks", |b| {
        b.iter(|| cluster_bootstrap(black_box(&deltas), 10_000, 17, 0.95))
    });
    let rule = DecisionRule::default();
    let seeds = StatSeeds {
        bootstrap: 17,
        permutation: 23,
    };
    c.bench_function("all_statistics_1000_tasks_x5_trials", |b| {
        b.iter(|| compute(black_box(&t), &rule, seeds))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench
}
criterion_main!(benches);
