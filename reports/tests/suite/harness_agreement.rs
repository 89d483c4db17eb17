//! The report's run figures equal the harness's own end-of-run summary on the same store: both
//! read the fixture (the harness through its `RunStore`, which also checks that the fixture's
//! copy of the schema is the harness's).

use geode_harness::store::RunStore;
use geode_harness::summary::summarize;
use geode_reports::{TrialColumns, build, load, resolve_run};

use super::fixture::{self, RUN_A, RUN_B};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn run_scores_agree_with_the_harness_summary() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = fixture::write(dir.path());
    let store = RunStore::open(&jobs.join("geode.db")).unwrap();
    let refs = [resolve_run(RUN_A, &jobs), resolve_run(RUN_B, &jobs)];
    let report = build(&load(&refs, TrialColumns::Report).unwrap()).unwrap();
    for (i, run) in [RUN_A, RUN_B].into_iter().enumerate() {
        let h = summarize(&store.trials(run).unwrap());
        let r = &report.run_scores[i];
        assert_eq!(r.run_id, run);
        assert_eq!(r.tasks, h.tasks, "{run}");
        assert_eq!(r.trials, h.trials, "{run}");
        assert!(close(r.scores.accuracy.unwrap(), h.accuracy), "{run}");
        assert!(close(r.scores.tb_stderr.unwrap(), h.tb_stderr), "{run}");
        let (lo, hi) = r.scores.ci95.unwrap();
        let (hlo, hhi) = h.ci95.unwrap();
        assert!(
            close(lo, hlo) && close(hi, hhi),
            "{run}: {lo} {hi} vs {hlo} {hhi}"
        );
        assert!(close(
            r.accuracy_infra_zero.unwrap(),
            h.accuracy_infra_as_zero
        ));
        assert_eq!(r.pass_at_k.len(), h.pass_at_k.len(), "{run}");
        for ((k, v), (hk, hv)) in r.pass_at_k.iter().zip(&h.pass_at_k) {
            assert_eq!(k, hk);
            assert!(close(*v, *hv), "{run} pass@{k}: {v} vs {hv}");
        }
        // Per task: the scored tasks, their counts and means.
        let mine: Vec<_> = report
            .tasks
            .iter()
            .filter(|t| t.run_id == run && t.mean_reward.is_some())
            .collect();
        assert_eq!(mine.len(), h.per_task.len(), "{run}");
        for (t, ht) in mine.iter().zip(&h.per_task) {
            assert_eq!(t.task_id, ht.task_id);
            assert_eq!(
                (t.trials, t.passes),
                (ht.trials, ht.passes),
                "{}",
                t.task_id
            );
            assert!(
                close(t.mean_reward.unwrap(), ht.mean_reward),
                "{}",
                t.task_id
            );
        }
        // Outcome counts, tokens and cost.
        let outcomes: std::collections::BTreeMap<String, usize> = report
            .outcomes
            .iter()
            .filter(|o| o.0 == run)
            .map(|o| (o.1.clone(), o.2 as usize))
            .collect();
        assert_eq!(outcomes, h.outcomes, "{run}");
        let u = &report.usage[i];
        assert_eq!(u.input_tokens as u64, h.input_tokens);
        assert_eq!(u.output_tokens as u64, h.output_tokens);
        assert!((u.cost_usd - h.cost_usd).abs() < 1e-9);
    }
}

/// Re-grades written by the harness (`geode grade` through `RunStore::record_grade`) show in
/// the report, one row per grader content, with the mean of the valid grades; a store without
/// them renders no such table.
#[test]
fn regrades_in_the_store_reach_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = fixture::write(dir.path());
    let refs = [resolve_run(RUN_A, &jobs)];
    let plain = geode_reports::render::report(
        &build(&load(&refs, TrialColumns::Report).unwrap()).unwrap(),
        geode_reports::TextFormat::Markdown,
    );
    assert!(!plain.contains("Re-grades"));
    let store = RunStore::open(&jobs.join("geode.db")).unwrap();
    let trials = store.trials(RUN_A).unwrap();
    for (i, t) in trials.iter().enumerate() {
        for (hash, reward) in [("aa".repeat(32), 1.0), ("bb".repeat(32), 0.25)] {
            store
                .record_grade(&geode_harness::store::GradeRow {
                    run_id: RUN_A.into(),
                    trial_name: t.trial_name.clone(),
                    grader: "rubric:rubric.toml".into(),
                    grader_hash: hash,
                    reward: (i > 0).then_some(reward),
                    validity: if i > 0 { "valid" } else { "verifier_crashed" }.into(),
                    graded_at: format!("2026-01-0{}T00:00:00Z", 1 + usize::from(reward < 1.0)),
                })
                .unwrap();
        }
    }
    let report = build(&load(&refs, TrialColumns::Report).unwrap()).unwrap();
    assert_eq!(report.regrades.len(), 2);
    let first = &report.regrades[0];
    assert_eq!(first.trials, trials.len() as i64);
    assert_eq!(first.valid, trials.len() as i64 - 1);
    assert!(close(first.mean_reward.unwrap(), 1.0));
    assert!(close(report.regrades[1].mean_reward.unwrap(), 0.25));
    let md = geode_reports::render::report(&report, geode_reports::TextFormat::Markdown);
    assert!(md.contains("Re-grades"), "{md}");
    assert!(md.contains("| rubric:rubric.toml | aaaaaaaaaaaa |"), "{md}");
}
