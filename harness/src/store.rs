//! The run store: one SQLite file per jobs folder (`geode.db`, schema `geode.runstore.v1`) with
//! a row per run and a row per trial. Harbor's folder layout beside it (`jobs/<run>/...`) is
//! written by the rollout; this database is what resume, reports and the crucible query.
//!
//! A trial row is written `running` when the trial starts and `finished` (with its outcome) in
//! one statement when it ends, so after a crash every trial is either finished, and kept, or
//! not, and run again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use geode_crucible::IntegritySignals;
use geode_graders::{TrialOutcome, run_store};
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use crate::rollout::trial::TrialPhase;

pub use geode_graders::run_store::{SCHEMA, STORE_FILE};

/// Failures of the run store; each names the database file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite refused to open the file or run a statement.
    #[error("{path}: {source}")]
    Sqlite {
        /// The database file.
        path: String,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The database holds something the store cannot read back.
    #[error("{path}: {message}")]
    Invalid {
        /// The database file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// One run (a job: tasks x attempts).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    /// The run's id, also its folder's name under the jobs folder.
    pub run_id: String,
    /// When the run was made (RFC 3339, UTC).
    pub created: String,
    /// The task pack's path as given to the run.
    pub pack_path: String,
    /// The task pack's content hash.
    pub pack_hash: String,
    /// The model route every trial's agent used.
    pub model_route: String,
    /// The hash of the agent scaffold's settings.
    pub scaffold_hash: String,
    /// The run seed every trial's seed derives from.
    pub seed: u64,
    /// Trials per task.
    pub attempts: u32,
    /// SHA-256 of the run's `lock.json`: a resume must match it.
    pub lock_hash: String,
    /// `running`, `finished` or `cancelled`.
    pub status: String,
}

/// A re-grade of one trial (`geode grade`), keyed by the grader's content hash: re-grading with
/// the same grader replaces its row, another grader (or an edited rubric) adds one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GradeRow {
    /// The run of the graded trial.
    pub run_id: String,
    /// The graded trial, within its run.
    pub trial_name: String,
    /// The spec as typed (`rubric:FILE`, `judge:ROUTE:3`), for the reader.
    pub grader: String,
    /// The grader's content hash (an edited rubric changes it); keys the row with the trial.
    pub grader_hash: String,
    /// The primary reward; `None` when the grade is invalid.
    pub reward: Option<f64>,
    /// `valid`, or the infrastructure class that made it invalid.
    pub validity: String,
    /// When the grade was made (RFC 3339, UTC).
    pub graded_at: String,
}

/// Token and cost totals of one trial's agent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TrialUsage {
    /// Prompt tokens sent, summed over the agent's model calls.
    pub input_tokens: u64,
    /// Of those, tokens the provider served from its prompt cache.
    pub cached_tokens: u64,
    /// Tokens the model generated.
    pub output_tokens: u64,
    /// What the calls cost, in US dollars.
    pub cost_usd: f64,
    /// Model calls of the agent (rounds of its turn).
    pub model_calls: u64,
}

/// A finished trial as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialRow {
    /// The run the trial belongs to.
    pub run_id: String,
    /// The trial's name, also its folder's name in the run's folder.
    pub trial_name: String,
    /// The task's id in its pack.
    pub task_id: String,
    /// The task folder's content hash.
    pub task_hash: String,
    /// The task's category (task.toml metadata).
    pub category: String,
    /// The task's difficulty (task.toml metadata).
    pub difficulty: String,
    /// Which attempt at the task this is, from 0.
    pub attempt: u32,
    /// The trial's seed, derived from the run seed, the task and the attempt.
    pub seed: u64,
    /// How the trial ended.
    pub outcome: TrialOutcome,
    /// The primary reward; `None` when the verifier left none (infrastructure outcomes).
    pub reward: Option<f64>,
    /// Every reward the verifier reported, by name (the store keeps it as a JSON object).
    pub rewards: BTreeMap<String, f64>,
    /// The class of the failure that ended the trial, if one did (`TrialDirError` ...).
    pub exception_class: Option<String>,
    /// That failure's message.
    pub exception_message: Option<String>,
    /// When the trial started (RFC 3339, UTC).
    pub started: String,
    /// When the trial ended (RFC 3339, UTC).
    pub finished: String,
    /// Seconds each phase took (the store keeps it as a JSON object keyed by phase name).
    pub phases: BTreeMap<TrialPhase, f64>,
    /// What the trial's agent spent.
    pub usage: TrialUsage,
    /// The model route the agent used.
    pub model_route: String,
    /// The hash of the agent scaffold's settings.
    pub scaffold_hash: String,
    /// Times the trial was run again after an infrastructure failure.
    pub infra_retries: u32,
    /// Integrity signals the trial raised (the crucible's safety veto counts them).
    pub integrity: IntegritySignals,
}

