//! Promotion: the final champion against the original baseline on the test pack, under a
//! test-stage contract. A sealed holdout opens through the crucible's burn-once path (the
//! opening is recorded before any trial, and a second opening is refused), so the final
//! decision is made on data nobody tuned to.
//!
//! Before the holdout is touched, the champion is confirmed on the train pack on fresh seeds
//! against the original baseline: the train estimate that made it champion is the largest of
//! several noisy ones and biased upward by that selection (the winner's curse), a fresh one is
//! not. A champion that does not KEEP again is not promoted and the holdout stays sealed for a
//! later search.
//!
//! Writes `<out>/promotion/confirmation/{contract,evidence,decision}.json`,
//! `<out>/promotion/{contract,evidence,decision}.json` and `<out>/promotion.json`
//! (`geode.search.promotion.v1`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use geode_crucible::{DecisionRecord, FrozenContract, Stage, decide};
use serde::{Deserialize, Serialize};

use super::SearchError;
use super::champion::{Env, contract_for, derive_seed, load_resolved, run_train_campaign};
use super::config::SearchConfig;
use super::lineage::{Entry, Lineage};
use crate::crucible::{Campaign, run_campaign, write_atomic};
use crate::crucible::{OpenedPack, open_sealed};
use crate::pack::TaskPack;

pub(crate) const PROMOTION_SCHEMA: &str = "geode.search.promotion.v1";

/// The result of a promotion (`<out>/promotion.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Promotion {
    /// Always `geode.search.promotion.v1`.
    pub schema: String,
    /// The baseline's lineage id.
    pub baseline: String,
    /// The final champion's lineage id.
    pub champion: String,
    /// `false` when the champion is the baseline: nothing was run and no holdout opened.
    pub compared: bool,
    /// KEEP, REJECT, INVALID; `None` when nothing was compared.
    pub verdict: Option<String>,
    /// Whether the champion is promoted: a KEEP on the test pack.
    pub promoted: bool,
    /// Reason codes: the decision's, or why nothing was compared.
    pub reasons: Vec<String>,
    /// The test-stage contract, once frozen.
    pub contract_hash: Option<geode_crucible::ContractHash>,
    /// The hash of the test campaign's evidence.
    pub evidence_hash: Option<geode_crucible::EvidenceHash>,
    /// Point estimate on the test pack: the mean task delta, champion minus baseline.
    pub estimate: Option<f64>,
    /// Mean over tasks of the baseline's per-task means on the test pack.
    pub baseline_mean: Option<f64>,
    /// Mean over tasks of the champion's per-task means on the test pack.
    pub candidate_mean: Option<f64>,
    /// The champion against the baseline on the train pack, on fresh seeds.
    #[serde(default)]
    pub confirmation: Option<Confirmation>,
    /// When the promotion was decided (RFC 3339, UTC).
    pub decided_at: String,
}

/// The champion's train re-estimate on fresh seeds (see the module documentation).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Confirmation {
    /// The confirmation campaign's frozen contract.
    pub contract_hash: geode_crucible::ContractHash,
    /// Its verdict: KEEP, REJECT or INVALID.
    pub verdict: String,
    /// The fresh train estimate (unbiased by the search's selection).
    pub estimate: Option<f64>,
    /// The estimate that made the champion, from its search campaign.
    pub selected_estimate: Option<f64>,
}

