//! The report's run figures, which it aggregates per task in polars, equal the one score
//! summary (`geode_graders::summary`, the harness's end-of-run summary too) computed straight
//! from the trials the fixture wrote; and re-grades in the store reach the report.

use std::collections::BTreeMap;

use geode_graders::TrialOutcome;
use geode_graders::summary::{pass_at_k_curve, scores, tally};
use geode_reports::{TrialColumns, build, load, resolve_run};

use super::fixture::{self, RUN_A, RUN_B};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn run_scores_agree_with_the_one_score_summary() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = fixture::write(dir.path());
    let refs = [resolve_run(RUN_A, &jobs), resolve_run(RUN_B, &jobs)];
    let report = build(&load(&refs, TrialColumns::Report).unwrap()).unwrap();
    for (i, run) in [RUN_A, RUN_B].into_iter().enumerate() {
        let written = fixture::trials(run);
        let mut by_task: BTreeMap<&str, Vec<(TrialOutcome, Option<f64>)>> = BTreeMap::new();
        for (task, outcome, reward) in &written {
            let outcome = TrialOutcome::parse(outcome).unwrap();
            by_task.entry(task).or_default().push((outcome, *reward));
        }
        let tallies: Vec<_> = by_task.iter().map(|(t, rows)| (*t, tally(rows))).collect();
        let points: Vec<_> = tallies.iter().filter_map(|(_, t)| t.point).collect();
        let zeroed: Vec<_> = tallies
            .iter()
            .filter_map(|(_, t)| t.infra_as_zero)
            .collect();
        let want = scores(&points);

        let r = &report.run_scores[i];
        assert_eq!(r.run_id, run);
        assert_eq!((r.tasks, r.trials), (by_task.len(), written.len()));
        assert!(
            close(r.scores.accuracy.unwrap(), want.accuracy.unwrap()),
            "{run}"
        );
        assert!(
            close(r.scores.tb_stderr.unwrap(), want.tb_stderr.unwrap()),
            "{run}"
        );
        let ((lo, hi), (wlo, whi)) = (r.scores.ci95.unwrap(), want.ci95.unwrap());
        assert!(
            close(lo, wlo) && close(hi, whi),
            "{run}: {lo} {hi} vs {wlo} {whi}"
        );
        let zero = scores(&zeroed).accuracy.unwrap();
        assert!(close(r.accuracy_infra_zero.unwrap(), zero), "{run}");
        for (got, want) in [
            (&r.pass_at_k, pass_at_k_curve(&points)),
            (&r.pass_at_k_infra_zero, pass_at_k_curve(&zeroed)),
        ] {
            assert_eq!(got.len(), want.len(), "{run}");
            for ((k, v), (wk, wv)) in got.iter().zip(&want) {
                assert!(k == wk && close(*v, *wv), "{run} pass@{k}: {v} vs {wv}");
            }
        }
        // Per task: the scored tasks, their counts and means.
        let mine: Vec<_> = report
            .tasks
            .iter()
            .filter(|t| t.run_id == run && t.mean_reward.is_some())
            .collect();
        let scored: Vec<_> = tallies
            .iter()
            .filter_map(|(task, t)| t.point.map(|p| (*task, p)))
            .collect();
        assert_eq!(mine.len(), scored.len(), "{run}");
        for (t, (task, p)) in mine.iter().zip(&scored) {
            assert_eq!(t.task_id, *task);
            assert_eq!((t.trials, t.passes), (p.trials, p.passes), "{task}");
            assert!(close(t.mean_reward.unwrap(), p.mean), "{task}");
        }
        // Outcome counts.
        let outcomes: BTreeMap<String, usize> = report
            .outcomes
            .iter()
            .filter(|o| o.0 == run)
            .map(|o| (o.1.clone(), o.2 as usize))
            .collect();
        let mut want_outcomes = BTreeMap::new();
        for (_, outcome, _) in &written {
            *want_outcomes.entry(outcome.to_string()).or_default() += 1;
        }
        assert_eq!(outcomes, want_outcomes, "{run}");
    }
}

/// Re-grades in the store (rows of its `grades` table, as `geode grade` records them) show in
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
    let trials = fixture::add_grades(&jobs, RUN_A);
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

/// A run store inside a crucible campaign is reported with the campaign's decision; a decision
/// file that is not one is named, not skipped.
#[test]
fn a_broken_decision_beside_the_store_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = fixture::write(dir.path());
    let refs = [resolve_run(RUN_A, &jobs)];
    assert!(
        load(&refs, TrialColumns::Report)
            .unwrap()
            .campaigns
            .is_empty()
    );
    std::fs::write(jobs.join("decision.json"), "{\"verdict\": \"KEEP\"}").unwrap();
    let err = load(&refs, TrialColumns::Report).err().unwrap().to_string();
    assert!(
        err.contains("decision.json: not a decision record"),
        "{err}"
    );
}
