//! Sealed holdouts: confidentiality, integrity of blob and commitment, burn-once opening.

use geode_crucible::sealed::blob_pack_hash;
use geode_crucible::seed::rng_from_seed;
use geode_crucible::{
    ArchiveEntry, Commitment, SealError, SealKey, SealState, SealedPack, Stage, seal,
    verify_commitment,
};

use super::common::frozen;

fn entries() -> Vec<ArchiveEntry> {
    vec![
        ArchiveEntry {
            path: "fix-git/instruction.md".into(),
            mode: 0o644,
            bytes: b"Recover the lost commit. SECRET-ANSWER-42".to_vec(),
        },
        ArchiveEntry {
            path: "fix-git/tests/test.sh".into(),
            mode: 0o755,
            bytes: b"#!/bin/sh\ngrep -q 42 /app/out\n".to_vec(),
        },
    ]
}

fn sealed_pack() -> (geode_crucible::FrozenContract, SealKey, SealedPack) {
    let c = frozen(Stage::Test, 3, 7);
    let mut rng = rng_from_seed(99);
    let key = SealKey::generate(&mut rng);
    let sealed = seal(&entries(), c.stage_pack(), &key, &mut rng).unwrap();
    (c, key, sealed)
}

#[test]
fn sealed_blob_does_not_contain_the_plaintext() {
    let (_, _, s) = sealed_pack();
    let needle = b"SECRET-ANSWER-42";
    assert!(!s.blob.windows(needle.len()).any(|w| w == needle));
    assert!(!s.blob.windows(6).any(|w| w == b"fix-gi"));
}

#[test]
fn opening_with_the_key_round_trips() {
    let (c, key, s) = sealed_pack();
    let mut state = SealState::new(&s);
    let (att, permit) = state.begin_opening(&c, "2026-07-04T10:00:00Z").unwrap();
    assert_eq!(att.contract_hash, *c.hash());
    assert_eq!(att.commitment, s.commitment);
    let opened = state.open(permit, &s.blob, &key).unwrap();
    assert_eq!(opened, entries());
    // The state (with its attestation) survives a JSON round trip, as the harness persists it.
    let json = serde_json::to_string(&state).unwrap();
    let back: SealState = serde_json::from_str(&json).unwrap();
    assert_eq!(back, state);
    assert!(back.is_opened());
}

#[test]
fn wrong_key_fails_authentication() {
    let (c, _, s) = sealed_pack();
    let mut state = SealState::new(&s);
    let (_, permit) = state.begin_opening(&c, "t").unwrap();
    let wrong = SealKey::from_bytes([7u8; 32]);
    assert!(matches!(
        state.open(permit, &s.blob, &wrong),
        Err(SealError::AuthenticationFailed)
    ));
}

#[test]
fn second_opening_is_refused_and_the_first_decision_stands() {
    let (c, _, s) = sealed_pack();
    let mut state = SealState::new(&s);
    state.begin_opening(&c, "first").unwrap();
    // Persisted and reloaded by another process: still refused.
    let mut reloaded: SealState =
        serde_json::from_str(&serde_json::to_string(&state).unwrap()).unwrap();
    match reloaded.begin_opening(&c, "second") {
        Err(SealError::AlreadyOpened { opened_at, .. }) => assert_eq!(opened_at, "first"),
        other => panic!("{other:?}"),
    }
    // Even for another contract on the same pack.
    let mut other = super::common::contract(Stage::Test, 3, 8);
    other.packs.test = s.pack_hash.clone();
    let other = other.freeze().unwrap();
    assert!(matches!(
        reloaded.begin_opening(&other, "third"),
        Err(SealError::AlreadyOpened { .. })
    ));

    // The first decision is recorded once.
    let e = super::common::evidence(
        &c,
        &super::common::tasks(12, 3),
        super::common::winning_reward,
    );
    let mut e = e;
    e.attestation = state.opening.clone();
    let record = geode_crucible::decide(&c, &e);
    state.record_decision(&record).unwrap();
    assert!(matches!(
        state.record_decision(&record),
        Err(SealError::DecisionAlreadyRecorded(_))
    ));
    assert_eq!(state.decision.as_ref().unwrap().verdict, record.verdict);
}

