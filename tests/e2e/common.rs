//! What every end-to-end module starts from: the `geode` binary in a folder of its own.

use std::path::Path;
use std::process::{Command, Stdio};

/// `geode` run in `dir`, with `GEODE_HOME` at `dir/home` and none of the `GEODE_*` settings of
/// the environment the tests were started from.
/// The `geode` binary, taking its images from the machine-wide test store (where the Debian
/// base is bootstrapped once), never from the user's `~/.geode/images`.
pub fn geode_bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_geode"));
    c.env("GEODE_IMAGES", super::registry::shared_store());
    // Claude Code's user folder (settings hooks, skills) is never the machine's own `~/.claude`:
    // a test that wants one sets its own.
    c.env("CLAUDE_CONFIG_DIR", "/nonexistent/geode-e2e/claude");
    c
}

pub fn geode_in(dir: &Path) -> Command {
    let mut c = geode_bin();
    c.current_dir(dir);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("GEODE_") {
            c.env_remove(key);
        }
    }
    c.env("GEODE_HOME", dir.join("home"));
    c.env("GEODE_IMAGES", super::registry::shared_store());
    c
}

/// The built-in tasks held out as the test split by the crucible and search studies.
const TEST_TASKS: [&str; 8] = [
    "c-rle-bugs",
    "cron-next",
    "json-flatten",
    "log-latency-report",
    "markdown-toc",
    "git-purge-secret",
    "sqlite-upsert-import",
    "debug-build-order",
];

/// Copies the built-in pack into `dir/train` (20 tasks) and `dir/test` (the 8 above). The test
/// split's content is made this call's own (a file beside one task's `task.toml`): the
/// machine's holdout ledger burns a content once, for every test and every run of the suite.
pub fn split_core_pack(dir: &Path) {
    let core = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tasks/geode-core");
    for split in ["train", "test"] {
        std::fs::create_dir_all(dir.join(split)).unwrap();
    }
    for entry in std::fs::read_dir(&core).unwrap().flatten() {
        if !entry.path().join("task.toml").is_file() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let split = if TEST_TASKS.contains(&name.as_str()) {
            "test"
        } else {
            "train"
        };
        let ok = Command::new("cp")
            .arg("-r")
            .arg(entry.path())
            .arg(dir.join(split))
            .status()
            .unwrap();
        assert!(ok.success());
    }
    let study = uuid::Uuid::new_v4().to_string();
    std::fs::write(
        dir.join("test").join(TEST_TASKS[0]).join("STUDY"),
        format!("{study}\n"),
    )
    .unwrap();
    // And in a file its environment copies into its image (the marker of `study_marker`).
    std::fs::write(
        dir.join("test/json-flatten/environment/files/.study"),
        format!("{STUDY_MARKER}{study}\n"),
    )
    .unwrap();
}

/// What `split_core_pack` writes into one test task's image, followed by the study's id.
pub const STUDY_MARKER: &str = "geode-study-marker-";

/// The marker of the study split into `dir`, as it appears in its test task's image.
pub fn study_marker(dir: &Path) -> String {
    let study =
        std::fs::read_to_string(dir.join("test").join(TEST_TASKS[0]).join("STUDY")).unwrap();
    format!("{STUDY_MARKER}{}", study.trim())
}

/// `cmd` (a `geode` command) running PACK with the oracle into `jobs`, as JSON: the summary
/// and the run's folder. Fails the test when the run fails.
pub fn run_oracle_with(
    cmd: Command,
    pack: &Path,
    jobs: &Path,
    extra: &[&str],
) -> (serde_json::Value, std::path::PathBuf) {
    run_model_with(cmd, pack, jobs, "oracle", extra)
}

/// [`run_oracle_with`] with another model route.
pub fn run_model_with(
    cmd: Command,
    pack: &Path,
    jobs: &Path,
    model: &str,
    extra: &[&str],
) -> (serde_json::Value, std::path::PathBuf) {
    run_model_ending(cmd, pack, jobs, model, extra, 0)
}

/// [`run_model_with`] for a run that must end with exit code `code` (8: no trial reached a
/// verdict).
pub fn run_model_ending(
    mut cmd: Command,
    pack: &Path,
    jobs: &Path,
    model: &str,
    extra: &[&str],
    code: i32,
) -> (serde_json::Value, std::path::PathBuf) {
    let out = cmd
        .arg("run")
        .arg(pack)
        .args(["--model", model, "--json", "--jobs-dir"])
        .arg(jobs)
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "geode run: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let run_dir = std::path::PathBuf::from(summary["run_dir"].as_str().unwrap());
    (summary, run_dir)
}

/// Copies the folder `src` to `dst`, recursively.
pub fn copy_tree(src: &Path, dst: &Path) {
    for entry in walkdir::WalkDir::new(src) {
        let entry = entry.unwrap();
        let to = dst.join(entry.path().strip_prefix(src).unwrap());
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&to).unwrap();
        } else {
            std::fs::copy(entry.path(), &to).unwrap();
        }
    }
}

/// A trial's `result.json`.
pub fn trial_result(run_dir: &Path, trial: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(run_dir.join(trial).join("result.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// `cmd` writing to a pipe whose reader is gone (`geode ... | head`) ends with the status a shell
/// gives a writer killed by SIGPIPE, and prints no panic. The reader is closed before the child
/// starts, so even a command that writes at once meets the closed pipe.
pub fn ends_quietly_on_a_closed_pipe(mut cmd: Command) {
    let what = format!("{cmd:?}");
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = cmd.stdout(writer).stderr(Stdio::piped()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{what}: {err}");
    assert_eq!(out.status.code(), Some(141), "{what}: {err}");
}
