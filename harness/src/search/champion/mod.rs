//! The champion loop: the baseline is recorded, then each candidate (one mutation with a
//! hypothesis) is compared in paired trials with the current champion on the train pack,
//! under its own frozen contract; a train KEEP makes it the champion.
//!
//! Output folder:
//! - `search.json`: the resolved configuration (a restart must name the same search);
//! - `lineage.jsonl`: one line per decided proposal (the state a restart resumes from);
//! - `candidates/<id>/`: `proposal.json`, `scaffold.toml`, `contract.json`, `evidence.json`,
//!   `decision.json` and the trial folders under `campaign/`.
//!
//! A kill leaves at most one candidate without a lineage line; on restart its proposal is read
//! back and its campaign resumed: the trials it finished are kept with their cost and wall
//! time (the campaign's `trials.jsonl`), the rest run.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use geode_crucible::{DecisionRecord, Stage, decide};
use geode_runtime::scaffold::Scaffold;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::SearchError;
use super::config::SearchConfig;
pub use super::contract::{contract_for, derive_seed};
use super::lineage::{Entry, EntryKind, LINEAGE_SCHEMA, Lineage, Spent};
use super::mutate::PolicyKind;
use super::proposer::{Proposer, failure_codes};
use crate::crucible::preflight::{self, PlannedPack};
use crate::crucible::{Campaign, run_campaign, write_atomic};
use crate::env::Backend;
use crate::pack::TaskPack;
use crate::rollout::trial::PhaseObserver;

mod proposal;
mod resolve;

pub use proposal::{PROPOSAL_SCHEMA, ProposalFile};
pub use resolve::{RESOLVED_SCHEMA, Resolved, load_resolved, prepare};

/// Why the loop stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The budget of evaluated candidates is spent.
    CandidateBudget,
    /// The campaigns' summed wall clock passed its budget.
    WallBudget,
    /// The campaigns' summed tokens passed their budget.
    TokenBudget,
    /// The campaigns' summed cost passed its budget.
    CostBudget,
    /// Too many INVALID verdicts in a row.
    ConsecutiveInvalid,
    /// Too many proposals in a row refused without trials.
    ConsecutiveRejected,
    /// No unseen candidate is left around the champion.
    SpaceExhausted,
    /// The search was cancelled; a restart resumes it.
    Interrupted,
}

/// How a search ended, as its last log line says it.
#[derive(Debug, Clone, Serialize)]
pub struct SearchSummary {
    /// Why the loop stopped.
    pub stop: StopReason,
    /// The champion's id (`c0000` is the baseline); empty if nothing was recorded.
    pub champion: String,
    /// Candidates compared through the crucible, over all restarts.
    pub evaluated: usize,
    /// Of those, how many got a train KEEP.
    pub keeps: usize,
}

/// What a search needs besides its configuration.
pub struct Env {
    /// The sandbox backend the trials run in.
    pub backend: Arc<dyn Backend>,
    /// Told of every trial's phases (progress display).
    pub observer: Arc<dyn PhaseObserver>,
    /// Stops the search between (or within) campaigns; an interrupted campaign decides nothing.
    pub cancel: CancellationToken,
    /// Scales every trial's timeouts (1.0 keeps the tasks' own).
    pub timeout_multiplier: f64,
    /// `Some`: the train campaigns run on Slurm, a pair per array task (`crucible::remote`).
    pub slurm: Option<crate::rollout::slurm::SlurmSettings>,
    /// The backend of a sealed campaign, building into the store given (in memory) over the
    /// machine's.
    pub backend_over: BackendOver,
}

/// Makes a backend that builds into a given image store over the machine's.
pub type BackendOver = Arc<dyn Fn(&Path) -> Result<Arc<dyn Backend>, String> + Send + Sync>;

fn id_of(index: usize) -> String {
    format!("c{index:04}")
}

