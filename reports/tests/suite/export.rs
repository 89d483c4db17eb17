//! The trial table exports read back with the same rows.

use geode_reports::export::{read_parquet, write_csv, write_parquet};
use geode_reports::{TrialColumns, load, resolve_run};

use super::fixture::{self, RUN_A, RUN_B};

#[test]
fn parquet_reads_back_with_the_same_rows() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = fixture::write(dir.path());
    let refs = [resolve_run(RUN_A, &jobs), resolve_run(RUN_B, &jobs)];
    let mut loaded = load(&refs, TrialColumns::Export).unwrap();
    assert_eq!(loaded.trials.height(), 44);
    let path = dir.path().join("trials.parquet");
    write_parquet(&mut loaded.trials, &path).unwrap();
    let back = read_parquet(&path).unwrap();
    assert_eq!(back.height(), 44);
    assert_eq!(back.schema(), loaded.trials.schema());
    assert!(back.equals_missing(&loaded.trials));
}

#[test]
fn csv_has_a_header_and_one_line_per_trial() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = fixture::write(dir.path());
    let mut loaded = load(&[resolve_run(RUN_A, &jobs)], TrialColumns::Export).unwrap();
    let mut buf = Vec::new();
    write_csv(&mut loaded.trials, &mut buf, "buffer").unwrap();
    let text = String::from_utf8(buf).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    assert!(header.starts_with("run_id,trial_name,task_id,"), "{header}");
    assert!(header.contains(",infra,") && header.contains("agent_execution_sec"));
    assert!(
        header.ends_with(",model_calls,integrity,duration_sec"),
        "{header}"
    );
    assert_eq!(lines.count(), 24);
}

/// A seed above i64::MAX (the store keeps u64 seeds in SQLite's signed integer) exports as
/// the u64 it is, not wrapped negative.
#[test]
fn seeds_export_as_the_unsigned_numbers_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = fixture::write(dir.path());
    let big: u64 = u64::MAX - 5;
    rusqlite::Connection::open(jobs.join("geode.db"))
        .unwrap()
        .execute(
            "UPDATE trials SET seed = ?1 WHERE run_id = ?2",
            rusqlite::params![big as i64, RUN_A],
        )
        .unwrap();
    let loaded = load(&[resolve_run(RUN_A, &jobs)], TrialColumns::Export).unwrap();
    let seeds = loaded.trials.column("seed").unwrap().u64().unwrap();
    assert_eq!(seeds.len(), 24);
    assert!((0..seeds.len()).all(|i| seeds.get(i) == Some(big)));
}

/// Re-grades travel with the trials: two columns per grader content hash, null for the trials
/// of a run that grader did not grade, and the same after a Parquet round trip.
#[test]
fn regrades_are_exported_beside_each_trial() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = fixture::write(dir.path());
    let graded = fixture::add_grades(&jobs, RUN_A);
    let refs = [resolve_run(RUN_A, &jobs), resolve_run(RUN_B, &jobs)];
    let mut loaded = load(&refs, TrialColumns::Export).unwrap();
    let t = &loaded.trials;
    let reward = |col: &str, row: usize| t.column(col).unwrap().f64().unwrap().get(row);
    let validity = |col: &str, row: usize| {
        t.column(col)
            .unwrap()
            .str()
            .unwrap()
            .get(row)
            .map(str::to_owned)
    };
    let names: Vec<String> = t
        .column("trial_name")
        .unwrap()
        .str()
        .unwrap()
        .iter()
        .map(|n| n.unwrap().to_owned())
        .collect();
    let runs: Vec<&str> = t
        .column("run_id")
        .unwrap()
        .str()
        .unwrap()
        .iter()
        .map(Option::unwrap)
        .collect();
    for (row, (run, name)) in runs.iter().zip(&names).enumerate() {
        if *run != RUN_A {
            assert_eq!(reward("regrade_aaaaaaaaaaaa", row), None);
            assert_eq!(validity("regrade_bbbbbbbbbbbb_validity", row), None);
            continue;
        }
        let first = name == &graded[0];
        assert_eq!(
            reward("regrade_aaaaaaaaaaaa", row),
            (!first).then_some(1.0),
            "{name}"
        );
        assert_eq!(
            reward("regrade_bbbbbbbbbbbb", row),
            (!first).then_some(0.25),
            "{name}"
        );
        let want = if first { "verifier_crashed" } else { "valid" };
        assert_eq!(
            validity("regrade_aaaaaaaaaaaa_validity", row).as_deref(),
            Some(want)
        );
    }
    assert_eq!(runs.iter().filter(|r| **r == RUN_A).count(), graded.len());
    let path = dir.path().join("graded.parquet");
    write_parquet(&mut loaded.trials, &path).unwrap();
    assert!(read_parquet(&path).unwrap().equals_missing(&loaded.trials));
}
