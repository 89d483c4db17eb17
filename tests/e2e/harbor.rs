//! Harbor's own pydantic models (harbor 0.25 from PyPI) over GEODE's files
//! (`scripts/harbor_check.py`): every `task.toml` of the built-in pack loads with `TaskConfig`;
//! every run folder's `config.json`, `lock.json` and `result.json` with `JobConfig`, `JobLock`
//! and `JobResult`; every trial's `result.json` with `TrialResult`; every
//! `agent/trajectory.json` with `Trajectory`; and `harbor view` serves the folder's runs, their
//! trials with the rewards GEODE recorded, and each trajectory. Harbor's job models need Python 3.12+ (`typing.
//! override`), so the models are installed, once per machine, into a virtual environment made
//! with the newest Python 3.12+ found, beside the test image store; PyPI must be reachable the
//! first time.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A Python 3.12 or newer: on `PATH` as `python3.N`, or one of pyenv's versions.
fn python_312_or_newer() -> PathBuf {
    let mut found: Vec<(u32, PathBuf)> = Vec::new();
    for minor in 12..=20u32 {
        let name = format!("python3.{minor}");
        if let Some(dir) = std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .find(|d| d.join(&name).is_file())
        {
            found.push((minor, dir.join(name)));
        }
    }
    let pyenv = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root/.pyenv"))
        .join("versions");
    for entry in std::fs::read_dir(&pyenv).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let minor = name.strip_prefix("3.").and_then(|r| r.split('.').next());
        if let Some(minor) = minor.and_then(|m| m.parse::<u32>().ok())
            && minor >= 12
            && entry.path().join("bin/python3").is_file()
        {
            found.push((minor, entry.path().join("bin/python3")));
        }
    }
    found.sort();
    match found.pop() {
        Some((_, python)) => python,
        None => panic!(
            "Harbor's JobResult and TrialResult need Python 3.12+: none found on PATH \
             (python3.12, python3.13, ...) or in {}",
            pyenv.display()
        ),
    }
}

/// The virtual environment with harbor installed, made under an exclusive lock so parallel
/// test binaries install it once.
fn harbor_python() -> PathBuf {
    let base = python_312_or_newer();
    let venv = super::registry::shared_store()
        .parent()
        .unwrap()
        .join("harbor-venv-312");
    let python = venv.join("bin/python");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(venv.with_extension("lock"))
        .unwrap();
    let _held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive).unwrap();
    let ready = |p: &Path| {
        Command::new(p)
            .args([
                "-c",
                "import harbor.models.task.config, harbor.models.trajectories, \
                 harbor.models.job.result, harbor.models.job.lock, harbor.models.trial.result",
            ])
            .status()
            .is_ok_and(|s| s.success())
    };
    if !ready(&python) {
        let _ = std::fs::remove_dir_all(&venv);
        let made = Command::new(&base)
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .unwrap();
        assert!(made.success(), "{} -m venv failed", base.display());
        let installed = Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "harbor==0.25.*"])
            .status()
            .unwrap();
        assert!(installed.success(), "pip install harbor failed");
        assert!(ready(&python), "harbor's models do not import");
    }
    python
}

fn harbor_check(python: &Path, pack: &Path, jobs: &Path, more: &[&str]) -> (bool, String) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(python)
        .arg(repo.join("scripts/harbor_check.py"))
        .arg(pack)
        .arg(jobs)
        .args(more)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A count line of harbor_check.py: `harbor MODEL: N of M valid` gives (N, M).
fn counted(report: &str, model: &str) -> (usize, usize) {
    let prefix = format!("harbor {model}: ");
    let line = report
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {model} line in\n{report}"));
    let words: Vec<&str> = line.split(' ').collect();
    (words[0].parse().unwrap(), words[2].parse().unwrap())
}

#[test]
fn harbor_models_accept_the_built_in_pack_our_jobs_trials_and_trajectories() {
    let python = harbor_python();
    let d = tempfile::tempdir().unwrap();
    let jobs = d.path().join("jobs");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let pack = repo.join("tasks/geode-core");
    super::common::run_oracle_with(
        super::common::geode_in(d.path()),
        &pack,
        &jobs,
        &["--tasks", "geode/c*", "-k", "1"],
    );
    // A second run whose one trial ends in infrastructure (the verifier writes no reward), so
    // an `exception_info` and an errored trial are in what Harbor reads.
    let broken = d.path().join("broken");
    let task = broken.join("cron-next");
    super::common::copy_tree(&pack.join("cron-next"), &task);
    std::fs::write(task.join("tests/test.sh"), "#!/bin/sh\nexit 0\n").unwrap();
    let (_, broken_run) = super::common::run_oracle_with(
        super::common::geode_in(d.path()),
        &broken,
        &jobs,
        &["-k", "1"],
    );
    let trial = super::common::trial_result(&broken_run, "geode-cron-next__0");
    assert_eq!(trial["outcome"], "reward_missing", "{trial}");
    assert_eq!(
        trial["exception_info"]["exception_type"], "RewardFileNotFoundError",
        "{trial}"
    );

    let (ok, report) = harbor_check(&python, &pack, &jobs, &["--view"]);
    println!("{report}");
    assert!(ok, "{report}");
    assert!(
        report.contains("harbor view: 2 runs, 6 trials with their rewards, 6 trajectories shown"),
        "{report}"
    );
    assert_eq!(counted(&report, "TaskConfig"), (28, 28));
    assert_eq!(counted(&report, "JobConfig"), (2, 2));
    assert_eq!(counted(&report, "JobLock"), (2, 2));
    assert_eq!(counted(&report, "JobResult"), (2, 2));
    assert_eq!(counted(&report, "TrialResult"), (6, 6));
    let (valid, all) = counted(&report, "Trajectory");
    assert!(all >= 5 && valid == all, "{report}");

    // What Harbor reads is what GEODE recorded: the job's counts, its rewards by value, the
    // errored trial's exception class.
    let job: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(broken_run.join("result.json")).unwrap())
            .unwrap();
    let read = Command::new(&python)
        .args([
            "-c",
            "import json, sys\n\
             from harbor.models.job.result import JobResult\n\
             j = JobResult.model_validate(json.load(open(sys.argv[1])))\n\
             (key, e), = j.stats.evals.items()\n\
             print(j.id, j.n_total_trials, j.stats.n_completed_trials, j.stats.n_errored_trials, \
                   key, sorted(e.exception_stats))",
        ])
        .arg(broken_run.join("result.json"))
        .output()
        .unwrap();
    let read = String::from_utf8_lossy(&read.stdout);
    assert_eq!(
        read.trim(),
        format!(
            "{} 1 1 1 geode__oracle__broken ['RewardFileNotFoundError']",
            job["id"].as_str().unwrap()
        )
    );

    // The check can fail: a trial result without Harbor's `trial_uri` is rejected, by name.
    let mut cut = trial.clone();
    cut.as_object_mut().unwrap().remove("trial_uri");
    std::fs::write(
        broken_run.join("geode-cron-next__0/result.json"),
        cut.to_string(),
    )
    .unwrap();
    let (ok, report) = harbor_check(&python, &pack, &jobs, &[]);
    assert!(!ok, "{report}");
    assert_eq!(counted(&report, "TrialResult"), (5, 6));
    assert!(
        report.contains("REJECTED") && report.contains("geode-cron-next__0/result.json"),
        "{report}"
    );
}

