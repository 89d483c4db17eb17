//! The next candidate: an interrupted proposal read back from disk, else one the policy draws
//! from the champion (a model proposer's checked against the space first), written before its
//! campaign so a restart runs it unchanged.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use geode_runtime::scaffold::Scaffold;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::{Resolved, derive_seed, id_of};
use crate::crucible::write_atomic;
use crate::search::SearchError;
use crate::search::lineage::{Entry, EntryKind, Lineage};
use crate::search::mutate::{Member, PolicyKind, Proposal, propose};
use crate::search::proposer::Proposer;
use crate::search::space::apply;

/// Schema tag of `candidates/<id>/proposal.json`.
pub const PROPOSAL_SCHEMA: &str = "geode.search.proposal.v1";

/// A proposal written before its campaign, so an interrupted candidate is re-run unchanged.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProposalFile {
    /// Always [`PROPOSAL_SCHEMA`].
    pub schema: String,
    /// The candidate's id (`c0001`, `c0002`, ...).
    pub id: String,
    /// The id of the scaffold the mutation was applied to.
    pub parent: String,
    /// The id of the champion the candidate is compared against.
    pub against: String,
    /// The policy that proposed it.
    pub policy: PolicyKind,
    /// The one knob change.
    pub mutation: crate::search::space::Mutation,
    /// What the change is expected to do, in words.
    pub hypothesis: String,
    /// The parent's scaffold with the mutation applied.
    pub scaffold: Scaffold,
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

/// A proposal refused without trials: why, and the proposal when there was one to record.
type Refusal = (String, Option<ProposalFile>);

/// The next proposal: read back if an interrupted one is on disk, else asked of the policy.
/// `Ok(Err(reason))` is a proposal refused without trials.
pub(super) async fn next_proposal(
    r: &Resolved,
    lineage: &Lineage,
    champion: &Entry,
    index: usize,
    proposer: Option<&Proposer>,
    dir: &Path,
) -> Result<Option<Result<ProposalFile, Refusal>>, SearchError> {
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
    let proposal: Proposal = match (c.policy, proposer) {
        (PolicyKind::Model, Some(p)) => {
            let asked = ModelAsk {
                r,
                lineage,
                champion,
                id: &id,
                dir,
                seen: &seen,
            };
            match asked.propose(p).await {
                Answer::Proposal(proposal) => proposal,
                Answer::Refused(refusal) => return Ok(Some(Err(refusal))),
            }
        }
        (PolicyKind::Model, None) => {
            return Err(SearchError::Proposer(
                "policy model needs a proposer".into(),
            ));
        }
        (policy, _) => {
            let champ = Member {
                id: champion.id.clone(),
                scaffold: champion.scaffold.clone(),
                fitness: None,
            };
            let mut rng = ChaCha8Rng::seed_from_u64(derive_seed(c.seed, 1, index as u64));
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

/// The model proposer's answer, checked.
enum Answer {
    Proposal(Proposal),
    Refused(Refusal),
}

/// What the model proposer is asked with, and what its answer is checked against.
struct ModelAsk<'a> {
    r: &'a Resolved,
    lineage: &'a Lineage,
    champion: &'a Entry,
    id: &'a str,
    dir: &'a Path,
    /// Fingerprints of the scaffolds already tried: a repeat is refused.
    seen: &'a HashSet<String>,
}

impl ModelAsk<'_> {
    /// The model's mutation of the champion, refused when the space forbids it, it does not
    /// apply, or it leads to a scaffold already tried. The prompt is kept beside the candidate.
    async fn propose(&self, p: &Proposer) -> Answer {
        let champion = self.champion;
        let recent: Vec<&Entry> = self.lineage.evaluated().rev().take(3).collect();
        let prompt = Proposer::prompt(&self.r.space, champion, &recent);
        let _ = std::fs::create_dir_all(self.dir);
        let _ = write_atomic(&self.dir.join("proposer-prompt.txt"), &prompt);
        let (mutation, hypothesis, _tokens) = match p.propose(&prompt).await {
            Ok(x) => x,
            Err(e) => return Answer::Refused((e.to_string(), None)),
        };
        let refused = |why: String, m: &crate::search::space::Mutation, s: Scaffold| {
            Answer::Refused((
                why,
                Some(ProposalFile {
                    schema: PROPOSAL_SCHEMA.into(),
                    id: self.id.to_string(),
                    parent: champion.id.clone(),
                    against: champion.id.clone(),
                    policy: self.r.config.policy,
                    mutation: m.clone(),
                    hypothesis: hypothesis.clone(),
                    scaffold: s,
                }),
            ))
        };
        if let Err(why) = self.r.space.check_mutation(&mutation) {
            return refused(why, &mutation, champion.scaffold.clone());
        }
        let scaffold = match apply(&champion.scaffold, &mutation) {
            Ok(s) => s,
            Err(why) => return refused(why, &mutation, champion.scaffold.clone()),
        };
        if self.seen.contains(&scaffold.hash()) {
            return refused(
                format!("duplicate fingerprint {}", &scaffold.hash()[..12]),
                &mutation,
                scaffold,
            );
        }
        Answer::Proposal(Proposal {
            parent: champion.id.clone(),
            mutation,
            hypothesis,
            scaffold,
        })
    }
}
