//! A Claude Code user's files, unchanged, in GEODE: `.claude/settings.json` hooks whose scripts
//! read `tool_name: "Bash"`, `tool_input.command` and `tool_input.file_path` (in `geode exec`
//! against a provider on loopback, the REPL in a terminal, and the daemon with a thin client),
//! `.claude/skills`, and a project's `.mcp.json` servers, which start only once it is trusted.

use std::io::Write;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::common::geode_in as geode;

/// A Claude Code project's settings: a Bash guard and an edit logger, beside keys and an event
/// GEODE has no use for.
const SETTINGS: &str = r#"{
  "permissions": {"allow": ["Bash(npm test)"], "deny": []},
  "hooks": {
    "PreToolUse": [
      {"matcher": "Bash",
       "hooks": [{"type": "command", "command": "python3 \"$CLAUDE_PROJECT_DIR\"/.claude/hooks/no_rm.py", "timeout": 10}]}
    ],
    "PostToolUse": [
      {"matcher": "Edit|MultiEdit|Write",
       "hooks": [{"type": "command", "command": "sh .claude/hooks/log_edits.sh"}]}
    ],
    "Notification": [
      {"hooks": [{"type": "command", "command": "notify-send 'Claude needs you'"}]}
    ]
  }
}"#;

/// The guard as Claude Code's documentation writes one: JSON on stdin, exit 2 and a reason on
/// stderr to block.
const NO_RM: &str = r#"import json
import sys

data = json.load(sys.stdin)
if data.get("tool_name") == "Bash":
    command = data.get("tool_input", {}).get("command", "")
    if command.startswith("rm "):
        print(f"Blocked: rm is not allowed here ({command})", file=sys.stderr)
        sys.exit(2)
sys.exit(0)
"#;

/// A POSIX sh hook without jq: the event's name, tool and `tool_input.file_path`, one line per
/// edit.
const LOG_EDITS: &str = r#"#!/bin/sh
input=$(cat)
event=$(printf '%s' "$input" | sed -n 's/.*"hook_event_name":"\([A-Za-z]*\)".*/\1/p')
tool=$(printf '%s' "$input" | sed -n 's/.*"tool_name":"\([A-Za-z]*\)".*/\1/p')
file=$(printf '%s' "$input" | sed -n 's/.*"file_path":"\([^"]*\)".*/\1/p')
echo "$event $tool $file" >> edits.log
"#;

/// A model that tries `rm keep.txt`, then edits notes.txt.
const RM_THEN_EDIT: &str = r#"
[[turns]]
text = "Tidying up."
[[turns.tool_calls]]
id = "b1"
name = "bash"
input = { command = "rm keep.txt" }
[[turns.tool_calls]]
id = "e1"
name = "edit_file"
input = { path = "notes.txt", old_string = "draft", new_string = "final" }
[[turns]]
text = "The rm was refused; notes.txt is final."
"#;

const REFUSAL: &str = "Blocked: rm is not allowed here (rm keep.txt)";

/// A project in `d` with the files the turn touches, the hook scripts, and `settings` at
/// `settings_at` (relative to `d`).
fn claude_project(d: &Path, settings_at: &str) {
    std::fs::create_dir_all(d.join(".claude/hooks")).unwrap();
    std::fs::write(d.join(".claude/hooks/no_rm.py"), NO_RM).unwrap();
    std::fs::write(d.join(".claude/hooks/log_edits.sh"), LOG_EDITS).unwrap();
    let settings = d.join(settings_at);
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    std::fs::write(settings, SETTINGS).unwrap();
    std::fs::write(d.join("keep.txt"), "kept").unwrap();
    std::fs::write(d.join("notes.txt"), "a draft\n").unwrap();
    std::fs::write(d.join("script.toml"), RM_THEN_EDIT).unwrap();
}

