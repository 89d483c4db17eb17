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
pub(super) fn harbor_python() -> PathBuf {
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

pub(super) fn harbor_check(
    python: &Path,
    pack: &Path,
    jobs: &Path,
    more: &[&str],
) -> (bool, String) {
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
pub(super) fn counted(report: &str, model: &str) -> (usize, usize) {
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
    let broken = d.path().join("broken");
    let (trial, broken_run) = infrastructure_run(d.path(), &pack, &broken, &jobs);
    scripted_run_with_a_bare_string_input(d.path(), &broken, &jobs);

    let (ok, report) = harbor_check(&python, &pack, &jobs, &["--view"]);
    println!("{report}");
    assert!(ok, "{report}");
    assert!(
        report.contains("harbor view: 3 runs, 7 trials with their rewards, 7 trajectories shown"),
        "{report}"
    );
    assert_eq!(counted(&report, "TaskConfig"), (28, 28));
    assert_eq!(counted(&report, "JobConfig"), (3, 3));
    assert_eq!(counted(&report, "JobLock"), (3, 3));
    assert_eq!(counted(&report, "JobResult"), (3, 3));
    assert_eq!(counted(&report, "TrialResult"), (7, 7));
    assert_eq!(counted(&report, "TrialLock"), (7, 7));
    let (valid, all) = counted(&report, "Trajectory");
    assert!(all >= 5 && valid == all, "{report}");

    assert_harbor_reads_what_geode_recorded(&python, &broken_run);
    assert_the_check_rejects_a_result_without_trial_uri(&python, &pack, &jobs, &broken_run, &trial);
}

/// A second run whose one trial ends in infrastructure (the verifier writes no reward), so an
/// `exception_info` and an errored trial are in what Harbor reads. Returns that trial's result
/// and the run folder.
fn infrastructure_run(
    dir: &Path,
    pack: &Path,
    broken: &Path,
    jobs: &Path,
) -> (serde_json::Value, PathBuf) {
    let task = broken.join("cron-next");
    super::common::copy_tree(&pack.join("cron-next"), &task);
    std::fs::write(task.join("tests/test.sh"), "#!/bin/sh\nexit 0\n").unwrap();
    // Its one trial ends without a verdict: the run measured nothing (exit 8). The agent does
    // nothing (nop): after an agent that acted, a verifier's failure would be its own.
    let (_, broken_run) = super::common::run_model_ending(
        super::common::geode_in(dir),
        broken,
        jobs,
        "nop",
        &["-k", "1"],
        8,
    );
    let trial = super::common::trial_result(&broken_run, "geode-cron-next__0");
    assert_eq!(trial["outcome"], "reward_missing", "{trial}");
    assert_eq!(
        trial["exception_info"]["exception_type"], "RewardFileNotFoundError",
        "{trial}"
    );
    (trial, broken_run)
}

/// A third run whose model calls a tool with arguments that are not a JSON object (a bare
/// string): ATIF wants an object, so the trajectory keeps it under `raw`.
fn scripted_run_with_a_bare_string_input(dir: &Path, broken: &Path, jobs: &Path) {
    let script = dir.join("script.toml");
    std::fs::write(
        &script,
        "[[turns]]\ntext = \"Listing.\"\n[[turns.tool_calls]]\nname = \"bash\"\n\
         input = \"ls -la\"\n[[turns]]\ntext = \"Done.\"\n",
    )
    .unwrap();
    // The broken task writes no reward: this run, too, measures nothing (exit 8).
    let (_, scripted_run) = super::common::run_model_ending(
        super::common::geode_in(dir),
        broken,
        jobs,
        &format!("scripted:{}", script.display()),
        &["-k", "1"],
        8,
    );
    let trajectory =
        std::fs::read_to_string(scripted_run.join("geode-cron-next__0/agent/trajectory.json"))
            .unwrap();
    assert!(trajectory.contains("\"raw\": \"ls -la\""), "{trajectory}");
}

/// What Harbor reads is what GEODE recorded: the job's counts, its rewards by value, the
/// errored trial's exception class.
fn assert_harbor_reads_what_geode_recorded(python: &Path, broken_run: &Path) {
    let job: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(broken_run.join("result.json")).unwrap())
            .unwrap();
    let read = Command::new(python)
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
            "{} 1 1 1 geode__nop__broken ['RewardFileNotFoundError']",
            job["id"].as_str().unwrap()
        )
    );
}

