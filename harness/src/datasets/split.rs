//! Split isolation: train / holdout / test disjoint by task id, content hash and near-duplicate
//! similarity.
//!
//! Tasks that share an id, a content hash, or a MinHash similarity at or above the threshold are
//! joined into one cluster (union-find); clusters are shuffled with ChaCha8 from the split seed
//! and each goes, whole, to the split furthest below its target count. A split file records the
//! signatures so a reader can see why tasks were grouped, but the file is not trusted:
//! `check_against_pack` re-reads the pack, recomputes every hash and signature with the file's
//! MinHash parameters, reports where the file disagrees, and looks for leaks on what it derived.
//! `write_split_packs` turns a split into pack folders (one per split, tasks copied whole).
//!
//! Format (`geode.splits.v1`, JSON):
//! ```json
//! {"schema": "geode.splits.v1", "pack": "tasks/geode-core", "pack_hash": "…", "seed": 7,
//!  "ratios": {"train": 0.6, "holdout": 0.2, "test": 0.2},
//!  "minhash": {"shingle": 3, "num_perm": 128, "bands": 32, "seed": …, "threshold": 0.6},
//!  "splits": {"train": [{"id": "…", "hash": "…", "cluster": 0, "signature": […]}],
//!             "holdout": […], "test": […]}}
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::minhash::{MinHashParams, MinHasher, candidate_pairs, cluster, estimate};
use super::{DatasetError, check_schema, copy_tree, invalid, io_err, read_json, task_text};
use crate::pack::{PackHash, TaskHash, TaskPack};

/// The splits file's `schema` value.
pub(crate) const SPLITS_SCHEMA: &str = "geode.splits.v1";
/// The split names, in the order of the `Ratios` fields.
pub(crate) const SPLIT_NAMES: [&str; 3] = ["train", "holdout", "test"];

/// Target shares of the tasks per split; each non-negative, together 1.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Ratios {
    /// Share of tasks for `train`.
    pub train: f64,
    /// Share of tasks for `holdout`.
    pub holdout: f64,
    /// Share of tasks for `test`.
    pub test: f64,
}

impl Ratios {
    fn as_array(&self) -> [f64; 3] {
        [self.train, self.holdout, self.test]
    }

    /// Refuses negative or non-finite ratios, and ratios that do not sum to 1 (within 1e-6).
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

/// One task in a split, with what it was grouped by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitEntry {
    /// The task's id.
    pub id: String,
    /// The task's content hash.
    pub hash: TaskHash,
    /// Cluster number (clusters are numbered by their first task in id order).
    pub cluster: usize,
    /// The task's MinHash signature under the file's `minhash` parameters.
    pub signature: Vec<u64>,
}

/// A splits file (`geode.splits.v1`): which task went to which split, and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitsFile {
    /// Always `SPLITS_SCHEMA`.
    pub schema: String,
    /// The pack folder, absolute when written by `split_pack`.
    pub pack: String,
    /// Pack hash (one trial per task) when split; checked against the pack later.
    pub pack_hash: PackHash,
    /// Seed of the cluster shuffle.
    pub seed: u64,
    /// The target shares.
    pub ratios: Ratios,
    /// MinHash parameters the signatures were computed with.
    pub minhash: MinHashParams,
    /// Split name (`train`, `holdout`, `test`) to its entries, in id order.
    pub splits: BTreeMap<String, Vec<SplitEntry>>,
}

