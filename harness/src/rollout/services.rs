//! A compose task's sidecar services: each a sandbox of its own image, on the main sandbox's
//! network, started in `depends_on` order, each waited for until its healthcheck passes.
//!
//! The group is one [`Sandbox`] to the rest of the trial: the agent, the verifier and every
//! step act in `main` while the services keep running, and teardown ends them all. A sidecar
//! runs its image's ENTRYPOINT and CMD (or the service's `entrypoint` / `command`) in the
//! background, its output kept in the trial's `services/<name>/agent/service.log`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use geode_runtime::tools::workspace::{ExecOutput, ExecRequest, Workspace};
use tokio_util::sync::CancellationToken;

use super::images::ImageCache;
use crate::env::compose::{Compose, Service};
use crate::env::dockerfile::shell_quote;
use crate::env::{
    Backend, ChangedInputs, EnvError, EnvironmentSpec, GroupNetwork, Judgment, Sandbox,
    SharedNetwork, TeardownReport,
};
use crate::pack::{Task, TaskHash};

/// Where a sidecar's trial folder lies, inside the trial's.
pub const SERVICES_DIR: &str = "services";

const LAUNCHER_CHECK: &str =
    "command -v setsid >/dev/null || { echo 'the image has no setsid' >&2; exit 127; }";

/// Follows the service's command: start it in the background with its output in the log, then
/// wait until it leads its own session (field 6 of `/proc/PID/stat`), or has already ended.
const LAUNCHER_WAIT: &str = r#"> /logs/agent/service.log 2>&1 < /dev/null &
pid=$!
for _ in $(seq 1000); do
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || exit 0
  set -- ${stat##*) }
  [ "$4" = "$pid" ] && exit 0
  sleep 0.01
done
echo "the service did not leave the launcher's process group" >&2
exit 1"#;

/// The trial's main sandbox and its running sidecars.
pub(crate) struct ServiceGroup {
    main: Box<dyn Sandbox>,
    sidecars: Vec<(String, Box<dyn Sandbox>)>,
}

/// What starting one sidecar needs from the trial.
pub(crate) struct GroupStart<'a> {
    pub task: &'a Task,
    pub compose: &'a Compose,
    /// The main sandbox's spec (its network policy, build timeout and group names).
    pub main_spec: &'a EnvironmentSpec,
    pub backend: &'a dyn Backend,
    pub images: &'a ImageCache,
    pub trial_dir: &'a Path,
    pub timeout_multiplier: f64,
    pub cancel: &'a CancellationToken,
}

/// The names a compose group's `/etc/hosts` gives the group's loopback.
pub(crate) fn group_names(compose: &Compose) -> Vec<String> {
    std::iter::once(crate::env::compose::MAIN_SERVICE.to_string())
        .chain(compose.sidecars.iter().map(|s| s.name.clone()))
        .collect()
}

/// Start every sidecar beside `main`. On failure everything started, `main` included, is
/// torn down before the error returns.
pub(crate) async fn start_group(
    start: GroupStart<'_>,
    main: Box<dyn Sandbox>,
) -> Result<Box<dyn Sandbox>, EnvError> {
    let mut group = ServiceGroup {
        main,
        sidecars: Vec::new(),
    };
    let Some(network) = group.main.shared_network() else {
        let _ = Box::new(group).teardown().await;
        return Err(EnvError::Unsupported(
            "docker-compose services need a backend whose sandboxes share a network (sandbox, \
             docker)"
                .into(),
        ));
    };
    for service in &start.compose.sidecars {
        match start_sidecar(&start, service, &network).await {
            Ok(sandbox) => group.sidecars.push((service.name.clone(), sandbox)),
            Err(e) => {
                let _ = Box::new(group).teardown().await;
                return Err(e);
            }
        }
    }
    Ok(Box::new(group))
}

async fn start_sidecar(
    start: &GroupStart<'_>,
    service: &Service,
    network: &SharedNetwork,
) -> Result<Box<dyn Sandbox>, EnvError> {
    let step = |what: &str| format!("services.{}{what}", service.name);
    let spec = sidecar_spec(start.task, start.main_spec, service, Some(network.clone()));
    let key = TaskHash(format!("{}+service:{}", start.task.hash, service.name));
    let mut image = start.images.prepare(start.backend, &key, &spec).await?;
    if let Some(user) = &service.user {
        image.user = Some(user.clone());
    }
    if let Some(dir) = &service.working_dir {
        image.workdir = dir.clone();
    }
    let argv = service.argv(&image.entrypoint, &image.cmd);
    if argv.is_empty() {
        return Err(EnvError::SetupFailed {
            step: step(""),
            message: "nothing to run: the image has no ENTRYPOINT or CMD and the service no \
                      `command`"
                .into(),
        });
    }
    let dir = start.trial_dir.join(SERVICES_DIR).join(&service.name);
    // The service may run as any user of its image: let it write its log (set before the
    // start, which copies the folder, mode included, onto the sandbox's disk).
    let logs = crate::env::agent_logs(&dir);
    std::fs::create_dir_all(&logs)
        .and_then(|()| {
            std::fs::set_permissions(&logs, std::os::unix::fs::PermissionsExt::from_mode(0o1777))
        })
        .map_err(|source| EnvError::Io {
            context: format!("open {} to the service's user", logs.display()),
            source,
        })?;
    let sandbox = start.backend.start(&spec, &image, &dir).await?;
    let running = async {
        // The service leads a session of its own (`setsid`), so nothing aimed at the
        // launcher's process group (a timeout's kill) reaches it; the launcher waits until it
        // has left the group, and it lives until teardown.
        let line: Vec<String> = argv.iter().map(|w| shell_quote(w)).collect();
        let launch = ExecRequest {
            command: format!(
                "{LAUNCHER_CHECK}\nsetsid {} {LAUNCHER_WAIT}",
                line.join(" ")
            ),
            cwd: None,
            timeout: Duration::from_secs(30),
            output_cap: 4096,
            env: Vec::new(),
        };
        let out = sandbox.exec(launch, start.cancel.clone()).await?;
        if out.exit_code != Some(0) {
            return Err(EnvError::SetupFailed {
                step: step(""),
                message: format!("could not start {:?}: {}", argv, out.stderr.trim()),
            });
        }
        if let Some(check) = &service.healthcheck
            && let Err(message) = crate::rollout::task_command::wait_healthy(
                sandbox.as_ref(),
                check,
                start.timeout_multiplier,
                start.cancel,
            )
            .await
        {
            // Its log lives on the sandbox's disk until brought back.
            let _ = sandbox.sync_logs().await;
            return Err(EnvError::SetupFailed {
                step: step(".healthcheck"),
                message: format!("{message}; its output: {}", service_log_tail(&logs)),
            });
        }
        Ok(())
    }
    .await;
    match running {
        Ok(()) => Ok(sandbox),
        Err(e) => {
            let _ = sandbox.teardown().await;
            Err(e)
        }
    }
}

