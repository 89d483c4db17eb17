//! Slurm as sites run it: a site's `MaxArraySize`, its own sbatch options (kept by a resume), a
//! controller that stalls, a coordinator stopped by SIGTERM or Ctrl-C and resumed without a
//! retry budget, and a queue polled once per round for all of a run's arrays. Each test runs
//! `geode run --executor slurm` against the real test cluster (`support/slurm.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use geode_harness::rollout::slurm::files::submissions;
use nix::sys::signal::Signal;

use super::slurm::{
    all_passed, core_pack, geode, only_run, results_so_far, stored, wait, worker_results,
};
use super::slurm_cluster::{Cluster, logged_calls, logged_path};

/// `geode run --executor slurm` over the core pack with `extra`, in the background; its stderr
/// goes to `<dir>/coordinator.log`.
fn spawn_with(dir: &Path, cluster: &Cluster, jobs: &Path, extra: &[&str]) -> Child {
    let log = std::fs::File::create(dir.join("coordinator.log")).unwrap();
    geode(dir, cluster)
        .arg("run")
        .arg(core_pack())
        .args(["--model", "oracle", "--json", "--seed", "3"])
        .args(["--executor", "slurm", "--jobs-dir"])
        .arg(jobs)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap()
}

fn coordinator_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("coordinator.log")).unwrap_or_default()
}

/// Every array job of the run, from its ledger.
fn ledger_jobs(run_dir: &Path) -> Vec<u64> {
    let jobs: BTreeSet<u64> = submissions(run_dir)
        .unwrap()
        .into_iter()
        .map(|s| s.job)
        .collect();
    jobs.into_iter().collect()
}

/// `geode run --resume` of the run in `run_dir`, to its end.
fn resume(dir: &Path, cluster: &Cluster, jobs: &Path, run_dir: &Path) {
    let run_id = run_dir.file_name().unwrap().to_string_lossy().into_owned();
    let out = geode(dir, cluster)
        .args(["run", "--resume", &run_id, "--json", "--jobs-dir"])
        .arg(jobs)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn slurm_arrays_are_split_under_the_sites_max_array_size_and_polled_together() {
    let cluster = Cluster::start_with(2, "MaxArraySize=10\n");
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs");
    let mut cmd = geode(dir.path(), &cluster);
    cmd.env("PATH", logged_path(dir.path()));
    let (_, run_dir) = super::common::run_oracle_with(
        cmd,
        &core_pack(),
        &jobs,
        &["--seed", "5", "-n", "4", "--executor", "slurm"],
    );
    all_passed(&stored(&jobs, &run_dir));
    let ledger = submissions(&run_dir).unwrap();
    // Slurm takes array indices below MaxArraySize only.
    assert!(
        ledger.iter().all(|s| s.index < 10),
        "an index of 10 or more"
    );
    assert!(
        ledger_jobs(&run_dir).len() >= 3,
        "28 trials in fewer than 3 arrays"
    );
    // One squeue a round for all the arrays, not one per array every 300 ms. (The workers,
    // which inherit the logged PATH, ask once each for their own task's time left, `%L`.)
    let polls: Vec<f64> = logged_calls(dir.path())
        .into_iter()
        .filter(|(_, program, args)| program == "squeue" && args.contains("%F|%K|%T"))
        .map(|(at, _, _)| at)
        .collect();
    assert!(polls.len() >= 2, "{polls:?}");
    for pair in polls.windows(2) {
        assert!(
            pair[1] - pair[0] >= 1.0,
            "squeue called twice within {:.2}s",
            pair[1] - pair[0]
        );
    }
}

#[test]
fn slurm_sbatch_options_pass_through_and_a_resume_keeps_them() {
    // MinJobAge: the first arrays stay in squeue until the end, to be looked at.
    let cluster = Cluster::start_with(
        2,
        "MinJobAge=3600\nPartitionName=other Nodes=ALL Default=NO MaxTime=INFINITE State=UP\n",
    );
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs");
    let run = spawn_with(
        dir.path(),
        &cluster,
        &jobs,
        &[
            "-n",
            "4",
            "--partition",
            "other",
            "--time-limit",
            "20",
            "--sbatch-arg=--comment=geode-e2e",
            "--sbatch-arg",
            "--nice=7",
        ],
    );
    let run_dir = only_run(&jobs);
    wait(|| results_so_far(&run_dir) >= 2);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(run.id() as i32), Signal::SIGINT).unwrap();
    let out = run.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        coordinator_log(dir.path())
    );
    let before = ledger_jobs(&run_dir);
    resume(dir.path(), &cluster, &jobs, &run_dir);
    all_passed(&stored(&jobs, &run_dir));
    // A time limit is each trial's: no array task ran another's trial after its own.
    let index: BTreeMap<(String, u64), usize> = submissions(&run_dir)
        .unwrap()
        .into_iter()
        .flat_map(|s| {
            s.trials
                .into_iter()
                .map(move |t| ((t.trial_name, s.job), s.index))
        })
        .collect();
    for w in worker_results(&run_dir) {
        let own: Vec<usize> = index
            .iter()
            .filter(|((trial, _), _)| *trial == w.row.trial_name)
            .map(|(_, i)| *i)
            .collect();
        assert!(
            w.array_task.is_some_and(|t| own.contains(&t)),
            "{} ran in task {:?}, its own are {own:?}",
            w.row.trial_name,
            w.array_task
        );
    }
    let all = ledger_jobs(&run_dir);
    assert!(all.len() > before.len(), "the resume submitted nothing");
    let seen = cluster.squeue(&all, "%F|%P|%l|%k|%y");
    let jobs_seen: BTreeSet<&str> = seen.lines().map(|l| l.split('|').next().unwrap()).collect();
    assert_eq!(jobs_seen.len(), all.len(), "{seen}");
    for line in seen.lines() {
        let fields: Vec<&str> = line.split('|').collect();
        assert_eq!(&fields[1..], ["other", "20:00", "geode-e2e", "7"], "{line}");
    }
}

