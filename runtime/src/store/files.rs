//! Durable JSON files: atomic replacement (a crash leaves the old file or the new one, never a
//! mix) and schema-checked reading that reports a damaged file without touching it.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::StoreError;

/// Write `bytes` to `path` so that a crash leaves either the old file or the new one: a temp
/// file beside it, fsync, rename over `path`, fsync of the directory (the rename itself must
/// reach the disk before we may rely on it).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    let written = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(StoreError::io(&tmp, e));
    }
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(StoreError::io(path, e));
    }
    sync_dir(dir)
}

pub(crate) fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io(dir, e))
}

/// Read and check a state file without opening its session (inspection, `--last`).
pub fn read_state_file<T: DeserializeOwned>(path: &Path, schema: &str) -> Result<T, StoreError> {
    let shown = path.display().to_string();
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(StoreError::NotCommitted { path: shown });
        }
        Err(e) => return Err(StoreError::io(path, e)),
    };
    let damaged = |what: String| StoreError::Json {
        path: shown.clone(),
        message: format!("{what}; the checkpoint is damaged and was left as it is"),
    };
    let value: Value =
        serde_json::from_slice(&bytes).map_err(|e| damaged(format!("not valid JSON ({e})")))?;
    match value.get("schema").and_then(Value::as_str) {
        Some(s) if s == schema => {}
        Some(s) => return Err(damaged(format!("schema {s:?}, expected {schema:?}"))),
        None => return Err(damaged(format!("no schema field (expected {schema:?})"))),
    }
    serde_json::from_value(value).map_err(|e| damaged(format!("unexpected content ({e})")))
}