/// The check can fail: a trial result without Harbor's `trial_uri` is rejected, by name.
fn assert_the_check_rejects_a_result_without_trial_uri(
    python: &Path,
    pack: &Path,
    jobs: &Path,
    broken_run: &Path,
    trial: &serde_json::Value,
) {
    let mut cut = trial.clone();
    cut.as_object_mut().unwrap().remove("trial_uri");
    std::fs::write(
        broken_run.join("geode-cron-next__0/result.json"),
        cut.to_string(),
    )
    .unwrap();
    let (ok, report) = harbor_check(python, pack, jobs, &[]);
    assert!(!ok, "{report}");
    assert_eq!(counted(&report, "TrialResult"), (6, 7));
    assert!(
        report.contains("REJECTED") && report.contains("geode-cron-next__0/result.json"),
        "{report}"
    );
}

/// A task folder under `pack` from debian:bookworm-slim whose oracle writes /app/out.txt.
fn small_task(pack: &Path, name: &str, toml: &str, test_sh: &str) {
    write_files(
        &pack.join(name),
        &[
            ("task.toml", toml),
            ("instruction.md", "Write hi to /app/out.txt.\n"),
            (
                "environment/Dockerfile",
                "FROM debian:bookworm-slim\nWORKDIR /app\n",
            ),
            ("solution/solve.sh", "#!/bin/sh\necho hi > /app/out.txt\n"),
            ("tests/test.sh", test_sh),
        ],
    );
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
            .contains("verifier.collect[1]: no service \"db\" in this trial; not run")),
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

