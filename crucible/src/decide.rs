//! `decide`: checks that the evidence is a valid instance of the contract's experiment (else
//! INVALID, no comparison), then hands the paired table to the gate.
//!
//! INVALID when: the evidence names another contract or stage; an identity the harness measured
//! (pack, either scaffold, grader config) differs from the contract's; the run seed or any trial
//! seed is not the derived one; pair coverage is not exact; a reward is outside [0, 1] or usage
//! is not finite; infrastructure-invalid trials exceed floor(infra_allowance * all trials); or a
//! test-stage campaign has no attestation of its sealed pack's opening for this contract.

use crate::contract::{FrozenContract, Stage};
use crate::evidence::{EVIDENCE_SCHEMA, Evidence, ObservedIdentity, evidence_hash};
use crate::gate::{GateInput, judge};
use crate::pairing::{Problem, pair_trials};
use crate::record::{Counts, DECISION_SCHEMA, DecisionRecord, DecisionSeeds};
use crate::seed::{bootstrap_seed, permutation_seed, replication_run_seed};
use crate::stats::StatSeeds;
use crate::verdict::{ReasonCode, verdict_for};

/// Most detail lines kept in a record.
const MAX_DETAILS: usize = 50;

/// The run seed the evidence must have used.
fn expected_run_seed(contract: &FrozenContract, replication: Option<u32>) -> Option<u64> {
    match replication {
        None => Some(contract.contract().run_seed),
        Some(0) => None,
        Some(k) => Some(replication_run_seed(contract.hash(), k)),
    }
}

fn identity_problems(contract: &FrozenContract, ev: &Evidence, out: &mut Vec<Problem>) {
    let c = contract.contract();
    let mut push = |code, detail: String| out.push(Problem { code, detail });
    if ev.schema != EVIDENCE_SCHEMA {
        push(
            ReasonCode::MalformedEvidence,
            format!(
                "evidence schema {:?}, expected {EVIDENCE_SCHEMA:?}",
                ev.schema
            ),
        );
    }
    if &ev.contract_hash != contract.hash() {
        push(
            ReasonCode::ContractMismatch,
            format!(
                "evidence names contract {}, deciding {}",
                ev.contract_hash,
                contract.hash()
            ),
        );
    }
    if ev.stage != c.stage {
        push(
            ReasonCode::StageMismatch,
            format!(
                "evidence stage {:?}, contract stage {:?}",
                ev.stage, c.stage
            ),
        );
    }
    observed_problems(contract, &ev.observed, &mut push);
    match expected_run_seed(contract, ev.replication) {
        Some(s) if s == ev.run_seed => {}
        Some(s) => push(
            ReasonCode::SeedMismatch,
            format!(
                "run seed {} but {:?} requires {s}",
                ev.run_seed, ev.replication
            ),
        ),
        None => push(
            ReasonCode::SeedMismatch,
            "replication numbers start at 1".into(),
        ),
    }
    let u = &ev.usage;
    if !(u.wall_seconds.is_finite()
        && u.wall_seconds >= 0.0
        && u.cost_usd.is_finite()
        && u.cost_usd >= 0.0)
    {
        push(
            ReasonCode::MalformedEvidence,
            format!("usage not finite and non-negative: {u:?}"),
        );
    }
    if c.stage == Stage::Test {
        attestation_problems(contract, ev, &mut push);
    }
}

/// What ran against what the contract names: the stage's pack, both scaffolds, the grader.
fn observed_problems(
    contract: &FrozenContract,
    o: &ObservedIdentity,
    push: &mut impl FnMut(ReasonCode, String),
) {
    let c = contract.contract();
    if &o.pack_hash != contract.stage_pack() {
        push(
            ReasonCode::PackHashMismatch,
            format!(
                "pack {} ran, contract names {}",
                o.pack_hash,
                contract.stage_pack()
            ),
        );
    }
    if o.baseline_scaffold_hash != c.baseline.scaffold_hash {
        push(
            ReasonCode::BaselineScaffoldMismatch,
            format!(
                "baseline scaffold {} ran, contract names {}",
                o.baseline_scaffold_hash, c.baseline.scaffold_hash
            ),
        );
    }
    if o.candidate_scaffold_hash != c.candidate.scaffold_hash {
        push(
            ReasonCode::CandidateScaffoldMismatch,
            format!(
                "candidate scaffold {} ran, contract names {}",
                o.candidate_scaffold_hash, c.candidate.scaffold_hash
            ),
        );
    }
    if o.grader_config_hash != c.grader_config_hash {
        push(
            ReasonCode::GraderHashMismatch,
            format!(
                "grader config {} graded, contract names {}",
                o.grader_config_hash, c.grader_config_hash
            ),
        );
    }
}

