//! Reading the harness's run store (`<jobs>/geode.db`, schema `geode.runstore.v1`, defined in
//! harness/src/store.rs) into polars DataFrames, read-only and without the harness crate (the
//! reports sit above the store in the layering, beside the crucible, not on top of the harness).
//!
//! Only `finished` trial rows are results: a `running` row is a trial that was interrupted and
//! will run again on resume. Values are copied column by column into polars builders straight
//! from SQLite's borrowed row values, so a million trials cost no per-row `String`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use geode_crucible::DecisionRecord;
use geode_graders::TrialOutcome;
use polars::prelude::*;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use crate::error::ReportError;

mod columns;
use columns::{Builder, LATER_COLUMNS, Query, RUN_QUERY, Spec, TRIAL_QUERY, sql_of};

/// The store schema this crate reads, and the store's file name in a jobs folder.
pub use geode_graders::run_store::{SCHEMA as RUNSTORE_SCHEMA, STORE_FILE};

/// A run named on the command line: which store, which id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRef {
    /// Path of the `geode.db` holding the run.
    pub store: PathBuf,
    /// The run's id in that store.
    pub run_id: String,
}

/// Resolves `arg` (a run id inside `jobs_dir`, or a path to a run folder `<jobs>/<run_id>`).
///
/// A path wins when it is an existing folder whose parent holds a run store: that is exactly
/// Harbor's layout, and a bare run id never contains a separator, so the two cannot collide in
/// practice.
pub fn resolve_run(arg: &str, jobs_dir: &Path) -> RunRef {
    let p = Path::new(arg);
    if p.is_dir()
        && let (Some(parent), Some(name)) = (p.parent(), p.file_name())
    {
        let parent = if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        };
        let store = parent.join(STORE_FILE);
        if store.is_file() {
            return RunRef {
                store,
                run_id: name.to_string_lossy().into_owned(),
            };
        }
    }
    RunRef {
        store: jobs_dir.join(STORE_FILE),
        run_id: arg.to_owned(),
    }
}

/// Which trial columns to load: the report needs fewer than a notebook export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrialColumns {
    /// What the tables and plots use.
    Report,
    /// Everything in the trial row, for Parquet and CSV.
    Export,
}

/// A `reward.json` key scored instead of each trial's headline reward (Harbor's multi-reward
/// tasks). Invariant: non-empty ASCII letters, digits, `_`, `-` and `.`, so it sits in a JSON
/// path literal as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewardKey(String);

impl RewardKey {
    /// Checks `key` against the invariant; refuses it with [`ReportError::BadRewardKey`].
    pub fn parse(key: &str) -> Result<RewardKey, ReportError> {
        let ok = !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if ok {
            Ok(RewardKey(key.to_owned()))
        } else {
            Err(ReportError::BadRewardKey(key.to_owned()))
        }
    }

    /// The key as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key's value in the trial's `rewards` JSON (NULL when the trial has no such key).
    fn sql(&self) -> String {
        format!("json_extract(rewards, '$.\"{}\"')", self.0)
    }
}

/// An open run store (read-only).
pub struct Store {
    path: PathBuf,
    conn: Connection,
    /// Columns of the `trials` table.
    columns: Vec<String>,
}

