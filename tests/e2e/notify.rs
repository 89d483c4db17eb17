//! A turn that ran long ends with a bell and an OSC 9 notification on the person's terminal
//! (`GEODE_NOTIFY_AFTER_SECS`, 30 s by default), and a short one ends quietly.

use std::io::Write;

use super::repl::in_terminal;

fn one_turn(notify_after: Option<&str>) -> String {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("script.toml"), "[[turns]]\ntext = \"Done.\"\n").unwrap();
    let mut cmd = super::common::geode_in(d);
    cmd.args(["--local", "--model", "scripted:script.toml"]);
    if let Some(secs) = notify_after {
        cmd.env("GEODE_NOTIFY_AFTER_SECS", secs);
    }
    let (_child, mut master, mut screen) = in_terminal(cmd);
    screen.wait_for("geode> ");
    screen.clear();
    master.write_all(b"go\r").unwrap();
    screen.wait_for("-- natural");
    // The next prompt comes after whatever the turn's end wrote.
    screen.wait_for("geode> ");
    master.write_all(b"/quit\r").unwrap();
    screen.text.clone()
}

#[test]
fn a_long_turn_ends_with_a_notification_and_a_short_one_quietly() {
    let long = one_turn(Some("0"));
    assert!(
        long.contains("\x07\x1b]9;geode: turn ended: natural"),
        "{long:?}"
    );
    let short = one_turn(None);
    assert!(!short.contains("\x1b]9;"), "{short:?}");
}
