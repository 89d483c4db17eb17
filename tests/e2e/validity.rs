//! Validity end to end: every infrastructure class from a real fault, and an agent that plants
//! its own reward still gets the verifier's reward plus an integrity flag.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use geode_graders::TrialOutcome;
use geode_harness::store::RunStore;

/// A minimal Harbor task whose verifier is `test_sh` (None: no tests/test.sh at all).
fn task(root: &Path, name: &str, test_sh: Option<&str>, verifier_timeout: u32) {
    let d = root.join(name);
    std::fs::create_dir_all(d.join("environment")).unwrap();
    std::fs::create_dir_all(d.join("tests")).unwrap();
    std::fs::create_dir_all(d.join("solution")).unwrap();
    std::fs::write(
        d.join("task.toml"),
        format!("[task]\nname = \"faults/{name}\"\n[verifier]\ntimeout_sec = {verifier_timeout}\n[environment]\nnetwork_mode = \"no-network\"\n"),
    )
    .unwrap();
    std::fs::write(d.join("instruction.md"), "Create /app/done.\n").unwrap();
    std::fs::write(
        d.join("environment/Dockerfile"),
        "FROM debian:bookworm-slim\nWORKDIR /app\n",
    )
    .unwrap();
    std::fs::write(d.join("solution/solve.sh"), "touch /app/done\n").unwrap();
    if let Some(t) = test_sh {
        std::fs::write(d.join("tests/test.sh"), t).unwrap();
    }
}

const HONEST: &str =
    "if [ -f /app/done ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n";

fn geode(dir: &Path, args: &[&str]) -> Output {
    super::common::geode_bin()
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn outcomes(jobs: &Path) -> Vec<(String, TrialOutcome, Option<f64>, u32)> {
    let store = RunStore::open(&jobs.join("geode.db")).unwrap();
    let run = std::fs::read_dir(jobs)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("20"))
        .unwrap();
    store
        .trials(&run)
        .unwrap()
        .into_iter()
        .map(|t| (t.task_id, t.outcome, t.reward, t.integrity.reward_tampering))
        .collect()
}

/// The faulty verifiers, one task each, and a healthy one.
fn faulty_pack(pack: &Path) {
    task(pack, "no-test-script", None, 30);
    task(
        pack,
        "slow-verifier",
        Some("sleep 30\necho 1 > /logs/verifier/reward.txt\n"),
        2,
    );
    task(pack, "no-reward", Some("echo 'ran, wrote nothing'\n"), 30);
    task(
        pack,
        "bad-reward",
        Some("echo yes > /logs/verifier/reward.txt\n"),
        30,
    );
    task(pack, "healthy", Some(HONEST), 30);
}

