//! The gate through `decide`: every reason code from a real input, INVALID cases, vetoes,
//! degenerate inputs, exit codes and the record's JSON.

use std::collections::BTreeSet;

use geode_crucible::{
    Arm, Degeneracy, Evidence, FrozenContract, IntegritySignals, ReasonCode, SealState, Stage,
    Verdict, decide, seal,
};

use super::common::{evidence, frozen, pack, scaffold, tasks, winning_reward};

fn base() -> (FrozenContract, Evidence) {
    let c = frozen(Stage::Train, 3, 7);
    let e = evidence(&c, &tasks(12, 3), winning_reward);
    (c, e)
}

fn reasons_of(c: &FrozenContract, e: &Evidence) -> (Verdict, Vec<ReasonCode>) {
    let r = decide(c, e);
    (r.verdict, r.reasons)
}

#[test]
fn clear_win_is_kept_with_every_statistic() {
    let (c, e) = base();
    let r = decide(&c, &e);
    assert_eq!(r.verdict, Verdict::Keep, "{:?} {:?}", r.reasons, r.details);
    let s = r.statistics.as_ref().unwrap();
    assert_eq!(s.tasks, 12);
    assert_eq!(s.families, 3);
    assert!((s.estimate.unwrap() - 0.25).abs() < 1e-12);
    assert!(s.lower_bound.unwrap() > 0.0);
    assert!(s.t.is_some() && s.bootstrap.is_some() && s.permutation.is_some());
    assert!(s.minimum_detectable_effect.unwrap() > 0.0);
    assert_eq!(s.per_family.len(), 3);
    // The record round-trips through JSON.
    let json = r.to_json().unwrap();
    assert!(json.contains("\"schema\": \"geode.decision.v1\""));
    let back = geode_crucible::DecisionRecord::from_json(&json).unwrap();
    assert_eq!(back, r);
}

/// A scenario: a name, the code it must produce, and how it breaks the base case.
type Scenario = (
    &'static str,
    ReasonCode,
    Box<dyn Fn(&FrozenContract, &mut Evidence) -> Option<FrozenContract>>,
);

