//! What a jobs folder holds, as the viewer reads it: run stores (the folder's own `geode.db`
//! and each crucible campaign's, `crucible/<hash>/geode.db`) and Harbor job folders that no
//! store knows (written by Harbor itself, or copied without their store), indexed into an
//! in-memory table of the run store's schema so one set of queries serves both.
//!
//! A run is named by its folder relative to the jobs folder (`<run>`, or
//! `crucible/<hash>/baseline`), so a trial's files are always `<jobs>/<run key>/<trial>`, and
//! every name a request carries is looked up here before any path is made from it.
//!
//! The catalog is refreshed before each answer: stores that appeared are opened, Harbor
//! result files whose size or time changed are read again, and the [`Catalog::stamp`] a page
//! polls changes whenever any of it did (a store's WAL grows with each finished trial).

use std::collections::{BTreeSet, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use geode_graders::run_store::{self, STORE_FILE};
use rusqlite::{Connection, OpenFlags};
use serde::Serialize;
use serde_json::Value;

use super::ViewError;
use super::harbor::{self, HarborJob, HarborTrial};

/// Where a run came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// `geode run` (the jobs folder's own store).
    Geode,
    /// One arm of a crucible campaign (its folder's store).
    Campaign,
    /// A Harbor job folder no store knows.
    Harbor,
}

/// One readable table set: a store file, or the in-memory index of the Harbor folders.
pub struct Source {
    /// The folder, relative to the jobs folder, that this source's run folders live in.
    prefix: String,
    /// The store file (or the jobs folder, for the Harbor index), for error messages.
    pub path: PathBuf,
    pub(crate) conn: Connection,
    pub(crate) origin: Origin,
    /// Columns a store from before them lacks (`model_calls`, `integrity`): selected as
    /// constants instead, since the viewer never alters a store.
    pub has_integrity: bool,
    pub(crate) has_model_calls: bool,
}

impl Source {
    /// An SQLite error of this source, named by its file.
    pub fn sqlite_err(&self) -> impl Fn(rusqlite::Error) -> ViewError + '_ {
        ViewError::sqlite(&self.path)
    }

    /// The expression that reads `column`, or its stand-in when the store predates it.
    pub fn column(&self, column: &'static str) -> &'static str {
        match column {
            "integrity" if !self.has_integrity => "'{}'",
            "model_calls" if !self.has_model_calls => "0",
            other => other,
        }
    }
}

/// A run the catalog holds.
#[derive(Debug, Clone)]
pub struct RunEntry {
    /// The run folder relative to the jobs folder: the run's name in URLs.
    pub key: String,
    pub(crate) run_id: String,
    /// Index into the catalog's sources.
    source: usize,
}

/// A file's size and time, to notice a change without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
}

fn stamp_of(path: &Path) -> Option<FileStamp> {
    // symlink_metadata: a link planted in a trial folder is not a file of the run.
    let m = std::fs::symlink_metadata(path).ok()?;
    m.file_type().is_file().then(|| FileStamp {
        len: m.len(),
        modified: m.modified().ok(),
    })
}

/// Whether `name` can be a single folder name under the jobs folder (no separator, not `.`,
/// `..` or hidden), so a path made from it stays where it was found.
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && !name.contains('/')
        && !name.contains('\\')
        && !name.contains('\0')
}

/// Sorted names of the entries of `dir` that are folders themselves (not links to one).
pub fn subfolders(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|n| is_plain_name(n))
        .collect();
    names.sort();
    names
}

/// Opens a store to read it. Read-write without create, then `query_only`: a read-only
/// connection cannot open a WAL store whose `-shm` file is missing (a copied folder), and the
/// viewer must never create a store where there was none, nor write to one.
fn open_store(path: &Path) -> Result<Connection, ViewError> {
    let err = ViewError::sqlite(path);
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_NOFOLLOW,
    )
    .map_err(&err)?;
    conn.pragma_update(None, "query_only", true).map_err(&err)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(&err)?;
    Ok(conn)
}

fn trial_columns(conn: &Connection) -> rusqlite::Result<BTreeSet<String>> {
    let mut st = conn.prepare("SELECT name FROM pragma_table_info('trials')")?;
    st.query_map([], |r| r.get::<_, String>(0))?.collect()
}

fn source(
    prefix: String,
    path: PathBuf,
    conn: Connection,
    origin: Origin,
) -> Result<Source, ViewError> {
    let columns = trial_columns(&conn).map_err(ViewError::sqlite(&path))?;
    Ok(Source {
        prefix,
        has_integrity: columns.contains("integrity"),
        has_model_calls: columns.contains("model_calls"),
        path,
        conn,
        origin,
    })
}

/// A Harbor result file read once and kept while its size and time stay.
struct Parsed {
    stamp: FileStamp,
    value: Result<Value, String>,
}

