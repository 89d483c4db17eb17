//! `environment/docker-compose.yaml`: the services of a multi-container task.
//!
//! Harbor reads the file as an overlay on its own base, where the service `main` is the agent's
//! container, built from `environment/Dockerfile` with `environment/` as its context; every
//! other service is a sidecar (a database, an API, an MCP server). GEODE reads it the same way:
//! `main` stays the task's own image (its `environment:` and `depends_on` are kept; its `build:`
//! moves the build's context, Dockerfile and args, as the overlay does in Harbor; its `image:`
//! names the image only when the task has neither a Dockerfile, a `build:` nor `docker_image`),
//! and each sidecar becomes a sandbox of its own image, started in `depends_on` order, its
//! healthcheck waited for, on the group's one network (see [`super::GroupNetwork`]).
//!
//! Read: `image`, `build` (a context string, or `context` / `dockerfile` / `args`),
//! `entrypoint` and `command` (a string or a list), `environment` (a map or `K=V` list),
//! `user`, `working_dir`, `healthcheck` (`test`, `interval`, `timeout`, `retries`,
//! `start_period`, `start_interval`, `disable`) and `depends_on` (a list, or a map of
//! conditions). Values interpolate as compose does: `${CONTEXT_DIR}` is what Harbor sets it to
//! (the task's `environment/`, absolute), task.toml's `[environment] env` values are seen,
//! `${VAR:-default}` / `${VAR-default}` give their default otherwise, and `$$` is `$`; any
//! other variable is empty, with a note (GEODE runs a task the same on every machine, so
//! nothing is read from the host's environment). Keys GEODE
//! does not use (`ports`, `volumes`, `networks`, ...) are noted, never an error.
//!
//! A build's context and Dockerfile are the task author's to name, and the task author may be
//! hostile: each must resolve (links followed, `..` applied) to a path inside the task's
//! folder, or the task is refused naming the file and the field.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_yaml_ng::Value;

use self::raw::{DependsOn, RawFile, Words};
use crate::Healthcheck;

mod raw;

/// The file's name inside a task's `environment/`.
pub const COMPOSE_FILE: &str = "docker-compose.yaml";

/// The folder of a task that holds its Dockerfile and compose file.
const ENVIRONMENT_DIR: &str = "environment";

/// The service that is the agent's sandbox.
pub const MAIN_SERVICE: &str = "main";

