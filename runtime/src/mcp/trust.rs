//! The trust store: which projects' files may make GEODE start processes.
//!
//! A project's files that name commands to run are `TRUSTED_FILES`: its `.geode/config.toml`
//! (MCP servers, hooks), Claude Code's `.mcp.json` (MCP servers) and `.claude/settings.json`
//! and `.claude/settings.local.json` (hooks). A cloned repository could hold any of them, so
//! none is acted on until `geode trust` records the SHA-256 of each one present, with the
//! project's path, in `$GEODE_HOME/trust.json`. A project whose files hash differently now (one
//! edited, added or removed) is untrusted again until `geode trust` is run once more.
//!
//! File format (`geode.trust.v2`; a `geode.trust.v1` entry, which hashed `.geode/config.toml`
//! alone in `config` and `sha256`, still reads as trust in that one file):
//! ```json
//! {"schema": "geode.trust.v2",
//!  "projects": [{"project": "/abs/dir",
//!                "files": {".geode/config.toml": "<hex>", ".mcp.json": "<hex>"},
//!                "trusted_at": "2026-11-30T04:00:00Z"}]}
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::McpError;

pub(crate) const TRUST_SCHEMA: &str = "geode.trust.v2";
/// The schema before Claude Code's files were covered; read, never written.
const TRUST_SCHEMA_V1: &str = "geode.trust.v1";

/// The files of a project that can start processes, relative to its root.
pub const TRUSTED_FILES: [&str; 4] = [
    ".geode/config.toml",
    ".mcp.json",
    ".claude/settings.json",
    ".claude/settings.local.json",
];

/// One trusted project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "RawEntry")]
pub struct TrustEntry {
    /// The project's root, canonicalized.
    pub project: PathBuf,
    /// Each file trusted, relative to the project, with the SHA-256 of its bytes.
    pub files: BTreeMap<String, String>,
    pub(crate) trusted_at: String,
}

/// An entry as either schema wrote it.
#[derive(Deserialize)]
struct RawEntry {
    project: PathBuf,
    #[serde(default)]
    files: BTreeMap<String, String>,
    /// v1: the hash of `.geode/config.toml`.
    #[serde(default)]
    sha256: Option<String>,
    trusted_at: String,
}

