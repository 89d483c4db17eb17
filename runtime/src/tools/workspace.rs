//! The workspace the built-in tools act on: files under one root and process execution.
//!
//! The runtime ships `LocalWorkspace` (a directory on this machine). The harness hands the same
//! tools a sandboxed workspace by implementing this trait, so no tool knows where it runs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

/// A model-supplied path that does not stay inside the workspace root.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("path {path:?} is outside the workspace root: {why}")]
pub struct ScopeViolation {
    pub path: String,
    pub why: String,
}

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("could not start process: {0}")]
    Spawn(std::io::Error),
    #[error(transparent)]
    Scope(#[from] ScopeViolation),
}

/// One shell command to run in the workspace.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    /// Run by `bash -c`.
    pub command: String,
    /// Working directory relative to the root; the root itself when `None`.
    pub cwd: Option<PathBuf>,
    /// The whole process group is killed when this passes.
    pub timeout: Duration,
    /// Bytes kept of stdout and of stderr each; the rest is dropped with a visible marker.
    pub output_cap: usize,
    pub env: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExecOutput {
    /// `None` when the process was killed by a signal (timeout or cancellation included).
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
    pub cancelled: bool,
    /// True when stdout or stderr was cut at `output_cap`.
    pub truncated: bool,
    pub duration_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DirEntryInfo {
    pub name: String,
    pub is_dir: bool,
    pub is_symlink: bool,
    pub len: u64,
}

#[async_trait]
pub trait Workspace: Send + Sync + std::fmt::Debug {
    /// The directory every path is relative to (canonical).
    fn root(&self) -> &Path;

    /// Resolve a path the model supplied (relative to the root, or absolute inside it) to an
    /// absolute path inside the root. Refuses `..` escapes, absolute paths outside the root and
    /// symlinks (in any existing prefix) that lead outside. The target need not exist.
    fn resolve(&self, path: &str) -> Result<PathBuf, ScopeViolation>;

    async fn read_file(&self, path: &Path) -> Result<Vec<u8>, WorkspaceError>;

    /// Creates parent directories as needed.
    async fn write_file(&self, path: &Path, bytes: &[u8]) -> Result<(), WorkspaceError>;

    /// Entries sorted by name.
    async fn list_dir(&self, path: &Path) -> Result<Vec<DirEntryInfo>, WorkspaceError>;

    async fn exec(
        &self,
        req: ExecRequest,
        cancel: CancellationToken,
    ) -> Result<ExecOutput, WorkspaceError>;
}