/// Runs `contract` on the train pack (`baseline` against `candidate`) with its trials under
/// `dir/campaign`, and writes `dir/evidence.json` and `dir/decision.json`. `None` when the
/// search was cancelled: an interrupted campaign is no evidence, so nothing is decided.
pub(super) async fn run_train_campaign(
    contract: &geode_crucible::FrozenContract,
    train: &TaskPack,
    baseline: &Scaffold,
    candidate: &Scaffold,
    dir: &Path,
    c: &SearchConfig,
    env: &Env,
) -> Result<Option<(geode_crucible::Evidence, DecisionRecord)>, SearchError> {
    let campaign = Campaign {
        contract,
        pack: train,
        baseline: Arc::new(baseline.clone()),
        candidate: Arc::new(candidate.clone()),
        dir: dir.join("campaign"),
        concurrency: c.concurrency,
        timeout_multiplier: env.timeout_multiplier,
        replication: None,
        attestation: None,
        sealed_paths: Vec::new(),
        slurm: env.slurm.clone(),
        allow_infeasible: c.allow_infeasible,
    };
    let evidence = run_campaign(
        &campaign,
        env.backend.clone(),
        env.observer.clone(),
        env.cancel.clone(),
    )
    .await?;
    if env.cancel.is_cancelled() {
        return Ok(None);
    }
    json_file(&dir.join("evidence.json"), &evidence)?;
    let record = decide(contract, &evidence);
    write_atomic(
        &dir.join("decision.json"),
        &record.to_json().map_err(SearchError::Record)?,
    )?;
    Ok(Some((evidence, record)))
}

fn json_file<T: Serialize>(path: &Path, v: &T) -> Result<(), SearchError> {
    let text = serde_json::to_string_pretty(v).map_err(|e| SearchError::file(path, e))?;
    write_atomic(path, &text)?;
    Ok(())
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339()
}

fn stop_reason(c: &SearchConfig, lineage: &Lineage) -> Option<StopReason> {
    let b = &c.budgets;
    let spent = lineage.spent();
    if lineage.evaluated().count() as u32 >= b.candidates {
        Some(StopReason::CandidateBudget)
    } else if spent.wall_seconds > b.wall_seconds {
        Some(StopReason::WallBudget)
    } else if spent.tokens > b.tokens {
        Some(StopReason::TokenBudget)
    } else if spent.cost_usd > b.cost_usd {
        Some(StopReason::CostBudget)
    } else if lineage.trailing(|e| e.verdict.as_deref() == Some("INVALID"))
        >= b.max_consecutive_invalid
    {
        Some(StopReason::ConsecutiveInvalid)
    } else if lineage.trailing(|e| e.kind == EntryKind::Rejected) >= b.max_consecutive_rejected {
        Some(StopReason::ConsecutiveRejected)
    } else {
        None
    }
}

fn base_entry(
    id: String,
    kind: EntryKind,
    policy: &str,
    scaffold: Scaffold,
    champion: String,
) -> Entry {
    Entry {
        schema: LINEAGE_SCHEMA.into(),
        id,
        kind,
        parent: None,
        against: None,
        policy: policy.into(),
        mutation: None,
        hypothesis: None,
        scaffold_hash: scaffold.hash(),
        scaffold,
        contract_hash: None,
        evidence_hash: None,
        verdict: None,
        reasons: Vec::new(),
        baseline_mean: None,
        candidate_mean: None,
        estimate: None,
        lower_bound: None,
        rejection: None,
        champion,
        spent: Spent::default(),
        failures: BTreeMap::new(),
        recorded_at: now(),
    }
}

/// A unit enum's name as files spell it (`grid`, `candidate_budget`, ...).
fn serde_name<T: Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The policy's name as the config spells it (`grid`, `random`, ...).
pub fn policy_name(p: PolicyKind) -> String {
    serde_name(&p)
}

/// Refuses, before the first trial, a search whose candidates' rule cannot KEEP on the train
/// pack or whose promotion rule cannot KEEP on the test pack, whatever the trials show; else
/// says what each campaign can expect. With `allow_infeasible`, nothing here stops the search
/// (a design it cannot even freeze a contract for fails at its first campaign, as before).
fn check_designs(
    r: &Resolved,
    train: &TaskPack,
    log: &mut dyn FnMut(&str),
) -> Result<(), SearchError> {
    match outlooks(r, train, log) {
        Err(e) if r.config.allow_infeasible => {
            tracing::debug!("no outlook of the search's designs: {e}");
            Ok(())
        }
        other => other,
    }
}

