//! Trials on Slurm: a real cluster (`munged`, `slurmctld`, a `slurmd` per node in network
//! namespaces of their own) runs `geode run --executor slurm`, and the per-trial results, the
//! run store and the retries are those of the local executor.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use geode_harness::rollout::slurm::files::{WorkerResult, submissions};
use geode_harness::store::RunStore;

use super::slurm_cluster::Cluster;

pub(super) fn core_pack() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tasks/geode-core")
}

/// (trial, outcome, reward, seed, task hash) of every stored trial of a run.
pub(super) type Trials = BTreeMap<String, (String, Option<f64>, u64, String)>;

pub(super) fn stored(jobs: &Path, run_dir: &Path) -> Trials {
    let store = RunStore::open(&jobs.join("geode.db")).unwrap();
    let run = run_dir.file_name().unwrap().to_string_lossy().into_owned();
    store
        .trials(&run)
        .unwrap()
        .into_iter()
        .map(|t| {
            (
                t.trial_name,
                (t.outcome.to_string(), t.reward, t.seed, t.task_hash),
            )
        })
        .collect()
}

/// Every worker result file of a run.
pub(super) fn worker_results(run_dir: &Path) -> Vec<WorkerResult> {
    let dir = run_dir.join("slurm/results");
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| serde_json::from_str(&std::fs::read_to_string(e.path()).unwrap()).unwrap())
        .collect()
}

pub(super) fn geode(dir: &Path, cluster: &Cluster) -> Command {
    let mut cmd = super::common::geode_in(dir);
    cluster.env(&mut cmd);
    cmd
}

#[test]
fn slurm_the_core_pack_on_two_nodes_gives_the_local_results() {
    let cluster = Cluster::start(2);
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs");
    let (local, local_dir) = super::common::run_oracle_with(
        super::common::geode_in(dir.path()),
        &core_pack(),
        &jobs,
        &["--seed", "11", "-n", "4"],
    );
    let (remote, remote_dir) = super::common::run_oracle_with(
        geode(dir.path(), &cluster),
        &core_pack(),
        &jobs,
        &["--seed", "11", "-n", "4", "--executor", "slurm"],
    );
    assert_eq!(local["summary"], remote["summary"]);
    let (l, r) = (stored(&jobs, &local_dir), stored(&jobs, &remote_dir));
    assert_eq!(l.len(), 28);
    assert_eq!(l, r);
    let nodes: BTreeSet<String> = worker_results(&remote_dir)
        .into_iter()
        .map(|w| w.node)
        .collect();
    assert_eq!(nodes, BTreeSet::from(["n1".to_string(), "n2".to_string()]));
}

#[test]
fn slurm_at_n_1_one_array_task_runs_every_trial_back_to_back_and_the_idle_ones_are_cancelled() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs");
    let (_, run_dir) = super::common::run_oracle_with(
        geode(dir.path(), &cluster),
        &core_pack(),
        &jobs,
        &["--seed", "7", "-n", "1", "--executor", "slurm"],
    );
    all_passed(&stored(&jobs, &run_dir));
    let ledger = submissions(&run_dir).unwrap();
    let arrays: BTreeSet<u64> = ledger.iter().map(|s| s.job).collect();
    assert_eq!(arrays.len(), 1, "{ledger:?}");
    // The throttle lets one task run at a time, and it ran all 28 trials: no hand-over from
    // one array task to the next, no new worker per trial.
    let ran_by: BTreeSet<Option<usize>> = worker_results(&run_dir)
        .iter()
        .map(|w| w.array_task)
        .collect();
    assert_eq!(ran_by, BTreeSet::from([Some(0)]));
    // The other 27 tasks, their groups run by task 0, were cancelled rather than left to start
    // one by one and find nothing to do. (Slurm lists pending tasks cancelled as one record
    // with no index, or not at all.)
    let queue = cluster.squeue(&arrays.into_iter().collect::<Vec<_>>(), "%K|%T");
    assert!(!queue.contains("PENDING"), "{queue}");
    let started: Vec<&str> = queue
        .lines()
        .filter(|l| {
            l.split('|')
                .next()
                .is_some_and(|i| i.parse::<usize>().is_ok())
        })
        .collect();
    assert!(
        (1..=4).contains(&started.len()),
        "more tasks than the one that ran every trial started: {queue}"
    );
}

