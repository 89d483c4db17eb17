//! GEODE as an MCP client, with real processes (geode as the server is in mcp_server.rs):
//! `geode exec` uses a real rmcp fixture server
//! (harness/examples/mcp_fixture_server.rs) declared in config files, with the trust check on
//! project files and the resource-policy rule.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use geode_runtime::ids::SessionId;
use geode_runtime::store::timeline::{SessionTimeline, TimelineEvent};
use serde_json::{Value, json};

pub(super) const HELLO: &str = r#"
[[turns]]
text = "Hello from the scripted model."
"#;

pub(super) const ASKS_FOR_BASH: &str = r#"
[[turns]]
text = "Running a shell."
[[turns.tool_calls]]
id = "b1"
name = "bash"
input = { command = "touch pwned.txt" }
[[turns]]
text = "No shell here: bash could not run."
"#;

const CALLS_FIXTURE: &str = r#"
[[turns]]
text = "Calling the fixture."
[[turns.tool_calls]]
id = "e1"
name = "mcp__fixture__echo"
input = { text = "hi from geode" }
[[turns.tool_calls]]
id = "a1"
name = "mcp__fixture__add"
input = { a = 1, b = 2 }
[[turns]]
text = "Echoed; the add call failed."
"#;

pub(super) use super::common::geode_in as geode;
use super::mcp_server::HttpServer;

fn run(dir: &Path, args: &[&str]) -> Output {
    geode(dir).args(args).output().unwrap()
}

pub(super) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The fixture server binary, built once per test process: a filtered run (`--test e2e`)
/// builds no examples, and one built before the fixture last changed would be stale (cargo
/// makes it a no-op when it is current).
pub(super) fn fixture_server() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let bin = Path::new(env!("CARGO_BIN_EXE_geode"))
            .parent()
            .unwrap()
            .join("examples")
            .join("mcp_fixture_server");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "-p",
                "geode-harness",
                "--example",
                "mcp_fixture_server",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap();
        assert!(status.success(), "building the fixture server failed");
        assert!(bin.exists(), "{} missing", bin.display());
        bin
    })
}

/// A `[mcp.servers.NAME]` table running the fixture, logging starts and calls into `dir`.
fn fixture_table(dir: &Path, name: &str, policy: Option<&str>) -> String {
    let mut t = format!(
        "[mcp.servers.{name}]\ncommand = {:?}\nenv = {{ FIXTURE_STARTED = {:?}, FIXTURE_CALLS = {:?} }}\n",
        fixture_server().display().to_string(),
        dir.join("started.log").display().to_string(),
        dir.join("calls.log").display().to_string(),
    );
    if let Some(p) = policy {
        t.push_str(&format!("[mcp.servers.{name}.policy]\n{p}\n"));
    }
    t
}

const WRITE_POLICY: &str =
    "safety = \"write\"\nresources = [\"fixture:db\"]\neffectful = true\ntools = [\"echo\"]";

pub(super) fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|s| s.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

/// `(tool, is_error, content)` of every tool.completed row of a session.
pub(super) fn completed(db: &Path, session: &str) -> Vec<(String, bool, String)> {
    let tl = SessionTimeline::open(db).unwrap();
    tl.rows(&SessionId::new(session))
        .unwrap()
        .into_iter()
        .filter_map(|r| match r.event {
            TimelineEvent::ToolCompleted {
                tool,
                is_error,
                content,
                ..
            } => Some((tool, is_error, content)),
            _ => None,
        })
        .collect()
}

fn exec_fixture_script(dir: &Path, session: &str, allow: &str) -> Output {
    std::fs::write(dir.join("script.toml"), CALLS_FIXTURE).unwrap();
    run(
        dir,
        &[
            "exec",
            "--model",
            "scripted:script.toml",
            "--allow",
            allow,
            "--timeline",
            "tl.db",
            "--session-id",
            session,
            "call the fixture",
        ],
    )
}

// --- GEODE as an MCP client --------------------------------------------------------------

