//! The daily CLI's daemon: `geode serve` with raw-protocol clients and `geode --connect` thin
//! clients (the REPL and commands without a daemon are in daily_cli.rs).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const WRITE_THEN_DONE: &str = r#"
[[turns]]
text = "Writing the file."
[[turns.tool_calls]]
id = "w1"
name = "write_file"
input = { path = "out.txt", content = "hello" }
[[turns]]
text = "Done."
"#;

use super::common::geode_in as geode;

pub(super) struct Daemon {
    child: Child,
    socket: PathBuf,
}

impl Daemon {
    pub(super) fn start(dir: &Path, script: &str, env: &[(&str, &str)]) -> Daemon {
        std::fs::write(dir.join("script.toml"), script).unwrap();
        let mut cmd = geode(dir);
        cmd.args(["serve"])
            .env("GEODE_MODEL", "scripted:script.toml")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().unwrap();
        let socket = dir.join("home").join("cli.sock");
        let deadline = Instant::now() + Duration::from_secs(20);
        while UnixStream::connect(&socket).is_err() {
            assert!(Instant::now() < deadline, "the daemon did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Daemon { child, socket }
    }

    fn term(mut self) -> std::process::ExitStatus {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let status = self.child.wait().unwrap();
        self.child = Command::new("true").spawn().unwrap();
        status
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A raw protocol client.
struct Client {
    rd: BufReader<UnixStream>,
    wr: UnixStream,
    session_id: String,
}

impl Client {
    fn connect(socket: &Path) -> Client {
        let s = UnixStream::connect(socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut c = Client {
            rd: BufReader::new(s.try_clone().unwrap()),
            wr: s,
            session_id: String::new(),
        };
        let greeting = c.recv();
        assert_eq!(greeting["type"], "session");
        c.session_id = greeting["session_id"].as_str().unwrap().to_string();
        c
    }

    fn send(&mut self, v: Value) {
        writeln!(self.wr, "{v}").unwrap();
    }

    fn recv(&mut self) -> Value {
        let mut line = String::new();
        self.rd.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }

    /// Messages up to and including the first of type `ty`.
    fn until(&mut self, ty: &str) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let m = self.recv();
            let done = m["type"] == ty;
            seen.push(m);
            if done {
                return seen;
            }
        }
    }
}

#[test]
fn the_socket_is_private_and_a_second_daemon_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path(), WRITE_THEN_DONE, &[]);
    let mode = std::fs::metadata(&daemon.socket)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let second = geode(dir.path())
        .args(["serve"])
        .env("GEODE_MODEL", "nop")
        .output()
        .unwrap();
    assert!(!second.status.success());
    assert!(String::from_utf8_lossy(&second.stderr).contains("already answering"));
    let status = daemon.term();
    assert!(status.success(), "graceful stop: {status:?}");
    assert!(
        !dir.path().join("home/cli.sock").exists(),
        "the socket is removed"
    );
}

#[test]
fn a_stale_socket_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("home")).unwrap();
    // Bound, then dropped: the file stays, nobody listens.
    drop(std::os::unix::net::UnixListener::bind(dir.path().join("home/cli.sock")).unwrap());
    let daemon = Daemon::start(dir.path(), WRITE_THEN_DONE, &[]);
    Client::connect(&daemon.socket);
}

#[test]
fn an_approval_round_trip_runs_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path(), WRITE_THEN_DONE, &[]);
    let mut c = Client::connect(&daemon.socket);
    c.send(json!({"type": "prompt", "text": "write it"}));
    let seen = c.until("approval_request");
    let req = seen.last().unwrap();
    assert_eq!(req["tool_name"], "write_file");
    assert_eq!(req["safety_level"], "write");
    c.send(
        json!({"type": "approval_response", "approval_id": req["approval_id"], "decision": "y"}),
    );
    let seen = c.until("result");
    let result = seen.last().unwrap();
    assert_eq!(result["text"], "Done.");
    assert_eq!(result["tool_calls"], 1);
    assert_eq!(result["system_prompt_hash"].as_str().unwrap().len(), 64);
    assert!(
        seen.iter()
            .any(|m| m["type"] == "tool_end" && !m["is_error"].as_bool().unwrap())
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
        "hello"
    );
    c.send(json!({"type": "command", "name": "status"}));
    let status = c.until("command_result");
    assert!(
        status.last().unwrap()["text"]
            .as_str()
            .unwrap()
            .contains("turns 1")
    );
}