fn run_faults(dir: &Path, model: &str, jobs: &str) -> (Vec<(String, TrialOutcome)>, String) {
    let out = geode(
        dir,
        &[
            "run",
            "pack",
            "--model",
            model,
            "-n",
            "2",
            "--jobs-dir",
            jobs,
            "--max-infra-retries",
            "0",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = outcomes(&dir.join(jobs))
        .into_iter()
        .map(|(t, o, _, _)| (t, o))
        .collect();
    (got, String::from_utf8_lossy(&out.stdout).into_owned())
}

fn named(want: &[(&str, TrialOutcome)]) -> Vec<(String, TrialOutcome)> {
    want.iter().map(|(t, o)| (t.to_string(), *o)).collect()
}

/// An agent that did nothing (nop) meets each faulty verifier: each infrastructure class comes
/// from its real fault, and is excluded from the score.
#[test]
fn each_infrastructure_class_comes_from_a_real_fault() {
    let dir = tempfile::tempdir().unwrap();
    faulty_pack(&dir.path().join("pack"));
    let (got, summary) = run_faults(dir.path(), "nop", "jobs");
    let want = named(&[
        ("faults/bad-reward", TrialOutcome::RewardMalformed),
        ("faults/healthy", TrialOutcome::Failed),
        ("faults/no-reward", TrialOutcome::RewardMissing),
        ("faults/no-test-script", TrialOutcome::VerifierCrashed),
        ("faults/slow-verifier", TrialOutcome::VerifierTimeout),
    ]);
    assert_eq!(got, want);
    // Infrastructure is excluded from the score, not counted as a failure.
    assert!(summary.contains("accuracy 0.000"), "{summary}");
    assert!(
        summary.contains("accuracy with infrastructure failures as zero: 0.000"),
        "{summary}"
    );
}

/// Once the agent has acted, only the host's own faults stay infrastructure: a verifier that
/// times out or leaves no usable reward is the agent's failure (reward 0, flagged), since the
/// agent could have made it so. A missing tests/test.sh is the task's, shown from the host.
#[test]
fn after_the_agent_acted_a_failing_verifier_is_its_failure_and_flagged() {
    let dir = tempfile::tempdir().unwrap();
    faulty_pack(&dir.path().join("pack"));
    let (got, summary) = run_faults(dir.path(), "oracle", "jobs");
    let want = named(&[
        ("faults/bad-reward", TrialOutcome::Failed),
        ("faults/healthy", TrialOutcome::Passed),
        ("faults/no-reward", TrialOutcome::Failed),
        ("faults/no-test-script", TrialOutcome::VerifierCrashed),
        ("faults/slow-verifier", TrialOutcome::Failed),
    ]);
    assert_eq!(got, want);
    assert!(summary.contains("accuracy 0.250"), "{summary}");
    let run_dir = std::fs::read_dir(dir.path().join("jobs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .unwrap();
    for (trial, class) in [
        ("faults-bad-reward__0", "VerifierOutputParseError"),
        ("faults-no-reward__0", "RewardFileNotFoundError"),
        ("faults-slow-verifier__0", "VerifierTimeoutError"),
    ] {
        let r = super::common::trial_result(&run_dir, trial);
        assert_eq!(r["verifier_result"]["rewards"]["reward"], 0.0, "{r}");
        // Harbor's class stays, for `resume -f CLASS`; the flag says what happened.
        assert_eq!(r["exception_info"]["exception_type"], class, "{r}");
        assert!(
            r["integrity"]
                .to_string()
                .contains("verifier_failed_after_agent_acted"),
            "{r}"
        );
    }
}

#[test]
fn a_killed_sandbox_is_sandbox_lost() {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("pack");
    task(&pack, "long", Some(HONEST), 30);
    std::fs::write(
        dir.path().join("sleepy.json"),
        r#"{"turns": [{"tool_calls": [{"name": "bash", "input": {"command": "sleep 20"}}]}, {"text": "Slept."}]}"#,
    )
    .unwrap();
    let script = format!("scripted:{}", dir.path().join("sleepy.json").display());
    let mut child = super::common::geode_bin()
        .args([
            "run",
            "pack",
            "--model",
            &script,
            "--jobs-dir",
            "jobs",
            "--max-infra-retries",
            "0",
        ])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Find this trial's sandbox server (its spec names the trial folder; the image build has
    // a server of its own) and kill the sandbox mid-trial.
    let marker = dir.path().join("jobs").to_string_lossy().into_owned() + "/";
    let trial = "faults-long__0";
    let started = Instant::now();
    let server = loop {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no sandbox server appeared"
        );
        let found = std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd);
            (cmd.contains("__sandbox-server") && cmd.contains(&marker) && cmd.contains(trial))
                .then_some(pid)
        });
        if let Some(pid) = found {
            break pid;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // The sandbox's init (PID 1 of its namespace) is the server's child: killing it makes the
    // kernel kill every process of the sandbox, as an OOM kill or a crash would.
    let init = loop {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no sandbox init appeared"
        );
        let found = std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let ppid: i32 = stat
                .rsplit(')')
                .next()?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            (ppid == server && String::from_utf8_lossy(&cmd).contains("__sandbox-init"))
                .then_some(pid)
        });
        if let Some(pid) = found {
            break pid;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(500));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(init),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // Its one trial ended in infrastructure: the run measured nothing (exit 8).
    assert_eq!(child.wait().unwrap().code(), Some(8));
    let got = outcomes(&dir.path().join("jobs"));
    assert_eq!(got[0].1, TrialOutcome::SandboxLost, "{got:?}");
}

