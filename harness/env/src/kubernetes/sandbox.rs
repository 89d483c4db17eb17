//! One trial's Pod as the harness's `Sandbox`: commands by `pods/exec`, killed on timeout by
//! the mark in their environment (the harness sees no `/proc` of the node, so the kill runs
//! inside); files in and out as tar streams through the same exec; `/logs/*` kept inside
//! the Pod (an `emptyDir`) and brought back to the trial's folders; the Pod deleted at
//! teardown.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use geode_runtime::tools::workspace::{ExecOutput, ExecRequest, OutputCapture, Workspace};
use tokio_util::sync::CancellationToken;

use super::api::{Api, ApiError, Stream};
use crate::scripted::{Ran, ScriptHost, ScriptedWorkspace};
use crate::{EnvError, Sandbox, TESTS_DIR, TeardownReport};

/// The variable every command's processes inherit, by which a timed-out or cancelled
/// command's processes are found inside the Pod.
const EXEC_MARK: &str = "GEODE_EXEC";

/// What a copy out of one Pod may weigh.
const MAX_COPY_OUT_BYTES: usize = 1 << 30;

/// Kill every process carrying the mark `$1` (a few rounds: a forking process's children).
const KILL_MARKED: &str = r#"for round in 1 2 3 4 5; do
  found=
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$$" ] && continue
    if tr '\0' '\n' < "$d/environ" 2>/dev/null | grep -qx "GEODE_EXEC=$1"; then
      kill -9 "$p" 2>/dev/null; found=1
    fi
  done
  [ -z "$found" ] && exit 0
  sleep 0.1
done"#;

/// Kill every process of the container but its PID 1 (the idle `sleep`) and this shell, with
/// `kill -9 -1` until none is left; prints how many there were and how many outlived it. The
/// count uses only builtins, so the shell's own children never count.
const KILL_ALL: &str = r#"live() {
  n=0
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    case "$p" in 1|"$$") continue;; esac
    [ -r "$d/status" ] || continue
    st=
    { while read -r k v; do if [ "$k" = State: ]; then st=$v; break; fi; done; } < "$d/status" 2>/dev/null
    case "$st" in ""|Z*|X*) continue;; esac
    n=$((n+1))
  done
}
live; first=$n; i=0
while [ "$n" -gt 0 ] && [ "$i" -lt 100 ]; do
  kill -9 -1 2>/dev/null
  sleep 0.1
  live; i=$((i+1))
done
echo "$first $n""#;

/// A running trial Pod, reached through the API.
#[derive(Debug)]
pub(super) struct Pod {
    pub(super) api: Api,
    pub(super) name: String,
}

