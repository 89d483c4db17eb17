//! The `host` backend: no isolation at all, for machines where namespaces are unavailable and
//! for debugging. Only ever selected by an explicit flag.
//!
//! Each trial gets a copy of the task's `environment/` folder as its work directory, and
//! commands run there on the host, as the harness's user, with the host's network. Paths are
//! not remapped: a task whose commands or tests use absolute paths (`/app`, `/logs/verifier`,
//! `/tests` — most Terminal-Bench tasks) will not find them and fails here. `copy_in` puts
//! files under the trial's own folder (`<trial>/fs/<path>`) rather than at the host path, so a
//! trial can never overwrite the host's `/tests` or `/solution`. The Dockerfile is not run.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use geode_runtime::tools::workspace::{ExecOutput, ExecRequest, LocalWorkspace, Workspace};
use tokio_util::sync::CancellationToken;

use super::fsops::copy_tree;
use super::{Backend, EnvError, EnvironmentSpec, PreparedImage, Sandbox, TeardownReport};

/// The unisolated backend: each trial runs on the host itself, in a copy of the task's
/// `environment/` folder under `work_root`.
#[derive(Debug, Clone)]
pub struct HostBackend {
    /// Parent of the per-trial folders.
    work_root: PathBuf,
}

impl HostBackend {
    /// A backend that keeps its per-trial folders under `work_root`.
    pub fn new(work_root: impl Into<PathBuf>) -> Self {
        HostBackend {
            work_root: work_root.into(),
        }
    }
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> EnvError {
    move |source| EnvError::Io { context, source }
}

#[async_trait]
impl Backend for HostBackend {
    fn kind(&self) -> crate::kind::BackendKind {
        crate::kind::BackendKind::Host
    }

    async fn prepare(&self, spec: &EnvironmentSpec) -> Result<PreparedImage, EnvError> {
        Ok(PreparedImage {
            root: super::ImageRoot::Host { layer: None },
            workdir: ".".into(),
            env: spec.env.clone(),
            user: None,
            entrypoint: Vec::new(),
            cmd: Vec::new(),
            from: String::new(),
            source: "the host itself (host backend, no isolation)".into(),
            digest: None,
            notes: vec![
                "host backend: no isolation; the Dockerfile was not run and absolute paths are \
                 not remapped"
                    .into(),
            ],
            origin: Default::default(),
            cache_hit: false,
            build_duration: std::time::Duration::ZERO,
        })
    }

    async fn start(
        &self,
        spec: &EnvironmentSpec,
        _image: &PreparedImage,
        _trial_dir: &Path,
    ) -> Result<Box<dyn Sandbox>, EnvError> {
        let dir = self
            .work_root
            .join(uuid::Uuid::new_v4().simple().to_string());
        let work = dir.join("work");
        let (src, dst) = (spec.environment_dir.clone(), work.clone());
        tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&dst)?;
            copy_tree(&src, &dst)
        })
        .await
        .map_err(|e| EnvError::Lost(format!("copy task: {e}")))?
        .map_err(io(format!(
            "copy {} for the trial",
            spec.environment_dir.display()
        )))?;
        let workspace = LocalWorkspace::new(&work).map_err(|e| EnvError::Io {
            context: "open the host workspace".into(),
            source: std::io::Error::other(e),
        })?;
        Ok(Box::new(HostSandbox {
            dir,
            env: spec.env.clone(),
            workspace: Arc::new(workspace),
        }))
    }
}

#[derive(Debug)]
struct HostSandbox {
    dir: PathBuf,
    env: Vec<(String, String)>,
    workspace: Arc<LocalWorkspace>,
}

#[async_trait]
impl Sandbox for HostSandbox {
    fn workspace(&self) -> Arc<dyn Workspace> {
        Arc::clone(&self.workspace) as Arc<dyn Workspace>
    }

    async fn exec(
        &self,
        mut req: ExecRequest,
        cancel: CancellationToken,
    ) -> Result<ExecOutput, EnvError> {
        let mut env = self.env.clone();
        env.append(&mut req.env);
        req.env = env;
        self.workspace
            .exec(req, cancel)
            .await
            .map_err(|e| EnvError::Io {
                context: "exec on the host".into(),
                source: std::io::Error::other(e),
            })
    }

    async fn copy_in(&self, host_src: &Path, sandbox_dst: &str) -> Result<(), EnvError> {
        let target = self
            .dir
            .join("fs")
            .join(sandbox_dst.trim_start_matches('/'));
        let src = host_src.to_path_buf();
        let to = target.clone();
        tokio::task::spawn_blocking(move || {
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent)?;
            }
            copy_tree(&src, &to)
        })
        .await
        .map_err(|e| EnvError::Lost(format!("copy task: {e}")))?
        .map_err(io(format!(
            "copy {} to {}",
            host_src.display(),
            target.display()
        )))
    }

    /// No isolation: the host's own loopback.
    async fn listen_inside(&self, port: u16) -> Result<std::net::TcpListener, EnvError> {
        std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, port))
            .map_err(io(format!("listen on 127.0.0.1:{port}")))
    }

    /// Every command's process group dies with its call, so only processes that escaped on
    /// purpose (`setsid`) could remain, and the host backend cannot find those.
    async fn kill_all_processes(&self) -> Result<usize, EnvError> {
        Ok(0)
    }

    async fn teardown(self: Box<Self>) -> Result<TeardownReport, EnvError> {
        let started = Instant::now();
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir))
            .await
            .map_err(|e| EnvError::Lost(format!("teardown task: {e}")))?
            .map_err(io(format!("remove {}", self.dir.display())))?;
        Ok(TeardownReport {
            killed_processes: 0,
            duration: started.elapsed(),
        })
    }
}
