//! Services a Harbor task relies on, end to end: an image whose ENTRYPOINT names a host and
//! starts a server before it hands over to `sh -c "sleep infinity"`, and a solution that
//! leaves servers behind with `cmd &`, `nohup cmd &` and `disown`. Both pass with the oracle
//! and fail with nop, and nothing they started is left on the host after the run. What the
//! agent leaves behind yields the CPU to the verifier, and holding every pid the agent's view
//! may have leaves the verifier the pids kept for it.

use std::path::{Path, PathBuf};

use super::common::{copy_tree, geode_in, run_model_with, trial_result};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/e2e/fixtures")
        .join(name)
}

/// Host processes whose command line holds `mark` (a sandbox's processes are the host's too).
fn host_processes_with(mark: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if entry.file_name().to_string_lossy().parse::<u32>().is_err() {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let line = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if line.contains(mark) {
            found.push(format!("{}: {line}", entry.file_name().to_string_lossy()));
        }
    }
    found
}

fn assert_nothing_left(marks: &[&str]) {
    for mark in marks {
        let left = host_processes_with(mark);
        assert!(left.is_empty(), "left on the host: {left:?}");
    }
}

#[test]
fn entrypoint_and_background_servers_serve_the_tests_and_end_with_the_trial() {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("pack");
    for name in ["harbor-entrypoint-task", "harbor-background-task"] {
        copy_tree(&fixture(name), &pack.join(name));
    }
    let marks = ["geode-entry-api", "geode-bg-"];

    let jobs = dir.path().join("jobs");
    let (oracle, run_dir) = run_model_with(geode_in(dir.path()), &pack, &jobs, "oracle", &[]);
    assert_eq!(oracle["summary"]["outcomes"]["passed"], 2, "{oracle}");
    // The entrypoint ran before the agent, as the image's user would see it under docker.
    let log = std::fs::read_to_string(
        run_dir.join("fixtures-entrypoint-api__0/agent/logs/entrypoint.log"),
    )
    .unwrap();
    assert_eq!(log, "api.internal is served on port 80\n");
    let entry = trial_result(&run_dir, "fixtures-entrypoint-api__0");
    let notes = entry["notes"].to_string();
    assert!(!notes.contains("ENTRYPOINT"), "{notes}");
    // The verifier saw the solution's three servers, the one holding its command's pipes too.
    let tests = std::fs::read_to_string(
        run_dir.join("fixtures-background-servers__0/verifier/test-stdout.txt"),
    )
    .unwrap();
    assert!(
        tests.contains("{8000: 'alpha', 8001: 'beta', 8002: 'gamma'}"),
        "{tests}"
    );
    assert_nothing_left(&marks);

    let (nop, _) = run_model_with(geode_in(dir.path()), &pack, &jobs, "nop", &[]);
    assert_eq!(nop["summary"]["outcomes"]["failed"], 2, "{nop}");
    assert_nothing_left(&marks);
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A task whose solution is `solve` and whose test runs `check` (python, which writes the
/// reward itself).
fn inline_task(pack: &Path, name: &str, solve: &str, check: &str) {
    let dir = pack.join(name);
    write(
        &dir.join("task.toml"),
        &format!(
            "[task]\nname = \"test/{name}\"\n[agent]\ntimeout_sec = 60.0\n[verifier]\n\
             timeout_sec = 60.0\n[environment]\nnetwork_mode = \"no-network\"\ncpus = 1\n"
        ),
    );
    write(&dir.join("instruction.md"), "Leave something running.\n");
    write(
        &dir.join("environment/Dockerfile"),
        "FROM python:3.11-slim\nWORKDIR /app\n",
    );
    write(
        &dir.join("solution/solve.sh"),
        &format!("#!/bin/bash\n{solve}\n"),
    );
    write(
        &dir.join("tests/test.sh"),
        &format!("#!/bin/bash\npython3 - <<'PY'\n{check}\nPY\n"),
    );
}

#[test]
fn what_the_agent_leaves_yields_to_the_verifier_and_cannot_make_it_infrastructure() {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("pack");
    // A busy loop left in the background: the verifier finds it at the lowest priority.
    inline_task(
        &pack,
        "busy",
        "sh -c 'while :; do :; done' geode-busy-loop > /dev/null 2>&1 &\necho left",
        r#"import pathlib
nice = []
for proc in pathlib.Path("/proc").iterdir():
    try:
        if b"geode-busy-loop" in (proc / "cmdline").read_bytes():
            stat = (proc / "stat").read_text()
            nice.append(stat.rsplit(")", 1)[1].split()[16])
    except OSError:
        pass
pathlib.Path("/logs/verifier/nice.txt").write_text(" ".join(nice) + "\n")
pathlib.Path("/logs/verifier/reward.txt").write_text("1\n")"#,
    );
    // A holder that takes every pid the agent's view may have (448 of the trial's 512), and
    // every one freed later: the verifier starts regardless, on the 64 kept for it. The
    // solution waits with builtins only until the holder is full (the cap keeps a machine
    // without a pids limit safe; the test then fails).
    inline_task(
        &pack,
        "pids",
        r#"python3 - geode-pid-holder > /dev/null 2>&1 <<'PY' &
import pathlib, subprocess
held = 0
while True:
    try:
        if held < 1000:
            subprocess.Popen(["sleep", "3600"])
            held += 1
            continue
    except OSError:
        pass
    pathlib.Path("/tmp/full").touch()
PY
until [ -e /tmp/full ]; do :; done
echo holding"#,
        r#"import pathlib
pathlib.Path("/logs/verifier/reward.txt").write_text("1\n")"#,
    );
    let jobs = dir.path().join("jobs");
    let (_, run_dir) = run_model_with(geode_in(dir.path()), &pack, &jobs, "oracle", &[]);

    let busy = trial_result(&run_dir, "test-busy__0");
    assert_eq!(busy["outcome"], "passed", "{busy}");
    let nice = std::fs::read_to_string(run_dir.join("test-busy__0/verifier/nice.txt")).unwrap();
    assert!(
        !nice.trim().is_empty() && nice.split_whitespace().all(|n| n == "19"),
        "{nice:?}"
    );

    // The agent's view holds all it may; the verifier still starts, on the pids kept for it.
    let pids = trial_result(&run_dir, "test-pids__0");
    assert_eq!(pids["outcome"], "passed", "{pids}");
    assert_eq!(pids["verifier_result"]["rewards"]["reward"], 1.0, "{pids}");
    assert_nothing_left(&["geode-busy-loop", "geode-pid-holder"]);
}

#[test]
fn an_entrypoint_that_fails_early_fails_the_set_up_with_its_output() {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("pack");
    inline_task(
        &pack,
        "entry-fails",
        "echo never",
        r#"import pathlib
pathlib.Path("/logs/verifier/reward.txt").write_text("1\n")"#,
    );
    write(
        &pack.join("entry-fails/environment/Dockerfile"),
        "FROM python:3.11-slim\nWORKDIR /app\n\
         ENTRYPOINT [\"sh\", \"-c\", \"echo cannot bind port $((40 + 40)) >&2; exit 3\"]\n",
    );
    let jobs = dir.path().join("jobs");
    // Its one trial never reached its agent: the run measured nothing (exit 8).
    let (_, run_dir) =
        super::common::run_model_ending(geode_in(dir.path()), &pack, &jobs, "oracle", &[], 8);
    let result = trial_result(&run_dir, "test-entry-fails__0");
    assert_eq!(result["outcome"], "environment_setup_failed", "{result}");
    let message = result["exception_info"]["exception_message"].to_string();
    assert!(
        message.contains("exited with status 3") && message.contains("cannot bind port 80"),
        "its output, not only its words (which name the step), is in the message: {result}"
    );
    assert!(message.contains("ENTRYPOINT"), "{result}");
}