/// An open run store: one SQLite connection, shared behind a lock.
#[derive(Debug)]
pub struct RunStore {
    path: PathBuf,
    conn: Mutex<Connection>,
}

/// Stores written before the trial table had `model_calls` and `integrity` get them, with the
/// values those trials would have had (no calls counted, no integrity signals), so an old
/// `geode.db` keeps working and loses nothing.
fn add_missing_trial_columns(conn: &Connection) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare("SELECT name FROM pragma_table_info('trials')")?;
    let columns = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    for (column, definition) in [
        ("model_calls", "model_calls INTEGER NOT NULL DEFAULT 0"),
        ("integrity", "integrity TEXT NOT NULL DEFAULT '{}'"),
    ] {
        if !columns.iter().any(|c| c == column) {
            conn.execute_batch(&format!("ALTER TABLE trials ADD COLUMN {definition}"))?;
        }
    }
    Ok(())
}

impl RunStore {
    /// Opens the database at `path`, creating it and its tables when missing and adding
    /// columns an older store lacks.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let err = |source| StoreError::Sqlite {
            path: path.display().to_string(),
            source,
        };
        let conn = Connection::open(path).map_err(err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(err)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(err)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(err)?;
        run_store::create_tables(&conn).map_err(err)?;
        add_missing_trial_columns(&conn).map_err(err)?;
        Ok(RunStore {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
        })
    }

    fn err(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sqlite {
            path: self.path.display().to_string(),
            source,
        }
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        // Statements are atomic; a panic elsewhere cannot leave the connection half-written.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a new run with its config as JSON; fails if the run id is taken.
    pub fn insert_run(&self, run: &RunRow, config_json: &str) -> Result<(), StoreError> {
        self.conn()
            .execute(
                "INSERT INTO runs VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                params![
                    run.run_id,
                    run.created,
                    run.pack_path,
                    run.pack_hash,
                    run.model_route,
                    run.scaffold_hash,
                    run.seed as i64,
                    run.attempts,
                    run.lock_hash,
                    config_json,
                    run.status
                ],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Sets a run's status (`running`, `finished`, `cancelled`).
    pub fn set_run_status(&self, run_id: &str, status: &str) -> Result<(), StoreError> {
        self.conn()
            .execute(
                "UPDATE runs SET status = ?2 WHERE run_id = ?1",
                params![run_id, status],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// The run `run_id`, or `None` when the store has no such run.
    pub fn run(&self, run_id: &str) -> Result<Option<RunRow>, StoreError> {
        self.conn()
            .query_row(
                "SELECT run_id, created, pack_path, pack_hash, model_route, scaffold_hash, seed,
                        attempts, lock_hash, status FROM runs WHERE run_id = ?1",
                params![run_id],
                |r| {
                    Ok(RunRow {
                        run_id: r.get(0)?,
                        created: r.get(1)?,
                        pack_path: r.get(2)?,
                        pack_hash: r.get(3)?,
                        model_route: r.get(4)?,
                        scaffold_hash: r.get(5)?,
                        seed: r.get::<_, i64>(6)? as u64,
                        attempts: r.get(7)?,
                        lock_hash: r.get(8)?,
                        status: r.get(9)?,
                    })
                },
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// Mark a trial as started (replacing an interrupted attempt of it).
    #[allow(clippy::too_many_arguments)]
    pub fn start_trial(
        &self,
        run_id: &str,
        trial_name: &str,
        task_id: &str,
        task_hash: &str,
        category: &str,
        difficulty: &str,
        attempt: u32,
        seed: u64,
        started: &str,
    ) -> Result<(), StoreError> {
        self.conn()
            .execute(
                "INSERT OR REPLACE INTO trials (run_id, trial_name, task_id, task_hash, category,
                    difficulty, attempt, seed, status, started)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'running', ?9)",
                params![
                    run_id,
                    trial_name,
                    task_id,
                    task_hash,
                    category,
                    difficulty,
                    attempt,
                    seed as i64,
                    started
                ],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Record a finished trial in one statement.
    pub fn finish_trial(&self, t: &TrialRow) -> Result<(), StoreError> {
        self.conn()
            .execute(
                "INSERT OR REPLACE INTO trials VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'finished',
                    ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23,
                    ?24, ?25)",
                params![
                    t.run_id,
                    t.trial_name,
                    t.task_id,
                    t.task_hash,
                    t.category,
                    t.difficulty,
                    t.attempt,
                    t.seed as i64,
                    t.outcome.as_str(),
                    t.reward,
                    json_column(&t.rewards),
                    t.exception_class,
                    t.exception_message,
                    t.started,
                    t.finished,
                    json_column(&t.phases),
                    t.usage.input_tokens as i64,
                    t.usage.cached_tokens as i64,
                    t.usage.output_tokens as i64,
                    t.usage.cost_usd,
                    t.model_route,
                    t.scaffold_hash,
                    t.infra_retries,
                    t.usage.model_calls as i64,
                    serde_json::to_string(&t.integrity).unwrap_or_else(|_| "{}".into())
                ],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Records a grade, replacing an earlier one of the same trial by the same grader.
    pub fn record_grade(&self, g: &GradeRow) -> Result<(), StoreError> {
        self.conn()
            .execute(
                "INSERT OR REPLACE INTO grades VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    g.run_id,
                    g.trial_name,
                    g.grader,
                    g.grader_hash,
                    g.reward,
                    g.validity,
                    g.graded_at
                ],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// The re-grades of a run, by grader hash then trial.
    pub fn grades(&self, run_id: &str) -> Result<Vec<GradeRow>, StoreError> {
        let conn = self.conn();
        let mut st = conn
            .prepare(
                "SELECT run_id, trial_name, grader, grader_hash, reward, validity, graded_at
                 FROM grades WHERE run_id = ?1 ORDER BY grader_hash, trial_name",
            )
            .map_err(|e| self.err(e))?;
        st.query_map(params![run_id], |r| {
            Ok(GradeRow {
                run_id: r.get(0)?,
                trial_name: r.get(1)?,
                grader: r.get(2)?,
                grader_hash: r.get(3)?,
                reward: r.get(4)?,
                validity: r.get(5)?,
                graded_at: r.get(6)?,
            })
        })
        .and_then(|rows| rows.collect())
        .map_err(|e| self.err(e))
    }

    /// Every finished trial of a run, ordered by trial name.
    pub fn trials(&self, run_id: &str) -> Result<Vec<TrialRow>, StoreError> {
        let conn = self.conn();
        let mut st = conn
            .prepare(
                "SELECT run_id, trial_name, task_id, task_hash, category, difficulty, attempt, seed,
                        outcome, reward, rewards, exception_class, exception_message, started,
                        finished, phases, input_tokens, cached_tokens, output_tokens, cost_usd,
                        model_route, scaffold_hash, infra_retries, model_calls, integrity
                 FROM trials WHERE run_id = ?1 AND status = 'finished' ORDER BY trial_name",
            )
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map(params![run_id], |r| {
                let outcome: String = r.get(8)?;
                let integrity: String = r.get(24)?;
                let columns = JsonColumns {
                    integrity,
                    rewards: r.get(10)?,
                    phases: r.get(15)?,
                };
                Ok((
                    outcome,
                    columns,
                    TrialRow {
                        run_id: r.get(0)?,
                        trial_name: r.get(1)?,
                        task_id: r.get(2)?,
                        task_hash: r.get(3)?,
                        category: r.get(4)?,
                        difficulty: r.get(5)?,
                        attempt: r.get(6)?,
                        seed: r.get::<_, i64>(7)? as u64,
                        outcome: TrialOutcome::Cancelled,
                        reward: r.get(9)?,
                        rewards: BTreeMap::new(),
                        exception_class: r.get(11)?,
                        exception_message: r.get(12)?,
                        started: r.get(13)?,
                        finished: r.get(14)?,
                        phases: BTreeMap::new(),
                        usage: TrialUsage {
                            input_tokens: r.get::<_, i64>(16)? as u64,
                            cached_tokens: r.get::<_, i64>(17)? as u64,
                            output_tokens: r.get::<_, i64>(18)? as u64,
                            cost_usd: r.get(19)?,
                            model_calls: r.get::<_, i64>(23)? as u64,
                        },
                        model_route: r.get(20)?,
                        scaffold_hash: r.get(21)?,
                        infra_retries: r.get(22)?,
                        integrity: IntegritySignals::default(),
                    },
                ))
            })
            .map_err(|e| self.err(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.err(e))?;
        rows.into_iter()
            .map(|(outcome, columns, mut row)| {
                let invalid = |column: &str, e: serde_json::Error| StoreError::Invalid {
                    path: self.path.display().to_string(),
                    message: format!("trial {}: {column}: {e}", row.trial_name),
                };
                row.integrity = serde_json::from_str(&columns.integrity)
                    .map_err(|e| invalid("integrity", e))?;
                row.rewards = number_map(&columns.rewards).map_err(|e| invalid("rewards", e))?;
                row.phases = number_map(&columns.phases).map_err(|e| invalid("phases", e))?;
                row.outcome = TrialOutcome::parse(&outcome).ok_or_else(|| StoreError::Invalid {
                    path: self.path.display().to_string(),
                    message: format!("trial {}: unknown outcome {outcome:?}", row.trial_name),
                })?;
                Ok(row)
            })
            .collect()
    }
}

/// The JSON columns of a trial row, as read, parsed once the row's name is known for errors.
struct JsonColumns {
    integrity: String,
    rewards: String,
    phases: String,
}

/// A map as its JSON column text. Maps of names to numbers always serialize (a non-finite
/// number is written as `null`, which `number_map` leaves out).
fn json_column<K: Serialize + Ord, V: Serialize>(map: &BTreeMap<K, V>) -> String {
    serde_json::to_string(map).unwrap_or_else(|_| "{}".into())
}

/// A JSON column of names to numbers, `null`s left out.
fn number_map<K: serde::de::DeserializeOwned + Ord>(
    text: &str,
) -> Result<BTreeMap<K, f64>, serde_json::Error> {
    let map: BTreeMap<K, Option<f64>> = serde_json::from_str(text)?;
    Ok(map.into_iter().filter_map(|(k, v)| Some((k, v?))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_from_before_model_calls_and_integrity_opens_with_its_trials_intact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("geode.db");
        let old = Connection::open(&path).unwrap();
        old.execute_batch(
            "CREATE TABLE trials (
                run_id TEXT NOT NULL, trial_name TEXT NOT NULL, task_id TEXT NOT NULL,
                task_hash TEXT NOT NULL, category TEXT NOT NULL, difficulty TEXT NOT NULL,
                attempt INTEGER NOT NULL, seed INTEGER NOT NULL, status TEXT NOT NULL,
                outcome TEXT, reward REAL, rewards TEXT, exception_class TEXT,
                exception_message TEXT, started TEXT, finished TEXT, phases TEXT,
                input_tokens INTEGER, cached_tokens INTEGER, output_tokens INTEGER,
                cost_usd REAL, model_route TEXT, scaffold_hash TEXT, infra_retries INTEGER,
                PRIMARY KEY (run_id, trial_name));
             INSERT INTO trials VALUES ('r1', 't__1', 't', 'h', 'c', 'easy', 1, 7, 'finished',
                'passed', 1.0, '{}', NULL, NULL, '2026-01-01T00:00:00Z', '2026-01-01T00:01:00Z', '{}', 10, 0, 5, 0.0, 'oracle',
                's', 0);",
        )
        .unwrap();
        drop(old);
        let store = RunStore::open(&path).unwrap();
        let trials = store.trials("r1").unwrap();
        assert_eq!(trials.len(), 1);
        assert_eq!(trials[0].reward, Some(1.0));
        assert_eq!(trials[0].usage.model_calls, 0);
        // Opening again (columns now present) changes nothing.
        drop(store);
        assert_eq!(
            RunStore::open(&path).unwrap().trials("r1").unwrap().len(),
            1
        );
    }

    #[test]
    fn rewards_and_phase_timings_are_read_back_typed_and_a_damaged_column_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("geode.db");
        let store = RunStore::open(&path).unwrap();
        let mut row = TrialRow {
            run_id: "r1".into(),
            trial_name: "t__0".into(),
            task_id: "t".into(),
            task_hash: "h".into(),
            category: "c".into(),
            difficulty: "easy".into(),
            attempt: 0,
            seed: 7,
            outcome: TrialOutcome::Passed,
            reward: Some(1.0),
            rewards: BTreeMap::from([("reward".into(), 1.0), ("style".into(), 0.5)]),
            exception_class: None,
            exception_message: None,
            started: String::new(),
            finished: String::new(),
            phases: BTreeMap::from([
                (TrialPhase::AgentExecution, 2.5),
                (TrialPhase::Verifier, 0.25),
            ]),
            usage: TrialUsage::default(),
            model_route: "oracle".into(),
            scaffold_hash: String::new(),
            infra_retries: 0,
            integrity: IntegritySignals::default(),
        };
        store.finish_trial(&row).unwrap();
        // A phase that took no finite time is left out rather than refusing the whole row.
        row.trial_name = "t__1".into();
        row.phases.insert(TrialPhase::Teardown, f64::NAN);
        store.finish_trial(&row).unwrap();
        let back = store.trials("r1").unwrap();
        assert_eq!(
            back[0].rewards,
            BTreeMap::from([("reward".into(), 1.0), ("style".into(), 0.5)])
        );
        assert_eq!(back[0].phases[&TrialPhase::AgentExecution], 2.5);
        assert!(!back[1].phases.contains_key(&TrialPhase::Teardown));
        assert_eq!(back[1].phases.len(), 2);
        store
            .conn()
            .execute(
                "UPDATE trials SET phases = '{\"warp\": 1}' WHERE trial_name = 't__1'",
                [],
            )
            .unwrap();
        let err = store.trials("r1").unwrap_err().to_string();
        assert!(err.contains("t__1") && err.contains("phases"), "{err}");
    }
}
