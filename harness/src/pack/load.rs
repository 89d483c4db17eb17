//! Loading tasks and packs from disk: a task folder (with its steps and compose file) into a
//! [`Task`], a folder of them into a [`TaskPack`] where a broken task sits beside the others.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::config::{DEFAULT_AGENT_TIMEOUT, DEFAULT_VERIFIER_TIMEOUT, seconds};
use super::{
    PackError, PackHash, StepSection, TaskConfig, TaskHash, hash_task_dir, invalid, io_err,
    pack_hash,
};
use crate::env::compose::{self, Compose, ComposeError};

/// A multi-step task's steps: each needs `steps/<name>/instruction.md` (not empty) and a test
/// script, its own `steps/<name>/tests/test.sh` or the task's `tests/test.sh`.
fn load_steps(dir: &Path, config: &TaskConfig) -> Result<Vec<Step>, PackError> {
    let mut steps = Vec::new();
    for section in config.steps.iter().flatten() {
        let step_dir = dir.join("steps").join(&section.name);
        let path = step_dir.join("instruction.md");
        let instruction = std::fs::read_to_string(&path).map_err(|e| io_err(&path, e))?;
        if instruction.trim().is_empty() {
            return Err(invalid(&path, "the step's instruction is empty"));
        }
        let own = step_dir.join("tests/test.sh");
        if !own.is_file() && !dir.join("tests/test.sh").is_file() {
            return Err(invalid(
                &own,
                format!(
                    "missing: step {:?} needs steps/{0}/tests/test.sh or the task's tests/test.sh",
                    section.name
                ),
            ));
        }
        steps.push(Step {
            config: section.clone(),
            dir: step_dir,
            instruction,
        });
    }
    Ok(steps)
}

/// One loaded task.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    /// `task.name` when set, else the folder name.
    pub id: String,
    /// The task's folder (the one holding `task.toml`).
    pub dir: PathBuf,
    /// The task's `task.toml`, parsed.
    pub config: TaskConfig,
    /// The task's instruction; empty for a multi-step task without a top-level one.
    pub instruction: String,
    /// Content hash of the task's folder.
    pub hash: TaskHash,
    /// A multi-step task's steps, in order (empty for a single-step task).
    pub steps: Vec<Step>,
    /// `environment/docker-compose.yaml`, when the task has one.
    pub compose: Option<Compose>,
}

/// One step of a multi-step task, loaded: its `[[steps]]` entry and `steps/<name>/`.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The step's `[[steps]]` entry of `task.toml`.
    pub config: StepSection,
    /// The step's folder, `steps/<name>/`.
    pub dir: PathBuf,
    /// The step's `instruction.md` (never empty).
    pub instruction: String,
}

impl Step {
    /// The step's name, as `[[steps]]` gives it.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// `steps/<name>/solution/solve.sh`, when the step has its own.
    pub fn solution(&self) -> Option<PathBuf> {
        let p = self.dir.join("solution").join("solve.sh");
        p.is_file().then_some(p)
    }

    /// `steps/<name>/tests/`, whether or not it exists.
    pub fn tests_dir(&self) -> PathBuf {
        self.dir.join("tests")
    }

    /// The step's agent timeout, else the task's, else Harbor's default.
    pub fn agent_timeout(&self, task: &TaskConfig) -> Duration {
        seconds(
            self.config.agent.timeout_sec.or(task.agent.timeout_sec),
            DEFAULT_AGENT_TIMEOUT,
        )
    }

    /// The step's verifier timeout, else the task's, else Harbor's default.
    pub fn verifier_timeout(&self, task: &TaskConfig) -> Duration {
        seconds(
            self.config
                .verifier
                .timeout_sec
                .or(task.verifier.timeout_sec),
            DEFAULT_VERIFIER_TIMEOUT,
        )
    }
}

impl Task {
    /// Load and validate one task folder.
    pub fn load(dir: &Path) -> Result<Task, PackError> {
        let toml_path = dir.join("task.toml");
        let text = std::fs::read_to_string(&toml_path).map_err(|e| io_err(&toml_path, e))?;
        let mut config: TaskConfig =
            toml::from_str(&text).map_err(|e| invalid(&toml_path, e.to_string().trim_end()))?;
        // Harbor 0.25 and 0.26 load any `schema_version` (the legacy top-level `version` is
        // renamed to it) and check nothing of its value; third-party suites write "2.0" in every
        // task, so refusing other values would refuse tasks Harbor runs.
        config.validate(&toml_path)?;
        let steps = load_steps(dir, &config)?;
        let instruction_path = dir.join("instruction.md");
        let instruction = match std::fs::read_to_string(&instruction_path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !steps.is_empty() => {
                String::new()
            }
            Err(e) => return Err(io_err(&instruction_path, e)),
            Ok(text) if text.trim().is_empty() && steps.is_empty() => {
                return Err(invalid(&instruction_path, "the instruction is empty"));
            }
            Ok(text) => text,
        };
        config
            .environment
            .resolve_sizes("environment", &toml_path)?;
        config
            .environment
            .validate_resources("environment", &toml_path)?;
        if let Some(verifier) = config.verifier.environment.as_mut() {
            verifier.resolve_sizes("verifier.environment", &toml_path)?;
            verifier.validate_resources("verifier.environment", &toml_path)?;
        }
        let mut compose = compose::load(dir, &config.environment.env).map_err(|e| match e {
            ComposeError::Io { path, source } => PackError::Io { path, source },
            ComposeError::Invalid {
                path,
                field,
                message,
            } => PackError::Invalid {
                path,
                message: format!("{field}: {message}"),
            },
        })?;
        if let Some(c) = compose.as_mut()
            && c.main.build.is_some()
            && config.environment.docker_image.is_some()
        {
            c.notes.push(
                "compose: services.main.build is not used: task.toml's [environment] \
                 docker_image names the image"
                    .into(),
            );
        }
        let dockerfile = dir.join("environment").join("Dockerfile");
        let main = compose.as_ref().map(|c| &c.main);
        if !dockerfile.is_file()
            && config.environment.docker_image.is_none()
            && main.is_none_or(|m| m.image.is_none() && m.build.is_none())
        {
            return Err(invalid(
                &dockerfile,
                "missing: environment/ needs a Dockerfile, or task.toml an [environment] \
                 docker_image, or docker-compose.yaml a build or an image for `main`",
            ));
        }
        let folder = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let id = config.task.name.clone().unwrap_or(folder);
        check_name(&id, &toml_path)?;
        Ok(Task {
            id,
            dir: dir.to_path_buf(),
            hash: hash_task_dir(dir)?,
            config,
            instruction,
            steps,
            compose,
        })
    }