/// Compares the final champion with the baseline on the test pack, once.
pub async fn promote(out: &Path, env: &Env) -> Result<Promotion, SearchError> {
    let r = load_resolved(out)?;
    let c = &r.config;
    let summary_path = out.join("promotion.json");
    let dir = out.join("promotion");
    if dir.join("decision.json").is_file() {
        return Err(SearchError::Refused(format!(
            "{} already holds a promotion decision: the holdout is burned once",
            dir.display()
        )));
    }
    let lineage = Lineage::open(out)?;
    let (Some(baseline), Some(champion)) = (lineage.baseline(), lineage.champion()) else {
        return Err(SearchError::Refused(format!(
            "{}: the lineage has no baseline yet",
            out.display()
        )));
    };
    let mut p = Promotion {
        schema: PROMOTION_SCHEMA.into(),
        baseline: baseline.id.clone(),
        champion: champion.id.clone(),
        compared: false,
        verdict: None,
        promoted: false,
        reasons: Vec::new(),
        contract_hash: None,
        evidence_hash: None,
        estimate: None,
        baseline_mean: None,
        candidate_mean: None,
        confirmation: None,
        decided_at: chrono::Utc::now().to_rfc3339(),
    };
    if champion.scaffold_hash == baseline.scaffold_hash {
        // No train KEEP: there is no candidate, and the holdout stays sealed for later use.
        p.reasons.push("no_train_keep".into());
        write_summary(&summary_path, &mut p)?;
        return Ok(p);
    }
    let confirmation = confirm(out, &r, &baseline.scaffold, champion, env).await?;
    let confirmed = confirmation.verdict == "KEEP";
    p.confirmation = Some(confirmation);
    if !confirmed {
        p.reasons.push("champion_not_confirmed".into());
        write_summary(&summary_path, &mut p)?;
        return Ok(p);
    }
    let rule = c.test_rule.clone().unwrap_or_else(|| c.rule.clone());
    let contract = contract_for(
        Stage::Test,
        &baseline.scaffold,
        &champion.scaffold,
        &c.model,
        &r.train_pack_hash,
        &r.test_pack_hash,
        c.test.trials,
        derive_seed(c.seed, 3, 0),
        &rule,
    )?;
    std::fs::create_dir_all(&dir).map_err(|e| SearchError::file(&dir, e))?;
    write_atomic(&dir.join("contract.json"), contract.canonical_json())?;
    let record = decide_on_holdout(out, c, &contract, &dir, baseline, champion, env).await?;
    p.compared = true;
    p.verdict = Some(record.verdict.to_string());
    p.promoted = p.verdict.as_deref() == Some("KEEP");
    p.reasons = record
        .reasons
        .iter()
        .map(|r| r.as_str().to_string())
        .collect();
    p.contract_hash = Some(contract.hash().clone());
    p.evidence_hash = record.evidence_hash.clone();
    if let Some(s) = &record.statistics {
        p.estimate = s.estimate;
        p.baseline_mean = s.baseline_mean;
        p.candidate_mean = s.candidate_mean;
    }
    write_summary(&summary_path, &mut p)?;
    Ok(p)
}

/// The test-stage campaign on the holdout, and its decision, both written to `dir`. A sealed
/// holdout's opening is closed with the decision, or without one if the campaign failed.
async fn decide_on_holdout(
    out: &Path,
    c: &SearchConfig,
    contract: &FrozenContract,
    dir: &Path,
    baseline: &Entry,
    champion: &Entry,
    env: &Env,
) -> Result<DecisionRecord, SearchError> {
    let trials = dir.join("campaign");
    let plan = crate::crucible::preflight::Plan {
        baseline: &baseline.scaffold,
        candidate: &champion.scaffold,
        allow_infeasible: c.allow_infeasible,
        trials: &trials,
    };
    let (opened, plain_pack) = test_pack(c, contract, out, &plan)?;
    let Some(pack) = opened.as_ref().map(|o| &o.pack).or(plain_pack.as_ref()) else {
        return Err(SearchError::Refused("no test pack configured".into()));
    };
    let campaign = Campaign {
        contract,
        pack,
        baseline: Arc::new(baseline.scaffold.clone()),
        candidate: Arc::new(champion.scaffold.clone()),
        dir: trials.clone(),
        concurrency: c.concurrency,
        timeout_multiplier: env.timeout_multiplier,
        replication: None,
        attestation: opened.as_ref().map(|o| o.attestation.clone()),
        sealed_paths: opened
            .as_ref()
            .map(|o| o.sealed_paths())
            .unwrap_or_default(),
        slurm: None,
        allow_infeasible: c.allow_infeasible,
    };
    // A sealed holdout's environments are built into its store in memory.
    let backend = match &opened {
        Some(o) => match (env.backend_over)(&o.image_store()) {
            Ok(b) => b,
            Err(e) => {
                if let Some(o) = opened {
                    o.close(None)?;
                }
                return Err(SearchError::Refused(format!("the holdout's backend: {e}")));
            }
        },
        None => env.backend.clone(),
    };
    let result = run_campaign(&campaign, backend, env.observer.clone(), env.cancel.clone()).await;
    let evidence = match result {
        Ok(e) => e,
        Err(e) => {
            if let Some(o) = opened {
                o.close(None)?;
            }
            return Err(e.into());
        }
    };
    let text = serde_json::to_string_pretty(&evidence).map_err(|e| SearchError::file(dir, e))?;
    write_atomic(&dir.join("evidence.json"), &text)?;
    let mut record = decide(contract, &evidence);
    if let Some(o) = &opened {
        o.mark(&mut record);
    }
    let json = record.to_json().map_err(SearchError::Record)?;
    write_atomic(&dir.join("decision.json"), &json)?;
    if let Some(o) = opened {
        o.close(Some(&record))?;
    }
    Ok(record)
}

