//! Immutable, content-addressed releases of a task pack, and their verification.
//!
//! `release` loads the pack, checks every task against the allowlist, runs the privacy review
//! (task files and any trajectories) and refuses on a refused origin or an open finding. It then
//! copies the tasks into `OUT/NAME-VERSION/tasks/ID/` and writes `release.json`. An existing
//! release folder is never replaced: the copy is built in a temporary folder and renamed only
//! if the destination does not exist.
//!
//! Manifest (`geode.release.v1`, JSON). `release_id` is the SHA-256 of the canonical JSON of the
//! manifest without `release_id`, so any edit to the manifest or any released byte (through the
//! per-file digests) is detected:
//! ```json
//! {"schema": "geode.release.v1", "release_id": "…", "name": "core", "version": "1.0.0",
//!  "created": "2026-…Z", "license": "Apache-2.0", "pack_hash": "…", "trials_per_task": 1,
//!  "source": {"path": "tasks/geode-core", "origin": "builtin:geode-core"},
//!  "tasks": [{"id": "…", "hash": "…", "source_digest": "…", "origin": "…",
//!             "files": {"task.toml": "sha256…", …}}],
//!  "lineage": {"parents": [{"name": …, "version": …, "release_id": …}],
//!              "transformations": ["…"]},
//!  "privacy": {geode.privacy.v1 review}, "allowlist": {"list": {…}, "checks": […]}}
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::allowlist::{Allowlist, OriginCheck, pack_origin};
use super::privacy::{PrivacyReview, Scanner, Waivers, review};
use super::{
    DatasetError, canonical_hash, check_schema, copy_tree, entries_below, invalid, io_err,
    read_json, write_new_json,
};
use crate::pack::{PackHash, TaskHash, TaskPack, hash_task_dir, pack_hash};

/// The manifest's `schema` value.
pub(crate) const RELEASE_SCHEMA: &str = "geode.release.v1";
/// The manifest's file name inside a release folder.
pub const MANIFEST: &str = "release.json";

/// `release.json`: what a release holds, where it came from and the reviews it passed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReleaseManifest {
    /// Always `RELEASE_SCHEMA`.
    pub schema: String,
    /// SHA-256 of the canonical JSON of the manifest without this field; empty while hashing.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub release_id: String,
    /// The release's name (letters, digits, `.`, `_`, `-`, `+`).
    pub name: String,
    /// The release's version (same characters as `name`).
    pub version: String,
    /// RFC 3339 time stamp given by the caller.
    pub created: String,
    /// License the tasks are released under, as given by the caller.
    pub license: String,
    /// Pack hash over the released tasks' ids and hashes (one trial per task).
    pub pack_hash: PackHash,
    /// Trials per task the pack hash assumes; always 1.
    pub trials_per_task: u32,
    /// The pack folder the release was made from.
    pub source: SourceRef,
    /// The released tasks, each with its file digests.
    pub tasks: Vec<ReleasedTask>,
    /// Parent releases and the transformations applied since.
    pub lineage: Lineage,
    /// The privacy review the release passed (no open findings).
    pub privacy: PrivacyReview,
    /// The allowlist used and each task's origin check.
    pub allowlist: AllowlistRecord,
}

/// The pack folder a release was made from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceRef {
    /// The folder as given on the command line.
    pub path: String,
    /// The pack's origin (`builtin:NAME`, `path:DIR`, or as given).
    pub origin: String,
}

/// One released task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReleasedTask {
    /// The task's id in the pack.
    pub id: String,
    /// Task hash of the released copy (equal to `source_digest`: copying keeps modes).
    pub hash: TaskHash,
    /// Task hash of the source folder when released.
    pub source_digest: TaskHash,
    /// Where the task comes from (`builtin:`, `tb1:` or `path:`), as the allowlist saw it.
    pub origin: String,
    /// SHA-256 of each file (symbolic links: of their target), by relative path.
    pub files: BTreeMap<String, String>,
}

/// Where a release comes from: parent releases and what was done to them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Lineage {
    /// Parent releases, each verified intact when this one was made.
    pub parents: Vec<ParentRef>,
    /// Free-text steps applied to the parents, as given by the caller.
    pub transformations: Vec<String>,
}