/// A test stage must come with an attestation of the sealed pack's opening, for this contract
/// and pack.
fn attestation_problems(
    contract: &FrozenContract,
    ev: &Evidence,
    push: &mut impl FnMut(ReasonCode, String),
) {
    match &ev.attestation {
        Some(a) if &a.contract_hash == contract.hash() && &a.pack_hash == contract.stage_pack() => {
        }
        Some(a) => push(
            ReasonCode::SealedNotAttested,
            format!(
                "attestation is for contract {} and pack {}",
                a.contract_hash, a.pack_hash
            ),
        ),
        None => push(
            ReasonCode::SealedNotAttested,
            "test stage without an attestation of the sealed pack's opening".into(),
        ),
    }
}

/// Decides one campaign under a frozen contract.
pub fn decide(contract: &FrozenContract, evidence: &Evidence) -> DecisionRecord {
    let c = contract.contract();
    let mut problems = Vec::new();
    identity_problems(contract, evidence, &mut problems);
    let pairing = pair_trials(
        &evidence.tasks,
        &evidence.trials,
        c.trials_per_task,
        evidence.run_seed,
    );
    problems.extend(pairing.problems.iter().cloned());

    let all_trials = 2 * evidence.tasks.len() as u64 * u64::from(c.trials_per_task);
    let allowance = (c.vetoes.infra_allowance * all_trials as f64).floor() as u32;
    if pairing.infra_invalid_trials > allowance {
        problems.push(Problem {
            code: ReasonCode::InfraOverAllowance,
            detail: format!(
                "{} infrastructure-invalid trials, the contract allows {allowance}",
                pairing.infra_invalid_trials
            ),
        });
    }

    let seeds = DecisionSeeds {
        run_seed: evidence.run_seed,
        replication: evidence.replication,
        bootstrap: bootstrap_seed(contract.hash()),
        permutation: permutation_seed(contract.hash()),
    };
    let counts = Counts {
        tasks_in_pack: evidence.tasks.len() as u32,
        trials_per_task: c.trials_per_task,
        trials: evidence.trials.len() as u32,
        infra_invalid_trials: pairing.infra_invalid_trials,
        infra_allowance_trials: allowance,
        valid_pairs: pairing
            .table
            .tasks
            .iter()
            .map(|t| t.pairs.len() as u32)
            .sum(),
        dropped_pairs: pairing.table.tasks.iter().map(|t| t.dropped).sum(),
    };
    let mut details: Vec<String> = problems
        .iter()
        .take(MAX_DETAILS)
        .map(|p| format!("{}: {}", p.code, p.detail))
        .collect();
    if problems.len() > MAX_DETAILS {
        details.push(format!("... and {} more", problems.len() - MAX_DETAILS));
    }
    let mut invalid: Vec<ReasonCode> = problems.iter().map(|p| p.code).collect();
    invalid.sort();
    invalid.dedup();

    let mut record = DecisionRecord {
        schema: DECISION_SCHEMA.to_owned(),
        crucible_version: env!("CARGO_PKG_VERSION").to_owned(),
        contract_hash: contract.hash().clone(),
        evidence_hash: evidence_hash(&evidence.trials).ok(),
        stage: c.stage,
        verdict: verdict_for(&invalid),
        reasons: invalid,
        details,
        evaluator: c.evaluator.clone(),
        rule: c.decision_rule.clone(),
        seeds,
        counts,
        statistics: None,
        safety: None,
        budget: None,
        coverage: None,
        ledger_entry: None,
        holdout: None,
        explanation: None,
    };
    if !record.reasons.is_empty() {
        record.explanation = Some(crate::explain::explain(&record));
        return record;
    }
    let judgment = judge(GateInput {
        rule: &c.decision_rule,
        vetoes: &c.vetoes,
        budget: Some((&c.budgets, &evidence.usage)),
        table: &pairing.table,
        seeds: StatSeeds {
            bootstrap: seeds.bootstrap,
            permutation: seeds.permutation,
        },
    });
    record.verdict = judgment.verdict;
    record.reasons = judgment.reasons;
    record.statistics = Some(judgment.statistics);
    record.safety = Some(judgment.safety);
    record.budget = judgment.budget;
    record.coverage = Some(judgment.coverage);
    record.explanation = Some(crate::explain::explain(&record));
    record
}
