//! One trial's container as the harness's `Sandbox`: its start (taking charge of the init
//! docker runs), the work directory as a workspace, files in and out through `docker cp`, and
//! its teardown.

use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use geode_runtime::tools::workspace::{ExecOutput, ExecRequest, Workspace};
use tokio_util::sync::CancellationToken;

use super::Engine;
use super::container::Container;
use crate::scripted::ScriptedWorkspace;
use crate::{ChangedInputs, EnvError, Judgment, Sandbox, SharedNetwork, TESTS_DIR, TeardownReport};

/// Where `docker run --init` mounts its init in the container (read-only; `/sbin` is
/// `/usr/sbin` in merged-/usr images).
const DOCKER_INIT_MOUNTS: [&str; 2] = ["/sbin/docker-init", "/usr/sbin/docker-init"];

/// What a copy out of one container may weigh.
const MAX_COPY_OUT_BYTES: u64 = 1 << 30;

/// One trial's container.
#[derive(Debug)]
pub struct DockerSandbox {
    container: Arc<Container>,
    workspace: Arc<ScriptedWorkspace>,
    /// The trial's `verifier/`, bind-mounted at `/logs/verifier`.
    verifier_dir: PathBuf,
}

impl DockerSandbox {
    /// Take charge of a started container: find its init on this machine.
    pub(super) async fn attach(
        engine: Engine,
        id: String,
        root: PathBuf,
        trial_dir: &Path,
    ) -> Result<Self, EnvError> {
        let state = engine.inspect("docker inspect", &["inspect", &id]).await?;
        let init = state["State"]["Pid"].as_i64().unwrap_or(0);
        let init = i32::try_from(init).unwrap_or(0);
        let pid_namespace = std::fs::read_link(format!("/proc/{init}/ns/pid")).map_err(|e| {
            EnvError::Unsupported(format!(
                "the docker backend needs the engine on this machine (its container's init, \
                 pid {init}, is not in this machine's /proc: {e})"
            ))
        })?;
        // docker-init starts the sleep right after the container starts.
        let deadline = Instant::now() + Duration::from_secs(10);
        let sleeper = loop {
            let children = std::fs::read_to_string(format!("/proc/{init}/task/{init}/children"))
                .unwrap_or_default();
            if let Some(pid) = children
                .split_whitespace()
                .find_map(|p| p.parse::<i32>().ok())
            {
                break pid;
            }
            if Instant::now() > deadline {
                return Err(EnvError::SetupFailed {
                    step: "docker run".into(),
                    message: "the container's init started nothing".into(),
                });
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let container = Arc::new(Container {
            engine,
            id,
            keep: vec![init, sleeper],
            pid_namespace,
        });
        Ok(DockerSandbox {
            workspace: Arc::new(ScriptedWorkspace {
                container: Arc::clone(&container) as Arc<dyn crate::scripted::ScriptHost>,
                root,
            }),
            container,
            verifier_dir: trial_dir.join("verifier"),
        })
    }

    async fn as_root(&self, what: &str, script: &str, args: &[&str]) -> Result<(), EnvError> {
        let mut argv = vec![
            "exec",
            "--user",
            "0",
            self.container.id.as_str(),
            "sh",
            "-c",
            script,
            "sh",
        ];
        argv.extend(args);
        let ran = self.container.engine.run(&argv, None).await?;
        if ran.ok() {
            Ok(())
        } else {
            Err(self
                .container
                .exec_failure(&ran.stderr)
                .await
                .unwrap_or_else(|| EnvError::Lost(format!("{what}: {}", ran.stderr))))
        }
    }
}

#[async_trait]
impl Sandbox for DockerSandbox {
    fn workspace(&self) -> Arc<dyn Workspace> {
        Arc::clone(&self.workspace) as Arc<dyn Workspace>
    }

    async fn exec(
        &self,
        req: ExecRequest,
        cancel: CancellationToken,
    ) -> Result<ExecOutput, EnvError> {
        self.container.exec(&self.workspace.root, req, cancel).await
    }

    async fn copy_in(&self, host_src: &Path, sandbox_dst: &str) -> Result<(), EnvError> {
        self.as_root(
            &format!("make room for {sandbox_dst}"),
            "rm -rf -- \"$1\" && mkdir -p -- \"$(dirname -- \"$1\")\"",
            &[sandbox_dst],
        )
        .await?;
        let target = format!("{}:{sandbox_dst}", self.container.id);
        let source = host_src.to_string_lossy();
        self.container
            .engine
            .ok(
                &format!("docker cp {} {sandbox_dst}", host_src.display()),
                &["cp", &source, &target],
            )
            .await
            .map(drop)
    }

    async fn copy_out(
        &self,
        sandbox_src: &str,
        host_dst: &Path,
        skip: &(dyn for<'n> Fn(&'n str) -> bool + Sync),
    ) -> Result<Vec<String>, EnvError> {
        let scratch = tempfile::NamedTempFile::new().map_err(|e| EnvError::Io {
            context: "create a scratch file for docker cp".into(),
            source: e,
        })?;
        let tar_file = scratch.reopen().map_err(|e| EnvError::Io {
            context: "open the scratch file for docker cp".into(),
            source: e,
        })?;
        let source = format!("{}:{sandbox_src}", self.container.id);
        let out = self
            .container
            .engine
            .command()
            .args(["cp", &source, "-"])
            .stdout(tar_file)
            .stderr(Stdio::piped())
            .output()
            .await
            .map_err(|e| EnvError::Lost(format!("docker cp {sandbox_src}: {e}")))?;
        if !out.status.success() {
            return Err(EnvError::Io {
                context: format!("docker cp {sandbox_src}"),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    String::from_utf8_lossy(&out.stderr).trim().to_string(),
                ),
            });
        }
        unpack_copy(scratch.path(), sandbox_src, host_dst, skip)
    }

