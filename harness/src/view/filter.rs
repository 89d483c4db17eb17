//! One page of a run's trials under a filter and a sort, in SQL over the run store's columns.
//!
//! A filter names its fields with typed values (an outcome class, an integrity signal, a sort
//! column), never SQL: every value is a bound parameter and every column name comes from a
//! closed enum. Only a transcript search reads files: the trajectories of the trials the other
//! filters left, one at a time, never all of a run up front.

use std::collections::BTreeMap;

use geode_graders::TrialOutcome;
use rusqlite::types::Value as Sql;
use rusqlite::{Row, params_from_iter};
use serde::{Deserialize, Serialize};

use super::ViewError;
use super::catalog::{Catalog, Source};

/// Which outcomes a filter keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeFilter {
    /// Exactly this outcome class.
    One(TrialOutcome),
    /// The outcomes that count in scores.
    Agent,
    /// The infrastructure outcomes, left out of scores.
    Infrastructure,
    /// Trials still running (no outcome yet).
    Running,
}

impl<'de> Deserialize<'de> for OutcomeFilter {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.as_str() {
            "agent" => Ok(OutcomeFilter::Agent),
            "infrastructure" => Ok(OutcomeFilter::Infrastructure),
            "running" => Ok(OutcomeFilter::Running),
            other => TrialOutcome::parse(other)
                .map(OutcomeFilter::One)
                .ok_or_else(|| {
                    serde::de::Error::custom(format!(
                        "outcome {other:?} is not an outcome class, `agent`, `infrastructure` or \
                     `running`"
                    ))
                }),
        }
    }
}

/// The integrity signal a filter asks for (the run store's `integrity` keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, strum::IntoStaticStr, strum::EnumIter)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum IntegrityFlag {
    /// Any signal at all.
    Any,
    /// Dangerous tool calls the policy denied but the agent attempted.
    DeniedDangerousCalls,
    /// Attempts to write the reward file or alter the verifier.
    RewardTampering,
    /// Network access attempts outside the allowlist.
    NetworkAttempts,
    /// Tool calls whose side effects could not be established.
    UncertainEffects,
    /// Reads of sealed data (holdout packs, answer keys).
    SealedDataAccess,
}

/// The columns a trial page sorts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SortKey {
    /// The trial's name (the default).
    #[default]
    Trial,
    /// Task id, then attempt.
    Task,
    /// Category, then task id.
    Category,
    /// Outcome class, then task id.
    Outcome,
    /// Reward.
    Reward,
    /// Wall-clock seconds from start to finish.
    Duration,
    /// Cost in USD.
    Cost,
    /// Start time.
    Started,
}

impl SortKey {
    fn sql(self) -> &'static str {
        match self {
            SortKey::Trial => "trial_name",
            SortKey::Task => "task_id, attempt",
            SortKey::Category => "category, task_id",
            SortKey::Outcome => "outcome, task_id",
            SortKey::Reward => "reward",
            SortKey::Duration => "duration",
            SortKey::Cost => "cost_usd",
            SortKey::Started => "started",
        }
    }
}

fn default_limit() -> usize {
    100
}

/// The largest page a request may ask for.
pub const MAX_PAGE: usize = 1000;

/// A page of a run's trials: filters (all optional, all must hold), a sort and a window.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrialQuery {
    pub(crate) run: String,
    /// Part of the task's name.
    pub task: Option<String>,
    pub(crate) category: Option<String>,
    pub(crate) outcome: Option<OutcomeFilter>,
    /// The exception class (Harbor's `exception_type`).
    pub exception: Option<String>,
    pub(crate) reward_min: Option<f64>,
    pub(crate) reward_max: Option<f64>,
    pub(crate) integrity: Option<IntegrityFlag>,
    pub(crate) min_seconds: Option<f64>,
    pub(crate) max_seconds: Option<f64>,
    /// Text the trial's transcript must contain (case-insensitive): reads trajectories.
    pub q: Option<String>,
    #[serde(default)]
    pub(crate) sort: SortKey,
    #[serde(default)]
    pub(crate) desc: bool,
    #[serde(default)]
    pub(crate) offset: usize,
    #[serde(default = "default_limit")]
    pub(crate) limit: usize,
    /// The viewer's token, when a request carries it in the query (the guard checked it).
    #[serde(default, skip_serializing)]
    pub token: Option<String>,
}

