//! Permission modes switched during a session, as in Claude Code: Shift-Tab on an empty line
//! (or `/mode`) goes default -> accept-edits (file edits without asking) -> plan (read-only).

use std::io::Write;

use super::repl::in_terminal;

const SCRIPT: &str = r#"
[[turns]]
[[turns.tool_calls]]
id = "w1"
name = "write_file"
input = { path = "edited.txt", content = "accepted" }
[[turns]]
text = "Wrote it."
[[turns]]
[[turns.tool_calls]]
id = "w2"
name = "write_file"
input = { path = "planned.txt", content = "never" }
[[turns]]
text = "Could not."
"#;

#[test]
fn shift_tab_switches_to_accept_edits_then_plan() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("script.toml"), SCRIPT).unwrap();
    let mut cmd = super::common::geode_in(d);
    cmd.args(["--local", "--model", "scripted:script.toml"]);
    let (_child, mut master, mut screen) = in_terminal(cmd);
    screen.wait_for("geode> ");
    master.write_all(b"\x1b[Z").unwrap();
    screen.wait_for("mode accept-edits: file edits run without asking");
    screen.wait_for("geode> ");
    master.write_all(b"write it\r").unwrap();
    screen.wait_for("Wrote it.");
    screen.wait_for("geode> ");
    assert!(!screen.text.contains("Allow write_file"), "{}", screen.text);
    assert_eq!(
        std::fs::read_to_string(d.join("edited.txt")).unwrap(),
        "accepted"
    );

    master.write_all(b"\x1b[Z").unwrap();
    screen.wait_for("mode plan: read-only");
    screen.wait_for("geode> ");
    master.write_all(b"write the next\r").unwrap();
    screen.wait_for("plan mode: only read-only calls run");
    assert!(!d.join("planned.txt").exists());
    master.write_all(b"/quit\r").unwrap();
}