/// A thin client gets a running command's output as `tool_output_delta` lines while the
/// command still waits for a file only the test creates.
#[test]
fn a_running_command_s_output_reaches_the_client_before_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
[[turns]]
[[turns.tool_calls]]
id = "b1"
name = "bash"
input = { command = "echo first-$((40+2)); while [ ! -e release ]; do sleep 0.05; done" }
[[turns]]
text = "Done."
"#;
    let daemon = Daemon::start(dir.path(), script, &[]);
    let mut c = Client::connect(&daemon.socket);
    c.send(json!({"type": "prompt", "text": "run it"}));
    let req = c.until("approval_request").pop().unwrap();
    c.send(
        json!({"type": "approval_response", "approval_id": req["approval_id"], "decision": "y"}),
    );
    let delta = c.until("tool_output_delta").pop().unwrap();
    assert!(!dir.path().join("release").exists());
    assert_eq!(delta["call_id"], "b1");
    assert_eq!(delta["text"], "first-42\n");
    std::fs::write(dir.path().join("release"), "").unwrap();
    assert_eq!(c.until("result").pop().unwrap()["text"], "Done.");
}

/// The same for a command the person typed as `!COMMAND`.
#[test]
fn a_person_s_shell_command_streams_its_output_before_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path(), "[[turns]]\ntext = \"Seen.\"\n", &[]);
    let mut c = Client::connect(&daemon.socket);
    c.send(json!({"type": "shell",
        "command": "echo typed-$((40+2)); while [ ! -e release ]; do sleep 0.05; done"}));
    // The person's own command: nobody asks them to approve it.
    let seen = c.until("tool_output_delta");
    assert!(
        seen.iter().all(|m| m["type"] != "approval_request"),
        "{seen:?}"
    );
    assert!(!dir.path().join("release").exists());
    assert_eq!(seen.last().unwrap()["text"], "typed-42\n");
    std::fs::write(dir.path().join("release"), "").unwrap();
    let answer = c.until("command_result").pop().unwrap();
    assert!(
        answer["text"].as_str().unwrap().contains("typed-42"),
        "{answer}"
    );
}

#[test]
fn a_refusal_with_a_reason_reaches_the_model_and_reads_as_words() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path(), WRITE_THEN_DONE, &[]);
    let mut c = Client::connect(&daemon.socket);
    c.send(json!({"type": "prompt", "text": "write it"}));
    let seen = c.until("approval_request");
    let req = seen.last().unwrap();
    // The preview a person reads: the file to be made, as a diff.
    let detail = req["detail"].as_str().unwrap();
    assert!(detail.starts_with("new file out.txt\n"), "{detail}");
    assert!(detail.contains("+hello"), "{detail}");
    c.send(
        json!({"type": "approval_response", "approval_id": req["approval_id"],
        "decision": "n: use notes.md instead"}),
    );
    let seen = c.until("result");
    let end = seen.iter().find(|m| m["type"] == "tool_end").unwrap();
    assert_eq!(
        end["outcome"], "denied at approval: the user refused: use notes.md instead",
        "{end}"
    );
    assert!(!dir.path().join("out.txt").exists());
}

#[test]
fn an_unanswered_approval_is_denied_after_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(
        dir.path(),
        WRITE_THEN_DONE,
        &[("GEODE_APPROVAL_TIMEOUT_SECS", "1")],
    );
    let mut c = Client::connect(&daemon.socket);
    c.send(json!({"type": "prompt", "text": "write it"}));
    c.until("approval_request");
    let started = Instant::now();
    let seen = c.until("result");
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert!(
        seen.iter().any(|m| m["type"] == "approval_timeout"),
        "{seen:?}"
    );
    assert!(
        !dir.path().join("out.txt").exists(),
        "the denied call did not run"
    );
}

#[test]
fn two_thin_clients_share_one_daemon_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let slow = r#"
repeat_last = true
[[turns]]
text = "slow answer, long enough to pass the rule-based verification of a reply that used no tools at all."
delay_ms = 1500
"#;
    let daemon = Daemon::start(dir.path(), slow, &[]);
    let spawn = || {
        let mut child = geode(dir.path())
            .arg("--connect")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"first\nsecond\n/status\n/quit\n")
            .unwrap();
        child
    };
    let started = Instant::now();
    let (a, b) = (spawn(), spawn());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let elapsed = started.elapsed();
    for out in [&a, &b] {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(text.matches("slow answer").count(), 2, "{text}");
        assert!(
            text.contains("turns 2"),
            "each session ran its turns serially: {text}"
        );
    }
    // Four 1.5 s turns, two per session: in parallel across sessions, serial within one.
    assert!(elapsed < Duration::from_millis(5500), "{elapsed:?}");
    assert!(elapsed >= Duration::from_millis(3000), "{elapsed:?}");
    drop(daemon);
}

