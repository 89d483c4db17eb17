//! A running container: commands by `docker exec`, and its processes found and killed through
//! this machine's `/proc`. The trial's sandbox over it is `sandbox.rs`; the file tools,
//! `workspace.rs`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use geode_runtime::tools::workspace::{ExecOutput, ExecRequest, OutputCapture};
use tokio_util::sync::CancellationToken;

use super::Engine;
use crate::EnvError;

/// The variable every command's processes inherit, by which a timed-out or cancelled
/// command's processes are found (its process group alone would miss `setsid`).
const EXEC_MARK: &str = "GEODE_EXEC";

/// How long a killed command's output may take to end.
const KILL_GRACE: Duration = Duration::from_secs(5);

/// A running container and how to reach its processes.
#[derive(Debug)]
pub(super) struct Container {
    pub(super) engine: Engine,
    pub(super) id: String,
    /// `docker-init`'s pid on this machine, and the `sleep` it keeps: never killed before
    /// teardown.
    pub(super) keep: Vec<i32>,
    /// The container's pid namespace (`readlink /proc/PID/ns/pid`).
    pub(super) pid_namespace: PathBuf,
}

impl Container {
    /// The container's processes other than its init and sleep, as pids on this machine.
    pub(super) fn processes(&self) -> Vec<i32> {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| !self.keep.contains(pid))
            .filter(|pid| {
                std::fs::read_link(format!("/proc/{pid}/ns/pid"))
                    .ok()
                    .as_ref()
                    == Some(&self.pid_namespace)
            })
            .collect()
    }

    fn kill(pids: &[i32]) {
        for pid in pids {
            // Gone already is fine: it is what we want.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }

    /// Kill the processes of one command (those with its mark in their environment).
    fn kill_marked(&self, mark: &str) {
        let needle = format!("{EXEC_MARK}={mark}");
        let marked: Vec<i32> = self
            .processes()
            .into_iter()
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ"))
                    .map(|env| env.split(|b| *b == 0).any(|var| var == needle.as_bytes()))
                    .unwrap_or(false)
            })
            .collect();
        Container::kill(&marked);
    }

    /// Kill every process but init's own: frozen first (`docker pause`), so none forks while
    /// the others die, then thawed and waited for.
    pub(super) async fn kill_all(&self) -> Result<usize, EnvError> {
        let paused = self.engine.run(&["pause", &self.id], None).await?.ok();
        let victims = self.processes();
        Container::kill(&victims);
        if paused {
            self.engine
                .ok("docker unpause", &["unpause", &self.id])
                .await?;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = self.processes();
            if left.is_empty() {
                return Ok(victims.len());
            }
            if Instant::now() > deadline {
                return Err(EnvError::Lost(format!(
                    "{} process(es) of the container outlived SIGKILL",
                    left.len()
                )));
            }
            // Without a freezer, a forking process may have children the first pass missed.
            if !paused {
                Container::kill(&left);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The host pid of the container's main process.
    pub(super) async fn pid(&self) -> Result<u32, EnvError> {
        let out = self
            .engine
            .ok(
                "docker inspect",
                &["inspect", "--format", "{{.State.Pid}}", &self.id],
            )
            .await?;
        let text = String::from_utf8_lossy(&out);
        match text.trim().parse::<u32>() {
            Ok(pid) if pid > 0 => Ok(pid),
            _ => Err(EnvError::Lost(format!(
                "container {} has no running process (State.Pid {:?})",
                self.id,
                text.trim()
            ))),
        }
    }

    /// Whether the container still runs (an `Err` when the engine cannot say).
    pub(super) async fn running(&self) -> Result<bool, EnvError> {
        let out = self
            .engine
            .ok(
                "docker inspect",
                &["inspect", "--format", "{{.State.Running}}", &self.id],
            )
            .await?;
        Ok(String::from_utf8_lossy(&out).trim() == "true")
    }

    /// A failed `docker exec`: the container is gone (the agent's doing: it ended the
    /// container's init) or the engine is.
    pub(super) async fn exec_failure(&self, stderr: &str) -> Option<EnvError> {
        match self.running().await {
            Ok(true) => None,
            Ok(false) => Some(EnvError::BrokenFromInside(format!(
                "the container stopped: {stderr}"
            ))),
            Err(e) => Some(e),
        }
    }

    /// `docker exec` of `bash -c COMMAND`, output capped, killed (with everything it started)
    /// on timeout or cancellation.
    pub(super) async fn exec(
        &self,
        root: &Path,
        req: ExecRequest,
        cancel: CancellationToken,
    ) -> Result<ExecOutput, EnvError> {
        let started = Instant::now();
        let mark = uuid::Uuid::new_v4().simple().to_string();
        let cwd = match &req.cwd {
            Some(dir) => root.join(dir),
            None => root.to_path_buf(),
        };
        let mut command = self.engine.command();
        command
            .arg("exec")
            .arg("--workdir")
            .arg(&cwd)
            .arg(format!("--env={EXEC_MARK}={mark}"));
        for (name, value) in &req.env {
            command.arg(format!("--env={name}={value}"));
        }
        command
            .args([&self.id, "bash", "-c", &req.command])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command
            .spawn()
            .map_err(|e| EnvError::Lost(format!("docker exec: {e}")))?;
        let mut stdout = OutputCapture::new(req.output_cap);
        let mut stderr = OutputCapture::new(req.output_cap);
        let (out_pipe, err_pipe) = (child.stdout.take(), child.stderr.take());
        let (mut timed_out, mut cancelled) = (false, false);
        let status = {
            let pumps = async {
                tokio::join!(stdout.pump(out_pipe), stderr.pump(err_pipe));
                child.wait().await
            };
            tokio::pin!(pumps);
            tokio::select! {
                status = &mut pumps => status,
                _ = tokio::time::sleep(req.timeout) => {
                    timed_out = true;
                    self.kill_marked(&mark);
                    tokio::time::timeout(KILL_GRACE, &mut pumps).await
                        .unwrap_or_else(|_| Err(std::io::Error::other("still streaming")))
                }
                _ = cancel.cancelled() => {
                    cancelled = true;
                    self.kill_marked(&mark);
                    tokio::time::timeout(KILL_GRACE, &mut pumps).await
                        .unwrap_or_else(|_| Err(std::io::Error::other("still streaming")))
                }
            }
        };
        let status = match status {
            Ok(status) => status,
            // A process that shed its mark still holds the command's output: stop listening.
            Err(_) if timed_out || cancelled => {
                let _ = child.start_kill();
                child
                    .wait()
                    .await
                    .map_err(|e| EnvError::Lost(format!("docker exec: {e}")))?
            }
            Err(e) => return Err(EnvError::Lost(format!("docker exec: {e}"))),
        };
        let truncated = stdout.truncated() || stderr.truncated();
        let (stdout, stderr) = (stdout.into_text(), stderr.into_text());
        if !status.success()
            && !timed_out
            && !cancelled
            && let Some(e) = self.exec_failure(&stderr).await
        {
            return Err(e);
        }
        Ok(ExecOutput {
            exit_code: if timed_out || cancelled {
                None
            } else {
                status.code()
            },
            stdout,
            stderr,
            timed_out,
            cancelled,
            truncated,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        })
    }

    /// A file script (`sh -c SCRIPT sh ARGS...`) as the image's user, with `stdin`.
    pub(super) async fn script(
        &self,
        script: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<crate::scripted::Ran, EnvError> {
        let mut argv = vec!["exec"];
        if stdin.is_some() {
            argv.push("--interactive");
        }
        argv.extend([self.id.as_str(), "sh", "-c", script, "sh"]);
        argv.extend(args);
        let ran = self.engine.run(&argv, stdin).await?;
        if !ran.ok()
            && let Some(e) = self.exec_failure(&ran.stderr).await
        {
            return Err(e);
        }
        Ok(ran)
    }
}

#[async_trait::async_trait]
impl crate::scripted::ScriptHost for Container {
    async fn script(
        &self,
        script: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<crate::scripted::Ran, EnvError> {
        Container::script(self, script, args, stdin).await
    }

    async fn exec(
        &self,
        root: &Path,
        req: ExecRequest,
        cancel: CancellationToken,
    ) -> Result<ExecOutput, EnvError> {
        Container::exec(self, root, req, cancel).await
    }
}
