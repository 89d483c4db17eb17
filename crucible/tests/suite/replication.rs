//! Replication: same contract, fresh trial seeds, compare the decisions.

use geode_crucible::{
    Arm, ReplicationError, Stage, TrialSeed, Verdict, compare_decisions, decide,
    replication_run_seed,
};

use super::common::{evidence, frozen, tasks, winning_reward};

#[test]
fn replication_reports_verdict_and_movement() {
    let c = frozen(Stage::Train, 3, 7);
    let original = decide(&c, &evidence(&c, &tasks(12, 3), winning_reward));

    // The replica: fresh seeds derived from the contract, slightly different outcomes.
    let mut e = evidence(&c, &tasks(12, 3), |t, k, a| {
        if a == Arm::Candidate && t == 0 && k == 1 {
            0.0
        } else {
            winning_reward(t, k, a)
        }
    });
    let fresh = replication_run_seed(c.hash(), 1);
    e.run_seed = fresh;
    e.replication = Some(1);
    for t in &mut e.trials {
        t.seed = TrialSeed::derive(fresh, &t.task, t.trial);
    }
    let replica = decide(&c, &e);
    assert_eq!(replica.verdict, Verdict::Keep, "{:?}", replica.details);

    let rep = compare_decisions(&original, &replica).unwrap();
    assert!(rep.verdict_replicated);
    let moved = rep.estimate_moved.unwrap();
    assert!((moved - (-1.0 / 36.0)).abs() < 1e-12, "{moved}");
    assert!(rep.moved_in_std_errors.unwrap() < 1.0);
    assert_eq!(rep.within_original_interval, Some(true));
    assert!(rep.reasons_added.is_empty() && rep.reasons_removed.is_empty());

    // Replication with the original seeds, or of another contract, is refused.
    assert!(matches!(
        compare_decisions(&original, &original),
        Err(ReplicationError::SameSeeds(7))
    ));
    let other = frozen(Stage::Train, 3, 8);
    let o = decide(&other, &evidence(&other, &tasks(12, 3), winning_reward));
    assert!(matches!(
        compare_decisions(&original, &o),
        Err(ReplicationError::ContractMismatch { .. })
    ));
}

#[test]
fn replica_with_the_wrong_run_seed_is_invalid() {
    let c = frozen(Stage::Train, 3, 7);
    let mut e = evidence(&c, &tasks(12, 3), winning_reward);
    e.replication = Some(1); // claims a replication but used the original seeds
    let r = decide(&c, &e);
    assert_eq!(r.verdict, Verdict::Invalid);
    assert!(
        r.reasons
            .contains(&geode_crucible::ReasonCode::SeedMismatch)
    );
}