    async fn run_verifier(&self, tests: &Path, req: ExecRequest) -> Result<ExecOutput, EnvError> {
        // Nothing of the agent's may run beside the verifier, nor have written its folder.
        self.container.kill_all().await?;
        crate::fsops::clear_dir(&self.verifier_dir).map_err(|e| EnvError::Io {
            context: format!("empty {}", self.verifier_dir.display()),
            source: e,
        })?;
        self.copy_in(tests, TESTS_DIR).await?;
        self.exec(req, CancellationToken::new()).await
    }

    /// In the container's network namespace, entered through its main process (this
    /// machine's engine, as root).
    async fn listen_inside(&self, port: u16) -> Result<std::net::TcpListener, EnvError> {
        let pid = self.container.pid().await?;
        tokio::task::spawn_blocking(move || crate::sandbox::netns::listen_in(pid, port))
            .await
            .map_err(|e| EnvError::Lost(format!("listening task: {e}")))?
            .map_err(EnvError::Lost)
    }

    async fn kill_all_processes(&self) -> Result<usize, EnvError> {
        self.container.kill_all().await
    }

    async fn teardown(self: Box<Self>) -> Result<TeardownReport, EnvError> {
        let started = Instant::now();
        let killed = self.container.processes().len();
        self.container
            .engine
            .ok(
                "docker rm",
                &["rm", "--force", "--volumes", &self.container.id],
            )
            .await?;
        Ok(TeardownReport {
            killed_processes: killed,
            duration: started.elapsed(),
        })
    }

