//! A person's shell commands run in GEODE's sandbox by default (issue 39): in the REPL, on a
//! pseudo-terminal, a command the person approves writes its workspace but not a folder beside
//! it and cannot reach a server on the host; `--sandbox off` runs the same command unconfined;
//! a call asking to escalate runs outside only after the person approves it as such.

use std::io::Write;
use std::net::TcpListener;
use std::path::Path;

use super::repl::in_terminal;

/// A scripted turn running `command` in bash (`escalate` set when given).
fn script(command: &str, escalate: Option<&str>) -> String {
    let escalate = escalate
        .map(|why| format!(", escalate = {why:?}"))
        .unwrap_or_default();
    format!(
        "[[turns]]\ntext = \"Running it.\"\n[[turns.tool_calls]]\nid = \"b1\"\nname = \"bash\"\n\
         input = {{ command = {command:?}{escalate} }}\n[[turns]]\ntext = \"Done.\"\n"
    )
}

/// A folder outside /tmp (which the sandbox replaces with its own), as another project is: in
/// /var/tmp, since a fresh clone's target folder may itself lie under /tmp.
fn beside() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("geode-beside")
        .tempdir_in("/var/tmp")
        .unwrap()
}

/// The REPL in `d`, one prompt, the call approved; returns the screen text.
fn run_once(d: &Path, extra: &[&str], approval_shows: &str) -> String {
    let mut cmd = super::common::geode_in(d);
    cmd.args(["--local", "--model", "scripted:script.toml"])
        .args(extra);
    let (_child, mut master, mut screen) = in_terminal(cmd);
    screen.wait_for("geode> ");
    master.write_all(b"run it\r").unwrap();
    screen.wait_for(approval_shows);
    master.write_all(b"y\r").unwrap();
    screen.wait_for("Done.");
    screen.wait_for("geode> ");
    master.write_all(b"/quit\r").unwrap();
    screen.text.clone()
}

fn reached(listener: &TcpListener) -> bool {
    listener.set_nonblocking(true).unwrap();
    listener.accept().is_ok()
}

#[test]
fn repl_commands_write_only_the_workspace_and_reach_no_network_unless_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let other = beside();
    let escaped = other.path().join("escaped");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let command = format!(
        "echo in > inside; echo out > {}; (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null; \
         echo net=$?",
        escaped.display()
    );
    std::fs::write(d.join("script.toml"), script(&command, None)).unwrap();

    let text = run_once(d, &[], "Allow bash (dangerous)?");
    assert!(d.join("inside").is_file(), "{text}");
    assert!(!escaped.exists(), "{text}");
    assert!(text.contains("Read-only file system"), "{text}");
    assert!(text.contains("net=1"), "{text}");
    assert!(!reached(&listener));

    // The opt-out: the same command, unconfined.
    std::fs::remove_file(d.join("inside")).unwrap();
    let text = run_once(d, &["--sandbox", "off"], "Allow bash (dangerous)?");
    assert!(d.join("inside").is_file() && escaped.is_file(), "{text}");
    assert!(text.contains("net=0"), "{text}");
    assert!(reached(&listener));
}

#[test]
fn an_escalated_call_runs_outside_only_as_approved() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let other = beside();
    let escaped = other.path().join("escalated");
    let command = format!("echo out > {}", escaped.display());
    std::fs::write(
        d.join("script.toml"),
        script(&command, Some("writes the shared cache")),
    )
    .unwrap();
    // The approval names the escalation and its reason.
    let text = run_once(d, &[], "runs OUTSIDE the sandbox");
    assert!(text.contains("writes the shared cache"), "{text}");
    assert!(escaped.is_file(), "{text}");
}

/// A repository cannot unconfine the commands of whoever opens it.
#[test]
fn a_project_cannot_turn_the_sandbox_off() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join(".geode")).unwrap();
    std::fs::write(d.join(".geode/config.toml"), "sandbox = \"off\"\n").unwrap();
    let o = super::common::geode_in(d)
        .args(["exec", "--model", "nop", "--no-checkpoint", "hi"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("a project's configuration cannot turn the sandbox off"),
        "{err}"
    );
}