impl Pod {
    /// Why an exec failed: the Pod ended (out of memory or evicted: the agent's doing; its
    /// deadline passed or it vanished: infrastructure), or the way to it broke.
    async fn failure(&self, e: ApiError) -> EnvError {
        let pod = match self.api.get_pod(&self.name).await {
            Ok(pod) => pod,
            Err(ApiError::Status { code: 404, .. }) => {
                return EnvError::Lost(format!("the Pod {} is gone ({e})", self.name));
            }
            Err(_) => return e.into(),
        };
        let phase = pod["status"]["phase"].as_str().unwrap_or_default();
        if phase == "Running" || phase == "Pending" {
            return e.into();
        }
        let reason = pod["status"]["reason"].as_str().unwrap_or_default();
        let terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]["reason"]
            .as_str()
            .unwrap_or_default();
        match (reason, terminated) {
            ("Evicted", _) | (_, "OOMKilled") => EnvError::BrokenFromInside(format!(
                "the Pod {} ended ({reason}{terminated}): {e}",
                self.name
            )),
            _ => EnvError::Lost(format!(
                "the Pod {} is {phase} ({reason}{terminated}): {e}",
                self.name
            )),
        }
    }

    /// `argv` in the Pod, its output collected whole (up to [`MAX_COPY_OUT_BYTES`]).
    async fn run(&self, argv: Vec<String>, stdin: Option<&[u8]>) -> Result<Ran, EnvError> {
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let mut over = false;
        let result = {
            let mut sink = |stream: Stream, data: &[u8]| match stream {
                Stream::Stdout if stdout.len() + data.len() <= MAX_COPY_OUT_BYTES => {
                    stdout.extend_from_slice(data)
                }
                Stream::Stdout => over = true,
                Stream::Stderr if stderr.len() < 1 << 20 => stderr.extend_from_slice(data),
                Stream::Stderr => {}
            };
            self.api.exec(&self.name, &argv, stdin, &mut sink).await
        };
        let code = match result {
            Ok(code) => code,
            Err(e) => return Err(self.failure(e).await),
        };
        if over {
            return Err(EnvError::Unsupported(format!(
                "the output is over the {} MiB copied out of one Pod",
                MAX_COPY_OUT_BYTES >> 20
            )));
        }
        Ok(Ran {
            code,
            stdout,
            stderr: String::from_utf8_lossy(&stderr).trim().to_string(),
        })
    }

    async fn sh(&self, script: &str, args: &[&str], stdin: Option<&[u8]>) -> Result<Ran, EnvError> {
        let mut argv = vec!["sh".to_string(), "-c".into(), script.into(), "sh".into()];
        argv.extend(args.iter().map(|a| a.to_string()));
        self.run(argv, stdin).await
    }

    /// A script that must succeed; its failure names `what`.
    pub(super) async fn must(
        &self,
        what: &str,
        script: &str,
        args: &[&str],
    ) -> Result<Ran, EnvError> {
        let ran = self.sh(script, args, None).await?;
        if ran.ok() {
            Ok(ran)
        } else {
            Err(EnvError::Lost(format!("{what}: {}", ran.stderr)))
        }
    }

    /// Kill every process of the trial's but the container's own; how many there were.
    pub(super) async fn kill_all(&self) -> Result<usize, EnvError> {
        let ran = self
            .must("kill the trial's processes", KILL_ALL, &[])
            .await?;
        let text = String::from_utf8_lossy(&ran.stdout);
        let mut counts = text
            .split_whitespace()
            .filter_map(|n| n.parse::<usize>().ok());
        match (counts.next(), counts.next()) {
            (Some(killed), Some(0)) => Ok(killed),
            (_, Some(left)) => Err(EnvError::Lost(format!(
                "{left} process(es) of the Pod outlived SIGKILL"
            ))),
            _ => Err(EnvError::Lost(format!(
                "kill the trial's processes: {text}"
            ))),
        }
    }
}

#[async_trait]
impl ScriptHost for Pod {
    async fn script(
        &self,
        script: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<Ran, EnvError> {
        self.sh(script, args, stdin).await
    }

    async fn exec(
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
        let mut argv: Vec<String> = vec![
            "sh".into(),
            "-c".into(),
            "cd -- \"$1\" || exit 125; shift; exec env \"$@\"".into(),
            "sh".into(),
            cwd.to_string_lossy().into_owned(),
            format!("{EXEC_MARK}={mark}"),
        ];
        argv.extend(req.env.iter().map(|(k, v)| format!("{k}={v}")));
        argv.extend(["bash".into(), "-c".into(), req.command.clone()]);
        let mut stdout = OutputCapture::new(req.output_cap);
        let mut stderr = OutputCapture::new(req.output_cap);
        let (mut timed_out, mut cancelled) = (false, false);
        let result = {
            let mut sink = |stream: Stream, data: &[u8]| match stream {
                Stream::Stdout => stdout.push(data),
                Stream::Stderr => stderr.push(data),
            };
            let call = self.api.exec(&self.name, &argv, None, &mut sink);
            tokio::select! {
                result = call => Some(result),
                _ = tokio::time::sleep(req.timeout) => { timed_out = true; None }
                _ = cancel.cancelled() => { cancelled = true; None }
            }
        };
        let exit_code = match result {
            Some(Ok(code)) => code,
            Some(Err(e)) => return Err(self.failure(e).await),
            None => {
                // Closing the stream does not end the command: its processes are found and
                // killed inside.
                self.must("kill a command's processes", KILL_MARKED, &[&mark])
                    .await?;
                None
            }
        };
        let truncated = stdout.truncated() || stderr.truncated();
        Ok(ExecOutput {
            exit_code,
            stdout: stdout.into_text(),
            stderr: stderr.into_text(),
            timed_out,
            cancelled,
            truncated,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        })
    }
}

/// One trial's Pod.
#[derive(Debug)]
pub struct KubernetesSandbox {
    pod: Arc<Pod>,
    workspace: Arc<ScriptedWorkspace>,
    trial_dir: PathBuf,
    synced: AtomicBool,
}

impl KubernetesSandbox {
    pub(super) fn new(pod: Pod, root: PathBuf, trial_dir: &Path) -> Self {
        let pod = Arc::new(pod);
        KubernetesSandbox {
            workspace: Arc::new(ScriptedWorkspace {
                container: Arc::clone(&pod) as Arc<dyn ScriptHost>,
                root,
            }),
            pod,
            trial_dir: trial_dir.to_path_buf(),
            synced: AtomicBool::new(false),
        }
    }