/// A parent release, by name, version and id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParentRef {
    /// The parent's name.
    pub name: String,
    /// The parent's version.
    pub version: String,
    /// The parent's `release_id`.
    pub release_id: String,
}

/// The allowlist a release was checked against, with the verdict for each task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllowlistRecord {
    /// The allowlist as used (the default one when no file was given).
    pub list: Allowlist,
    /// One origin check per task, all allowed.
    pub checks: Vec<OriginCheck>,
}

/// What to release.
pub struct ReleaseRequest<'a> {
    /// The pack folder to release.
    pub pack: &'a Path,
    /// The release's name (letters, digits, `.`, `_`, `-`, `+`).
    pub name: &'a str,
    /// The release's version (same characters as `name`).
    pub version: &'a str,
    /// Folder the release folder `NAME-VERSION` is created in.
    pub out: &'a Path,
    /// License recorded in the manifest.
    pub license: &'a str,
    /// `None`: derived from the folder (`allowlist::pack_origin`).
    pub origin: Option<&'a str>,
    /// The allowlist every task's origin must match.
    pub allowlist: Allowlist,
    /// Waivers for privacy findings (by fingerprint, with a reason).
    pub waivers: Waivers,
    /// Trajectory files scanned by the privacy review alongside the tasks.
    pub trajectories: Vec<PathBuf>,
    /// Folders of parent releases (their manifests are verified and referenced).
    pub parents: Vec<PathBuf>,
    /// Free-text steps recorded in the lineage.
    pub transformations: Vec<String>,
    /// RFC 3339 time stamp, injected so tests are deterministic.
    pub created: String,
}

/// Why a release was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// Loading, reading or writing failed.
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    /// The release folder already exists; releases are never overwritten.
    #[error("{path}: release {name} {version} already exists; releases are never overwritten")]
    Exists {
        /// The existing folder.
        path: String,
        /// The release's name.
        name: String,
        /// The release's version.
        version: String,
    },
    /// Tasks whose origin is not on the allowlist, one line each.
    #[error("sources not on the allowlist:\n{}", .0.join("\n"))]
    Refused(Vec<String>),
    /// Open privacy findings, one line each.
    #[error("privacy review has {} open finding(s) (fix them or waive them with a reason):\n{}", .0.len(), .0.join("\n"))]
    Privacy(Vec<String>),
    /// The pack has broken tasks; a release holds the whole pack.
    #[error("{pack}: broken tasks cannot be released: {message}")]
    Broken {
        /// The pack folder.
        pack: String,
        /// The broken tasks and why, joined with `; `.
        message: String,
    },
}

fn file_digest(path: &Path) -> Result<String, DatasetError> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| io_err(path, e))?;
    let bytes = if meta.file_type().is_symlink() {
        std::fs::read_link(path)
            .map_err(|e| io_err(path, e))?
            .to_string_lossy()
            .into_owned()
            .into_bytes()
    } else {
        std::fs::read(path).map_err(|e| io_err(path, e))?
    };
    Ok(hex::encode(Sha256::digest(&bytes)))
}

/// The folder of release `name` `version` under `out`: `out/NAME-VERSION`.
pub(crate) fn release_dir(out: &Path, name: &str, version: &str) -> PathBuf {
    out.join(format!("{name}-{version}"))
}

fn check_label(label: &str, what: &str) -> Result<(), DatasetError> {
    let ok = !label.is_empty()
        && !label.starts_with('.')
        && label
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+'));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            Path::new(what),
            format!("{label:?}: use letters, digits, '.', '_', '-', '+'"),
        ))
    }
}