    /// `solution/solve.sh`, when the task has one.
    pub fn solution(&self) -> Option<PathBuf> {
        let p = self.dir.join("solution").join("solve.sh");
        p.is_file().then_some(p)
    }

    /// `environment/`: the Dockerfile and its build context (whether or not it exists).
    pub fn environment_dir(&self) -> PathBuf {
        self.dir.join("environment")
    }

    /// `tests/`, which the verifier gets (whether or not it exists).
    pub fn tests_dir(&self) -> PathBuf {
        self.dir.join("tests")
    }

    /// Harbor requires `tests/test.sh`; a task without one still loads, and each of its trials
    /// ends `verifier_crashed` (infrastructure, never the agent's failure).
    pub fn has_test_script(&self) -> bool {
        self.tests_dir().join("test.sh").is_file()
    }
}

/// A task's name (`task.name`, else its folder's) is printed in progress lines, tables and
/// folder names: control characters (an escape sequence that rewrites a terminal, a newline that
/// forges a line of a report) make a task broken rather than reach any of them.
fn check_name(name: &str, file: &Path) -> Result<(), PackError> {
    if name.trim().is_empty() {
        return Err(invalid(file, "task.name is empty"));
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(invalid(
            file,
            format!(
                "task name {:?} holds the control character {:?}: names are printed to \
                 terminals and reports",
                name.escape_default().to_string(),
                c
            ),
        ));
    }
    Ok(())
}

/// A folder of tasks; broken tasks are kept as errors beside the good ones.
#[derive(Debug)]
pub struct TaskPack {
    /// The folder loaded: a folder of tasks, or one task.
    pub root: PathBuf,
    /// The tasks that loaded, sorted by id (ids are unique).
    pub tasks: Vec<Task>,
    /// One error per task folder that did not load.
    pub broken: Vec<PackError>,
}

impl TaskPack {
    /// Every subfolder holding a `task.toml` is a task (sorted by id). A folder that is itself a
    /// task loads as a pack of one.
    pub fn load(root: &Path) -> Result<TaskPack, PackError> {
        if !root.is_dir() {
            return Err(invalid(root, "not a directory"));
        }
        let mut dirs = Vec::new();
        if root.join("task.toml").is_file() {
            dirs.push(root.to_path_buf());
        } else {
            for entry in std::fs::read_dir(root).map_err(|e| io_err(root, e))? {
                let path = entry.map_err(|e| io_err(root, e))?.path();
                if path.join("task.toml").is_file() {
                    dirs.push(path);
                }
            }
        }
        let mut tasks = Vec::new();
        let mut broken = Vec::new();
        for dir in dirs {
            match Task::load(&dir) {
                Ok(t) => tasks.push(t),
                Err(e) => broken.push(e),
            }
        }
        tasks.sort_by(|a, b| a.id.cmp(&b.id));
        if let Some(pair) = tasks.windows(2).find(|w| w[0].id == w[1].id) {
            return Err(invalid(
                &pair[1].dir,
                format!("task name {:?} is used by two folders", pair[1].id),
            ));
        }
        Ok(TaskPack {
            root: root.to_path_buf(),
            tasks,
            broken,
        })
    }

    /// Keep the tasks whose id matches a shell-style glob (`*`, `?`).
    pub fn filter(&mut self, pattern: &str) {
        self.tasks.retain(|t| glob_match(pattern, &t.id));
    }

    /// The pack's hash over its (possibly filtered) tasks and `trials_per_task`.
    pub fn hash(&self, trials_per_task: u32) -> PackHash {
        pack_hash(
            self.tasks.iter().map(|t| (t.id.as_str(), &t.hash)),
            trials_per_task,
        )
    }
}

/// Shell-style glob: `*` any run, `?` one character.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("geode/*", "geode/git-log"));
        assert!(glob_match("*log*", "geode/git-log"));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "abbc"));
        assert!(!glob_match("geode/x*", "geode/git"));
    }
}
