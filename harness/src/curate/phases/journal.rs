//! A phase's journal: the work it finished (one pilot task, one vote), kept as it is done so
//! a phase killed midway resumes where it stopped.

use std::path::PathBuf;

use serde_json::{Value, json};

use super::io;
use crate::curate::CurateError;

/// Work finished inside a phase (one pilot task, one vote), appended as it is done, so a phase
/// killed midway resumes where it stopped: `NN-PHASE.partial.jsonl` beside the checkpoint,
/// lines `{"key", "item", "value"}`. Only lines of the phase's current key count (a changed
/// config or input starts the phase over); the file goes once the checkpoint is written.
pub(super) struct Journal {
    path: PathBuf,
    key: String,
    done: std::collections::BTreeMap<String, Value>,
}

impl Journal {
    pub(super) fn open(path: PathBuf, key: &str) -> Journal {
        let done = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            // A line cut short by a crash does not parse and is simply not done.
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["key"] == key)
            .filter_map(|v| Some((v["item"].as_str()?.to_string(), v["value"].clone())))
            .collect();
        Journal {
            path,
            key: key.to_string(),
            done,
        }
    }

    pub(super) fn get(&self, item: &str) -> Option<&Value> {
        self.done.get(item)
    }

    pub(super) fn record(&mut self, item: &str, value: Value) -> Result<(), CurateError> {
        use std::io::Write;
        let line = json!({"key": self.key, "item": item, "value": value});
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(io(&self.path))?;
        writeln!(f, "{line}").map_err(io(&self.path))?;
        self.done.insert(item.to_string(), value);
        Ok(())
    }

    pub(super) fn finish(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