/// Make a release; returns its folder and manifest.
pub fn release(req: &ReleaseRequest<'_>) -> Result<(PathBuf, ReleaseManifest), ReleaseError> {
    check_label(req.name, "--name")?;
    check_label(req.version, "--version")?;
    let dest = release_dir(req.out, req.name, req.version);
    let exists = |dest: &Path| ReleaseError::Exists {
        path: dest.display().to_string(),
        name: req.name.to_string(),
        version: req.version.to_string(),
    };
    if dest.exists() {
        return Err(exists(&dest));
    }
    let pack = whole_pack(req.pack)?;
    let origin = req
        .origin
        .map(str::to_string)
        .unwrap_or_else(|| pack_origin(req.pack));
    let checks = allowed_origins(req, &pack, &origin)?;
    let privacy = privacy_cleared(req, &pack)?;
    let parents = verified_parents(&req.parents)?;

    std::fs::create_dir_all(req.out).map_err(|e| io_err(req.out, e))?;
    let staging = req.out.join(format!(
        ".{}-{}.staging-{}",
        req.name,
        req.version,
        std::process::id()
    ));
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(|e| io_err(&staging, e))?;
    }
    let tasks = stage_tasks(&pack, &checks, &staging)?;
    let mut manifest = ReleaseManifest {
        schema: RELEASE_SCHEMA.to_string(),
        release_id: String::new(),
        name: req.name.to_string(),
        version: req.version.to_string(),
        created: req.created.clone(),
        license: req.license.to_string(),
        pack_hash: pack_hash(tasks.iter().map(|t| (t.id.as_str(), &t.hash)), 1),
        trials_per_task: 1,
        source: SourceRef {
            path: req.pack.display().to_string(),
            origin,
        },
        tasks,
        lineage: Lineage {
            parents,
            transformations: req.transformations.clone(),
        },
        privacy,
        allowlist: AllowlistRecord {
            list: req.allowlist.clone(),
            checks,
        },
    };
    manifest.release_id = canonical_hash(&manifest)?;
    write_new_json(&staging.join(MANIFEST), &manifest)?;
    // Checked again just before the rename: another process may have released meanwhile, and
    // rename(2) would replace an empty folder.
    if dest.exists() {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(exists(&dest));
    }
    std::fs::rename(&staging, &dest).map_err(|e| io_err(&dest, e))?;
    Ok((dest, manifest))
}

/// The pack, refused when any of its tasks is broken: a release holds the whole pack.
fn whole_pack(dir: &Path) -> Result<TaskPack, ReleaseError> {
    let pack = TaskPack::load(dir).map_err(DatasetError::from)?;
    if !pack.broken.is_empty() {
        let message = pack
            .broken
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        return Err(ReleaseError::Broken {
            pack: dir.display().to_string(),
            message,
        });
    }
    Ok(pack)
}

/// Every task's origin against the allowlist; refused when any is not on it.
fn allowed_origins(
    req: &ReleaseRequest<'_>,
    pack: &TaskPack,
    origin: &str,
) -> Result<Vec<OriginCheck>, ReleaseError> {
    let checks: Vec<OriginCheck> = pack
        .tasks
        .iter()
        .map(|t| req.allowlist.check(t, origin))
        .collect();
    let refused: Vec<String> = checks
        .iter()
        .filter(|c| !c.allowed)
        .map(|c| format!("  {}: {}", c.task, c.reason))
        .collect();
    if !refused.is_empty() {
        return Err(ReleaseError::Refused(refused));
    }
    Ok(checks)
}

/// The privacy review of the tasks and trajectories; refused on any open finding.
fn privacy_cleared(
    req: &ReleaseRequest<'_>,
    pack: &TaskPack,
) -> Result<PrivacyReview, ReleaseError> {
    let mut scopes: Vec<(String, &Path)> = pack
        .tasks
        .iter()
        .map(|t| (t.id.clone(), t.dir.as_path()))
        .collect();
    for t in &req.trajectories {
        let name = t
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        scopes.push((format!("trajectory:{name}"), t.as_path()));
    }
    let privacy = review(&Scanner::new()?, &scopes, &req.waivers)?;
    let open: Vec<String> = privacy
        .open()
        .iter()
        .map(|f| {
            let f = &f.finding;
            format!(
                "  {} {}:{}:{} {} [fingerprint {}]",
                f.rule, f.scope, f.file, f.line, f.excerpt, f.fingerprint
            )
        })
        .collect();
    if !open.is_empty() {
        return Err(ReleaseError::Privacy(open));
    }
    Ok(privacy)
}

