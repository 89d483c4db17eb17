//! `geode` with no arguments, driven in a pseudo-terminal as a person would: a scripted turn with
//! an approval prompt, a slash command, /quit; the greeting above the first prompt; `/resume`'s
//! picker.

use std::fs::File;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The terminal's output so far, read on a thread so the child never blocks on a full pty.
pub(super) struct Screen {
    rx: mpsc::Receiver<Vec<u8>>,
    pub(super) text: String,
}

impl Screen {
    pub(super) fn wait_for(&mut self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.text.contains(needle) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(bytes) => self.text.push_str(&String::from_utf8_lossy(&bytes)),
                Err(_) => panic!("no {needle:?} on the screen:\n{}", self.text),
            }
        }
    }

    /// Wait for the next output, whatever it is.
    pub(super) fn wait_for_more(&mut self) {
        match self.rx.recv_timeout(Duration::from_secs(20)) {
            Ok(bytes) => self.text.push_str(&String::from_utf8_lossy(&bytes)),
            Err(_) => panic!("no more output on the screen:\n{}", self.text),
        }
    }

    /// Forget what was seen, so the next wait looks at new output only.
    pub(super) fn clear(&mut self) {
        self.text.clear();
    }
}

/// The REPL's process, killed if the test fails before it quits (no stray `geode` after a
/// failed run).
pub(super) struct Repl(pub(super) std::process::Child);

/// Start `cmd` on a new pseudo-terminal: its process, the terminal's keyboard end, its screen.
pub(super) fn in_terminal(mut cmd: Command) -> (Repl, File, Screen) {
    let pty = nix::pty::openpty(None, None).unwrap();
    let slave = File::from(pty.slave);
    let child = Repl(
        cmd.env("TERM", "xterm")
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave))
            .spawn()
            .unwrap(),
    );
    let master = File::from(pty.master);
    let mut reader = master.try_clone().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let screen = Screen {
        rx,
        text: String::new(),
    };
    (child, master, screen)
}

impl Drop for Repl {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[test]
fn the_repl_runs_a_turn_with_an_approval_in_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("script.toml"),
        r#"
[[turns]]
text = "Writing the file."
[[turns.tool_calls]]
id = "w1"
name = "write_file"
input = { path = "out.txt", content = "from the repl" }
[[turns]]
text = "All done."
"#,
    )
    .unwrap();
    std::fs::write(
        d.join("GEODE.md"),
        "## Rules\nbe brief\n## Private\nskip me\n",
    )
    .unwrap();
    let mut cmd = super::common::geode_bin();
    cmd.args(["--local", "--model", "scripted:script.toml"])
        .current_dir(d)
        .env("GEODE_HOME", d.join("home"))
        .env("GEODE_PROMPT_SECTIONS", "Rules")
        .env_remove("GEODE_MODEL");
    let (mut child, mut master, mut screen) = in_terminal(cmd);
    screen.wait_for("geode> ");
    screen.clear();
    master.write_all(b"write the file\r").unwrap();
    screen.wait_for("[y/n/a, n: why]");
    assert!(
        screen.text.contains("Allow write_file (write)"),
        "{}",
        screen.text
    );
    // What will be written, as a diff (green in a terminal), not a line of escaped JSON.
    assert!(screen.text.contains("new file out.txt"), "{}", screen.text);
    assert!(
        screen.text.contains("\x1b[32m+from the repl\x1b[0m"),
        "{}",
        screen.text
    );
    master.write_all(b"y\r").unwrap();
    screen.wait_for("-- natural, 2 rounds, 1 tool calls");
    assert!(screen.text.contains("All done."), "{}", screen.text);
    assert_eq!(
        std::fs::read_to_string(d.join("out.txt")).unwrap(),
        "from the repl"
    );
    screen.wait_for("geode> ");
    screen.clear();
    master.write_all(b"/status\r").unwrap();
    screen.wait_for("system prompt ");
    assert!(screen.text.contains("turns 1"), "{}", screen.text);
    screen.wait_for("geode> ");
    master.write_all(b"/quit\r").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the REPL did not quit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success());
    // The session was checkpointed: /resume (or `geode resume`) can continue it.
    assert!(d.join("home/sessions").read_dir().unwrap().next().is_some());
}

/// `geode --local --model scripted:script.toml` in a pseudo-terminal in `d`: the process, the
/// terminal's input side, and its screen.
fn repl_in_a_terminal(d: &std::path::Path) -> (Repl, File, Screen) {
    let mut cmd = super::common::geode_bin();
    cmd.args(["--local", "--model", "scripted:script.toml"])
        .current_dir(d)
        .env("GEODE_HOME", d.join("home"))
        .env_remove("GEODE_MODEL");
    in_terminal(cmd)
}

