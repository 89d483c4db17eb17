//! What can be known before a campaign's first trial is checked before it: the scaffolds, the
//! pack and the grader against the hashes the contract pins, and whether the design can KEEP
//! at all. A sealed pack is checked before its opening is burned, so an honest mistake (the
//! wrong scaffold file, a pack of another size) costs nothing; on a train pack it costs no
//! trials. The decision checks the same identities again from what actually ran.

use geode_crucible::{Design, FrozenContract, Obstacle, Outlook, Stage, obstacles};
use geode_runtime::scaffold::Scaffold;

use super::CrucibleRunError;
use super::identity::{scaffold_hash, tests_grader_hash};
use crate::pack::{PackHash, TaskPack};

/// The arms a campaign will run, and whether an infeasible design may run anyway.
pub struct Plan<'a> {
    /// The baseline arm's scaffold.
    pub baseline: &'a Scaffold,
    /// The candidate arm's scaffold.
    pub candidate: &'a Scaffold,
    /// Run even when the rule cannot KEEP on this design.
    pub allow_infeasible: bool,
    /// Where the campaign's trial folders go; a sealed campaign keeps them in memory, and
    /// the images built from its environments beside them (`<trials>.images`).
    pub trials: &'a std::path::Path,
}

/// The pack a campaign will run, as far as it can be known before it starts.
pub enum PlannedPack<'a> {
    /// A pack loaded from disk: hash, size and families all known.
    Loaded(&'a TaskPack),
    /// A sealed pack before its opening: its hash and size from the public commitment (its
    /// families are hidden).
    Sealed {
        /// The sealed pack's hash, from its commitment.
        pack_hash: &'a PackHash,
        /// How many tasks the sealed pack holds.
        tasks: usize,
    },
}

/// Every mismatch between what is about to run and what `contract` pins, in one refusal.
pub fn check_identity(
    contract: &FrozenContract,
    baseline: &Scaffold,
    candidate: &Scaffold,
    pack: &PlannedPack<'_>,
) -> Result<(), CrucibleRunError> {
    let c = contract.contract();
    let mut wrong = Vec::new();
    for (label, scaffold, pinned) in [
        ("baseline", baseline, &c.baseline.scaffold_hash),
        ("candidate", candidate, &c.candidate.scaffold_hash),
    ] {
        let actual = scaffold_hash(scaffold)?;
        if &actual != pinned {
            wrong.push(format!(
                "the {label} scaffold given hashes to {actual}, the contract pins {pinned}"
            ));
        }
    }
    let pack_actual = match pack {
        PlannedPack::Loaded(p) => p.hash(c.trials_per_task),
        PlannedPack::Sealed { pack_hash, .. } => (*pack_hash).clone(),
    };
    if &pack_actual != contract.stage_pack() {
        let stage = match c.stage {
            Stage::Train => "train",
            Stage::Test => "test",
        };
        wrong.push(format!(
            "the {stage} pack given hashes to {pack_actual} ({} trials per task), the contract \
             pins {}",
            c.trials_per_task,
            contract.stage_pack()
        ));
    }
    let grader = tests_grader_hash(c.reward_key.as_deref());
    if c.grader_config_hash != grader {
        wrong.push(format!(
            "the contract pins grader {} but GEODE's tests grader{} is {grader}: it was frozen \
             for another grader",
            c.grader_config_hash,
            c.reward_key
                .as_ref()
                .map(|k| format!(" scoring reward key {k:?}"))
                .unwrap_or_default(),
        ));
    }
    if wrong.is_empty() {
        return Ok(());
    }
    Err(CrucibleRunError::Invalid(format!(
        "not started, nothing run or opened: {}",
        wrong.join("; ")
    )))
}

/// The design of a campaign of `contract` on `pack`.
pub fn design(contract: &FrozenContract, pack: &PlannedPack<'_>) -> Design {
    let trials = contract.contract().trials_per_task;
    match pack {
        PlannedPack::Loaded(p) => {
            let families: std::collections::BTreeSet<&str> =
                p.tasks.iter().map(|t| t.config.category()).collect();
            Design {
                tasks: u32::try_from(p.tasks.len()).unwrap_or(u32::MAX),
                trials,
                families: u32::try_from(families.len()).unwrap_or(u32::MAX),
            }
        }
        // Families are hidden; as many as tasks is the most they can be, so only a rule no
        // pack of this size can pass is found.
        PlannedPack::Sealed { tasks, .. } => {
            let tasks = u32::try_from(*tasks).unwrap_or(u32::MAX);
            Design {
                tasks,
                trials,
                families: tasks,
            }
        }
    }
}

/// What a campaign of `contract` on `pack` can expect (P(KEEP) of a +0.10 gain, the safety
/// veto's false vetoes and power), for printing before its first trial.
pub fn outlook(contract: &FrozenContract, pack: &PlannedPack<'_>) -> Outlook {
    let c = contract.contract();
    geode_crucible::outlook(&c.decision_rule, &c.vetoes, design(contract, pack))
}

/// Refuses a campaign whose rule no outcome of its design can pass, naming what would lift
/// each obstacle, unless `allow` (the obstacles are then returned for the caller to report).
pub fn check_design(
    contract: &FrozenContract,
    pack: &PlannedPack<'_>,
    allow: bool,
) -> Result<Vec<Obstacle>, CrucibleRunError> {
    let c = contract.contract();
    let found = obstacles(&c.decision_rule, &c.vetoes, design(contract, pack));
    if found.is_empty() || allow {
        return Ok(found);
    }
    let listed: Vec<String> = found.iter().map(ToString::to_string).collect();
    Err(CrucibleRunError::Invalid(format!(
        "not started, nothing run or opened: this campaign cannot KEEP whatever its trials \
         show: {} (`--allow-infeasible`, or `allow_infeasible = true` in a search's \
         configuration, runs it anyway)",
        listed.join("; ")
    )))
}
