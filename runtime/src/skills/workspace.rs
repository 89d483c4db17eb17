//! The session's workspace with its skills' folders readable: a skill may live outside the
//! workspace root (`$GEODE_HOME/skills`, a task's `skills_dir`), and the model reads its files
//! with the ordinary file tools. Paths inside a skill's folder resolve even outside the root;
//! reads and listings there are served from the session's snapshot (the bytes the skill hash
//! covers) and writes are refused. Everything else goes to the inner workspace unchanged.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::SkillSet;
use crate::tools::output::OutputSink;
use crate::tools::workspace::{
    DirEntryInfo, ExecOutput, ExecRequest, ScopeViolation, Workspace, WorkspaceError,
};

#[derive(Debug, Clone)]
pub(crate) struct SkillWorkspace {
    inner: Arc<dyn Workspace>,
    skills: Arc<SkillSet>,
}

impl SkillWorkspace {
    pub fn new(inner: Arc<dyn Workspace>, skills: Arc<SkillSet>) -> Self {
        SkillWorkspace { inner, skills }
    }

    /// Whether `path` is served by the skills' snapshot rather than the inner workspace.
    fn is_skill_path(&self, path: &Path) -> bool {
        !path.starts_with(self.inner.root()) && self.skills.contains(path)
    }

    fn io(path: &Path, op: &'static str, kind: std::io::ErrorKind, why: &str) -> WorkspaceError {
        WorkspaceError::Io {
            op,
            path: path.display().to_string(),
            source: std::io::Error::new(kind, why.to_string()),
        }
    }
}

/// `path` made absolute and free of `.`/`..` without touching any file system; `None` for a
/// relative path (those name the workspace) or one that climbs above `/`.
fn lexical_absolute(path: &str) -> Option<PathBuf> {
    use std::path::Component;
    let given = Path::new(path);
    if !given.is_absolute() || path.contains('\0') {
        return None;
    }
    let mut out = PathBuf::new();
    for comp in given.components() {
        match comp {
            Component::RootDir | Component::Prefix(_) => out.push(comp.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(n) => out.push(n),
        }
    }
    Some(out)
}

#[async_trait]
impl Workspace for SkillWorkspace {
    fn root(&self) -> &Path {
        self.inner.root()
    }

    fn resolve(&self, path: &str) -> Result<PathBuf, ScopeViolation> {
        match self.inner.resolve(path) {
            Ok(p) => Ok(p),
            Err(violation) => match lexical_absolute(path) {
                Some(p) if self.is_skill_path(&p) => Ok(p),
                _ => Err(violation),
            },
        }
    }

    async fn read_file(&self, path: &Path) -> Result<Vec<u8>, WorkspaceError> {
        if self.is_skill_path(path) {
            return match self.skills.file(path) {
                Some(bytes) => Ok(bytes.to_vec()),
                None => Err(Self::io(
                    path,
                    "read",
                    std::io::ErrorKind::IsADirectory,
                    "a folder of a skill, not a file",
                )),
            };
        }
        self.inner.read_file(path).await
    }

    async fn write_file(&self, path: &Path, bytes: &[u8]) -> Result<(), WorkspaceError> {
        if self.is_skill_path(path) {
            return Err(Self::io(
                path,
                "write",
                std::io::ErrorKind::PermissionDenied,
                "skills are read-only",
            ));
        }
        self.inner.write_file(path, bytes).await
    }

    async fn list_dir(&self, path: &Path) -> Result<Vec<DirEntryInfo>, WorkspaceError> {
        if self.is_skill_path(path) {
            let entries = self.skills.dir_entries(path).ok_or_else(|| {
                Self::io(
                    path,
                    "list",
                    std::io::ErrorKind::NotADirectory,
                    "a file of a skill, not a folder",
                )
            })?;
            return Ok(entries
                .into_iter()
                .map(|(name, is_dir, len)| DirEntryInfo {
                    name,
                    is_dir,
                    is_symlink: false,
                    len,
                })
                .collect());
        }
        self.inner.list_dir(path).await
    }

    async fn exec(
        &self,
        req: ExecRequest,
        cancel: CancellationToken,
    ) -> Result<ExecOutput, WorkspaceError> {
        self.inner.exec(req, cancel).await
    }

    async fn exec_live(
        &self,
        req: ExecRequest,
        cancel: CancellationToken,
        live: OutputSink,
    ) -> Result<ExecOutput, WorkspaceError> {
        self.inner.exec_live(req, cancel, live).await
    }
}
