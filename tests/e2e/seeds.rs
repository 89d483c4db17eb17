//! One seed derivation: the same run seed gives a task's trials the same seeds under
//! `geode run` and `geode crucible run`, so a benchmark run and a campaign's arms meet the same
//! environment randomness.

use std::collections::BTreeMap;
use std::path::Path;

use geode_harness::store::RunStore;

/// (task, attempt) -> seed of every trial of `run` in the store at `db`.
fn seeds(db: &Path, run: &str) -> BTreeMap<(String, u32), u64> {
    let store = RunStore::open(db).unwrap();
    store
        .trials(run)
        .unwrap()
        .into_iter()
        .map(|t| ((t.task_id, t.attempt), t.seed))
        .collect()
}

#[test]
fn a_run_seed_gives_the_same_trial_seeds_under_run_and_crucible_run() {
    let dir = tempfile::tempdir().unwrap();
    let core = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tasks/geode-core");
    for (split, tasks) in [
        ("mini", ["bank-reconcile", "semver-sort"]),
        ("held", ["wordfreq-cli", "largest-files"]),
    ] {
        for task in tasks {
            super::common::copy_tree(&core.join(task), &dir.path().join(split).join(task));
        }
    }
    std::fs::write(dir.path().join("base.toml"), "repair_budget = 0\n").unwrap();
    std::fs::write(dir.path().join("cand.toml"), "repair_budget = 1\n").unwrap();
    let geode = |args: &[&str]| {
        let o = super::common::geode_in(dir.path())
            .args(args)
            .output()
            .unwrap();
        (o.status, String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let scaffolds = [
        "--baseline-scaffold",
        "base.toml",
        "--candidate-scaffold",
        "cand.toml",
    ];
    let mut freeze = vec![
        "crucible", "freeze", "--train", "mini", "--test", "held", "--stage", "train", "--model",
        "oracle", "--seed", "7", "-k", "2", "--out", "c.json",
    ];
    freeze.extend(scaffolds);
    let (status, err) = geode(&freeze);
    assert!(status.success(), "freeze: {err}");
    // Two tasks cannot KEEP: run anyway, the trials are what is checked.
    let mut run = vec![
        "crucible",
        "run",
        "c.json",
        "--pack",
        "mini",
        "-n",
        "2",
        "--allow-infeasible",
    ];
    run.extend(scaffolds);
    run.extend(["--jobs-dir", "jobs"]);
    // The verdict does not matter here (two tasks cannot KEEP); the trials do.
    let (_, err) = geode(&run);
    let campaign = std::fs::read_dir(dir.path().join("jobs/crucible"))
        .unwrap_or_else(|e| panic!("no campaign folder ({e}): {err}"))
        .next()
        .unwrap()
        .unwrap()
        .path();
    let db = campaign.join("geode.db");
    let baseline = seeds(&db, "baseline");
    assert_eq!(baseline.len(), 4, "two tasks, two trials: {err}");
    assert_eq!(
        baseline,
        seeds(&db, "candidate"),
        "both arms of a pair share its seed"
    );

    let (summary, run_dir) = super::common::run_oracle_with(
        super::common::geode_in(dir.path()),
        &dir.path().join("mini"),
        &dir.path().join("runs"),
        &["-k", "2", "--seed", "7"],
    );
    assert_eq!(summary["summary"]["trials"], 4, "{summary}");
    let run_id = summary["run_id"].as_str().unwrap();
    assert!(run_dir.is_dir());
    let benchmark = seeds(&dir.path().join("runs/geode.db"), run_id);
    assert_eq!(benchmark, baseline);
    // And the seeds are not all one value: each (task, trial) has its own.
    let distinct: std::collections::BTreeSet<u64> = benchmark.values().copied().collect();
    assert_eq!(distinct.len(), 4);
}
