//! Snapshots of the Markdown and terminal reports on the fixture store, and run resolution.

use geode_reports::{
    ReportError, RewardKey, TextFormat, TrialColumns, build, load, load_scoring, render,
    resolve_run,
};

use super::fixture::{self, RUN_A, RUN_B};

fn report_of(runs: &[&str], format: TextFormat) -> String {
    let dir = tempfile::tempdir().unwrap();
    let jobs = fixture::write(dir.path());
    let refs: Vec<_> = runs.iter().map(|r| resolve_run(r, &jobs)).collect();
    let loaded = load(&refs, TrialColumns::Report).unwrap();
    render::report(&build(&loaded).unwrap(), format)
}

#[test]
fn markdown_report_of_two_runs() {
    insta::assert_snapshot!(report_of(&[RUN_A, RUN_B], TextFormat::Markdown));
}

#[test]
fn terminal_report_of_two_runs() {
    insta::assert_snapshot!(report_of(&[RUN_A, RUN_B], TextFormat::Term));
}

#[test]
fn terminal_report_of_one_run() {
    insta::assert_snapshot!(report_of(&[RUN_A], TextFormat::Term));
}

#[test]
fn a_run_folder_path_names_its_store() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = fixture::write(dir.path());
    let folder = jobs.join(RUN_B);
    let r = resolve_run(folder.to_str().unwrap(), std::path::Path::new("elsewhere"));
    assert_eq!(r.store, jobs.join("geode.db"));
    assert_eq!(r.run_id, RUN_B);
    // A bare id is looked up in the jobs dir.
    let r = resolve_run(RUN_A, &jobs);
    assert_eq!(r.store, jobs.join("geode.db"));
}

#[test]
fn an_unknown_run_lists_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = fixture::write(dir.path());
    let err = load(&[resolve_run("nope", &jobs)], TrialColumns::Report)
        .err()
        .unwrap();
    assert!(matches!(err, ReportError::UnknownRun { .. }));
    let msg = err.to_string();
    assert!(msg.contains("geode.db"), "{msg}");
    assert!(msg.contains("\"nope\""), "{msg}");
    assert!(msg.contains(RUN_A) && msg.contains(RUN_B), "{msg}");
}

#[test]
fn a_missing_store_and_a_foreign_database_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let err = load(&[resolve_run("x", dir.path())], TrialColumns::Report)
        .err()
        .unwrap();
    assert!(matches!(err, ReportError::NoStore { .. }), "{err}");
    let db = dir.path().join("geode.db");
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch("CREATE TABLE t (x INTEGER);")
        .unwrap();
    let err = load(&[resolve_run("x", dir.path())], TrialColumns::Report)
        .err()
        .unwrap();
    assert!(matches!(err, ReportError::Schema { .. }), "{err}");
    assert!(err.to_string().contains("geode.db"));
}

#[test]
fn the_trial_frame_has_one_row_per_finished_trial() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = fixture::write(dir.path());
    // An interrupted trial is not a result.
    rusqlite::Connection::open(jobs.join("geode.db"))
        .unwrap()
        .execute(
            "INSERT INTO trials (run_id, trial_name, task_id, task_hash, category, difficulty,
             attempt, seed, status, started) VALUES (?1, 'x__9', 'x', 'h', 'c', 'd', 9, 0,
             'running', '2026-01-01T00:00:00.000Z')",
            [RUN_A],
        )
        .unwrap();
    let loaded = load(&[resolve_run(RUN_A, &jobs)], TrialColumns::Report).unwrap();
    assert_eq!(loaded.trials.height(), 24);
    assert_eq!(loaded.runs.height(), 1);
}

#[test]
fn a_store_from_before_model_calls_and_integrity_still_loads() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = fixture::write(dir.path());
    rusqlite::Connection::open(jobs.join("geode.db"))
        .unwrap()
        .execute_batch(
            "ALTER TABLE trials DROP COLUMN model_calls; ALTER TABLE trials DROP COLUMN integrity;",
        )
        .unwrap();
    let loaded = load(&[resolve_run(RUN_A, &jobs)], TrialColumns::Export).unwrap();
    assert_eq!(loaded.trials.height(), 24);
    assert_eq!(
        loaded.trials.column("model_calls").unwrap().null_count(),
        24
    );
    let report = build(&loaded).unwrap();
    assert_eq!(report.usage[0].model_calls, 0);
}

#[test]
fn a_reward_key_scores_that_key_and_a_trial_without_it_is_infrastructure() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = fixture::write(dir.path());
    let conn = rusqlite::Connection::open(jobs.join("geode.db")).unwrap();
    // Every finished trial of run A gets two keys; one of them lacks `performance`.
    conn.execute(
        "UPDATE trials SET rewards = json_object('correctness', 1.0, 'performance', 0.25)
         WHERE run_id = ?1",
        [RUN_A],
    )
    .unwrap();
    let lacking: String = conn
        .query_row(
            "SELECT trial_name FROM trials WHERE run_id = ?1 AND status = 'finished'
             AND outcome IN ('passed', 'failed') ORDER BY trial_name LIMIT 1",
            [RUN_A],
            |r| r.get(0),
        )
        .unwrap();
    conn.execute(
        "UPDATE trials SET rewards = json_object('correctness', 0.0) WHERE trial_name = ?1",
        [&lacking],
    )
    .unwrap();
    let refs = [resolve_run(RUN_A, &jobs)];
    let plain = load(&refs, TrialColumns::Report).unwrap();
    let key = RewardKey::parse("performance").unwrap();
    let keyed = load_scoring(&refs, TrialColumns::Report, Some(&key)).unwrap();
    let infra = |l: &geode_reports::Loaded| {
        l.trials
            .column("infra")
            .unwrap()
            .bool()
            .unwrap()
            .iter()
            .filter(|v| *v == Some(true))
            .count()
    };
    assert_eq!(
        infra(&keyed),
        infra(&plain) + 1,
        "the trial without the key"
    );
    let rewards: Vec<Option<f64>> = keyed
        .trials
        .column("reward")
        .unwrap()
        .f64()
        .unwrap()
        .iter()
        .collect();
    assert_eq!(rewards.iter().filter(|r| r.is_none()).count(), 1);
    assert!(rewards.iter().flatten().all(|r| *r == 0.25), "{rewards:?}");
    let title = render::report(&build(&keyed).unwrap(), TextFormat::Markdown);
    assert!(
        title.starts_with(&format!(
            "# GEODE report: {RUN_A} (scoring reward key performance)"
        )),
        "{}",
        &title[..80]
    );
    let correctness = RewardKey::parse("correctness").unwrap();
    let by_correctness = load_scoring(&refs, TrialColumns::Report, Some(&correctness)).unwrap();
    assert_eq!(infra(&by_correctness), infra(&plain));
    assert_ne!(
        build(&keyed).unwrap().run_scores[0].scores.accuracy,
        build(&by_correctness).unwrap().run_scores[0]
            .scores
            .accuracy
    );
    for bad in ["", "a\"b", "x y", "k'); DROP TABLE trials; --"] {
        assert!(
            matches!(RewardKey::parse(bad), Err(ReportError::BadRewardKey(_))),
            "{bad:?}"
        );
    }
}
