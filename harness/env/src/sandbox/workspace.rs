//! The runtime's [`Workspace`] over a sandbox: what the agent's tools act on.
//!
//! `resolve` is synchronous and lexical (no `..` above the root, no absolute path outside it);
//! the server re-checks every file operation after following symlinks inside the sandbox, so
//! a symlink planted by a command cannot lead a file tool out of the work directory. Writes by
//! commands land in the trial's own layer wherever they go, never on the host.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use geode_runtime::tools::computer::{ComputerAction, ComputerError, Screenshot};
use geode_runtime::tools::workspace::{
    DirEntryInfo, ExecOutput, ExecRequest, ScopeViolation, Workspace, WorkspaceError,
    resolve_lexically,
};
use tokio_util::sync::CancellationToken;

use super::client::ServerClient;
use super::protocol::{self, ErrorKind, ExecSpec, Op, Reply, ReplyError};
use crate::EnvError;

/// A sandbox as the runtime's tools see it: files and commands go to its server, and paths
/// are scoped to the work directory.
#[derive(Debug, Clone)]
pub struct SandboxWorkspace {
    client: Arc<ServerClient>,
    root: PathBuf,
    /// The sandbox's own X display, once the trial started one; until then (and for every
    /// task without a display) `computer` is refused.
    display: Arc<OnceLock<String>>,
}

impl SandboxWorkspace {
    pub(crate) fn new(client: Arc<ServerClient>, root: PathBuf) -> Self {
        SandboxWorkspace {
            client,
            root,
            display: Arc::new(OnceLock::new()),
        }
    }

    /// From now on `computer` acts on `display`, inside the sandbox.
    pub(crate) fn set_display(&self, display: &str) {
        // A second display for one sandbox is never started; the first stays.
        let _ = self.display.set(display.to_string());
    }

    fn scope(&self) -> Option<String> {
        Some(self.root.to_string_lossy().into_owned())
    }

    fn fail(&self, op: &'static str, path: &Path, e: ReplyError) -> WorkspaceError {
        let shown = self.shown(path);
        if e.kind == ErrorKind::Scope {
            return WorkspaceError::Scope(ScopeViolation {
                path: shown,
                why: e.message,
            });
        }
        WorkspaceError::Io {
            op,
            path: shown,
            source: std::io::Error::new(e.kind.io_kind(), e.message),
        }
    }

    fn lost(&self, op: &'static str, path: &Path, e: EnvError) -> WorkspaceError {
        WorkspaceError::Io {
            op,
            path: self.shown(path),
            source: std::io::Error::other(e),
        }
    }

    /// The path as the model should see it: relative to the root.
    fn shown(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => path.display().to_string(),
        }
    }

    async fn call(&self, op: &'static str, path: &Path, req: Op) -> Result<Reply, WorkspaceError> {
        match self.client.call(req).await {
            Ok(Reply::Error(e)) => Err(self.fail(op, path, e)),
            Ok(reply) => Ok(reply),
            Err(e) => Err(self.lost(op, path, e)),
        }
    }
}

#[async_trait]
impl Workspace for SandboxWorkspace {
    fn root(&self) -> &Path {
        &self.root
    }

    /// Lexical only: the agent re-checks symlinks inside the sandbox on every file operation.
    fn resolve(&self, path: &str) -> Result<PathBuf, ScopeViolation> {
        resolve_lexically(&self.root, path)
    }

    async fn read_file(&self, path: &Path) -> Result<Vec<u8>, WorkspaceError> {
        let req = Op::ReadFile {
            path: path.to_string_lossy().into_owned(),
            scope: self.scope(),
        };
        match self.call("read", path, req).await? {
            Reply::File { data_b64 } => {
                protocol::decode(&data_b64).map_err(|m| WorkspaceError::Io {
                    op: "read",
                    path: self.shown(path),
                    source: std::io::Error::other(m),
                })
            }
            other => Err(self.lost(
                "read",
                path,
                EnvError::Lost(format!("unexpected reply {other:?}")),
            )),
        }
    }

    async fn write_file(&self, path: &Path, bytes: &[u8]) -> Result<(), WorkspaceError> {
        let req = Op::WriteFile {
            path: path.to_string_lossy().into_owned(),
            data_b64: protocol::encode(bytes),
            scope: self.scope(),
        };
        self.call("write", path, req).await.map(|_| ())
    }

    async fn list_dir(&self, path: &Path) -> Result<Vec<DirEntryInfo>, WorkspaceError> {
        let req = Op::ListDir {
            path: path.to_string_lossy().into_owned(),
            scope: self.scope(),
        };
        match self.call("list", path, req).await? {
            Reply::Dir { entries } => Ok(entries
                .into_iter()
                .map(|e| DirEntryInfo {
                    name: e.name,
                    is_dir: e.is_dir,
                    is_symlink: e.is_symlink,
                    len: e.len,
                })
                .collect()),
            other => Err(self.lost(
                "list",
                path,
                EnvError::Lost(format!("unexpected reply {other:?}")),
            )),
        }
    }

    async fn exec(
        &self,
        req: ExecRequest,
        cancel: CancellationToken,
    ) -> Result<ExecOutput, WorkspaceError> {
        let cwd = match &req.cwd {
            None => self.root.clone(),
            Some(dir) => self.resolve(&dir.to_string_lossy())?,
        };
        let spec = ExecSpec {
            command: req.command,
            shell: None,
            cwd: Some(cwd.to_string_lossy().into_owned()),
            timeout_ms: u64::try_from(req.timeout.as_millis()).unwrap_or(u64::MAX),
            output_cap: req.output_cap,
            env: req.env,
            user: None,
            scope: self.scope(),
            view: super::protocol::View::Tool,
            // The agent's commands, as Harbor's agents run them in the container: a service
            // started with `cmd &` serves later commands and the tests.
            keep_background: true,
        };
        match self.client.exec(spec, cancel).await {
            Ok(result) => Ok(super::exec_output(result)),
            Err(EnvError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::PermissionDenied =>
            {
                Err(WorkspaceError::Scope(ScopeViolation {
                    path: self.shown(&cwd),
                    why: source.to_string(),
                }))
            }
            Err(EnvError::Io { source, .. }) => Err(WorkspaceError::Spawn(source)),
            Err(e) => Err(WorkspaceError::Spawn(std::io::Error::other(e))),
        }
    }

    /// The action goes to the sandbox's agent, which connects to the display inside.
    async fn computer(&self, action: &ComputerAction) -> Result<Screenshot, ComputerError> {
        let Some(display) = self.display.get() else {
            return Err(ComputerError::NoDisplay);
        };
        let req = Op::Computer {
            display: display.clone(),
            action: action.clone(),
        };
        match self.client.call(req).await {
            Ok(Reply::Screenshot {
                png_b64,
                width,
                height,
                screen_width,
                screen_height,
            }) => Ok(Screenshot {
                png: protocol::decode(&png_b64).map_err(|e| ComputerError::Worker(e.into()))?,
                width,
                height,
                screen_width,
                screen_height,
            }),
            Ok(Reply::Error(e)) => Err(ComputerError::Sandbox(e.message)),
            Ok(other) => Err(ComputerError::Worker(
                format!("unexpected reply {other:?}").into(),
            )),
            Err(e) => Err(ComputerError::Worker(e.into())),
        }
    }
}