/// `lib.rs` and a script whose one call edits `let x = 1` into `let x = 2`.
pub(super) fn edit_fixture(d: &std::path::Path) {
    std::fs::write(d.join("lib.rs"), "fn main() {\n    let x = 1;\n}\n").unwrap();
    std::fs::write(
        d.join("script.toml"),
        r#"
[[turns]]
text = "Editing."
[[turns.tool_calls]]
id = "e1"
name = "edit_file"
input = { path = "lib.rs", old_string = "    let x = 1;", new_string = "    let x = 2;" }
[[turns]]
text = "Edited."
"#,
    )
    .unwrap();
}

#[test]
fn an_edit_approval_shows_the_edit_as_a_coloured_diff() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    edit_fixture(d);
    let (_child, mut master, mut screen) = repl_in_a_terminal(d);
    screen.wait_for("geode> ");
    screen.clear();
    master.write_all(b"edit it\r").unwrap();
    screen.wait_for("[y/n/a, n: why]");
    assert!(screen.text.contains("Allow edit_file"), "{}", screen.text);
    assert!(screen.text.contains("lib.rs"), "{}", screen.text);
    assert!(
        screen.text.contains("\x1b[31m-    let x = 1;\x1b[0m")
            && screen.text.contains("\x1b[32m+    let x = 2;\x1b[0m"),
        "{}",
        screen.text
    );
    // The approval's preview: what follows the tool line (which shows the call as it is).
    let tool_line = screen.text.find("> edit_file").expect(&screen.text);
    let (_, preview) = screen.text[tool_line..]
        .split_once('\n')
        .expect(&screen.text);
    assert!(
        !preview.contains("old_string"),
        "the edit shows as JSON: {}",
        screen.text
    );
    master.write_all(b"y\r").unwrap();
    screen.wait_for("Edited.");
    assert_eq!(
        std::fs::read_to_string(d.join("lib.rs")).unwrap(),
        "fn main() {\n    let x = 2;\n}\n"
    );
    screen.wait_for("geode> ");
    master.write_all(b"/quit\r").unwrap();
}

/// The session id the screen's last greeting names.
fn greeted_id(screen: &Screen) -> String {
    let at = screen.text.rfind("geode: session ").expect(&screen.text) + 15;
    let rest = &screen.text[at..];
    rest[..rest.find(' ').unwrap()].to_string()
}

#[test]
fn the_greeting_is_above_the_first_prompt_before_anything_is_typed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("script.toml"), "[[turns]]\ntext = \"Fine.\"\n").unwrap();
    let (_child, mut master, mut screen) = repl_in_a_terminal(d);
    screen.wait_for("geode> ");
    // Nothing typed: the greeting comes by itself, and the prompt is drawn again under it.
    screen.wait_for("(model scripted); /help for commands");
    let greeting = screen.text.rfind("/help for commands").unwrap();
    while !screen.text[greeting..].contains("geode> ") {
        screen.wait_for_more();
    }
    master.write_all(b"/quit\r").unwrap();
}

#[test]
fn resume_without_an_id_picks_a_session_with_the_arrow_keys() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for script in ["answer.toml", "script.toml"] {
        std::fs::write(d.join(script), "[[turns]]\ntext = \"Fine.\"\n").unwrap();
    }
    super::daily_cli::exec_session(d, "older-one", "fix the flaky test");
    super::daily_cli::exec_session(d, "newer-one", "write the release notes");
    let (_child, mut master, mut screen) = repl_in_a_terminal(d);
    screen.wait_for("/help for commands");
    let own = greeted_id(&screen);
    screen.wait_for("geode> ");
    // Esc leaves the picker with nothing changed.
    screen.clear();
    master.write_all(b"/resume\r").unwrap();
    screen.wait_for("Esc cancels");
    screen.wait_for("fix the flaky test");
    // Cleared first: the line editor's last paint of `geode> /resume` is not the next prompt.
    screen.clear();
    master.write_all(b"\x1b").unwrap();
    screen.wait_for("geode> ");
    screen.clear();
    master.write_all(b"/status\r").unwrap();
    screen.wait_for("system prompt ");
    assert!(
        screen.text.contains(&format!("session {own}\r\n")),
        "{}",
        screen.text
    );
    screen.wait_for("geode> ");
    // Newest first, the highlighted line marked; Down, then Enter resumes the older one.
    screen.clear();
    master.write_all(b"/resume\r").unwrap();
    screen.wait_for("fix the flaky test");
    assert!(
        screen.text.contains("\x1b[7m> write the release notes"),
        "{}",
        screen.text
    );
    assert!(!screen.text.contains(&own), "{}", screen.text);
    master.write_all(b"\x1b[B").unwrap();
    screen.wait_for("\x1b[7m> fix the flaky test");
    screen.clear();
    master.write_all(b"\r").unwrap();
    screen.wait_for("resumed older-one (");
    screen.wait_for("geode> ");
    screen.clear();
    master.write_all(b"/status\r").unwrap();
    screen.wait_for("system prompt ");
    assert!(
        screen.text.contains("session older-one\r\n"),
        "{}",
        screen.text
    );
    screen.wait_for("geode> ");
    master.write_all(b"/quit\r").unwrap();
}

