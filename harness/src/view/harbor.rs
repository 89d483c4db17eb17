//! A Harbor job folder as run-store rows, so the viewer's one set of queries reads folders
//! Harbor wrote (`harbor run -o DIR`) as it reads GEODE's store. Harbor's `result.json` keys
//! are read as its models define them (`TrialResult`: `task_name`, `verifier_result.rewards`,
//! `exception_info`, `agent_result`, the phases' `TimingInfo`); GEODE's own keys, when a GEODE
//! run folder lost its store, are preferred where they say more (`outcome`, `attempt`).
//!
//! Harbor has no outcome classes: an exception class it names maps back through
//! `rollout::harbor::outcome_of_exception`; any other exception is the agent's error (counted,
//! never excluded as infrastructure on a guess); no exception and a reward that passes is
//! `passed`, else `failed`; no reward at all is `reward_missing`.

use std::collections::BTreeMap;

use geode_graders::TrialOutcome;
use geode_graders::summary::passes;
use rusqlite::{Connection, params};
use serde_json::{Map, Value};

use crate::rollout::harbor::outcome_of_exception;

/// One trial folder's `result.json`.
pub struct HarborTrial {
    pub(crate) folder: String,
    pub(crate) result: Value,
}

/// One job folder: its `config.json`, `result.json` (either may be missing while it runs) and
/// its trials.
pub struct HarborJob {
    pub(crate) name: String,
    pub(crate) config: Option<Value>,
    pub(crate) result: Option<Value>,
    pub(crate) trials: Vec<HarborTrial>,
}

fn text<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn number(v: &Value, path: &[&str]) -> Option<f64> {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_f64)
}