/// The hooks ran as a Claude Code user's would: the rm refused, the edit made and seen with
/// Claude Code's tool name and its absolute `file_path`.
fn assert_hooks_ran(d: &Path) {
    assert!(d.join("keep.txt").exists(), "the refused rm ran");
    assert_eq!(
        std::fs::read_to_string(d.join("notes.txt")).unwrap(),
        "a final\n"
    );
    let notes = d.canonicalize().unwrap().join("notes.txt");
    let log = std::fs::read_to_string(d.join("edits.log")).unwrap_or_default();
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        [format!("PostToolUse Edit {}", notes.display())],
        "the PostToolUse hook did not see the edit as Claude Code names it"
    );
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

// --- geode exec ------------------------------------------------------------------------------

/// Serves `bodies` as Anthropic SSE replies, one per request, on loopback.
fn anthropic(bodies: Vec<String>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut bodies = bodies.into_iter();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            super::providers::read_request(&stream);
            let body = bodies.next().unwrap_or_default();
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes());
        }
    });
    url
}

/// One streamed Anthropic message of `blocks` (each with its one delta).
fn message(blocks: &[(Value, Value)], stop: &str) -> String {
    let mut events = vec![json!({"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "content": [],
        "model": "claude-sonnet-5", "usage": {"input_tokens": 100, "output_tokens": 1}}})];
    for (i, (start, delta)) in blocks.iter().enumerate() {
        events.push(json!({"type": "content_block_start", "index": i, "content_block": start}));
        events.push(json!({"type": "content_block_delta", "index": i, "delta": delta}));
        events.push(json!({"type": "content_block_stop", "index": i}));
    }
    events.push(
        json!({"type": "message_delta", "delta": {"stop_reason": stop},
                       "usage": {"output_tokens": 20}}),
    );
    events.push(json!({"type": "message_stop"}));
    super::providers::sse(&events)
}

fn tool_use(id: &str, name: &str, input: Value) -> (Value, Value) {
    (
        json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
        json!({"type": "input_json_delta", "partial_json": input.to_string()}),
    )
}

/// `geode exec --hooks .claude/settings.json` against Anthropic's wire format on loopback: the
/// settings file loads as it is, the guard's stderr is what the model reads as the Bash call's
/// result (in the request GEODE sends next), and the edit hook sees `file_path`.
#[test]
fn exec_runs_a_claude_code_settings_file_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    claude_project(d, ".claude/settings.json");
    let calls = message(
        &[
            tool_use("toolu_rm", "bash", json!({"command": "rm keep.txt"})),
            tool_use(
                "toolu_edit",
                "edit_file",
                json!({"path": "notes.txt", "old_string": "draft", "new_string": "final"}),
            ),
        ],
        "tool_use",
    );
    let done = message(
        &[(
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": "The rm was refused; notes.txt is final."}),
        )],
        "end_turn",
    );
    let url = anthropic(vec![calls, done]);
    let out = geode(d)
        .args([
            "exec",
            "--model",
            "anthropic:claude-sonnet-5",
            "--allow",
            "dangerous",
            "--no-timeline",
            "--record",
            "rec",
            "--hooks",
            ".claude/settings.json",
            "tidy up",
        ])
        .env("ANTHROPIC_BASE_URL", &url)
        .env("ANTHROPIC_API_KEY", super::providers::KEY)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("hooks.Notification: GEODE has no such event"),
        "{}",
        stderr(&out)
    );
    assert_hooks_ran(d);

    // The second request carries the guard's stderr as the Bash call's result.
    let mut recorded: Vec<_> = std::fs::read_dir(d.join("rec"))
        .unwrap()
        .map(|f| f.unwrap().path())
        .collect();
    recorded.sort();
    assert_eq!(recorded.len(), 2, "{recorded:?}");
    let second: Value =
        serde_json::from_str(&std::fs::read_to_string(&recorded[1]).unwrap()).unwrap();
    let results: Vec<&Value> = second["request"]["body"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .filter(|b| b["type"] == "tool_result")
        .collect();
    let rm = results
        .iter()
        .find(|b| b["tool_use_id"] == "toolu_rm")
        .unwrap_or_else(|| panic!("no result of the rm call in {results:?}"));
    assert_eq!(rm["is_error"], true, "{rm}");
    assert!(rm.to_string().contains(REFUSAL), "{rm}");
}

