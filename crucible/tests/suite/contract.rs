//! Contract freezing, canonical JSON, validation errors naming fields, seed derivations.

use geode_crucible::{
    Arm, CanonicalError, ContractError, ContractHash, FamilyId, FrozenContract, IntegritySignals,
    PackHash, SafetyRule, Stage, TaskId, TrialOutcome, TrialSeed, bootstrap_seed, commitment,
    evidence_hash, permutation_seed, replication_run_seed, to_canonical_json,
};

use super::common::{contract, frozen};

#[test]
fn freeze_hash_ignores_formatting_and_key_order() {
    let f = frozen(Stage::Train, 3, 42);
    // Re-serialize with whitespace and reversed key order: same contract, same hash.
    let v: serde_json::Value = serde_json::from_str(f.canonical_json()).unwrap();
    let pretty = serde_json::to_string_pretty(&v).unwrap();
    let again = FrozenContract::from_json(&pretty).unwrap();
    assert_eq!(again.hash(), f.hash());
    assert_eq!(again.canonical_json(), f.canonical_json());
    // Canonical form: no whitespace, sorted keys.
    assert!(!f.canonical_json().contains('\n') && !f.canonical_json().contains("\": "));
    assert!(f.canonical_json().starts_with("{\"baseline\":"));
    // Verification against the stored hash.
    assert!(FrozenContract::verify_json(&pretty, f.hash()).is_ok());
}

#[test]
fn a_reward_key_is_part_of_the_contract_and_absent_keeps_old_hashes() {
    let plain = frozen(Stage::Train, 3, 42);
    assert!(!plain.canonical_json().contains("reward_key"));
    let mut keyed = contract(Stage::Train, 3, 42);
    keyed.reward_key = Some("correctness".into());
    let keyed = keyed.freeze().unwrap();
    assert!(
        keyed
            .canonical_json()
            .contains("\"reward_key\":\"correctness\""),
        "{}",
        keyed.canonical_json()
    );
    assert_ne!(keyed.hash(), plain.hash());
    let back = FrozenContract::from_json(keyed.canonical_json()).unwrap();
    assert_eq!(back.contract().reward_key.as_deref(), Some("correctness"));
    let mut empty = contract(Stage::Train, 3, 42);
    empty.reward_key = Some(" ".into());
    match empty.freeze() {
        Err(e) => assert!(e.to_string().contains("reward_key"), "{e}"),
        Ok(_) => panic!("an empty reward key froze"),
    }
}

#[test]
fn verify_detects_an_edited_contract() {
    let f = frozen(Stage::Train, 3, 42);
    let edited = f
        .canonical_json()
        .replace("\"materiality\":0.02", "\"materiality\":0.01");
    assert_ne!(edited, f.canonical_json());
    match FrozenContract::verify_json(&edited, f.hash()) {
        Err(ContractError::HashMismatch { expected, .. }) => {
            assert_eq!(expected, f.hash().as_str())
        }
        other => panic!("expected hash mismatch, got {other:?}"),
    }
}

type Mutation = Box<dyn Fn(&mut geode_crucible::Contract)>;

#[test]
fn validation_errors_name_the_field() {
    let cases: Vec<(&str, Mutation)> = vec![
        (
            "decision_rule.confidence",
            Box::new(|c| c.decision_rule.confidence = 0.5),
        ),
        (
            "decision_rule.confidence",
            Box::new(|c| c.decision_rule.confidence = 1.0),
        ),
        (
            "decision_rule.confidence",
            Box::new(|c| c.decision_rule.confidence = f64::NAN),
        ),
        (
            "decision_rule.bootstrap_resamples",
            Box::new(|c| c.decision_rule.bootstrap_resamples = 999),
        ),
        (
            "decision_rule.permutation_resamples",
            Box::new(|c| c.decision_rule.permutation_resamples = 10),
        ),
        (
            "decision_rule.materiality",
            Box::new(|c| c.decision_rule.materiality = -0.1),
        ),
        (
            "decision_rule.candidate_floor",
            Box::new(|c| c.decision_rule.candidate_floor = 1.5),
        ),
        (
            "decision_rule.min_tasks",
            Box::new(|c| c.decision_rule.min_tasks = 1),
        ),
        (
            "decision_rule.min_families",
            Box::new(|c| c.decision_rule.min_families = 0),
        ),
        (
            "vetoes.safety_tolerance",
            Box::new(|c| c.vetoes.safety_tolerance = 0.0),
        ),
        (
            "vetoes.safety_rule.confidence",
            Box::new(|c| c.vetoes.safety_rule = SafetyRule::EvidentHarm { confidence: 1.0 }),
        ),
        (
            "vetoes.infra_allowance",
            Box::new(|c| c.vetoes.infra_allowance = 1.0),
        ),
        (
            "budgets.wall_seconds",
            Box::new(|c| c.budgets.wall_seconds = f64::INFINITY),
        ),
        ("budgets.cost_usd", Box::new(|c| c.budgets.cost_usd = -1.0)),
        (
            "budgets.model_calls",
            Box::new(|c| c.budgets.model_calls = 0),
        ),
        ("budgets.tokens", Box::new(|c| c.budgets.tokens = 0)),
        ("trials_per_task", Box::new(|c| c.trials_per_task = 0)),
        (
            "packs.test",
            Box::new(|c| c.packs.test = c.packs.train.clone()),
        ),
        (
            "schema",
            Box::new(|c| c.schema = "geode.contract.v0".into()),
        ),
        (
            "baseline.model_route",
            Box::new(|c| c.baseline.model_route = " ".into()),
        ),
        (
            "evaluator.source_revision",
            Box::new(|c| c.evaluator.source_revision.clear()),
        ),
    ];
    for (field, mutate) in cases {
        let mut c = contract(Stage::Train, 3, 1);
        mutate(&mut c);
        match c.freeze() {
            Err(ContractError::Field { field: f, message }) => {
                assert_eq!(f, field, "{message}");
            }
            other => panic!("{field}: expected a field error, got {other:?}"),
        }
    }
}