/// Seconds between two timestamps as GEODE (RFC 3339) and Harbor (ISO 8601, with or without
/// an offset) write them.
pub fn seconds_between(start: &str, end: &str) -> Option<f64> {
    let parse = |s: &str| {
        chrono::DateTime::parse_from_rfc3339(s)
            .map(|d| d.naive_utc())
            .or_else(|_| chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f"))
            .ok()
    };
    let (a, b) = (parse(start)?, parse(end)?);
    Some((b - a).num_milliseconds() as f64 / 1000.0)
}

/// The reward a trial's rewards stand for: `reward` when present, else the only key's value.
fn headline(rewards: &Map<String, Value>) -> Option<f64> {
    rewards.get("reward").and_then(Value::as_f64).or_else(|| {
        (rewards.len() == 1)
            .then(|| rewards.values().next().and_then(Value::as_f64))
            .flatten()
    })
}

/// The outcome of one Harbor trial (see the module's rules).
pub fn outcome(result: &Value) -> TrialOutcome {
    if let Some(o) = text(result, &["outcome"]).and_then(TrialOutcome::parse) {
        return o;
    }
    if let Some(class) = text(result, &["exception_info", "exception_type"]) {
        return outcome_of_exception(class).unwrap_or(TrialOutcome::AgentError);
    }
    match result["verifier_result"]["rewards"]
        .as_object()
        .and_then(headline)
    {
        Some(r) if passes(r) => TrialOutcome::Passed,
        Some(_) => TrialOutcome::Failed,
        None => TrialOutcome::RewardMissing,
    }
}

/// Phase seconds from Harbor's `TimingInfo` keys (GEODE's `phase_seconds` when present).
fn phases(result: &Value) -> Value {
    if let Some(p) = result.get("phase_seconds").filter(|p| p.is_object()) {
        return p.clone();
    }
    let mut out = Map::new();
    for phase in [
        "environment_setup",
        "agent_setup",
        "agent_execution",
        "verifier",
    ] {
        if let (Some(a), Some(b)) = (
            text(result, &[phase, "started_at"]),
            text(result, &[phase, "finished_at"]),
        ) && let Some(s) = seconds_between(a, b)
        {
            out.insert(phase.into(), Value::from(s));
        }
    }
    Value::Object(out)
}

/// Fills `conn` (the run store's tables, empty) with the jobs' runs and trials.
pub fn index(conn: &Connection, jobs: &[HarborJob]) -> rusqlite::Result<()> {
    let mut run =
        conn.prepare("INSERT INTO runs VALUES (?1, ?2, ?3, '', ?4, '', 0, ?5, '', ?6, ?7)")?;
    let mut trial = conn.prepare(
        "INSERT OR REPLACE INTO trials VALUES (?1, ?2, ?3, ?4, '', '', ?5, 0, ?6, ?7, ?8, ?9,
            ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, '', 0, 0, '{}')",
    )?;
    for job in jobs {
        let empty = Value::Null;
        let config = job.config.as_ref().unwrap_or(&empty);
        let result = job.result.as_ref().unwrap_or(&empty);
        let first_trial = job.trials.first().map(|t| &t.result).unwrap_or(&empty);
        let model = config["agents"][0]["model_name"]
            .as_str()
            .or_else(|| config["agents"][0]["name"].as_str())
            .or_else(|| text(first_trial, &["agent_info", "model_info", "name"]))
            .or_else(|| text(first_trial, &["agent_info", "name"]))
            .unwrap_or("");
        let pack = config["datasets"][0]["path"]
            .as_str()
            .or_else(|| config["tasks"][0]["path"].as_str())
            .unwrap_or("");
        let created = text(result, &["started_at"])
            .or_else(|| {
                job.trials
                    .iter()
                    .filter_map(|t| text(&t.result, &["started_at"]))
                    .min()
            })
            .unwrap_or("");
        let finished = text(result, &["finished_at"]).is_some();
        run.execute(params![
            job.name,
            created,
            pack,
            model,
            config["n_attempts"].as_u64().unwrap_or(1),
            serde_json::to_string(config).unwrap_or_default(),
            if finished { "finished" } else { "running" },
        ])?;
        // Attempts: a task's trials in the order they started (Harbor names trials with a
        // random suffix, not a number).
        let mut by_task: BTreeMap<String, Vec<&HarborTrial>> = BTreeMap::new();
        for t in &job.trials {
            let task = text(&t.result, &["task_name"]).unwrap_or(&t.folder);
            by_task.entry(task.to_owned()).or_default().push(t);
        }
        for (task, mut trials) in by_task {
            trials.sort_by(|a, b| {
                let key = |t: &HarborTrial| {
                    (
                        text(&t.result, &["started_at"]).unwrap_or("").to_owned(),
                        t.folder.clone(),
                    )
                };
                key(a).cmp(&key(b))
            });
            for (i, t) in trials.into_iter().enumerate() {
                let r = &t.result;
                let rewards = r["verifier_result"]["rewards"].as_object();
                let done = text(r, &["finished_at"]).is_some();
                trial.execute(params![
                    job.name,
                    t.folder,
                    task,
                    text(r, &["task_checksum"]).unwrap_or(""),
                    r["attempt"].as_u64().unwrap_or(i as u64),
                    if done { "finished" } else { "running" },
                    done.then(|| outcome(r).as_str()),
                    rewards.and_then(headline),
                    rewards
                        .map(|m| Value::Object(m.clone()).to_string())
                        .unwrap_or_else(|| "{}".into()),
                    text(r, &["exception_info", "exception_type"]),
                    text(r, &["exception_info", "exception_message"]),
                    text(r, &["started_at"]),
                    text(r, &["finished_at"]),
                    phases(r).to_string(),
                    number(r, &["agent_result", "n_input_tokens"]).unwrap_or(0.0) as i64,
                    number(r, &["agent_result", "n_cache_tokens"]).unwrap_or(0.0) as i64,
                    number(r, &["agent_result", "n_output_tokens"]).unwrap_or(0.0) as i64,
                    number(r, &["agent_result", "cost_usd"]).unwrap_or(0.0),
                    text(r, &["agent_info", "model_info", "name"]).unwrap_or(model),
                ])?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn harbor_trials_map_to_outcomes_without_guessing_infrastructure() {
        let ok = json!({"verifier_result": {"rewards": {"reward": 1.0}}});
        assert_eq!(outcome(&ok), TrialOutcome::Passed);
        let zero = json!({"verifier_result": {"rewards": {"reward": 0.0}}});
        assert_eq!(outcome(&zero), TrialOutcome::Failed);
        let none = json!({"verifier_result": {"rewards": null}});
        assert_eq!(outcome(&none), TrialOutcome::RewardMissing);
        let timeout = json!({"exception_info": {"exception_type": "AgentTimeoutError"},
                             "verifier_result": {"rewards": {"reward": 1.0}}});
        assert_eq!(outcome(&timeout), TrialOutcome::AgentTimeout);
        let odd = json!({"exception_info": {"exception_type": "KeyError"}});
        assert_eq!(outcome(&odd), TrialOutcome::AgentError);
        let geode = json!({"outcome": "sandbox_lost"});
        assert_eq!(outcome(&geode), TrialOutcome::SandboxLost);
    }

    #[test]
    fn a_job_folder_becomes_a_run_with_attempts_in_start_order() {
        let conn = Connection::open_in_memory().unwrap();
        geode_graders::run_store::create_tables(&conn).unwrap();
        let trial = |folder: &str, start: &str, reward: f64| HarborTrial {
            folder: folder.into(),
            result: json!({
                "task_name": "hello", "started_at": start,
                "finished_at": "2026-01-01T00:01:00.000000",
                "verifier_result": {"rewards": {"reward": reward}},
                "agent_result": {"n_input_tokens": 10, "cost_usd": 0.5},
                "agent_execution": {"started_at": "2026-01-01T00:00:10", "finished_at": "2026-01-01T00:00:40.5"},
            }),
        };
        let job = HarborJob {
            name: "job".into(),
            config: Some(json!({"agents": [{"name": "oracle"}], "n_attempts": 2})),
            result: None,
            trials: vec![
                trial("hello__b", "2026-01-01T00:00:05", 0.0),
                trial("hello__a", "2026-01-01T00:00:09", 1.0),
            ],
        };
        index(&conn, &[job]).unwrap();
        let (model, status): (String, String) = conn
            .query_row("SELECT model_route, status FROM runs", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!((model.as_str(), status.as_str()), ("oracle", "running"));
        let rows: Vec<(String, i64, String, String)> = conn
            .prepare("SELECT trial_name, attempt, outcome, phases FROM trials ORDER BY attempt")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(rows[0].0, "hello__b");
        assert_eq!((rows[1].1, rows[1].2.as_str()), (1, "passed"));
        assert_eq!(rows[0].3, r#"{"agent_execution":30.5}"#);
    }
}