fn outlooks(r: &Resolved, train: &TaskPack, log: &mut dyn FnMut(&str)) -> Result<(), SearchError> {
    let c = &r.config;
    let base = c.baseline_scaffold()?;
    let probe = |stage, trials, rule: &super::config::Rule| {
        contract_for(
            stage,
            &base,
            &base,
            &c.model,
            &r.train_pack_hash,
            &r.test_pack_hash,
            trials,
            0,
            rule,
        )
    };
    let per_candidate = c.rule.per_candidate(c.budgets.candidates);
    let train_contract = probe(Stage::Train, c.trials, &per_candidate)?;
    let train_pack = PlannedPack::Loaded(train);
    log(&format!(
        "train campaigns: {}",
        preflight::outlook(&train_contract, &train_pack)
    ));
    preflight::check_design(&train_contract, &train_pack, c.allow_infeasible)
        .map_err(|e| SearchError::Refused(format!("train campaigns: {e}")))?;
    let test_rule = c.test_rule.clone().unwrap_or_else(|| c.rule.clone());
    let test_contract = probe(Stage::Test, c.test.trials, &test_rule)?;
    let plain;
    let test = match (&c.test.sealed, &c.test.pack) {
        (Some(state), _) => {
            let commitments = c
                .test
                .commitments
                .clone()
                .unwrap_or_else(|| std::path::PathBuf::from("datasets/commitments"));
            let (_, tasks) = crate::crucible::open::sealed_size(state, &commitments)?;
            PlannedPack::Sealed {
                pack_hash: &r.test_pack_hash,
                tasks,
            }
        }
        (None, Some(pack)) => {
            plain = TaskPack::load(pack).map_err(SearchError::Pack)?;
            PlannedPack::Loaded(&plain)
        }
        (None, None) => return Ok(()),
    };
    log(&format!(
        "the promotion: {}",
        preflight::outlook(&test_contract, &test)
    ));
    preflight::check_design(&test_contract, &test, c.allow_infeasible)
        .map_err(|e| SearchError::Refused(format!("the promotion: {e}")))?;
    Ok(())
}

/// Runs (or resumes) the search until a budget stops it. `log` receives one line per event.
pub async fn run_search(
    config: &SearchConfig,
    env: &Env,
    log: &mut dyn FnMut(&str),
) -> Result<SearchSummary, SearchError> {
    let r = prepare(config)?;
    let c = &r.config;
    let train = TaskPack::load(&c.train).map_err(SearchError::Pack)?;
    check_designs(&r, &train, log)?;
    let mut lineage = Lineage::open(&c.out)?;
    if lineage.baseline().is_none() {
        let b = base_entry(
            id_of(0),
            EntryKind::Baseline,
            "baseline",
            c.baseline_scaffold()?,
            id_of(0),
        );
        log(&format!("baseline {} recorded", &b.scaffold_hash[..12]));
        lineage.append(b)?;
    } else {
        log(&format!(
            "resuming: {} lineage entries",
            lineage.entries.len()
        ));
    }
    let proposer = match (&c.policy, &c.proposer) {
        (PolicyKind::Model, Some(route)) => Some(Proposer::from_route(route)?),
        _ => None,
    };
    let stop = loop {
        if env.cancel.is_cancelled() {
            break StopReason::Interrupted;
        }
        if let Some(s) = stop_reason(c, &lineage) {
            break s;
        }
        let champion = lineage
            .champion()
            .cloned()
            .ok_or_else(|| SearchError::Refused("the lineage has no champion".into()))?;
        let index = lineage.entries.len();
        let id = id_of(index);
        let dir = c.out.join("candidates").join(&id);
        let proposal =
            match proposal::next_proposal(&r, &lineage, &champion, index, proposer.as_ref(), &dir)
                .await?
            {
                None => break StopReason::SpaceExhausted,
                Some(Ok(p)) => p,
                Some(Err((why, p))) => {
                    log(&format!("{id} refused without trials: {why}"));
                    let mut e = base_entry(
                        id,
                        EntryKind::Rejected,
                        &policy_name(c.policy),
                        p.as_ref()
                            .map(|p| p.scaffold.clone())
                            .unwrap_or_else(|| champion.scaffold.clone()),
                        champion.id.clone(),
                    );
                    e.parent = Some(champion.id.clone());
                    e.mutation = p.as_ref().map(|p| p.mutation.clone());
                    e.hypothesis = p.map(|p| p.hypothesis);
                    e.rejection = Some(why);
                    lineage.append(e)?;
                    continue;
                }
            };
        let entry = evaluate(&r, &train, &champion, &proposal, &dir, env, log).await?;
        let Some(entry) = entry else {
            break StopReason::Interrupted;
        };
        lineage.append(entry)?;
    };
    let champion = lineage.champion().map(|e| e.id.clone()).unwrap_or_default();
    let summary = SearchSummary {
        stop,
        champion,
        evaluated: lineage.evaluated().count(),
        keeps: lineage.evaluated().filter(|e| e.is_keep()).count(),
    };
    log(&format!(
        "stopped ({}): {} evaluated, {} kept, champion {}",
        serde_name(&summary.stop),
        summary.evaluated,
        summary.keeps,
        summary.champion
    ));
    Ok(summary)
}