/// The jobs folder's stores and Harbor folders.
pub struct Catalog {
    jobs: PathBuf,
    /// Store files by path, then the Harbor index last (when there are Harbor folders).
    sources: Vec<Source>,
    runs: Vec<RunEntry>,
    harbor_fingerprint: u64,
    parsed: HashMap<PathBuf, Parsed>,
    /// Files that could not be read, each named with why; shown on the runs page.
    pub problems: Vec<String>,
    /// The Harbor files that could not be read when the index was last built (kept with it,
    /// since a refresh that finds nothing changed does not read them again).
    harbor_problems: Vec<String>,
    stamp: u64,
}

impl Catalog {
    pub(crate) fn open(jobs: &Path) -> Result<Catalog, ViewError> {
        let meta = std::fs::metadata(jobs).map_err(ViewError::io(jobs))?;
        if !meta.is_dir() {
            return Err(ViewError::Io {
                path: jobs.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a folder"),
            });
        }
        let mut c = Catalog {
            jobs: jobs.to_path_buf(),
            sources: Vec::new(),
            runs: Vec::new(),
            harbor_fingerprint: 0,
            parsed: HashMap::new(),
            problems: Vec::new(),
            harbor_problems: Vec::new(),
            stamp: 0,
        };
        c.refresh()?;
        Ok(c)
    }

    pub(crate) fn jobs(&self) -> &Path {
        &self.jobs
    }

    /// Changes whenever a store or a Harbor result file changed since the last refresh.
    pub fn stamp(&self) -> u64 {
        self.stamp
    }

    pub(crate) fn runs(&self) -> &[RunEntry] {
        &self.runs
    }

    pub(crate) fn source_of(&self, run: &RunEntry) -> &Source {
        &self.sources[run.source]
    }

    /// The run named `key`, or an error naming it.
    pub fn run(&self, key: &str) -> Result<&RunEntry, ViewError> {
        self.runs
            .iter()
            .find(|r| r.key == key)
            .ok_or_else(|| ViewError::NotFound {
                what: "run",
                name: key.to_owned(),
                jobs: self.jobs.clone(),
            })
    }

    /// The folder of `run` (its trials are its subfolders).
    pub fn run_dir(&self, run: &RunEntry) -> PathBuf {
        self.jobs.join(&run.key)
    }

    /// Reads the folder again: new stores, new or changed Harbor result files.
    pub fn refresh(&mut self) -> Result<(), ViewError> {
        self.problems.clear();
        let mut stores: Vec<(String, PathBuf, Origin)> = Vec::new();
        let own = self.jobs.join(STORE_FILE);
        if stamp_of(&own).is_some() {
            stores.push((String::new(), own, Origin::Geode));
        }
        for name in subfolders(&self.jobs.join("crucible")) {
            let path = self.jobs.join("crucible").join(&name).join(STORE_FILE);
            if stamp_of(&path).is_some() {
                stores.push((format!("crucible/{name}"), path, Origin::Campaign));
            }
        }
        let mut hasher = DefaultHasher::new();
        let mut sources = Vec::new();
        let mut old: Vec<Source> = std::mem::take(&mut self.sources);
        let harbor_old = old
            .iter()
            .position(|s| s.origin == Origin::Harbor)
            .map(|i| old.remove(i));
        for (prefix, path, origin) in stores {
            for suffix in ["", "-wal"] {
                let mut p = path.clone().into_os_string();
                p.push(suffix);
                stamp_of(Path::new(&p)).hash(&mut hasher);
            }
            let reused = old
                .iter()
                .position(|s| s.path == path)
                .map(|i| old.remove(i));
            let opened = match reused {
                Some(s) => Ok(s),
                None => {
                    open_store(&path).and_then(|conn| source(prefix, path.clone(), conn, origin))
                }
            };
            match opened {
                Ok(s) => sources.push(s),
                Err(e) => self.problems.push(e.to_string()),
            }
        }
        let mut runs = Vec::new();
        for (i, s) in sources.iter().enumerate() {
            match run_ids(&s.conn) {
                Ok(ids) => runs.extend(ids.into_iter().map(|run_id| RunEntry {
                    key: if s.prefix.is_empty() {
                        run_id.clone()
                    } else {
                        format!("{}/{run_id}", s.prefix)
                    },
                    run_id,
                    source: i,
                })),
                Err(e) => self.problems.push(format!("{}: {e}", s.path.display())),
            }
        }
        let known: BTreeSet<String> = runs.iter().map(|r| r.key.clone()).collect();
        let jobs = self.harbor_jobs(&known);
        let fingerprint = {
            let mut h = DefaultHasher::new();
            for job in &jobs {
                job.hash(&mut h);
            }
            h.finish()
        };
        fingerprint.hash(&mut hasher);
        let harbor = if jobs.is_empty() {
            None
        } else if fingerprint == self.harbor_fingerprint
            && let Some(s) = harbor_old
        {
            Some(s)
        } else {
            self.harbor_problems.clear();
            Some(self.index_harbor(&jobs)?)
        };
        self.harbor_fingerprint = fingerprint;
        if jobs.is_empty() {
            self.harbor_problems.clear();
        }
        self.problems.extend(self.harbor_problems.iter().cloned());
        if let Some(h) = harbor {
            let at = sources.len();
            match run_ids(&h.conn) {
                Ok(ids) => runs.extend(ids.into_iter().map(|run_id| RunEntry {
                    key: run_id.clone(),
                    run_id,
                    source: at,
                })),
                Err(e) => self.problems.push(format!("Harbor folders: {e}")),
            }
            sources.push(h);
        }
        self.sources = sources;
        self.runs = runs;
        self.stamp = hasher.finish();
        Ok(())
    }