/// A sidecar's environment: its image or build, on the main sandbox's network (`join`; `None`
/// when only its image is prepared, as `geode image stage` does).
pub(crate) fn sidecar_spec(
    task: &Task,
    main: &EnvironmentSpec,
    service: &Service,
    join: Option<SharedNetwork>,
) -> EnvironmentSpec {
    let (build, docker_image, build_args) = match &service.build {
        Some(b) => (Some(b.source()), None, b.args.clone()),
        None => (None, service.image.clone(), Vec::new()),
    };
    EnvironmentSpec {
        task_name: format!("{}/{}", task.id, service.name),
        environment_dir: task.environment_dir(),
        build,
        network: main.network.clone(),
        cpus: None,
        memory_mb: None,
        pids_max: main.pids_max,
        storage_mb: None,
        build_timeout: main.build_timeout,
        time_limits: main.time_limits,
        env: service.env.clone(),
        docker_image,
        build_args,
        build_log: main.build_log.clone(),
        group: GroupNetwork {
            join,
            names: main.group.names.clone(),
        },
    }
}

/// The last lines of a sidecar's output, for a failed healthcheck's message.
fn service_log_tail(logs: &Path) -> String {
    let text = std::fs::read_to_string(logs.join("service.log")).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(5)..].join(" | ");
    if tail.is_empty() {
        "(none)".into()
    } else {
        tail
    }
}

#[async_trait]
impl Sandbox for ServiceGroup {
    fn notes(&self) -> Vec<String> {
        self.main.notes()
    }

    fn workspace(&self) -> Arc<dyn Workspace> {
        self.main.workspace()
    }

    async fn exec(
        &self,
        req: ExecRequest,
        cancel: CancellationToken,
    ) -> Result<ExecOutput, EnvError> {
        self.main.exec(req, cancel).await
    }

    async fn copy_in(&self, host_src: &Path, sandbox_dst: &str) -> Result<(), EnvError> {
        self.main.copy_in(host_src, sandbox_dst).await
    }

    async fn copy_out(
        &self,
        sandbox_src: &str,
        host_dst: &Path,
        skip: &(dyn for<'n> Fn(&'n str) -> bool + Sync),
    ) -> Result<Vec<String>, EnvError> {
        self.main.copy_out(sandbox_src, host_dst, skip).await
    }

    async fn run_verifier(&self, tests: &Path, req: ExecRequest) -> Result<ExecOutput, EnvError> {
        self.main.run_verifier(tests, req).await
    }

    fn verifier_decoy(&self) -> Option<PathBuf> {
        self.main.verifier_decoy()
    }

    async fn start_display(&self, width: u32, height: u32) -> Result<(), EnvError> {
        self.main.start_display(width, height).await
    }

    async fn listen_inside(&self, port: u16) -> Result<std::net::TcpListener, EnvError> {
        self.main.listen_inside(port).await
    }

    async fn kill_all_processes(&self) -> Result<usize, EnvError> {
        self.main.kill_all_processes().await
    }

    async fn sync_logs(&self) -> Vec<String> {
        self.main.sync_logs().await
    }

    async fn teardown(self: Box<Self>) -> Result<TeardownReport, EnvError> {
        let ServiceGroup { main, sidecars } = *self;
        let mut report = TeardownReport::default();
        let mut first_error = None;
        // The sidecars first, last started first: `main` holds the group's network.
        let all = sidecars.into_iter().rev().map(|(_, s)| s);
        for sandbox in all.chain(std::iter::once(main)) {
            match sandbox.teardown().await {
                Ok(r) => {
                    report.killed_processes += r.killed_processes;
                    report.duration += r.duration;
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }

    async fn changed_verifier_inputs(&self, exempt: &str, when: Judgment) -> ChangedInputs {
        self.main.changed_verifier_inputs(exempt, when).await
    }

    async fn network_attempts(&self) -> u64 {
        self.main.network_attempts().await
    }

    fn shared_network(&self) -> Option<SharedNetwork> {
        self.main.shared_network()
    }

    fn sidecar(&self, name: &str) -> Option<&dyn Sandbox> {
        self.sidecars
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s.as_ref())
    }
}
