//! `/rewind` in the REPL on a pseudo-terminal (issue 39): a turn's edit and a later turn's
//! sandboxed shell command changed a file and made another; `/rewind 2` puts back what the
//! command did and keeps the edit, and `geode rewind --to 1` on the stopped session takes the
//! edit back too, with the conversation.

use std::io::Write;
use std::path::Path;

use super::repl::in_terminal;

const ORIGINAL: &str = "fn main() {\n    let x = 1;\n}\n";

/// Turn 1 edits `x = 1` into `x = 2` (the REPL tests' edit fixture); turn 2's command makes
/// it `x = 3` and creates made.txt.
fn fixture(d: &Path) {
    super::repl::edit_fixture(d);
    let mut script = std::fs::read_to_string(d.join("script.toml")).unwrap();
    script.push_str(
        r#"
[[turns]]
text = "Running it."
[[turns.tool_calls]]
id = "b1"
name = "bash"
input = { command = "sed -i 's/x = 2/x = 3/' lib.rs && echo made > made.txt" }
[[turns]]
text = "Ran it."
"#,
    );
    std::fs::write(d.join("script.toml"), script).unwrap();
}

fn lib(d: &Path) -> String {
    std::fs::read_to_string(d.join("lib.rs")).unwrap()
}

#[test]
fn rewind_puts_back_what_an_edit_and_a_sandboxed_command_changed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fixture(d);
    let mut cmd = super::common::geode_in(d);
    cmd.args(["--local", "--model", "scripted:script.toml"]);
    let (mut child, mut master, mut screen) = in_terminal(cmd);
    screen.wait_for("geode> ");
    for (prompt, done) in [("edit it\r", "Edited."), ("run it\r", "Ran it.")] {
        screen.clear();
        master.write_all(prompt.as_bytes()).unwrap();
        screen.wait_for("[y/n/a, n: why]");
        master.write_all(b"y\r").unwrap();
        screen.wait_for(done);
        screen.wait_for("geode> ");
    }
    assert_eq!(lib(d), "fn main() {\n    let x = 3;\n}\n");
    assert!(d.join("made.txt").exists());

    screen.clear();
    master.write_all(b"/rewind\r").unwrap();
    screen.wait_for("geode> ");
    assert!(
        screen.text.contains("\"edit it\"")
            && screen.text.contains("\"run it\"")
            && screen.text.contains("2 files changed: lib.rs, made.txt"),
        "{}",
        screen.text
    );

    screen.clear();
    master.write_all(b"/rewind 2\r").unwrap();
    screen.wait_for("back before turn 2");
    screen.wait_for("geode> ");
    assert_eq!(lib(d), "fn main() {\n    let x = 2;\n}\n");
    assert!(!d.join("made.txt").exists(), "{}", screen.text);
    screen.clear();
    master.write_all(b"/status\r").unwrap();
    screen.wait_for("system prompt ");
    assert!(screen.text.contains("turns 1"), "{}", screen.text);
    screen.wait_for("geode> ");
    master.write_all(b"/quit\r").unwrap();
    assert!(child.0.wait().unwrap().success());

    let out = super::common::geode_in(d)
        .args(["rewind", "--last", "--to", "1"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 put back: lib.rs"), "{stdout}");
    assert_eq!(lib(d), ORIGINAL);
    let listed = super::common::geode_in(d)
        .args(["rewind", "--last"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("no turn to go back to"),
        "{listed:?}"
    );
}