/// A project's `.claude/settings.json` needs the project trusted, as its other commands do.
#[test]
fn a_project_s_claude_code_hooks_run_only_once_it_is_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    claude_project(d, ".claude/settings.json");
    let exec = || {
        geode(d)
            .args([
                "exec",
                "--model",
                "scripted:script.toml",
                "--allow",
                "dangerous",
                "--no-timeline",
                "tidy up",
            ])
            .output()
            .unwrap()
    };
    let out = exec();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("Claude Code hooks") && stderr(&out).contains("geode trust"),
        "{}",
        stderr(&out)
    );
    assert!(
        !d.join("keep.txt").exists(),
        "an untrusted project's hook ran"
    );
    assert!(
        !d.join("edits.log").exists(),
        "an untrusted project's hook ran"
    );

    std::fs::write(d.join("keep.txt"), "kept").unwrap();
    std::fs::write(d.join("notes.txt"), "a draft\n").unwrap();
    let out = geode(d).arg("trust").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains(".claude/settings.json sha256"), "{said}");
    let out = exec();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_hooks_ran(d);
}

/// A settings file that is not JSON (or not in its shape) stops the start, naming the file and
/// the field.
#[test]
fn a_malformed_settings_file_is_named_with_its_field() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join(".claude")).unwrap();
    std::fs::write(
        d.join(".claude/settings.json"),
        r#"{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": ["ls"]}]}]}}"#,
    )
    .unwrap();
    std::fs::write(d.join("script.toml"), "[[turns]]\ntext = \"hi\"\n").unwrap();
    let out = geode(d)
        .args([
            "exec",
            "--model",
            "scripted:script.toml",
            "--hooks",
            ".claude/settings.json",
            "hi",
        ])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert!(
        err.contains(".claude/settings.json")
            && err.contains("hooks.PreToolUse[0].hooks[0].command"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

// --- the REPL ----------------------------------------------------------------------------------

/// The user's `~/.claude/settings.json` (`$CLAUDE_CONFIG_DIR`) in the REPL, in a terminal.
#[test]
fn the_repl_runs_the_user_s_claude_code_hooks_in_a_terminal() {
    use super::repl::in_terminal;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    claude_project(d, "claude-home/settings.json");
    std::fs::create_dir_all(d.join("home")).unwrap();
    std::fs::write(d.join("home/config.toml"), "hitl = \"auto\"\n").unwrap();
    let mut cmd = super::common::geode_bin();
    cmd.args(["--local", "--model", "scripted:script.toml"])
        .current_dir(d)
        .env("GEODE_HOME", d.join("home"))
        .env("CLAUDE_CONFIG_DIR", d.join("claude-home"))
        .env_remove("GEODE_MODEL");
    let (mut child, mut master, mut screen) = in_terminal(cmd);
    screen.wait_for("geode> ");
    screen.clear();
    master.write_all(b"tidy up\r").unwrap();
    screen.wait_for("The rm was refused; notes.txt is final.");
    assert!(screen.text.contains(REFUSAL), "{}", screen.text);
    screen.wait_for("geode> ");
    screen.clear();
    master.write_all(b"/hooks\r").unwrap();
    screen.wait_for("PreToolUse Bash: command: python3");
    screen.wait_for("geode> ");
    master.write_all(b"/quit\r").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the REPL did not quit");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_hooks_ran(d);
}

// --- the daemon ------------------------------------------------------------------------------

/// A trusted project's `.claude/settings.json` in `geode serve`, driven by a thin client.
#[test]
fn the_daemon_runs_a_trusted_project_s_claude_code_hooks() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    claude_project(d, ".claude/settings.json");
    std::fs::create_dir_all(d.join("home")).unwrap();
    std::fs::write(d.join("home/config.toml"), "hitl = \"auto\"\n").unwrap();
    let out = geode(d).arg("trust").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let daemon = super::daily::Daemon::start(d, RM_THEN_EDIT, &[]);
    let mut client = geode(d)
        .arg("--connect")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    client
        .stdin
        .take()
        .unwrap()
        .write_all(b"tidy up\n/quit\n")
        .unwrap();
    let out = client.wait_with_output().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}{}", stderr(&out));
    assert!(shown.contains(REFUSAL), "{shown}");
    assert!(
        shown.contains("The rm was refused; notes.txt is final."),
        "{shown}"
    );
    drop(daemon);
    assert_hooks_ran(d);
}

