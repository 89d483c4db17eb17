//! One trial as the trial page shows it: its store row, its `result.json` (rewards, phase
//! timings, the image it started from, integrity evidence, notes), its verifier's reward file,
//! stdout and checks (parsed by the graders' parsers, as `geode show` prints them), and, on
//! demand, its ATIF transcript and the timeline's rows (the pipeline's denials, hook failures,
//! verification, compaction...).
//!
//! Every file here sits in folders the agent under evaluation could write (`agent/` and
//! `verifier/` are bound into its sandbox), so each is read through [`super::files`].

use std::io::Read;
use std::path::{Path, PathBuf};

use rusqlite::{OpenFlags, Row};
use serde::Serialize;
use serde_json::{Map, Value};

use super::ViewError;
use super::catalog::{Catalog, RunEntry, is_plain_name};
use super::files::{TextFile, open_inside, read_json, read_tail};

/// The most of a trajectory the viewer reads.
pub const TRAJECTORY_CAP: u64 = 32 << 20;
/// The most of a text file (verifier stdout, reward file) shown; the end is kept.
pub const TEXT_CAP: u64 = 1 << 20;

/// The trial `name` of `run`, checked against the store before any path is made.
fn trial_dir(c: &Catalog, run: &RunEntry, name: &str) -> Result<PathBuf, ViewError> {
    let s = c.source_of(run);
    let known: bool = s
        .conn
        .prepare_cached("SELECT 1 FROM trials WHERE run_id = ?1 AND trial_name = ?2")
        .and_then(|mut st| st.exists([&run.run_id, name]))
        .map_err(ViewError::sqlite(&s.path))?;
    if !known || !is_plain_name(name) {
        return Err(ViewError::NotFound {
            what: "trial",
            name: format!("{}/{name}", run.key),
            jobs: c.jobs().to_path_buf(),
        });
    }
    Ok(c.run_dir(run).join(name))
}

/// The checks a verifier folder explains its reward with (`grade.json` of a re-grade first,
/// then the verifier's own reports), or why they could not be read.
#[derive(Debug, Default, Serialize)]
pub struct Checks {
    pub(crate) source: Option<String>,
    pub(crate) format: Option<String>,
    pub(crate) checks: Vec<geode_graders::Check>,
    pub(crate) error: Option<String>,
}

fn checks(dir: &Path) -> Checks {
    let none = Checks {
        source: None,
        format: None,
        checks: Vec::new(),
        error: None,
    };
    let grade_file = dir.join(geode_graders::GRADE_FILE);
    if geode_graders::safe_fs::is_file(&grade_file) {
        return match geode_graders::read_grade(&grade_file) {
            Ok(g) => Checks {
                source: Some(geode_graders::GRADE_FILE.into()),
                format: Some("grade".into()),
                checks: g.checks().to_vec(),
                error: None,
            },
            Err(e) => Checks {
                error: Some(e.to_string()),
                ..none
            },
        };
    }
    let verifier = dir.join("verifier");
    if !std::fs::symlink_metadata(&verifier).is_ok_and(|m| m.is_dir()) {
        return none;
    }
    match geode_graders::detect_checks(&verifier) {
        Ok(Some(p)) => Checks {
            source: p
                .source
                .file_name()
                .map(|n| format!("verifier/{}", n.to_string_lossy())),
            format: Some(p.format.as_str().into()),
            checks: p.checks,
            error: None,
        },
        Ok(None) => none,
        Err(e) => Checks {
            error: Some(e.to_string()),
            ..none
        },
    }
}

/// What the verifier left: the reward file as written, its stdout, its checks.
#[derive(Debug, Default, Serialize)]
pub struct Verifier {
    pub(crate) reward_file: Option<TextFile>,
    pub(crate) stdout: Option<TextFile>,
    pub(crate) checks: Checks,
}

fn verifier(dir: &Path) -> Result<Verifier, ViewError> {
    let reward_file = match read_tail(dir, &["verifier", "reward.json"], TEXT_CAP)? {
        Some(f) => Some(f),
        None => read_tail(dir, &["verifier", "reward.txt"], TEXT_CAP)?,
    };
    Ok(Verifier {
        reward_file,
        stdout: read_tail(dir, &["verifier", "test-stdout.txt"], TEXT_CAP)?,
        checks: checks(dir),
    })
}

/// One step of a multi-step trial: its record from `result.json` and its own checks.
#[derive(Debug, Serialize)]
pub struct StepView {
    pub(crate) name: String,
    pub(crate) result: Value,
    pub(crate) verifier: Verifier,
}