#[test]
fn canonical_json_refuses_non_finite_with_path() {
    let mut c = contract(Stage::Train, 3, 1);
    c.budgets.cost_usd = f64::NAN;
    match to_canonical_json(&c) {
        Err(CanonicalError::NonFinite { path, .. }) => assert_eq!(path, "budgets.cost_usd"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn unknown_fields_and_bad_digests_are_refused() {
    let f = frozen(Stage::Train, 3, 1);
    let extra = f.canonical_json().replacen('{', "{\"surprise\":1,", 1);
    assert!(matches!(
        FrozenContract::from_json(&extra),
        Err(ContractError::Parse(_))
    ));
    let upper = f.canonical_json().replace(
        f.contract().packs.train.as_str(),
        &f.contract().packs.train.as_str().to_uppercase(),
    );
    assert!(matches!(
        FrozenContract::from_json(&upper),
        Err(ContractError::Parse(_))
    ));
}

#[test]
fn a_contract_without_lower_bound_still_means_bca() {
    let f = frozen(Stage::Train, 3, 1);
    let mut v: serde_json::Value = serde_json::from_str(f.canonical_json()).unwrap();
    v["decision_rule"]
        .as_object_mut()
        .unwrap()
        .remove("lower_bound");
    let g = FrozenContract::from_json(&v.to_string()).unwrap();
    assert_eq!(
        g.contract().decision_rule.lower_bound,
        geode_crucible::LowerBoundMethod::Bca
    );
}

#[test]
fn a_contract_without_safety_rule_still_means_prove_safe() {
    let f = frozen(Stage::Train, 3, 1);
    let mut v: serde_json::Value = serde_json::from_str(f.canonical_json()).unwrap();
    assert_eq!(v["vetoes"]["safety_rule"]["method"], "evident_harm");
    v["vetoes"].as_object_mut().unwrap().remove("safety_rule");
    let g = FrozenContract::from_json(&v.to_string()).unwrap();
    assert_eq!(g.contract().vetoes.safety_rule, SafetyRule::ProveSafe);
    assert!(!g.canonical_json().contains("safety_rule"));
    // A misspelled key inside the rule is refused, like anywhere else in a contract.
    v["vetoes"]["safety_rule"] = serde_json::json!({"method": "evident_harm", "confidense": 0.9});
    assert!(matches!(
        FrozenContract::from_json(&v.to_string()),
        Err(ContractError::Parse(_))
    ));
}

/// Golden vectors: these numbers may only change with a schema or derivation version bump.
#[test]
fn golden_hashes_and_seeds() {
    // A contract of the rule before `safety_rule` had a name: its hash did not move.
    let mut legacy = contract(Stage::Train, 3, 42);
    legacy.vetoes.safety_rule = SafetyRule::ProveSafe;
    let f = legacy.freeze().unwrap();
    assert_eq!(
        f.hash().as_str(),
        "5b639e5352d39bd17e6471bb3ea7098c737218fb05f612df6e0cab56a90ec843",
        "canonical: {}",
        f.canonical_json()
    );
    let f = frozen(Stage::Train, 3, 42);
    assert_eq!(
        f.hash().as_str(),
        "3760cb001deec346663c43f73a1a02ac09b143fe0f5ca20447e8b576532049ce",
        "canonical: {}",
        f.canonical_json()
    );
    // Reproduced independently with Python's hashlib/struct/json (sort_keys, compact separators).
    assert_eq!(
        TrialSeed::derive(42, &TaskId::new("hello-world"), 0).0,
        4_839_302_849_194_223_527
    );
    let h = ContractHash::of_bytes(b"geode");
    assert_eq!(bootstrap_seed(&h), 16_082_865_930_030_379_341);
    assert_eq!(permutation_seed(&h), 4_609_028_395_098_241_915);
    assert_eq!(replication_run_seed(&h, 1), 10_496_637_318_403_472_758);
    let trials = vec![TrialOutcome {
        task: TaskId::new("t0"),
        family: FamilyId::new("f0"),
        arm: Arm::Baseline,
        trial: 0,
        seed: TrialSeed(1),
        reward: 0.5,
        infra_invalid: false,
        integrity: IntegritySignals::default(),
    }];
    assert_eq!(
        evidence_hash(&trials).unwrap().as_str(),
        "2552a7a6dd3b9634fc8f72f6694c4d90a4a0bffba8a28cc8ede74a2a21f45771"
    );
    assert_eq!(
        commitment(b"blob", &PackHash::of_bytes(b"p")).as_str(),
        "519c46b85f8b886fbe5e9ccef7499516553e4940b64301d206cb435042284b62"
    );
}