#[test]
fn sigterm_lets_the_running_turn_finish() {
    let dir = tempfile::tempdir().unwrap();
    let slow = "[[turns]]\ntext = \"finished anyway, a reply long enough to pass the rule-based verification without tools.\"\ndelay_ms = 1000\n";
    let daemon = Daemon::start(dir.path(), slow, &[]);
    let mut c = Client::connect(&daemon.socket);
    c.send(json!({"type": "prompt", "text": "go"}));
    c.until("round_start");
    let status = daemon.term();
    let seen = c.until("result");
    assert_eq!(
        seen.last().unwrap()["text"],
        "finished anyway, a reply long enough to pass the rule-based verification without tools."
    );
    assert!(status.success());
}

const LONG: &str = "an answer long enough to pass the rule-based verification without tools";

#[test]
fn prompts_of_one_session_run_one_after_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let script = format!("repeat_last = true\n[[turns]]\ntext = \"{LONG}\"\ndelay_ms = 300\n");
    let daemon = Daemon::start(dir.path(), &script, &[]);
    let mut c = Client::connect(&daemon.socket);
    // Both prompts at once: the session lane queues the second behind the first.
    c.send(json!({"type": "prompt", "text": "one"}));
    c.send(json!({"type": "prompt", "text": "two"}));
    let first = c.until("result");
    let second = c.until("result");
    for turn in [&first, &second] {
        let rounds = turn.iter().filter(|m| m["type"] == "round_start").count();
        let ends = turn.iter().filter(|m| m["type"] == "turn_end").count();
        assert_eq!((rounds, ends), (1, 1), "one whole turn each: {turn:?}");
    }
}

#[test]
fn a_killed_daemon_is_restarted_and_the_session_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let first = format!("[[turns]]\ntext = \"first: {LONG}\"\n");
    let mut daemon = Daemon::start(dir.path(), &first, &[]);
    let mut c = Client::connect(&daemon.socket);
    c.send(json!({"type": "prompt", "text": "remember this"}));
    c.until("result");
    let id = c.session_id.clone();
    daemon.child.kill().unwrap();
    daemon.child.wait().unwrap();
    drop(c);
    // The socket file is left behind, stale: the new daemon replaces it.
    assert!(daemon.socket.exists());
    let second = format!("[[turns]]\ntext = \"second: {LONG}\"\n");
    let daemon = Daemon::start(dir.path(), &second, &[]);
    let mut c = Client::connect(&daemon.socket);
    c.send(json!({"type": "command", "name": "resume", "args": id}));
    let seen = c.until("command_result");
    assert!(
        seen.iter()
            .any(|m| m["type"] == "session" && m["session_id"] == id.as_str()),
        "{seen:?}"
    );
    let text = seen.last().unwrap()["text"].as_str().unwrap().to_string();
    assert!(text.starts_with(&format!("resumed {id}")), "{text}");
    c.send(json!({"type": "prompt", "text": "and continue"}));
    let result = c.until("result");
    assert!(
        result.last().unwrap()["text"]
            .as_str()
            .unwrap()
            .starts_with("second:")
    );
    c.send(json!({"type": "command", "name": "status"}));
    let status = c.until("command_result");
    let status = status.last().unwrap()["text"].as_str().unwrap().to_string();
    assert!(
        status.contains(&id) && status.contains("messages 4"),
        "{status}"
    );
}