// --- skills ------------------------------------------------------------------------------------

#[test]
fn claude_code_skill_folders_are_found_beside_geode_s() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let skill = |root: &Path, name: &str, description: &str| {
        let folder = root.join(name);
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(
            folder.join("SKILL.md"),
            format!("---\nname: {name}\ndescription: {description}\nallowed-tools: Read, Grep\n---\n\nDo it.\n"),
        )
        .unwrap();
    };
    skill(&d.join("claude-home/skills"), "review", "Review a change.");
    skill(&d.join(".claude/skills"), "release", "Cut a release.");
    // GEODE's own project folder shadows Claude Code's of the same name.
    skill(&d.join(".claude/skills"), "lint", "Claude's lint.");
    skill(&d.join(".geode/skills"), "lint", "GEODE's lint.");
    let out = geode(d)
        .args(["skills", "list"])
        .env("CLAUDE_CONFIG_DIR", d.join("claude-home"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let listed = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 4, "{listed}");
    assert!(lines[0].starts_with("lint  GEODE's lint."), "{listed}");
    assert!(lines[1].starts_with("release  Cut a release."), "{listed}");
    assert!(lines[2].starts_with("review  Review a change."), "{listed}");
    assert!(lines[3].starts_with("skills hash "), "{listed}");
    assert!(
        stderr(&out).contains("skill lint in") && stderr(&out).contains("shadows"),
        "{}",
        stderr(&out)
    );
}

// --- .mcp.json ---------------------------------------------------------------------------------

const CALLS_ECHO: &str = r#"
[[turns]]
text = "Calling the fixture."
[[turns.tool_calls]]
id = "e1"
name = "mcp__fixture__echo"
input = { text = "hi from geode" }
[[turns]]
text = "Called the fixture, unless the call failed."
"#;

#[test]
fn a_project_s_mcp_json_servers_start_only_once_it_is_trusted() {
    use super::mcp::{completed, fixture_server, lines};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mcp_json = json!({"mcpServers": {"fixture": {
        "command": fixture_server(),
        "args": [],
        "env": {
            "FIXTURE_STARTED": d.join("started.log"),
            "FIXTURE_CALLS": "${GEODE_E2E_CALLS_LOG:-".to_string()
                + &d.join("calls.log").display().to_string() + "}",
        }
    }}});
    std::fs::write(d.join(".mcp.json"), mcp_json.to_string()).unwrap();
    std::fs::write(d.join("script.toml"), CALLS_ECHO).unwrap();
    let exec = |session: &str| {
        geode(d)
            .args([
                "exec",
                "--model",
                "scripted:script.toml",
                "--allow",
                "dangerous",
                "--timeline",
                "tl.db",
                "--session-id",
                session,
                "call it",
            ])
            .output()
            .unwrap()
    };

    let out = exec("untrusted");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        !d.join("started.log").exists(),
        "an untrusted server started"
    );
    let rows = completed(&d.join("tl.db"), "untrusted");
    assert!(
        rows[0].2.contains("no tool named mcp__fixture__echo"),
        "{rows:?}"
    );
    let listed = geode(d).args(["mcp", "list"]).output().unwrap();
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(
        text.contains("fixture  untrusted") && text.contains(".mcp.json"),
        "{text}"
    );
    assert!(!d.join("started.log").exists());

    let out = geode(d).arg("trust").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = exec("trusted");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(lines(&d.join("started.log")).len(), 1);
    assert_eq!(
        lines(&d.join("calls.log")).len(),
        1,
        "the ${{VAR:-default}} env"
    );
    let rows = completed(&d.join("tl.db"), "trusted");
    assert_eq!(rows[0].2, "echo: hi from geode", "{rows:?}");
}