#[test]
fn slurm_a_stalled_controller_is_waited_out() {
    let cluster = Cluster::start(2);
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs");
    let run = spawn_with(dir.path(), &cluster, &jobs, &["-n", "4"]);
    let run_dir = only_run(&jobs);
    wait(|| results_so_far(&run_dir) >= 2);
    cluster.stall_controller(Duration::from_secs(30));
    let out = run.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", coordinator_log(dir.path()));
    all_passed(&stored(&jobs, &run_dir));
}

#[test]
fn slurm_a_controller_stalled_past_the_deadline_ends_the_run_saying_so() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs");
    let run = spawn_with(
        dir.path(),
        &cluster,
        &jobs,
        &["-n", "2", "--slurm-stall-timeout", "10"],
    );
    let run_dir = only_run(&jobs);
    wait(|| results_so_far(&run_dir) >= 1);
    // The run gives up while the controller is still stopped: the deadline is the run's, not
    // the stall's.
    let out = std::thread::scope(|s| {
        s.spawn(|| cluster.stall_controller(Duration::from_secs(60)));
        run.wait_with_output().unwrap()
    });
    let log = coordinator_log(dir.path());
    assert_eq!(out.status.code(), Some(1), "{log}");
    assert!(
        log.contains("did not answer for"),
        "the run ended without naming the stall: {log}"
    );
}