/// The trial page's data (transcript and timeline come separately, on demand).
#[derive(Debug, Serialize)]
pub struct TrialDetail {
    pub(crate) run: String,
    pub(crate) trial: String,
    /// The store row, column by column.
    pub row: Map<String, Value>,
    /// `result.json` as written (GEODE's keys and Harbor's), or `None`.
    pub result: Option<Value>,
    pub(crate) result_error: Option<String>,
    pub(crate) verifier: Verifier,
    pub(crate) steps: Vec<StepView>,
    pub(crate) has_trajectory: bool,
    pub(crate) has_timeline: bool,
}

fn row_object(r: &Row<'_>) -> rusqlite::Result<Map<String, Value>> {
    let mut out = Map::new();
    for (i, name) in r.as_ref().column_names().iter().enumerate() {
        let v = match r.get_ref(i)? {
            rusqlite::types::ValueRef::Null => Value::Null,
            // Seeds are u64 stored as SQLite's i64 (the store's own rule): shown as written.
            rusqlite::types::ValueRef::Integer(n) if *name == "seed" => Value::from(n as u64),
            rusqlite::types::ValueRef::Integer(n) => Value::from(n),
            rusqlite::types::ValueRef::Real(x) => Value::from(x),
            rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) => {
                let text = String::from_utf8_lossy(t).into_owned();
                // The JSON columns (rewards, phases, integrity) travel as JSON.
                match serde_json::from_str::<Value>(&text) {
                    Ok(v @ (Value::Object(_) | Value::Array(_))) => v,
                    _ => Value::String(text),
                }
            }
        };
        out.insert((*name).to_owned(), v);
    }
    Ok(out)
}

pub(crate) fn detail(c: &Catalog, run_key: &str, name: &str) -> Result<TrialDetail, ViewError> {
    let run = c.run(run_key)?;
    let dir = trial_dir(c, run, name)?;
    let s = c.source_of(run);
    let row = s
        .conn
        .prepare_cached("SELECT * FROM trials WHERE run_id = ?1 AND trial_name = ?2")
        .and_then(|mut st| st.query_row([&run.run_id, name], row_object))
        .map_err(ViewError::sqlite(&s.path))?;
    let (result, result_error) = match read_json(&dir, &["result.json"], TEXT_CAP * 8) {
        Ok(v) => (v, None),
        Err(e) => (None, Some(e.to_string())),
    };
    let mut steps = Vec::new();
    for step in result
        .as_ref()
        .and_then(|r| r["step_results"].as_array())
        .into_iter()
        .flatten()
    {
        let Some(step_name) = step["step_name"].as_str().filter(|n| is_plain_name(n)) else {
            continue;
        };
        let step_dir = dir.join("steps").join(step_name);
        steps.push(StepView {
            name: step_name.to_owned(),
            result: step.clone(),
            verifier: if std::fs::symlink_metadata(&step_dir).is_ok_and(|m| m.is_dir()) {
                verifier(&step_dir)?
            } else {
                Verifier::default()
            },
        });
    }
    Ok(TrialDetail {
        run: run.key.clone(),
        trial: name.to_owned(),
        row,
        result,
        result_error,
        verifier: verifier(&dir)?,
        steps,
        has_trajectory: open_inside(&dir, &["agent", "trajectory.json"])?.is_some(),
        has_timeline: open_inside(&dir, &["agent", "timeline.db"])?.is_some(),
    })
}

/// The trial's ATIF trajectory, as written.
pub fn trajectory(c: &Catalog, run_key: &str, name: &str) -> Result<Value, ViewError> {
    let run = c.run(run_key)?;
    let dir = trial_dir(c, run, name)?;
    read_json(&dir, &["agent", "trajectory.json"], TRAJECTORY_CAP)?.ok_or_else(|| {
        ViewError::NotFound {
            what: "trajectory of trial",
            name: format!("{run_key}/{name}"),
            jobs: c.jobs().to_path_buf(),
        }
    })
}

/// One timeline row, its payload as JSON (read generically, so rows of kinds this build does
/// not know still show).
#[derive(Debug, Serialize)]
pub struct TimelineItem {
    pub(crate) session_id: String,
    pub(crate) seq: i64,
    pub(crate) ts: String,
    pub(crate) kind: String,
    pub(crate) call_id: Option<String>,
    pub(crate) payload: Value,
}