    /// The Harbor job folders no store knows, with their trials' result files.
    fn harbor_jobs(&self, known: &BTreeSet<String>) -> Vec<JobFiles> {
        let mut jobs = Vec::new();
        for name in subfolders(&self.jobs) {
            if name == "crucible" || known.contains(&name) {
                continue;
            }
            let dir = self.jobs.join(&name);
            let config = stamp_of(&dir.join("config.json"));
            let result = stamp_of(&dir.join("result.json"));
            if config.is_none() && result.is_none() {
                continue;
            }
            let trials = subfolders(&dir)
                .into_iter()
                .filter_map(|t| stamp_of(&dir.join(&t).join("result.json")).map(|s| (t, s)))
                .collect();
            jobs.push(JobFiles {
                name,
                config,
                result,
                trials,
            });
        }
        jobs
    }

    /// A result file's JSON, read again only when it changed.
    fn parsed(&mut self, path: PathBuf, stamp: FileStamp) -> Result<Value, String> {
        if let Some(p) = self.parsed.get(&path)
            && p.stamp == stamp
        {
            return p.value.clone();
        }
        let value = geode_graders::safe_fs::read_to_string(&path)
            .map_err(|e| format!("{}: {e}", path.display()))
            .and_then(|text| {
                serde_json::from_str::<Value>(&text).map_err(|e| format!("{}: {e}", path.display()))
            });
        self.parsed.insert(
            path,
            Parsed {
                stamp,
                value: value.clone(),
            },
        );
        value
    }

    fn index_harbor(&mut self, jobs: &[JobFiles]) -> Result<Source, ViewError> {
        let mut read = Vec::new();
        for job in jobs {
            let dir = self.jobs.join(&job.name);
            let mut json = |file: &str, stamp: Option<FileStamp>, problems: &mut Vec<String>| {
                let stamp = stamp?;
                match self.parsed(dir.join(file), stamp) {
                    Ok(v) => Some(v),
                    Err(e) => {
                        problems.push(e);
                        None
                    }
                }
            };
            let mut problems = Vec::new();
            let config = json("config.json", job.config, &mut problems);
            let result = json("result.json", job.result, &mut problems);
            let mut trials = Vec::new();
            for (name, stamp) in &job.trials {
                match self.parsed(dir.join(name).join("result.json"), *stamp) {
                    Ok(value) => trials.push(HarborTrial {
                        folder: name.clone(),
                        result: value,
                    }),
                    Err(e) => problems.push(e),
                }
            }
            self.harbor_problems.extend(problems);
            read.push(HarborJob {
                name: job.name.clone(),
                config,
                result,
                trials,
            });
        }
        let mem = Path::new(":memory:");
        let conn = Connection::open_in_memory().map_err(ViewError::sqlite(mem))?;
        run_store::create_tables(&conn).map_err(ViewError::sqlite(mem))?;
        harbor::index(&conn, &read).map_err(ViewError::sqlite(mem))?;
        conn.pragma_update(None, "query_only", true)
            .map_err(ViewError::sqlite(mem))?;
        source(String::new(), self.jobs.clone(), conn, Origin::Harbor)
    }
}

/// A Harbor job folder's files, by stamp: what decides whether the index is built again.
#[derive(Hash)]
struct JobFiles {
    name: String,
    config: Option<FileStamp>,
    result: Option<FileStamp>,
    trials: Vec<(String, FileStamp)>,
}

fn run_ids(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut st = conn.prepare("SELECT run_id FROM runs ORDER BY created, run_id")?;
    let ids = st
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    // A run id that is not a plain folder name has no folder the viewer may read; the harness
    // never writes one, so such a row is left out rather than given a path.
    Ok(ids.into_iter().filter(|id| is_plain_name(id)).collect())
}