/// `geode run --executor slurm` over the core pack, started in the background.
pub(super) fn spawn_run(dir: &Path, cluster: &Cluster, jobs: &Path) -> std::process::Child {
    geode(dir, cluster)
        .arg("run")
        .arg(core_pack())
        .args(["--model", "oracle", "--json", "--seed", "3", "-n", "4"])
        .args(["--executor", "slurm", "--jobs-dir"])
        .arg(jobs)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// The one run folder in `jobs` (the one with a `config.json`), once the coordinator has made
/// it.
pub(super) fn only_run(jobs: &Path) -> PathBuf {
    let find = || {
        std::fs::read_dir(jobs)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.join("config.json").is_file())
    };
    wait(|| find().is_some());
    find().unwrap()
}

pub(super) fn results_so_far(run_dir: &Path) -> usize {
    std::fs::read_dir(run_dir.join("slurm/results")).map_or(0, |d| {
        d.flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .count()
    })
}

/// Waits (polling) until `ready`; the run under test is what bounds it.
pub(super) fn wait(mut ready: impl FnMut() -> bool) {
    for _ in 0..1200 {
        if ready() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("the awaited state never came");
}

pub(super) fn all_passed(trials: &Trials) {
    assert_eq!(trials.len(), 28, "{trials:?}");
    for (name, t) in trials {
        assert_eq!(t.0, "passed", "{name}: {t:?}");
    }
}

#[test]
fn slurm_a_node_that_dies_mid_run_loses_nothing_and_counts_nothing_twice() {
    let mut cluster = Cluster::start(2);
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs");
    let run = spawn_run(dir.path(), &cluster, &jobs);
    let run_dir = only_run(&jobs);
    wait(|| results_so_far(&run_dir) >= 2 && cluster.running_on(0) > 0);
    cluster.kill_node(0);
    let out = run.wait_with_output().unwrap();
    assert!(out.status.success());
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["summary"]["trials"], 28);
    let trials = stored(&jobs, &run_dir);
    all_passed(&trials);
    let store = RunStore::open(&jobs.join("geode.db")).unwrap();
    let rows = store.trials(summary["run_id"].as_str().unwrap()).unwrap();
    let retried: Vec<_> = rows.iter().filter(|r| r.infra_retries > 0).collect();
    assert!(!retried.is_empty(), "no trial was lost with its node");
    // The lost try left no result; the retry's is the one counted.
    for r in retried {
        let first = run_dir.join(format!("slurm/results/{}.0.json", r.trial_name));
        assert!(
            !first.exists(),
            "{} has a result of its lost try",
            r.trial_name
        );
    }
}

#[test]
fn slurm_a_killed_coordinator_resumes_without_resubmitting_what_ran() {
    let cluster = Cluster::start(2);
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs");
    let mut run = spawn_run(dir.path(), &cluster, &jobs);
    let run_dir = only_run(&jobs);
    wait(|| results_so_far(&run_dir) >= 3);
    run.kill().unwrap();
    run.wait().unwrap();
    let run_id = run_dir.file_name().unwrap().to_string_lossy().into_owned();
    let out = geode(dir.path(), &cluster)
        .args(["run", "--resume", &run_id, "--json", "--jobs-dir"])
        .arg(&jobs)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    all_passed(&stored(&jobs, &run_dir));
    // Every trial went out once: the resumed coordinator adopted the arrays still out and
    // ingested the results already written.
    let mut sent: BTreeMap<String, usize> = BTreeMap::new();
    for s in submissions(&run_dir).unwrap() {
        for t in s.trials {
            *sent.entry(t.trial_name).or_default() += 1;
        }
    }
    assert_eq!(sent.len(), 28);
    assert!(sent.values().all(|&n| n == 1), "{sent:?}");
}

