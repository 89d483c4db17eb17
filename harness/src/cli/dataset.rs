//! `geode dataset`: privacy scan, releases and their verification, split isolation.

use super::exit::Exit;
use std::path::{Path, PathBuf};

use clap::Subcommand;
use geode_harness::datasets::allowlist::Allowlist;
use geode_harness::datasets::minhash::MinHashParams;
use geode_harness::datasets::privacy::{Disposition, Scanner, Waivers, review};
use geode_harness::datasets::release::{ReleaseRequest, release, verify};
use geode_harness::datasets::split::{
    Ratios, check_against_pack, load_splits, resolve_pack, split_pack, write_split_packs,
};
use geode_harness::datasets::write_new_json;
use geode_harness::pack::TaskPack;

#[derive(Debug, Subcommand)]
pub enum DatasetCommand {
    /// Privacy review of a pack (and trajectories): list findings; exit 10 on any open one.
    Scan {
        /// The task pack to review.
        pack: PathBuf,
        /// Waiver file (geode.waivers.v1); default datasets/waivers/PACKNAME.toml in the nearest
        /// folder at or above the pack that has one.
        #[arg(long)]
        waivers: Option<PathBuf>,
        /// Folders of trajectories to scan as well.
        #[arg(long = "trajectories")]
        trajectories: Vec<PathBuf>,
    },
    /// Write an immutable, content-addressed release of a pack.
    Release {
        /// The task pack to release.
        pack: PathBuf,
        /// The release's name.
        #[arg(long)]
        name: String,
        /// The release's version (a release name and version are written once, never replaced).
        #[arg(long)]
        version: String,
        /// Where the release folder is written (never replaced).
        #[arg(long, default_value = "datasets/releases")]
        out: PathBuf,
        /// SPDX license of the released tasks.
        #[arg(long, default_value = "Apache-2.0")]
        license: String,
        /// The pack's origin (default: builtin:NAME for tasks/NAME, else path:DIR).
        #[arg(long)]
        origin: Option<String>,
        /// Allowlist (geode.allowlist.v1); default datasets/allowlist.toml in the nearest folder
        /// at or above the pack that has one, else builtin:* only.
        #[arg(long)]
        allowlist: Option<PathBuf>,
        /// Waiver file (geode.waivers.v1); default datasets/waivers/PACKNAME.toml in the nearest folder at or above the pack that has one.
        #[arg(long)]
        waivers: Option<PathBuf>,
        /// Folders of trajectories to scan as well.
        #[arg(long = "trajectories")]
        trajectories: Vec<PathBuf>,
        /// A parent release folder (lineage); repeatable.
        #[arg(long = "parent")]
        parents: Vec<PathBuf>,
        /// A transformation applied since the parents (lineage); repeatable.
        #[arg(long = "transform")]
        transformations: Vec<String>,
    },
    /// Re-hash a release; exit 10 naming each changed task and file.
    Verify {
        /// The release folder (as `geode dataset release` wrote it).
        release: PathBuf,
    },
    /// Split a pack into train / holdout / test, isolating near-duplicates.
    Split {
        /// The task pack to split.
        pack: PathBuf,
        /// Share of tasks in the train split.
        #[arg(long, default_value_t = 0.6)]
        train: f64,
        /// Share of tasks in the holdout split.
        #[arg(long, default_value_t = 0.2)]
        holdout: f64,
        /// Share of tasks in the test split.
        #[arg(long, default_value_t = 0.2)]
        test: f64,
        /// The seed of the split's shuffle.
        #[arg(long)]
        seed: u64,
        /// Estimated Jaccard at or above which tasks are near-duplicates.
        #[arg(long, default_value_t = 0.6)]
        threshold: f64,
        /// Write the splits file here (never replaced); default: stdout.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Also write one pack folder per split below this folder (never replaced).
        #[arg(long)]
        packs: Option<PathBuf>,
    },
    /// Check a splits file against its pack (hashes and signatures re-derived from the tasks);
    /// exit 10 listing every disagreement and every leak across splits.
    CheckSplits {
        /// The splits file (`geode dataset split --out`).
        splits: PathBuf,
        /// The pack to check against (default: the one the file names).
        #[arg(long)]
        pack: Option<PathBuf>,
    },
}

/// `rel` in the nearest folder at or above the pack that has it: a project keeps `datasets/`
/// beside `tasks/`, and the answer must not depend on the folder the command runs from.
fn beside_pack(pack: &Path, rel: &str) -> Option<PathBuf> {
    let pack = std::fs::canonicalize(pack).ok()?;
    pack.ancestors()
        .map(|dir| dir.join(rel))
        .find(|candidate| candidate.is_file())
}

fn default_waivers(pack: &Path, explicit: Option<PathBuf>) -> anyhow::Result<Waivers> {
    let name = std::fs::canonicalize(pack)?
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let path = explicit.or_else(|| beside_pack(pack, &format!("datasets/waivers/{name}.toml")));
    if let Some(p) = &path {
        say!("waivers: {}", p.display());
    }
    Ok(match path {
        Some(p) => Waivers::load(&p)?,
        None => Waivers::default(),
    })
}

