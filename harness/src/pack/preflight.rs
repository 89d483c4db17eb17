//! `geode tasks check`: what GEODE will do with each task of a pack, said before anything runs,
//! beside what Harbor would do with it: the `task.toml` keys GEODE reads past, where each base
//! image will come from (and what stands in for it), the compose fields it does not apply, and
//! what it refuses. People bringing a suite written for Harbor read this instead of finding out
//! trial by trial.

use std::path::Path;

use super::{PackError, Task, TaskConfig, TaskPack};
use crate::env::SourceRules;
use crate::env::dockerfile::{self, Instruction};

/// One task's findings.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskCheck {
    /// The task's id, or its folder when it did not load.
    pub task: String,
    /// Why GEODE will not run it (a broken file, an environment it cannot give); `None` when
    /// it runs.
    pub refused: Option<String>,
    /// Where its base images come from.
    pub images: Vec<String>,
    /// What GEODE does differently from Harbor with it (ignored keys, compose fields).
    pub differences: Vec<String>,
}

/// Every task of the pack at `root`, loaded as a trial would load it; `images` are the rules a
/// run would take its base images by (its store, mirrors, aliases).
pub fn check_pack(root: &Path, images: &SourceRules<'_>) -> Result<Vec<TaskCheck>, PackError> {
    let pack = TaskPack::load(root)?;
    let mut out: Vec<TaskCheck> = pack
        .tasks
        .iter()
        .map(|task| check_task(task, images))
        .collect();
    out.extend(pack.broken.iter().map(|e| TaskCheck {
        task: broken_folder(e, root),
        refused: Some(e.to_string()),
        images: Vec::new(),
        differences: Vec::new(),
    }));
    Ok(out)
}

fn check_task(task: &Task, images: &SourceRules<'_>) -> TaskCheck {
    let mut differences = ignored_keys(task);
    let env = &task.config.environment;
    if !env.mcp_servers.is_empty() {
        differences.push(format!(
            "environment.mcp_servers: {} server(s) are not connected to GEODE's agent",
            env.mcp_servers.len()
        ));
    }
    if let Some(compose) = &task.compose {
        differences.extend(compose.notes.iter().cloned());
    }
    let images = match base_images(task) {
        Ok(refs) => refs
            .iter()
            .map(|r| crate::env::source_plan(r, images))
            .collect(),
        Err(why) => vec![why],
    };
    TaskCheck {
        task: task.id.clone(),
        refused: env.unsupported(),
        images,
        differences,
    }
}

/// `task.toml` keys that loaded into nothing: Harbor's models ignore unknown keys too, but a
/// key GEODE does not know may be one Harbor acts on.
fn ignored_keys(task: &Task) -> Vec<String> {
    let path = task.dir.join("task.toml");
    let Ok(raw) = std::fs::read_to_string(&path)
        .map_err(|e| e.to_string())
        .and_then(|text| text.parse::<toml::Table>().map_err(|e| e.to_string()))
    else {
        return Vec::new();
    };
    let Some(known) = written_back(&task.config) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    unknown_in(&raw, &known, "", &mut out);
    out.into_iter()
        .map(|key| format!("task.toml: `{key}` is not read by GEODE (ignored)"))
        .collect()
}