#[test]
fn only_a_test_contract_for_this_pack_may_open_it() {
    let (_, _, s) = sealed_pack();
    let mut state = SealState::new(&s);
    let train = frozen(Stage::Train, 3, 7);
    assert!(matches!(
        state.begin_opening(&train, "t"),
        Err(SealError::Mismatch(_))
    ));
    let mut other = super::common::contract(Stage::Test, 3, 7);
    other.packs.test = super::common::pack("another test pack");
    assert!(matches!(
        state.begin_opening(&other.freeze().unwrap(), "t"),
        Err(SealError::Mismatch(_))
    ));
    assert!(!state.is_opened());
}

#[test]
fn flipping_one_ciphertext_byte_is_detected() {
    let (c, key, s) = sealed_pack();
    let mut blob = s.blob.clone();
    let last = blob.len() - 20; // inside the ciphertext body
    blob[last] ^= 0x01;
    // Against the published commitment: the commitment no longer matches.
    assert!(matches!(
        verify_commitment(&blob, &s.commitment),
        Err(SealError::CommitmentMismatch { .. })
    ));
    let mut state = SealState::new(&s);
    let (_, permit) = state.begin_opening(&c, "t").unwrap();
    assert!(matches!(
        state.open(permit, &blob, &key),
        Err(SealError::CommitmentMismatch { .. })
    ));
    // An attacker who also replaces the commitment still fails authentication.
    let forged = geode_crucible::commitment(&blob, &s.pack_hash);
    let mut forged_state = SealState::new(&SealedPack {
        blob: blob.clone(),
        commitment: forged,
        pack_hash: s.pack_hash.clone(),
    });
    let (_, permit) = forged_state.begin_opening(&c, "t").unwrap();
    assert!(matches!(
        forged_state.open(permit, &blob, &key),
        Err(SealError::AuthenticationFailed)
    ));
}

#[test]
fn tampered_header_fails_authentication() {
    let (_, key, s) = sealed_pack();
    // Flip a nonce byte (offset 40..52), recompute the commitment: AEAD still refuses.
    let mut blob = s.blob.clone();
    blob[45] ^= 0x80;
    let c2 = geode_crucible::commitment(&blob, &blob_pack_hash(&blob).unwrap());
    let mut contract = super::common::contract(Stage::Test, 3, 7);
    contract.packs.test = s.pack_hash.clone();
    let mut st = SealState::new(&SealedPack {
        blob: blob.clone(),
        commitment: c2,
        pack_hash: s.pack_hash,
    });
    let (_, permit) = st.begin_opening(&contract.freeze().unwrap(), "t").unwrap();
    assert!(matches!(
        st.open(permit, &blob, &key),
        Err(SealError::AuthenticationFailed)
    ));
}

#[test]
fn tampered_commitment_is_detected() {
    let (_, _, s) = sealed_pack();
    let mut hex = s.commitment.as_str().to_owned();
    let flipped = if hex.ends_with('0') { '1' } else { '0' };
    hex.pop();
    hex.push(flipped);
    let bad = Commitment::parse(&hex).unwrap();
    assert!(matches!(
        verify_commitment(&s.blob, &bad),
        Err(SealError::CommitmentMismatch { .. })
    ));
    assert_eq!(
        verify_commitment(&s.blob, &s.commitment).unwrap(),
        s.pack_hash
    );
}

#[test]
fn nonces_are_fresh_per_sealing() {
    let c = frozen(Stage::Test, 3, 7);
    let key = SealKey::from_bytes([1u8; 32]);
    let mut rng = rng_from_seed(3);
    let a = seal(&entries(), c.stage_pack(), &key, &mut rng).unwrap();
    let b = seal(&entries(), c.stage_pack(), &key, &mut rng).unwrap();
    assert_ne!(
        a.blob[40..52],
        b.blob[40..52],
        "same pack, same key: the nonce must differ"
    );
    assert_ne!(a.commitment, b.commitment);
}

#[test]
fn key_hex_round_trip_and_redacted_debug() {
    let k = SealKey::from_bytes([0xab; 32]);
    assert_eq!(SealKey::from_hex(&format!("{}\n", k.to_hex())).unwrap(), k);
    assert!(SealKey::from_hex("zz").is_err());
    assert!(!format!("{k:?}").contains("ab"));
}
