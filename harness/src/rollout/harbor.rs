//! Harbor's view of a jobs folder. Harbor's tooling reads a job through its pydantic models
//! (harbor 0.25: `JobConfig`, `JobLock`, `JobResult`, `TrialResult`); this module adds the keys
//! those models require to GEODE's own `config.json`, `lock.json` and `result.json`, beside
//! GEODE's keys, which stay where they were (Harbor ignores keys it does not know, and GEODE
//! reads its own back). Where both name the same thing (`timeout_multiplier`, `trial_name`,
//! `task_name`) the value is the same.
//!
//! Identities Harbor wants as UUIDs are derived from GEODE's names, so a file rewritten on
//! resume keeps its id.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::run_spec::{RunConfig, RunLock};
use super::trial::phase::TrialPhase;
use crate::env::kind::BackendKind;
use crate::pack::{Task, TaskPack, VerifierMode};
use crate::store::TrialRow;
use crate::summary::RunSummary;
use geode_graders::TrialOutcome;

pub use crate::agents::HarborAgent;

/// A name-based UUID (RFC 9562 version 8: the first 16 bytes of SHA-256 over a kind and a
/// name), the same for the same name on every machine.
pub fn uuid_for(kind: &str, name: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"geode.uuid.v1\0");
    h.update(kind.as_bytes());
    h.update(b"\0");
    h.update(name.as_bytes());
    let d = h.finalize();
    let mut b = [0u8; 16];
    b.copy_from_slice(&d[..16]);
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    let x = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &x[..8],
        &x[8..12],
        &x[12..16],
        &x[16..20],
        &x[20..]
    )
}

pub(crate) fn job_uuid(run_id: &str) -> String {
    uuid_for("job", run_id)
}

/// `geode` keys first, then Harbor's keys that `geode` does not already hold.
fn beside(geode: Value, harbor: Value) -> Value {
    let (Value::Object(mut out), Value::Object(extra)) = (geode, harbor) else {
        return Value::Null;
    };
    for (k, v) in extra {
        out.entry(k).or_insert(v);
    }
    Value::Object(out)
}

/// The pack's name as Harbor's `source` (its dataset): the pack folder's name.
fn source(pack: &Path) -> String {
    pack.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| pack.display().to_string())
}

fn agent(who: HarborAgent<'_>, model_route: &str) -> Value {
    let mut value = json!({"name": who.name, "model_name": model_route});
    if let Some(version) = who.version {
        value["kwargs"] = json!({"version": version});
    }
    value
}

/// Harbor's `RetryConfig`. GEODE decides by outcome, not exception class (it retries a lost
/// sandbox, an unavailable provider or a crashed verifier, never the agent), so only the bound
/// is said; Harbor's default exclusions (timeouts, a missing reward) are GEODE's too.
fn retry(config: &RunConfig) -> Value {
    json!({"max_retries": config.max_infra_retries})
}

/// Harbor's `EnvironmentConfig.type` names only engines it drives; GEODE's sandbox is none of
/// them, so only the docker backend is named.
fn environment(backend: BackendKind) -> Value {
    match backend {
        BackendKind::Docker => json!({"type": "docker"}),
        BackendKind::Sandbox | BackendKind::Host | BackendKind::Kubernetes => {
            json!({"kwargs": {"geode_backend": backend.as_str()}})
        }
    }
}

/// `config.json`: the run's configuration with Harbor's `JobConfig` keys beside it.
pub fn job_config(config: &RunConfig, run_id: &str, jobs_dir: &Path) -> Value {
    let geode = serde_json::to_value(config).unwrap_or_default();
    let mut dataset = Map::new();
    dataset.insert("path".into(), json!(config.pack));
    if let Some(glob) = &config.tasks_glob {
        dataset.insert("task_names".into(), json!([glob]));
    }
    beside(
        geode,
        json!({
            "job_name": run_id,
            "jobs_dir": jobs_dir,
            "n_attempts": config.attempts,
            "n_concurrent_trials": config.concurrency.max(1),
            "timeout_multiplier": config.timeout_multiplier,
            "retry": retry(config),
            "environment": environment(config.backend),
            "agents": [agent(HarborAgent { name: config.agent.name(), version: config.agent.version() },
                             &config.model.to_string())],
            "datasets": [dataset],
        }),
    )
}

