//! Which files a call changed, recorded around the call: `before` (ahead of dispatch) keeps
//! what the call may change, `after` compares and records each changed file with its state
//! before and after.
//!
//! A call that names its files (an edit, a write) watches exactly those. Any other call that
//! changes the world (a shell command, an effectful MCP tool, a delegated agent) watches the
//! whole workspace: a baseline of every file's stat and kept contents is refreshed before the
//! call (only files whose stat moved are read again, so after the first scan a command pays
//! for a walk of the tree, not a copy of it), and compared after it. Directories that hold
//! what builds and package managers regenerate (`.git`, `target`, `node_modules`, ...) are not
//! watched, nor are GEODE's own records. Files over `MAX_BLOB_BYTES`, and those beyond the
//! `MAX_WATCH_BYTES` a watch keeps, are recorded as not kept; a tree of more than `MAX_FILES`
//! files is watched only up to that many (the call gets a gap row). A rewind says what it
//! could not restore rather than claim it restored everything.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::{FileChange, FileState, RewindStore};
use crate::store::StoreError;

/// Larger files are recorded as `Unkept`.
pub const MAX_BLOB_BYTES: u64 = 16 * 1024 * 1024;
/// Files a whole-workspace watch looks at, at most.
pub const MAX_FILES: usize = 100_000;
/// Bytes a whole-workspace watch keeps, at most (a session started in a home directory must
/// not copy it); files beyond are `Unkept`.
pub const MAX_WATCH_BYTES: u64 = 512 * 1024 * 1024;
/// Directory names never watched: regenerated trees and version-control internals.
const SKIPPED_DIRS: [&str; 9] = [
    ".git",
    ".hg",
    ".svn",
    "target",
    "node_modules",
    ".venv",
    "venv",
    "__pycache__",
    ".geode",
];

/// What identifies a file's content without reading it: any write moves ctime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StatKey {
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    ino: u64,
}

impl StatKey {
    fn of(meta: &std::fs::Metadata) -> Self {
        StatKey {
            len: meta.len(),
            mtime_ns: meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
            ctime_ns: meta.ctime() as i128 * 1_000_000_000 + meta.ctime_nsec() as i128,
            ino: meta.ino(),
        }
    }
}

/// The workspace as last seen: each watched file's stat and kept state.
type Baseline = BTreeMap<String, (StatKey, FileState)>;

/// A walk of the workspace: the new baseline, whether it stopped at `MAX_FILES`, and how many
/// files could not be read.
struct Scan {
    baseline: Baseline,
    truncated: bool,
    unreadable: usize,
}

/// What a call's `before` saw, for its `after`.
#[derive(Debug)]
pub enum Watch {
    /// The named files and their states before the call.
    Files(Vec<(String, FileState)>),
    /// The whole workspace (its baseline was refreshed before the call).
    Workspace,
}

/// The recorder of one session's file changes.
#[derive(Debug)]
pub struct FileHistory {
    store: Arc<RewindStore>,
    root: PathBuf,
    /// Left out of every scan: GEODE's own records, should they live in the workspace.
    unwatched: Vec<PathBuf>,
    baseline: Mutex<Option<Baseline>>,
}

impl FileHistory {
    /// `unwatched`: directories no workspace watch enters (the session store, GEODE's home).
    pub fn new(store: Arc<RewindStore>, root: &Path, unwatched: Vec<PathBuf>) -> Self {
        FileHistory {
            store,
            root: root.to_path_buf(),
            unwatched,
            baseline: Mutex::new(None),
        }
    }

    /// The workspace root the recorded paths are relative to.
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn store(&self) -> &Arc<RewindStore> {
        &self.store
    }

    /// Keep what the call may change: `files` when it names them (absolute paths inside the
    /// workspace), the whole workspace otherwise.
    pub fn before(&self, files: Option<&[PathBuf]>) -> Result<Watch, StoreError> {
        match files {
            Some(files) => {
                let mut kept = Vec::with_capacity(files.len());
                for path in files {
                    let Some(rel) = self.relative(path) else {
                        continue;
                    };
                    kept.push((rel, self.keep(path)?));
                }
                Ok(Watch::Files(kept))
            }
            None => {
                let mut baseline = self.baseline.lock().unwrap_or_else(|p| p.into_inner());
                let scan = self.scan(&baseline.take().unwrap_or_default())?;
                *baseline = Some(scan.baseline);
                Ok(Watch::Workspace)
            }
        }
    }