/// The parent releases, each verified intact before the lineage names it.
fn verified_parents(dirs: &[PathBuf]) -> Result<Vec<ParentRef>, ReleaseError> {
    let mut parents = Vec::new();
    for p in dirs {
        let (m, problems) = verify(p)?;
        if !problems.is_empty() {
            return Err(invalid(
                p,
                format!("parent release fails verification: {}", problems.join("; ")),
            )
            .into());
        }
        parents.push(ParentRef {
            name: m.name,
            version: m.version,
            release_id: m.release_id,
        });
    }
    Ok(parents)
}

/// The tasks copied into `staging/tasks/ID/`, each with its files' digests and its hash.
fn stage_tasks(
    pack: &TaskPack,
    checks: &[OriginCheck],
    staging: &Path,
) -> Result<Vec<ReleasedTask>, ReleaseError> {
    for task in &pack.tasks {
        let unsafe_id = Path::new(&task.id)
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)));
        if unsafe_id {
            return Err(invalid(
                &task.dir,
                format!("task id {:?} cannot name a folder", task.id),
            )
            .into());
        }
    }
    let mut tasks = Vec::new();
    for (task, check) in pack.tasks.iter().zip(checks) {
        let copy = staging.join("tasks").join(&task.id);
        copy_tree(&task.dir, &copy)?;
        let mut files = BTreeMap::new();
        for rel in entries_below(&copy)? {
            files.insert(
                rel.to_string_lossy().into_owned(),
                file_digest(&copy.join(&rel))?,
            );
        }
        tasks.push(ReleasedTask {
            id: task.id.clone(),
            hash: hash_task_dir(&copy).map_err(DatasetError::from)?,
            source_digest: task.hash.clone(),
            origin: check.origin.clone(),
            files,
        });
    }
    Ok(tasks)
}

/// Re-hash a release. Returns the manifest and every problem found (empty: the release is
/// intact). Errors only when the manifest itself cannot be read.
pub fn verify(dir: &Path) -> Result<(ReleaseManifest, Vec<String>), DatasetError> {
    let path = dir.join(MANIFEST);
    let manifest: ReleaseManifest = read_json(&path)?;
    check_schema(&path, &manifest.schema, RELEASE_SCHEMA)?;
    let mut problems = Vec::new();
    let mut body = manifest.clone();
    body.release_id = String::new();
    if canonical_hash(&body)? != manifest.release_id {
        problems.push(format!(
            "{MANIFEST}: release_id does not match the manifest content (edited)"
        ));
    }
    for task in &manifest.tasks {
        let tdir = dir.join("tasks").join(&task.id);
        if !tdir.is_dir() {
            problems.push(format!("task {}: folder missing", task.id));
            continue;
        }
        let present = entries_below(&tdir)?;
        for rel in &present {
            let key = rel.to_string_lossy().into_owned();
            match task.files.get(&key) {
                None => problems.push(format!(
                    "task {}: file {key} is not in the manifest",
                    task.id
                )),
                Some(want) if *want != file_digest(&tdir.join(rel))? => {
                    problems.push(format!("task {}: file {key} changed", task.id))
                }
                Some(_) => {}
            }
        }
        for key in task.files.keys() {
            if !present.iter().any(|p| p.to_string_lossy() == key.as_str()) {
                problems.push(format!("task {}: file {key} is missing", task.id));
            }
        }
        let hash = hash_task_dir(&tdir)?;
        if hash != task.hash {
            problems.push(format!(
                "task {}: task hash {} != manifest {}",
                task.id, hash, task.hash
            ));
        }
    }
    let recomputed = pack_hash(
        manifest.tasks.iter().map(|t| (t.id.as_str(), &t.hash)),
        manifest.trials_per_task,
    );
    if recomputed != manifest.pack_hash {
        problems.push(format!(
            "pack hash {} != manifest {}",
            recomputed, manifest.pack_hash
        ));
    }
    // Task ids may contain '/', so look for stray files rather than stray folder names.
    let tasks_dir = dir.join("tasks");
    if tasks_dir.is_dir() {
        for rel in entries_below(&tasks_dir)? {
            let owned = manifest
                .tasks
                .iter()
                .any(|t| rel.starts_with(Path::new(&t.id)));
            if !owned {
                problems.push(format!(
                    "file tasks/{} belongs to no task of the manifest",
                    rel.display()
                ));
            }
        }
    }
    Ok((manifest, problems))
}