impl Store {
    /// Opens `path` read-only and checks its schema.
    pub fn open(path: &Path) -> Result<Store, ReportError> {
        if !path.is_file() {
            return Err(ReportError::NoStore {
                path: path.to_path_buf(),
            });
        }
        let sqlite = |source| ReportError::Sqlite {
            path: path.to_path_buf(),
            source,
        };
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sqlite)?;
        // The harness may be writing (WAL); wait for its short transactions instead of failing.
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(sqlite)?;
        let found: Option<String> = conn
            .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
                r.get(0)
            })
            .optional()
            .or_else(|e| match e {
                // No meta table at all: not a run store.
                rusqlite::Error::SqliteFailure(..) => Ok(None),
                other => Err(other),
            })
            .map_err(sqlite)?;
        if found.as_deref() != Some(RUNSTORE_SCHEMA) {
            return Err(ReportError::Schema {
                path: path.to_path_buf(),
                found,
                expected: RUNSTORE_SCHEMA,
            });
        }
        let columns = {
            let mut st = conn
                .prepare("SELECT name FROM pragma_table_info('trials')")
                .map_err(sqlite)?;
            st.query_map([], |r| r.get::<_, String>(0))
                .map_err(sqlite)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(sqlite)?
        };
        Ok(Store {
            path: path.to_path_buf(),
            conn,
            columns,
        })
    }

    /// The `geode.db` file this store was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sqlite(&self) -> impl FnOnce(rusqlite::Error) -> ReportError + '_ {
        |source| ReportError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    fn polars(&self) -> impl FnOnce(polars::error::PolarsError) -> ReportError {
        ReportError::polars(self.path.display().to_string())
    }

    /// Every run id in the store, sorted.
    pub fn run_ids(&self) -> Result<Vec<String>, ReportError> {
        let mut st = self
            .conn
            .prepare("SELECT run_id FROM runs ORDER BY run_id")
            .map_err(self.sqlite())?;
        st.query_map([], |r| r.get::<_, String>(0))
            .map_err(self.sqlite())?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sqlite())
    }

    /// Fails with the list of known runs unless `run_id` is in the store.
    pub fn check_run(&self, run_id: &str) -> Result<(), ReportError> {
        let known = self.run_ids()?;
        if known.iter().any(|k| k == run_id) {
            return Ok(());
        }
        Err(ReportError::UnknownRun {
            path: self.path.clone(),
            run: run_id.to_owned(),
            known,
        })
    }

    /// Whether the store has the `grades` table (stores older than `geode grade` do not).
    fn has_grades(&self) -> Result<bool, ReportError> {
        self.conn
            .query_row(
                "SELECT COUNT(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'grades'",
                [],
                |r| r.get(0),
            )
            .map_err(self.sqlite())
    }

    /// Every re-grade of every trial of `run_id`, oldest grader first.
    pub fn grades(&self, run_id: &str) -> Result<Vec<TrialGrade>, ReportError> {
        if !self.has_grades()? {
            return Ok(Vec::new());
        }
        let mut st = self
            .conn
            .prepare(
                "SELECT trial_name, grader_hash, reward, validity FROM grades WHERE run_id = ?1
                 ORDER BY graded_at, trial_name",
            )
            .map_err(self.sqlite())?;
        st.query_map([run_id], |r| {
            Ok(TrialGrade {
                run_id: run_id.to_owned(),
                trial_name: r.get(0)?,
                grader_hash: r.get(1)?,
                reward: r.get(2)?,
                validity: r.get(3)?,
            })
        })
        .map_err(self.sqlite())?
        .collect::<Result<Vec<_>, _>>()
        .map_err(self.sqlite())
    }

    /// The re-grades of `run_id` (`geode grade`), one row per grader content hash; none when
    /// the store predates the `grades` table.
    pub fn regrades(&self, run_id: &str) -> Result<Vec<Regrade>, ReportError> {
        if !self.has_grades()? {
            return Ok(Vec::new());
        }
        let mut st = self
            .conn
            .prepare(
                "SELECT grader, grader_hash, COUNT(*), SUM(validity = 'valid'), AVG(reward)
                 FROM grades WHERE run_id = ?1 GROUP BY grader_hash ORDER BY MIN(graded_at)",
            )
            .map_err(self.sqlite())?;
        st.query_map([run_id], |r| {
            Ok(Regrade {
                run_id: run_id.to_owned(),
                grader: r.get(0)?,
                grader_hash: r.get(1)?,
                trials: r.get(2)?,
                valid: r.get(3)?,
                mean_reward: r.get(4)?,
            })
        })
        .map_err(self.sqlite())?
        .collect::<Result<Vec<_>, _>>()
        .map_err(self.sqlite())
    }

    /// The `runs` row of `run_id` as a one-row DataFrame.
    pub fn run_frame(&self, run_id: &str) -> Result<DataFrame, ReportError> {
        self.frame(&RUN_QUERY, run_id, TrialColumns::Export, None)
    }

    /// The finished trials of `run_id`, ordered by trial name (at least one, or an error).
    ///
    /// With a reward key, `reward` is that key's value, and a trial without the key counts as
    /// infrastructure (its verifier did not say what was asked), as the crucible counts it.
    pub fn trial_frame(
        &self,
        run_id: &str,
        columns: TrialColumns,
        reward_key: Option<&RewardKey>,
    ) -> Result<DataFrame, ReportError> {
        let mut df = self.frame(&TRIAL_QUERY, run_id, columns, reward_key)?;
        if df.height() == 0 {
            return Err(ReportError::EmptyRun {
                path: self.path.clone(),
                run: run_id.to_owned(),
            });
        }
        self.check_outcomes(&df, run_id)?;
        let started = df.column("started_unix").map_err(self.polars())?;
        let finished = df.column("finished_unix").map_err(self.polars())?;
        let duration = (finished - started)
            .map_err(self.polars())?
            .with_name(PlSmallStr::from_static("duration_sec"));
        df.with_column(duration).map_err(self.polars())?;
        Ok(df)
    }

    /// Fails naming a trial whose outcome is outside the graders' closed set. Checks the few
    /// distinct values, and asks SQLite for a trial name only when one is bad.
    fn check_outcomes(&self, df: &DataFrame, run_id: &str) -> Result<(), ReportError> {
        let distinct = df
            .column("outcome")
            .and_then(Column::unique)
            .map_err(self.polars())?;
        let values = distinct.str().map_err(self.polars())?;
        let Some(bad) = values
            .iter()
            .find(|o| o.and_then(TrialOutcome::parse).is_none())
        else {
            return Ok(());
        };
        let trial: Option<String> = self
            .conn
            .query_row(
                "SELECT trial_name FROM trials WHERE run_id = ?1 AND status = 'finished'
                 AND outcome IS ?2 LIMIT 1",
                params![run_id, bad],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.sqlite())?;
        Err(ReportError::BadTrial {
            path: self.path.clone(),
            run: run_id.to_owned(),
            trial: trial.unwrap_or_else(|| "?".to_owned()),
            message: format!("unknown outcome {bad:?}"),
        })
    }

    /// Runs `q` for `run_id`, one builder per selected column.
    fn frame(
        &self,
        q: &Query,
        run_id: &str,
        columns: TrialColumns,
        reward_key: Option<&RewardKey>,
    ) -> Result<DataFrame, ReportError> {
        let specs: Vec<&Spec> = q
            .specs
            .iter()
            .filter(|s| s.report || columns == TrialColumns::Export)
            .collect();
        let mut select: Vec<String> = specs
            .iter()
            .map(|s| {
                let missing =
                    LATER_COLUMNS.contains(&s.sql) && !self.columns.iter().any(|c| c == s.sql);
                match (missing, reward_key, s.name) {
                    (true, _, _) => "NULL".to_owned(),
                    (false, Some(key), "reward") => key.sql(),
                    (false, Some(key), "infra") => {
                        format!("({}) OR {} IS NULL", sql_of(s), key.sql())
                    }
                    (false, _, _) => sql_of(s),
                }
            })
            .collect();
        // The row's name (trial name, run id), read only to name a bad row in an error.
        select.push(q.name_sql.to_owned());
        let name_at = specs.len();
        let sql = format!("SELECT {} FROM {}", select.join(", "), q.from);
        let mut st = self.conn.prepare(&sql).map_err(self.sqlite())?;
        let mut builders: Vec<Builder> = specs.iter().map(|s| Builder::new(s)).collect();
        let mut rows = st.query(params![run_id]).map_err(self.sqlite())?;
        let mut height = 0usize;
        while let Some(row) = rows.next().map_err(self.sqlite())? {
            for (i, b) in builders.iter_mut().enumerate() {
                let v = row.get_ref(i).map_err(self.sqlite())?;
                if let Err(message) = b.push(v) {
                    let name = row.get_ref(name_at).ok().and_then(|v| v.as_str().ok());
                    return Err(ReportError::BadTrial {
                        path: self.path.clone(),
                        run: run_id.to_owned(),
                        trial: name.unwrap_or("?").to_owned(),
                        message: format!("column {}: {message}", specs[i].name),
                    });
                }
            }
            height += 1;
        }
        let cols = builders.into_iter().map(Builder::finish).collect();
        DataFrame::new(height, cols).map_err(self.polars())
    }
}

