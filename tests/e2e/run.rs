//! `geode run` end to end: the built-in pack in sandboxes, a Harbor-style task with real
//! package installs, and a run killed with SIGKILL then resumed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use geode_harness::store::RunStore;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn geode(args: &[&str]) -> Command {
    let mut c = super::common::geode_bin();
    c.args(args).current_dir(repo()).env_remove("GEODE_MODEL");
    c
}

fn run_json(args: &[&str]) -> serde_json::Value {
    let out: Output = geode(args).arg("--json").output().unwrap();
    assert!(
        out.status.success(),
        "geode {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn per_task(summary: &serde_json::Value) -> Vec<(String, f64)> {
    summary["per_task"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["task_id"].as_str().unwrap().to_string(),
                t["mean_reward"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn the_oracle_passes_every_built_in_task_and_nop_fails_every_one() {
    let jobs = tempfile::tempdir().unwrap();
    let jobs_dir = jobs.path().to_str().unwrap();
    let oracle = run_json(&[
        "run",
        "tasks/geode-core",
        "--model",
        "oracle",
        "-k",
        "2",
        "-n",
        "2",
        "--jobs-dir",
        jobs_dir,
    ]);
    let s = &oracle["summary"];
    assert!(s["tasks"].as_u64().unwrap() >= 24);
    assert_eq!(s["trials"], s["tasks"].as_u64().unwrap() * 2);
    let failing: Vec<_> = per_task(s).into_iter().filter(|(_, r)| *r < 1.0).collect();
    assert!(failing.is_empty(), "the oracle failed: {failing:?}");
    // Every trial passed, none lost to infrastructure (which the per-task means leave out):
    // on a mismatch, which trials and why.
    let run_dir = PathBuf::from(oracle["run_dir"].as_str().unwrap());
    let not_passed: Vec<String> = std::fs::read_dir(&run_dir)
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("result.json")).ok())
        .filter_map(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .filter(|r| r["outcome"] != "passed")
        .map(|r| {
            format!(
                "{} {} {}",
                r["trial_name"], r["outcome"], r["exception_info"]
            )
        })
        .collect();
    assert_eq!(
        s["outcomes"]["passed"],
        s["trials"],
        "{:?}\n{}",
        s["outcomes"],
        not_passed.join("\n")
    );

    let nop = run_json(&[
        "run",
        "tasks/geode-core",
        "--model",
        "nop",
        "-n",
        "2",
        "--jobs-dir",
        jobs_dir,
    ]);
    let passing: Vec<_> = per_task(&nop["summary"])
        .into_iter()
        .filter(|(_, r)| *r > 0.0)
        .collect();
    assert!(passing.is_empty(), "nop passed: {passing:?}");
    assert_eq!(
        nop["summary"]["outcomes"]["failed"],
        nop["summary"]["trials"]
    );

    // Harbor's layout is there for people's tooling.
    for f in ["config.json", "lock.json", "result.json"] {
        assert!(run_dir.join(f).is_file(), "{f}");
    }
    let trial = run_dir.join("geode-git-merge-conflict__1");
    let traj: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(trial.join("agent/trajectory.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(traj["schema_version"], "ATIF-v1.7");
    assert_eq!(traj["steps"][1]["tool_calls"][0]["function_name"], "bash");
    assert!(traj["steps"][1]["observation"]["results"][0]["content"].is_string());
    assert_eq!(
        std::fs::read_to_string(trial.join("verifier/reward.txt"))
            .unwrap()
            .trim(),
        "1"
    );
    assert!(trial.join("verifier/test-stdout.txt").is_file());

    // `geode compare` and `geode report` run geode-report (built next to geode by
    // `cargo test --workspace`) on the same store.
    let (oracle_id, nop_id) = (
        oracle["run_id"].as_str().unwrap(),
        nop["run_id"].as_str().unwrap(),
    );
    let compare = geode(&["compare", oracle_id, nop_id, "--format", "md"])
        .args(["--jobs-dir", jobs_dir])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&compare.stdout);
    assert!(
        compare.status.success(),
        "geode compare: {}",
        String::from_utf8_lossy(&compare.stderr)
    );
    assert!(text.contains("| baseline mean | 1.000 |"), "{text}");
    assert!(text.contains("| candidate mean | 0.000 |"), "{text}");
    assert!(text.contains("| delta | -1.000 |"), "{text}");
    let csv = jobs.path().join("trials.csv");
    let report = geode(&["report", oracle_id, "--format", "csv", "--out"])
        .arg(&csv)
        .args(["--jobs-dir", jobs_dir])
        .output()
        .unwrap();
    assert!(
        report.status.success(),
        "geode report: {}",
        String::from_utf8_lossy(&report.stderr)
    );
    let rows = std::fs::read_to_string(&csv).unwrap().lines().count();
    assert_eq!(rows as u64, 1 + s["trials"].as_u64().unwrap());
}

#[test]
fn an_unknown_subcommand_runs_geode_name_from_path_with_its_arguments_and_exit_code() {
    use std::os::unix::fs::PermissionsExt;
    let bin = tempfile::tempdir().unwrap();
    let script = bin.path().join("geode-echo-args");
    std::fs::write(&script, "#!/bin/sh\nprintf '%s|' \"$@\"\nexit 7\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = geode(&["echo-args", "--flag", "x y"])
        .env("PATH", &path)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "--flag|x y|");
    assert_eq!(out.status.code(), Some(7));

    let missing = geode(&["no-such-thing"])
        .env("PATH", &path)
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("geode-no-such-thing"));
}

#[test]
fn a_harbor_style_task_builds_with_real_installs_and_reuses_its_layer() {
    let jobs = tempfile::tempdir().unwrap();
    let jobs_dir = jobs.path().to_str().unwrap();
    // The image store outlives the test (the base is bootstrapped once per machine), so its
    // layers of this fixture may be there from an earlier run: a last step of this run's own
    // makes the first build really build, and the earlier steps come from the cache.
    let copy = jobs.path().join("harbor-python-task");
    super::common::copy_tree(&repo().join("tests/e2e/fixtures/harbor-python-task"), &copy);
    let dockerfile = copy.join("environment/Dockerfile");
    let mut text = std::fs::read_to_string(&dockerfile).unwrap();
    text.push_str(&format!("RUN echo {} > /.nonce\n", uuid::Uuid::new_v4()));
    std::fs::write(&dockerfile, text).unwrap();
    let fixture = copy.to_str().unwrap();
    let first = run_json(&[
        "run",
        fixture,
        "--model",
        "oracle",
        "-k",
        "2",
        "--jobs-dir",
        jobs_dir,
    ]);
    assert_eq!(
        first["summary"]["outcomes"]["passed"],
        2,
        "{first}\n{}",
        not_passed(jobs.path(), first["run_id"].as_str().unwrap_or_default())
    );
    let second = run_json(&["run", fixture, "--model", "oracle", "--jobs-dir", jobs_dir]);
    assert_eq!(
        second["summary"]["outcomes"]["passed"],
        1,
        "{second}\n{}",
        not_passed(jobs.path(), second["run_id"].as_str().unwrap_or_default())
    );

    let result = |run: &serde_json::Value, trial: &str| -> serde_json::Value {
        let p = Path::new(run["run_dir"].as_str().unwrap())
            .join(trial)
            .join("result.json");
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    let built = result(&first, "fixtures-sales-report__0");
    let cached = result(&second, "fixtures-sales-report__0");
    assert_eq!(built["image"]["cache_hit"], false);
    assert_eq!(cached["image"]["cache_hit"], true);
    let setup = |r: &serde_json::Value| r["phase_seconds"]["environment_setup"].as_f64().unwrap();
    eprintln!(
        "image build: first {:.2}s (environment set-up {:.2}s), cached set-up {:.3}s, same-run second trial {:.3}s",
        built["image"]["build_seconds"].as_f64().unwrap(),
        setup(&built),
        setup(&cached),
        setup(&result(&first, "fixtures-sales-report__1"))
    );
    assert!(setup(&cached) < setup(&built));
    // The pytest verifier's CTRF report and the reward are in the trial folder.
    let ctrf = Path::new(first["run_dir"].as_str().unwrap())
        .join("fixtures-sales-report__0/verifier/ctrf.json");
    let ctrf: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ctrf).unwrap()).unwrap();
    assert_eq!(ctrf["results"]["summary"]["passed"], 4);
}

fn trial_results(jobs: &Path, run_id: &str) -> Vec<(String, String, Option<f64>, u64)> {
    let store = RunStore::open(&jobs.join("geode.db")).unwrap();
    store
        .trials(run_id)
        .unwrap()
        .into_iter()
        .map(|t| (t.trial_name, t.outcome.to_string(), t.reward, t.seed))
        .collect()
}

/// Each trial of a run that did not pass, with the exception its result.json names.
fn not_passed(jobs: &Path, run_id: &str) -> String {
    trial_results(jobs, run_id)
        .into_iter()
        .filter(|(_, outcome, _, _)| outcome != "passed")
        .map(|(trial, outcome, _, _)| {
            let result =
                std::fs::read_to_string(jobs.join(run_id).join(&trial).join("result.json"))
                    .unwrap_or_default();
            let exception = serde_json::from_str::<serde_json::Value>(&result)
                .map(|r| format!("{} {}", r["exception_info"], r["integrity"]))
                .unwrap_or_default();
            // What the verifier printed, its last lines: why a reward was 0.
            let stdout = std::fs::read_to_string(
                jobs.join(run_id)
                    .join(&trial)
                    .join("verifier/test-stdout.txt"),
            )
            .unwrap_or_default();
            let tail: Vec<&str> = stdout.lines().rev().take(30).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            format!(
                "{}/{trial}: {outcome} {exception}\nverifier output:\n{}\n",
                jobs.display(),
                tail.join("\n")
            )
        })
        .collect()
}

#[test]
fn a_run_killed_midway_resumes_to_the_same_results() {
    let args = [
        "run",
        "tasks/geode-core",
        "--model",
        "oracle",
        "--tasks",
        "geode/log-*",
        "-k",
        "3",
        "--seed",
        "11",
    ];
    let reference = tempfile::tempdir().unwrap();
    let full = run_json(
        &[
            &args[..],
            &["--jobs-dir", reference.path().to_str().unwrap()],
        ]
        .concat(),
    );
    let expected = trial_results(reference.path(), full["run_id"].as_str().unwrap());
    assert_eq!(expected.len(), 9);

    let jobs = tempfile::tempdir().unwrap();
    let mut child = geode(&[&args[..], &["--jobs-dir", jobs.path().to_str().unwrap()]].concat())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let db = jobs.path().join("geode.db");
    let started = Instant::now();
    let run_id = loop {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the run never got going"
        );
        std::thread::sleep(Duration::from_millis(50));
        let Some(run) = std::fs::read_dir(jobs.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|n| n.starts_with("20"))
        else {
            continue;
        };
        if db.exists() && RunStore::open(&db).unwrap().trials(&run).unwrap().len() >= 3 {
            break run;
        }
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();
    let before = trial_results(jobs.path(), &run_id).len();
    assert!((3..9).contains(&before), "killed after {before} trials");
    // What a killed harness leaves: the scratch folders of its running trials (their processes
    // die with the server's pipes). One more stands in for a run killed at a worse moment.
    let scratch = geode_harness::home::scratch_dir(jobs.path()).join("sandboxes");
    assert!(scratch.is_dir(), "{}", scratch.display());
    let stale = scratch.join("0123456789abcdef0123456789abcdef");
    std::fs::create_dir_all(stale.join("upper/app")).unwrap();
    std::fs::write(stale.join("lock"), "").unwrap();
    std::fs::write(stale.join("upper/app/left.txt"), "x").unwrap();

    let resumed = run_json(&[
        "run",
        "--resume",
        &run_id,
        "--jobs-dir",
        jobs.path().to_str().unwrap(),
    ]);
    assert_eq!(resumed["run_id"], run_id.as_str());
    let got = trial_results(jobs.path(), &run_id);
    assert_eq!(
        got,
        expected,
        "resumed results differ from an uninterrupted run; trials that did not pass:\n{}{}",
        not_passed(reference.path(), full["run_id"].as_str().unwrap()),
        not_passed(jobs.path(), &run_id)
    );
    assert_eq!(resumed["summary"]["trials"], 9, "no trial counted twice");
    let left: Vec<_> = std::fs::read_dir(&scratch).unwrap().flatten().collect();
    assert!(left.is_empty(), "scratch left behind: {left:?}");
    // Harbor's viewer lists every folder of the jobs folder as a job: only runs are there.
    for entry in std::fs::read_dir(jobs.path()).unwrap().flatten() {
        if entry.path().is_dir() {
            assert!(
                entry.path().join("config.json").is_file(),
                "not a run: {}",
                entry.path().display()
            );
        }
    }
}

#[test]
fn resume_refuses_a_changed_pack() {
    let pack = tempfile::tempdir().unwrap();
    let src = repo().join("tasks/geode-core/largest-files");
    let dst = pack.path().join("largest-files");
    assert!(
        Command::new("cp")
            .arg("-r")
            .arg(&src)
            .arg(&dst)
            .status()
            .unwrap()
            .success()
    );
    let jobs = tempfile::tempdir().unwrap();
    let jobs_dir = jobs.path().to_str().unwrap();
    let first = run_json(&[
        "run",
        pack.path().to_str().unwrap(),
        "--model",
        "nop",
        "--jobs-dir",
        jobs_dir,
    ]);
    std::fs::write(dst.join("instruction.md"), "changed\n").unwrap();
    let out = geode(&[
        "run",
        "--resume",
        first["run_id"].as_str().unwrap(),
        "--jobs-dir",
        jobs_dir,
    ])
    .output()
    .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("pack hash"), "{err}");
}

#[test]
fn resume_reruns_only_the_trials_that_ended_in_a_named_exception_class() {
    let pack = tempfile::tempdir().unwrap();
    for task in ["cron-next", "largest-files"] {
        super::common::copy_tree(
            &repo().join("tasks/geode-core").join(task),
            &pack.path().join(task),
        );
    }
    // cron-next's verifier writes no reward: an infrastructure trial, RewardFileNotFoundError.
    std::fs::write(
        pack.path().join("cron-next/tests/test.sh"),
        "#!/bin/sh\nexit 0\n",
    )
    .unwrap();
    let jobs = tempfile::tempdir().unwrap();
    let jobs_dir = jobs.path().to_str().unwrap();
    let first = run_json(&[
        "run",
        pack.path().to_str().unwrap(),
        "--model",
        "oracle",
        "--jobs-dir",
        jobs_dir,
    ]);
    let run_id = first["run_id"].as_str().unwrap();
    let run_dir = jobs.path().join(run_id);
    let started = |trial: &str| {
        super::common::trial_result(&run_dir, trial)["started_at"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let broken = started("geode-cron-next__0");
    let good = started("geode-largest-files__0");
    let class = super::common::trial_result(&run_dir, "geode-cron-next__0")["exception_info"]
        ["exception_type"]
        .clone();
    assert_eq!(class, "RewardFileNotFoundError");

    // A plain resume has nothing to do; naming another class reruns nothing either.
    for rerun in [&[][..], &["--rerun", "SandboxError"][..]] {
        let mut args = vec!["run", "--resume", run_id, "--jobs-dir", jobs_dir];
        args.extend_from_slice(rerun);
        run_json(&args);
        assert_eq!(started("geode-cron-next__0"), broken, "{rerun:?}");
    }
    let again = run_json(&[
        "run",
        "--resume",
        run_id,
        "--jobs-dir",
        jobs_dir,
        "--rerun",
        "RewardFileNotFoundError",
    ]);
    assert_ne!(
        started("geode-cron-next__0"),
        broken,
        "the named class ran again"
    );
    assert_eq!(
        started("geode-largest-files__0"),
        good,
        "the passed trial was kept"
    );
    assert_eq!(again["summary"]["trials"], 2, "the rerun replaced its row");
    assert_eq!(trial_results(jobs.path(), run_id).len(), 2);

    let out = geode(&["run", "--rerun", "X", "--jobs-dir", jobs_dir])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--resume"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `geode grade RUN --grader rubric:rubric.toml` run in `dir`; its standard output.
fn grade_with_rubric(dir: &Path, run_id: &str, jobs: &Path) -> String {
    let out = super::common::geode_bin()
        .current_dir(dir)
        .args([
            "grade",
            run_id,
            "--grader",
            "rubric:rubric.toml",
            "--jobs-dir",
        ])
        .arg(jobs)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// Re-grades are named by what the grader is: two rubrics both typed `rubric.toml` (from two
/// folders) keep separate results, re-grading with the same one replaces its own, and all of it
/// reaches the run store, where reports read it.
#[test]
fn regrades_are_keyed_by_the_graders_content_and_stored() {
    let d = tempfile::tempdir().unwrap();
    let jobs = d.path().join("jobs");
    let pack = repo().join("tasks/geode-core");
    let (summary, run_dir) = super::common::run_oracle_with(
        geode(&[]),
        &pack,
        &jobs,
        &["--tasks", "geode/cron-next", "-k", "2"],
    );
    let run_id = summary["run_id"].as_str().unwrap().to_string();
    for (folder, pattern) in [("strict", "(?i)never-said"), ("lenient", ".")] {
        let dir = d.path().join(folder);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("rubric.toml"),
            format!(
                "[[criterion]]\nname = \"answers\"\nkind = \"regex_trajectory\"\npattern = \
                 \"{pattern}\"\n"
            ),
        )
        .unwrap();
    }
    let grade = |folder: &str| grade_with_rubric(&d.path().join(folder), &run_id, &jobs);
    let strict = grade("strict");
    let lenient = grade("lenient");
    assert!(strict.contains("mean 0.000"), "{strict}");
    assert!(lenient.contains("mean 1.000"), "{lenient}");
    grade("strict");

    let trial = std::fs::read_dir(&run_dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("result.json").is_file())
        .unwrap();
    let files: Vec<String> = std::fs::read_dir(trial.join("grades"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files.len(), 2, "one file per rubric content: {files:?}");
    assert!(files.iter().all(|f| f.starts_with("rubric-")), "{files:?}");

    let store = RunStore::open(&jobs.join("geode.db")).unwrap();
    let rows = store.grades(&run_id).unwrap();
    assert_eq!(
        rows.len(),
        2 * 2,
        "2 trials x 2 graders, the repeat replaced: {rows:?}"
    );
    let hashes: std::collections::BTreeSet<&str> =
        rows.iter().map(|r| r.grader_hash.as_str()).collect();
    assert_eq!(hashes.len(), 2);
    let rewards: std::collections::BTreeSet<String> =
        rows.iter().map(|r| format!("{:?}", r.reward)).collect();
    assert_eq!(
        rewards,
        ["Some(0.0)", "Some(1.0)"]
            .into_iter()
            .map(String::from)
            .collect()
    );
}

/// A rubric's command criteria run again on re-grade when the run kept its workspaces: each
/// trial's final `/app` is copied into a fresh sandbox of the task's image. Without a kept
/// workspace they are skipped (and a rubric of commands only then measures nothing).
#[test]
fn command_criteria_rerun_against_the_kept_workspace() {
    let d = tempfile::tempdir().unwrap();
    let jobs = d.path().join("jobs");
    let pack = repo().join("tasks/geode-core");
    std::fs::write(
        d.path().join("rubric.toml"),
        "[[criterion]]\nname = \"script written\"\nkind = \"command\"\n\
         command = \"test -s /app/cronnext.py\"\n\
         [[criterion]]\nname = \"no stray file\"\nkind = \"command\"\n\
         command = \"test -e /app/never-written\"\n",
    )
    .unwrap();
    let grade = |run_id: &str| grade_with_rubric(d.path(), run_id, &jobs);
    let (kept, kept_dir) = super::common::run_oracle_with(
        geode(&[]),
        &pack,
        &jobs,
        &["--tasks", "geode/cron-next", "-k", "2", "--keep-workspace"],
    );
    let trial = kept_dir.join("geode-cron-next__0");
    assert!(
        trial.join("workspace/cronnext.py").is_file(),
        "the final workspace is kept"
    );
    let out = grade(kept["run_id"].as_str().unwrap());
    assert!(out.contains("mean 0.500 over 2 graded"), "{out}");
    assert!(
        !trial.join(".regrade").exists(),
        "the scratch folder is removed"
    );

    let (plain, _) = super::common::run_oracle_with(
        geode(&[]),
        &pack,
        &jobs,
        &["--tasks", "geode/cron-next", "-k", "1"],
    );
    let out = grade(plain["run_id"].as_str().unwrap());
    assert!(
        out.contains("invalid"),
        "nothing measured without a workspace: {out}"
    );
}