/// One item to split: id, content hash, the text compared for near-duplicates.
pub struct SplitItem {
    /// The task's id.
    pub id: String,
    /// The task's content hash.
    pub hash: TaskHash,
    /// The task's text, compared for near-duplicates.
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
    // The absolute path, so the file can be checked from any folder.
    let pack_path = std::fs::canonicalize(pack_dir).unwrap_or_else(|_| pack_dir.to_path_buf());
    Ok(SplitsFile {
        schema: SPLITS_SCHEMA.to_string(),
        pack: pack_path.display().to_string(),
        pack_hash: pack.hash(1),
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
    /// First task as (split, id).
    pub a: (String, String),
    /// Second task as (split, id).
    pub b: (String, String),
    /// Estimated Jaccard, for `near_duplicate` leaks only.
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

/// Reads a splits file; refuses an unknown `schema`.
pub fn load_splits(path: &Path) -> Result<SplitsFile, DatasetError> {
    let file: SplitsFile = read_json(path)?;
    check_schema(path, &file.schema, SPLITS_SCHEMA)?;
    Ok(file)
}

/// Every leak across splits. Near-duplicates are compared on the whole signature with the file's
/// own MinHash parameters (all pairs for small sets, LSH candidates beyond `EXHAUSTIVE_MAX`).
pub fn check_splits(file: &SplitsFile) -> Vec<Leak> {
    leaks(&file.splits, &file.minhash)
}

/// A pack's tasks as split entries (one cluster each): what [`leaks`] compares.
pub fn entries_of(pack: &TaskPack, params: MinHashParams) -> Result<Vec<SplitEntry>, DatasetError> {
    let hasher = MinHasher::new(params);
    pack.tasks
        .iter()
        .enumerate()
        .map(|(cluster, t)| {
            Ok(SplitEntry {
                id: t.id.clone(),
                hash: t.hash.clone(),
                cluster,
                signature: hasher.signature(&task_text(t)?),
            })
        })
        .collect()
}

/// Every task that appears, or nearly appears, in two of `splits` (by name).
pub fn leaks(splits: &BTreeMap<String, Vec<SplitEntry>>, params: &MinHashParams) -> Vec<Leak> {
    let flat: Vec<(&str, &SplitEntry)> = splits
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
    for (i, j) in candidate_pairs(&sigs, params.bands) {
        if flat[i].0 == flat[j].0
            || flat[i].1.id == flat[j].1.id
            || flat[i].1.hash == flat[j].1.hash
        {
            continue;
        }
        let s = estimate(&sigs[i], &sigs[j]);
        if s >= params.threshold {
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

/// Where a splits file disagrees with the pack it names.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mismatch {
    /// `pack_hash`, `missing`, `hash`, `signature` or `unassigned`.
    pub kind: &'static str,
    /// `split/id`, or the pack for `pack_hash`.
    pub subject: String,
    /// What differs, in words.
    pub detail: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.kind, self.subject, self.detail)
    }
}

/// The result of checking a splits file against its pack.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SplitCheck {
    /// Where the file disagrees with the pack.
    pub mismatches: Vec<Mismatch>,
    /// Leaks found on the hashes and signatures derived from the pack, not the file's.
    pub leaks: Vec<Leak>,
    /// Tasks in the splits derived from the pack.
    pub tasks: usize,
}

impl SplitCheck {
    /// No mismatch and no leak.
    pub fn is_clean(&self) -> bool {
        self.mismatches.is_empty() && self.leaks.is_empty()
    }
}

/// The pack a splits file names: absolute as written, else relative to the splits file's folder
/// (a file moved with its pack), else relative to the current folder.
pub fn resolve_pack(splits_path: &Path, file: &SplitsFile) -> PathBuf {
    let named = Path::new(&file.pack);
    if named.is_absolute() {
        return named.to_path_buf();
    }
    let beside = splits_path
        .parent()
        .map(|d| d.join(named))
        .filter(|p| p.is_dir());
    beside.unwrap_or_else(|| named.to_path_buf())
}

fn check_params(path: &Path, p: &MinHashParams) -> Result<(), DatasetError> {
    let why = if p.num_perm == 0 || p.bands == 0 || !p.num_perm.is_multiple_of(p.bands) {
        Some(format!(
            "minhash: num_perm ({}) must be a positive multiple of bands ({})",
            p.num_perm, p.bands
        ))
    } else if p.shingle == 0 {
        Some("minhash.shingle must be at least 1".to_string())
    } else if !(p.threshold > 0.0 && p.threshold <= 1.0) {
        Some(format!(
            "minhash.threshold must be in (0, 1], got {}",
            p.threshold
        ))
    } else {
        None
    };
    why.map_or(Ok(()), |m| Err(invalid(path, m)))
}

/// Check a splits file against the pack: every entry's task must exist with the recorded hash
/// and signature, every task of the pack must be in a split, and no leak may cross splits
/// (judged on what the pack gives, so an edited file cannot hide one).
pub fn check_against_pack(
    splits_path: &Path,
    file: &SplitsFile,
    pack_dir: &Path,
) -> Result<SplitCheck, DatasetError> {
    check_params(splits_path, &file.minhash)?;
    let pack = TaskPack::load(pack_dir)?;
    let hasher = MinHasher::new(file.minhash);
    let by_id: BTreeMap<&str, &crate::pack::Task> =
        pack.tasks.iter().map(|t| (t.id.as_str(), t)).collect();
    let mut check = SplitCheck::default();
    let pack_hash = pack.hash(1);
    if pack_hash != file.pack_hash {
        check.mismatches.push(Mismatch {
            kind: "pack_hash",
            subject: pack_dir.display().to_string(),
            detail: format!("file records {}, pack is {pack_hash}", file.pack_hash),
        });
    }
    let mut derived = file.clone();
    let mut assigned = BTreeSet::new();
    for (name, list) in derived.splits.iter_mut() {
        let mut kept = Vec::new();
        for entry in list.drain(..) {
            let subject = format!("{name}/{}", entry.id);
            let Some(task) = by_id.get(entry.id.as_str()) else {
                check.mismatches.push(Mismatch {
                    kind: "missing",
                    subject,
                    detail: "no task with this id in the pack".into(),
                });
                continue;
            };
            assigned.insert(entry.id.clone());
            if task.hash != entry.hash {
                check.mismatches.push(Mismatch {
                    kind: "hash",
                    subject: subject.clone(),
                    detail: format!("file records {}, pack has {}", entry.hash.0, task.hash.0),
                });
            }
            let signature = hasher.signature(&task_text(task)?);
            if signature != entry.signature {
                check.mismatches.push(Mismatch {
                    kind: "signature",
                    subject,
                    detail: "the recorded MinHash signature is not the task's".into(),
                });
            }
            kept.push(SplitEntry {
                id: entry.id,
                hash: task.hash.clone(),
                cluster: entry.cluster,
                signature,
            });
        }
        *list = kept;
    }
    for task in &pack.tasks {
        if !assigned.contains(&task.id) {
            check.mismatches.push(Mismatch {
                kind: "unassigned",
                subject: task.id.clone(),
                detail: "the pack's task is in no split".into(),
            });
        }
    }
    check.tasks = derived.splits.values().map(Vec::len).sum();
    check.leaks = check_splits(&derived);
    Ok(check)
}

/// Write one pack folder per split below `out` (`out/train/<task>`, ...), copying each task
/// folder whole; refuses an existing `out`. The folders are built in a staging folder beside
/// `out` and renamed at the end, so a failure leaves no half-written split. Returns the folders.
pub fn write_split_packs(
    file: &SplitsFile,
    pack_dir: &Path,
    out: &Path,
) -> Result<Vec<PathBuf>, DatasetError> {
    if out.exists() {
        return Err(invalid(
            out,
            "already exists; split packs are never replaced",
        ));
    }
    let staging = out.with_file_name(format!(
        ".{}.staging-{}",
        out.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        std::process::id()
    ));
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(|e| io_err(&staging, e))?;
    }
    let result = copy_splits(file, pack_dir, &staging);
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    result?;
    std::fs::rename(&staging, out).map_err(|e| io_err(out, e))?;
    Ok(file.splits.keys().map(|name| out.join(name)).collect())
}

fn copy_splits(file: &SplitsFile, pack_dir: &Path, out: &Path) -> Result<(), DatasetError> {
    let pack = TaskPack::load(pack_dir)?;
    let by_id: BTreeMap<&str, &crate::pack::Task> =
        pack.tasks.iter().map(|t| (t.id.as_str(), t)).collect();
    for (name, list) in &file.splits {
        let dir = out.join(name);
        std::fs::create_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
        for entry in list {
            let task = by_id.get(entry.id.as_str()).ok_or_else(|| {
                invalid(pack_dir, format!("{name}/{}: not in the pack", entry.id))
            })?;
            if task.hash != entry.hash {
                return Err(invalid(
                    &task.dir,
                    format!(
                        "{name}/{}: changed since the split (hash {}, split records {})",
                        entry.id, task.hash.0, entry.hash.0
                    ),
                ));
            }
            let folder = task
                .dir
                .file_name()
                .ok_or_else(|| invalid(&task.dir, "a task folder needs a name"))?;
            copy_tree(&task.dir, &dir.join(folder))?;
        }
    }
    Ok(())
}