    async fn changed_verifier_inputs(&self, exempt: &str, _when: Judgment) -> ChangedInputs {
        let Ok(out) = self
            .container
            .engine
            .ok("docker diff", &["diff", &self.container.id])
            .await
        else {
            return ChangedInputs {
                present: vec!["(docker diff failed: changes could not be read)".into()],
                vanished: Vec::new(),
            };
        };
        let text = String::from_utf8_lossy(&out);
        // The tests are the harness's own copy (whatever the agent put at `/tests` went with
        // `copy_in`), and `docker-init`'s mount point is the engine's.
        let ours = |path: &str| {
            path == TESTS_DIR
                || path.starts_with(&format!("{TESTS_DIR}/"))
                || DOCKER_INIT_MOUNTS.contains(&path)
        };
        let changed: Vec<&str> = text
            .lines()
            .filter_map(|line| line.split_once(' '))
            .filter(|(kind, path)| matches!(*kind, "A" | "C") && !ours(path))
            .map(|(_, path)| path)
            .collect();
        // `docker diff` lists the folders above a change too; only files count.
        let files: Vec<String> = changed
            .iter()
            .filter(|path| {
                let below = format!("{}/", path.trim_end_matches('/'));
                !changed.iter().any(|other| other.starts_with(&below))
            })
            .map(|path| path.to_string())
            .collect();
        ChangedInputs {
            present: crate::evidence::verifier_inputs_among(&files, exempt),
            vanished: Vec::new(),
        }
    }

    fn shared_network(&self) -> Option<SharedNetwork> {
        Some(SharedNetwork::Container(self.container.id.clone()))
    }
}

/// Unpack a tar of `sandbox_src` (`docker cp`'s, or `tar -c`'s in a Pod) into `host_dst`
/// (which must not exist), leaving out names `skip` matches, and links and special files
/// (returned).
pub(crate) fn unpack_copy(
    tar_path: &Path,
    sandbox_src: &str,
    host_dst: &Path,
    skip: &(dyn for<'n> Fn(&'n str) -> bool + Sync),
) -> Result<Vec<String>, EnvError> {
    let io = |context: String| move |source| EnvError::Io { context, source };
    let file = std::fs::File::open(tar_path).map_err(io("open docker cp's output".into()))?;
    let mut archive = tar::Archive::new(file);
    let mut left_out = Vec::new();
    let mut budget = MAX_COPY_OUT_BYTES;
    let inside = sandbox_src.trim_end_matches('/');
    for entry in archive
        .entries()
        .map_err(io("read docker cp's output".into()))?
    {
        let mut entry = entry.map_err(io("read docker cp's output".into()))?;
        let path = entry
            .path()
            .map_err(io("read docker cp's output".into()))?
            .into_owned();
        // The archive's first component is the source's own name.
        let parts: Vec<&str> = path
            .components()
            .filter_map(|c| match c {
                Component::Normal(part) => part.to_str(),
                _ => None,
            })
            .collect();
        if parts.len()
            != path
                .components()
                .filter(|c| *c != Component::CurDir)
                .count()
        {
            left_out.push(format!("{}: not a plain relative path", path.display()));
            continue;
        }
        let rel = &parts[1.min(parts.len())..];
        if rel.iter().any(|part| skip(part)) {
            continue;
        }
        let shown = format!("{inside}/{}", rel.join("/"));
        let target = rel
            .iter()
            .fold(host_dst.to_path_buf(), |p, part| p.join(part));
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            std::fs::create_dir_all(&target).map_err(io(format!("create {}", target.display())))?;
        } else if kind.is_file() {
            let size = entry.size();
            let Some(rest) = budget.checked_sub(size) else {
                left_out.push(format!(
                    "{shown}: over the {} MiB copied out of one sandbox",
                    MAX_COPY_OUT_BYTES >> 20
                ));
                continue;
            };
            budget = rest;
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut bytes)
                .map_err(io(format!("read {shown}")))?;
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(io(format!("create {}", parent.display())))?;
            }
            geode_graders::safe_fs::write(&target, &bytes)
                .map_err(io(format!("write {}", target.display())))?;
        } else {
            left_out.push(format!("{shown}: a link or special file"));
        }
    }
    Ok(left_out)
}