    /// Copy `inside` out and move what it held into `host` (created if missing), keeping what
    /// `host` already has; notes of what was left out.
    async fn bring_back(&self, inside: &str, host: &Path) -> Result<Vec<String>, EnvError> {
        let io = |context: String| move |source| EnvError::Io { context, source };
        let parent = host.parent().unwrap_or(Path::new("."));
        let landing = parent.join(format!(".k8s-copy-{}", uuid::Uuid::new_v4().simple()));
        let left_out = self.copy_out(inside, &landing, &|_| false).await?;
        std::fs::create_dir_all(host).map_err(io(format!("create {}", host.display())))?;
        let moved = move_missing(&landing, host);
        let _ = std::fs::remove_dir_all(&landing);
        moved.map_err(io(format!("fill {}", host.display())))?;
        Ok(left_out)
    }
}

/// Move every entry of `from` that `to` lacks into `to`, folders merged.
fn move_missing(from: &Path, to: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() && target.is_dir() {
            move_missing(&entry.path(), &target)?;
        } else if target.symlink_metadata().is_err() {
            std::fs::rename(entry.path(), &target)?;
        }
    }
    Ok(())
}

#[async_trait]
impl Sandbox for KubernetesSandbox {
    fn workspace(&self) -> Arc<dyn Workspace> {
        Arc::clone(&self.workspace) as Arc<dyn Workspace>
    }

    async fn exec(
        &self,
        req: ExecRequest,
        cancel: CancellationToken,
    ) -> Result<ExecOutput, EnvError> {
        ScriptHost::exec(self.pod.as_ref(), &self.workspace.root, req, cancel).await
    }

