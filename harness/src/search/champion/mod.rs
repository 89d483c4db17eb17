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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use geode_crucible::{DecisionRecord, Stage, decide};
use geode_runtime::scaffold::Scaffold;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::SearchError;
use super::config::SearchConfig;
pub use super::contract::{contract_for, derive_seed};
use super::lineage::{Entry, EntryKind, LINEAGE_SCHEMA, Lineage, Spent};
use super::mutate::{Member, PolicyKind, Proposal, propose};
use super::proposer::{Proposer, failure_codes};
use super::space::{SearchSpace, apply};
use crate::crucible_ops::evaluator;
use crate::crucible_run::{Campaign, pack_hash, run_campaign, write_atomic};
use crate::env::Backend;
use crate::pack::TaskPack;
use crate::rollout::trial::PhaseObserver;
use crate::sealing;

pub const PROPOSAL_SCHEMA: &str = "geode.search.proposal.v1";
pub const RESOLVED_SCHEMA: &str = "geode.search.resolved.v1";

/// A proposal written before its campaign, so an interrupted candidate is re-run unchanged.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProposalFile {
    pub schema: String,
    pub id: String,
    pub parent: String,
    pub against: String,
    pub policy: PolicyKind,
    pub mutation: super::space::Mutation,
    pub hypothesis: String,
    pub scaffold: Scaffold,
}

/// The resolved configuration kept in the output folder.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Resolved {
    pub schema: String,
    pub config: SearchConfig,
    pub space: SearchSpace,
    pub train_pack_hash: String,
    pub test_pack_hash: String,
}

/// Why the loop stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    CandidateBudget,
    WallBudget,
    TokenBudget,
    CostBudget,
    ConsecutiveInvalid,
    ConsecutiveRejected,
    SpaceExhausted,
    Interrupted,
}

#[derive(Debug, Clone, Serialize)]
pub struct SearchSummary {
    pub stop: StopReason,
    pub champion: String,
    pub evaluated: usize,
    pub keeps: usize,
}

/// What a search needs besides its configuration.
pub struct Env {
    pub backend: Arc<dyn Backend>,
    pub observer: Arc<dyn PhaseObserver>,
    pub cancel: CancellationToken,
    pub timeout_multiplier: f64,
}

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
        &record
            .to_json()
            .map_err(|e| SearchError::Contract(e.to_string()))?,
    )?;
    Ok(Some((evidence, record)))
}

fn json_file<T: Serialize>(path: &Path, v: &T) -> Result<(), SearchError> {
    let text = serde_json::to_string_pretty(v).map_err(|e| SearchError::file(path, e))?;
    write_atomic(path, &text)?;
    Ok(())
}

