//! Split isolation: train / holdout / test disjoint by task id, content hash and near-duplicate
//! similarity.
//!
//! Tasks that share an id, a content hash, or a MinHash similarity at or above the threshold are
//! joined into one cluster (union-find); clusters are shuffled with ChaCha8 from the split seed
//! and each goes, whole, to the split furthest below its target count. A split file records the
//! signatures, so `check_splits` needs only the file.
//!
//! Format (`geode.splits.v1`, JSON):
//! ```json
//! {"schema": "geode.splits.v1", "pack": "tasks/geode-core", "pack_hash": "…", "seed": 7,
//!  "ratios": {"train": 0.6, "holdout": 0.2, "test": 0.2},
//!  "minhash": {"shingle": 3, "num_perm": 128, "bands": 32, "seed": …, "threshold": 0.6},
//!  "splits": {"train": [{"id": "…", "hash": "…", "cluster": 0, "signature": […]}],
//!             "holdout": […], "test": […]}}
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::minhash::{MinHashParams, MinHasher, candidate_pairs, cluster, estimate};
use super::{DatasetError, check_schema, invalid, read_json, task_text};
use crate::pack::{TaskHash, TaskPack};

pub const SPLITS_SCHEMA: &str = "geode.splits.v1";
pub const SPLIT_NAMES: [&str; 3] = ["train", "holdout", "test"];

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Ratios {
    pub train: f64,
    pub holdout: f64,
    pub test: f64,
}

impl Ratios {
    fn as_array(&self) -> [f64; 3] {
        [self.train, self.holdout, self.test]
    }