/// `lock.json`: GEODE's lock with Harbor's `JobLock` keys beside it, one `TrialLock` per trial.
pub fn job_lock(lock: &RunLock, config: &RunConfig, pack: &TaskPack, created: &str) -> Value {
    let geode = serde_json::to_value(lock).unwrap_or_default();
    let mut trials = Vec::new();
    for task in &pack.tasks {
        for _ in 0..config.attempts {
            trials.push(trial_lock(
                task,
                HarborAgent {
                    name: config.agent.name(),
                    version: config.agent.version(),
                },
                &config.model.to_string(),
                config.timeout_multiplier,
                config.backend,
            ));
        }
    }
    beside(
        geode,
        json!({
            "schema_version": 3,
            "created_at": created,
            "harbor": {"version": null},
            "n_concurrent_trials": config.concurrency.max(1),
            "retry": retry(config),
            "trials": trials,
        }),
    )
}

/// Harbor's `TrialLock` (schema 2): what one trial resolved to. The job's `lock.json` lists one
/// per trial, and each trial folder holds its own, which Harbor 0.26's viewer requires.
pub fn trial_lock(
    task: &Task,
    who: HarborAgent<'_>,
    model_route: &str,
    timeout_multiplier: f64,
    backend: BackendKind,
) -> Value {
    let pack_dir = task.dir.parent().unwrap_or(&task.dir);
    json!({
        "schema_version": 2,
        "task": {
            "name": task.id,
            "type": "local",
            "digest": format!("sha256:{}", task.hash.0),
            "source": source(pack_dir),
            "path": task.dir,
        },
        "timeout_multiplier": timeout_multiplier,
        "agent": agent(who, model_route),
        "environment": environment(backend),
        "verifier": {"environment_mode": verifier_mode(task)},
    })
}

/// Whether the task's verifier runs in the agent's sandbox or its own (Harbor's
/// `VerifierEnvironmentMode`).
fn verifier_mode(task: &Task) -> &'static str {
    match task.config.verifier_mode() {
        VerifierMode::Separate => "separate",
        VerifierMode::Shared => "shared",
    }
}

/// Harbor's exception class for the outcomes it names, in both directions: GEODE writes these
/// into `exception_info` (so `harbor jobs resume -f CLASS` and `geode resume --rerun CLASS`
/// name the same trials) and `geode view` reads a Harbor trial's class back into an outcome.
const EXCEPTION_CLASSES: [(TrialOutcome, &str); 8] = [
    (TrialOutcome::RewardMissing, "RewardFileNotFoundError"),
    (TrialOutcome::RewardMalformed, "VerifierOutputParseError"),
    (TrialOutcome::VerifierTimeout, "VerifierTimeoutError"),
    (TrialOutcome::AgentTimeout, "AgentTimeoutError"),
    (TrialOutcome::AgentError, "NonZeroAgentExitCodeError"),
    (
        TrialOutcome::EnvironmentSetupFailed,
        "EnvironmentStartTimeoutError",
    ),
    (TrialOutcome::Cancelled, "CancelledError"),
    // Read only: Harbor's name for an empty reward file, which GEODE counts as missing.
    (TrialOutcome::RewardMissing, "RewardFileEmptyError"),
];

/// The class Harbor gives `outcome`, when it has one.
pub fn exception_class(outcome: TrialOutcome) -> Option<&'static str> {
    EXCEPTION_CLASSES
        .iter()
        .find(|(o, _)| *o == outcome)
        .map(|(_, class)| *class)
}

/// The outcome a Harbor exception class stands for (`None` for a class Harbor's trial code does
/// not name here, which a reader must decide about itself).
pub fn outcome_of_exception(class: &str) -> Option<TrialOutcome> {
    EXCEPTION_CLASSES
        .iter()
        .find(|(_, c)| *c == class)
        .map(|(o, _)| *o)
}