    /// Record what the call changed; returns how many files.
    pub fn after(
        &self,
        watch: Watch,
        turn: u32,
        call_id: &str,
        tool: &str,
    ) -> Result<usize, StoreError> {
        let change = |path: String, before: FileState, after: FileState| FileChange {
            turn,
            call_id: call_id.to_string(),
            tool: tool.to_string(),
            path,
            before,
            after,
        };
        let mut changes = Vec::new();
        match watch {
            Watch::Files(kept) => {
                for (rel, before) in kept {
                    let after = self.keep(&self.root.join(&rel))?;
                    if after != before {
                        changes.push(change(rel, before, after));
                    }
                }
            }
            Watch::Workspace => {
                let mut guard = self.baseline.lock().unwrap_or_else(|p| p.into_inner());
                let old = guard.take().unwrap_or_default();
                let Scan {
                    baseline: fresh,
                    truncated,
                    unreadable,
                } = self.scan(&old)?;
                let paths: BTreeSet<&String> = old.keys().chain(fresh.keys()).collect();
                for path in paths {
                    let before = old.get(path).map_or(FileState::Absent, |(_, s)| s.clone());
                    let after = fresh
                        .get(path)
                        .map_or(FileState::Absent, |(_, s)| s.clone());
                    if before != after {
                        changes.push(change(path.clone(), before, after));
                    }
                }
                *guard = Some(fresh);
                if truncated {
                    let why = format!(
                        "the workspace has more than {MAX_FILES} files; only that many were watched"
                    );
                    self.store.record_gap(turn, call_id, tool, &why)?;
                }
                if unreadable > 0 {
                    let why = format!("{unreadable} files could not be read, so were not watched");
                    self.store.record_gap(turn, call_id, tool, &why)?;
                }
            }
        }
        self.store.record_changes(&changes)?;
        Ok(changes.len())
    }

    fn relative(&self, path: &Path) -> Option<String> {
        let rel = path.strip_prefix(&self.root).ok()?;
        rel.to_str().map(str::to_string)
    }

    /// The file's state now, its bytes kept.
    fn keep(&self, path: &Path) -> Result<FileState, StoreError> {
        match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(FileState::Absent),
            Err(e) => Err(StoreError::io(path, e)),
            Ok(meta) => self.keep_with(path, &meta),
        }
    }

    fn keep_with(&self, path: &Path, meta: &std::fs::Metadata) -> Result<FileState, StoreError> {
        if !meta.is_file() {
            return Ok(FileState::NotAFile);
        }
        if meta.len() > MAX_BLOB_BYTES {
            return Ok(FileState::Unkept { len: meta.len() });
        }
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(FileState::Absent),
            Err(e) => return Err(StoreError::io(path, e)),
        };
        Ok(FileState::Stored {
            sha256: self.store.put_blob(&bytes)?,
            mode: meta.permissions().mode() & 0o7777,
        })
    }

    /// Walk the workspace; files whose stat matches `known` keep their state, others are read
    /// and kept.
    fn scan(&self, known: &Baseline) -> Result<Scan, StoreError> {
        let mut fresh = Baseline::new();
        let mut unreadable = 0usize;
        let mut kept = 0u64;
        let walk = walkdir::WalkDir::new(&self.root)
            .follow_links(false)
            .sort_by_file_name()
            .into_iter()
            .filter_entry(|e| {
                let skipped = e.depth() > 0
                    && e.file_type().is_dir()
                    && e.file_name()
                        .to_str()
                        .is_some_and(|n| SKIPPED_DIRS.contains(&n));
                !skipped && !self.unwatched.iter().any(|u| u == e.path())
            });
        for entry in walk {
            // Entries that vanish or cannot be read while we walk are not the call's changes.
            let Ok(entry) = entry else { continue };
            if !entry.file_type().is_file() {
                continue;
            }
            if fresh.len() >= MAX_FILES {
                return Ok(Scan {
                    baseline: fresh,
                    truncated: true,
                    unreadable,
                });
            }
            let Some(rel) = self.relative(entry.path()) else {
                continue;
            };
            let Ok(meta) = entry.metadata() else { continue };
            let key = StatKey::of(&meta);
            let state = match known.get(&rel) {
                Some((k, s)) if *k == key => s.clone(),
                _ if kept + meta.len() > MAX_WATCH_BYTES => FileState::Unkept { len: meta.len() },
                _ => match self.keep_with(entry.path(), &meta) {
                    Ok(state) => state,
                    // A file we may not read is left out before and after alike; the call's
                    // gap row says so.
                    Err(StoreError::Io { .. }) if std::fs::File::open(entry.path()).is_err() => {
                        unreadable += 1;
                        continue;
                    }
                    Err(e) => return Err(e),
                },
            };
            if let FileState::Stored { .. } = state {
                kept += meta.len();
            }
            fresh.insert(rel, (key, state));
        }
        Ok(Scan {
            baseline: fresh,
            truncated: false,
            unreadable,
        })
    }
}