/// A crucible campaign's decision, found beside the run store of its two arms
/// (`jobs/crucible/<contract hash>/decision.json`).
#[derive(Debug, Clone, PartialEq)]
pub struct CampaignDecision {
    /// The campaign folder holding `decision.json`: the parent of the run store.
    pub dir: PathBuf,
    /// The parsed decision.
    pub record: DecisionRecord,
}

impl CampaignDecision {
    /// The decision in `dir`, if it holds one (a campaign still running has none yet).
    fn beside(dir: &Path) -> Result<Option<CampaignDecision>, ReportError> {
        let path = dir.join("decision.json");
        if !path.is_file() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path).map_err(ReportError::io(&path))?;
        let record = DecisionRecord::from_json(&text).map_err(|e| ReportError::BadDecision {
            path: path.clone(),
            message: e.to_string(),
        })?;
        Ok(Some(CampaignDecision {
            dir: dir.to_path_buf(),
            record,
        }))
    }
}

/// One trial's re-grade by one grader (a row of the store's `grades` table).
#[derive(Debug, Clone, PartialEq)]
pub struct TrialGrade {
    /// The run of the trial.
    pub run_id: String,
    /// The trial's name in its run.
    pub trial_name: String,
    /// Content hash of the grader that graded.
    pub grader_hash: String,
    /// The reward it gave; `None` when it gave none.
    pub reward: Option<f64>,
    /// Whether the grade is valid, as the store writes it (`valid` when it is).
    pub validity: String,
}

