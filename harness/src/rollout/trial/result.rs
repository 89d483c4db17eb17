//! The trial's results: its store row and its `result.json` (GEODE's record, with Harbor's
//! `TrialResult` keys beside it).

use serde_json::json;

use super::plan::TrialPlan;
use super::record::{Ending, Record};
use crate::store::TrialRow;

/// The store's row for the trial: what it ran (task, attempt, seed, route, scaffold) and how
/// it ended.
pub(super) fn trial_row(
    plan: &TrialPlan,
    ending: Ending,
    rec: &Record,
    started: String,
    finished: String,
) -> TrialRow {
    TrialRow {
        run_id: plan.run_id.clone(),
        trial_name: plan.trial_name.clone(),
        task_id: plan.task.id.clone(),
        task_hash: plan.task.hash.0.clone(),
        category: plan.task.config.category().to_string(),
        difficulty: plan.task.config.difficulty().to_string(),
        attempt: plan.attempt,
        seed: plan.seed,
        outcome: ending.outcome,
        reward: ending.reward,
        rewards: ending.rewards.clone(),
        exception_class: ending.exception.as_ref().map(|e| e.0.clone()),
        exception_message: ending.exception.as_ref().map(|e| e.1.clone()),
        started,
        finished,
        phases: rec.phases.clone(),
        usage: rec.usage,
        model_route: plan.route.to_string(),
        scaffold_hash: rec
            .scaffold_hash
            .clone()
            .unwrap_or_else(|| plan.scaffold.hash()),
        infra_retries: 0,
        integrity: rec.signals,
    }
}

/// The trial's `result.json`: GEODE's record, with Harbor's `TrialResult` keys beside it.
pub(super) fn write_result_json(plan: &TrialPlan, row: &TrialRow, rec: &Record) {
    let geode = json!({
        "schema": "geode.trial.v1",
        "trial_name": row.trial_name,
        "task_name": row.task_id,
        "task_checksum": row.task_hash,
        "run_id": row.run_id,
        "attempt": row.attempt,
        "seed": row.seed,
        "scaffold_hash": row.scaffold_hash,
        "agent": plan.agent.label(),
        "outcome": row.outcome,
        "phase_seconds": row.phases,
        "image": rec.image,
        "integrity": rec.integrity,
        "notes": rec.notes,
    });
    let doc = crate::rollout::harbor::trial_result(
        geode,
        plan.agent.harbor(),
        row,
        &plan.task,
        &plan.trial_dir,
        &rec.phase_times,
        &rec.steps,
    );
    let path = plan.trial_dir.join("result.json");
    // The row is in the run store whatever happens here; Harbor's tools and `geode view` read
    // this file, so a trial without one is said, not silently left out.
    let written = serde_json::to_string_pretty(&doc)
        .map_err(std::io::Error::other)
        .and_then(|text| std::fs::write(&path, text));
    if let Err(e) = written {
        tracing::warn!(
            "trial {}: {} not written: {e}",
            row.trial_name,
            path.display()
        );
    }
}
