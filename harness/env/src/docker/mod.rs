//! The `docker` backend: the same trial lifecycle through a docker engine, for users who have
//! one and want their tasks run the way Harbor runs them.
//!
//! It drives the engine with the `docker` CLI (which honours `DOCKER_HOST` and the user's
//! contexts): `docker build` makes the task's image, `docker run --init` starts one container
//! per trial that sleeps while the agent's commands arrive by `docker exec`, and `docker rm -f`
//! ends it. `/logs/agent`, `/logs/verifier` and `/logs/artifacts` are the trial's folders
//! bind-mounted, as in Harbor.
//!
//! A container has no view of its own for the verifier (the sandbox backend's), so its
//! integrity rule is the strict one: every process the agent left is killed before the tests
//! arrive (frozen with the container's cgroup first, so none can fork away), `/logs/verifier`
//! is emptied after that, and what the agent changed of the verifier's programs is read from
//! `docker diff`. Background services therefore do not outlive the agent here, nor do those the
//! image's ENTRYPOINT started: the trial runs it with `docker exec` as the sandbox backend
//! does (see `env::entrypoint`), while the container's own command stays `sleep infinity`.
//! The engine must run on this machine: processes are found and killed through `/proc`.

mod container;
mod sandbox;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::Value;

pub use sandbox::DockerSandbox;
pub(crate) use sandbox::unpack_copy;

use crate::scripted::Ran;

use super::{
    Backend, EnvError, EnvironmentSpec, ImageRoot, NetworkPolicy, PreparedImage, Sandbox,
    SharedNetwork,
};

/// How long an engine call other than a build or a command may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(300);

/// The docker CLI, pointed at one engine.
#[derive(Debug, Clone)]
pub(crate) struct Engine {
    bin: PathBuf,
}

impl Engine {
    pub(crate) fn command(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.bin);
        command.kill_on_drop(true).stdin(Stdio::null());
        command
    }

    /// Run `docker ARGS` with `stdin`, collecting both outputs.
    pub(crate) async fn run(&self, args: &[&str], stdin: Option<&[u8]>) -> Result<Ran, EnvError> {
        use tokio::io::AsyncWriteExt;
        let mut command = self.command();
        command
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if stdin.is_some() {
            command.stdin(Stdio::piped());
        }
        let shown = format!("docker {}", args.first().copied().unwrap_or_default());
        let mut child = command
            .spawn()
            .map_err(|e| EnvError::Lost(format!("{shown}: {e}")))?;
        if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
            // A command that stops reading early is its own business: its exit code tells.
            let _ = pipe.write_all(bytes).await;
            drop(pipe);
        }
        let out = tokio::time::timeout(CALL_TIMEOUT, child.wait_with_output())
            .await
            .map_err(|_| EnvError::Lost(format!("{shown}: no answer in {CALL_TIMEOUT:?}")))?
            .map_err(|e| EnvError::Lost(format!("{shown}: {e}")))?;
        Ok(Ran {
            code: out.status.code(),
            stdout: out.stdout,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }

    /// Run `docker ARGS` and return its standard output; a failure names `what`.
    pub(crate) async fn ok(&self, what: &str, args: &[&str]) -> Result<Vec<u8>, EnvError> {
        let ran = self.run(args, None).await?;
        if ran.ok() {
            Ok(ran.stdout)
        } else {
            Err(EnvError::Lost(format!("{what}: {}", ran.stderr)))
        }
    }

    /// The engine's `docker inspect` of one object, as JSON.
    pub(crate) async fn inspect(&self, what: &str, args: &[&str]) -> Result<Value, EnvError> {
        let out = self.ok(what, args).await?;
        let all: Value = serde_json::from_slice(&out)
            .map_err(|e| EnvError::Lost(format!("{what}: unreadable inspect output: {e}")))?;
        match all {
            Value::Array(mut items) if !items.is_empty() => Ok(items.swap_remove(0)),
            _ => Err(EnvError::Lost(format!("{what}: nothing inspected"))),
        }
    }
}

/// Trials in containers of a docker engine.
#[derive(Debug, Clone)]
pub struct DockerBackend {
    engine: Engine,
    /// The engine's version, for the trials' image source.
    version: String,
}