/// Adds two columns per grader to an exported trial table: `regrade_<hash12>` (the re-grade's
/// reward) and `regrade_<hash12>_validity`, null for a trial that grader did not grade. Keyed by
/// the grader's content hash, as the store is: a re-edited rubric is a new pair of columns.
fn attach_grades(trials: &mut DataFrame, grades: &[TrialGrade]) -> PolarsResult<()> {
    let mut graders: Vec<&str> = Vec::new();
    let mut by_trial: HashMap<(&str, &str, &str), &TrialGrade> = HashMap::new();
    for g in grades {
        if !graders.contains(&g.grader_hash.as_str()) {
            graders.push(&g.grader_hash);
        }
        by_trial.insert((&g.grader_hash, &g.run_id, &g.trial_name), g);
    }
    if graders.is_empty() {
        return Ok(());
    }
    let runs: Vec<Option<String>> = trials
        .column("run_id")?
        .str()?
        .iter()
        .map(|v| v.map(str::to_owned))
        .collect();
    let names: Vec<Option<String>> = trials
        .column("trial_name")?
        .str()?
        .iter()
        .map(|v| v.map(str::to_owned))
        .collect();
    for hash in graders {
        let found: Vec<Option<&TrialGrade>> = runs
            .iter()
            .zip(&names)
            .map(|(r, n)| match (r, n) {
                (Some(r), Some(n)) => by_trial.get(&(hash, r.as_str(), n.as_str())).copied(),
                _ => None,
            })
            .collect();
        let short = &hash[..hash.len().min(12)];
        let rewards: Vec<Option<f64>> = found.iter().map(|g| g.and_then(|g| g.reward)).collect();
        let validity: Vec<Option<&str>> = found
            .iter()
            .map(|g| g.map(|g| g.validity.as_str()))
            .collect();
        trials.with_column(Column::new(format!("regrade_{short}").into(), rewards))?;
        trials.with_column(Column::new(
            format!("regrade_{short}_validity").into(),
            validity,
        ))?;
    }
    Ok(())
}

/// What one grader's re-grade of one run gave (the store's `grades` table, by content hash).
#[derive(Debug, Clone, PartialEq)]
pub struct Regrade {
    /// The run re-graded.
    pub run_id: String,
    /// The spec as it was typed.
    pub grader: String,
    /// Content hash of the grader; one row per hash.
    pub grader_hash: String,
    /// Trials the grader graded.
    pub trials: i64,
    /// Of those, grades with validity `valid`.
    pub valid: i64,
    /// Mean primary reward over the valid grades.
    pub mean_reward: Option<f64>,
}