#[test]
fn a_planted_reward_does_not_count_and_is_flagged() {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("pack");
    task(&pack, "honest", Some(HONEST), 30);
    // P = 0: the agent never solves the task, but writes reward.txt = 1 before every attempt.
    let out = geode(
        dir.path(),
        &[
            "run",
            "pack",
            "--model",
            "flaky-oracle:0:tamper",
            "--jobs-dir",
            "jobs",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = outcomes(&dir.path().join("jobs"));
    assert_eq!(got.len(), 1);
    let (_, outcome, reward, tampering) = &got[0];
    assert_eq!((*outcome, *reward), (TrialOutcome::Failed, Some(0.0)));
    assert!(
        *tampering >= 1,
        "the planted reward raised no integrity signal"
    );
    let run_dir: PathBuf = std::fs::read_dir(dir.path().join("jobs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("20"))
        .unwrap();
    let result: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(run_dir.join("faults-honest__0/result.json")).unwrap(),
    )
    .unwrap();
    // Found twice over: the file under /logs/verifier, and the commands that wrote it.
    let flags = result["integrity"].as_array().unwrap();
    for kind in ["verifier_dir_written_by_agent", "verifier_dir_write: bash"] {
        assert!(
            flags.iter().any(|f| f.as_str().unwrap().starts_with(kind)),
            "{result}"
        );
    }
}

#[test]
fn the_built_in_pack_is_valid() {
    let jobs = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = super::common::geode_bin()
        .args([
            "tasks",
            "validate",
            "tasks/geode-core",
            "-n",
            "2",
            "--jobs-dir",
            jobs.path().to_str().unwrap(),
        ])
        .current_dir(&root)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("28/28 tasks ok"), "{text}");
}

/// Harbor's multi-reward shape (`{"correctness": 1, "performance": 1}`, as its cookbook task
/// writes) is a score, never an infrastructure error: every key is kept, the headline is the
/// lowest key unless task.toml's `[metadata] reward_key` names one.
#[test]
fn multi_key_rewards_are_kept_and_scored_by_the_documented_rule() {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("pack");
    let writes = |performance: u8| {
        format!(
            "c=$([ -f /app/done ] && echo 1 || echo 0)\n\
             echo \"{{\\\"correctness\\\": $c, \\\"performance\\\": {performance}}}\" > /logs/verifier/reward.json\n"
        )
    };
    task(&pack, "both", Some(&writes(1)), 30);
    task(&pack, "slow", Some(&writes(0)), 30);
    task(&pack, "declared", Some(&writes(0)), 30);
    let toml = pack.join("declared/task.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(
        &toml,
        format!("{text}[metadata]\nreward_key = \"correctness\"\n"),
    )
    .unwrap();
    let out = geode(
        dir.path(),
        &["run", "pack", "--model", "oracle", "--jobs-dir", "jobs"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut got = outcomes(&dir.path().join("jobs"));
    got.sort_by(|a, b| a.0.cmp(&b.0));
    let short: Vec<_> = got
        .iter()
        .map(|(t, o, r, _)| (t.as_str(), *o, *r))
        .collect();
    assert_eq!(
        short,
        [
            ("faults/both", TrialOutcome::Passed, Some(1.0)),
            ("faults/declared", TrialOutcome::Passed, Some(1.0)),
            ("faults/slow", TrialOutcome::Failed, Some(0.0)),
        ]
    );
    let run_dir: PathBuf = std::fs::read_dir(dir.path().join("jobs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("20"))
        .unwrap();
    let result: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(run_dir.join("faults-slow__0/result.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        result["verifier_result"]["rewards"],
        serde_json::json!({"correctness": 1.0, "performance": 0.0}),
        "{result}"
    );
}