    pub fn validate(&self) -> Result<(), DatasetError> {
        let r = self.as_array();
        if r.iter().any(|v| !v.is_finite() || *v < 0.0)
            || (r.iter().sum::<f64>() - 1.0).abs() > 1e-6
        {
            return Err(invalid(
                Path::new("--train/--holdout/--test"),
                format!("ratios must be non-negative and sum to 1, got {r:?}"),
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitEntry {
    pub id: String,
    pub hash: TaskHash,
    /// Cluster number (clusters are numbered by their first task in id order).
    pub cluster: usize,
    pub signature: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitsFile {
    pub schema: String,
    pub pack: String,
    pub pack_hash: String,
    pub seed: u64,
    pub ratios: Ratios,
    pub minhash: MinHashParams,
    pub splits: BTreeMap<String, Vec<SplitEntry>>,
}

/// One item to split: id, content hash, the text compared for near-duplicates.
pub struct SplitItem {
    pub id: String,
    pub hash: TaskHash,
    pub text: String,
}

/// Assign items to splits. Returns, per split name, the entries in id order.
pub fn assign(
    items: &[SplitItem],
    ratios: Ratios,
    seed: u64,
    params: MinHashParams,
) -> Result<BTreeMap<String, Vec<SplitEntry>>, DatasetError> {
    ratios.validate()?;
    let hasher = MinHasher::new(params);
    let sigs: Vec<Vec<u64>> = items.iter().map(|i| hasher.signature(&i.text)).collect();
    let mut same = Vec::new();
    for i in 0..items.len() {
        for j in i + 1..items.len() {
            if items[i].id == items[j].id || items[i].hash == items[j].hash {
                same.push((i, j));
            }
        }
    }
    let mut clusters = cluster(&sigs, &params, same);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let numbered: Vec<(usize, Vec<usize>)> = {
        let mut c: Vec<(usize, Vec<usize>)> = clusters.drain(..).enumerate().collect();
        c.shuffle(&mut rng);
        c
    };
    let n = items.len() as f64;
    let targets = ratios.as_array().map(|r| r * n);
    let mut counts = [0usize; 3];
    let mut out: BTreeMap<String, Vec<SplitEntry>> = SPLIT_NAMES
        .iter()
        .map(|s| (s.to_string(), Vec::new()))
        .collect();
    for (number, members) in numbered {
        // The split furthest below its target takes the whole cluster; ties go to the earlier
        // split, and a split with a zero ratio never takes anything.
        let mut best: Option<(usize, f64)> = None;
        for (k, (target, count)) in targets.iter().zip(&counts).enumerate() {
            if *target <= 0.0 {
                continue;
            }
            let deficit = target - *count as f64;
            if best.is_none_or(|(_, d)| deficit > d) {
                best = Some((k, deficit));
            }
        }
        let Some((k, _)) = best else { continue };
        counts[k] += members.len();
        if let Some(list) = out.get_mut(SPLIT_NAMES[k]) {
            for m in members {
                list.push(SplitEntry {
                    id: items[m].id.clone(),
                    hash: items[m].hash.clone(),
                    cluster: number,
                    signature: sigs[m].clone(),
                });
            }
        }
    }
    for list in out.values_mut() {
        list.sort_by(|a, b| a.id.cmp(&b.id));
    }
    Ok(out)
}

/// Split a pack on disk.
pub fn split_pack(
    pack_dir: &Path,
    ratios: Ratios,
    seed: u64,
    params: MinHashParams,
) -> Result<SplitsFile, DatasetError> {
    let pack = TaskPack::load(pack_dir)?;
    if let Some(e) = pack.broken.first() {
        return Err(invalid(pack_dir, format!("broken task: {e}")));
    }
    let items = pack
        .tasks
        .iter()
        .map(|t| {
            Ok(SplitItem {
                id: t.id.clone(),
                hash: t.hash.clone(),
                text: task_text(t)?,
            })
        })
        .collect::<Result<Vec<_>, DatasetError>>()?;
    Ok(SplitsFile {
        schema: SPLITS_SCHEMA.to_string(),
        pack: pack_dir.display().to_string(),
        pack_hash: pack.hash(1).0,
        seed,
        ratios,
        minhash: params,
        splits: assign(&items, ratios, seed, params)?,
    })
}

/// A task that appears, or nearly appears, in two splits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Leak {
    /// `same_id`, `same_hash` or `near_duplicate`.
    pub kind: &'static str,
    pub a: (String, String),
    pub b: (String, String),
    pub similarity: Option<f64>,
}

impl std::fmt::Display for Leak {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}/{} and {}/{}",
            self.kind, self.a.0, self.a.1, self.b.0, self.b.1
        )?;
        if let Some(s) = self.similarity {
            write!(f, " (estimated Jaccard {s:.2})")?;
        }
        Ok(())
    }
}

pub fn load_splits(path: &Path) -> Result<SplitsFile, DatasetError> {
    let file: SplitsFile = read_json(path)?;
    check_schema(path, &file.schema, SPLITS_SCHEMA)?;
    Ok(file)
}

/// Every leak across splits. Near-duplicates are compared on the whole signature with the file's
/// own MinHash parameters (all pairs for small sets, LSH candidates beyond `EXHAUSTIVE_MAX`).
pub fn check_splits(file: &SplitsFile) -> Vec<Leak> {
    let flat: Vec<(&str, &SplitEntry)> = file
        .splits
        .iter()
        .flat_map(|(name, list)| list.iter().map(move |e| (name.as_str(), e)))
        .collect();
    let mut leaks = Vec::new();
    let label = |i: usize| (flat[i].0.to_string(), flat[i].1.id.clone());
    for i in 0..flat.len() {
        for j in i + 1..flat.len() {
            if flat[i].0 == flat[j].0 {
                continue;
            }
            if flat[i].1.id == flat[j].1.id {
                leaks.push(Leak {
                    kind: "same_id",
                    a: label(i),
                    b: label(j),
                    similarity: None,
                });
            } else if flat[i].1.hash == flat[j].1.hash {
                leaks.push(Leak {
                    kind: "same_hash",
                    a: label(i),
                    b: label(j),
                    similarity: None,
                });
            }
        }
    }
    let sigs: Vec<Vec<u64>> = flat.iter().map(|(_, e)| e.signature.clone()).collect();
    for (i, j) in candidate_pairs(&sigs, file.minhash.bands) {
        if flat[i].0 == flat[j].0
            || flat[i].1.id == flat[j].1.id
            || flat[i].1.hash == flat[j].1.hash
        {
            continue;
        }
        let s = estimate(&sigs[i], &sigs[j]);
        if s >= file.minhash.threshold {
            leaks.push(Leak {
                kind: "near_duplicate",
                a: label(i),
                b: label(j),
                similarity: Some(s),
            });
        }
    }
    leaks
}
