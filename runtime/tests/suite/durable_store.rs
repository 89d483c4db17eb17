//! The checkpoint store on its own: the status machine, incremental message rows, the session
//! lock, atomic `state.json`, and files that are not what they should be.

use geode_runtime::conversation::Message;
use geode_runtime::ids::SessionId;
use geode_runtime::store::checkpoint::{
    CheckpointStore, DB_FILE, SessionStatus, validate_session_id,
};
use serde_json::Value;

fn msg(i: usize) -> Message {
    Message::user_text(format!("m{i}"))
}

#[test]
fn status_machine_leaves_terminal_states_only_by_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let id = SessionId::new("s1");
    let store = CheckpointStore::create(dir.path(), &id, "nop", dir.path()).unwrap();
    assert_eq!(store.status().unwrap(), SessionStatus::Active);
    store.set_status(SessionStatus::Paused).unwrap();
    store.set_status(SessionStatus::Completed).unwrap();
    let err = store
        .set_status(SessionStatus::Active)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("reopen") && err.contains("checkpoint.db"),
        "{err}"
    );
    assert_eq!(store.reopen().unwrap(), SessionStatus::Completed);
    assert_eq!(store.status().unwrap(), SessionStatus::Active);
}

#[test]
fn messages_append_and_read_back_and_a_gap_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let id = SessionId::new("s1");
    let store = CheckpointStore::create(dir.path(), &id, "nop", dir.path()).unwrap();
    store.append_messages(0, &[msg(0), msg(1)]).unwrap();
    store.append_messages(2, &[msg(2)]).unwrap();
    // A rewrite of an uncommitted row replaces it.
    store.append_messages(2, &[msg(9)]).unwrap();
    let back = store.messages(0, 3).unwrap();
    assert_eq!(back, vec![msg(0), msg(1), msg(9)]);
    assert_eq!(store.messages(1, 3).unwrap().len(), 2);
    let err = store.messages(0, 5).unwrap_err().to_string();
    assert!(
        err.contains("checkpoint.db") && err.contains("holds only 3"),
        "{err}"
    );
}

#[test]
fn create_refuses_an_existing_session_and_a_second_process_is_locked_out() {
    let dir = tempfile::tempdir().unwrap();
    let id = SessionId::new("s1");
    let store = CheckpointStore::create(dir.path(), &id, "nop", dir.path()).unwrap();
    let err = CheckpointStore::create(dir.path(), &id, "nop", dir.path()).unwrap_err();
    assert!(err.to_string().contains("geode resume s1"), "{err}");
    let err = CheckpointStore::open(dir.path(), &id).unwrap_err();
    assert!(err.to_string().contains("in use"), "{err}");
    drop(store);
    CheckpointStore::open(dir.path(), &id).unwrap();
    assert!(validate_session_id(&SessionId::new("../x")).is_err());
    assert!(validate_session_id(&SessionId::new(".hidden")).is_err());
    assert!(validate_session_id(&SessionId::new("a-B_9.z")).is_ok());
}

#[test]
fn state_is_written_atomically_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let id = SessionId::new("s1");
    let store = CheckpointStore::create(dir.path(), &id, "nop", dir.path()).unwrap();
    store
        .write_state(&serde_json::json!({"schema": "x.v1", "n": 1}))
        .unwrap();
    let v: Value = store.read_state("x.v1").unwrap();
    assert_eq!(v["n"], 1);
    let err = store.read_state::<Value>("y.v1").unwrap_err().to_string();
    assert!(err.contains("state.json") && err.contains("y.v1"), "{err}");
    assert!(!store.dir().join("state.json.tmp").exists());
}

#[test]
fn a_file_that_is_not_a_database_is_named_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let id = SessionId::new("s1");
    let sdir = dir.path().join("s1");
    std::fs::create_dir_all(&sdir).unwrap();
    let junk = b"this is not a database at all, but it is long enough to look like one ....";
    std::fs::write(sdir.join(DB_FILE), junk).unwrap();
    let err = CheckpointStore::open(dir.path(), &id)
        .unwrap_err()
        .to_string();
    assert!(err.contains("checkpoint.db"), "{err}");
    assert_eq!(std::fs::read(sdir.join(DB_FILE)).unwrap(), junk);
}
