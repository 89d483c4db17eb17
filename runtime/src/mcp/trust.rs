//! The trust store: which projects' `.geode/config.toml` may start MCP servers.
//!
//! `geode trust` records the SHA-256 of the project config file's bytes with the project's path
//! in `$GEODE_HOME/trust.json`. A project whose config hashes differently now is untrusted again
//! until `geode trust` is run once more: a changed file may declare new commands to run.
//!
//! File format (`geode.trust.v1`):
//! ```json
//! {"schema": "geode.trust.v1",
//!  "projects": [{"project": "/abs/dir", "config": "/abs/dir/.geode/config.toml",
//!                "sha256": "<hex>", "trusted_at": "2026-11-30T04:00:00Z"}]}
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::McpError;

pub const TRUST_SCHEMA: &str = "geode.trust.v1";

/// One trusted project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustEntry {
    pub project: PathBuf,
    pub config: PathBuf,
    pub sha256: String,
    pub trusted_at: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct TrustFile {
    schema: String,
    projects: Vec<TrustEntry>,
}

/// Whether a project's MCP servers may start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrustState {
    /// The config file hashes as recorded.
    Trusted(TrustEntry),
    /// Never trusted (or revoked).
    Untrusted,
    /// Trusted once, but the file changed since.
    Changed { recorded: String, current: String },
    /// The project has no `.geode/config.toml`.
    NoConfig,
}

impl TrustState {
    pub fn is_trusted(&self) -> bool {
        matches!(self, TrustState::Trusted(_))
    }

    /// Why a project's servers do not start, and what to do about it.
    pub fn explain(&self, project: &Path) -> String {
        let dir = project.display();
        match self {
            TrustState::Trusted(e) => format!(
                "trusted since {} (config sha256 {})",
                e.trusted_at,
                short(&e.sha256)
            ),
            TrustState::Untrusted => format!(
                "project {dir} is not trusted: its MCP servers do not start; run `geode trust` \
                 in {dir} to allow them"
            ),
            TrustState::Changed { recorded, current } => format!(
                "project {dir} is untrusted again: .geode/config.toml changed since `geode trust` \
                 (sha256 {} recorded, {} now); review it and run `geode trust` again",
                short(recorded),
                short(current)
            ),
            TrustState::NoConfig => format!("project {dir} has no .geode/config.toml"),
        }
    }
}

fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

/// The trust records under one GEODE_HOME.
#[derive(Debug, Clone)]
pub struct TrustStore {
    path: PathBuf,
}

/// `project/.geode/config.toml`.
pub fn project_config(project: &Path) -> PathBuf {
    project.join(".geode").join("config.toml")
}

fn io(path: &Path, e: std::io::Error) -> McpError {
    McpError::Trust(format!("{}: {e}", path.display()))
}

fn canonical(project: &Path) -> Result<PathBuf, McpError> {
    project.canonicalize().map_err(|e| io(project, e))
}

/// SHA-256 of a file's bytes, hex.
pub fn file_sha256(path: &Path) -> Result<String, McpError> {
    let bytes = std::fs::read(path).map_err(|e| io(path, e))?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

impl TrustStore {
    /// The store of `geode_home` (`trust.json` in it; created on the first `trust`).
    pub fn new(geode_home: &Path) -> Self {
        TrustStore {
            path: geode_home.join("trust.json"),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn load(&self) -> Result<TrustFile, McpError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(TrustFile {
                    schema: TRUST_SCHEMA.into(),
                    projects: Vec::new(),
                });
            }
            Err(e) => return Err(io(&self.path, e)),
        };
        let file: TrustFile = serde_json::from_str(&text)
            .map_err(|e| McpError::Trust(format!("{}: {e}", self.path.display())))?;
        if file.schema != TRUST_SCHEMA {
            return Err(McpError::Trust(format!(
                "{}: schema {:?}, expected {TRUST_SCHEMA}",
                self.path.display(),
                file.schema
            )));
        }
        Ok(file)
    }

    /// Write temp, fsync, rename: a crash leaves the old file or the new one.
    fn save(&self, file: &TrustFile) -> Result<(), McpError> {
        use std::io::Write;
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        }
        let tmp = self.path.with_extension("json.tmp");
        let text = serde_json::to_string_pretty(file)
            .map_err(|e| McpError::Trust(format!("{}: {e}", self.path.display())))?;
        let mut f = std::fs::File::create(&tmp).map_err(|e| io(&tmp, e))?;
        f.write_all(text.as_bytes()).map_err(|e| io(&tmp, e))?;
        f.sync_all().map_err(|e| io(&tmp, e))?;
        std::fs::rename(&tmp, &self.path).map_err(|e| io(&self.path, e))
    }

    /// The trust state of `project` (its `.geode/config.toml`).
    pub fn check(&self, project: &Path) -> Result<TrustState, McpError> {
        let config = project_config(project);
        if !config.is_file() {
            return Ok(TrustState::NoConfig);
        }
        let project = canonical(project)?;
        let current = file_sha256(&config)?;
        let file = self.load()?;
        Ok(
            match file.projects.into_iter().find(|e| e.project == project) {
                None => TrustState::Untrusted,
                Some(e) if e.sha256 == current => TrustState::Trusted(e),
                Some(e) => TrustState::Changed {
                    recorded: e.sha256,
                    current,
                },
            },
        )
    }

    /// Record the current hash of `project`'s config file.
    pub fn trust(&self, project: &Path) -> Result<TrustEntry, McpError> {
        let config = project_config(project);
        if !config.is_file() {
            return Err(McpError::Trust(format!(
                "{} has no .geode/config.toml: nothing to trust",
                project.display()
            )));
        }
        let project = canonical(project)?;
        let entry = TrustEntry {
            sha256: file_sha256(&config)?,
            config: project.join(".geode").join("config.toml"),
            project,
            trusted_at: chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        };
        let mut file = self.load()?;
        file.projects.retain(|e| e.project != entry.project);
        file.projects.push(entry.clone());
        self.save(&file)?;
        Ok(entry)
    }

    /// Forget `project`. Returns whether it was recorded.
    pub fn revoke(&self, project: &Path) -> Result<bool, McpError> {
        let project = canonical(project)?;
        let mut file = self.load()?;
        let before = file.projects.len();
        file.projects.retain(|e| e.project != project);
        if file.projects.len() == before {
            return Ok(false);
        }
        self.save(&file)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn trust_holds_until_the_file_changes_or_is_revoked() {
        let home = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let store = TrustStore::new(home.path());
        assert_eq!(store.check(project.path()).unwrap(), TrustState::NoConfig);
        std::fs::create_dir_all(project.path().join(".geode")).unwrap();
        let cfg = project_config(project.path());
        std::fs::write(&cfg, "model = \"nop\"\n").unwrap();
        assert_eq!(store.check(project.path()).unwrap(), TrustState::Untrusted);
        store.trust(project.path()).unwrap();
        assert!(store.check(project.path()).unwrap().is_trusted());
        std::fs::write(&cfg, "model = \"other\"\n").unwrap();
        let state = store.check(project.path()).unwrap();
        assert!(matches!(state, TrustState::Changed { .. }), "{state:?}");
        assert!(state.explain(project.path()).contains("geode trust"));
        store.trust(project.path()).unwrap();
        assert!(store.check(project.path()).unwrap().is_trusted());
        assert!(store.revoke(project.path()).unwrap());
        assert!(!store.revoke(project.path()).unwrap());
        assert_eq!(store.check(project.path()).unwrap(), TrustState::Untrusted);
    }
}