#[test]
fn exec_calls_a_configured_server_through_the_pipeline() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("home")).unwrap();
    std::fs::write(
        d.join("home").join("config.toml"),
        fixture_table(d, "fixture", Some(WRITE_POLICY)),
    )
    .unwrap();

    // Approval comes before the call: without --allow write the write-level tool is refused
    // and the server never sees a call.
    let out = exec_fixture_script(d, "mcp-safe", "safe");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(lines(&d.join("started.log")).len(), 1, "the server starts");
    assert!(lines(&d.join("calls.log")).is_empty(), "a refused call ran");
    let rows = completed(&d.join("tl.db"), "mcp-safe");
    assert_eq!(rows[0].0, "mcp__fixture__echo");
    assert!(
        rows[0].1 && rows[0].2.contains("denied at approval"),
        "{rows:?}"
    );

    let out = exec_fixture_script(d, "mcp-write", "write");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "Echoed; the add call failed.");
    let calls = lines(&d.join("calls.log"));
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(calls[0].starts_with("echo "), "{calls:?}");
    let rows = completed(&d.join("tl.db"), "mcp-write");
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(
        rows[0],
        (
            "mcp__fixture__echo".to_string(),
            false,
            "echo: hi from geode".to_string()
        )
    );
    // `add` is not in the policy's tools list: not in the plan at all.
    assert_eq!(rows[1].0, "mcp__fixture__add");
    assert!(
        rows[1].1 && rows[1].2.contains("no tool named mcp__fixture__add"),
        "{rows:?}"
    );

    let out = run(d, &["mcp", "list"]);
    let text = stdout(&out);
    assert!(text.contains("fixture  connected"), "{text}");
    assert!(text.contains("mcp__fixture__echo  callable"), "{text}");
    assert!(
        text.contains("mcp__fixture__add  not callable: not in the server policy's tools list"),
        "{text}"
    );
}

#[test]
fn project_servers_start_only_in_a_trusted_project() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join(".geode")).unwrap();
    let project_cfg = d.join(".geode").join("config.toml");
    std::fs::write(
        &project_cfg,
        fixture_table(d, "fixture", Some(WRITE_POLICY)),
    )
    .unwrap();

    // Untrusted: never started, the tool is not there, and the user is told what to do.
    let out = exec_fixture_script(d, "p1", "write");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        !d.join("started.log").exists(),
        "an untrusted server started"
    );
    let rows = completed(&d.join("tl.db"), "p1");
    assert!(
        rows[0].2.contains("no tool named mcp__fixture__echo"),
        "{rows:?}"
    );
    let text = stdout(&run(d, &["mcp", "list"]));
    assert!(
        text.contains("untrusted") && text.contains("geode trust"),
        "{text}"
    );
    assert!(!d.join("started.log").exists());
    let show = stdout(&run(d, &["trust", "--show"]));
    assert!(show.starts_with("untrusted"), "{show}");

    // Trusted: it starts and is called.
    let out = run(d, &["trust"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("trusted"), "{}", stdout(&out));
    let out = exec_fixture_script(d, "p2", "write");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(lines(&d.join("started.log")).len(), 1);
    assert_eq!(lines(&d.join("calls.log")).len(), 1);
    let rows = completed(&d.join("tl.db"), "p2");
    assert_eq!(rows[0].2, "echo: hi from geode", "{rows:?}");

    // Edited: untrusted again until `geode trust` runs anew.
    let mut text = std::fs::read_to_string(&project_cfg).unwrap();
    text.push_str("# edited\n");
    std::fs::write(&project_cfg, text).unwrap();
    let show = stdout(&run(d, &["trust", "--show"]));
    assert!(
        show.starts_with("changed") && show.contains("geode trust"),
        "{show}"
    );
    let out = exec_fixture_script(d, "p3", "write");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("untrusted again"), "{}", stderr(&out));
    assert_eq!(lines(&d.join("started.log")).len(), 1, "started again");
    assert_eq!(lines(&d.join("calls.log")).len(), 1);
    let rows = completed(&d.join("tl.db"), "p3");
    assert!(rows[0].2.contains("no tool named"), "{rows:?}");

    // Revoked: untrusted.
    run(d, &["trust"]);
    let out = run(d, &["trust", "--revoke"]);
    assert!(stdout(&out).contains("revoked"), "{}", stdout(&out));
    assert!(stdout(&run(d, &["trust", "--show"])).starts_with("untrusted"));
}

