//! The runtime's [`Workspace`] over a container the harness reaches only by running commands
//! in it (a docker container by `docker exec`, a Pod by `pods/exec`): file tools as small
//! shell scripts, each path resolved inside the container and checked against the work
//! directory there, so a symlink a command planted cannot lead a tool outside it. The
//! transport is the [`ScriptHost`] each backend implements.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use geode_runtime::tools::workspace::{
    DirEntryInfo, ExecOutput, ExecRequest, ScopeViolation, Workspace, WorkspaceError,
    resolve_lexically,
};
use tokio_util::sync::CancellationToken;

use crate::EnvError;

/// The exit code the file scripts give a path that leads outside the work directory.
pub(crate) const OUT_OF_SCOPE: i32 = 86;

/// What one script run gave back.
#[derive(Debug)]
pub(crate) struct Ran {
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl Ran {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }
}

/// A container commands can be run in: the transport under [`ScriptedWorkspace`].
#[async_trait]
pub(crate) trait ScriptHost: std::fmt::Debug + Send + Sync {
    /// `sh -c SCRIPT sh ARGS...` as the image's user, with `stdin`; an `Err` when the
    /// container or the way to it is gone.
    async fn script(
        &self,
        script: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<Ran, EnvError>;

    /// A command of the agent's (`bash -c`), in `root` or its `cwd`, killed with everything
    /// it started on timeout or cancellation.
    async fn exec(
        &self,
        root: &Path,
        req: ExecRequest,
        cancel: CancellationToken,
    ) -> Result<ExecOutput, EnvError>;
}

/// A path's real location inside, checked against the work directory `$2` (empty: `/`).
const RESOLVE: &str = r#"p=$(readlink -f -- "$1") || { echo "$1: No such file or directory" >&2; exit 2; }
case "$p" in "$2"|"$2"/*) ;; *) echo "$1 leads to $p, outside $2" >&2; exit 86;; esac"#;

/// The runtime's [`Workspace`] over a container.
#[derive(Debug, Clone)]
pub(crate) struct ScriptedWorkspace {
    pub(crate) container: Arc<dyn ScriptHost>,
    pub(crate) root: PathBuf,
}

impl ScriptedWorkspace {
    fn shown(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| path.display().to_string())
    }

    /// The scope argument of [`RESOLVE`]: the root, or empty for `/`.
    fn scope(&self) -> String {
        self.root
            .to_string_lossy()
            .trim_end_matches('/')
            .to_string()
    }

    async fn file_op(
        &self,
        op: &'static str,
        path: &Path,
        script: &str,
        stdin: Option<&[u8]>,
    ) -> Result<Vec<u8>, WorkspaceError> {
        let (target, scope) = (path.to_string_lossy().into_owned(), self.scope());
        let ran = self
            .container
            .script(script, &[&target, &scope], stdin)
            .await
            .map_err(|e| WorkspaceError::Io {
                op,
                path: self.shown(path),
                source: std::io::Error::other(e),
            })?;
        match ran.code {
            Some(0) => Ok(ran.stdout),
            Some(OUT_OF_SCOPE) => Err(WorkspaceError::Scope(ScopeViolation {
                path: self.shown(path),
                why: ran.stderr,
            })),
            _ => {
                let kind = if ran.stderr.contains("No such file") {
                    std::io::ErrorKind::NotFound
                } else if ran.stderr.contains("Is a directory") {
                    std::io::ErrorKind::IsADirectory
                } else if ran.stderr.contains("Permission denied") {
                    std::io::ErrorKind::PermissionDenied
                } else {
                    std::io::ErrorKind::Other
                };
                Err(WorkspaceError::Io {
                    op,
                    path: self.shown(path),
                    source: std::io::Error::new(kind, ran.stderr),
                })
            }
        }
    }
}

#[async_trait]
impl Workspace for ScriptedWorkspace {
    fn root(&self) -> &Path {
        &self.root
    }

    fn resolve(&self, path: &str) -> Result<PathBuf, ScopeViolation> {
        resolve_lexically(&self.root, path)
    }

    async fn read_file(&self, path: &Path) -> Result<Vec<u8>, WorkspaceError> {
        let script = format!("{RESOLVE}\nexec cat -- \"$p\"");
        self.file_op("read", path, &script, None).await
    }

    async fn write_file(&self, path: &Path, bytes: &[u8]) -> Result<(), WorkspaceError> {
        let script =
            format!("mkdir -p -- \"$(dirname -- \"$1\")\" || exit 1\n{RESOLVE}\nexec cat > \"$p\"");
        self.file_op("write", path, &script, Some(bytes))
            .await
            .map(drop)
    }

    async fn list_dir(&self, path: &Path) -> Result<Vec<DirEntryInfo>, WorkspaceError> {
        // Type of the entry, type of what it leads to, size, name; NUL-separated.
        let script = format!(
            "{RESOLVE}\n[ -d \"$p\" ] || {{ echo \"$1: Not a directory\" >&2; exit 1; }}\nexec find \"$p\" -mindepth 1 -maxdepth 1 -printf '%y %Y %s %f\\0'"
        );
        let out = self.file_op("list", path, &script, None).await?;
        let mut entries: Vec<DirEntryInfo> = out
            .split(|b| *b == 0)
            .filter(|record| !record.is_empty())
            .filter_map(|record| {
                let text = String::from_utf8_lossy(record);
                let mut fields = text.splitn(4, ' ');
                let (kind, target, size, name) = (
                    fields.next()?,
                    fields.next()?,
                    fields.next()?,
                    fields.next()?,
                );
                Some(DirEntryInfo {
                    name: name.to_string(),
                    is_dir: target == "d",
                    is_symlink: kind == "l",
                    len: size.parse().unwrap_or(0),
                })
            })
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    async fn exec(
        &self,
        req: ExecRequest,
        cancel: CancellationToken,
    ) -> Result<ExecOutput, WorkspaceError> {
        self.container
            .exec(&self.root, req, cancel)
            .await
            .map_err(|e| WorkspaceError::Io {
                op: "exec",
                path: self.root.display().to_string(),
                source: std::io::Error::other(e),
            })
    }
}
