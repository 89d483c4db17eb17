//! Task synthesis: a generator model turns a seed topic into a Harbor task.
//!
//! The generator answers with one JSON object (`geode.synth.v1`; a Markdown code fence around
//! it is tolerated):
//! ```json
//! {"id": "csv-dedupe", "category": "data", "difficulty": "easy",
//!  "description": "optional one line",
//!  "instruction": "the task text for the agent",
//!  "files": {"environment/Dockerfile": "FROM …", "tests/test.sh": "#!/bin/bash …",
//!            "solution/solve.sh": "#!/bin/bash …"}}
//! ```
//! `task.toml` is written from the fields unless `files` carries one; `*.sh` files are made
//! executable. The written folder must then load as a task (`Task::load`), or it is rejected.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::CurateError;

/// System prompt for the generator: answer with one task as a JSON object.
pub(crate) const SYSTEM: &str = "You write benchmark tasks for terminal agents in Harbor format. \
Answer with exactly one JSON object with the keys id, category, difficulty (easy, medium or \
hard), instruction and files (a map from relative path to file content, with \
environment/Dockerfile, tests/test.sh and solution/solve.sh). No prose.";

/// A task as the generator writes it (`geode.synth.v1`): what `write_task` turns into a folder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GeneratedTask {
    /// The task's id; names its folder, so no `/` and no `..`.
    pub id: String,
    /// `[metadata] category` of the written `task.toml`; `uncategorized` when absent.
    #[serde(default)]
    pub category: Option<String>,
    /// `[metadata] difficulty` of the written `task.toml`; `unknown` when absent.
    #[serde(default)]
    pub difficulty: Option<String>,
    /// `description` of the written `task.toml`, when given.
    #[serde(default)]
    pub description: Option<String>,
    /// The text of `instruction.md`.
    pub instruction: String,
    /// Other files by relative path (`environment/Dockerfile`, `tests/test.sh`, ...).
    #[serde(default)]
    pub files: BTreeMap<String, String>,
}

/// The user prompt for variant `index` of `topic`, the seed included.
pub(crate) fn prompt(topic: &str, index: usize, seed: u64) -> String {
    format!(
        "Seed topic: {topic}\nVariant: {index}\nSeed: {seed}\nWrite one self-contained task on \
         this topic whose tests/test.sh fails unless the task is solved."
    )
}

/// Parse a generator reply: the outermost `{...}` of the text.
pub fn parse_reply(text: &str) -> Result<GeneratedTask, CurateError> {
    let (Some(start), Some(end)) = (text.find('{'), text.rfind('}')) else {
        return Err(CurateError::Generator(
            "the reply holds no JSON object".into(),
        ));
    };
    if end < start {
        return Err(CurateError::Generator(
            "the reply holds no JSON object".into(),
        ));
    }
    serde_json::from_str(&text[start..=end])
        .map_err(|e| CurateError::Generator(format!("the reply is not a task object: {e}")))
}

fn safe_relative(rel: &str) -> bool {
    let p = Path::new(rel);
    !rel.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)))
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// Write the task under `root/ID`; returns the folder. Refuses unsafe paths and an existing
/// folder (ids must be unique across the synthesis).
pub fn write_task(root: &Path, task: &GeneratedTask) -> Result<PathBuf, CurateError> {
    if !safe_relative(&task.id) || task.id.contains('/') {
        return Err(CurateError::Generator(format!(
            "id {:?} cannot name a folder",
            task.id
        )));
    }
    let dir = root.join(&task.id);
    if dir.exists() {
        return Err(CurateError::Generator(format!(
            "id {:?} is used twice",
            task.id
        )));
    }
    let io = |p: &Path, e: std::io::Error| CurateError::Io {
        path: p.display().to_string(),
        source: e,
    };
    let mut files = task.files.clone();
    files.insert("instruction.md".into(), task.instruction.clone());
    files.entry("task.toml".into()).or_insert_with(|| {
        let mut t = format!(
            "version = \"1.0\"\n\n[task]\nname = {}\n",
            toml_string(&task.id)
        );
        if let Some(d) = &task.description {
            t.push_str(&format!("description = {}\n", toml_string(d)));
        }
        t.push_str(&format!(
            "\n[metadata]\ncategory = {}\ndifficulty = {}\nsource = \"synth\"\n",
            toml_string(task.category.as_deref().unwrap_or("uncategorized")),
            toml_string(task.difficulty.as_deref().unwrap_or("unknown"))
        ));
        t
    });
    for (rel, content) in &files {
        if !safe_relative(rel) {
            return Err(CurateError::Generator(format!(
                "file path {rel:?} leaves the task"
            )));
        }
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
        }
        std::fs::write(&path, content).map_err(|e| io(&path, e))?;
        let mode = if rel.ends_with(".sh") { 0o755 } else { 0o644 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| io(&path, e))?;
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fenced_replies_and_refuses_escapes() {
        let t = parse_reply("```json\n{\"id\": \"a\", \"instruction\": \"x\"}\n```").unwrap();
        assert_eq!(t.id, "a");
        assert!(parse_reply("no json").is_err());
        assert!(!safe_relative("../x"));
        assert!(!safe_relative("/etc/x"));
        assert!(safe_relative("tests/test.sh"));
    }
}
