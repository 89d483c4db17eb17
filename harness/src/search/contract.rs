//! The frozen contracts the search writes: one train-stage contract per candidate (champion
//! as baseline arm), one test-stage contract for the promotion. Run seeds are derived from the
//! search seed so a resumed candidate gets the same contract.

use geode_crucible::{
    ArmSpec, Budgets, CONTRACT_SCHEMA, Clustering, Contract, DecisionRule, FrozenContract,
    LowerBoundMethod, PackHash, SafetyRule, Stage, StagePacks, Vetoes,
};
use geode_runtime::model::catalog::Route;
use geode_runtime::scaffold::Scaffold;

use super::SearchError;
use super::config::Rule;
use crate::crucible::evaluator;
use crate::crucible::{scaffold_hash, tests_grader_hash};

/// A seed per purpose and index, so resumed runs draw the same numbers.
pub fn derive_seed(seed: u64, purpose: u64, index: u64) -> u64 {
    let mut x = seed
        ^ purpose.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03);
    // splitmix64 finaliser: nearby inputs give unrelated seeds.
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The frozen contract of one comparison (train stage for candidates, test for promotion).
#[allow(clippy::too_many_arguments)]
pub fn contract_for(
    stage: Stage,
    baseline: &Scaffold,
    candidate: &Scaffold,
    model: &Route,
    train: &PackHash,
    test: &PackHash,
    trials: u32,
    run_seed: u64,
    rule: &Rule,
) -> Result<FrozenContract, SearchError> {
    let contract = Contract {
        schema: CONTRACT_SCHEMA.into(),
        stage,
        baseline: ArmSpec {
            scaffold_hash: scaffold_hash(baseline)?,
            model_route: model.to_string(),
            agent: None,
        },
        candidate: ArmSpec {
            scaffold_hash: scaffold_hash(candidate)?,
            model_route: model.to_string(),
            agent: None,
        },
        packs: StagePacks {
            train: train.clone(),
            test: test.clone(),
        },
        trials_per_task: trials,
        run_seed,
        grader_config_hash: tests_grader_hash(None),
        evaluator: evaluator(),
        decision_rule: DecisionRule {
            confidence: rule.confidence,
            bootstrap_resamples: rule.resamples,
            permutation_resamples: rule.resamples,
            materiality: rule.materiality,
            min_tasks: rule.min_tasks,
            min_families: rule.min_families,
            candidate_floor: rule.candidate_floor,
            lower_bound: LowerBoundMethod::TAndBca,
            cluster: Clustering::Task,
        },
        budgets: Budgets {
            wall_seconds: rule.campaign_wall_seconds,
            model_calls: rule.campaign_model_calls,
            tokens: rule.campaign_tokens,
            cost_usd: rule.campaign_cost_usd,
        },
        vetoes: Vetoes {
            safety_tolerance: rule.safety_tolerance,
            infra_allowance: rule.infra_allowance,
            safety_rule: SafetyRule::EvidentHarm {
                confidence: rule.safety_confidence,
            },
        },
        reward_key: None,
    };
    contract.freeze().map_err(SearchError::Contract)
}
