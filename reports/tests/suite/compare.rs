//! The paired comparison: pairing by attempt, infrastructure pairs dropped, and the crucible's
//! statistics on the task deltas.

use geode_crucible::stats::interval::t_interval;
use geode_crucible::stats::permutation::sign_flip_test;
use geode_reports::compare::{compare, report_rule, report_seeds};
use geode_reports::{TextFormat, TrialColumns, load, render, resolve_run};

use super::fixture::{self, RUN_A, RUN_B};

fn comparison() -> geode_reports::compare::Comparison {
    let dir = tempfile::tempdir().unwrap();
    let jobs = fixture::write(dir.path());
    let refs = [resolve_run(RUN_A, &jobs), resolve_run(RUN_B, &jobs)];
    let loaded = load(&refs, TrialColumns::Report).unwrap();
    compare(&loaded.trials, RUN_A, RUN_B).unwrap()
}

#[test]
fn pairs_by_attempt_and_drops_infrastructure_pairs() {
    let c = comparison();
    assert_eq!(c.only_baseline, 1); // tb/only-a
    assert_eq!(c.only_candidate, 0);
    assert_eq!(c.unpaired_trials, 0);
    // sqlite-db attempt 3 (A lost its sandbox) and crack-hash attempt 3 (B's provider).
    assert_eq!(c.dropped_pairs, 2);
    assert_eq!(c.statistics.pairs, 18);
    let by_hand = [
        ("tb/crack-hash", (0.5 + 0.0 + 0.0) / 3.0), // (1 - 0.5), (1 - 1), (0 - 0)
        ("tb/fix-git", 0.25),
        ("tb/hello-world", 0.0),
        ("tb/sqlite-db", 1.0 / 3.0),
        ("tb/train-model", 0.25),
    ];
    for (d, (task, delta)) in c.tasks.iter().zip(by_hand) {
        assert_eq!(d.task_id, task);
        assert!(
            (d.delta.unwrap() - delta).abs() < 1e-12,
            "{task}: {:?}",
            d.delta
        );
    }
}

#[test]
fn statistics_are_the_crucibles() {
    let c = comparison();
    let deltas: Vec<f64> = c.statistics.per_task.iter().map(|t| t.delta).collect();
    let rule = report_rule();
    let seeds = report_seeds(RUN_A, RUN_B);
    let t = t_interval(&deltas, rule.confidence).unwrap();
    assert_eq!(c.statistics.t.unwrap(), t);
    let p = sign_flip_test(&deltas, rule.permutation_resamples, seeds.permutation).unwrap();
    assert_eq!(c.statistics.permutation.unwrap().p_value, p.p_value);
    // Five tasks, four positive deltas and one zero: exact enumeration of 32 sign vectors.
    assert!(c.p_two_sided.unwrap() >= p.p_value);
    assert!(c.statistics.minimum_detectable_effect.unwrap() > 0.0);
    assert!(c.correlation.unwrap() > 0.5);
}

#[test]
fn comparison_markdown_snapshot() {
    insta::assert_snapshot!(render::comparison(&comparison(), TextFormat::Markdown));
}

#[test]
fn runs_without_shared_tasks_compare_to_nothing_without_failing() {
    use geode_reports::synth::{RunRecord, TrialRecord, Writer};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("geode.db");
    let mut w = Writer::create(&db).unwrap();
    for (run, task) in [("x", "t/a"), ("y", "t/b")] {
        w.insert_run(&RunRecord {
            run_id: run,
            created_unix: 0,
            model_route: "m",
            attempts: 1,
            seed: 0,
            status: "finished",
        })
        .unwrap();
        w.insert_trials([TrialRecord {
            run_id: run,
            task_id: task,
            category: "c",
            difficulty: "d",
            attempt: 0,
            outcome: "passed",
            reward: Some(1.0),
            exception_class: None,
            exception_message: None,
            started_ms: 0,
            duration_ms: 1000,
            input_tokens: 1,
            cached_tokens: 0,
            output_tokens: 1,
            cost_usd: 0.0,
            model_calls: 1,
        }])
        .unwrap();
    }
    let refs = [resolve_run("x", dir.path()), resolve_run("y", dir.path())];
    let loaded = load(&refs, TrialColumns::Report).unwrap();
    let c = compare(&loaded.trials, "x", "y").unwrap();
    assert_eq!((c.only_baseline, c.only_candidate), (1, 1));
    assert_eq!(c.statistics.tasks, 0);
    assert_eq!(c.statistics.estimate, None);
    let text = render::comparison(&c, TextFormat::Term);
    assert!(text.contains("no_tasks"), "{text}");
}