#[test]
fn model_and_effort_switch_mid_session_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let first = format!("[[turns]]\ntext = \"alpha: {LONG}\"\n");
    std::fs::write(
        dir.path().join("b.toml"),
        format!("[[turns]]\ntext = \"bravo: {LONG}\"\n"),
    )
    .unwrap();
    let mut daemon = Daemon::start(dir.path(), &first, &[]);
    let mut c = Client::connect(&daemon.socket);
    let last_text = |c: &mut Client, ty: &str| {
        let seen = c.until(ty);
        seen.last().unwrap()["text"].as_str().unwrap().to_string()
    };
    c.send(json!({"type": "prompt", "text": "one"}));
    assert!(last_text(&mut c, "result").starts_with("alpha:"));

    c.send(json!({"type": "command", "name": "model", "args": "scripted:b.toml"}));
    let switched = last_text(&mut c, "command_result");
    assert!(switched.starts_with("switched: "), "{switched}");
    assert!(switched.contains("route scripted:b.toml"), "{switched}");
    c.send(json!({"type": "command", "name": "effort", "args": "high"}));
    let effort = last_text(&mut c, "command_result");
    assert!(effort.contains("effort high"), "{effort}");
    c.send(json!({"type": "command", "name": "effort", "args": "furious"}));
    assert!(last_text(&mut c, "command_result").contains("none, minimal, low"));
    c.send(json!({"type": "command", "name": "model", "args": "scripted:missing.toml"}));
    let refused = last_text(&mut c, "command_result");
    assert!(
        refused.starts_with("error: ") && refused.contains("still on"),
        "{refused}"
    );

    c.send(json!({"type": "prompt", "text": "two"}));
    assert!(last_text(&mut c, "result").starts_with("bravo:"));

    // A restarted daemon whose configured script now says something else resumes the session
    // on the model it last used.
    let id = c.session_id.clone();
    daemon.child.kill().unwrap();
    daemon.child.wait().unwrap();
    drop(c);
    let third = format!("[[turns]]\ntext = \"charlie: {LONG}\"\n");
    let daemon = Daemon::start(dir.path(), &third, &[]);
    let mut c = Client::connect(&daemon.socket);
    c.send(json!({"type": "command", "name": "resume", "args": id}));
    c.until("command_result");
    c.send(json!({"type": "command", "name": "model"}));
    let model = last_text(&mut c, "command_result");
    assert!(
        model.contains("route scripted:b.toml") && model.contains("effort high"),
        "{model}"
    );
    c.send(json!({"type": "prompt", "text": "three"}));
    assert!(last_text(&mut c, "result").starts_with("bravo:"));
}

#[test]
fn a_claude_code_bash_hook_blocks_rm_in_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("home")).unwrap();
    std::fs::write(d.join("home/hooks.toml"), super::daily_cli::NO_RM_HOOKS).unwrap();
    std::fs::write(
        d.join("home/config.toml"),
        "hitl = \"auto\"\nhooks = \"hooks.toml\"\n",
    )
    .unwrap();
    std::fs::write(d.join("keep.txt"), "kept").unwrap();
    let daemon = Daemon::start(d, super::daily_cli::RM_THEN_TOUCH, &[]);
    let mut c = Client::connect(&daemon.socket);
    c.send(json!({"type": "prompt", "text": "clean up"}));
    let seen = c.until("result");
    assert_eq!(
        seen.last().unwrap()["text"],
        "The rm was refused; made.txt is made."
    );
    let ends: Vec<&Value> = seen.iter().filter(|m| m["type"] == "tool_end").collect();
    assert_eq!(ends.len(), 2, "{seen:?}");
    assert_eq!(ends[0]["is_error"], true, "{seen:?}");
    assert!(
        ends[0]["outcome"].as_str().unwrap().contains("no rm here"),
        "{seen:?}"
    );
    assert_eq!(ends[1]["is_error"], false, "{seen:?}");
    // The client is told which hook decided, before the call's end.
    let decided: Vec<usize> = (0..seen.len())
        .filter(|&i| seen[i]["type"] == "hook_decision")
        .collect();
    assert_eq!(decided.len(), 1, "{seen:?}");
    let decision = &seen[decided[0]];
    assert_eq!(decision["event"], "PreToolUse", "{decision}");
    assert_eq!(decision["decision"], "deny", "{decision}");
    assert_eq!(decision["tool"], "bash", "{decision}");
    assert!(
        decision["reason"].as_str().unwrap().contains("no rm here"),
        "{decision}"
    );
    let first_end = seen.iter().position(|m| m["type"] == "tool_end").unwrap();
    assert!(decided[0] < first_end, "{seen:?}");
    assert!(d.join("keep.txt").exists(), "rm ran");
    assert!(d.join("made.txt").exists(), "the shell never ran");
}

/// Closing the thin client leaves the turn running in the daemon: its reply is in the session
/// a later client resumes.
#[test]
fn a_closed_client_s_turn_runs_on_in_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let slow = format!("[[turns]]\ntext = \"{LONG}\"\ndelay_ms = 1000\n");
    let daemon = Daemon::start(dir.path(), &slow, &[]);
    let mut c = Client::connect(&daemon.socket);
    let id = c.session_id.clone();
    c.send(json!({"type": "prompt", "text": "go"}));
    c.until("round_start");
    drop(c);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut c = Client::connect(&daemon.socket);
        c.send(json!({"type": "command", "name": "resume", "args": id}));
        let resumed = c.until("command_result");
        let text = resumed.last().unwrap()["text"]
            .as_str()
            .unwrap()
            .to_string();
        // The user's prompt and the model's whole reply.
        if text.starts_with(&format!("resumed {id} (2 messages)")) {
            break;
        }
        assert!(Instant::now() < deadline, "the turn never ended: {text}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
