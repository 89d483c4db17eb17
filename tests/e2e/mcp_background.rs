//! MCP servers in the background, with real processes: the daemon (and so the REPL, which
//! serves itself the same way) answers before a slow server is up and takes its tools once it
//! is; a server killed with SIGKILL is restarted, `/mcp` says where it stands meanwhile, a
//! call while it is down is a tool error, and a call after the restart works.
//!
//! The fixture waits for a gate file before it starts, so "slow" and "still down" are states
//! the test holds, not durations it guesses.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use geode_runtime::ids::SessionId;
use geode_runtime::store::timeline::{SessionTimeline, TimelineEvent};
use serde_json::{Value, json};

use super::mcp::{alive, completed, connect, fixture_server, geode, lines};

/// The daemon of a test, killed when the test ends however it ends.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A home whose one MCP server starts only once `gate` exists, and a script for the daemon.
fn setup(d: &Path, script: &str) -> PathBuf {
    setup_with(d, script, "[\"echo\"]")
}

/// `setup` with `tools` as the policy's allow-list (a TOML array).
fn setup_with(d: &Path, script: &str, tools: &str) -> PathBuf {
    std::fs::create_dir_all(d.join("home")).unwrap();
    let gate = d.join("gate");
    let launcher = format!(
        "while [ ! -e {} ]; do sleep 0.05; done; exec {}",
        gate.display(),
        fixture_server().display()
    );
    std::fs::write(
        d.join("home").join("config.toml"),
        format!(
            "hitl = \"dangerous_only\"\n[mcp.servers.fixture]\ncommand = \"bash\"\n\
             args = [\"-c\", {launcher:?}]\n\
             env = {{ FIXTURE_STARTED = {:?}, FIXTURE_CALLS = {:?} }}\n\
             [mcp.servers.fixture.policy]\nsafety = \"safe\"\ntools = {tools}\n",
            d.join("started.log").display().to_string(),
            d.join("calls.log").display().to_string(),
        ),
    )
    .unwrap();
    std::fs::write(d.join("script.toml"), script).unwrap();
    gate
}

fn start_daemon(d: &Path) -> Daemon {
    let stderr = std::fs::File::create(d.join("daemon.err")).unwrap();
    Daemon(
        geode(d)
            .arg("serve")
            .env("GEODE_MODEL", "scripted:script.toml")
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap(),
    )
}

/// One connection to the daemon: sends requests, reads until an answer, approves every
/// approval request on the way.
struct Client {
    rd: BufReader<UnixStream>,
    wr: UnixStream,
    session: String,
}

impl Client {
    fn open(d: &Path) -> Client {
        let stream = connect(&d.join("home").join("cli.sock"));
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut c = Client {
            rd: BufReader::new(stream.try_clone().unwrap()),
            wr: stream,
            session: String::new(),
        };
        let greeting = c.until("session");
        c.session = greeting.last().unwrap()["session_id"]
            .as_str()
            .unwrap()
            .to_string();
        c
    }

    fn until(&mut self, ty: &str) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let mut line = String::new();
            self.rd.read_line(&mut line).unwrap();
            assert!(!line.is_empty(), "the daemon closed; saw {seen:?}");
            let m: Value = serde_json::from_str(&line).unwrap();
            if m["type"] == "approval_request" {
                let answer = json!({"type": "approval_response",
                    "approval_id": m["approval_id"], "decision": "y"});
                writeln!(self.wr, "{answer}").unwrap();
            }
            let done = m["type"] == ty;
            seen.push(m);
            if done {
                return seen;
            }
        }
    }

    fn mcp(&mut self) -> String {
        writeln!(self.wr, "{}", json!({"type": "command", "name": "mcp"})).unwrap();
        let seen = self.until("command_result");
        seen.last().unwrap()["text"].as_str().unwrap().to_string()
    }

    /// `/mcp` until it contains `want` (the server's state changes in the background).
    fn mcp_until(&mut self, want: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = self.mcp();
            if text.contains(want) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "/mcp never showed {want:?}: {text}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The answer of one prompt, and every message of its turn.
    fn prompt(&mut self, text: &str) -> (String, Vec<Value>) {
        writeln!(self.wr, "{}", json!({"type": "prompt", "text": text})).unwrap();
        let seen = self.until("result");
        let answer = seen.last().unwrap()["text"].as_str().unwrap().to_string();
        (answer, seen)
    }
}

const LATE_SCRIPT: &str = r#"
[[turns]]
text = "Hello before the server."
[[turns]]
text = "Calling the late server."
[[turns.tool_calls]]
id = "e1"
name = "mcp__fixture__echo"
input = { text = "late" }
[[turns]]
text = "Echoed late."
"#;