/// The test pack: a sealed one opened (burning its opening) for `contract`, or a plain one.
fn test_pack(
    c: &SearchConfig,
    contract: &FrozenContract,
    out: &Path,
    plan: &crate::crucible::preflight::Plan<'_>,
) -> Result<(Option<OpenedPack>, Option<TaskPack>), SearchError> {
    match (&c.test.sealed, &c.test.key, &c.test.pack) {
        (Some(state), Some(key), _) => {
            let commitments = c
                .test
                .commitments
                .clone()
                .unwrap_or_else(|| PathBuf::from("datasets/commitments"));
            Ok((
                Some(open_sealed(contract, state, key, &commitments, out, plan)?),
                None,
            ))
        }
        (_, _, Some(plain)) => Ok((
            None,
            Some(TaskPack::load(plain).map_err(SearchError::Pack)?),
        )),
        _ => Err(SearchError::Refused("no test pack configured".into())),
    }
}

/// Runs (or, after an interruption, reads back) the champion's confirmation on train.
async fn confirm(
    out: &Path,
    r: &super::champion::Resolved,
    baseline: &geode_runtime::scaffold::Scaffold,
    champion: &super::lineage::Entry,
    env: &Env,
) -> Result<Confirmation, SearchError> {
    let c = &r.config;
    let dir = out.join("promotion").join("confirmation");
    // One test of one hypothesis: the rule's own confidence, no share of the search's alpha.
    let contract = contract_for(
        Stage::Train,
        baseline,
        &champion.scaffold,
        &c.model,
        &r.train_pack_hash,
        &r.test_pack_hash,
        c.trials,
        derive_seed(c.seed, 4, 0),
        &c.rule,
    )?;
    let decision_path = dir.join("decision.json");
    let record = match std::fs::read_to_string(&decision_path) {
        Ok(text) => geode_crucible::DecisionRecord::from_json(&text)
            .map_err(|e| SearchError::file(&decision_path, e))?,
        Err(_) => {
            // An interrupted confirmation is no evidence: its trials are replaced.
            if dir.exists() {
                std::fs::remove_dir_all(&dir).map_err(|e| SearchError::file(&dir, e))?;
            }
            std::fs::create_dir_all(&dir).map_err(|e| SearchError::file(&dir, e))?;
            write_atomic(&dir.join("contract.json"), contract.canonical_json())?;
            let train = TaskPack::load(&c.train).map_err(SearchError::Pack)?;
            let ran = run_train_campaign(
                &contract,
                &train,
                baseline,
                &champion.scaffold,
                &dir,
                c,
                env,
            )
            .await?;
            let Some((_, record)) = ran else {
                return Err(SearchError::Refused(
                    "the champion's confirmation was interrupted; promote again to rerun it".into(),
                ));
            };
            record
        }
    };
    Ok(Confirmation {
        contract_hash: contract.hash().clone(),
        verdict: record.verdict.to_string(),
        estimate: record.statistics.as_ref().and_then(|s| s.estimate),
        selected_estimate: champion.estimate,
    })
}

/// Writes the summary, stamped now: after the decision it reports (and the holdout's opening
/// under it), never before.
fn write_summary(path: &Path, p: &mut Promotion) -> Result<(), SearchError> {
    p.decided_at = chrono::Utc::now().to_rfc3339();
    let text = serde_json::to_string_pretty(p).map_err(|e| SearchError::file(path, e))?;
    write_atomic(path, &text)?;
    Ok(())
}