/// The coordinator stopped by `signal` mid-run (with no retry budget): its arrays leave the
/// queue, the trials it did not finish are not recorded, and a resume runs every one of them.
fn interrupted_then_resumed(signal: Signal) {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs");
    let run = spawn_with(
        dir.path(),
        &cluster,
        &jobs,
        &["-n", "2", "--max-infra-retries", "0"],
    );
    let run_dir = only_run(&jobs);
    wait(|| results_so_far(&run_dir) >= 2);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(run.id() as i32), signal).unwrap();
    let out = run.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        coordinator_log(dir.path())
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["cancelled"], true);
    let live = cluster.squeue(&ledger_jobs(&run_dir), "%T");
    assert!(
        live.lines()
            .all(|s| !["PENDING", "RUNNING", "CONFIGURING"].contains(&s.trim())),
        "array tasks left in the queue: {live}"
    );
    let finished = stored(&jobs, &run_dir);
    assert!((2..28).contains(&finished.len()), "{finished:?}");
    for (name, t) in &finished {
        assert_eq!(t.0, "passed", "{name} recorded as {t:?}");
    }
    resume(dir.path(), &cluster, &jobs, &run_dir);
    all_passed(&stored(&jobs, &run_dir));
}

#[test]
fn slurm_sigterm_cancels_the_arrays_and_a_resume_runs_the_rest() {
    interrupted_then_resumed(Signal::SIGTERM);
}

#[test]
fn slurm_ctrl_c_then_a_resume_without_retries_runs_every_trial_never_run() {
    interrupted_then_resumed(Signal::SIGINT);
}

/// The pid of a running process whose command line holds every one of `parts`.
fn process_with(parts: &[&str]) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let cmdline = String::from_utf8_lossy(&cmdline);
        parts.iter().all(|p| cmdline.contains(p)).then_some(pid)
    })
}

/// Whether `pid` is in the `cgroup.procs` of `dir` or of a group below it.
fn holds(dir: &Path, pid: u32) -> bool {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.file_name() == "cgroup.procs")
        .any(|e| {
            std::fs::read_to_string(e.path())
                .unwrap_or_default()
                .lines()
                .any(|l| l.trim() == pid.to_string())
        })
}

#[test]
fn slurm_a_trials_sandbox_runs_in_its_array_tasks_cgroup() {
    let cluster = Cluster::start_in_cgroups(1);
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("pack/slow");
    super::common::copy_tree(&core_pack().join("bank-reconcile"), &task);
    let solve = task.join("solution/solve.sh");
    let mut text = std::fs::read_to_string(&solve).unwrap();
    // Long enough to be looked at while it runs.
    text.push_str("\nsleep 20\n");
    std::fs::write(&solve, text).unwrap();
    let jobs = dir.path().join("jobs");
    let log = std::fs::File::create(dir.path().join("coordinator.log")).unwrap();
    let run = geode(dir.path(), &cluster)
        .arg("run")
        .arg(dir.path().join("pack"))
        .args([
            "--model",
            "oracle",
            "--json",
            "--executor",
            "slurm",
            "--jobs-dir",
        ])
        .arg(&jobs)
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let run_dir = only_run(&jobs);
    let run_path = run_dir.display().to_string();
    let mut server = None;
    // Once it has joined its sandbox's own memory group (it starts in its parent's).
    wait(|| {
        server = process_with(&["__sandbox-server", &run_path]);
        server.is_some_and(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|c| {
                c.lines()
                    .any(|l| l.contains(":memory:") && l.contains("/geode/"))
            })
        })
    });
    let server = server.unwrap();
    let array = ledger_jobs(&run_dir)[0];
    // The array task's own job id (an array's tasks each have one), as Slurm names its cgroup.
    let task_job = cluster.squeue(&[array], "%A").trim().to_string();
    let job_group = walkdir::WalkDir::new("/sys/fs/cgroup/memory")
        .max_depth(4)
        .into_iter()
        .flatten()
        .find(|e| e.file_name().to_string_lossy() == format!("job_{task_job}"))
        .map(|e| e.into_path())
        .unwrap_or_else(|| panic!("Slurm made no memory cgroup for job {task_job}"));
    let own = std::fs::read_to_string(format!("/proc/{server}/cgroup")).unwrap();
    assert!(
        holds(&job_group, server),
        "the sandbox server {server} is outside {}: {own}",
        job_group.display()
    );
    let out = run.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", coordinator_log(dir.path()));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["summary"]["outcomes"]["passed"], 1, "{summary}");
}