/// One trial in a list.
#[derive(Debug, Serialize)]
pub struct TrialItem {
    pub(crate) trial_name: String,
    pub(crate) task_id: String,
    pub(crate) category: String,
    pub(crate) attempt: u32,
    pub(crate) status: String,
    pub(crate) outcome: Option<String>,
    pub(crate) infrastructure: bool,
    pub(crate) reward: Option<f64>,
    pub(crate) exception_class: Option<String>,
    pub(crate) duration_seconds: Option<f64>,
    pub(crate) cost_usd: f64,
    pub(crate) started: Option<String>,
    pub(crate) integrity: BTreeMap<String, u64>,
}

/// What the filter controls offer, with counts over the whole run.
#[derive(Debug, Default, Serialize)]
pub struct Facets {
    pub(crate) categories: BTreeMap<String, usize>,
    pub(crate) outcomes: BTreeMap<String, usize>,
    pub(crate) exceptions: BTreeMap<String, usize>,
}

/// One page of a run's trials under a `TrialQuery`, with the facets of the whole run.
#[derive(Debug, Serialize)]
pub struct TrialPage {
    pub(crate) run: String,
    /// Trials of the run that pass the filters.
    pub total: usize,
    /// Trials of the run.
    pub run_total: usize,
    pub(crate) offset: usize,
    pub(crate) items: Vec<TrialItem>,
    pub(crate) facets: Facets,
}

const DURATION: &str = "(julianday(finished) - julianday(started)) * 86400.0";

/// The WHERE clause and its parameters for `q`'s filters (not the transcript search).
fn where_clause(q: &TrialQuery, s: &Source, run_id: &str) -> (String, Vec<Sql>) {
    let mut clauses = vec!["run_id = ?".to_owned()];
    let mut params = vec![Sql::Text(run_id.to_owned())];
    if let Some(t) = q.task.as_deref().filter(|t| !t.is_empty()) {
        clauses.push("instr(lower(task_id), lower(?)) > 0".into());
        params.push(Sql::Text(t.to_owned()));
    }
    if let Some(c) = &q.category {
        clauses.push("category = ?".into());
        params.push(Sql::Text(c.clone()));
    }
    match q.outcome {
        None => {}
        Some(OutcomeFilter::One(o)) => {
            clauses.push("status = 'finished' AND outcome = ?".into());
            params.push(Sql::Text(o.as_str().to_owned()));
        }
        Some(OutcomeFilter::Running) => clauses.push("status <> 'finished'".into()),
        Some(f @ (OutcomeFilter::Agent | OutcomeFilter::Infrastructure)) => {
            let infra = f == OutcomeFilter::Infrastructure;
            let names: Vec<&str> = TrialOutcome::ALL
                .iter()
                .filter(|o| o.is_infrastructure() == infra)
                .map(|o| o.as_str())
                .collect();
            clauses.push(format!(
                "status = 'finished' AND outcome IN ({})",
                vec!["?"; names.len()].join(", ")
            ));
            params.extend(names.into_iter().map(|n| Sql::Text(n.to_owned())));
        }
    }
    if let Some(e) = &q.exception {
        clauses.push("exception_class = ?".into());
        params.push(Sql::Text(e.clone()));
    }
    if let Some(v) = q.reward_min {
        clauses.push("reward >= ?".into());
        params.push(Sql::Real(v));
    }
    if let Some(v) = q.reward_max {
        clauses.push("reward <= ?".into());
        params.push(Sql::Real(v));
    }
    if let Some(v) = q.min_seconds {
        clauses.push(format!("{DURATION} >= ?"));
        params.push(Sql::Real(v));
    }
    if let Some(v) = q.max_seconds {
        clauses.push(format!("{DURATION} <= ?"));
        params.push(Sql::Real(v));
    }
    if let Some(flag) = q.integrity {
        let column = s.column("integrity");
        let keys: Vec<&'static str> = match flag {
            IntegrityFlag::Any => {
                use strum::IntoEnumIterator;
                IntegrityFlag::iter()
                    .filter(|f| *f != IntegrityFlag::Any)
                    .map(<&'static str>::from)
                    .collect()
            }
            one => vec![one.into()],
        };
        let sum: Vec<String> = keys
            .iter()
            .map(|k| format!("coalesce(json_extract(CASE WHEN json_valid({column}) THEN {column} END, '$.{k}'), 0)"))
            .collect();
        clauses.push(format!("({}) > 0", sum.join(" + ")));
    }
    (clauses.join(" AND "), params)
}