#[test]
fn a_slow_server_holds_back_no_prompt_and_its_tools_join_when_it_is_up() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let gate = setup(d, LATE_SCRIPT);
    let _daemon = start_daemon(d);
    let mut c = Client::open(d);

    // The server cannot have started (its gate is shut), yet the session answers.
    let text = c.mcp();
    assert!(text.contains("fixture  connecting"), "{text}");
    let (answer, _) = c.prompt("hi");
    assert_eq!(answer, "Hello before the server.");
    assert!(!d.join("started.log").exists(), "the server started early");

    std::fs::write(&gate, "").unwrap();
    let text = c.mcp_until("fixture  connected (3 tools)");
    assert!(text.contains("mcp__fixture__echo  callable"), "{text}");
    let (answer, seen) = c.prompt("echo");
    assert_eq!(answer, "Echoed late.");
    assert!(
        seen.iter().any(|m| m["type"] == "tool_end"
            && m["tool"] == "mcp__fixture__echo"
            && m["is_error"] == false),
        "{seen:?}"
    );
    assert_eq!(lines(&d.join("calls.log")).len(), 1);
    let rows = completed(&d.join("home").join("timeline.db"), &c.session);
    assert_eq!(
        rows,
        vec![(
            "mcp__fixture__echo".to_string(),
            false,
            "echo: late".to_string()
        )]
    );
    // The late tool came in as a new plan generation, recorded before the turn that used it.
    let tl = SessionTimeline::open(d.join("home").join("timeline.db")).unwrap();
    let extended: Vec<(u64, Vec<String>)> = tl
        .rows(&SessionId::new(c.session.as_str()))
        .unwrap()
        .into_iter()
        .filter_map(|r| match r.event {
            TimelineEvent::PlanExtended {
                plan_generation,
                added,
                ..
            } => Some((plan_generation, added)),
            _ => None,
        })
        .collect();
    assert_eq!(extended.len(), 1, "{extended:?}");
    assert!(extended[0].0 >= 2, "{extended:?}");
    assert_eq!(extended[0].1, vec!["mcp__fixture__echo".to_string()]);
}

const RESTART_SCRIPT: &str = r#"
[[turns]]
[[turns.tool_calls]]
id = "e1"
name = "mcp__fixture__echo"
input = { text = "first" }
[[turns]]
text = "First echoed."
[[turns]]
[[turns.tool_calls]]
id = "e2"
name = "mcp__fixture__echo"
input = { text = "while down" }
[[turns]]
text = "The echo failed: the server was down."
[[turns]]
[[turns.tool_calls]]
id = "e3"
name = "mcp__fixture__echo"
input = { text = "again" }
[[turns]]
text = "Echoed again."
"#;

fn pid_of(started_line: &str) -> i32 {
    started_line
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn a_killed_server_is_restarted_and_said_to_be_down_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let gate = setup(d, RESTART_SCRIPT);
    std::fs::write(&gate, "").unwrap();
    let _daemon = start_daemon(d);
    let mut c = Client::open(d);
    c.mcp_until("fixture  connected (3 tools)");
    let (answer, _) = c.prompt("echo first");
    assert_eq!(answer, "First echoed.");

    // Killed, and held down: its replacement waits at the shut gate.
    std::fs::remove_file(&gate).unwrap();
    let first = pid_of(&lines(&d.join("started.log"))[0]);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let text = c.mcp_until("fixture  restarting");
    assert!(
        text.contains("mcp__fixture__echo  callable"),
        "the last listing stays visible: {text}"
    );
    let warned = std::fs::read_to_string(d.join("daemon.err")).unwrap();
    assert!(
        warned.contains("MCP server fixture: the server went away")
            && warned.contains("retrying in 0.5s"),
        "{warned}"
    );
    let (answer, _) = c.prompt("echo while down");
    assert_eq!(answer, "The echo failed: the server was down.");
    let rows = completed(&d.join("home").join("timeline.db"), &c.session);
    let (tool, is_error, content) = &rows[1];
    assert_eq!(tool, "mcp__fixture__echo");
    assert!(
        *is_error && content.contains("MCP server fixture is not connected (restarting)"),
        "{rows:?}"
    );

    std::fs::write(&gate, "").unwrap();
    c.mcp_until("fixture  connected (3 tools)");
    let started = lines(&d.join("started.log"));
    assert_eq!(started.len(), 2, "{started:?}");
    assert_ne!(pid_of(&started[1]), first);
    assert!(!alive(first));
    let (answer, _) = c.prompt("echo again");
    assert_eq!(answer, "Echoed again.");
    let calls = lines(&d.join("calls.log"));
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(calls[1].contains("again"), "{calls:?}");
}