impl DockerBackend {
    /// Reach the engine `docker` (on `PATH`) points at; an error says why it is unreachable.
    pub fn connect() -> Result<Self, EnvError> {
        let bin = PathBuf::from("docker");
        let out = std::process::Command::new(&bin)
            .args(["version", "--format", "{{.Server.Version}}"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                EnvError::Unsupported(format!(
                    "the docker backend needs the docker CLI on PATH: {e}"
                ))
            })?;
        let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() || version.is_empty() {
            return Err(EnvError::Unsupported(format!(
                "the docker backend needs a docker engine, and `docker version` reaches none: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(DockerBackend {
            engine: Engine { bin },
            version,
        })
    }

    /// `docker build` of the task's Dockerfile in its context (`environment/`, or where a
    /// compose file's `build:` moves them), its output appended to the build log.
    /// Returns the image's id.
    async fn build(&self, spec: &EnvironmentSpec, tag: &str) -> Result<String, EnvError> {
        let scratch = tempfile::tempdir().map_err(|e| EnvError::Io {
            context: "create a scratch folder for docker build".into(),
            source: e,
        })?;
        let iidfile = scratch.path().join("iid");
        let log = match &spec.build_log {
            Some(log) => log.clone(),
            None => scratch.path().join("build.log"),
        };
        let open_log = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .map_err(|e| EnvError::Io {
                    context: format!("open {}", log.display()),
                    source: e,
                })
        };
        let mut command = self.engine.command();
        command
            .arg("build")
            .arg("--iidfile")
            .arg(&iidfile)
            .args(["--tag", tag]);
        for (name, value) in &spec.build_args {
            command.arg("--build-arg").arg(format!("{name}={value}"));
        }
        command
            .arg("--file")
            .arg(spec.dockerfile())
            .arg(spec.context())
            .stdout(open_log()?)
            .stderr(open_log()?);
        let mut child = command
            .spawn()
            .map_err(|e| EnvError::Lost(format!("docker build: {e}")))?;
        let status = match tokio::time::timeout(spec.build_timeout, child.wait()).await {
            Ok(status) => status.map_err(|e| EnvError::Lost(format!("docker build: {e}")))?,
            Err(_) => {
                // The engine abandons a build whose client is gone.
                let _ = child.kill().await;
                return Err(EnvError::SetupFailed {
                    step: "docker build".into(),
                    message: format!("timed out after {:?}", spec.build_timeout),
                });
            }
        };
        if !status.success() {
            return Err(EnvError::SetupFailed {
                step: "docker build".into(),
                message: log_tail(&log, 20),
            });
        }
        std::fs::read_to_string(&iidfile)
            .map(|id| id.trim().to_string())
            .map_err(|e| EnvError::Lost(format!("docker build left no image id: {e}")))
    }

    /// The prebuilt image `[environment] docker_image` names, pulled when the engine lacks
    /// it. Returns whether it was already there.
    async fn ensure_pulled(&self, reference: &str) -> Result<bool, EnvError> {
        if self
            .engine
            .run(&["image", "inspect", reference], None)
            .await?
            .ok()
        {
            return Ok(true);
        }
        let ran = self
            .engine
            .run(&["pull", "--quiet", reference], None)
            .await?;
        if ran.ok() {
            Ok(false)
        } else {
            Err(EnvError::SetupFailed {
                step: format!("docker pull {reference}"),
                message: ran.stderr,
            })
        }
    }

    async fn image_id(&self, reference: &str) -> Option<String> {
        let ran = self
            .engine
            .run(
                &["image", "inspect", "--format", "{{.Id}}", reference],
                None,
            )
            .await
            .ok()?;
        ran.ok()
            .then(|| String::from_utf8_lossy(&ran.stdout).trim().to_string())
    }
}

#[async_trait]
impl Backend for DockerBackend {
    fn kind(&self) -> crate::kind::BackendKind {
        crate::kind::BackendKind::Docker
    }

