//! The allowlist of task sources: a release takes only tasks whose origin is allowed.
//!
//! Format (`geode.allowlist.v1`, TOML):
//! ```toml
//! schema = "geode.allowlist.v1"
//! origins = ["builtin:geode-core", "tb1:*"]      # shell-style globs over origins
//! path_prefixes = ["/data/vetted-tasks/"]        # or: any task folder below these paths
//! ```
//! Origins: `builtin:NAME` for a pack folder named NAME inside a `tasks/` folder (the packs that
//! ship with GEODE), `tb1:TASK` for tasks imported from Terminal-Bench 1 (`metadata.source =
//! "terminal-bench-1"`), and `path:CANONICAL_DIR` for anything else. Without a file the default
//! allows `builtin:*` only.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{DatasetError, check_schema, invalid, io_err};
use crate::pack::{Task, glob_match};

/// The allowlist file's `schema` value.
pub(crate) const ALLOWLIST_SCHEMA: &str = "geode.allowlist.v1";

/// Which task origins a release accepts (`geode.allowlist.v1`); see the module docs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Allowlist {
    /// Always `ALLOWLIST_SCHEMA`.
    pub schema: String,
    /// Shell-style globs over origins (`builtin:NAME`, `tb1:TASK`, `path:DIR`).
    #[serde(default)]
    pub origins: Vec<String>,
    /// Folders whose tasks are accepted whatever their origin (compared after canonicalizing).
    #[serde(default)]
    pub path_prefixes: Vec<String>,
}

impl Default for Allowlist {
    fn default() -> Self {
        Allowlist {
            schema: ALLOWLIST_SCHEMA.to_string(),
            origins: vec!["builtin:*".to_string()],
            path_prefixes: Vec::new(),
        }
    }
}

/// Where a task comes from, and whether the allowlist takes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OriginCheck {
    /// The task's id.
    pub task: String,
    /// The task's origin (`builtin:`, `tb1:` or `path:`).
    pub origin: String,
    /// Whether an origin glob or a path prefix matched.
    pub allowed: bool,
    /// The allowlist entry that matched, or why nothing did.
    pub reason: String,
}

impl Allowlist {
    /// Reads a TOML allowlist; refuses an unknown `schema`.
    pub fn load(path: &Path) -> Result<Allowlist, DatasetError> {
        let text = std::fs::read_to_string(path).map_err(|e| io_err(path, e))?;
        let list: Allowlist = toml::from_str(&text).map_err(|e| invalid(path, e.to_string()))?;
        check_schema(path, &list.schema, ALLOWLIST_SCHEMA)?;
        Ok(list)
    }

    /// Checks `task` (in a pack of origin `pack_origin`) against the origins, then the prefixes.
    pub fn check(&self, task: &Task, pack_origin: &str) -> OriginCheck {
        let origin = task_origin(task, pack_origin);
        let dir = canonical(&task.dir);
        let by_origin = self.origins.iter().find(|o| glob_match(o, &origin));
        let by_path = self
            .path_prefixes
            .iter()
            .find(|p| dir.starts_with(canonical(Path::new(p))));
        let (allowed, reason) = match (by_origin, by_path) {
            (Some(o), _) => (true, format!("origin matches {o:?}")),
            (None, Some(p)) => (true, format!("folder is below {p:?}")),
            (None, None) => (
                false,
                format!(
                    "origin {origin:?} matches none of {:?} and {} is below none of {:?}",
                    self.origins,
                    dir.display(),
                    self.path_prefixes
                ),
            ),
        };
        OriginCheck {
            task: task.id.clone(),
            origin,
            allowed,
            reason,
        }
    }
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The origin of a pack folder: `builtin:NAME` inside a `tasks/` folder, else `path:DIR`.
pub fn pack_origin(pack_dir: &Path) -> String {
    let dir = canonical(pack_dir);
    let parent_is_tasks = dir
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|n| n == "tasks");
    match dir.file_name() {
        Some(name) if parent_is_tasks => format!("builtin:{}", name.to_string_lossy()),
        _ => format!("path:{}", dir.display()),
    }
}

/// A task's own origin: TB1 imports say so in their metadata; others inherit the pack's.
pub fn task_origin(task: &Task, pack_origin: &str) -> String {
    match task
        .config
        .metadata
        .get("source")
        .and_then(toml::Value::as_str)
    {
        Some("terminal-bench-1") => format!("tb1:{}", task.id),
        _ => pack_origin.to_string(),
    }
}