#[test]
fn the_repl_answers_while_its_server_is_still_connecting() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    setup(d, "[[turns]]\ntext = \"Hello before the server.\"\n");
    let mut repl = geode(d)
        .args(["--local", "--model", "scripted:script.toml"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The gate stays shut: were the REPL to wait for the server, nothing here would answer
    // until the connect timed out, and /mcp would then say `failed`.
    repl.stdin
        .take()
        .unwrap()
        .write_all(b"/mcp\nhi\n/exit\n")
        .unwrap();
    let out = repl.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("fixture  connecting"), "{stdout}");
    assert!(stdout.contains("Hello before the server."), "{stdout}");
    assert!(!d.join("started.log").exists(), "the server started early");
}

#[test]
fn a_server_that_dies_mid_call_ends_the_call_with_an_error_and_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let gate = setup_with(
        d,
        "[[turns]]\n[[turns.tool_calls]]\nid = \"c1\"\nname = \"mcp__fixture__crash\"\n\
         input = {}\n[[turns]]\ntext = \"The server crashed.\"\n",
        "[\"echo\", \"crash\"]",
    );
    std::fs::write(&gate, "").unwrap();
    let _daemon = start_daemon(d);
    let mut c = Client::open(d);
    c.mcp_until("fixture  connected (3 tools)");
    // The call's answer never comes: the wait ends when the connection does, not at a timeout.
    let (answer, _) = c.prompt("crash it");
    assert_eq!(answer, "The server crashed.");
    let rows = completed(&d.join("home").join("timeline.db"), &c.session);
    let (tool, is_error, content) = &rows[0];
    assert_eq!(tool, "mcp__fixture__crash");
    assert!(
        *is_error
            && content.contains("MCP call crash on fixture failed")
            && content.contains("it is being restarted"),
        "{rows:?}"
    );
    c.mcp_until("fixture  connected (3 tools)");
    assert_eq!(lines(&d.join("started.log")).len(), 2);
}

const SUBAGENT_SCRIPT: &str = r#"
[[turns]]
[[turns.tool_calls]]
id = "d1"
name = "delegate_task"
input = { task = "echo through the fixture server" }
[[turns]]
[[turns.tool_calls]]
id = "b1"
name = "bash"
input = { command = "true" }
[[turns]]
[[turns.tool_calls]]
id = "e1"
name = "mcp__fixture__echo"
input = { text = "from the child" }
[[turns]]
text = "The sub-agent echoed."
[[turns]]
text = "Delegated the echo."
"#;

#[test]
fn a_sub_agent_started_before_its_server_connected_calls_its_tools_once_it_is_up() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let gate = setup(d, SUBAGENT_SCRIPT);
    let _daemon = start_daemon(d);
    let mut c = Client::open(d);
    writeln!(c.wr, "{}", json!({"type": "prompt", "text": "delegate"})).unwrap();
    // The child's first round asks to run `bash`; left unanswered, it holds the child, which
    // was built while the server's gate was still shut.
    let asked = loop {
        let mut line = String::new();
        c.rd.read_line(&mut line).unwrap();
        assert!(!line.is_empty(), "the daemon closed");
        let m: Value = serde_json::from_str(&line).unwrap();
        if m["type"] == "approval_request" {
            break m;
        }
    };
    assert_eq!(asked["tool_name"], "bash", "{asked}");
    assert!(!d.join("started.log").exists(), "the server started early");

    std::fs::write(&gate, "").unwrap();
    Client::open(d).mcp_until("fixture  connected (3 tools)");
    let answer = json!({"type": "approval_response",
        "approval_id": asked["approval_id"], "decision": "y"});
    writeln!(c.wr, "{answer}").unwrap();
    let seen = c.until("result");
    assert_eq!(
        seen.last().unwrap()["text"],
        "Delegated the echo.",
        "{seen:?}"
    );

    assert_eq!(
        lines(&d.join("calls.log")).len(),
        1,
        "the child never called echo"
    );
    let db = d.join("home").join("timeline.db");
    let child = completed(&db, &format!("{}.sub1", c.session));
    assert_eq!(
        child.last(),
        Some(&(
            "mcp__fixture__echo".to_string(),
            false,
            "echo: from the child".to_string()
        )),
        "{child:?}"
    );
    let parent = completed(&db, &c.session);
    assert!(
        parent.iter().all(|(_, is_error, _)| !is_error),
        "{parent:?}"
    );
}