/// Why a task's compose file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ComposeError {
    /// The file does not parse, or a key holds what GEODE cannot run.
    #[error("{path}: {field}: {message}")]
    Invalid {
        /// The compose file.
        path: String,
        /// The key at fault (`services.db.build`), or `(document)`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The file exists but cannot be read.
    #[error("{path}: {source}")]
    Io {
        /// The compose file.
        path: String,
        /// The underlying error.
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

/// What a compose file sets for the `main` service, the agent's sandbox.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MainService {
    /// `environment:`, added to the task's.
    pub env: Vec<(String, String)>,
    /// `image:`, used only when the task has no Dockerfile, no `build:` and no `docker_image`.
    pub image: Option<String>,
    /// `build:`: where the task's image is built from, when the file moves it off
    /// `environment/` and its `Dockerfile` (not used when task.toml names a `docker_image`).
    pub build: Option<BuildContext>,
}

/// A sidecar service.
#[derive(Debug, Clone, PartialEq)]
pub struct Service {
    /// The service's key under `services:`, also its host name in the group.
    pub name: String,
    /// `image:`: the image to run when there is no `build:`.
    pub image: Option<String>,
    /// `build:`: where its image is built from.
    pub build: Option<BuildContext>,
    /// Replace the image's ENTRYPOINT (and drop its CMD, as compose does).
    pub entrypoint: Option<Vec<String>>,
    /// Replace the image's CMD.
    pub command: Option<Vec<String>>,
    /// `environment:`: extra environment of its processes.
    pub env: Vec<(String, String)>,
    /// `user:`: overrides the image's USER.
    pub user: Option<String>,
    /// `working_dir:`: overrides the image's WORKDIR.
    pub working_dir: Option<String>,
    /// `healthcheck:`: what says the service is ready.
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

/// `build:`: the context folder and the Dockerfile (both resolved, absolute, inside the
/// task's folder) and the build's args.
#[derive(Debug, Clone, PartialEq)]
pub struct BuildContext {
    /// The folder COPY and ADD read from.
    pub context: PathBuf,
    /// The Dockerfile's path.
    pub dockerfile: PathBuf,
    /// `args:`: values for the Dockerfile's ARGs.
    pub args: Vec<(String, String)>,
}

impl BuildContext {
    /// The context and Dockerfile, as a backend builds from them.
    pub fn source(&self) -> crate::BuildSource {
        crate::BuildSource {
            context: self.context.clone(),
            dockerfile: self.dockerfile.clone(),
        }
    }
}

/// Read `task_dir/environment/docker-compose.yaml`, with `task_env` (task.toml's
/// `[environment] env`) among its variables; `Ok(None)` when the task has none.
pub fn load(
    task_dir: &Path,
    task_env: &BTreeMap<String, String>,
) -> Result<Option<Compose>, ComposeError> {
    let path = task_dir.join(ENVIRONMENT_DIR).join(COMPOSE_FILE);
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
    parse(&text, task_dir, task_env, &path.display().to_string()).map(Some)
}

/// Parse the compose file of the task in `task_dir` from its text (relative build contexts
/// resolve against the task's `environment/`, as Harbor's `--project-directory`); `path` names
/// the file in errors.
pub fn parse(
    text: &str,
    task_dir: &Path,
    task_env: &BTreeMap<String, String>,
    path: &str,
) -> Result<Compose, ComposeError> {
    let invalid = |field: &str, message: String| ComposeError::Invalid {
        path: path.to_string(),
        field: field.to_string(),
        message,
    };
    let mut doc: Value =
        serde_yaml_ng::from_str(text).map_err(|e| invalid("(document)", e.to_string()))?;
    let env_dir = task_dir.join(ENVIRONMENT_DIR);
    let vars = harbor_variables(&env_dir, task_env);
    let mut notes = Vec::new();
    interpolate(&mut doc, "", &vars, &mut notes);
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
        let build = match raw.build {
            None => None,
            Some(build) => Some(
                build
                    .resolve(task_dir, &env_dir)
                    .map_err(|(key, m)| invalid(&field(&format!("build.{key}")), m))?,
            ),
        };
        if name == MAIN_SERVICE {
            main.env = env;
            main.image = raw.image.filter(|i| !i.is_empty());
            main.build = build;
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

/// The variables Harbor sets for a task's compose file that mean the same on every machine:
/// the task's `[environment] env`, and over it `CONTEXT_DIR`, the task's `environment/` as an
/// absolute path (Harbor resolves it, links included). The host's own environment, which
/// Harbor adds, is left out: a task runs the same wherever it runs.
fn harbor_variables(env_dir: &Path, task_env: &BTreeMap<String, String>) -> Vars {
    let dir = std::fs::canonicalize(env_dir)
        .or_else(|_| std::path::absolute(env_dir))
        .unwrap_or_else(|_| env_dir.to_path_buf());
    let mut vars: Vars = task_env.clone();
    vars.insert(CONTEXT_DIR.into(), dir.to_string_lossy().into_owned());
    vars
}

/// Variable names and values for interpolation.
type Vars = BTreeMap<String, String>;

/// Harbor's variable for the folder its compose files build `main` from.
const CONTEXT_DIR: &str = "CONTEXT_DIR";

/// Replace `${VAR}`, `$VAR`, `${VAR:-default}`, `${VAR-default}`, `${VAR:?message}`,
/// `${VAR:+alternative}` and `$$` in every string of the document, as compose does, with
/// `vars` the only variables set.
fn interpolate(value: &mut Value, at: &str, vars: &Vars, notes: &mut Vec<String>) {
    match value {
        Value::String(s) => *s = substitute(s, at, vars, notes),
        Value::Sequence(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                interpolate(item, &format!("{at}[{i}]"), vars, notes);
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
                interpolate(v, &here, vars, notes);
            }
        }
        _ => {}
    }
}

fn substitute(s: &str, at: &str, vars: &Vars, notes: &mut Vec<String>) -> String {
    let lookup = |name: &str| vars.get(name).map(String::as_str);
    let mut unset = |name: &str| {
        notes.push(format!(
            "compose: {at}: ${{{name}}} has no value here (left empty)"
        ))
    };
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
            let name_len = expr
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(expr.len());
            let (name, op) = expr.split_at(name_len);
            let value = lookup(name);
            let set_and_full = value.filter(|v| !v.is_empty());
            if let Some(default) = op.strip_prefix(":-") {
                out.push_str(set_and_full.unwrap_or(default));
            } else if let Some(default) = op.strip_prefix('-') {
                out.push_str(value.unwrap_or(default));
            } else if let Some(alternative) = op.strip_prefix(":+") {
                out.push_str(set_and_full.map_or("", |_| alternative));
            } else if let Some(alternative) = op.strip_prefix('+') {
                out.push_str(value.map_or("", |_| alternative));
            } else {
                // `${VAR}`, `${VAR:?message}`, `${VAR?message}`: the value, or nothing.
                match value {
                    Some(v) => out.push_str(v),
                    None => unset(name),
                }
            }
            rest = &body[end + 1..];
        } else {
            let len = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            if len == 0 {
                out.push('$');
            } else {
                match lookup(&after[..len]) {
                    Some(v) => out.push_str(v),
                    None => unset(&after[..len]),
                }
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

    /// A task folder with `environment/db/Dockerfile`, `environment/Dockerfile` and `app/`.
    fn task_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("environment/db")).unwrap();
        std::fs::create_dir_all(dir.path().join("app")).unwrap();
        std::fs::write(dir.path().join("environment/db/Dockerfile"), "FROM x\n").unwrap();
        std::fs::write(dir.path().join("environment/Dockerfile"), "FROM x\n").unwrap();
        dir
    }

    fn parsed(text: &str) -> Result<Compose, ComposeError> {
        let dir = task_dir();
        parse(
            text,
            dir.path(),
            &Vars::new(),
            "environment/docker-compose.yaml",
        )
    }

    #[test]
    fn main_s_build_moves_to_the_task_root_with_harbor_s_context_dir() {
        let dir = task_dir();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let c = parse(
            "services:\n  main:\n    build:\n      context: ${CONTEXT_DIR}/..\n      dockerfile: ${CONTEXT_DIR}/Dockerfile\n      args:\n        MODE: ${MODE:-slow}\n",
            dir.path(),
            // The task's `[environment] env` is seen; Harbor's own variable wins over it.
            &Vars::from([
                ("MODE".to_string(), "fast".to_string()),
                ("CONTEXT_DIR".to_string(), "/etc".to_string()),
            ]),
            "f",
        )
        .unwrap();
        let build = c.main.build.unwrap();
        assert_eq!(build.context, root);
        assert_eq!(build.dockerfile, root.join("environment/Dockerfile"));
        assert_eq!(build.args, [("MODE".to_string(), "fast".to_string())]);
        assert!(c.notes.is_empty(), "{:?}", c.notes);
        // A relative context is the environment folder's (Harbor's project directory), and a
        // relative Dockerfile the context's, as compose resolves them.
        let c = parse(
            "services:\n  main:\n    build:\n      context: ..\n      dockerfile: environment/Dockerfile\n",
            dir.path(),
            &Vars::new(),
            "f",
        )
        .unwrap();
        assert_eq!(
            c.main.build.unwrap().dockerfile,
            root.join("environment/Dockerfile")
        );
        let c = parse(
            "services:\n  main:\n    build: db\n",
            dir.path(),
            &Vars::new(),
            "f",
        )
        .unwrap();
        assert_eq!(
            c.main.build.unwrap().dockerfile,
            root.join("environment/db/Dockerfile")
        );
    }

    #[test]
    fn a_build_that_leaves_the_task_folder_is_refused_naming_the_field() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("Dockerfile"), "FROM x\n").unwrap();
        let dir = task_dir();
        let env = dir.path().join("environment");
        std::os::unix::fs::symlink(outside.path(), env.join("link")).unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("Dockerfile"),
            env.join("Dockerfile.out"),
        )
        .unwrap();
        let o = outside.path().display();
        let cases = [
            (format!("services:\n  main:\n    build: {o}\n"), "services.main.build.context"),
            ("services:\n  main:\n    build:\n      context: ../../../..\n".into(), "services.main.build.context"),
            ("services:\n  main:\n    build:\n      context: ${CONTEXT_DIR}/link\n".into(), "services.main.build.context"),
            ("services:\n  main:\n    build:\n      context: .\n      dockerfile: Dockerfile.out\n".into(), "services.main.build.dockerfile"),
            (format!("services:\n  main:\n    build:\n      context: ..\n      dockerfile: {o}/Dockerfile\n"), "services.main.build.dockerfile"),
            ("services:\n  db:\n    build: link\n".into(), "services.db.build.context"),
            ("services:\n  main:\n    build: ..\n".into(), "services.main.build.dockerfile"),
        ];
        for (text, field) in cases {
            let err = parse(
                &text,
                dir.path(),
                &Vars::new(),
                "environment/docker-compose.yaml",
            )
            .unwrap_err()
            .to_string();
            assert!(
                err.starts_with(&format!("environment/docker-compose.yaml: {field}: ")),
                "{text}: {err}"
            );
        }
        let err = parse(
            "services:\n  main:\n    build: link\n",
            dir.path(),
            &Vars::new(),
            "f",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("outside the task's folder"), "{err}");
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
                "services.a.build.context",
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
            substitute("${A:-x}-${B-y}-$$HOME-${C}", "f", &Vars::new(), &mut notes),
            "x-y-$HOME-"
        );
        assert_eq!(notes.len(), 1);
        let vars = Vars::from([
            ("CONTEXT_DIR".to_string(), "/t/env".to_string()),
            ("E".to_string(), String::new()),
        ]);
        let mut notes = Vec::new();
        assert_eq!(
            substitute(
                "${CONTEXT_DIR}/..|$CONTEXT_DIR|${CONTEXT_DIR:-d}|${E:-d}|${E-d}|${E:+a}|${CONTEXT_DIR:+a}|${CONTEXT_DIR:?x}",
                "f",
                &vars,
                &mut notes
            ),
            "/t/env/..|/t/env|/t/env|d|||a|/t/env"
        );
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(duration_secs("1m30s"), Some(90.0));
        assert_eq!(duration_secs("250ms"), Some(0.25));
        assert_eq!(duration_secs("10"), None);
    }
}