impl From<RawEntry> for TrustEntry {
    fn from(raw: RawEntry) -> Self {
        let mut files = raw.files;
        if let Some(sha) = raw.sha256
            && files.is_empty()
        {
            files.insert(TRUSTED_FILES[0].to_string(), sha);
        }
        TrustEntry {
            project: raw.project,
            files,
            trusted_at: raw.trusted_at,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct TrustFile {
    schema: String,
    projects: Vec<TrustEntry>,
}

/// Whether a project's files may start processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrustState {
    /// Every file hashes as recorded, and no other is there.
    Trusted(TrustEntry),
    /// Never trusted (or revoked).
    Untrusted,
    /// Trusted once, but these files changed, appeared or went away since.
    Changed {
        /// The files, relative to the project.
        files: Vec<String>,
    },
    /// The project has none of `TRUSTED_FILES`.
    NoConfig,
}

impl TrustState {
    /// Whether the project's files may start processes now.
    pub fn is_trusted(&self) -> bool {
        matches!(self, TrustState::Trusted(_))
    }

    /// Why a project's servers and hooks do not start, and what to do about it.
    pub fn explain(&self, project: &Path) -> String {
        let dir = project.display();
        match self {
            TrustState::Trusted(e) => format!(
                "trusted since {} ({})",
                e.trusted_at,
                e.files
                    .iter()
                    .map(|(f, sha)| format!("{f} sha256 {}", short(sha)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            TrustState::Untrusted => format!(
                "project {dir} is not trusted: its MCP servers and hooks do not start; run \
                 `geode trust` in {dir} to allow them"
            ),
            TrustState::Changed { files } => format!(
                "project {dir} is untrusted again: {} changed since `geode trust`; review \
                 and run `geode trust` again",
                files.join(", ")
            ),
            TrustState::NoConfig => {
                format!("project {dir} has none of {}", TRUSTED_FILES.join(", "))
            }
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

/// Each of `TRUSTED_FILES` present in `project`, with its hash.
fn present_files(project: &Path) -> Result<BTreeMap<String, String>, McpError> {
    let mut files = BTreeMap::new();
    for rel in TRUSTED_FILES {
        let path = project.join(rel);
        if path.is_file() {
            files.insert(rel.to_string(), file_sha256(&path)?);
        }
    }
    Ok(files)
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

    /// The store's file, `trust.json` in the GEODE home.
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
        let mut file: TrustFile = serde_json::from_str(&text)
            .map_err(|e| McpError::Trust(format!("{}: {e}", self.path.display())))?;
        if file.schema != TRUST_SCHEMA && file.schema != TRUST_SCHEMA_V1 {
            return Err(McpError::Trust(format!(
                "{}: schema {:?}, expected {TRUST_SCHEMA}",
                self.path.display(),
                file.schema
            )));
        }
        file.schema = TRUST_SCHEMA.into();
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

    /// The trust state of `project` (its `TRUSTED_FILES`).
    pub fn check(&self, project: &Path) -> Result<TrustState, McpError> {
        let current = present_files(project)?;
        if current.is_empty() {
            return Ok(TrustState::NoConfig);
        }
        let project = canonical(project)?;
        let file = self.load()?;
        let Some(entry) = file.projects.into_iter().find(|e| e.project == project) else {
            return Ok(TrustState::Untrusted);
        };
        if entry.files == current {
            return Ok(TrustState::Trusted(entry));
        }
        let mut names: Vec<&String> = entry.files.keys().chain(current.keys()).collect();
        names.sort();
        names.dedup();
        let files = names
            .into_iter()
            .filter(|f| entry.files.get(*f) != current.get(*f))
            .cloned()
            .collect();
        Ok(TrustState::Changed { files })
    }

    /// Record the current hash of each of `project`'s `TRUSTED_FILES`.
    pub fn trust(&self, project: &Path) -> Result<TrustEntry, McpError> {
        let files = present_files(project)?;
        if files.is_empty() {
            return Err(McpError::Trust(format!(
                "{} has none of {}: nothing to trust",
                project.display(),
                TRUSTED_FILES.join(", ")
            )));
        }
        let entry = TrustEntry {
            project: canonical(project)?,
            files,
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

    #[test]
    fn claude_code_s_files_are_trusted_with_the_project_s() {
        let home = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let store = TrustStore::new(home.path());
        let p = project.path();
        // Claude Code's files alone are enough to trust.
        std::fs::write(p.join(".mcp.json"), "{}").unwrap();
        assert_eq!(store.check(p).unwrap(), TrustState::Untrusted);
        let entry = store.trust(p).unwrap();
        assert_eq!(entry.files.keys().collect::<Vec<_>>(), [".mcp.json"]);
        assert!(store.check(p).unwrap().is_trusted());
        // A hooks file that appears later is a change, and is named.
        std::fs::create_dir_all(p.join(".claude")).unwrap();
        std::fs::write(p.join(".claude/settings.json"), "{}").unwrap();
        assert_eq!(
            store.check(p).unwrap(),
            TrustState::Changed {
                files: vec![".claude/settings.json".into()]
            }
        );
        store.trust(p).unwrap();
        std::fs::remove_file(p.join(".mcp.json")).unwrap();
        let state = store.check(p).unwrap();
        assert!(state.explain(p).contains(".mcp.json changed"), "{state:?}");
    }

    #[test]
    fn a_v1_record_still_trusts_its_config_file() {
        let home = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let p = project.path().canonicalize().unwrap();
        std::fs::create_dir_all(p.join(".geode")).unwrap();
        std::fs::write(project_config(&p), "model = \"nop\"\n").unwrap();
        let sha = file_sha256(&project_config(&p)).unwrap();
        let v1 = serde_json::json!({"schema": "geode.trust.v1", "projects": [{
            "project": p, "config": project_config(&p), "sha256": sha,
            "trusted_at": "2026-01-01T00:00:00Z"}]});
        std::fs::write(home.path().join("trust.json"), v1.to_string()).unwrap();
        let store = TrustStore::new(home.path());
        assert!(store.check(&p).unwrap().is_trusted());
    }
}
