//! `environment/docker-compose.yaml`: the services of a multi-container task.
//!
//! Harbor reads the file as an overlay on its own base, where the service `main` is the agent's
//! container, built from `environment/Dockerfile`; every other service is a sidecar (a
//! database, an API, an MCP server). GEODE reads it the same way: `main` stays the task's own
//! image (its `environment:` and `depends_on` are kept; its `image:` names the image only
//! when the task has neither a Dockerfile nor `docker_image`), and each sidecar becomes a
//! sandbox of its own image, started in `depends_on` order, its healthcheck waited for, on the
//! group's one network (see [`super::GroupNetwork`]).
//!
//! Read: `image`, `build` (a context string, or `context` / `dockerfile` / `args`),
//! `entrypoint` and `command` (a string or a list), `environment` (a map or `K=V` list),
//! `user`, `working_dir`, `healthcheck` (`test`, `interval`, `timeout`, `retries`,
//! `start_period`, `start_interval`, `disable`) and `depends_on` (a list, or a map of
//! conditions). Values interpolate `${VAR:-default}` / `${VAR-default}` to their default and
//! `$$` to `$`; a variable without a default is empty, with a note. Keys GEODE does not use
//! (`ports`, `volumes`, `networks`, ...) are noted, never an error.

use std::path::{Path, PathBuf};

use serde_yaml_ng::Value;

use self::raw::{DependsOn, RawFile, Words};
use crate::pack::Healthcheck;

mod raw;

/// The file's name inside a task's `environment/`.
pub const COMPOSE_FILE: &str = "docker-compose.yaml";

/// The service that is the agent's sandbox.
pub const MAIN_SERVICE: &str = "main";

#[derive(Debug, thiserror::Error)]
pub enum ComposeError {
    #[error("{path}: {field}: {message}")]
    Invalid {
        path: String,
        field: String,
        message: String,
    },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// A task's compose file, as GEODE runs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Compose {
    /// What the file adds to the `main` service.
    pub main: MainService,
    /// The other services, in an order that starts each after those it depends on.
    pub sidecars: Vec<Service>,
    /// What was read but is not applied (ignored keys, variables without a value).
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct MainService {
    /// `environment:`, added to the task's.
    pub env: Vec<(String, String)>,
    /// `image:`, used only when the task has no Dockerfile and no `docker_image`.
    pub image: Option<String>,
}

/// A sidecar service.
#[derive(Debug, Clone, PartialEq)]
pub struct Service {
    pub name: String,
    pub image: Option<String>,
    pub build: Option<BuildContext>,
    /// Replace the image's ENTRYPOINT (and drop its CMD, as compose does).
    pub entrypoint: Option<Vec<String>>,
    /// Replace the image's CMD.
    pub command: Option<Vec<String>>,
    pub env: Vec<(String, String)>,
    pub user: Option<String>,
    pub working_dir: Option<String>,
    pub healthcheck: Option<Healthcheck>,
    /// The services it starts after (never `main`, which always starts first).
    pub depends_on: Vec<String>,
}

impl Service {
    /// What the sidecar runs, given its image's ENTRYPOINT and CMD.
    pub fn argv(&self, image_entrypoint: &[String], image_cmd: &[String]) -> Vec<String> {
        match (&self.entrypoint, &self.command) {
            (Some(entry), command) => entry
                .iter()
                .chain(command.iter().flatten())
                .cloned()
                .collect(),
            (None, Some(command)) => image_entrypoint.iter().chain(command).cloned().collect(),
            (None, None) => image_entrypoint.iter().chain(image_cmd).cloned().collect(),
        }
    }
}

/// `build:`: the context folder (inside `environment/`) and its Dockerfile.
#[derive(Debug, Clone, PartialEq)]
pub struct BuildContext {
    pub context: PathBuf,
    pub args: Vec<(String, String)>,
}

/// Read `env_dir/docker-compose.yaml`; `Ok(None)` when the task has none.
pub fn load(env_dir: &Path) -> Result<Option<Compose>, ComposeError> {
    let path = env_dir.join(COMPOSE_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ComposeError::Io {
                path: path.display().to_string(),
                source,
            });
        }
    };
    parse(&text, env_dir, &path.display().to_string()).map(Some)
}

