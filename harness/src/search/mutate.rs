//! Mutation policies: each proposes one knob change whose result has not been evaluated yet.
//!
//! The fingerprint of a candidate is its scaffold hash; a candidate whose fingerprint is in
//! `seen` (the baseline, every evaluated candidate) is never proposed by these policies, and a
//! model-proposed duplicate is rejected before any trial runs. Every random choice comes from
//! the RNG the caller seeds (one seed per candidate index, so a resumed search proposes the
//! same candidates).

use std::collections::HashSet;

use geode_runtime::scaffold::Scaffold;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::space::{Mutation, SearchSpace, apply, get, same_value};

/// How candidates are proposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyKind {
    /// A random unseen single-knob change of the champion.
    Random,
    /// The first unseen single-knob change of the champion, in grid order.
    Grid,
    /// A random unseen change of a parent picked by tournament from the evaluated population.
    Evolutionary,
    /// A proposer route returns the mutation and its hypothesis (see `proposer`).
    Model,
}

/// An evaluated scaffold of the population (the baseline and every evaluated candidate).
#[derive(Debug, Clone)]
pub struct Member {
    /// Its lineage id.
    pub id: String,
    /// Its scaffold.
    pub scaffold: Scaffold,
    /// Mean train reward measured for it (its own arm); `None` if never measured.
    pub fitness: Option<f64>,
}

/// One proposed candidate: its parent, the mutation and the resulting scaffold.
#[derive(Debug, Clone)]
pub struct Proposal {
    /// The id of the member the mutation was applied to.
    pub parent: String,
    /// The one knob change.
    pub mutation: Mutation,
    /// What the change is expected to do, in words.
    pub hypothesis: String,
    /// The parent's scaffold with the mutation applied.
    pub scaffold: Scaffold,
}

/// Tries per proposal before a random policy gives up on finding an unseen candidate.
const TRIES: usize = 256;

/// Every single-knob mutation of `s`, in grid order (knobs in file order, values in domain
/// order), leaving out values equal to the current one.
pub fn neighbours(space: &SearchSpace, s: &Scaffold) -> Vec<(Mutation, Scaffold)> {
    let mut out = Vec::new();
    for k in &space.knobs {
        let current = get(s, &k.path);
        for v in k.domain() {
            if current.as_ref().is_some_and(|c| same_value(c, &v)) {
                continue;
            }
            let m = Mutation {
                path: k.path.clone(),
                value: v,
            };
            if let Ok(next) = apply(s, &m) {
                out.push((m, next));
            }
        }
    }
    out
}

fn describe(policy: &str, s: &Scaffold, m: &Mutation) -> String {
    let before = get(s, &m.path).map(|v| v.to_string()).unwrap_or_default();
    format!(
        "{policy}: setting {} from {before} to {} raises the train reward",
        m.path, m.value
    )
}

fn random_unseen(
    space: &SearchSpace,
    parent: &Member,
    seen: &HashSet<String>,
    rng: &mut ChaCha8Rng,
    policy: &str,
) -> Option<Proposal> {
    let options = neighbours(space, &parent.scaffold);
    if options.is_empty() {
        return None;
    }
    for _ in 0..TRIES {
        // Knob first, then value: a knob with many values is not favoured over one with few.
        let k = &space.knobs[rng.random_range(0..space.knobs.len())];
        let of_knob: Vec<&(Mutation, Scaffold)> =
            options.iter().filter(|(m, _)| m.path == k.path).collect();
        if of_knob.is_empty() {
            continue;
        }
        let (m, s) = of_knob[rng.random_range(0..of_knob.len())];
        if !seen.contains(&s.hash()) {
            return Some(Proposal {
                parent: parent.id.clone(),
                hypothesis: describe(policy, &parent.scaffold, m),
                mutation: m.clone(),
                scaffold: s.clone(),
            });
        }
    }
    // The random draws kept hitting seen candidates: take the first unseen in grid order.
    grid(space, parent, seen).map(|mut p| {
        p.hypothesis = p.hypothesis.replacen("grid", policy, 1);
        p
    })
}

fn grid(space: &SearchSpace, parent: &Member, seen: &HashSet<String>) -> Option<Proposal> {
    neighbours(space, &parent.scaffold)
        .into_iter()
        .find(|(_, s)| !seen.contains(&s.hash()))
        .map(|(m, s)| Proposal {
            parent: parent.id.clone(),
            hypothesis: describe("grid", &parent.scaffold, &m),
            mutation: m,
            scaffold: s,
        })
}

/// Tournament selection: `size` members drawn with replacement, the fittest wins (unmeasured
/// members count as worst; ties go to the earlier draw).
pub fn tournament<'a>(population: &'a [Member], size: usize, rng: &mut ChaCha8Rng) -> &'a Member {
    let mut best: Option<&Member> = None;
    for _ in 0..size.max(1) {
        let m = &population[rng.random_range(0..population.len())];
        let f = m.fitness.unwrap_or(f64::NEG_INFINITY);
        if best.is_none_or(|b| f > b.fitness.unwrap_or(f64::NEG_INFINITY)) {
            best = Some(m);
        }
    }
    best.unwrap_or(&population[0])
}

/// The next candidate of a non-model policy, or `None` when the space around the parent is
/// exhausted. `champion` is the parent of random and grid proposals; evolutionary picks its
/// parent from `population` by tournament (and falls back to the champion).
pub fn propose(
    policy: PolicyKind,
    space: &SearchSpace,
    champion: &Member,
    population: &[Member],
    seen: &HashSet<String>,
    tournament_size: usize,
    rng: &mut ChaCha8Rng,
) -> Option<Proposal> {
    match policy {
        PolicyKind::Grid => grid(space, champion, seen),
        PolicyKind::Random | PolicyKind::Model => {
            random_unseen(space, champion, seen, rng, "random")
        }
        PolicyKind::Evolutionary => {
            if population.is_empty() {
                return random_unseen(space, champion, seen, rng, "evolutionary");
            }
            let parent = tournament(population, tournament_size, rng);
            random_unseen(space, parent, seen, rng, "evolutionary")
                .or_else(|| random_unseen(space, champion, seen, rng, "evolutionary"))
        }
    }
}