fn unknown_in(raw: &toml::Table, known: &toml::Table, at: &str, out: &mut Vec<String>) {
    for (key, value) in raw {
        let here = if at.is_empty() {
            key.clone()
        } else {
            format!("{at}.{key}")
        };
        match (value, known.get(key)) {
            (_, None) => out.push(here),
            // Free-form by design: every key is kept as written.
            _ if here == "metadata" => {}
            (toml::Value::Table(raw), Some(toml::Value::Table(known))) => {
                unknown_in(raw, known, &here, out)
            }
            (toml::Value::Array(raw), Some(toml::Value::Array(known))) => {
                for (i, (r, k)) in raw.iter().zip(known).enumerate() {
                    if let (toml::Value::Table(r), toml::Value::Table(k)) = (r, k) {
                        unknown_in(r, k, &format!("{here}[{i}]"), out);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The registry images the task's main environment starts from: `docker_image`, else each
/// `FROM` of its Dockerfile that is not an earlier stage, else the compose file's `main` image.
fn base_images(task: &Task) -> Result<Vec<String>, String> {
    if let Some(image) = &task.config.environment.docker_image {
        return Ok(vec![image.clone()]);
    }
    let path = task.environment_dir().join("Dockerfile");
    if path.is_file() {
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let steps = dockerfile::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        return Ok(from_images(&steps));
    }
    Ok(task
        .compose
        .as_ref()
        .and_then(|c| c.main.image.clone())
        .into_iter()
        .collect())
}

/// The `FROM` images of a Dockerfile that name a registry image (not an earlier stage), with
/// the global `ARG` defaults substituted.
fn from_images(steps: &[dockerfile::Step]) -> Vec<String> {
    let mut args: std::collections::BTreeMap<&str, &str> = std::collections::BTreeMap::new();
    let mut stages: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for step in steps {
        match &step.instruction {
            // Only the ARGs before the first FROM apply to FROM lines.
            Instruction::Arg {
                name,
                default: Some(default),
            } if out.is_empty() && stages.is_empty() => {
                args.insert(name, default);
            }
            Instruction::From { image, alias } => {
                let image = substitute(image, &args);
                if !stages.contains(&image.as_str()) {
                    out.push(image);
                }
                if let Some(alias) = alias {
                    stages.push(alias);
                }
            }
            _ => {}
        }
    }
    out
}

/// `${NAME}` and `$NAME` replaced by the build argument's default, when it has one.
fn substitute(text: &str, args: &std::collections::BTreeMap<&str, &str>) -> String {
    let mut out = text.to_string();
    for (name, value) in args {
        out = out
            .replace(&format!("${{{name}}}"), value)
            .replace(&format!("${name}"), value);
    }
    out
}

/// The folder a broken task's error names (its `task.toml` or another file of it).
fn broken_folder(e: &PackError, root: &Path) -> String {
    let path = match e {
        PackError::Invalid { path, .. } | PackError::Io { path, .. } => Path::new(path),
    };
    path.strip_prefix(root)
        .ok()
        .and_then(|rel| rel.components().next())
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// What the loaded configuration holds, written back: a key of the file that is not there was
/// read past (every field serializes under the name it is read by: no renames or aliases).
fn written_back(config: &TaskConfig) -> Option<toml::Table> {
    toml::Table::try_from(config).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_key_survives_being_written_back() {
        let text = r#"
schema_version = "1.1"
[task]
name = "a/b"
[metadata]
anything = { goes = 1 }
[agent]
timeout_sec = 10.0
[verifier]
timeout_sec = 5
env = { A = "1" }
[environment]
cpus = 2
network_mode = "no-network"
"#;
        let config: TaskConfig = toml::from_str(text).unwrap();
        let raw: toml::Table = text.parse().unwrap();
        let mut out = Vec::new();
        unknown_in(&raw, &written_back(&config).unwrap(), "", &mut out);
        assert_eq!(out, Vec::<String>::new());
    }

    #[test]
    fn unknown_keys_are_named_by_their_path() {
        let text = "future = 1\n[environment]\ncpus = 1\nmystery = \"x\"\n[[steps]]\nname = \"s\"\nodd = 2\n";
        let config: TaskConfig = toml::from_str(text).unwrap();
        let raw: toml::Table = text.parse().unwrap();
        let mut out = Vec::new();
        unknown_in(&raw, &written_back(&config).unwrap(), "", &mut out);
        out.sort();
        assert_eq!(out, ["environment.mystery", "future", "steps[0].odd"]);
    }

    #[test]
    fn stages_are_not_images_and_global_args_are_substituted() {
        let steps = dockerfile::parse(
            "ARG BASE=debian:bookworm-slim\nFROM ${BASE} AS build\nRUN true\nFROM build\nFROM python:3.11-slim\n",
        )
        .unwrap();
        assert_eq!(
            from_images(&steps),
            ["debian:bookworm-slim", "python:3.11-slim"]
        );
    }
}