#[test]
fn a_server_without_a_policy_is_listed_but_not_callable() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("home")).unwrap();
    std::fs::write(
        d.join("home").join("config.toml"),
        fixture_table(d, "fixture", None),
    )
    .unwrap();
    let out = exec_fixture_script(d, "np", "dangerous");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(lines(&d.join("started.log")).len(), 1, "it is started");
    assert!(lines(&d.join("calls.log")).is_empty(), "but never called");
    let rows = completed(&d.join("tl.db"), "np");
    assert!(
        rows.iter()
            .all(|(_, err, c)| *err && c.contains("no tool named")),
        "{rows:?}"
    );
    let text = stdout(&run(d, &["mcp", "list"]));
    assert!(
        text.contains("mcp__fixture__echo  not callable: server declares no resource policy"),
        "{text}"
    );
}

#[test]
fn daemon_sessions_get_mcp_tools_which_prompt_before_they_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("home")).unwrap();
    write_daemon_setup(d);
    let mut daemon = geode(d)
        .arg("serve")
        .env("GEODE_MODEL", "scripted:script.toml")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stream = connect(&d.join("home").join("cli.sock"));
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut rd = BufReader::new(stream.try_clone().unwrap());
    let mut wr = stream;
    let mut until = |ty: &str| -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let mut line = String::new();
            rd.read_line(&mut line).unwrap();
            let m: Value = serde_json::from_str(&line).unwrap();
            let done = m["type"] == ty;
            seen.push(m);
            if done {
                return seen;
            }
        }
    };
    until("session");
    writeln!(wr, "{}", json!({"type": "command", "name": "mcp"})).unwrap();
    let text = until("command_result").last().unwrap()["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(text.contains("fixture  connected"), "{text}");
    assert!(text.contains("mcp__fixture__echo  callable"), "{text}");

    writeln!(wr, "{}", json!({"type": "prompt", "text": "echo"})).unwrap();
    let seen = until("approval_request");
    let req = seen.last().unwrap().clone();
    assert_eq!(req["tool_name"], "mcp__fixture__echo");
    assert!(
        lines(&d.join("calls.log")).is_empty(),
        "the call ran before approval"
    );
    writeln!(
        wr,
        "{}",
        json!({"type": "approval_response", "approval_id": req["approval_id"], "decision": "y"})
    )
    .unwrap();
    let seen = until("result");
    assert_eq!(seen.last().unwrap()["text"], "Echoed.");
    assert!(
        seen.iter()
            .any(|m| m["type"] == "tool_end" && m["is_error"] == false),
        "{seen:?}"
    );
    assert_eq!(lines(&d.join("calls.log")).len(), 1);

    // The server process lives with the daemon and goes with it.
    let started = lines(&d.join("started.log"));
    assert_eq!(started.len(), 1, "one server for the daemon: {started:?}");
    let pid: i32 = started[0]
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(alive(pid));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    drop(wr);
    drop(rd);
    daemon.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "the MCP server outlived the daemon"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The daemon's home: a read-only MCP tool at HITL 1 (dangerous_only), where MCP tools prompt
/// all the same, and a script that calls it once.
fn write_daemon_setup(d: &Path) {
    std::fs::write(
        d.join("home").join("config.toml"),
        format!(
            "hitl = \"dangerous_only\"\n{}",
            fixture_table(d, "fixture", Some("safety = \"safe\"\ntools = [\"echo\"]"))
        ),
    )
    .unwrap();
    std::fs::write(
        d.join("script.toml"),
        r#"
[[turns]]
text = "Calling the fixture."
[[turns.tool_calls]]
id = "e1"
name = "mcp__fixture__echo"
input = { text = "via the daemon" }
[[turns]]
text = "Echoed."
"#,
    )
    .unwrap();
}

/// A connection to the daemon's socket, once it answers.
pub(super) fn connect(socket: &Path) -> UnixStream {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(s) = UnixStream::connect(socket) {
            return s;
        }
        assert!(Instant::now() < deadline, "the daemon did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `pid` runs (a zombie does not).
pub(super) fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

#[test]
fn geode_calls_geode_over_streamable_http() {
    // The server: `geode mcp --http` on loopback, its own home and script.
    let srv = tempfile::tempdir().unwrap();
    std::fs::write(srv.path().join("script.toml"), HELLO).unwrap();
    let server = HttpServer::start(srv.path(), &["127.0.0.1:0", "--token", "s3cret"]);

    // The client: `geode exec`, whose user config declares that server by URL, its bearer
    // token in an environment variable.
    let cli = tempfile::tempdir().unwrap();
    let d = cli.path();
    std::fs::create_dir_all(d.join("home")).unwrap();
    std::fs::write(
        d.join("home").join("config.toml"),
        format!(
            "[mcp.servers.inner]\nurl = {:?}\ntoken_env = \"INNER_TOKEN\"\n\
             [mcp.servers.inner.policy]\nsafety = \"safe\"\ntools = [\"run_agent\"]\n",
            server.url
        ),
    )
    .unwrap();
    std::fs::write(
        d.join("script.toml"),
        "[[turns]]\n[[turns.tool_calls]]\nid = \"r1\"\nname = \"mcp__inner__run_agent\"\n\
         input = { prompt = \"say hello\" }\n[[turns]]\ntext = \"The inner agent said hello.\"\n",
    )
    .unwrap();
    let out = geode(d)
        .args([
            "exec",
            "--model",
            "scripted:script.toml",
            "--timeline",
            "tl.db",
        ])
        .args(["--session-id", "outer", "ask the inner agent"])
        .env("INNER_TOKEN", "s3cret")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "The inner agent said hello.");
    let rows = completed(&d.join("tl.db"), "outer");
    assert_eq!(rows.len(), 1, "{rows:?}");
    let (tool, is_error, content) = &rows[0];
    assert_eq!(tool, "mcp__inner__run_agent");
    assert!(!is_error, "{content}");
    let answer: Value = serde_json::from_str(content).unwrap();
    assert_eq!(answer["text"], "Hello from the scripted model.");
    assert_eq!(answer["termination_reason"], "natural");

    // Without the token the server refuses the client, and the listing says why.
    let list = geode(d)
        .args(["mcp", "list"])
        .env_remove("INNER_TOKEN")
        .output()
        .unwrap();
    let text = stdout(&list);
    assert!(text.contains("INNER_TOKEN is not set"), "{text}");
    let wrong = geode(d)
        .args(["mcp", "list"])
        .env("INNER_TOKEN", "wrong")
        .output()
        .unwrap();
    let text = stdout(&wrong);
    assert!(!text.contains("inner  connected"), "{text}");
}

/// A stdio server's processes die with geode, even when geode is killed with SIGKILL and
/// the server left something running that never reads stdin (it is in a process group of
/// its own, which the tool-process reaper kills).
#[test]
fn a_stdio_server_s_processes_die_with_geode() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("home")).unwrap();
    let launcher = format!(
        "sleep 300 & echo $! > {}; exec {}",
        d.join("child.pid").display(),
        fixture_server().display()
    );
    std::fs::write(
        d.join("home").join("config.toml"),
        format!("[mcp.servers.fixture]\ncommand = \"bash\"\nargs = [\"-c\", {launcher:?}]\n"),
    )
    .unwrap();
    std::fs::write(
        d.join("script.toml"),
        "[[turns]]\ntext = \"Waiting.\"\n[[turns.tool_calls]]\nid = \"b1\"\nname = \"bash\"\n\
         input = { command = \"touch started; sleep 30\" }\n[[turns]]\ntext = \"Done.\"\n",
    )
    .unwrap();
    let mut geode_process = geode(d)
        .args([
            "exec",
            "--model",
            "scripted:script.toml",
            "--allow",
            "dangerous",
            "wait",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !(d.join("started").exists() && d.join("child.pid").exists()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the session never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let child: i32 = std::fs::read_to_string(d.join("child.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    geode_process.kill().unwrap();
    geode_process.wait().unwrap();
    // Gone, or a zombie waiting for init to reap it.
    let alive = || {
        std::fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next())
                != Some("Z")
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while alive() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let left = alive();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert!(!left, "the MCP server's child outlived geode");
}