pub fn run(cmd: DatasetCommand) -> anyhow::Result<Exit> {
    match cmd {
        DatasetCommand::Scan {
            pack,
            waivers,
            trajectories,
        } => scan(&pack, waivers, &trajectories),
        DatasetCommand::Release {
            pack,
            name,
            version,
            out,
            license,
            origin,
            allowlist,
            waivers,
            trajectories,
            parents,
            transformations,
        } => {
            let allowlist_path =
                allowlist.or_else(|| beside_pack(&pack, "datasets/allowlist.toml"));
            let allowlist = match allowlist_path {
                Some(p) => Allowlist::load(&p)?,
                None => Allowlist::default(),
            };
            let req = ReleaseRequest {
                pack: &pack,
                name: &name,
                version: &version,
                out: &out,
                license: &license,
                origin: origin.as_deref(),
                allowlist,
                waivers: default_waivers(&pack, waivers)?,
                trajectories,
                parents,
                transformations,
                created: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            };
            write_release(&req)
        }
        DatasetCommand::Verify { release } => verify_release(&release),
        DatasetCommand::Split {
            pack,
            train,
            holdout,
            test,
            seed,
            threshold,
            out,
            packs,
        } => {
            let params = MinHashParams {
                threshold,
                ..MinHashParams::default()
            };
            let ratios = Ratios {
                train,
                holdout,
                test,
            };
            split(&pack, ratios, seed, params, out, packs)
        }
        DatasetCommand::CheckSplits { splits, pack } => check_splits(&splits, pack),
    }
}

/// `scan`: the pack's tasks and the trajectories through the privacy review.
fn scan(pack: &Path, waivers: Option<PathBuf>, trajectories: &[PathBuf]) -> anyhow::Result<Exit> {
    let waivers = default_waivers(pack, waivers)?;
    let loaded = TaskPack::load(pack)?;
    let mut scopes: Vec<(String, &Path)> = loaded
        .tasks
        .iter()
        .map(|t| (t.id.clone(), t.dir.as_path()))
        .collect();
    for t in trajectories {
        scopes.push((format!("trajectory:{}", t.display()), t.as_path()));
    }
    let r = review(&Scanner::new()?, &scopes, &waivers)?;
    for f in &r.findings {
        let d = match &f.disposition {
            Disposition::Open => "OPEN".to_string(),
            Disposition::Policy(why) => format!("policy: {why}"),
            Disposition::Waived(why) => format!("waived: {why}"),
        };
        let g = &f.finding;
        println!(
            "{} {:<15} {}:{}:{} {}  [{}]",
            g.fingerprint, g.rule, g.scope, g.file, g.line, g.excerpt, d
        );
    }
    for w in &r.unused_waivers {
        say!("warning: waiver {w} matches no finding (stale)");
    }
    for f in &r.skipped {
        say!("not scanned (binary): {f}");
    }
    let open = r.open().len();
    println!(
        "{} files scanned, {} binary not scanned, {} findings, {} open",
        r.files_scanned,
        r.skipped.len(),
        r.findings.len(),
        open
    );
    Ok(if open == 0 {
        Exit::Success
    } else {
        Exit::Findings
    })
}

/// `release`: the release written, and where it is and what it is called.
fn write_release(req: &ReleaseRequest<'_>) -> anyhow::Result<Exit> {
    let (dir, manifest) = release(req)?;
    println!(
        "released {} {} ({} tasks) at {}\nrelease_id {}\npack_hash {}",
        manifest.name,
        manifest.version,
        manifest.tasks.len(),
        dir.display(),
        manifest.release_id,
        manifest.pack_hash
    );
    Ok(Exit::Success)
}

/// `verify`: the release re-hashed; every changed task and file named.
fn verify_release(release: &Path) -> anyhow::Result<Exit> {
    let (manifest, problems) = verify(release)?;
    if problems.is_empty() {
        println!(
            "ok: {} {} ({} tasks), release_id {}",
            manifest.name,
            manifest.version,
            manifest.tasks.len(),
            manifest.release_id
        );
        Ok(Exit::Success)
    } else {
        for p in &problems {
            println!("FAIL {p}");
        }
        Ok(Exit::Findings)
    }
}

/// `split`: the splits file (to `out` or stdout) and, when asked, one pack folder per split.
fn split(
    pack: &Path,
    ratios: Ratios,
    seed: u64,
    params: MinHashParams,
    out: Option<PathBuf>,
    packs: Option<PathBuf>,
) -> anyhow::Result<Exit> {
    let file = split_pack(pack, ratios, seed, params)?;
    for (name, list) in &file.splits {
        say!("{name}: {} tasks", list.len());
    }
    match out {
        Some(path) => write_new_json(&path, &file)?,
        None => println!("{}", serde_json::to_string_pretty(&file)?),
    }
    if let Some(dir) = packs {
        for written in write_split_packs(&file, pack, &dir)? {
            say!("wrote {}", written.display());
        }
    }
    Ok(Exit::Success)
}

/// `check-splits`: the splits file against its pack; every mismatch and leak listed.
fn check_splits(splits: &Path, pack: Option<PathBuf>) -> anyhow::Result<Exit> {
    let file = load_splits(splits)?;
    let pack = pack.unwrap_or_else(|| resolve_pack(splits, &file));
    let check = check_against_pack(splits, &file, &pack)?;
    for m in &check.mismatches {
        println!("MISMATCH {m}");
    }
    for l in &check.leaks {
        println!("LEAK {l}");
    }
    if check.is_clean() {
        println!(
            "ok: {} tasks of {} re-derived, no leak across splits",
            check.tasks,
            pack.display()
        );
        Ok(Exit::Success)
    } else {
        Ok(Exit::Findings)
    }
}