/// Parse a compose file's text; `env_dir` is where build contexts are resolved, `path` names
/// the file in errors.
pub fn parse(text: &str, env_dir: &Path, path: &str) -> Result<Compose, ComposeError> {
    let invalid = |field: &str, message: String| ComposeError::Invalid {
        path: path.to_string(),
        field: field.to_string(),
        message,
    };
    let mut doc: Value =
        serde_yaml_ng::from_str(text).map_err(|e| invalid("(document)", e.to_string()))?;
    let mut notes = Vec::new();
    interpolate(&mut doc, "", &mut notes);
    let file: RawFile =
        serde_yaml_ng::from_value(doc).map_err(|e| invalid("(document)", e.to_string()))?;
    for key in file.other.keys() {
        if key != "version" && key != "name" {
            notes.push(format!("compose: top-level `{key}` is not used"));
        }
    }
    let mut main = MainService::default();
    let mut sidecars = Vec::new();
    for (name, raw) in file.services {
        let field = |key: &str| format!("services.{name}.{key}");
        for key in raw.other.keys() {
            notes.push(format!("compose: services.{name}.{key} is not used"));
        }
        let env = raw
            .environment
            .map(|e| e.pairs(&field("environment")))
            .transpose()
            .map_err(|m| invalid(&field("environment"), m))?
            .unwrap_or_default();
        if name == MAIN_SERVICE {
            main.env = env;
            main.image = raw.image.filter(|i| !i.is_empty());
            continue;
        }
        if !valid_name(&name) {
            return Err(invalid(
                &format!("services.{name}"),
                "a service name is letters, digits, `-`, `_` and `.`, starting with a letter or \
                 digit"
                    .into(),
            ));
        }
        let build = match raw.build {
            None => None,
            Some(build) => Some(
                build
                    .resolve(env_dir)
                    .map_err(|m| invalid(&field("build"), m))?,
            ),
        };
        if raw.image.is_none() && build.is_none() {
            return Err(invalid(
                &format!("services.{name}"),
                "needs an `image` or a `build`".into(),
            ));
        }
        let healthcheck = match raw.healthcheck {
            None => None,
            Some(h) => h
                .resolve()
                .map_err(|(key, m)| invalid(&field(&format!("healthcheck.{key}")), m))?,
        };
        let depends_on = raw
            .depends_on
            .map(DependsOn::names)
            .unwrap_or_default()
            .into_iter()
            .filter(|d| d != MAIN_SERVICE)
            .collect();
        sidecars.push(Service {
            name,
            image: raw.image,
            build,
            entrypoint: raw.entrypoint.map(Words::argv),
            command: raw.command.map(Words::argv),
            env,
            user: raw.user.filter(|u| !u.is_empty()),
            working_dir: raw.working_dir.filter(|w| !w.is_empty()),
            healthcheck,
            depends_on,
        });
    }
    let sidecars = start_order(sidecars)
        .map_err(|(name, m)| invalid(&format!("services.{name}.depends_on"), m))?;
    Ok(Compose {
        main,
        sidecars,
        notes,
    })
}

fn valid_name(name: &str) -> bool {
    name.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Services sorted so each comes after what it depends on (file order otherwise kept).
fn start_order(mut pending: Vec<Service>) -> Result<Vec<Service>, (String, String)> {
    let names: Vec<String> = pending.iter().map(|s| s.name.clone()).collect();
    for s in &pending {
        if let Some(unknown) = s.depends_on.iter().find(|d| !names.contains(d)) {
            return Err((s.name.clone(), format!("no service named {unknown:?}")));
        }
    }
    let mut ordered: Vec<Service> = Vec::with_capacity(pending.len());
    while !pending.is_empty() {
        let ready = pending.iter().position(|s| {
            s.depends_on
                .iter()
                .all(|d| ordered.iter().any(|o| &o.name == d))
        });
        match ready {
            Some(i) => ordered.push(pending.remove(i)),
            None => {
                let stuck: Vec<&str> = pending.iter().map(|s| s.name.as_str()).collect();
                return Err((
                    pending[0].name.clone(),
                    format!("a dependency cycle among {}", stuck.join(", ")),
                ));
            }
        }
    }
    Ok(ordered)
}

/// Replace `${VAR:-default}`, `${VAR-default}`, `${VAR}`, `$VAR` and `$$` in every string
/// of the document. GEODE runs a task the same on every machine, so no variable is read from
/// the environment: a default is used, and a variable without one is empty (noted).
fn interpolate(value: &mut Value, at: &str, notes: &mut Vec<String>) {
    match value {
        Value::String(s) => *s = substitute(s, at, notes),
        Value::Sequence(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                interpolate(item, &format!("{at}[{i}]"), notes);
            }
        }
        Value::Mapping(map) => {
            for (k, v) in map.iter_mut() {
                let key = k.as_str().unwrap_or("?");
                let here = if at.is_empty() {
                    key.to_string()
                } else {
                    format!("{at}.{key}")
                };
                interpolate(v, &here, notes);
            }
        }
        _ => {}
    }
}

