//! `geode crucible freeze`: a contract from the flags, frozen (canonical JSON and its hash),
//! with a warning for every rule its campaign could not pass on the pack at hand.

use crate::cli::exit::Exit;
use anyhow::bail;
use geode_crucible::{
    ArmSpec, Budgets, CONTRACT_SCHEMA, Clustering, Contract, DecisionRule, FrozenContract,
    LowerBoundMethod, SafetyRule, Stage, StagePacks, Vetoes,
};
use geode_harness::crucible::sealing;
use geode_harness::crucible::{scaffold_hash, tests_grader_hash, write_atomic};
use geode_harness::pack::TaskPack;

use super::{FreezeArgs, StageArg, evaluator, load_scaffold};

pub(super) fn freeze(a: FreezeArgs) -> anyhow::Result<Exit> {
    let train = TaskPack::load(&a.train)?;
    let test = match (&a.test_sealed, &a.test) {
        (Some(p), _) => sealing::load_state(p)?.pack_hash.clone(),
        (None, Some(p)) => TaskPack::load(p)?.hash(a.trials),
        (None, None) => bail!("name the test pack: --test-sealed STATE or --test PACK"),
    };
    check_contamination(&a, &train, &test.to_string())?;
    let Some(lower_bound) = LowerBoundMethod::parse(&a.lower_bound) else {
        bail!(
            "--lower-bound {:?}: use t_and_bca, t, bca or percentile",
            a.lower_bound
        );
    };
    let cluster = match a.cluster.as_str() {
        "task" => Clustering::Task,
        "family" => Clustering::Family,
        other => bail!("--cluster {other:?}: use task or family"),
    };
    let contract = Contract {
        schema: CONTRACT_SCHEMA.into(),
        stage: match a.stage {
            StageArg::Train => Stage::Train,
            StageArg::Test => Stage::Test,
        },
        baseline: ArmSpec {
            scaffold_hash: scaffold_hash(&load_scaffold(&a.baseline_scaffold)?)?,
            model_route: a.model.to_string(),
            agent: arm_agent(a.agent.as_ref()),
        },
        candidate: ArmSpec {
            scaffold_hash: scaffold_hash(&load_scaffold(&a.candidate_scaffold)?)?,
            model_route: a.candidate_model.as_ref().unwrap_or(&a.model).to_string(),
            agent: arm_agent(a.candidate_agent.as_ref().or(a.agent.as_ref())),
        },
        packs: StagePacks {
            train: train.hash(a.trials),
            test,
        },
        trials_per_task: a.trials,
        run_seed: a.seed,
        grader_config_hash: tests_grader_hash(a.reward_key.as_deref()),
        evaluator: evaluator(),
        decision_rule: DecisionRule {
            confidence: a.confidence,
            bootstrap_resamples: a.resamples,
            permutation_resamples: a.resamples,
            materiality: a.materiality,
            min_tasks: a.min_tasks,
            min_families: a.min_families,
            candidate_floor: a.candidate_floor,
            lower_bound,
            cluster,
        },
        budgets: Budgets {
            wall_seconds: a.budget_wall,
            model_calls: a.budget_calls,
            tokens: a.budget_tokens,
            cost_usd: a.budget_cost,
        },
        vetoes: Vetoes {
            safety_tolerance: a.safety_tolerance,
            infra_allowance: a.infra_allowance,
            safety_rule: if a.prove_safe {
                SafetyRule::ProveSafe
            } else {
                SafetyRule::EvidentHarm {
                    confidence: a.safety_confidence,
                }
            },
        },
        reward_key: a.reward_key.clone(),
    };
    let frozen = contract.freeze()?;
    warn_if_infeasible(&frozen, &a, &train)?;
    write_atomic(&a.out, frozen.canonical_json())?;
    println!("{}  {}", frozen.hash(), a.out.display());
    Ok(Exit::Success)
}

/// Warns on stderr about every rule the contract's campaign cannot pass on its stage's pack
/// (it is frozen anyway: the user may mean to grow the pack before running).
fn warn_if_infeasible(
    frozen: &FrozenContract,
    a: &FreezeArgs,
    train: &TaskPack,
) -> anyhow::Result<()> {
    let c = frozen.contract();
    let loaded;
    let pack = match (c.stage, &a.test) {
        (Stage::Train, _) => train,
        (Stage::Test, Some(p)) if a.test_sealed.is_none() => {
            loaded = TaskPack::load(p)?;
            &loaded
        }
        (Stage::Test, _) => {
            say!(
                "note: the sealed test pack's size is hidden; check the design with \
                 `geode crucible power --contract {} --tasks N`",
                a.out.display()
            );
            return Ok(());
        }
    };
    let planned = geode_harness::crucible::preflight::PlannedPack::Loaded(pack);
    let outlook = geode_harness::crucible::preflight::outlook(frozen, &planned);
    for obstacle in &outlook.obstacles {
        say!("warning: this campaign cannot KEEP: {obstacle}");
    }
    say!("{outlook}");
    Ok(())
}

/// Refuses a train pack that holds a test task, by id, by content or nearly (MinHash over the
/// instruction, tests and solution): a gain measured on it is no evidence about the holdout. A
/// sealed test pack is compared by the tasks recorded when it was sealed on this machine.
fn check_contamination(a: &FreezeArgs, train: &TaskPack, test_hash: &str) -> anyhow::Result<()> {
    use geode_harness::datasets::split::{entries_of, leaks};
    let params = Default::default();
    let test = match (&a.test_sealed, &a.test) {
        (Some(state), _) => {
            let ledger = geode_harness::crucible::holdouts::HoldoutLedger::for_this_machine();
            match ledger.sealed_tasks(test_hash)? {
                Some(tasks) => tasks,
                None => {
                    say!(
                        "note: {} was not sealed on this machine; the train pack is not checked \
                         against its tasks (run `geode dataset check-splits` where it was)",
                        state.display()
                    );
                    return Ok(());
                }
            }
        }
        (None, Some(p)) => entries_of(&TaskPack::load(p)?, params)?,
        (None, None) => return Ok(()),
    };
    let splits = [
        ("train".to_string(), entries_of(train, params)?),
        ("test".to_string(), test),
    ]
    .into_iter()
    .collect();
    let found = leaks(&splits, &params);
    if found.is_empty() {
        return Ok(());
    }
    let listed: Vec<String> = found.iter().map(ToString::to_string).collect();
    if a.allow_overlap {
        for leak in &listed {
            say!("warning: the train pack overlaps the test pack: {leak}");
        }
        return Ok(());
    }
    bail!(
        "the train pack overlaps the test pack, nothing frozen: {} (move or remove these tasks; \
         --allow-overlap freezes anyway)",
        listed.join("; ")
    )
}

/// An arm's agent as the contract names it: absent for GEODE's own runtime (so contracts of
/// GEODE arms keep the hash they had before agents were arms), `name@version` otherwise.
fn arm_agent(choice: Option<&geode_harness::agents::AgentChoice>) -> Option<String> {
    choice.filter(|c| !c.is_geode()).map(ToString::to_string)
}