fn item(r: &Row<'_>) -> rusqlite::Result<TrialItem> {
    let outcome: Option<String> = r.get(5)?;
    let integrity: String = r.get::<_, Option<String>>(11)?.unwrap_or_default();
    let integrity: BTreeMap<String, u64> =
        serde_json::from_str::<BTreeMap<String, serde_json::Value>>(&integrity)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(k, v)| v.as_u64().filter(|n| *n > 0).map(|n| (k, n)))
            .collect();
    Ok(TrialItem {
        infrastructure: outcome
            .as_deref()
            .and_then(TrialOutcome::parse)
            .is_some_and(TrialOutcome::is_infrastructure),
        trial_name: r.get(0)?,
        task_id: r.get(1)?,
        category: r.get(2)?,
        attempt: r.get(3)?,
        status: r.get(4)?,
        outcome,
        reward: r.get(6)?,
        exception_class: r.get(7)?,
        duration_seconds: r.get(8)?,
        cost_usd: r.get::<_, Option<f64>>(9)?.unwrap_or(0.0),
        started: r.get(10)?,
        integrity,
    })
}

/// One page of `q.run`'s trials.
pub fn trials(c: &Catalog, q: &TrialQuery) -> Result<TrialPage, ViewError> {
    if q.limit == 0 || q.limit > MAX_PAGE {
        return Err(ViewError::BadRequest {
            field: "limit",
            message: format!("{} is not in 1..={MAX_PAGE}", q.limit),
        });
    }
    let run = c.run(&q.run)?;
    let s = c.source_of(run);
    let err = s.sqlite_err();
    let (filter, params) = where_clause(q, s, &run.run_id);
    let order = format!(
        "{} {}, trial_name",
        q.sort.sql(),
        if q.desc { "DESC" } else { "ASC" }
    );
    let columns = format!(
        "trial_name, task_id, category, attempt, status, outcome, reward, exception_class,
         {DURATION} AS duration, cost_usd, started, {}",
        s.column("integrity")
    );
    let search = q.q.as_deref().map(str::trim).filter(|t| !t.is_empty());
    let (total, items) = match search {
        None => {
            let total: i64 = s
                .conn
                .prepare_cached(&format!("SELECT count(*) FROM trials WHERE {filter}"))
                .map_err(&err)?
                .query_row(params_from_iter(params.iter()), |r| r.get(0))
                .map_err(&err)?;
            let mut paged = params.clone();
            paged.push(Sql::Integer(q.limit as i64));
            paged.push(Sql::Integer(q.offset as i64));
            let items = s
                .conn
                .prepare_cached(&format!(
                    "SELECT {columns} FROM trials WHERE {filter} ORDER BY {order} LIMIT ? OFFSET ?"
                ))
                .map_err(&err)?
                .query_map(params_from_iter(paged.iter()), item)
                .map_err(&err)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(&err)?;
            (total as usize, items)
        }
        Some(text) => {
            let all = s
                .conn
                .prepare_cached(&format!(
                    "SELECT {columns} FROM trials WHERE {filter} ORDER BY {order}"
                ))
                .map_err(&err)?
                .query_map(params_from_iter(params.iter()), item)
                .map_err(&err)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(&err)?;
            let dir = c.run_dir(run);
            let needle = text.to_lowercase();
            let hits: Vec<TrialItem> = all
                .into_iter()
                .filter(|t| super::trial::transcript_contains(&dir, &t.trial_name, &needle))
                .collect();
            let total = hits.len();
            (
                total,
                hits.into_iter().skip(q.offset).take(q.limit).collect(),
            )
        }
    };
    let run_total: i64 = s
        .conn
        .prepare_cached("SELECT count(*) FROM trials WHERE run_id = ?1")
        .map_err(&err)?
        .query_row([&run.run_id], |r| r.get(0))
        .map_err(&err)?;
    Ok(TrialPage {
        run: run.key.clone(),
        total,
        run_total: run_total as usize,
        offset: q.offset,
        items,
        facets: facets(s, &run.run_id)?,
    })
}

