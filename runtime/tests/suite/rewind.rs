//! `/rewind` in-process: a checkpointed session whose turns changed files by an edit and by a
//! shell command goes back to before a turn (files, conversation, turn numbers), refuses when
//! a file was changed since by someone else, and `rewind_session` does the same for a session
//! no process holds.

use geode_runtime::agent::restore::load_checkpoint;
use geode_runtime::agent::rewind::{RewindError, rewind_points, rewind_session};
use geode_runtime::ids::SessionId;
use geode_runtime::policy::SafetyLevel;
use geode_runtime::store::timeline::TimelineEvent;
use serde_json::json;

use super::common::{Fixture, run};
use super::durable::{durable, sessions_root};

fn read(f: &Fixture, rel: &str) -> Option<String> {
    std::fs::read_to_string(f.path(rel)).ok()
}

/// Turn 1 edits notes.txt; turn 2 changes it again and creates out.txt with a shell command;
/// turn 3 changes nothing.
fn three_turns() -> serde_json::Value {
    json!({"turns": [
        {"tool_calls": [{"id": "e1", "name": "edit_file",
            "input": {"path": "notes.txt", "old_string": "draft", "new_string": "edited"}}]},
        {"text": "Edited."},
        {"tool_calls": [{"id": "b1", "name": "bash",
            "input": {"command": "echo by-bash >> notes.txt && echo new > out.txt && chmod +x out.txt"}}]},
        {"text": "Ran it."},
        {"text": "Nothing to do."}
    ]})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rewind_puts_back_what_an_edit_and_a_command_changed_and_the_conversation() {
    let f = Fixture::new();
    std::fs::write(f.path("notes.txt"), "draft\n").unwrap();
    let mut s = durable(&f, "rw1", three_turns(), SafetyLevel::Dangerous);
    run(&mut s, "edit the notes").await;
    let after_turn_one = s.messages().to_vec();
    run(&mut s, "append and create").await;
    run(&mut s, "idle").await;
    assert_eq!(read(&f, "notes.txt").as_deref(), Some("edited\nby-bash\n"));
    assert_eq!(read(&f, "out.txt").as_deref(), Some("new\n"));

    let points = s.rewind_points().unwrap();
    let listed: Vec<(u32, &str, usize)> = points
        .iter()
        .map(|p| (p.turn, p.prompt.as_str(), p.files.len()))
        .collect();
    assert_eq!(
        listed,
        [
            (1, "edit the notes", 1),
            (2, "append and create", 2),
            (3, "idle", 0)
        ]
    );

    // Back to before turn 2: the command's changes go, the edit stays.
    let report = s.rewind_to(2, false).unwrap();
    assert_eq!(report.files.restored, ["notes.txt", "out.txt"]);
    assert_eq!(read(&f, "notes.txt").as_deref(), Some("edited\n"));
    assert_eq!(read(&f, "out.txt"), None);
    assert_eq!(s.messages(), after_turn_one.as_slice());
    assert_eq!(s.turns(), 1);
    let saved = load_checkpoint(&sessions_root(&f), &SessionId::new("rw1")).unwrap();
    assert_eq!(saved.messages, after_turn_one);
    assert_eq!(saved.state.turn_number, 1);

    // The session goes on from there, numbering turns again from 2.
    let script_left = run(&mut s, "again").await;
    assert_eq!(s.turns(), 2, "{script_left:?}");
    assert_eq!(s.rewind_points().unwrap().len(), 2);

    // Back to before turn 1: the edit goes too, and the conversation is empty.
    let report = s.rewind_to(1, false).unwrap();
    assert_eq!(report.files.restored, ["notes.txt"]);
    assert_eq!(read(&f, "notes.txt").as_deref(), Some("draft\n"));
    assert!(s.messages().is_empty());
    assert!(s.rewind_points().unwrap().is_empty());
    let rows = f.timeline.rows(&SessionId::new("rw1")).unwrap();
    let rewinds: Vec<u32> = rows
        .iter()
        .filter_map(|r| match &r.event {
            TimelineEvent::SessionRewound { to_turn, .. } => Some(*to_turn),
            _ => None,
        })
        .collect();
    assert_eq!(rewinds, [2, 1]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_changed_by_someone_else_stops_the_rewind_unless_forced() {
    let f = Fixture::new();
    std::fs::write(f.path("notes.txt"), "draft\n").unwrap();
    let mut s = durable(&f, "rw2", three_turns(), SafetyLevel::Dangerous);
    run(&mut s, "edit the notes").await;
    std::fs::write(f.path("notes.txt"), "the person's own words\n").unwrap();

    let err = s.rewind_to(1, false).unwrap_err().to_string();
    assert!(
        err.contains("notes.txt") && err.contains("nothing was restored"),
        "{err}"
    );
    assert_eq!(
        read(&f, "notes.txt").as_deref(),
        Some("the person's own words\n")
    );
    assert_eq!(
        s.turns(),
        1,
        "a refused rewind leaves the conversation as it was"
    );

    let err = s.rewind_to(7, false).unwrap_err();
    assert!(matches!(err, RewindError::NoPoint { turn: 7, .. }), "{err}");

    s.rewind_to(1, true).unwrap();
    assert_eq!(read(&f, "notes.txt").as_deref(), Some("draft\n"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_session_is_rewound_from_its_records_alone() {
    let f = Fixture::new();
    std::fs::write(f.path("notes.txt"), "draft\n").unwrap();
    let mut s = durable(&f, "rw3", three_turns(), SafetyLevel::Dangerous);
    run(&mut s, "edit the notes").await;
    run(&mut s, "append and create").await;
    let id = SessionId::new("rw3");
    let root = sessions_root(&f);
    let err = rewind_session(&root, &id, 1, false)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("in use"),
        "a live session is not rewound behind its back: {err}"
    );
    s.close("user_exit").await;
    drop(s);

    assert_eq!(rewind_points(&root, &id).unwrap().len(), 2);
    let report = rewind_session(&root, &id, 1, false).unwrap();
    assert_eq!(report.messages, 0);
    assert_eq!(read(&f, "notes.txt").as_deref(), Some("draft\n"));
    assert_eq!(read(&f, "out.txt"), None);
    let saved = load_checkpoint(&root, &id).unwrap();
    assert!(saved.messages.is_empty());
    assert_eq!(saved.state.turn_number, 0);
}