/// A task folder under `pack` from debian:bookworm-slim whose oracle writes /app/out.txt.
fn small_task(pack: &Path, name: &str, toml: &str, test_sh: &str) {
    let dir = pack.join(name);
    for sub in ["environment", "tests", "solution"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::write(dir.join("task.toml"), toml).unwrap();
    std::fs::write(dir.join("instruction.md"), "Write hi to /app/out.txt.\n").unwrap();
    std::fs::write(
        dir.join("environment/Dockerfile"),
        "FROM debian:bookworm-slim\nWORKDIR /app\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("solution/solve.sh"),
        "#!/bin/sh\necho hi > /app/out.txt\n",
    )
    .unwrap();
    std::fs::write(dir.join("tests/test.sh"), test_sh).unwrap();
}

#[test]
fn schema_1_4_healthchecks_collect_hooks_and_accelerators_behave_as_harbor_defines_them() {
    let d = tempfile::tempdir().unwrap();
    let pack = d.path().join("pack");
    // The verifier passes only if the collect hook ran after the agent and before it.
    let needs_snapshot = "#!/bin/sh\nif [ \"$(cat /tmp/snapshot.txt)\" = hi ]; then echo 1; \
                          else echo 0; fi > /logs/verifier/reward.txt\n";
    small_task(
        &pack,
        "healthy",
        "[environment.healthcheck]\ncommand = \"test -d /app\"\n\
         [[verifier.collect]]\ncommand = \"cp /app/out.txt /tmp/snapshot.txt\"\n\
         [[verifier.collect]]\ncommand = \"true\"\nservice = \"db\"\n",
        needs_snapshot,
    );
    small_task(
        &pack,
        "no-hook",
        "[environment.healthcheck]\ncommand = \"true\"\n",
        needs_snapshot,
    );
    small_task(
        &pack,
        "never-healthy",
        "[environment.healthcheck]\ncommand = \"test -f /ready\"\ninterval_sec = 0.2\n\
         start_period_sec = 0.5\nstart_interval_sec = 0.1\nretries = 2\n",
        "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n",
    );
    small_task(
        &pack,
        "gpu",
        "[environment]\ngpus = 1\ngpu_types = [\"H100\"]\n",
        "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n",
    );
    small_task(
        &pack,
        "windows",
        "[environment]\nos = \"windows\"\n",
        "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n",
    );
    let (_, run) = super::common::run_oracle_with(
        super::common::geode_in(d.path()),
        &pack,
        &d.path().join("jobs"),
        &["-k", "1"],
    );
    let result = |name: &str| super::common::trial_result(&run, &format!("{name}__0"));
    let healthy = result("healthy");
    assert_eq!(healthy["outcome"], "passed", "{healthy}");
    assert!(
        healthy["notes"].as_array().unwrap().iter().any(|n| n
            .as_str()
            .unwrap()
            .contains("verifier.collect[1]: service \"db\" not run")),
        "{healthy}"
    );
    assert_eq!(
        result("no-hook")["outcome"],
        "failed",
        "no hook, no snapshot"
    );
    let sick = result("never-healthy");
    assert_eq!(sick["outcome"], "environment_setup_failed", "{sick}");
    assert_eq!(sick["exception_info"]["exception_type"], "HealthcheckError");
    let message = sick["exception_info"]["exception_message"]
        .as_str()
        .unwrap();
    assert!(message.contains("failed 2 time(s) in a row"), "{message}");
    for (name, says) in [
        (
            "gpu",
            "environment.gpus = 1 (H100): GEODE's sandbox gives a trial no GPU",
        ),
        ("windows", "environment.os = \"windows\""),
    ] {
        let r = result(name);
        assert_eq!(r["outcome"], "environment_unsupported", "{r}");
        assert!(
            r["exception_info"]["exception_message"]
                .as_str()
                .unwrap()
                .contains(says),
            "{r}"
        );
    }
}
