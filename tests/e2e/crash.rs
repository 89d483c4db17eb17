//! Crash injection: a real `geode exec` child on a scripted, checkpointed session is killed
//! with SIGKILL at each point where a crash could lose the conversation or run an effect twice,
//! then `geode resume` continues it. Every effect is a shell line that appends one line to a
//! file per run, so "ran at most once" is checked on the filesystem.
//!
//! | kill point                                   | how the test stops it there              |
//! |----------------------------------------------|------------------------------------------|
//! | batch saved, nothing dispatched              | `GEODE_FAULT_PAUSE=before_dispatch`      |
//! | a long-running `bash` effect is running      | the command touches `started`, sleeps    |
//! | batch dispatched, completed batch not saved  | `GEODE_FAULT_PAUSE=after_dispatch`       |
//! | compaction summary written, not committed    | `GEODE_FAULT_PAUSE=during_compaction`    |

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use geode_runtime::agent::compaction::pairing_problem;
use geode_runtime::agent::restore::{LoadedCheckpoint, load_checkpoint};
use geode_runtime::conversation::ContentBlock;
use geode_runtime::ids::SessionId;
use geode_runtime::store::checkpoint::SessionStatus;

struct Case {
    dir: tempfile::TempDir,
}

impl Case {
    fn new() -> Self {
        Case {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn home(&self) -> PathBuf {
        self.path(".geode-home")
    }

    fn write(&self, rel: &str, text: &str) {
        std::fs::write(self.path(rel), text).unwrap();
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = super::common::geode_bin();
        c.args(args)
            .current_dir(self.dir.path())
            .env("GEODE_HOME", self.home())
            .env_remove("GEODE_MODEL")
            .env_remove("GEODE_FAULT_PAUSE")
            .env_remove("GEODE_FAULT_MARKER");
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// `geode exec` on `script` as session `id`, killed with SIGKILL once `marker` exists.
    fn exec_and_kill(&self, id: &str, script: &str, pause: Option<&str>, marker: &str) {
        let mut cmd = self.command(&[
            "exec",
            "--model",
            script,
            "--allow",
            "dangerous",
            "--session-id",
            id,
            "--scaffold",
            "scaffold.toml",
            "go",
        ]);
        if let Some(point) = pause {
            cmd.env("GEODE_FAULT_PAUSE", point)
                .env("GEODE_FAULT_MARKER", self.path(marker));
        }
        let log = std::fs::File::create(self.path(&format!("{id}.exec.log"))).unwrap();
        let mut child: Child = cmd.stdout(Stdio::null()).stderr(log).spawn().unwrap();
        let started = Instant::now();
        while !self.path(marker).exists() {
            if let Some(status) = child.try_wait().unwrap() {
                let log = std::fs::read_to_string(self.path(&format!("{id}.exec.log")));
                panic!("geode exited ({status}) before {marker}: {log:?}");
            }
            assert!(started.elapsed() < Duration::from_secs(30), "no {marker}");
            std::thread::sleep(Duration::from_millis(20));
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }

    fn resume(&self, id: &str, script: &str) -> Output {
        self.run(&[
            "resume",
            id,
            "--model",
            script,
            "--allow",
            "dangerous",
            "--scaffold",
            "scaffold.toml",
        ])
    }

    fn checkpoint(&self, id: &str) -> LoadedCheckpoint {
        load_checkpoint(&self.home().join("sessions"), &SessionId::new(id)).unwrap()
    }

    fn lines(&self, rel: &str) -> usize {
        std::fs::read_to_string(self.path(rel)).map_or(0, |t| t.lines().count())
    }

    fn receipts(&self) -> String {
        let out = self.run(&["receipts", "list"]);
        assert!(out.status.success(), "{}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn result_of(c: &LoadedCheckpoint, call_id: &str) -> String {
    c.messages
        .iter()
        .flat_map(|m| &m.content)
        .find_map(|b| match b {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                ..
            } if tool_use_id == call_id => Some(content.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {call_id}"))
}

/// The exec script: one batch with an effect and a read, then an answer the kill prevents.
fn batch_script(effect: &str) -> String {
    format!(
        r#"
[[turns]]
[[turns.tool_calls]]
id = "e1"
name = "bash"
input = {{ command = "{effect}", timeout_sec = 120 }}
[[turns.tool_calls]]
id = "l1"
name = "list_dir"
[[turns]]
text = "never reached"
"#
    )
}

const RESUMED: &str = r#"
[[turns]]
text = "Resumed after the crash; any effect whose outcome could not be confirmed is reported."
"#;

fn assert_resumed(out: &Output) {
    assert_eq!(out.status.code(), Some(0), "{}", stderr(out));
}

#[test]
fn kill_after_the_batch_is_saved_and_before_dispatch() {
    let c = Case::new();
    c.write("scaffold.toml", "");
    c.write("exec.toml", &batch_script("echo run >> effects.log"));
    c.write("resume.toml", RESUMED);
    c.exec_and_kill(
        "k1",
        "scripted:exec.toml",
        Some("before_dispatch"),
        "paused",
    );
    assert_eq!(c.lines("effects.log"), 0, "nothing was dispatched");
    let saved = c.checkpoint("k1");
    assert_eq!(saved.messages.len(), 2, "prompt + the proposed batch");
    assert_eq!(saved.state.pending_batch.as_ref().unwrap().calls.len(), 2);
    assert_eq!(saved.row.status, SessionStatus::Active);
    assert!(pairing_problem(&saved.messages, true).is_none());
    assert!(!c.receipts().contains("e1"), "no receipt: never dispatched");

    let out = c.resume("k1", "scripted:resume.toml");
    assert_resumed(&out);
    assert!(stderr(&out).contains("never started"), "{}", stderr(&out));
    assert_eq!(c.lines("effects.log"), 1, "run once, on resume");
    let done = c.checkpoint("k1");
    assert!(pairing_problem(&done.messages, false).is_none());
    assert_eq!(done.messages.len(), 4);
    assert_eq!(done.messages[..2], saved.messages[..]);
    let list = c.receipts();
    assert!(list.contains("e1\tbash\tcommitted"), "{list}");
}

#[test]
fn kill_during_a_long_running_bash_effect() {
    let c = Case::new();
    c.write("scaffold.toml", "");
    c.write(
        "exec.toml",
        &batch_script(
            "echo run >> effects.log; echo $$ > bash.pid; sleep 300 & touch started; sleep 30",
        ),
    );
    c.write("resume.toml", RESUMED);
    c.exec_and_kill("k2", "scripted:exec.toml", None, "started");
    // The command's process group (bash and its background sleep) dies with geode.
    let pgid: i32 = std::fs::read_to_string(c.path("bash.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let group = nix::unistd::Pid::from_raw(pgid);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while nix::sys::signal::killpg(group, None).is_ok() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let left = nix::sys::signal::killpg(group, None).is_ok();
    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    assert!(!left, "the command's processes outlived geode");
    let saved = c.checkpoint("k2");
    assert_eq!(saved.messages.len(), 2);
    assert!(c.receipts().contains("e1\tbash\taccepted"));

    let out = c.resume("k2", "scripted:resume.toml");
    assert_resumed(&out);
    let err = stderr(&out);
    assert!(
        err.contains("pending call e1 (bash): outcome UNCERTAIN"),
        "{err}"
    );
    assert!(err.contains("geode receipts reconcile e1"), "{err}");
    assert_eq!(
        c.lines("effects.log"),
        1,
        "the uncertain effect was not re-run"
    );
    let done = c.checkpoint("k2");
    assert!(pairing_problem(&done.messages, false).is_none());
    assert!(result_of(&done, "e1").starts_with("outcome unknown"));
    assert!(
        result_of(&done, "l1").contains("effects.log"),
        "l1 had no effect: re-run"
    );
    let list = c.receipts();
    assert!(list.contains("e1\tbash\tuncertain"), "{list}");

    let out = c.run(&[
        "receipts",
        "reconcile",
        "e1",
        "--outcome",
        "done",
        "--session",
        "k2",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(c.receipts().contains("e1\tbash\treconciled\tdone"));
    let out = c.run(&["receipts", "reconcile", "e1", "--outcome", "not-done"]);
    assert!(
        !out.status.success(),
        "only uncertain receipts are reconciled"
    );
}

#[test]
fn kill_after_dispatch_and_before_the_completed_batch_is_saved() {
    let c = Case::new();
    c.write("scaffold.toml", "");
    c.write("exec.toml", &batch_script("echo run >> effects.log"));
    c.write("resume.toml", RESUMED);
    c.exec_and_kill("k3", "scripted:exec.toml", Some("after_dispatch"), "paused");
    assert_eq!(c.lines("effects.log"), 1);
    let saved = c.checkpoint("k3");
    assert_eq!(saved.messages.len(), 2, "the results were not saved yet");
    assert!(saved.state.pending_batch.is_some());
    assert!(c.receipts().contains("e1\tbash\tcommitted"));

    // `--last` finds the only session; its model route comes from the flag.
    let out = c.run(&[
        "resume",
        "--last",
        "--model",
        "scripted:resume.toml",
        "--allow",
        "dangerous",
    ]);
    assert_resumed(&out);
    assert!(
        stderr(&out).contains("resuming session k3"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("its result comes from its receipt"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        c.lines("effects.log"),
        1,
        "committed effects are never re-run"
    );
    let done = c.checkpoint("k3");
    assert!(pairing_problem(&done.messages, false).is_none());
    assert!(result_of(&done, "e1").starts_with("[recovered from the effect receipt"));
    assert!(!c.receipts().contains("uncertain"));
    // The turn is finished: nothing to resume without a new prompt.
    let out = c.resume("k3", "scripted:resume.toml");
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("give --prompt"), "{}", stderr(&out));
}

#[test]
fn kill_during_compaction() {
    let c = Case::new();
    // Any context passes this threshold; keep one message so a cut exists after one batch.
    c.write(
        "scaffold.toml",
        "[compaction]\ncontext_window_tokens = 40\nthreshold = 0.5\nkeep_recent_messages = 1\n",
    );
    c.write("exec.toml", &batch_script("echo run >> effects.log"));
    c.write(
        "resume.toml",
        r#"
[[turns]]
[[turns.tool_calls]]
id = "r1"
name = "bash"
input = { command = "echo second >> effects2.log" }
[[turns]]
text = "Resumed after the crash during compaction; both effects ran once."
"#,
    );
    c.exec_and_kill(
        "k4",
        "scripted:exec.toml",
        Some("during_compaction"),
        "paused",
    );
    assert_eq!(c.lines("effects.log"), 1);
    let saved = c.checkpoint("k4");
    assert_eq!(
        saved.messages.len(),
        3,
        "prompt, batch, results: compaction not committed"
    );
    assert_eq!(saved.state.conversation.compactions, 0);
    assert!(saved.state.pending_batch.is_none());
    assert!(pairing_problem(&saved.messages, false).is_none());

    let out = c.resume("k4", "scripted:resume.toml");
    assert_resumed(&out);
    assert_eq!(c.lines("effects.log"), 1);
    assert_eq!(c.lines("effects2.log"), 1);
    let done = c.checkpoint("k4");
    assert!(pairing_problem(&done.messages, false).is_none());
    assert!(done.state.conversation.compactions >= 1);
    assert!(done.messages[0].text().starts_with("[compacted context]"));
    let artifacts = std::fs::read_dir(c.home().join("sessions/k4/artifacts")).unwrap();
    assert!(artifacts.count() >= 1);
    assert!(!c.receipts().contains("uncertain"));
}

#[test]
fn an_unwritable_checkpoint_stops_the_batch_in_a_real_process() {
    let c = Case::new();
    c.write(
        "exec.toml",
        r#"
[[turns]]
delay_ms = 1500
[[turns.tool_calls]]
id = "w1"
name = "write_file"
input = { path = "must-not-exist.txt", content = "x" }
[[turns]]
text = "never reached"
"#,
    );
    let child = c
        .command(&[
            "exec",
            "--model",
            "scripted:exec.toml",
            "--allow",
            "write",
            "--session-id",
            "u1",
            "go",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Round 0 is saved before the (slow) model call; then state.json becomes a directory,
    // which not even root can rename a file over.
    let state = c.home().join("sessions/u1/state.json");
    let started = Instant::now();
    while !state.is_file() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no round-0 save"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::fs::remove_file(&state).unwrap();
    std::fs::create_dir_all(state.join("blocker")).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("checkpoint_failed"),
        "{}",
        stderr(&out)
    );
    assert!(!c.path("must-not-exist.txt").exists());
    assert!(!c.receipts().contains("w1"));
}
