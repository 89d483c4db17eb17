//! The runs page's questions: every run with its summary (counted by the harness's one
//! summary, so the page shows what `geode run` printed) and two runs paired task by task
//! through the graders' one comparison (`geode compare`'s own), each read in SQL from the run
//! store's columns.

use geode_graders::TrialOutcome;
use geode_graders::compare::{Comparison, RunColumns};
use serde::Serialize;

use super::ViewError;
use super::catalog::{Catalog, Origin, RunEntry};
use super::harbor::seconds_between;
use crate::store::TrialUsage;
use crate::summary::{Counted, RunSummary, summarize_counted};

/// A run as the runs page shows it.
#[derive(Debug, Serialize)]
pub struct RunView {
    pub(crate) key: String,
    pub(crate) run_id: String,
    pub(crate) origin: Origin,
    pub(crate) created: String,
    pub(crate) pack: String,
    pub(crate) model: String,
    /// The agent under test (`geode`, `claude-code@2.1.332`, ...), from the run's config.
    pub(crate) agent: String,
    pub(crate) seed: u64,
    pub(crate) attempts: u32,
    pub(crate) status: String,
    pub(crate) finished_trials: usize,
    pub(crate) running_trials: usize,
    /// First trial start to last trial end, seconds.
    pub duration_seconds: Option<f64>,
    pub(crate) summary: RunSummary,
}

/// Every run of the catalog with its summary over its finished trials.
pub fn runs(c: &Catalog) -> Result<Vec<RunView>, ViewError> {
    let mut out = Vec::new();
    for run in c.runs() {
        out.push(run_view(c, run)?);
    }
    Ok(out)
}

/// One run with its summary.
pub fn run_view(c: &Catalog, run: &RunEntry) -> Result<RunView, ViewError> {
    let s = c.source_of(run);
    let err = s.sqlite_err();
    let mut view = s
        .conn
        .prepare_cached(
            "SELECT created, pack_path, model_route, seed, attempts, status,
                    COALESCE(json_extract(config, '$.agent'), 'geode') FROM runs
             WHERE run_id = ?1",
        )
        .map_err(&err)?
        .query_row([&run.run_id], |r| {
            Ok(RunView {
                key: run.key.clone(),
                run_id: run.run_id.clone(),
                origin: s.origin,
                created: r.get(0)?,
                pack: r.get(1)?,
                model: r.get(2)?,
                agent: r.get(6)?,
                seed: r.get::<_, i64>(3)? as u64,
                attempts: r.get(4)?,
                status: r.get(5)?,
                finished_trials: 0,
                running_trials: 0,
                duration_seconds: None,
                summary: summarize_counted([]),
            })
        })
        .map_err(&err)?;
    let mut st = s
        .conn
        .prepare_cached(
            "SELECT task_id, status, outcome, reward, input_tokens, cached_tokens, output_tokens,
                    cost_usd, started, finished FROM trials WHERE run_id = ?1",
        )
        .map_err(&err)?;
    let mut rows = st.query([&run.run_id]).map_err(&err)?;
    let mut counted: Vec<(String, TrialOutcome, Option<f64>, TrialUsage)> = Vec::new();
    let (mut first, mut last): (Option<String>, Option<String>) = (None, None);
    while let Some(r) = rows.next().map_err(&err)? {
        let status: String = r.get(1).map_err(&err)?;
        let outcome: Option<String> = r.get(2).map_err(&err)?;
        let started: Option<String> = r.get(8).map_err(&err)?;
        if let Some(t) = started
            && first.as_ref().is_none_or(|f| t < *f)
        {
            first = Some(t);
        }
        let outcome = match (
            status.as_str(),
            outcome.as_deref().and_then(TrialOutcome::parse),
        ) {
            ("finished", Some(o)) => o,
            _ => {
                view.running_trials += 1;
                continue;
            }
        };
        if let Some(t) = r.get::<_, Option<String>>(9).map_err(&err)?
            && last.as_ref().is_none_or(|l| t > *l)
        {
            last = Some(t);
        }
        let int = |i| {
            r.get::<_, Option<i64>>(i)
                .map(|v| v.unwrap_or(0).max(0) as u64)
        };
        counted.push((
            r.get(0).map_err(&err)?,
            outcome,
            r.get(3).map_err(&err)?,
            TrialUsage {
                input_tokens: int(4).map_err(&err)?,
                cached_tokens: int(5).map_err(&err)?,
                output_tokens: int(6).map_err(&err)?,
                cost_usd: r.get::<_, Option<f64>>(7).map_err(&err)?.unwrap_or(0.0),
                model_calls: 0,
            },
        ));
    }
    view.finished_trials = counted.len();
    view.duration_seconds = first.zip(last).and_then(|(a, b)| seconds_between(&a, &b));
    view.summary =
        summarize_counted(
            counted
                .iter()
                .map(|(task, outcome, reward, usage)| Counted {
                    task_id: task,
                    outcome: *outcome,
                    reward: *reward,
                    usage,
                }),
        );
    Ok(view)
}

/// A run's finished trials as the comparison's columns, sorted by (task, attempt).
struct Side {
    task: Vec<String>,
    category: Vec<String>,
    attempt: Vec<i64>,
    infra: Vec<bool>,
    reward: Vec<f64>,
}

fn side(c: &Catalog, key: &str) -> Result<Side, ViewError> {
    let run = c.run(key)?;
    let s = c.source_of(run);
    let err = s.sqlite_err();
    let mut st = s
        .conn
        .prepare_cached(
            "SELECT task_id, category, attempt, outcome, reward FROM trials
             WHERE run_id = ?1 AND status = 'finished' ORDER BY task_id, attempt",
        )
        .map_err(&err)?;
    let mut rows = st.query([&run.run_id]).map_err(&err)?;
    let mut out = Side {
        task: Vec::new(),
        category: Vec::new(),
        attempt: Vec::new(),
        infra: Vec::new(),
        reward: Vec::new(),
    };
    while let Some(r) = rows.next().map_err(&err)? {
        let outcome: Option<String> = r.get(3).map_err(&err)?;
        out.task.push(r.get(0).map_err(&err)?);
        out.category.push(r.get(1).map_err(&err)?);
        out.attempt.push(r.get(2).map_err(&err)?);
        // An outcome this build does not know cannot be scored: it counts as infrastructure.
        out.infra.push(
            outcome
                .as_deref()
                .and_then(TrialOutcome::parse)
                .is_none_or(TrialOutcome::is_infrastructure),
        );
        out.reward
            .push(r.get::<_, Option<f64>>(4).map_err(&err)?.unwrap_or(0.0));
    }
    Ok(out)
}

/// The paired comparison of run `candidate` with run `baseline` (`geode compare`'s).
pub fn compare(c: &Catalog, baseline: &str, candidate: &str) -> Result<Comparison, ViewError> {
    let (a, b) = (side(c, baseline)?, side(c, candidate)?);
    let (at, ac) = (strs(&a.task), strs(&a.category));
    let (bt, bc) = (strs(&b.task), strs(&b.category));
    geode_graders::compare::compare(
        (baseline, a.columns(&at, &ac)),
        (candidate, b.columns(&bt, &bc)),
    )
    .map_err(|e| ViewError::BadRequest {
        field: "runs",
        message: e.to_string(),
    })
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

impl Side {
    fn columns<'a>(&'a self, task: &'a [&'a str], category: &'a [&'a str]) -> RunColumns<'a> {
        RunColumns {
            task,
            category,
            attempt: &self.attempt,
            infra: &self.infra,
            reward: &self.reward,
        }
    }
}
