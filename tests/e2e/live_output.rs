//! Live `bash` output as a person (or a script) watches it: a scripted model runs a command
//! that prints a marker, then waits for a file only the test creates, then prints a second
//! marker. The first marker must be seen before the file exists, so it came while the command
//! still ran. The markers are computed by the shell (`first-$((40+2))` prints `first-42`), so
//! the command line itself, shown with the call and in the approval, never contains them.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

use super::repl::{Repl, in_terminal};

const SCRIPT: &str = r#"
[[turns]]
text = "Running it."
[[turns.tool_calls]]
id = "b1"
name = "bash"
input = { command = "echo first-$((40+2)); while [ ! -e release ]; do sleep 0.05; done; echo second-$((50+5))" }
[[turns]]
text = "All done."
"#;

fn release(d: &Path) {
    assert!(
        !d.join("release").exists(),
        "the command was released before the first marker was seen"
    );
    std::fs::write(d.join("release"), "").unwrap();
}

/// The next `--json` event of `lines` that `pick` accepts (others are skipped).
fn next_event(lines: &mpsc::Receiver<String>, pick: impl Fn(&Value) -> bool) -> Value {
    loop {
        let line = lines
            .recv_timeout(Duration::from_secs(20))
            .expect("an event line within 20 s");
        let event: Value = serde_json::from_str(&line).unwrap();
        if pick(&event) {
            return event;
        }
    }
}

fn output_with(event: &Value, marker: &str) -> bool {
    event["type"] == "tool_output_delta" && event["text"].as_str().unwrap().contains(marker)
}

#[test]
fn exec_json_streams_tool_output_while_the_command_runs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("script.toml"), SCRIPT).unwrap();
    let mut cmd = super::common::geode_in(d);
    cmd.args(["exec", "--json", "--model", "scripted:script.toml"])
        .args(["--allow", "dangerous", "--no-checkpoint", "run it"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = Repl(cmd.spawn().unwrap());
    let stdout = child.0.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });

    let first = next_event(&lines, |e| output_with(e, "first-42"));
    release(d);
    assert_eq!(first["call_id"], "b1");
    assert!(
        first["at"].as_str().is_some_and(|at| at.ends_with('Z')),
        "{first}"
    );
    next_event(&lines, |e| output_with(e, "second-55"));
    let ended = next_event(&lines, |e| e["type"] == "tool_ended");
    assert_eq!(
        ended["output"], "first-42\nsecond-55\n[exit code 0]\n",
        "the result is what it always was"
    );
    next_event(&lines, |e| e["type"] == "turn_ended");
    assert!(child.0.wait().unwrap().success());
}

#[test]
fn the_repl_shows_a_command_s_output_while_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("script.toml"), SCRIPT).unwrap();
    let mut cmd = super::common::geode_in(d);
    cmd.args(["--local", "--model", "scripted:script.toml"]);
    let (_child, mut master, mut screen) = in_terminal(cmd);
    screen.wait_for("geode> ");
    master.write_all(b"run it\r").unwrap();
    screen.wait_for("Allow bash (dangerous)? [y/n/a, n: why]");
    screen.clear();
    master.write_all(b"y\r").unwrap();
    // Dimmed and indented under the call, before the command could have ended.
    screen.wait_for("\x1b[2m    first-42\x1b[0m");
    release(d);
    screen.wait_for("    second-55");
    screen.wait_for("-- natural, 2 rounds, 1 tool calls");
    assert!(screen.text.contains("All done."), "{}", screen.text);
    screen.wait_for("geode> ");
    master.write_all(b"/quit\r").unwrap();
}