/// Harbor's `ExceptionInfo` for a GEODE failure class.
pub fn exception_info(class: &str, message: &str, at: &str) -> Value {
    json!({
        "exception_type": class,
        "exception_message": message,
        // GEODE's failures are outcomes, not Python exceptions: there is no stack.
        "exception_traceback": "",
        "occurred_at": at,
    })
}

fn timing(phase_times: &BTreeMap<TrialPhase, [String; 2]>, phase: TrialPhase) -> Value {
    match phase_times.get(&phase) {
        Some([started, finished]) => json!({"started_at": started, "finished_at": finished}),
        None => Value::Null,
    }
}

/// A trial's `result.json`: GEODE's record (`geode`) with Harbor's `TrialResult` keys beside it.
/// `phase_times` maps a phase to its `[started, finished]` timestamps; `steps` are a
/// multi-step trial's `StepResult`s (empty otherwise).
pub fn trial_result(
    geode: Value,
    who: HarborAgent<'_>,
    row: &TrialRow,
    task: &Task,
    trial_dir: &Path,
    phase_times: &BTreeMap<TrialPhase, [String; 2]>,
    steps: &[Value],
) -> Value {
    let trial_dir = std::path::absolute(trial_dir).unwrap_or_else(|_| trial_dir.to_path_buf());
    let trials_dir = trial_dir.parent().unwrap_or(&trial_dir);
    let pack_dir = task.dir.parent().unwrap_or(&task.dir);
    let rewards = json!(row.rewards);
    let rewards = match rewards {
        Value::Object(m) if !m.is_empty() => Value::Object(m),
        _ => Value::Null,
    };
    let exception = row.exception_class.as_ref().map(|class| {
        exception_info(
            class,
            row.exception_message.as_deref().unwrap_or_default(),
            &row.finished,
        )
    });
    let u = &row.usage;
    beside(
        geode,
        json!({
            "id": uuid_for("trial", &format!("{}/{}", row.run_id, row.trial_name)),
            "trial_uri": format!("file://{}", trial_dir.display()),
            "task_id": {"path": task.dir},
            "source": source(pack_dir),
            "config": {
                "task": {"path": task.dir, "source": source(pack_dir)},
                "trial_name": row.trial_name,
                "trials_dir": trials_dir,
                "agent": agent(who, &row.model_route),
                "job_id": job_uuid(&row.run_id),
            },
            "agent_info": {"name": who.name, "version": who.version(),
                           "model_info": {"name": row.model_route}},
            "agent_result": {"n_input_tokens": u.input_tokens, "n_cache_tokens": u.cached_tokens,
                             "n_output_tokens": u.output_tokens, "cost_usd": u.cost_usd},
            "verifier_result": {"rewards": rewards},
            // Harbor resolves the mode per step and records none for a multi-step trial.
            "verifier_environment_mode": steps.is_empty().then(|| verifier_mode(task)),
            "step_results": (!steps.is_empty()).then_some(steps),
            "exception_info": exception,
            "started_at": row.started,
            "finished_at": row.finished,
            "environment_setup": timing(phase_times, TrialPhase::EnvironmentSetup),
            "agent_execution": timing(phase_times, TrialPhase::AgentExecution),
            "verifier": timing(phase_times, TrialPhase::Verifier),
        }),
    )
}

/// The job's `result.json`: GEODE's summary with Harbor's `JobResult` keys beside it.
pub struct JobEnd<'a> {
    /// The run, which names the job folder.
    pub run_id: &'a str,
    /// The pack the run was given (its `config.json` path).
    pub pack: &'a Path,
    pub(crate) model_route: &'a str,
    /// The agent under test.
    pub agent: HarborAgent<'a>,
    /// When the run was created (RFC 3339); its end time for a run the store does not know.
    pub started: &'a str,
    /// When the run ended (RFC 3339, UTC).
    pub finished: &'a str,
    /// Trials the run was asked for: tasks times attempts, finished or not.
    pub n_total_trials: usize,
    /// The run's trials as the store holds them at the end.
    pub rows: &'a [TrialRow],
    /// GEODE's summary of those trials.
    pub summary: &'a RunSummary,
    /// Whether the run was cancelled before all its trials ran.
    pub cancelled: bool,
}