/// Resolves and checks the configuration, the space and the frozen parts, and pins them in
/// `<out>/search.json` (a restart with another configuration is refused).
pub fn prepare(config: &SearchConfig) -> Result<Resolved, SearchError> {
    let space = SearchSpace::load(&config.space)?;
    let train = TaskPack::load(&config.train).map_err(|e| SearchError::Pack(e.to_string()))?;
    let train_hash = pack_hash(&train, config.trials)?.to_string();
    let test_hash = match (&config.test.sealed, &config.test.pack) {
        (Some(state), _) => sealing::load_state(state)?.pack_hash.to_string(),
        (None, Some(p)) => {
            let pack = TaskPack::load(p).map_err(|e| SearchError::Pack(e.to_string()))?;
            pack_hash(&pack, config.test.trials)?.to_string()
        }
        (None, None) => return Err(SearchError::Refused("no test pack".into())),
    };
    let frozen = &space.frozen;
    let check = |field: &str, pinned: &Option<String>, actual: &str| match pinned {
        Some(p) if p != actual => Err(SearchError::Field {
            path: config.space.display().to_string(),
            field: format!("frozen.{field}"),
            message: format!("pinned {p:?} but the search uses {actual:?}"),
        }),
        _ => Ok(()),
    };
    check("train_pack", &frozen.train_pack, &train_hash)?;
    check("test_pack", &frozen.test_pack, &test_hash)?;
    check("model", &frozen.model, &config.model)?;
    check(
        "evaluator_version",
        &frozen.evaluator_version,
        &evaluator().binary_version,
    )?;
    // Fail early on an unreadable baseline rather than after the packs are hashed twice.
    let baseline = config.baseline_scaffold()?;
    space
        .check_interactions(&baseline)
        .map_err(|(field, message)| SearchError::Field {
            path: config.space.display().to_string(),
            field,
            message,
        })?;
    let resolved = Resolved {
        schema: RESOLVED_SCHEMA.into(),
        config: config.clone(),
        space,
        train_pack_hash: train_hash,
        test_pack_hash: test_hash,
    };
    std::fs::create_dir_all(&config.out).map_err(|e| SearchError::file(&config.out, e))?;
    let pinned = config.out.join("search.json");
    if pinned.is_file() {
        let text = std::fs::read_to_string(&pinned).map_err(|e| SearchError::file(&pinned, e))?;
        let old: Resolved = serde_json::from_str(&text).map_err(|e| SearchError::Format {
            path: pinned.display().to_string(),
            message: e.to_string(),
        })?;
        let same = serde_json::to_value(&old.config).ok() == serde_json::to_value(config).ok()
            && old.space == resolved.space
            && old.train_pack_hash == resolved.train_pack_hash
            && old.test_pack_hash == resolved.test_pack_hash;
        if !same {
            return Err(SearchError::Refused(format!(
                "{} holds another search (configuration, space or packs differ)",
                config.out.display()
            )));
        }
    } else {
        json_file(&pinned, &resolved)?;
    }
    Ok(resolved)
}

pub fn load_resolved(out: &Path) -> Result<Resolved, SearchError> {
    let p = out.join("search.json");
    let text = std::fs::read_to_string(&p).map_err(|e| SearchError::file(&p, e))?;
    serde_json::from_str(&text).map_err(|e| SearchError::Format {
        path: p.display().to_string(),
        message: e.to_string(),
    })
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339()
}

