//! The compose file as YAML gives it: the shapes a field may take (a string or a list, a map
//! or `K=V` lines, a context string or a build map), each resolved into one meaning, and
//! nothing of it outside this module but what [`super::parse`] asks for.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_yaml_ng::Value;

use super::BuildContext;
use crate::Healthcheck;
use crate::dockerfile::shell_quote;

#[derive(Deserialize)]
pub(super) struct RawFile {
    #[serde(default)]
    pub(super) services: BTreeMap<String, RawService>,
    #[serde(flatten)]
    pub(super) other: BTreeMap<String, Value>,
}

#[derive(Deserialize)]
pub(super) struct RawService {
    pub(super) image: Option<String>,
    pub(super) build: Option<RawBuild>,
    pub(super) entrypoint: Option<Words>,
    pub(super) command: Option<Words>,
    pub(super) environment: Option<Environment>,
    pub(super) user: Option<String>,
    pub(super) working_dir: Option<String>,
    pub(super) healthcheck: Option<RawHealthcheck>,
    pub(super) depends_on: Option<DependsOn>,
    #[serde(flatten)]
    pub(super) other: BTreeMap<String, Value>,
}

/// A command as compose takes it: a list, or a string split into words as a shell would
/// (quotes group, no expansion).
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum Words {
    List(Vec<String>),
    Line(String),
}