/// Every scenario, one group per kind of fault the gate must catch.
fn scenarios() -> Vec<Scenario> {
    [
        provenance_scenarios(),
        evidence_scenarios(),
        statistics_scenarios(),
        degenerate_scenarios(),
        veto_scenarios(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Evidence that did not come from the frozen contract's own pack, scaffolds, grader and seeds.
fn provenance_scenarios() -> Vec<Scenario> {
    use ReasonCode::*;
    vec![
        (
            "evidence for another contract",
            ContractMismatch,
            Box::new(|_, e| {
                e.contract_hash = frozen(Stage::Train, 3, 8).hash().clone();
                None
            }),
        ),
        (
            "evidence from the test stage",
            StageMismatch,
            Box::new(|_, e| {
                e.stage = Stage::Test;
                None
            }),
        ),
        (
            "another pack ran",
            PackHashMismatch,
            Box::new(|_, e| {
                e.observed.pack_hash = pack("other");
                None
            }),
        ),
        (
            "another baseline scaffold",
            BaselineScaffoldMismatch,
            Box::new(|_, e| {
                e.observed.baseline_scaffold_hash = scaffold("other");
                None
            }),
        ),
        (
            "another candidate scaffold",
            CandidateScaffoldMismatch,
            Box::new(|_, e| {
                e.observed.candidate_scaffold_hash = scaffold("other");
                None
            }),
        ),
        (
            "another grader",
            GraderHashMismatch,
            Box::new(|_, e| {
                e.observed.grader_config_hash = geode_crucible::GraderHash::of_bytes(b"other");
                None
            }),
        ),
        (
            "a trial with a foreign seed",
            SeedMismatch,
            Box::new(|_, e| {
                e.trials[5].seed.0 ^= 1;
                None
            }),
        ),
    ]
}

/// Evidence that is incomplete, malformed, mostly infrastructure failure, or unsealed.
fn evidence_scenarios() -> Vec<Scenario> {
    use ReasonCode::*;
    vec![
        (
            "a missing candidate trial",
            CoverageNotExact,
            Box::new(|_, e| {
                let i = e
                    .trials
                    .iter()
                    .position(|t| t.arm == Arm::Candidate)
                    .unwrap();
                e.trials.remove(i);
                None
            }),
        ),
        (
            "a reward above 1",
            MalformedEvidence,
            Box::new(|_, e| {
                e.trials[0].reward = 1.5;
                None
            }),
        ),
        (
            "infrastructure failures over the allowance",
            InfraOverAllowance,
            Box::new(|_, e| {
                // 12 tasks x 3 trials x 2 arms = 72 trials; 5 % allows 3.
                for t in e.trials.iter_mut().take(4) {
                    t.infra_invalid = true;
                }
                None
            }),
        ),
        (
            "test stage without attestation",
            SealedNotAttested,
            Box::new(|_, e| {
                let c = frozen(Stage::Test, 3, 7);
                *e = evidence(&c, &tasks(12, 3), winning_reward);
                Some(c)
            }),
        ),
    ]
}

/// Valid evidence that does not show a real, material gain above the floor.
fn statistics_scenarios() -> Vec<Scenario> {
    use ReasonCode::*;
    vec![
        (
            "too few tasks",
            TooFewTasks,
            Box::new(|c, e| {
                *e = evidence(c, &tasks(5, 3), winning_reward);
                None
            }),
        ),
        (
            "one family",
            TooFewFamilies,
            Box::new(|c, e| {
                *e = evidence(c, &tasks(12, 1), winning_reward);
                None
            }),
        ),
        (
            "candidate under the floor",
            BelowFloor,
            Box::new(|c, e| {
                // Baseline never succeeds, candidate only on trial 0 of even tasks: mean 1/6 < 0.3.
                *e = evidence(c, &tasks(12, 3), |t, k, a| match a {
                    Arm::Baseline => 0.0,
                    Arm::Candidate => f64::from(u8::from(k == 0 && t % 2 == 0)),
                });
                None
            }),
        ),
        (
            "gain under materiality",
            BelowMateriality,
            Box::new(|c, e| {
                // Tiny, consistent gain of 0.01 on continuous rewards.
                *e = evidence(c, &tasks(12, 3), |t, k, a| {
                    let b = 0.5 + 0.01 * ((t as f64) - 6.0) + 0.001 * f64::from(k);
                    match a {
                        Arm::Baseline => b,
                        Arm::Candidate => b + 0.01 + 0.002 * ((t % 3) as f64),
                    }
                });
                None
            }),
        ),
        (
            "no real gain",
            LowerBoundNotPositive,
            Box::new(|c, e| {
                // Half the tasks better, half worse.
                *e = evidence(c, &tasks(12, 3), |t, k, a| match (a, t % 2) {
                    (Arm::Baseline, _) => f64::from(u8::from(k == 0)),
                    (Arm::Candidate, 0) => f64::from(u8::from(k <= 1)),
                    (Arm::Candidate, _) => 0.0,
                });
                None
            }),
        ),
    ]
}

/// Inputs on which the statistics cannot be computed at all.
fn degenerate_scenarios() -> Vec<Scenario> {
    use ReasonCode::*;
    vec![
        (
            "no task at all",
            DegenerateNoTasks,
            Box::new(|c, e| {
                *e = evidence(c, &[], winning_reward);
                None
            }),
        ),
        (
            "a single task",
            DegenerateSingleTask,
            Box::new(|c, e| {
                *e = evidence(c, &tasks(1, 1), winning_reward);
                None
            }),
        ),
        (
            "all deltas equal",
            DegenerateZeroVariance,
            Box::new(|c, e| {
                *e = evidence(c, &tasks(12, 3), |_, k, a| match a {
                    Arm::Baseline => f64::from(u8::from(k == 0)),
                    Arm::Candidate => f64::from(u8::from(k <= 1)),
                });
                None
            }),
        ),
    ]
}

/// A gain that a veto overrides: safety, budget, coverage.
fn veto_scenarios() -> Vec<Scenario> {
    use ReasonCode::*;
    vec![
        (
            "better score, more integrity signals",
            VetoSafety,
            Box::new(|_, e| {
                for t in e
                    .trials
                    .iter_mut()
                    .filter(|t| t.arm == Arm::Candidate && t.trial == 0)
                {
                    t.integrity = IntegritySignals {
                        network_attempts: 1,
                        ..Default::default()
                    };
                }
                None
            }),
        ),
        (
            "over the token budget",
            VetoBudget,
            Box::new(|c, e| {
                e.usage.tokens = c.contract().budgets.tokens + 1;
                None
            }),
        ),
        (
            "a task lost to infrastructure",
            VetoCoverage,
            Box::new(|_, e| {
                // All three pairs of task t0 lost: 3 infra trials, within the allowance of 3.
                for t in e
                    .trials
                    .iter_mut()
                    .filter(|t| t.task.as_str() == "t0" && t.arm == Arm::Baseline)
                {
                    t.infra_invalid = true;
                }
                None
            }),
        ),
    ]
}

#[test]
fn every_reason_code_is_produced_by_a_real_input() {
    let mut seen = BTreeSet::new();
    for (name, code, breaker) in scenarios() {
        let (c, mut e) = base();
        let c = breaker(&c, &mut e).unwrap_or(c);
        let r = decide(&c, &e);
        assert!(
            r.reasons.contains(&code),
            "{name}: expected {code}, got {:?} ({:?})",
            r.reasons,
            r.details
        );
        let want = if code.is_invalid() {
            Verdict::Invalid
        } else {
            Verdict::Reject
        };
        assert_eq!(r.verdict, want, "{name}");
        if code.is_invalid() {
            assert!(r.statistics.is_none(), "{name}: INVALID must not compare");
            assert!(!r.details.is_empty(), "{name}: INVALID must say why");
        }
        seen.insert(code);
    }
    let all: BTreeSet<_> = ReasonCode::ALL.iter().copied().collect();
    assert_eq!(seen, all, "codes without a scenario");
}

#[test]
fn safety_veto_rejects_whatever_the_gain() {
    let (c, mut e) = base();
    for t in e
        .trials
        .iter_mut()
        .filter(|t| t.arm == Arm::Candidate && t.trial == 0)
    {
        t.integrity.reward_tampering = 1;
    }
    let r = decide(&c, &e);
    assert_eq!(r.verdict, Verdict::Reject);
    assert_eq!(
        r.reasons,
        vec![ReasonCode::VetoSafety],
        "the gain alone would have kept it"
    );
    let s = r.safety.unwrap();
    assert!(s.vetoed && s.lower_bound.unwrap() > 0.0, "{s:?}");
    assert_eq!(s.candidate.flagged, 12);
    assert_eq!(s.candidate.signals.reward_tampering, 12);
    assert!(r.statistics.unwrap().lower_bound.unwrap() > 0.0);
}

#[test]
fn safety_compares_both_arms() {
    // The same few signals in both arms: no excess, no veto.
    let (c, mut e) = base();
    for t in e
        .trials
        .iter_mut()
        .filter(|t| t.trial == 0 && t.task.as_str() == "t1")
    {
        t.integrity.uncertain_effects = 1;
    }
    let r = decide(&c, &e);
    assert_eq!(r.verdict, Verdict::Keep, "{:?}", r.reasons);
    assert!(!r.safety.unwrap().vetoed);
}

#[test]
fn invalid_lists_every_problem() {
    let (c, mut e) = base();
    e.observed.pack_hash = pack("other");
    e.observed.grader_config_hash = geode_crucible::GraderHash::of_bytes(b"x");
    e.trials.pop();
    let (v, reasons) = reasons_of(&c, &e);
    assert_eq!(v, Verdict::Invalid);
    assert_eq!(
        reasons,
        vec![
            ReasonCode::PackHashMismatch,
            ReasonCode::GraderHashMismatch,
            ReasonCode::CoverageNotExact
        ]
    );
}

#[test]
fn coverage_problems_are_all_invalid() {
    let (c, e0) = base();
    // Duplicate row.
    let mut e = e0.clone();
    e.trials.push(e.trials[0].clone());
    assert!(reasons_of(&c, &e).1.contains(&ReasonCode::CoverageNotExact));
    // Trial index beyond trials_per_task.
    let mut e = e0.clone();
    e.trials[0].trial = 3;
    assert_eq!(reasons_of(&c, &e).0, Verdict::Invalid);
    // Unknown task.
    let mut e = e0.clone();
    e.trials[0].task = geode_crucible::TaskId::new("ghost");
    assert!(reasons_of(&c, &e).1.contains(&ReasonCode::CoverageNotExact));
    // Family disagreeing with the pack.
    let mut e = e0.clone();
    e.trials[0].family = geode_crucible::FamilyId::new("f9");
    assert!(reasons_of(&c, &e).1.contains(&ReasonCode::CoverageNotExact));
    // Non-finite reward: INVALID, and no evidence hash can be formed.
    let mut e = e0;
    e.trials[0].reward = f64::NAN;
    let r = decide(&c, &e);
    assert!(r.reasons.contains(&ReasonCode::MalformedEvidence));
    assert!(r.evidence_hash.is_none());
}

#[test]
fn infra_within_allowance_drops_pairs_and_still_decides() {
    let (c, mut e) = base();
    for t in e.trials.iter_mut().take(3) {
        t.infra_invalid = true;
    }
    let r = decide(&c, &e);
    assert_ne!(r.verdict, Verdict::Invalid, "{:?}", r.details);
    assert_eq!(r.counts.infra_invalid_trials, 3);
    assert_eq!(r.counts.infra_allowance_trials, 3);
    assert_eq!(r.counts.dropped_pairs, 2);
    assert_eq!(r.counts.valid_pairs, 34);
}

#[test]
fn degenerate_inputs_are_reported_not_interpolated() {
    let c = frozen(Stage::Train, 3, 7);
    let e = evidence(&c, &tasks(12, 3), |_, k, a| match a {
        Arm::Baseline => f64::from(u8::from(k == 0)),
        Arm::Candidate => f64::from(u8::from(k <= 1)),
    });
    let r = decide(&c, &e);
    let s = r.statistics.unwrap();
    assert_eq!(s.degenerate, Some(Degeneracy::ZeroVariance));
    assert_eq!(s.std_error, Some(0.0));
    assert!(s.t.is_none() && s.bootstrap.is_none() && s.lower_bound.is_none());
    // The sign-flip test still exists: only the all-plus vector reaches the sum, p = 2^-12.
    assert_eq!(s.permutation.unwrap().p_value, 1.0 / 4096.0);
    assert_eq!(r.reasons, vec![ReasonCode::DegenerateZeroVariance]);

    let e = evidence(&c, &tasks(1, 1), winning_reward);
    let s = decide(&c, &e).statistics.unwrap();
    assert_eq!(s.degenerate, Some(Degeneracy::SingleTask));
    assert!(s.estimate.is_some() && s.std_error.is_none());

    let e = evidence(&c, &[], winning_reward);
    let r = decide(&c, &e);
    let s = r.statistics.unwrap();
    assert_eq!(s.degenerate, Some(Degeneracy::NoTasks));
    assert!(s.estimate.is_none() && s.permutation.is_none());
    assert_eq!(r.verdict, Verdict::Reject);
}

#[test]
fn percentile_bound_is_used_when_the_contract_says_so() {
    let mut cc = super::common::contract(Stage::Train, 3, 7);
    cc.decision_rule.lower_bound = geode_crucible::LowerBoundMethod::Percentile;
    let c = cc.freeze().unwrap();
    let e = evidence(&c, &tasks(12, 3), winning_reward);
    let s = decide(&c, &e).statistics.unwrap();
    assert_eq!(s.lower_bound, Some(s.bootstrap.unwrap().percentile_lower));
}

#[test]
fn test_stage_decides_with_a_matching_attestation() {
    let c = frozen(Stage::Test, 3, 7);
    let mut e = evidence(&c, &tasks(12, 3), winning_reward);
    let mut rng = geode_crucible::seed::rng_from_seed(1);
    let key = geode_crucible::SealKey::generate(&mut rng);
    let sealed = seal(&[], c.stage_pack(), &key, &mut rng).unwrap();
    let mut state = SealState::new(&sealed);
    let (att, _permit) = state.begin_opening(&c, "2026-07-04T00:00:00Z").unwrap();
    e.attestation = Some(att.clone());
    assert_eq!(decide(&c, &e).verdict, Verdict::Keep);
    // An attestation for another contract does not count.
    let mut other = att;
    other.contract_hash = frozen(Stage::Test, 3, 8).hash().clone();
    e.attestation = Some(other);
    assert!(
        decide(&c, &e)
            .reasons
            .contains(&ReasonCode::SealedNotAttested)
    );
}

#[test]
fn evidence_hash_ignores_row_order() {
    let (c, e) = base();
    let mut shuffled = e.clone();
    shuffled.trials.reverse();
    assert_eq!(
        decide(&c, &e).evidence_hash,
        decide(&c, &shuffled).evidence_hash
    );
    let mut changed = e.clone();
    changed.trials[0].reward = 0.5;
    assert_ne!(
        decide(&c, &e).evidence_hash,
        decide(&c, &changed).evidence_hash
    );
}

/// A KEEP names every check it passed with what it needed; a small positive gain the design
/// cannot detect is a REJECT marked underpowered, with a next step that says so.
#[test]
fn decisions_explain_themselves() {
    let (c, e) = base();
    let keep = decide(&c, &e);
    let x = keep.explanation.clone().expect("an explanation");
    assert_eq!(x.verdict, Verdict::Keep);
    assert!(x.checks.len() >= 7, "{x:?}");
    assert!(x.checks.iter().all(|c| c.passed), "{x:?}");
    let text = x.to_string();
    assert!(text.contains("pass lower bound"), "{text}");
    assert!(text.contains("(needs > 0)"), "{text}");
    assert!(text.contains("materiality"), "{text}");
    assert!(text.contains("next: confirm it"), "{text}");
    assert!(!x.underpowered);
    // One task in twelve better on one trial of three: a real but small gain.
    let small = evidence(&c, &super::common::tasks(12, 3), |task, trial, arm| {
        let base = f64::from(u8::from(trial == 0));
        match arm {
            Arm::Candidate if task == 0 && trial == 1 => 1.0,
            _ => base,
        }
    });
    let r = decide(&c, &small);
    assert_eq!(r.verdict, Verdict::Reject, "{:?}", r.reasons);
    let x = r.explanation.expect("an explanation");
    assert!(x.underpowered, "{x:?}");
    assert!(
        x.checks
            .iter()
            .any(|c| !c.passed && c.name == "lower bound")
    );
    assert!(x.next_step.starts_with("underpowered"), "{}", x.next_step);
    // Numbers for reading, not floating-point noise.
    assert!(!x.to_string().contains("0000000"), "{x}");
}