/// A write then a reply that must never come: the turn of `ctrl_c_at_an_approval_...`.
const WRITE_THEN_NEVER: &str = r#"
[[turns]]
text = "Writing the file."
[[turns.tool_calls]]
id = "w1"
name = "write_file"
input = { path = "out.txt", content = "from the repl" }
[[turns]]
text = "A round after the interrupt."
"#;

#[test]
fn ctrl_c_at_an_approval_cancels_the_whole_turn() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("script.toml"), WRITE_THEN_NEVER).unwrap();
    let (_child, mut master, mut screen) = repl_in_a_terminal(d);
    screen.wait_for("geode> ");
    screen.clear();
    master.write_all(b"write the file\r").unwrap();
    screen.wait_for("[y/n/a, n: why]");
    master.write_all(b"\x03").unwrap();
    screen.wait_for("-- user_cancelled");
    screen.wait_for("geode> ");
    assert!(
        !screen.text.contains("A round after the interrupt."),
        "the model was asked again: {}",
        screen.text
    );
    assert!(!d.join("out.txt").exists());
    master.write_all(b"/quit\r").unwrap();
}

/// A command's approval (whose preview needs no file read, so nothing lets the session relay
/// the turn's events before the approver asks).
#[test]
fn the_text_and_the_tool_line_are_on_screen_before_their_approval_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("script.toml"),
        r#"
[[turns]]
text = "Counting the files."
[[turns.tool_calls]]
id = "b1"
name = "bash"
input = { command = "ls | wc -l > count.txt" }
[[turns]]
text = "Counted."
"#,
    )
    .unwrap();
    let (_child, mut master, mut screen) = repl_in_a_terminal(d);
    screen.wait_for("geode> ");
    screen.clear();
    master.write_all(b"count the files\r").unwrap();
    screen.wait_for("[y/n/a, n: why]");
    let at = |needle: &str| {
        screen
            .text
            .find(needle)
            .unwrap_or_else(|| panic!("no {needle:?} before the prompt:\n{}", screen.text))
    };
    let prompt = at("Allow bash");
    let preview = at("ls | wc -l > count.txt");
    assert!(
        at("Counting the files.") < preview && at("> bash") < preview && preview < prompt,
        "{}",
        screen.text
    );
    master.write_all(b"n\r").unwrap();
    screen.wait_for("geode> ");
    master.write_all(b"/quit\r").unwrap();
}

#[test]
fn an_auto_approved_edit_still_shows_its_diff() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("home")).unwrap();
    // Edits are not dangerous: at this level they run without asking.
    std::fs::write(d.join("home/config.toml"), "hitl = \"dangerous_only\"\n").unwrap();
    edit_fixture(d);
    let (_child, mut master, mut screen) = repl_in_a_terminal(d);
    screen.wait_for("geode> ");
    screen.clear();
    master.write_all(b"edit it\r").unwrap();
    screen.wait_for("Edited.");
    assert!(!screen.text.contains("Allow edit_file"), "{}", screen.text);
    assert!(
        screen.text.contains("\x1b[31m-    let x = 1;\x1b[0m")
            && screen.text.contains("\x1b[32m+    let x = 2;\x1b[0m"),
        "no diff of the edit: {}",
        screen.text
    );
    assert_eq!(
        std::fs::read_to_string(d.join("lib.rs")).unwrap(),
        "fn main() {\n    let x = 2;\n}\n"
    );
    screen.wait_for("geode> ");
    master.write_all(b"/quit\r").unwrap();
}

#[test]
fn a_person_s_own_bang_command_runs_without_asking_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("script.toml"), "[[turns]]\ntext = \"Seen.\"\n").unwrap();
    let (_child, mut master, mut screen) = repl_in_a_terminal(d);
    screen.wait_for("geode> ");
    screen.clear();
    master
        .write_all(b"!echo person-$((40+2)) | tee made.txt\r")
        .unwrap();
    screen.wait_for("person-42");
    screen.wait_for("geode> ");
    assert!(!screen.text.contains("Allow bash"), "{}", screen.text);
    // Through the workspace, as the model's commands are.
    assert_eq!(
        std::fs::read_to_string(d.join("made.txt")).unwrap(),
        "person-42\n"
    );
    master.write_all(b"/quit\r").unwrap();
}