impl Words {
    pub(super) fn argv(self) -> Vec<String> {
        match self {
            Words::List(list) => list,
            Words::Line(line) => crate::dockerfile::split_words(&line),
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum Environment {
    Map(BTreeMap<String, Option<Scalar>>),
    List(Vec<String>),
}

/// A YAML scalar that compose turns into a string (`PORT: 5432`, `DEBUG: true`).
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum Scalar {
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Scalar {
    pub(super) fn text(self) -> String {
        match self {
            Scalar::Text(s) => s,
            Scalar::Int(i) => i.to_string(),
            Scalar::Float(f) => f.to_string(),
            Scalar::Bool(b) => b.to_string(),
        }
    }
}

impl Environment {
    pub(super) fn pairs(self, field: &str) -> Result<Vec<(String, String)>, String> {
        match self {
            Environment::Map(map) => Ok(map
                .into_iter()
                .map(|(k, v)| (k, v.map(Scalar::text).unwrap_or_default()))
                .collect()),
            Environment::List(list) => list
                .into_iter()
                .map(|kv| match kv.split_once('=') {
                    Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
                    _ => Err(format!("{field}: {kv:?} is not KEY=VALUE")),
                })
                .collect(),
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawBuild {
    Context(String),
    Full {
        #[serde(default)]
        context: Option<String>,
        #[serde(default)]
        dockerfile: Option<String>,
        #[serde(default)]
        args: Option<Environment>,
    },
}

impl RawBuild {
    /// The context folder and Dockerfile as compose resolves them (a relative context from
    /// `env_dir`, a relative Dockerfile from the context), each refused unless it resolves,
    /// links and `..` followed, to a path inside `task_dir`. An error names the key at fault
    /// (`context`, `dockerfile`, `args`).
    pub(super) fn resolve(
        self,
        task_dir: &Path,
        env_dir: &Path,
    ) -> Result<BuildContext, (&'static str, String)> {
        let (context, dockerfile, args) = match self {
            RawBuild::Context(c) => (Some(c), None, None),
            RawBuild::Full {
                context,
                dockerfile,
                args,
            } => (context, dockerfile, args),
        };
        let root = std::fs::canonicalize(task_dir).map_err(|e| {
            (
                "context",
                format!("the task's folder {}: {e}", task_dir.display()),
            )
        })?;
        let context = context.unwrap_or_else(|| ".".into());
        let dir = inside(&root, &env_dir.join(&context))
            .map_err(|m| ("context", format!("{context:?} {m}")))?;
        if !dir.is_dir() {
            return Err(("context", format!("{context:?} is not a folder")));
        }
        let name = dockerfile.unwrap_or_else(|| "Dockerfile".into());
        let file =
            inside(&root, &dir.join(&name)).map_err(|m| ("dockerfile", format!("{name:?} {m}")))?;
        if !file.is_file() {
            return Err(("dockerfile", format!("{name:?} is not a file")));
        }
        let args = args
            .map(|a| a.pairs("args"))
            .transpose()
            .map_err(|m| ("args", m))?
            .unwrap_or_default();
        Ok(BuildContext {
            context: dir,
            dockerfile: file,
            args,
        })
    }
}

/// `path` resolved (links followed, `..` applied), when that lies inside `root` (itself
/// resolved); else why not, as the end of a sentence naming the path.
fn inside(root: &Path, path: &Path) -> Result<PathBuf, String> {
    let resolved = std::fs::canonicalize(path)
        .map_err(|e| format!("cannot be resolved ({}): {e}", path.display()))?;
    if resolved.starts_with(root) {
        Ok(resolved)
    } else {
        Err(format!(
            "resolves to {}, outside the task's folder {}: a build reads only the task's own \
             files",
            resolved.display(),
            root.display()
        ))
    }
}

#[derive(Deserialize)]
pub(super) struct RawHealthcheck {
    pub(super) test: Option<Words>,
    pub(super) interval: Option<String>,
    pub(super) timeout: Option<String>,
    pub(super) retries: Option<u32>,
    pub(super) start_period: Option<String>,
    pub(super) start_interval: Option<String>,
    #[serde(default)]
    pub(super) disable: bool,
}

impl RawHealthcheck {
    /// Docker's defaults where a key is missing; `None` when disabled.
    pub(super) fn resolve(self) -> Result<Option<Healthcheck>, (&'static str, String)> {
        if self.disable {
            return Ok(None);
        }
        let test = match self.test {
            None => return Err(("test", "missing".into())),
            Some(Words::Line(line)) => line,
            Some(Words::List(list)) => match list.split_first() {
                Some((kind, _)) if kind == "NONE" => return Ok(None),
                Some((kind, rest)) if kind == "CMD-SHELL" => rest.join(" "),
                Some((kind, rest)) if kind == "CMD" && !rest.is_empty() => rest
                    .iter()
                    .map(|w| shell_quote(w))
                    .collect::<Vec<_>>()
                    .join(" "),
                _ => {
                    return Err((
                        "test",
                        "a list starts with \"CMD\", \"CMD-SHELL\" or \"NONE\"".into(),
                    ));
                }
            },
        };
        let secs = |key: &'static str, v: Option<String>, default: f64| match v {
            None => Ok(default),
            Some(text) => duration_secs(&text).ok_or((key, format!("{text:?} is not a duration"))),
        };
        Ok(Some(Healthcheck {
            command: test,
            interval_sec: secs("interval", self.interval, 30.0)?,
            timeout_sec: secs("timeout", self.timeout, 30.0)?,
            start_period_sec: secs("start_period", self.start_period, 0.0)?,
            start_interval_sec: secs("start_interval", self.start_interval, 5.0)?,
            retries: self.retries.unwrap_or(3),
        }))
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum DependsOn {
    List(Vec<String>),
    Map(BTreeMap<String, Value>),
}

impl DependsOn {
    /// Every condition comes to the same here: a sidecar starts once those before it are
    /// started and, where they have a healthcheck, healthy.
    pub(super) fn names(self) -> Vec<String> {
        match self {
            DependsOn::List(list) => list,
            DependsOn::Map(map) => map.into_keys().collect(),
        }
    }
}

/// A compose duration (`1m30s`, `10s`, `500ms`, `1h`) in seconds.
pub(super) fn duration_secs(text: &str) -> Option<f64> {
    let mut total = 0.0;
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            "us" | "µs" => 1e-6,
            _ => return None,
        };
        total += number * scale;
        rest = &rest[unit_len..];
    }
    Some(total)
}
