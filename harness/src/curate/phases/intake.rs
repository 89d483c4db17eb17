//! The phases that gather and thin the candidates: synthesis (seed packs and generated
//! tasks), near-duplicate removal, and pilot runs (the oracle must pass, nop must fail).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{Ctx, Journal, io, to_value};
use crate::curate::CurateError;
use crate::curate::pipeline::{Candidate, PilotRunner};
use crate::curate::synth;
use crate::datasets::allowlist::pack_origin;
use crate::datasets::minhash::{MinHashParams, MinHasher, cluster};
use crate::datasets::task_text;
use crate::pack::{Task, TaskPack};

pub(super) async fn synthesis(ctx: &Ctx<'_>) -> Result<(Value, String), CurateError> {
    let mut out = Vec::new();
    for pack_dir in &ctx.config.seed_packs {
        let dir = ctx.base.join(pack_dir);
        let dir = std::fs::canonicalize(&dir).map_err(io(&dir))?;
        let pack = TaskPack::load(&dir)?;
        let origin = pack_origin(&dir);
        // Recorded from the output folder, so a study moved as a whole (config, output and
        // seed packs together) keeps its checkpoints.
        let from = std::fs::canonicalize(&ctx.out).unwrap_or_else(|_| ctx.out.clone());
        for t in &pack.tasks {
            let recorded = relative_to(&t.dir, &from).unwrap_or_else(|| t.dir.clone());
            out.push(candidate(t, recorded.display().to_string(), &origin));
        }
    }
    let tasks_root = ctx.out.join("tasks");
    // A re-run replaces the synthesized tasks of an older run (this folder is ours alone).
    if tasks_root.exists() {
        std::fs::remove_dir_all(&tasks_root).map_err(io(&tasks_root))?;
    }
    let mut rejected = Vec::new();
    let syn = &ctx.config.synthesis;
    if let Some(route) = &syn.generator {
        let model = ctx.models.build(route).map_err(|m| CurateError::Model {
            route: route.clone(),
            message: m,
        })?;
        for topic in &syn.topics {
            for index in 0..syn.per_topic.max(1) {
                let reply = model
                    .ask(synth::SYSTEM, &synth::prompt(topic, index, ctx.config.seed))
                    .await
                    .map_err(|m| CurateError::Model {
                        route: route.clone(),
                        message: m,
                    })?;
                let loaded = synth::parse_reply(&reply)
                    .and_then(|g| synth::write_task(&tasks_root, &g))
                    .and_then(|dir| {
                        Task::load(&dir).map_err(|e| {
                            // A rejected task leaves no folder behind.
                            let _ = std::fs::remove_dir_all(&dir);
                            CurateError::from(e)
                        })
                    });
                match loaded {
                    Ok(t) => {
                        let rel = t.dir.strip_prefix(&ctx.out).unwrap_or(&t.dir);
                        out.push(candidate(
                            &t,
                            rel.display().to_string(),
                            &format!("synth:{topic}"),
                        ));
                    }
                    Err(e) => rejected.push(json!({"topic": topic, "index": index,
                                                   "reason": e.to_string()})),
                }
            }
        }
    }
    let summary = format!("{} candidates, {} rejected", out.len(), rejected.len());
    Ok((
        json!({"candidates": to_value(&out)?, "rejected": rejected}),
        summary,
    ))
}

/// `path` as seen from `base` (both absolute): `../../tasks/x` and the like; `None` when
/// either is relative.
fn relative_to(path: &Path, base: &Path) -> Option<PathBuf> {
    if !path.is_absolute() || !base.is_absolute() {
        return None;
    }
    let (p, b): (Vec<_>, Vec<_>) = (path.components().collect(), base.components().collect());
    let common = p.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut rel = PathBuf::new();
    for _ in common..b.len() {
        rel.push("..");
    }
    for c in &p[common..] {
        rel.push(c);
    }
    Some(rel)
}

fn candidate(t: &Task, dir: String, origin: &str) -> Candidate {
    Candidate {
        id: t.id.clone(),
        dir,
        hash: t.hash.clone(),
        origin: origin.to_string(),
        category: t.config.category().to_string(),
        difficulty: t.config.difficulty().to_string(),
    }
}