/// One candidate's campaign against the champion; `None` if it was interrupted.
async fn evaluate(
    r: &Resolved,
    train: &TaskPack,
    champion: &Entry,
    p: &ProposalFile,
    dir: &Path,
    env: &Env,
    log: &mut dyn FnMut(&str),
) -> Result<Option<Entry>, SearchError> {
    let c = &r.config;
    std::fs::create_dir_all(dir).map_err(|e| SearchError::file(dir, e))?;
    json_file(&dir.join("proposal.json"), p)?;
    let toml_text = toml::to_string(&p.scaffold).map_err(|e| SearchError::file(dir, e))?;
    write_atomic(&dir.join("scaffold.toml"), &toml_text)?;
    // An interrupted campaign's finished trials are kept (its journal, `crucible::campaign`): the
    // contract below is the same one, so they are the trials it would run again.
    for f in ["evidence.json", "decision.json"] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    let index = p.id.trim_start_matches('c').parse::<u64>().unwrap_or(0);
    let contract = contract_for(
        Stage::Train,
        &champion.scaffold,
        &p.scaffold,
        &c.model,
        &r.train_pack_hash,
        &r.test_pack_hash,
        c.trials,
        derive_seed(c.seed, 2, index),
        &c.rule.per_candidate(c.budgets.candidates),
    )?;
    write_atomic(&dir.join("contract.json"), contract.canonical_json())?;
    log(&format!(
        "{} {} (parent {}, against {}): {}",
        p.id, p.mutation, p.parent, p.against, p.hypothesis
    ));
    let Some((evidence, record)) = run_train_campaign(
        &contract,
        train,
        &champion.scaffold,
        &p.scaffold,
        dir,
        c,
        env,
    )
    .await?
    else {
        return Ok(None);
    };
    let verdict = record.verdict.to_string();
    let keep = verdict == "KEEP";
    let mut e = base_entry(
        p.id.clone(),
        EntryKind::Candidate,
        &policy_name(p.policy),
        p.scaffold.clone(),
        if keep {
            p.id.clone()
        } else {
            champion.id.clone()
        },
    );
    e.parent = Some(p.parent.clone());
    e.against = Some(p.against.clone());
    e.mutation = Some(p.mutation.clone());
    e.hypothesis = Some(p.hypothesis.clone());
    e.contract_hash = Some(contract.hash().clone());
    fill_from_record(&mut e, &record);
    e.failures = failure_codes(&evidence, &record);
    e.spent = Spent {
        wall_seconds: evidence.usage.wall_seconds,
        tokens: evidence.usage.tokens,
        cost_usd: evidence.usage.cost_usd,
    };
    let show = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.3}"));
    log(&format!(
        "{} verdict {} (champion {} candidate {} estimate {})",
        p.id,
        verdict,
        show(e.baseline_mean),
        show(e.candidate_mean),
        show(e.estimate)
    ));
    Ok(Some(e))
}

/// Copies the verdict, reasons and headline statistics of a decision into a lineage entry.
pub fn fill_from_record(e: &mut Entry, record: &DecisionRecord) {
    e.evidence_hash = record.evidence_hash.clone();
    e.verdict = Some(record.verdict.to_string());
    e.reasons = record
        .reasons
        .iter()
        .map(|r| r.as_str().to_string())
        .collect();
    if let Some(s) = &record.statistics {
        e.baseline_mean = s.baseline_mean;
        e.candidate_mean = s.candidate_mean;
        e.estimate = s.estimate;
        e.lower_bound = s.lower_bound;
    }
}