    async fn prepare(&self, spec: &EnvironmentSpec) -> Result<PreparedImage, EnvError> {
        if let NetworkPolicy::Allowlist(hosts) = &spec.network {
            return Err(EnvError::Unsupported(format!(
                "allowed_hosts ({}) needs the sandbox backend: a docker container gets the \
                 public network or none",
                hosts.join(", ")
            )));
        }
        let started = Instant::now();
        let (reference, from, cache_hit) = match &spec.docker_image {
            Some(image) => {
                let present = self.ensure_pulled(image).await?;
                (image.clone(), image.clone(), present)
            }
            None => {
                let tag = format!("geode-task/{}", slug(&spec.task_name));
                let before = self.image_id(&tag).await;
                let id = self.build(spec, &tag).await?;
                let from = final_from(&spec.dockerfile());
                let hit = before.as_deref() == Some(id.as_str());
                (id, from, hit)
            }
        };
        let image = self
            .engine
            .inspect(
                &format!("docker image inspect {reference}"),
                &["image", "inspect", &reference],
            )
            .await?;
        let id = image["Id"].as_str().unwrap_or(&reference).to_string();
        let config = &image["Config"];
        let strings = |key: &str| -> Vec<String> {
            config[key]
                .as_array()
                .map(|items| {
                    items
                        .iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut env: Vec<(String, String)> = strings("Env")
            .iter()
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        env.extend(spec.env.iter().cloned());
        let workdir = match config["WorkingDir"].as_str() {
            Some(dir) if !dir.is_empty() => dir.to_string(),
            _ => "/".to_string(),
        };
        let user = config["User"]
            .as_str()
            .filter(|u| !u.is_empty())
            .map(str::to_string);
        let digest = image["RepoDigests"]
            .as_array()
            .and_then(|d| d.first())
            .and_then(|d| d.as_str())
            .and_then(|d| d.split_once('@'))
            .map(|(_, digest)| digest.to_string())
            .or_else(|| Some(id.clone()));
        let mut notes = vec![
            "docker backend: the agent's processes are killed before the verifier starts (a \
             container has no view that keeps them from the reward)"
                .to_string(),
        ];
        if !strings("Entrypoint").is_empty() {
            // The trial starts the ENTRYPOINT with `docker exec` (`entrypoint::start`), like
            // the agent's commands, so the same rule reaches what it started.
            notes.push(
                "docker backend: the image's ENTRYPOINT runs before the agent, but what it \
                 started is killed with the agent's processes before the verifier"
                    .into(),
            );
        }
        if spec.storage_mb.is_some() {
            notes.push("docker backend: storage_mb is not enforced".into());
        }
        Ok(PreparedImage {
            root: ImageRoot::Engine(id),
            workdir,
            env,
            user,
            entrypoint: strings("Entrypoint"),
            cmd: strings("Cmd"),
            from,
            source: match &spec.docker_image {
                Some(_) => format!("docker engine {}", self.version),
                None => format!("built by docker engine {}", self.version),
            },
            digest,
            notes,
            origin: Default::default(),
            cache_hit,
            build_duration: started.elapsed(),
        })
    }

    async fn start(
        &self,
        spec: &EnvironmentSpec,
        image: &PreparedImage,
        trial_dir: &Path,
    ) -> Result<Box<dyn Sandbox>, EnvError> {
        let ImageRoot::Engine(id) = &image.root else {
            return Err(EnvError::Unsupported(
                "the docker backend runs images a docker engine holds".into(),
            ));
        };
        // docker reads a relative `--volume` source (`jobs/...`, from the default relative
        // `--jobs-dir`) as the name of a volume, not a folder: every path it gets is absolute.
        let trial_dir = &std::path::absolute(trial_dir).map_err(|e| EnvError::Io {
            context: format!("resolve {}", trial_dir.display()),
            source: e,
        })?;
        let mut args: Vec<String> = vec![
            "run".into(),
            "--detach".into(),
            "--init".into(),
            "--label".into(),
            format!("geode.trial={}", trial_dir.display()),
            "--workdir".into(),
            image.workdir.clone(),
        ];
        match &spec.group.join {
            Some(SharedNetwork::Container(main)) => {
                args.push(format!("--network=container:{main}"))
            }
            Some(SharedNetwork::Namespace(_)) => {
                return Err(EnvError::Unsupported(
                    "a docker container cannot join a sandbox's network".into(),
                ));
            }
            None => {
                if spec.network.is_off() {
                    args.push("--network=none".into());
                }
                args.push(format!("--hostname={}", slug(&spec.task_name)));
                for name in &spec.group.names {
                    args.push(format!("--add-host={name}:127.0.0.1"));
                }
            }
        }
        if let Some(user) = &image.user {
            // The image's USER, or a compose service's `user:`.
            args.push(format!("--user={user}"));
        }
        if let Some(mb) = spec.memory_mb {
            args.push(format!("--memory={mb}m"));
            args.push(format!("--memory-swap={mb}m"));
        }
        if let Some(cpus) = spec.cpus {
            args.push(format!("--cpus={cpus}"));
        }
        if let Some(pids) = spec.pids_max {
            args.push(format!("--pids-limit={pids}"));
        }
        for (name, value) in &spec.env {
            args.push(format!("--env={name}={value}"));
        }
        for folder in ["agent", "verifier", "artifacts"] {
            let host = match folder {
                "agent" => crate::agent_logs(trial_dir),
                _ => trial_dir.join(folder),
            };
            std::fs::create_dir_all(&host)
                .and_then(|()| {
                    use std::os::unix::fs::PermissionsExt;
                    // The image's USER, whoever it is, writes its logs there (as in Harbor).
                    std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o777))
                })
                .map_err(|e| EnvError::Io {
                    context: format!("create {}", host.display()),
                    source: e,
                })?;
            args.push(format!("--volume={}:/logs/{folder}", host.display()));
        }
        args.extend([
            "--entrypoint".into(),
            "sleep".into(),
            id.clone(),
            "infinity".into(),
        ]);
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let ran = self.engine.run(&argv, None).await?;
        if !ran.ok() {
            return Err(EnvError::SetupFailed {
                step: "docker run".into(),
                message: ran.stderr,
            });
        }
        let container = String::from_utf8_lossy(&ran.stdout).trim().to_string();
        let root = PathBuf::from(&image.workdir);
        match DockerSandbox::attach(self.engine.clone(), container.clone(), root, trial_dir).await {
            Ok(sandbox) => Ok(Box::new(sandbox)),
            Err(e) => {
                let _ = self.engine.run(&["rm", "--force", &container], None).await;
                Err(e)
            }
        }
    }
}

/// A name docker accepts as a repository or a hostname: lowercase letters, digits, dashes.
fn slug(name: &str) -> String {
    let slug: String = name
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let slug = slug.trim_matches('-');
    if slug.is_empty() {
        "task".into()
    } else {
        slug.chars().take(63).collect()
    }
}

/// The image the Dockerfile's last `FROM` names (empty when it cannot be read).
fn final_from(dockerfile: &Path) -> String {
    let Ok(text) = std::fs::read_to_string(dockerfile) else {
        return String::new();
    };
    super::dockerfile::parse(&text)
        .ok()
        .and_then(|steps| {
            steps
                .into_iter()
                .rev()
                .find_map(|step| match step.instruction {
                    super::dockerfile::Instruction::From { image, .. } => Some(image),
                    _ => None,
                })
        })
        .unwrap_or_default()
}

/// The last `lines` lines of a log, for an error message.
fn log_tail(log: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_what_docker_accepts() {
        assert_eq!(
            slug("geode-core/C_Fix.Makefile"),
            "geode-core-c-fix-makefile"
        );
        assert_eq!(slug("///"), "task");
        assert_eq!(slug(&"x".repeat(100)).len(), 63);
    }

    #[test]
    fn the_final_from_is_the_last_stage_base() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("Dockerfile");
        std::fs::write(
            &file,
            "FROM debian:bookworm-slim AS build\nRUN true\nFROM python:3.11-slim\nCOPY --from=build /x /x\n",
        )
        .unwrap();
        assert_eq!(final_from(&file), "python:3.11-slim");
        assert_eq!(final_from(&dir.path().join("missing")), "");
    }
}
