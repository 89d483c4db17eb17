//! Damaged checkpoints: truncated or bit-flipped `state.json` (seeded, reproducible), a
//! `checkpoint.db` or `receipts.db` that is not a database, a corrupt message row. Each must
//! give an error naming the file, never a panic, and leave the damaged file untouched.

use std::path::{Path, PathBuf};

use geode_runtime::agent::restore::load_checkpoint;
use geode_runtime::ids::SessionId;
use geode_runtime::policy::SafetyLevel;
use geode_runtime::session::resume_session;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use super::common::{Fixture, run};
use super::durable::{durable, durable_config, scripted, sessions_root};

/// A real checkpoint: a turn with a write, a read and a plan, then the session dir.
async fn a_real_session(f: &Fixture, id: &str) -> PathBuf {
    let script = json!({"turns": [
        {"tool_calls": [
            {"id": "p", "name": "update_plan", "input": {"objective": "o",
             "steps": [{"description": "s", "status": "pending"}]}},
            {"id": "w", "name": "write_file", "input": {"path": "a.txt", "content": "x"}}
        ]},
        {"tool_calls": [{"id": "r", "name": "read_file", "input": {"path": "a.txt"}}]},
        {"text": "Wrote a.txt and read it back."}
    ]});
    let mut s = durable(f, id, script, SafetyLevel::Write);
    run(&mut s, "write and read").await;
    drop(s);
    sessions_root(f).join(id)
}

fn assert_names(err: &str, file: &str) {
    assert!(err.contains(file), "the error must name {file}: {err}");
}

fn resume_err(f: &Fixture, id: &str) -> String {
    let cfg = durable_config(
        f,
        id,
        scripted(json!({"turns": [{"text": "x"}]})),
        SafetyLevel::Safe,
    );
    match resume_session(cfg) {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn truncated_or_flipped_state_json_never_panics_and_names_the_file() {
    let f = Fixture::new();
    let dir = a_real_session(&f, "fz").await;
    let root = sessions_root(&f);
    let id = SessionId::new("fz");
    let state_path = dir.join("state.json");
    let original = std::fs::read(&state_path).unwrap();
    assert!(load_checkpoint(&root, &id).is_ok());
    let mut rng = ChaCha8Rng::seed_from_u64(0x6e0de);
    let (mut errors, mut still_valid) = (0, 0);
    for case in 0..300 {
        let mut bytes = original.clone();
        if case % 2 == 0 {
            bytes.truncate(rng.random_range(0..original.len()));
        } else {
            for _ in 0..rng.random_range(1..4) {
                let at = rng.random_range(0..bytes.len());
                bytes[at] ^= 1 << rng.random_range(0..8);
            }
        }
        std::fs::write(&state_path, &bytes).unwrap();
        match load_checkpoint(&root, &id) {
            Err(e) => {
                errors += 1;
                let text = e.to_string();
                assert!(
                    text.contains("state.json") || text.contains("checkpoint.db"),
                    "case {case}: {text}"
                );
            }
            // A flip inside a string or a digit can leave a state that is still consistent.
            Ok(loaded) => {
                still_valid += 1;
                assert_eq!(loaded.state.session_id, id);
            }
        }
        assert_eq!(
            std::fs::read(&state_path).unwrap(),
            bytes,
            "case {case}: the damaged file was touched"
        );
    }
    assert!(errors > 150, "{errors} errors, {still_valid} still valid");
    // Resuming a damaged checkpoint refuses and keeps the file as it is.
    std::fs::write(&state_path, &original[..original.len() / 2]).unwrap();
    let err = resume_err(&f, "fz");
    assert_names(&err, "state.json");
    assert!(err.contains("damaged"), "{err}");
    assert_eq!(
        std::fs::read(&state_path).unwrap(),
        &original[..original.len() / 2]
    );
    std::fs::write(&state_path, &original).unwrap();
    assert!(load_checkpoint(&root, &id).is_ok());
}

fn corrupt(path: &Path, f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut bytes = std::fs::read(path).unwrap();
    f(&mut bytes);
    std::fs::write(path, &bytes).unwrap();
    bytes
}

#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_checkpoint_database_is_named_and_kept() {
    let f = Fixture::new();
    let dir = a_real_session(&f, "db").await;
    let db = dir.join("checkpoint.db");
    let kept = corrupt(&db, |b| {
        b.truncate(100);
        b.extend_from_slice(b"garbage instead of pages");
    });
    let err = resume_err(&f, "db");
    assert_names(&err, "checkpoint.db");
    assert_eq!(std::fs::read(&db).unwrap(), kept);

    let kept = corrupt(&db, |b| *b = b"not a database at all".repeat(300));
    let err = load_checkpoint(&sessions_root(&f), &SessionId::new("db"))
        .unwrap_err()
        .to_string();
    assert_names(&err, "checkpoint.db");
    assert_eq!(std::fs::read(&db).unwrap(), kept);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_corrupt_message_row_or_receipts_db_is_an_error_naming_it() {
    let f = Fixture::new();
    let dir = a_real_session(&f, "rw").await;
    let conn = rusqlite::Connection::open(dir.join("checkpoint.db")).unwrap();
    conn.execute("UPDATE messages SET content = '{oops' WHERE seq = 2", [])
        .unwrap();
    drop(conn);
    let err = load_checkpoint(&sessions_root(&f), &SessionId::new("rw"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("checkpoint.db") && err.contains("row 2"),
        "{err}"
    );

    let dir = a_real_session(&f, "rc").await;
    let receipts = dir.join("receipts.db");
    let kept = corrupt(&receipts, |b| *b = b"no receipts here".repeat(100));
    let err = resume_err(&f, "rc");
    assert_names(&err, "receipts.db");
    assert_eq!(std::fs::read(&receipts).unwrap(), kept);
    // A missing receipts database is refused too: it would forget effects that started.
    std::fs::remove_file(&receipts).unwrap();
    let err = resume_err(&f, "rc");
    assert_names(&err, "receipts.db");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_save_point_in_state_json_is_named_and_kept() {
    let f = Fixture::new();
    let dir = a_real_session(&f, "st").await;
    let state_path = dir.join("state.json");
    let original = std::fs::read_to_string(&state_path).unwrap();
    // The text a save writes is the stage's snake_case name.
    assert!(original.contains("\"stage\": \"turn_end\""), "{original}");
    let damaged = original.replace("\"stage\": \"turn_end\"", "\"stage\": \"turn_over\"");
    std::fs::write(&state_path, &damaged).unwrap();
    let err = load_checkpoint(&sessions_root(&f), &SessionId::new("st"))
        .err()
        .unwrap()
        .to_string();
    assert_names(&err, "state.json");
    assert!(
        err.contains("turn_over") && err.contains("damaged"),
        "{err}"
    );
    let err = resume_err(&f, "st");
    assert_names(&err, "state.json");
    assert_eq!(std::fs::read_to_string(&state_path).unwrap(), damaged);
}