fn facets(s: &Source, run_id: &str) -> Result<Facets, ViewError> {
    let err = s.sqlite_err();
    let mut f = Facets::default();
    let mut st = s
        .conn
        .prepare_cached(
            "SELECT category, CASE WHEN status = 'finished' THEN outcome ELSE 'running' END,
                    exception_class, count(*)
             FROM trials WHERE run_id = ?1 GROUP BY 1, 2, 3",
        )
        .map_err(&err)?;
    let mut rows = st.query([run_id]).map_err(&err)?;
    while let Some(r) = rows.next().map_err(&err)? {
        let n = r.get::<_, i64>(3).map_err(&err)? as usize;
        let category: String = r.get(0).map_err(&err)?;
        *f.categories.entry(category).or_default() += n;
        if let Some(o) = r.get::<_, Option<String>>(1).map_err(&err)? {
            *f.outcomes.entry(o).or_default() += n;
        }
        if let Some(e) = r.get::<_, Option<String>>(2).map_err(&err)? {
            *f.exceptions.entry(e).or_default() += n;
        }
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use geode_graders::run_store::synth::{SynthSpec, synthetic_store};

    /// A synthetic store of one run (40 tasks x 5 attempts) with integrity signals on two
    /// trials, and its catalog.
    fn catalog() -> (tempfile::TempDir, Catalog, String) {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("geode.db");
        let spec = SynthSpec {
            runs: 1,
            tasks: 40,
            attempts: 5,
            seed: 3,
        };
        let run = synthetic_store(&store, spec).unwrap().pop().unwrap();
        let conn = rusqlite::Connection::open(&store).unwrap();
        conn.execute(
            "UPDATE trials SET integrity = '{\"reward_tampering\": 2, \"network_attempts\": 0}'
             WHERE trial_name IN ('synth__task-00003__1', 'synth__task-00007__4')",
            [],
        )
        .unwrap();
        drop(conn);
        let c = Catalog::open(dir.path()).unwrap();
        (dir, c, run)
    }

    fn query(run: &str) -> TrialQuery {
        TrialQuery {
            run: run.to_owned(),
            limit: 100,
            ..TrialQuery::default()
        }
    }

    fn count(c: &Catalog, sql: &str) -> usize {
        let s = c.source_of(&c.runs()[0]);
        s.conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap() as usize
    }

    #[test]
    fn outcome_classes_filter_as_the_store_counts_them() {
        let (_d, c, run) = catalog();
        let mut q = query(&run);
        q.outcome = Some(OutcomeFilter::One(TrialOutcome::Failed));
        let page = trials(&c, &q).unwrap();
        assert_eq!(
            page.total,
            count(&c, "SELECT count(*) FROM trials WHERE outcome = 'failed'")
        );
        assert!(
            page.items
                .iter()
                .all(|t| t.outcome.as_deref() == Some("failed"))
        );
        q.outcome = Some(OutcomeFilter::Infrastructure);
        let infra = trials(&c, &q).unwrap();
        assert_eq!(
            infra.total,
            count(
                &c,
                "SELECT count(*) FROM trials WHERE outcome = 'sandbox_lost'"
            )
        );
        assert!(infra.total > 0 && infra.items.iter().all(|t| t.infrastructure));
        q.outcome = Some(OutcomeFilter::Agent);
        assert_eq!(trials(&c, &q).unwrap().total + infra.total, page.run_total);
    }

    #[test]
    fn integrity_sort_and_pages() {
        let (_d, c, run) = catalog();
        let mut q = query(&run);
        q.integrity = Some(IntegrityFlag::Any);
        let flagged = trials(&c, &q).unwrap();
        let names: Vec<&str> = flagged
            .items
            .iter()
            .map(|t| t.trial_name.as_str())
            .collect();
        assert_eq!(names, ["synth__task-00003__1", "synth__task-00007__4"]);
        assert_eq!(flagged.items[0].integrity.get("reward_tampering"), Some(&2));
        q.integrity = Some(IntegrityFlag::NetworkAttempts);
        assert_eq!(trials(&c, &q).unwrap().total, 0);

        let mut q = query(&run);
        q.sort = SortKey::Duration;
        q.desc = true;
        q.limit = 7;
        q.offset = 7;
        let page = trials(&c, &q).unwrap();
        assert_eq!(page.items.len(), 7);
        let d: Vec<f64> = page
            .items
            .iter()
            .map(|t| t.duration_seconds.unwrap())
            .collect();
        assert!(d.windows(2).all(|w| w[0] >= w[1]), "{d:?}");
        let longest: f64 = {
            let s = c.source_of(&c.runs()[0]);
            s.conn
                .query_row(
                    &format!("SELECT {DURATION} AS d FROM trials ORDER BY d DESC LIMIT 1 OFFSET 7"),
                    [],
                    |r| r.get(0),
                )
                .unwrap()
        };
        assert!((d[0] - longest).abs() < 1e-6);
        q.limit = MAX_PAGE + 1;
        assert!(matches!(
            trials(&c, &q),
            Err(ViewError::BadRequest { field: "limit", .. })
        ));
    }

    #[test]
    fn text_filters_are_parameters_not_sql() {
        let (_d, c, run) = catalog();
        let mut q = query(&run);
        q.task = Some("task-0001".into());
        let page = trials(&c, &q).unwrap();
        assert_eq!(page.total, 50);
        q.task = Some("' OR 1=1 --".into());
        assert_eq!(trials(&c, &q).unwrap().total, 0);
        q.task = None;
        q.category = Some("web".into());
        q.reward_min = Some(1.0);
        let page = trials(&c, &q).unwrap();
        assert!(
            page.items
                .iter()
                .all(|t| t.category == "web" && t.reward == Some(1.0))
        );
        assert_eq!(
            page.total,
            count(
                &c,
                "SELECT count(*) FROM trials WHERE category = 'web' AND reward >= 1.0"
            )
        );
    }

    #[test]
    fn a_run_s_summary_is_the_harness_summary() {
        let (_d, c, _run) = catalog();
        let runs = crate::view::runs::runs(&c).unwrap();
        assert_eq!(runs.len(), 1);
        let r = &runs[0];
        assert_eq!(r.finished_trials, 200);
        assert_eq!(r.summary.tasks, 40);
        assert_eq!(
            r.summary.outcomes.values().sum::<usize>(),
            r.finished_trials
        );
        assert!(r.summary.ci95.is_some() && r.duration_seconds.is_some());
    }
}
