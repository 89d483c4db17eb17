//! `geode crucible run`: a contract's paired campaign on its stage's pack (a train pack, or a
//! sealed test pack opened once for it), then its decision.

use crate::cli::exit::Exit;
use std::path::Path;
use std::sync::Arc;

use anyhow::bail;
use geode_crucible::{DecisionRecord, FrozenContract, Stage, decide};
use geode_harness::crucible::preflight::{self, PlannedPack};
use geode_harness::crucible::{Campaign, run_campaign, write_atomic};
use geode_harness::pack::TaskPack;
use geode_runtime::scaffold::Scaffold;
use tokio_util::sync::CancellationToken;

use super::super::run::ExecutorKind;
use super::super::terminal::progress::Progress;
use super::{RunArgs, exit, load_contract, load_scaffold, print_record};

pub(super) async fn run_contract(a: RunArgs) -> anyhow::Result<Exit> {
    let contract = load_contract(&a.contract)?;
    // Before anything is opened: a sealed pack's opening is burned on disk.
    if contract.contract().stage == Stage::Test && a.executor.executor == ExecutorKind::Slurm {
        bail!(
            "--executor slurm runs train-stage contracts only: a sealed test pack is opened in a \
             vault on this machine, which the cluster's nodes cannot read"
        );
    }
    let campaign_dir = a
        .jobs_dir
        .join("crucible")
        .join(&contract.hash().to_string()[..16]);
    if campaign_dir.join("decision.json").exists() {
        bail!(
            "{} already holds a decision for this contract: the first result stands",
            campaign_dir.display()
        );
    }
    std::fs::create_dir_all(&campaign_dir)?;
    write_atomic(
        &campaign_dir.join("contract.json"),
        contract.canonical_json(),
    )?;
    let baseline = Arc::new(load_scaffold(&a.baseline_scaffold)?);
    let candidate = Arc::new(load_scaffold(&a.candidate_scaffold)?);
    let cancel = CancellationToken::new();
    crate::cli::run::cancel_on_signals(cancel.clone());
    match contract.contract().stage {
        Stage::Train => {
            let Some(pack) = &a.pack else {
                bail!("a train-stage contract needs --pack")
            };
            let pack = TaskPack::load(pack)?;
            say!(
                "{}",
                preflight::outlook(&contract, &PlannedPack::Loaded(&pack))
            );
            let record = campaign(
                &contract,
                &pack,
                baseline,
                candidate,
                &campaign_dir,
                &a,
                None,
                cancel,
            )
            .await?;
            Ok(exit(&record))
        }
        Stage::Test => {
            let (Some(state_path), Some(key_path)) = (&a.sealed, &a.key) else {
                bail!(
                    "a test-stage contract runs on a sealed pack: pass --sealed STATE and --key FILE"
                );
            };
            let (pack_hash, tasks) =
                geode_harness::crucible::open::sealed_size(state_path, &a.commitments)?;
            let sealed = PlannedPack::Sealed {
                pack_hash: &pack_hash,
                tasks,
            };
            say!(
                "{} (families are sealed)",
                preflight::outlook(&contract, &sealed)
            );
            // The opening is burned on disk before the first trial (crucible::open).
            let opened = geode_harness::crucible::open_sealed(
                &contract,
                state_path,
                key_path,
                &a.commitments,
                &a.jobs_dir,
                &preflight::Plan {
                    baseline: &baseline,
                    candidate: &candidate,
                    allow_infeasible: a.allow_infeasible,
                    trials: &campaign_dir.join("trials"),
                },
            )?;
            // Published somewhere this machine cannot rewrite (a commit, a post), it shows the
            // opening even if the machine's ledger is later deleted.
            let receipt = opened.receipt();
            say!(
                "holdout receipt: content {} opened for contract {}; holdout ledger head {}",
                receipt.content,
                contract.hash(),
                receipt.head
            );
            let result = campaign(
                &contract,
                &opened.pack,
                baseline,
                candidate,
                &campaign_dir,
                &a,
                Some(&opened),
                cancel,
            )
            .await;
            let record = match result {
                Ok(r) => r,
                Err(e) => {
                    opened.close(None)?;
                    return Err(e);
                }
            };
            opened.close(Some(&record))?;
            Ok(exit(&record))
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn campaign(
    contract: &FrozenContract,
    pack: &TaskPack,
    baseline: Arc<Scaffold>,
    candidate: Arc<Scaffold>,
    dir: &Path,
    a: &RunArgs,
    opened: Option<&geode_harness::crucible::OpenedPack>,
    cancel: CancellationToken,
) -> anyhow::Result<DecisionRecord> {
    let backend = match opened {
        Some(o) => super::super::backends::sandbox_over(&a.jobs_dir, &o.image_store())?,
        None => super::super::backends::sandbox(&a.jobs_dir)?,
    };
    let c = Campaign {
        contract,
        pack,
        baseline,
        candidate,
        // A sealed campaign's trials stay in memory until they are sealed at its close.
        dir: opened.map_or_else(|| dir.to_path_buf(), |o| o.trials_dir().to_path_buf()),
        concurrency: a.concurrency,
        timeout_multiplier: a.timeout_multiplier,
        replication: None,
        attestation: opened.map(|o| o.attestation.clone()),
        sealed_paths: opened.map(|o| o.sealed_paths()).unwrap_or_default(),
        slurm: a.executor.slurm_settings()?,
        allow_infeasible: a.allow_infeasible,
    };
    let evidence = run_campaign(&c, backend, Arc::new(Progress::new()), cancel).await?;
    write_atomic(
        &dir.join("evidence.json"),
        &serde_json::to_string_pretty(&evidence)?,
    )?;
    let mut record = decide(contract, &evidence);
    if let Some(o) = opened {
        o.mark(&mut record);
    }
    write_atomic(&dir.join("decision.json"), &record.to_json()?)?;
    print_record(&record);
    Ok(record)
}