    async fn copy_in(&self, host_src: &Path, sandbox_dst: &str) -> Result<(), EnvError> {
        let dst = Path::new(sandbox_dst);
        let name = dst
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| EnvError::Unsupported(format!("copy into {sandbox_dst}: no name")))?;
        let src = host_src.to_path_buf();
        let tar = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<u8>> {
            let mut tar = tar::Builder::new(Vec::new());
            tar.follow_symlinks(false);
            if src.is_dir() {
                tar.append_dir_all(&name, &src)?;
            } else {
                tar.append_path_with_name(&src, &name)?;
            }
            tar.into_inner()
        })
        .await
        .map_err(|e| EnvError::Lost(format!("pack {}: {e}", host_src.display())))?
        .map_err(|e| EnvError::Io {
            context: format!("pack {}", host_src.display()),
            source: e,
        })?;
        // A mount point (`/tests`) cannot go: emptied, it stays and takes the copy.
        let script = "rm -rf -- \"$1\" 2>/dev/null; d=$(dirname -- \"$1\"); \
                      mkdir -p -- \"$d\" && cd -- \"$d\" && exec tar -x -o -f -";
        let ran = self.pod.sh(script, &[sandbox_dst], Some(&tar)).await?;
        if ran.ok() {
            Ok(())
        } else {
            Err(EnvError::Lost(format!(
                "copy {} to {sandbox_dst}: {}",
                host_src.display(),
                ran.stderr
            )))
        }
    }

    async fn copy_out(
        &self,
        sandbox_src: &str,
        host_dst: &Path,
        skip: &(dyn for<'n> Fn(&'n str) -> bool + Sync),
    ) -> Result<Vec<String>, EnvError> {
        let script =
            "cd -- \"$(dirname -- \"$1\")\" && exec tar -c -f - -- \"$(basename -- \"$1\")\"";
        let ran = self.pod.sh(script, &[sandbox_src], None).await?;
        if !ran.ok() {
            return Err(EnvError::Io {
                context: format!("copy {sandbox_src} out of the Pod"),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, ran.stderr),
            });
        }
        let scratch = tempfile::NamedTempFile::new().map_err(|e| EnvError::Io {
            context: "create a scratch file for a copy out".into(),
            source: e,
        })?;
        std::fs::write(scratch.path(), &ran.stdout).map_err(|e| EnvError::Io {
            context: format!("write {}", scratch.path().display()),
            source: e,
        })?;
        crate::docker::unpack_copy(scratch.path(), sandbox_src, host_dst, skip)
    }

    async fn run_verifier(&self, tests: &Path, req: ExecRequest) -> Result<ExecOutput, EnvError> {
        // Nothing of the agent's may run beside the verifier, nor have left its folder.
        self.pod.kill_all().await?;
        self.pod
            .must(
                "empty /logs/verifier",
                "rm -rf /logs/verifier && mkdir -m 777 /logs/verifier",
                &[],
            )
            .await?;
        self.copy_in(tests, TESTS_DIR).await?;
        let out = Sandbox::exec(self, req, CancellationToken::new()).await?;
        self.bring_back("/logs/verifier", &self.trial_dir.join("verifier"))
            .await?;
        Ok(out)
    }

    async fn kill_all_processes(&self) -> Result<usize, EnvError> {
        self.pod.kill_all().await
    }

    async fn sync_logs(&self) -> Vec<String> {
        if self.synced.swap(true, Ordering::SeqCst) {
            return Vec::new();
        }
        let mut notes = Vec::new();
        for (inside, host) in [
            ("/logs/agent", crate::agent_logs(&self.trial_dir)),
            ("/logs/artifacts", self.trial_dir.join("artifacts")),
        ] {
            match self.bring_back(inside, &host).await {
                Ok(left_out) => notes.extend(left_out),
                Err(e) => notes.push(format!("{inside}: not brought back: {e}")),
            }
        }
        notes
    }

    async fn teardown(self: Box<Self>) -> Result<TeardownReport, EnvError> {
        let started = Instant::now();
        // Teardown brings the logs back if nobody did; what it cannot bring is lost with the
        // Pod either way.
        let _ = self.sync_logs().await;
        let killed = self.pod.kill_all().await.unwrap_or(0);
        self.pod.api.delete_pod(&self.pod.name).await?;
        Ok(TeardownReport {
            killed_processes: killed,
            duration: started.elapsed(),
        })
    }
}

/// Wait until the Pod runs; an error says why it will not (a pull that failed, a Pod the
/// cluster refused to schedule in time).
pub(super) async fn wait_running(api: &Api, name: &str, limit: Duration) -> Result<(), EnvError> {
    let deadline = Instant::now() + limit;
    let mut last = String::new();
    loop {
        let pod = api.get_pod(name).await?;
        let status = &pod["status"];
        match status["phase"].as_str().unwrap_or_default() {
            "Running" => return Ok(()),
            "Failed" | "Succeeded" => {
                return Err(EnvError::SetupFailed {
                    step: "kubernetes pod".into(),
                    message: format!(
                        "the Pod {name} ended before it ran: {}",
                        status["message"].as_str().unwrap_or_default()
                    ),
                });
            }
            _ => {}
        }
        let waiting = &status["containerStatuses"][0]["state"]["waiting"];
        if let Some(reason) = waiting["reason"].as_str() {
            last = format!(
                "{reason}: {}",
                waiting["message"].as_str().unwrap_or_default()
            );
            if matches!(
                reason,
                "ErrImagePull"
                    | "ImagePullBackOff"
                    | "InvalidImageName"
                    | "CreateContainerConfigError"
                    | "CreateContainerError"
            ) {
                return Err(EnvError::SetupFailed {
                    step: "kubernetes pod".into(),
                    message: format!("the Pod {name} cannot start: {last}"),
                });
            }
        }
        if Instant::now() > deadline {
            return Err(EnvError::SetupFailed {
                step: "kubernetes pod".into(),
                message: format!("the Pod {name} did not run in {limit:?} ({last})"),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