fn substitute(s: &str, at: &str, notes: &mut Vec<String>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('{') {
            let Some(end) = body.find('}') else {
                out.push_str(&rest[i..]);
                rest = "";
                break;
            };
            let expr = &body[..end];
            let (name, default) = match expr.split_once(":-").or_else(|| expr.split_once('-')) {
                Some((name, default)) => (name, Some(default)),
                None => (expr.split_once(":?").map_or(expr, |(n, _)| n), None),
            };
            match default {
                Some(d) => out.push_str(d),
                None => notes.push(format!(
                    "compose: {at}: ${{{name}}} has no value here (left empty)"
                )),
            }
            rest = &body[end + 1..];
        } else {
            let len = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            if len == 0 {
                out.push('$');
            } else {
                notes.push(format!(
                    "compose: {at}: ${} has no value here (left empty)",
                    &after[..len]
                ));
            }
            rest = &after[len..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::raw::duration_secs;
    use super::*;

    fn parsed(text: &str) -> Result<Compose, ComposeError> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("db")).unwrap();
        std::fs::write(dir.path().join("db/Dockerfile"), "FROM x\n").unwrap();
        parse(text, dir.path(), "environment/docker-compose.yaml")
    }

    #[test]
    fn services_start_after_what_they_depend_on() {
        let c = parsed(
            "services:\n  main:\n    image: ${MAIN_IMAGE_NAME}\n    environment:\n      DB: db\n    depends_on: [api]\n\
             \x20 api:\n    image: api:1\n    depends_on:\n      db: {condition: service_healthy}\n\
             \x20 db:\n    build: ./db\n    environment: [\"PORT=5432\"]\n    ports: [\"5432\"]\n    healthcheck:\n      test: [\"CMD-SHELL\", \"pg_isready -q\"]\n      interval: 1s\n      start_period: 1m30s\n",
        )
        .unwrap();
        let names: Vec<_> = c.sidecars.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["db", "api"]);
        assert_eq!(c.main.env, vec![("DB".to_string(), "db".to_string())]);
        let db = &c.sidecars[0];
        assert_eq!(db.env, vec![("PORT".to_string(), "5432".to_string())]);
        let h = db.healthcheck.as_ref().unwrap();
        assert_eq!(h.command, "pg_isready -q");
        assert_eq!(
            (h.interval_sec, h.start_period_sec, h.retries),
            (1.0, 90.0, 3)
        );
        assert!(
            c.notes.iter().any(|n| n.contains("services.db.ports")),
            "{:?}",
            c.notes
        );
        assert!(
            c.notes.iter().any(|n| n.contains("MAIN_IMAGE_NAME")),
            "{:?}",
            c.notes
        );
    }

    #[test]
    fn bad_files_name_the_field() {
        let cases = [
            (
                "services:\n  a:\n    image: x\n    depends_on: [b]\n  b:\n    image: y\n    depends_on: [a]\n",
                "services.a.depends_on",
            ),
            (
                "services:\n  a:\n    image: x\n    depends_on: [nope]\n",
                "services.a.depends_on",
            ),
            ("services:\n  a:\n    environment: {}\n", "services.a"),
            (
                "services:\n  a:\n    build: ../outside\n",
                "services.a.build",
            ),
            (
                "services:\n  a:\n    image: x\n    healthcheck:\n      test: [\"CMD\"]\n",
                "services.a.healthcheck.test",
            ),
            (
                "services:\n  a:\n    image: x\n    healthcheck:\n      test: ok\n      interval: 3 days\n",
                "services.a.healthcheck.interval",
            ),
        ];
        for (text, field) in cases {
            let err = parsed(text).unwrap_err().to_string();
            assert!(err.contains(field), "{text}: {err}");
            assert!(
                err.starts_with("environment/docker-compose.yaml: "),
                "{err}"
            );
        }
    }

    #[test]
    fn commands_follow_compose_override_rules() {
        let c = parsed(
            "services:\n  a:\n    image: x\n    command: postgres -c 'log_statement=all'\n  b:\n    image: x\n    entrypoint: [\"/run.sh\"]\n  c:\n    image: x\n",
        )
        .unwrap();
        let entry = vec!["docker-entrypoint.sh".to_string()];
        let cmd = vec!["postgres".to_string()];
        assert_eq!(
            c.sidecars[0].argv(&entry, &cmd),
            [
                "docker-entrypoint.sh",
                "postgres",
                "-c",
                "log_statement=all"
            ]
        );
        assert_eq!(c.sidecars[1].argv(&entry, &cmd), ["/run.sh"]);
        assert_eq!(
            c.sidecars[2].argv(&entry, &cmd),
            ["docker-entrypoint.sh", "postgres"]
        );
    }

    #[test]
    fn interpolation_uses_defaults_and_escapes() {
        let mut notes = Vec::new();
        assert_eq!(
            substitute("${A:-x}-${B-y}-$$HOME-${C}", "f", &mut notes),
            "x-y-$HOME-"
        );
        assert_eq!(notes.len(), 1);
        assert_eq!(duration_secs("1m30s"), Some(90.0));
        assert_eq!(duration_secs("250ms"), Some(0.25));
        assert_eq!(duration_secs("10"), None);
    }
}