/// Every row of the trial's `agent/timeline.db`, in order.
pub fn timeline(c: &Catalog, run_key: &str, name: &str) -> Result<Vec<TimelineItem>, ViewError> {
    let run = c.run(run_key)?;
    let dir = trial_dir(c, run, name)?;
    let Some((_, path)) = open_inside(&dir, &["agent", "timeline.db"])? else {
        return Ok(Vec::new());
    };
    let err = ViewError::sqlite(&path);
    // Read-write without create and query_only, for the store's reason (a WAL file without
    // its -shm); no checkpoint on close, so reading never rewrites the file.
    let conn = rusqlite::Connection::open_with_flags(
        &path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_NOFOLLOW,
    )
    .map_err(&err)?;
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )
    .map_err(&err)?;
    conn.pragma_update(None, "query_only", true).map_err(&err)?;
    let mut st = conn
        .prepare("SELECT session_id, seq, ts, kind, call_id, payload FROM timeline ORDER BY id")
        .map_err(&err)?;
    st.query_map([], |r| {
        let payload: String = r.get(5)?;
        Ok(TimelineItem {
            session_id: r.get(0)?,
            seq: r.get(1)?,
            ts: r.get(2)?,
            kind: r.get(3)?,
            call_id: r.get(4)?,
            payload: serde_json::from_str(&payload).unwrap_or(Value::String(payload)),
        })
    })
    .map_err(&err)?
    .collect::<rusqlite::Result<Vec<_>>>()
    .map_err(&err)
}

/// A screenshot the trajectory names (`agent/screenshot-<sha256>.png`, the only files of
/// `agent/` served), as bytes.
pub fn screenshot(
    c: &Catalog,
    run_key: &str,
    name: &str,
    file: &str,
) -> Result<Vec<u8>, ViewError> {
    let hex = file
        .strip_prefix("screenshot-")
        .and_then(|f| f.strip_suffix(".png"));
    let well_formed =
        hex.is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()));
    let not_found = || ViewError::NotFound {
        what: "screenshot",
        name: format!("{run_key}/{name}/agent/{file}"),
        jobs: c.jobs().to_path_buf(),
    };
    if !well_formed {
        return Err(not_found());
    }
    let run = c.run(run_key)?;
    let dir = trial_dir(c, run, name)?;
    let Some((f, path)) = open_inside(&dir, &["agent", file])? else {
        return Err(not_found());
    };
    let mut bytes = Vec::new();
    f.take(TRAJECTORY_CAP)
        .read_to_end(&mut bytes)
        .map_err(ViewError::io(&path))?;
    Ok(bytes)
}

/// Whether the trial's transcript holds `needle` (already lower-case) in any text: the raw
/// file first, then, when the needle has characters JSON escapes, its parsed strings.
pub fn transcript_contains(run_dir: &Path, trial: &str, needle: &str) -> bool {
    if !is_plain_name(trial) {
        return false;
    }
    let Ok(Some((f, _))) = open_inside(run_dir, &[trial, "agent", "trajectory.json"]) else {
        return false;
    };
    let mut bytes = Vec::new();
    if f.take(TRAJECTORY_CAP).read_to_end(&mut bytes).is_err() {
        return false;
    }
    let text = String::from_utf8_lossy(&bytes).to_lowercase();
    if text.contains(needle) {
        return true;
    }
    if !needle
        .chars()
        .any(|c| c == '"' || c == '\\' || c.is_control())
    {
        return false;
    }
    fn any_string(v: &Value, needle: &str) -> bool {
        match v {
            Value::String(s) => s.to_lowercase().contains(needle),
            Value::Array(a) => a.iter().any(|v| any_string(v, needle)),
            Value::Object(m) => m.values().any(|v| any_string(v, needle)),
            _ => false,
        }
    }
    serde_json::from_slice::<Value>(&bytes).is_ok_and(|v| any_string(&v, needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transcript_search_finds_text_json_escapes() {
        let d = tempfile::tempdir().unwrap();
        let agent = d.path().join("t__0/agent");
        std::fs::create_dir_all(&agent).unwrap();
        let doc = serde_json::json!({"steps": [{"message": "He said \"Done\"\nthen left"}]});
        std::fs::write(agent.join("trajectory.json"), doc.to_string()).unwrap();
        assert!(transcript_contains(d.path(), "t__0", "\"done\"\nthen"));
        assert!(transcript_contains(d.path(), "t__0", "said"));
        assert!(!transcript_contains(d.path(), "t__0", "absent"));
        assert!(!transcript_contains(d.path(), "../t__0", "said"));
    }
}