/// The loaded data of one report: trials and runs, each from every store named.
pub struct Loaded {
    /// The runs in the order they were named.
    pub run_ids: Vec<String>,
    /// One row per run (`runs` table).
    pub runs: DataFrame,
    /// One row per finished trial.
    pub trials: DataFrame,
    /// Every store read (for messages).
    pub stores: Vec<PathBuf>,
    /// Re-grades of the runs, in run order.
    pub regrades: Vec<Regrade>,
    /// The crucible decisions of the campaigns whose run stores these are.
    pub campaigns: Vec<CampaignDecision>,
    /// The `reward.json` key scored instead of each trial's headline reward.
    pub reward_key: Option<RewardKey>,
}

/// Loads `runs` (resolved with [`resolve_run`]).
///
/// Runs are read in parallel, one read-only connection per worker (a SQLite connection is not
/// shared between threads), one worker per core at most.
pub fn load(runs: &[RunRef], columns: TrialColumns) -> Result<Loaded, ReportError> {
    load_scoring(runs, columns, None)
}

/// [`load`], scoring `reward_key` of each trial's `reward.json` when given.
pub fn load_scoring(
    runs: &[RunRef],
    columns: TrialColumns,
    reward_key: Option<&RewardKey>,
) -> Result<Loaded, ReportError> {
    let mut seen: BTreeMap<&str, &Path> = BTreeMap::new();
    for r in runs {
        if let Some(first) = seen.insert(&r.run_id, &r.store) {
            return Err(ReportError::DuplicateRun {
                run: r.run_id.clone(),
                first: first.to_path_buf(),
                second: r.store.clone(),
            });
        }
    }
    // Check every store and run first, so a typo fails fast with the list of known runs.
    let mut paths: Vec<PathBuf> = Vec::new();
    for r in runs {
        if !paths.contains(&r.store) {
            paths.push(r.store.clone());
        }
    }
    for p in &paths {
        let store = Store::open(p)?;
        for r in runs.iter().filter(|r| &r.store == p) {
            store.check_run(&r.run_id)?;
        }
    }
    let frames = parallel_map(runs, |r| {
        let store = Store::open(&r.store)?;
        let grades = match columns {
            TrialColumns::Export => store.grades(&r.run_id)?,
            TrialColumns::Report => Vec::new(),
        };
        Ok((
            store.run_frame(&r.run_id)?,
            store.trial_frame(&r.run_id, columns, reward_key)?,
            store.regrades(&r.run_id)?,
            grades,
        ))
    });
    let mut run_frames = Vec::with_capacity(runs.len());
    let mut trial_frames = Vec::with_capacity(runs.len());
    let mut regrades = Vec::new();
    let mut grades = Vec::new();
    for f in frames {
        let (run, trials, summaries, rows) = f?;
        run_frames.push(run);
        trial_frames.push(trials);
        regrades.extend(summaries);
        grades.extend(rows);
    }
    let ctx = paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let campaigns = paths
        .iter()
        .filter_map(|p| p.parent())
        .filter_map(|dir| CampaignDecision::beside(dir).transpose())
        .collect::<Result<Vec<_>, _>>()?;
    let mut trials = stack(trial_frames, &ctx)?;
    attach_grades(&mut trials, &grades).map_err(ReportError::polars(ctx.clone()))?;
    Ok(Loaded {
        run_ids: runs.iter().map(|r| r.run_id.clone()).collect(),
        runs: stack(run_frames, &ctx)?,
        trials,
        stores: paths,
        regrades,
        campaigns,
        reward_key: reward_key.cloned(),
    })
}

/// `f` over `items` on up to one thread per core, results in input order.
fn parallel_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = items.len().div_ceil(cores.max(1)).max(1);
    std::thread::scope(|s| {
        let f = &f;
        let workers: Vec<_> = items
            .chunks(chunk)
            .map(|c| s.spawn(move || c.iter().map(f).collect::<Vec<R>>()))
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

fn stack(frames: Vec<DataFrame>, ctx: &str) -> Result<DataFrame, ReportError> {
    let mut it = frames.into_iter();
    let Some(mut first) = it.next() else {
        return Ok(DataFrame::empty());
    };
    for f in it {
        first
            .vstack_mut_owned(f)
            .map_err(ReportError::polars(ctx))?;
    }
    // No rechunk: polars works on one chunk per run as well, and copying a million rows into
    // one chunk would double the peak memory for nothing.
    Ok(first)
}
