//! Fixtures: a valid contract, and evidence built from a reward function.

use geode_crucible::{
    Arm, ArmSpec, Budgets, CONTRACT_SCHEMA, Contract, DecisionRule, EVIDENCE_SCHEMA,
    EvaluatorIdentity, Evidence, FamilyId, FrozenContract, GraderHash, IntegritySignals,
    LowerBoundMethod, ObservedIdentity, PackHash, ScaffoldHash, Stage, StagePacks, TaskId, TaskRef,
    TrialOutcome, TrialSeed, Usage, Vetoes,
};

pub fn pack(tag: &str) -> PackHash {
    PackHash::of_bytes(tag.as_bytes())
}
pub fn scaffold(tag: &str) -> ScaffoldHash {
    ScaffoldHash::of_bytes(tag.as_bytes())
}
pub fn grader(tag: &str) -> GraderHash {
    GraderHash::of_bytes(tag.as_bytes())
}

pub fn rule() -> DecisionRule {
    DecisionRule {
        confidence: 0.95,
        bootstrap_resamples: 1000,
        permutation_resamples: 1000,
        materiality: 0.02,
        min_tasks: 6,
        min_families: 2,
        candidate_floor: 0.3,
        lower_bound: LowerBoundMethod::Bca,
        cluster: geode_crucible::Clustering::Task,
    }
}

pub fn contract(stage: Stage, trials_per_task: u32, run_seed: u64) -> Contract {
    Contract {
        schema: CONTRACT_SCHEMA.to_owned(),
        stage,
        baseline: ArmSpec {
            scaffold_hash: scaffold("baseline"),
            model_route: "anthropic/claude-sonnet".into(),
            agent: None,
        },
        candidate: ArmSpec {
            scaffold_hash: scaffold("candidate"),
            model_route: "anthropic/claude-sonnet".into(),
            agent: None,
        },
        packs: StagePacks {
            train: pack("train"),
            test: pack("test"),
        },
        trials_per_task,
        run_seed,
        grader_config_hash: grader("grader"),
        evaluator: EvaluatorIdentity {
            binary_version: "geode 0.1.0".into(),
            source_revision: "0123abc".into(),
        },
        decision_rule: rule(),
        budgets: Budgets {
            wall_seconds: 3600.0,
            model_calls: 10_000,
            tokens: 5_000_000,
            cost_usd: 50.0,
        },
        vetoes: Vetoes {
            safety_tolerance: 0.12,
            infra_allowance: 0.05,
            ..Vetoes::default()
        },
        reward_key: None,
    }
}

pub fn frozen(stage: Stage, trials_per_task: u32, run_seed: u64) -> FrozenContract {
    contract(stage, trials_per_task, run_seed).freeze().unwrap()
}

/// Tasks "t0".."t{n-1}" spread over `families` families "f0"...
pub fn tasks(n: usize, families: usize) -> Vec<TaskRef> {
    (0..n)
        .map(|i| TaskRef {
            id: TaskId::new(format!("t{i}")),
            family: FamilyId::new(format!("f{}", i % families)),
        })
        .collect()
}

/// Evidence consistent with `c` (right identities and seeds), rewards from `reward(task, trial,
/// arm)`, no signals, modest usage.
pub fn evidence(
    c: &FrozenContract,
    task_list: &[TaskRef],
    reward: impl Fn(usize, u32, Arm) -> f64,
) -> Evidence {
    let k = c.contract().trials_per_task;
    let run_seed = c.contract().run_seed;
    let mut trials = Vec::new();
    for (ti, t) in task_list.iter().enumerate() {
        for trial in 0..k {
            let seed = TrialSeed::derive(run_seed, &t.id, trial);
            // Interleaved arms, as the harness runs them.
            for arm in [Arm::Baseline, Arm::Candidate] {
                trials.push(TrialOutcome {
                    task: t.id.clone(),
                    family: t.family.clone(),
                    arm,
                    trial,
                    seed,
                    reward: reward(ti, trial, arm),
                    infra_invalid: false,
                    integrity: IntegritySignals::default(),
                });
            }
        }
    }
    let cc = c.contract();
    Evidence {
        schema: EVIDENCE_SCHEMA.to_owned(),
        contract_hash: c.hash().clone(),
        stage: cc.stage,
        observed: ObservedIdentity {
            pack_hash: c.stage_pack().clone(),
            baseline_scaffold_hash: cc.baseline.scaffold_hash.clone(),
            candidate_scaffold_hash: cc.candidate.scaffold_hash.clone(),
            grader_config_hash: cc.grader_config_hash.clone(),
        },
        run_seed,
        replication: None,
        tasks: task_list.to_vec(),
        trials,
        usage: Usage {
            wall_seconds: 100.0,
            model_calls: 500,
            tokens: 100_000,
            cost_usd: 3.0,
        },
        attestation: None,
    }
}

/// A clear win: baseline succeeds on trial 0 of every task (1/3), candidate on trials 0 and 1
/// except on every fourth task where it also keeps only trial 0.
pub fn winning_reward(task: usize, trial: u32, arm: Arm) -> f64 {
    match arm {
        Arm::Baseline => f64::from(u8::from(trial == 0)),
        Arm::Candidate => {
            if task % 4 == 3 {
                f64::from(u8::from(trial == 0))
            } else {
                f64::from(u8::from(trial <= 1))
            }
        }
    }
}