pub(super) fn dedup(ctx: &Ctx<'_>, cands: Vec<Candidate>) -> Result<(Value, String), CurateError> {
    let params = MinHashParams {
        threshold: ctx.config.dedup.threshold,
        ..MinHashParams::default()
    };
    let hasher = MinHasher::new(params);
    let mut sigs = Vec::new();
    for c in &cands {
        let t = Task::load(&ctx.task_dir(c))?;
        sigs.push(hasher.signature(&task_text(&t)?));
    }
    let mut same = Vec::new();
    for i in 0..cands.len() {
        for j in i + 1..cands.len() {
            if cands[i].hash == cands[j].hash || cands[i].id == cands[j].id {
                same.push((i, j));
            }
        }
    }
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    // Seed-pack tasks come first in the candidate list, so the first member of a cluster (its
    // keeper) is an existing task whenever the cluster has one.
    for members in cluster(&sigs, &params, same) {
        let keep = members[0];
        kept.push(cands[keep].clone());
        for &m in &members[1..] {
            dropped.push(json!({"id": cands[m].id, "duplicate_of": cands[keep].id,
                "similarity": crate::datasets::minhash::estimate(&sigs[keep], &sigs[m])}));
        }
    }
    let summary = format!(
        "{} kept, {} near-duplicates dropped",
        kept.len(),
        dropped.len()
    );
    Ok((
        json!({"candidates": to_value(&kept)?, "dropped": dropped}),
        summary,
    ))
}

/// Oracle must pass every trial and nop fail every one.
async fn pilot_task(
    runner: &dyn PilotRunner,
    dir: &Path,
    id: &str,
    trials: u32,
    seed: u64,
) -> Result<Value, CurateError> {
    let oracle = runner
        .run(dir, "oracle", trials, seed)
        .await
        .map_err(CurateError::Pilot)?;
    let nop = runner
        .run(dir, "nop", trials, seed)
        .await
        .map_err(CurateError::Pilot)?;
    let flaky = oracle.iter().any(|p| *p) && !oracle.iter().all(|p| *p);
    let valid = !oracle.is_empty() && oracle.iter().all(|p| *p) && !nop.iter().any(|p| *p);
    Ok(json!({"id": id, "oracle": oracle, "nop": nop, "flaky": flaky, "valid": valid}))
}

pub(super) async fn pilot(
    ctx: &Ctx<'_>,
    cands: Vec<Candidate>,
    journal: &mut Journal,
) -> Result<(Value, String), CurateError> {
    let cfg = &ctx.config.pilot;
    if !cfg.enabled {
        let n = cands.len();
        return Ok((
            json!({"enabled": false, "candidates": to_value(&cands)?}),
            format!("skipped (pilot.enabled = false); {n} pass through"),
        ));
    }
    let runner = ctx
        .pilot
        .ok_or_else(|| CurateError::Pilot("pilot.enabled but no pilot runner".into()))?;
    let (mut kept, mut results) = (Vec::new(), Vec::new());
    for (i, c) in cands.iter().enumerate() {
        // One journal item per task, keyed by content: a task finished before a crash is not
        // piloted again.
        let item = format!("{}@{}", c.id, c.hash.0);
        let result = match journal.get(&item) {
            Some(done) => done.clone(),
            None => {
                let seed = ctx.config.seed.wrapping_add(i as u64);
                let result = pilot_task(runner, &ctx.task_dir(c), &c.id, cfg.trials, seed).await?;
                journal.record(&item, result.clone())?;
                result
            }
        };
        if result["valid"] == true {
            kept.push(c.clone());
        }
        results.push(result);
    }
    let summary = format!("{} of {} valid", kept.len(), cands.len());
    Ok((
        json!({"enabled": true, "results": results, "candidates": to_value(&kept)?}),
        summary,
    ))
}

#[cfg(test)]
mod tests {
    use super::relative_to;
    use std::path::{Path, PathBuf};

    #[test]
    fn seed_tasks_are_recorded_from_the_output_folder() {
        let rel = |p: &str, b: &str| relative_to(Path::new(p), Path::new(b));
        assert_eq!(
            rel("/s/tasks/core/a", "/s/study/out"),
            Some(PathBuf::from("../../tasks/core/a"))
        );
        assert_eq!(
            rel("/s/out/tasks/a", "/s/out"),
            Some(PathBuf::from("tasks/a"))
        );
        assert_eq!(rel("tasks/a", "/s/out"), None);
    }
}