/// Figures, not a test of speed (ignored by default; run with `--ignored --nocapture`): the
/// core pack with the oracle, `-n 4`, locally and on Slurm with one and two nodes, side by
/// side in one run: throughput, and each array task's scheduling overhead (its submission to
/// its worker's start).
#[test]
#[ignore]
fn slurm_figures_local_one_node_two_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let timed = |cmd: Command, jobs: &Path, extra: &[&str]| {
        let start = std::time::Instant::now();
        let (_, run_dir) = super::common::run_oracle_with(cmd, &core_pack(), jobs, extra);
        (start.elapsed().as_secs_f64(), run_dir)
    };
    let (secs, _) = timed(
        super::common::geode_in(dir.path()),
        &dir.path().join("local"),
        &["-n", "4"],
    );
    eprintln!(
        "local: 28 trials in {secs:.1}s = {:.1} trials/min",
        28.0 * 60.0 / secs
    );
    for nodes in [1, 2] {
        let cluster = Cluster::start(nodes);
        let jobs = dir.path().join(format!("slurm{nodes}"));
        let (secs, run_dir) = timed(
            geode(dir.path(), &cluster),
            &jobs,
            &["-n", "4", "--executor", "slurm"],
        );
        let submitted: BTreeMap<String, String> = submissions(&run_dir)
            .unwrap()
            .into_iter()
            .flat_map(|s| {
                s.trials
                    .into_iter()
                    .map(move |t| (t.trial_name, s.submitted.clone()))
            })
            .collect();
        let mut waits: Vec<f64> = worker_results(&run_dir)
            .iter()
            .map(|w| {
                let at = |t: &str| chrono::DateTime::parse_from_rfc3339(t).unwrap();
                (at(&w.worker_started) - at(&submitted[&w.row.trial_name])).as_seconds_f64()
            })
            .collect();
        waits.sort_by(f64::total_cmp);
        eprintln!(
            "slurm, {nodes} node(s): 28 trials in {secs:.1}s = {:.1} trials/min; submission to \
             worker start: min {:.2}s, median {:.2}s, max {:.2}s (queueing behind -n 4 included)",
            28.0 * 60.0 / secs,
            waits[0],
            waits[waits.len() / 2],
            waits[waits.len() - 1]
        );
    }
}

/// `geode bench slurm-overhead` over the core pack on the test cluster, printed (ignored by
/// default; run with `--ignored --nocapture`). `GEODE_BENCH_ARGS` replaces the bench's options
/// (default `-r 3 -n 1`), `GEODE_BENCH_NODES` the cluster's size (default 1).
#[test]
#[ignore]
fn slurm_overhead_bench_on_the_test_cluster() {
    let nodes = std::env::var("GEODE_BENCH_NODES").map_or(1, |n| n.parse().unwrap());
    let cluster = Cluster::start(nodes);
    let dir = tempfile::tempdir().unwrap();
    let args = std::env::var("GEODE_BENCH_ARGS").unwrap_or_else(|_| "-r 3 -n 1".into());
    let status = geode(dir.path(), &cluster)
        .args(["bench", "slurm-overhead"])
        .arg(core_pack())
        .args(args.split_whitespace())
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn slurm_ctrl_c_cancels_the_arrays_and_leaves_the_rest_for_a_resume() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs");
    let run = spawn_run(dir.path(), &cluster, &jobs);
    let run_dir = only_run(&jobs);
    wait(|| results_so_far(&run_dir) >= 2);
    let pid = nix::unistd::Pid::from_raw(run.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let out = run.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["cancelled"], true);
    // Nothing of the run is left in Slurm's queue.
    let jobs_out: BTreeSet<u64> = submissions(&run_dir)
        .unwrap()
        .into_iter()
        .map(|s| s.job)
        .collect();
    for job in jobs_out {
        let mut cmd = Command::new("squeue");
        cluster.env(&mut cmd);
        let q = cmd
            .args(["-h", "-r", "-t", "pending,running", "-j", &job.to_string()])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&q.stdout).trim(), "", "job {job}");
    }
    let finished = stored(&jobs, &run_dir).len();
    assert!((2..28).contains(&finished), "{finished} trials finished");
}

#[test]
fn slurm_a_trial_over_its_time_limit_is_recorded_as_such_and_not_retried() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("pack/slow");
    super::common::copy_tree(&core_pack().join("bank-reconcile"), &task);
    let solve = task.join("solution/solve.sh");
    let mut text = std::fs::read_to_string(&solve).unwrap();
    text.push_str("\nsleep 300\n");
    std::fs::write(&solve, text).unwrap();
    let jobs = dir.path().join("jobs");
    // The default retry budget (2): a time limit is the trial's own outcome, so it must not
    // be spent on it.
    let (summary, run_dir) = super::common::run_model_with(
        geode(dir.path(), &cluster),
        &dir.path().join("pack"),
        &jobs,
        "oracle",
        &["--executor", "slurm", "--time-limit", "1"],
    );
    assert_eq!(
        summary["summary"]["outcomes"]["agent_timeout"], 1,
        "{summary}"
    );
    let store = RunStore::open(&jobs.join("geode.db")).unwrap();
    let run = run_dir.file_name().unwrap().to_string_lossy().into_owned();
    let rows = store.trials(&run).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].exception_class.as_deref(), Some("SlurmTimeLimit"));
    assert_eq!(rows[0].infra_retries, 0);
    assert_eq!(
        submissions(&run_dir).unwrap().len(),
        1,
        "the trial went out again"
    );
}
