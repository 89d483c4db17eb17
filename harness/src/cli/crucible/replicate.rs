//! `geode crucible replicate`: a decided campaign run again under a fresh seed, compared
//! with the original; every replication is logged before its first trial, so none goes
//! unrecorded.

use crate::cli::exit::Exit;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use geode_crucible::{DecisionRecord, FrozenContract, compare_decisions, decide};
use geode_harness::crucible::{Campaign, run_campaign, write_atomic};
use geode_harness::pack::TaskPack;
use tokio_util::sync::CancellationToken;

use super::super::terminal::progress::Progress;
use super::{ReplicateArgs, load_contract, load_scaffold};

pub(super) async fn replicate(a: ReplicateArgs) -> anyhow::Result<Exit> {
    let contract = load_contract(&a.campaign.join("contract.json"))?;
    let p = a.campaign.join("decision.json");
    let original = DecisionRecord::from_json(
        &std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?,
    )
    .with_context(|| format!("decision {}", p.display()))?;
    let jobs_dir = a
        .campaign
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("jobs"));
    let log = a.campaign.join(REPLICATIONS_LOG);
    let index = next_index(&a, &read_replications(&log)?, &log)?;
    let dir = a.campaign.join(format!("replication-{index}"));
    std::fs::create_dir_all(&dir)?;
    // Recorded before the first trial: a replication that never finishes still counts.
    append_replication(
        &log,
        &ReplicationEntry {
            index,
            at: chrono::Utc::now().to_rfc3339(),
            report: None,
        },
    )?;
    let replica = run_replica(&a, &contract, index, &dir, &jobs_dir).await?;
    let report = compare_decisions(&original, &replica)?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    let agreed = report.verdict_replicated;
    append_replication(
        &log,
        &ReplicationEntry {
            index,
            at: chrono::Utc::now().to_rfc3339(),
            report: Some(report),
        },
    )?;
    say_how_many_agree(&log, index, agreed, &original)?;
    // The exit code says whether this replication agrees, not what it decided: a replica that
    // KEEPs where the original REJECTed is a failure to replicate.
    Ok(if agreed {
        Exit::Success
    } else {
        Exit::NotReplicated
    })
}

/// The replication's index: `--index` when it is free, else the one after the last recorded.
fn next_index(a: &ReplicateArgs, recorded: &[ReplicationEntry], log: &Path) -> anyhow::Result<u32> {
    Ok(match a.index {
        Some(0) => bail!("--index 0: replications count from 1 (0 is the original run)"),
        Some(k) if recorded.iter().any(|r| r.index == k) => bail!(
            "replication {k} of {} is already recorded in {}: every replication counts, none is \
             run again",
            a.campaign.display(),
            log.display()
        ),
        Some(k) => k,
        None => recorded.iter().map(|r| r.index).max().unwrap_or(0) + 1,
    })
}

/// The campaign run again in `dir` under the replication's seed, and its decision.
async fn run_replica(
    a: &ReplicateArgs,
    contract: &FrozenContract,
    index: u32,
    dir: &Path,
    jobs_dir: &Path,
) -> anyhow::Result<DecisionRecord> {
    let pack = TaskPack::load(&a.pack)?;
    let backend = super::super::backends::sandbox(jobs_dir)?;
    let c = Campaign {
        contract,
        pack: &pack,
        baseline: Arc::new(load_scaffold(&a.baseline_scaffold)?),
        candidate: Arc::new(load_scaffold(&a.candidate_scaffold)?),
        dir: dir.to_path_buf(),
        concurrency: a.concurrency,
        timeout_multiplier: 1.0,
        replication: Some(index),
        attestation: None,
        sealed_paths: Vec::new(),
        slurm: None,
        // The design was run once already: a replication repeats it as it was.
        allow_infeasible: true,
    };
    let evidence = run_campaign(
        &c,
        backend,
        Arc::new(Progress::new()),
        CancellationToken::new(),
    )
    .await?;
    write_atomic(
        &dir.join("evidence.json"),
        &serde_json::to_string_pretty(&evidence)?,
    )?;
    let replica = decide(contract, &evidence);
    write_atomic(&dir.join("decision.json"), &replica.to_json()?)?;
    Ok(replica)
}

/// On stderr: this replication's verdict, and how many of all started agree with the original.
fn say_how_many_agree(
    log: &Path,
    index: u32,
    agreed: bool,
    original: &DecisionRecord,
) -> anyhow::Result<()> {
    let all = read_replications(log)?;
    let finished: Vec<_> = all.iter().filter_map(|r| r.report.as_ref()).collect();
    let agreeing = finished.iter().filter(|r| r.verdict_replicated).count();
    let started = all
        .iter()
        .map(|r| r.index)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    say!(
        "replication {index}: the verdict {}; of {started} replications started, {} finished \
         and {agreeing} agree with the original {}",
        if agreed {
            "replicated"
        } else {
            "did NOT replicate"
        },
        finished.len(),
        original.verdict
    );
    Ok(())
}

/// Every replication of a campaign, one JSON line when it starts and one when it is compared.
const REPLICATIONS_LOG: &str = "replications.jsonl";

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ReplicationEntry {
    index: u32,
    at: String,
    /// `None` on the line written when the replication starts.
    report: Option<geode_crucible::ReplicationReport>,
}

fn read_replications(path: &Path) -> anyhow::Result<Vec<ReplicationEntry>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).with_context(|| format!("{} line {}", path.display(), i + 1))
        })
        .collect()
}

fn append_replication(path: &Path, entry: &ReplicationEntry) -> anyhow::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    writeln!(f, "{}", serde_json::to_string(entry)?)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", path.display()))
}
