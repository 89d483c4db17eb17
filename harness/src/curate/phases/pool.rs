//! The freeze phase: the selected tasks copied into `pool/` (checked against their hashes)
//! with a manifest naming every phase's output, written once and never overwritten.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Ctx, candidates, from_value, io};
use crate::curate::CurateError;
use crate::curate::pipeline::{Candidate, POOL_SCHEMA, Phase};
use crate::curate::review::Selected;
use crate::curate::tournament::Ratings;
use crate::datasets::{canonical_hash, write_new_json};
use crate::pack::{PackHash, hash_task_dir, pack_hash};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PoolTask {
    pub id: String,
    pub hash: crate::pack::TaskHash,
    pub origin: String,
    pub category: String,
    pub difficulty: String,
    pub score: f64,
    pub elo: f64,
    pub bt: f64,
    pub bt_interval: (f64, f64),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PoolManifest {
    pub schema: String,
    pub seed: u64,
    pub pack_hash: PackHash,
    /// Output hash of every phase, in order: the pool's lineage.
    pub phases: Vec<(String, String)>,
    pub tasks: Vec<PoolTask>,
}

pub(super) fn freeze(
    ctx: &Ctx<'_>,
    prev: &[Value],
    last: &Value,
) -> Result<(Value, String), CurateError> {
    let selected: Vec<Selected> = from_value(&last["selected"], "selection")?;
    let cands: Vec<Candidate> = candidates(last, "selection")?;
    let tour = prev.get(3).cloned().unwrap_or(Value::Null);
    let ratings: Ratings = from_value(&tour["ratings"], "tournament")?;
    let ids: Vec<String> = from_value(&tour["ids"], "tournament")?;
    let pool = ctx.out.join("pool");
    if pool.exists() {
        return Err(CurateError::Frozen {
            path: pool.display().to_string(),
        });
    }
    let staging = ctx.out.join(".pool.staging");
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(io(&staging))?;
    }
    let mut tasks = Vec::new();
    for s in &selected {
        let (Some(c), Some(i)) = (
            cands.iter().find(|c| c.id == s.id),
            ids.iter().position(|x| *x == s.id),
        ) else {
            return Err(CurateError::Config {
                path: "selection".into(),
                message: format!("unknown task {}", s.id),
            });
        };
        let dest = staging.join("tasks").join(&c.id);
        copy_dir(&ctx.task_dir(c), &dest)?;
        let hash = hash_task_dir(&dest)?;
        if hash != c.hash {
            return Err(CurateError::Config {
                path: ctx.task_dir(c).display().to_string(),
                message: format!("changed since synthesis: hash {hash} != {}", c.hash),
            });
        }
        tasks.push(PoolTask {
            id: c.id.clone(),
            hash,
            origin: c.origin.clone(),
            category: c.category.clone(),
            difficulty: c.difficulty.clone(),
            score: s.score,
            elo: ratings.elo[i],
            bt: ratings.bt[i],
            bt_interval: ratings.bt_interval[i],
        });
    }
    let phases = Phase::ALL
        .iter()
        .zip(prev)
        .map(|(p, v)| Ok((p.name().to_string(), canonical_hash(v)?)))
        .collect::<Result<Vec<_>, CurateError>>()?;
    let manifest = PoolManifest {
        schema: POOL_SCHEMA.into(),
        seed: ctx.config.seed,
        pack_hash: pack_hash(tasks.iter().map(|t| (t.id.as_str(), &t.hash)), 1),
        phases,
        tasks,
    };
    write_new_json(&staging.join("pool.json"), &manifest)?;
    std::fs::rename(&staging, &pool).map_err(io(&pool))?;
    let summary = format!(
        "{} tasks frozen, pack hash {}",
        manifest.tasks.len(),
        manifest.pack_hash
    );
    Ok((
        json!({"pool": "pool/pool.json", "pack_hash": manifest.pack_hash}),
        summary,
    ))
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), CurateError> {
    for entry in walkdir::WalkDir::new(from).sort_by_file_name() {
        let entry = entry.map_err(|e| CurateError::Config {
            path: from.display().to_string(),
            message: e.to_string(),
        })?;
        let rel = entry.path().strip_prefix(from).unwrap_or(entry.path());
        let dest = to.join(rel);
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&dest).map_err(io(&dest))?;
        } else if entry.file_type().is_symlink() {
            let target = std::fs::read_link(entry.path()).map_err(io(entry.path()))?;
            std::os::unix::fs::symlink(target, &dest).map_err(io(&dest))?;
        } else {
            std::fs::copy(entry.path(), &dest).map_err(io(&dest))?;
        }
    }
    Ok(())
}