pub(crate) fn job_result(end: &JobEnd) -> Value {
    let mut reward_stats: Map<String, Value> = Map::new();
    let mut exception_stats: Map<String, Value> = Map::new();
    let mut rewarded = 0usize;
    let mut errored = 0usize;
    for row in end.rows {
        if !row.rewards.is_empty() {
            rewarded += 1;
            for (key, value) in &row.rewards {
                let by_value = reward_stats
                    .entry(key.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(by_value) = by_value {
                    // Keyed by the value as JSON writes it (`1.0`), as Harbor's stats are.
                    let names = by_value
                        .entry(json!(value).to_string())
                        .or_insert_with(|| json!([]));
                    if let Value::Array(names) = names {
                        names.push(json!(row.trial_name));
                    }
                }
            }
        }
        if let Some(class) = &row.exception_class {
            errored += 1;
            let names = exception_stats
                .entry(class.clone())
                .or_insert_with(|| json!([]));
            if let Value::Array(names) = names {
                names.push(json!(row.trial_name));
            }
        }
    }
    let pass_at_k: Map<String, Value> = end
        .summary
        .pass_at_k
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let evals_key = format!(
        "{}__{}__{}",
        end.agent.name,
        end.model_route,
        source(end.pack)
    );
    let completed = end.rows.len();
    let geode = json!({"schema": "geode.run-result.v1", "run_id": end.run_id,
                       "cancelled": end.cancelled, "summary": end.summary});
    beside(
        geode,
        json!({
            "id": job_uuid(end.run_id),
            "started_at": end.started,
            "updated_at": end.finished,
            "finished_at": end.finished,
            "n_total_trials": end.n_total_trials,
            "stats": {
                "n_completed_trials": completed,
                "n_errored_trials": errored,
                "n_running_trials": 0,
                "n_pending_trials": end.n_total_trials.saturating_sub(completed),
                "n_cancelled_trials": 0,
                "n_retries": end.rows.iter().map(|r| u64::from(r.infra_retries)).sum::<u64>(),
                "evals": {evals_key: {
                    "n_trials": rewarded,
                    "n_errors": errored,
                    "metrics": [{"mean": end.summary.accuracy_infra_as_zero}],
                    "pass_at_k": pass_at_k,
                    "reward_stats": reward_stats,
                    "exception_stats": exception_stats,
                }},
                "n_input_tokens": end.summary.input_tokens,
                "n_cache_tokens": end.rows.iter().map(|r| r.usage.cached_tokens).sum::<u64>(),
                "n_output_tokens": end.summary.output_tokens,
                "cost_usd": end.summary.cost_usd,
            },
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_well_formed_stable_and_distinct() {
        let a = uuid_for("job", "2026-12-02__00-48-24");
        assert_eq!(a, uuid_for("job", "2026-12-02__00-48-24"));
        assert_ne!(a, uuid_for("trial", "2026-12-02__00-48-24"));
        assert_eq!(a.len(), 36);
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('8'), "{a}: version 8");
        assert!(
            matches!(&parts[3][..1], "8" | "9" | "a" | "b"),
            "{a}: variant"
        );
    }

    #[test]
    fn exception_classes_read_back_as_the_outcome_they_were_written_for() {
        for outcome in TrialOutcome::ALL {
            if let Some(class) = exception_class(outcome) {
                assert_eq!(outcome_of_exception(class), Some(outcome), "{class}");
            }
        }
        assert_eq!(
            outcome_of_exception("RewardFileEmptyError"),
            Some(TrialOutcome::RewardMissing)
        );
        assert_eq!(outcome_of_exception("SomethingElse"), None);
    }

    #[test]
    fn harbor_keys_never_replace_geode_keys() {
        let merged = beside(
            json!({"timeout_multiplier": 2.0, "pack": "p"}),
            json!({"timeout_multiplier": 1.0, "n_attempts": 3}),
        );
        assert_eq!(merged["timeout_multiplier"], 2.0);
        assert_eq!(merged["n_attempts"], 3);
        assert_eq!(merged["pack"], "p");
    }
}