/// Writes `files` (path, text) under `dir`.
fn write_files(dir: &Path, files: &[(&str, &str)]) {
    for (path, text) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

/// A test script that writes reward 1 when `cond` (a shell test) holds, else 0.
fn reward_if(cond: &str) -> String {
    format!("#!/bin/sh\nif {cond}; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n")
}

/// Harbor's multi-step shape, written from its documentation: `[[steps]]` in task.toml, and per
/// step `steps/<name>/instruction.md`, `solution/solve.sh` and (or the task's) `tests/test.sh`.
fn multi_step_task(pack: &Path, name: &str, toml: &str, step_two_passes: bool) {
    let dir = pack.join(name);
    let second = if step_two_passes { "two" } else { "three" };
    write_files(
        &dir,
        &[
            ("task.toml", toml),
            (
                "environment/Dockerfile",
                "FROM debian:bookworm-slim\nWORKDIR /app\n",
            ),
            ("steps/write/instruction.md", "Write one to /app/a.txt.\n"),
            (
                "steps/write/solution/solve.sh",
                "#!/bin/sh\necho one > /app/a.txt\n",
            ),
            (
                "steps/write/tests/test.sh",
                &reward_if("[ \"$(cat /app/a.txt)\" = one ]"),
            ),
            ("steps/append/instruction.md", "Append two to /app/a.txt.\n"),
            // Staged into the work directory before the step's agent, then run there.
            ("steps/append/workdir/extra.txt", "x\n"),
            ("steps/append/workdir/setup.sh", "touch /app/setup-ran\n"),
            (
                "steps/append/solution/solve.sh",
                &format!("#!/bin/sh\necho {second} >> /app/a.txt\n"),
            ),
            // The second step has no tests of its own: the task's run, and they see what the
            // first step left in the same environment.
            (
                "tests/test.sh",
                &reward_if(
                    "[ \"$(cat /app/a.txt | tr '\\n' ' ')\" = 'one two ' ] \
                     && [ -f /app/setup-ran ] && [ -f /app/extra.txt ]",
                ),
            ),
        ],
    );
}

#[test]
fn multi_step_tasks_run_their_steps_in_one_environment_and_harbor_reads_the_result() {
    let python = harbor_python();
    let d = tempfile::tempdir().unwrap();
    let pack = d.path().join("pack");
    multi_step_pack(&pack);
    let jobs = d.path().join("jobs");
    let (_, run) = super::common::run_oracle_with(
        super::common::geode_in(d.path()),
        &pack,
        &jobs,
        &["-k", "1"],
    );
    assert_a_step_that_cannot_start_is_infrastructure(&run);
    assert_step_rewards_combine_and_gate(&run);
    assert_show_lists_the_steps(d.path(), &run);
    assert_harbor_reads_the_steps(&python, &pack, &jobs, &run);
}

/// Five multi-step tasks: both steps pass, the second fails, only the final step counts, the
/// first step's min_reward stops the rest, and the second step's setup fails.
fn multi_step_pack(pack: &Path) {
    let steps = "[[steps]]\nname = \"write\"\nmin_reward = 1.0\n\n[[steps]]\nname = \"append\"\n";
    multi_step_task(pack, "both", steps, true);
    multi_step_task(pack, "second-fails", steps, false);
    multi_step_task(
        pack,
        "final-only",
        &format!("multi_step_reward_strategy = \"final\"\n{steps}"),
        false,
    );
    // The first step's verifier fails and min_reward stops the rest.
    multi_step_task(pack, "gated", steps, true);
    std::fs::write(
        pack.join("gated/steps/write/tests/test.sh"),
        "#!/bin/sh\necho 0 > /logs/verifier/reward.txt\n",
    )
    .unwrap();
    // The second step cannot start: the trial is infrastructure, not a pass on step one alone.
    multi_step_task(pack, "setup-fails", steps, true);
    std::fs::write(
        pack.join("setup-fails/steps/append/workdir/setup.sh"),
        "echo no >&2; exit 3\n",
    )
    .unwrap();
}

/// The second step cannot start: the trial is infrastructure, not a pass on step one alone.
fn assert_a_step_that_cannot_start_is_infrastructure(run: &Path) {
    let broken = super::common::trial_result(run, "setup-fails__0");
    assert_eq!(broken["outcome"], "environment_setup_failed", "{broken}");
    assert_eq!(broken["exception_info"]["exception_type"], "StepSetupError");
    assert!(
        broken["exception_info"]["exception_message"]
            .as_str()
            .unwrap()
            .contains("step append: setup.sh exited Some(3): no"),
        "{broken}"
    );
}

/// Each step's reward is recorded, and the task's reward combines them (mean, or the final
/// step's) unless a step under its min_reward stops the rest.
fn assert_step_rewards_combine_and_gate(run: &Path) {
    let result = |name: &str| super::common::trial_result(run, &format!("{name}__0"));
    let step_rewards = |r: &serde_json::Value| -> Vec<(String, Option<f64>)> {
        r["step_results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["step_name"].as_str().unwrap().to_string(),
                    s["verifier_result"]["rewards"]["reward"].as_f64(),
                )
            })
            .collect()
    };
    let both = result("both");
    assert_eq!(both["outcome"], "passed", "{both}");
    assert_eq!(
        step_rewards(&both),
        [("write".into(), Some(1.0)), ("append".into(), Some(1.0))]
    );
    for step in ["write", "append"] {
        let dir = run.join("both__0/steps").join(step);
        assert!(dir.join("agent/trajectory.json").is_file(), "{step}");
        assert!(dir.join("verifier/reward.txt").is_file(), "{step}");
    }
    assert!(!run.join("both__0/.step-tests").exists());
    // Mean over the steps: 1 and 0.
    let second = result("second-fails");
    assert_eq!(second["verifier_result"]["rewards"]["reward"], 0.5);
    assert_eq!(second["outcome"], "failed");
    // The final step's rewards only.
    let last = result("final-only");
    assert_eq!(last["verifier_result"]["rewards"]["reward"], 0.0);
    let gated = result("gated");
    assert_eq!(step_rewards(&gated), [("write".into(), Some(0.0))]);
    assert_eq!(gated["outcome"], "failed");
    assert!(
        gated["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("below its min_reward")),
        "{gated}"
    );
}

/// geode show: one line per step, then the step's checks.
fn assert_show_lists_the_steps(dir: &Path, run: &Path) {
    let out = super::common::geode_in(dir)
        .args(["show"])
        .arg(run.join("second-fails__0"))
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("step write: passed (reward 1.0)"), "{shown}");
    assert!(
        shown.contains("step append: failed (reward 0.0)"),
        "{shown}"
    );
}

/// Harbor's own models read the task.toml files and the trial results with step_results.
fn assert_harbor_reads_the_steps(python: &Path, pack: &Path, jobs: &Path, run: &Path) {
    let (ok, report) = harbor_check(python, pack, jobs, &[]);
    println!("{report}");
    assert!(ok, "{report}");
    assert_eq!(counted(&report, "TaskConfig"), (5, 5));
    assert_eq!(counted(&report, "TrialResult"), (5, 5));
    let read = Command::new(python)
        .args([
            "-c",
            "import json, sys\n\
             from harbor.models.trial.result import TrialResult\n\
             t = TrialResult.model_validate(json.load(open(sys.argv[1])))\n\
             print([(s.step_name, s.verifier_result.rewards) for s in t.step_results])",
        ])
        .arg(run.join("second-fails__0/result.json"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&read.stdout).trim(),
        "[('write', {'reward': 1.0}), ('append', {'reward': 0.0})]"
    );
}