fn population(lineage: &Lineage) -> Vec<Member> {
    // Fitness: a candidate's own mean; the baseline's from the first campaign it anchored.
    let mut fitness: HashMap<String, f64> = HashMap::new();
    for e in lineage
        .evaluated()
        .filter(|e| e.verdict.as_deref() != Some("INVALID"))
    {
        if let (Some(a), Some(m)) = (&e.against, e.baseline_mean) {
            fitness.entry(a.clone()).or_insert(m);
        }
        if let Some(m) = e.candidate_mean {
            fitness.insert(e.id.clone(), m);
        }
    }
    lineage
        .entries
        .iter()
        .filter(|e| e.kind != EntryKind::Rejected && e.verdict.as_deref() != Some("INVALID"))
        .map(|e| Member {
            id: e.id.clone(),
            scaffold: e.scaffold.clone(),
            fitness: fitness.get(&e.id).copied(),
        })
        .collect()
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

/// The next proposal: read back if an interrupted one is on disk, else asked of the policy.
/// `Ok(Err(reason))` is a proposal refused without trials.
async fn next_proposal(
    r: &Resolved,
    lineage: &Lineage,
    champion: &Entry,
    index: usize,
    proposer: Option<&Proposer>,
    dir: &Path,
) -> Result<Option<Result<ProposalFile, (String, Option<ProposalFile>)>>, SearchError> {
    let id = id_of(index);
    let saved = dir.join("proposal.json");
    if let Ok(text) = std::fs::read_to_string(&saved)
        && let Ok(p) = serde_json::from_str::<ProposalFile>(&text)
        && p.against == champion.id
    {
        return Ok(Some(Ok(p)));
    }
    let c = &r.config;
    let seen: HashSet<String> = lineage
        .entries
        .iter()
        .filter(|e| e.kind != EntryKind::Rejected)
        .map(|e| e.scaffold_hash.clone())
        .collect();
    let champ = Member {
        id: champion.id.clone(),
        scaffold: champion.scaffold.clone(),
        fitness: None,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(derive_seed(c.seed, 1, index as u64));
    let proposal: Proposal = match (c.policy, proposer) {
        (PolicyKind::Model, Some(p)) => {
            let recent: Vec<&Entry> = lineage.evaluated().rev().take(3).collect();
            let prompt = Proposer::prompt(&r.space, champion, &recent);
            let _ = std::fs::create_dir_all(dir);
            let _ = write_atomic(&dir.join("proposer-prompt.txt"), &prompt);
            let (mutation, hypothesis, _tokens) = match p.propose(&prompt).await {
                Ok(x) => x,
                Err(e) => return Ok(Some(Err((e.to_string(), None)))),
            };
            let refused = |why: String, m: &super::space::Mutation, s: Scaffold| {
                Ok(Some(Err((
                    why,
                    Some(ProposalFile {
                        schema: PROPOSAL_SCHEMA.into(),
                        id: id.clone(),
                        parent: champion.id.clone(),
                        against: champion.id.clone(),
                        policy: c.policy,
                        mutation: m.clone(),
                        hypothesis: hypothesis.clone(),
                        scaffold: s,
                    }),
                ))))
            };
            if let Err(why) = r.space.check_mutation(&mutation) {
                return refused(why, &mutation, champion.scaffold.clone());
            }
            let scaffold = match apply(&champion.scaffold, &mutation) {
                Ok(s) => s,
                Err(why) => return refused(why, &mutation, champion.scaffold.clone()),
            };
            if seen.contains(&scaffold.hash()) {
                return refused(
                    format!("duplicate fingerprint {}", &scaffold.hash()[..12]),
                    &mutation,
                    scaffold,
                );
            }
            Proposal {
                parent: champion.id.clone(),
                mutation,
                hypothesis,
                scaffold,
            }
        }
        (PolicyKind::Model, None) => {
            return Err(SearchError::Proposer(
                "policy model needs a proposer".into(),
            ));
        }
        (policy, _) => {
            let pop = population(lineage);
            match propose(
                policy,
                &r.space,
                &champ,
                &pop,
                &seen,
                c.tournament_size,
                &mut rng,
            ) {
                Some(p) => p,
                None => return Ok(None),
            }
        }
    };
    let parent_scaffold = lineage
        .get(&proposal.parent)
        .map(|e| e.scaffold.clone())
        .unwrap_or_else(|| champion.scaffold.clone());
    r.space
        .check_candidate(&parent_scaffold, &proposal.scaffold)
        .map_err(SearchError::Refused)?;
    Ok(Some(Ok(ProposalFile {
        schema: PROPOSAL_SCHEMA.into(),
        id,
        parent: proposal.parent,
        against: champion.id.clone(),
        policy: c.policy,
        mutation: proposal.mutation,
        hypothesis: proposal.hypothesis,
        scaffold: proposal.scaffold,
    })))
}

/// Runs (or resumes) the search until a budget stops it. `log` receives one line per event.
pub async fn run_search(
    config: &SearchConfig,
    env: &Env,
    log: &mut dyn FnMut(&str),
) -> Result<SearchSummary, SearchError> {
    let r = prepare(config)?;
    let c = &r.config;
    let train = TaskPack::load(&c.train).map_err(|e| SearchError::Pack(e.to_string()))?;
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
            match next_proposal(&r, &lineage, &champion, index, proposer.as_ref(), &dir).await? {
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
    // An interrupted campaign's finished trials are kept (its journal, `crucible_run`): the
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
    e.contract_hash = Some(contract.hash().to_string());
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
    e.evidence_hash = record.evidence_hash.as_ref().map(|h| h.to_string());
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
