//! Sealed holdouts: the test pack encrypted at rest, a public commitment, and burn-once opening.
//!
//! Sealed blob (`geode.sealed.v1`), bytes:
//! ```text
//! "GEODESL1"     8 bytes magic
//! pack hash      32 bytes (raw SHA-256 of the plaintext pack, as the harness hashes packs)
//! nonce          12 bytes, drawn from the caller's cryptographic RNG at sealing time
//! ciphertext     ChaCha20-Poly1305(key, nonce, archive bytes, aad = magic || pack hash),
//!                tag included (16 bytes)
//! ```
//! The header is authenticated as associated data, so changing the pack hash or the nonce fails
//! authentication like changing the ciphertext. The nonce is random, never derived from the
//! content: sealing the same pack twice under one key must not reuse a nonce.
//!
//! Commitment (the only public value): SHA-256(`"geode.seal.commitment.v1"` || blob length
//! (u64) || blob || pack hash). It binds the exact ciphertext and the plaintext's identity.
//!
//! Burn-once: [`SealState`] is the bookkeeping the harness persists next to the blob. Decryption
//! needs an [`OpeningPermit`], and the only way to get one is [`SealState::begin_opening`] on a
//! state that was never opened, which records an [`Attestation`] (the harness writes the state
//! before the first trial). A second opening is refused with the first attestation, and the
//! first recorded decision cannot be replaced. A crash between attestation and decision burns
//! the pack without a result: that is the price of "the first result stands".

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use rand::CryptoRng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::archive::{ArchiveEntry, decode_archive, encode_archive};
use crate::attestation::{ATTESTATION_SCHEMA, Attestation};
use crate::contract::{FrozenContract, Stage};
use crate::error::SealError;
use crate::ids::{Commitment, ContractHash, EvidenceHash, PackHash};
use crate::record::DecisionRecord;
use crate::verdict::Verdict;

const MAGIC: &[u8; 8] = b"GEODESL1";
const HEADER: usize = 8 + 32 + 12;

/// Schema tag of a seal state.
pub const SEAL_STATE_SCHEMA: &str = "geode.seal_state.v1";

/// A 32-byte ChaCha20-Poly1305 key. Its `Debug` does not print it.
#[derive(Clone, PartialEq, Eq)]
pub struct SealKey([u8; 32]);

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(<redacted>)")
    }
}

impl SealKey {
    /// Wraps 32 raw key bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> SealKey {
        SealKey(bytes)
    }

    /// Parses the 64-hex-character form a key file holds (surrounding whitespace ignored).
    pub fn from_hex(text: &str) -> Result<SealKey, SealError> {
        let mut k = [0u8; 32];
        hex::decode_to_slice(text.trim(), &mut k).map_err(|_| SealError::BadKey)?;
        Ok(SealKey(k))
    }

    /// The 64 lower-case hex characters a key file holds (the secret itself).
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// A fresh key from a cryptographic RNG (the harness passes the OS generator).
    pub fn generate<R: CryptoRng + ?Sized>(rng: &mut R) -> SealKey {
        let mut k = [0u8; 32];
        rng.fill_bytes(&mut k);
        SealKey(k)
    }

    fn cipher(&self) -> ChaCha20Poly1305 {
        ChaCha20Poly1305::new(Key::from_slice(&self.0))
    }
}

/// A sealed pack: the blob to store and the commitment to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedPack {
    /// The `geode.sealed.v1` bytes to store: header, nonce and ciphertext.
    pub blob: Vec<u8>,
    /// The public commitment to `blob` and `pack_hash`.
    pub commitment: Commitment,
    /// Hash of the plaintext pack, as the caller passed it to [`seal`].
    pub pack_hash: PackHash,
}

fn aad(pack_hash: &[u8]) -> Vec<u8> {
    let mut a = Vec::with_capacity(40);
    a.extend_from_slice(MAGIC);
    a.extend_from_slice(pack_hash);
    a
}

/// The commitment of a blob to the pack hash it claims.
pub fn commitment(blob: &[u8], pack_hash: &PackHash) -> Commitment {
    let mut h = Sha256::new();
    h.update(b"geode.seal.commitment.v1");
    h.update((blob.len() as u64).to_le_bytes());
    h.update(blob);
    h.update(pack_hash.to_bytes());
    Commitment::from_digest(h.finalize().into())
}

/// Encrypts the pack `entries` whose pack hash is `pack_hash`, with a nonce drawn from `rng`.
pub fn seal<R: CryptoRng + ?Sized>(
    entries: &[ArchiveEntry],
    pack_hash: &PackHash,
    key: &SealKey,
    rng: &mut R,
) -> Result<SealedPack, SealError> {
    let plaintext = encode_archive(entries)?;
    let mut nonce = [0u8; 12];
    rng.fill_bytes(&mut nonce);
    let ph = pack_hash.to_bytes();
    let ciphertext = key
        .cipher()
        .encrypt(
            Nonce::from_slice(&nonce),
            Payload {
                msg: &plaintext,
                aad: &aad(&ph),
            },
        )
        .map_err(|_| SealError::EncryptionFailed)?;
    let mut blob = Vec::with_capacity(HEADER + ciphertext.len());
    blob.extend_from_slice(MAGIC);
    blob.extend_from_slice(&ph);
    blob.extend_from_slice(&nonce);
    blob.extend_from_slice(&ciphertext);
    Ok(SealedPack {
        commitment: commitment(&blob, pack_hash),
        blob,
        pack_hash: pack_hash.clone(),
    })
}

/// The pack hash a blob's header claims.
pub fn blob_pack_hash(blob: &[u8]) -> Result<PackHash, SealError> {
    if blob.len() < HEADER + 16 || &blob[..8] != MAGIC {
        return Err(SealError::Malformed("not a geode.sealed.v1 blob"));
    }
    let mut ph = [0u8; 32];
    ph.copy_from_slice(&blob[8..40]);
    Ok(PackHash::from_digest(ph))
}

/// Checks a blob against a published commitment; returns the pack hash it commits to.
pub fn verify_commitment(blob: &[u8], expected: &Commitment) -> Result<PackHash, SealError> {
    let pack_hash = blob_pack_hash(blob)?;
    let actual = commitment(blob, &pack_hash);
    if &actual != expected {
        return Err(SealError::CommitmentMismatch {
            expected: expected.to_string(),
            actual: actual.to_string(),
        });
    }
    Ok(pack_hash)
}

fn decrypt(blob: &[u8], key: &SealKey) -> Result<Vec<ArchiveEntry>, SealError> {
    blob_pack_hash(blob)?;
    let plaintext = key
        .cipher()
        .decrypt(
            Nonce::from_slice(&blob[40..HEADER]),
            Payload {
                msg: &blob[HEADER..],
                aad: &blob[..40],
            },
        )
        .map_err(|_| SealError::AuthenticationFailed)?;
    Ok(decode_archive(&plaintext)?)
}

/// The first decision made on an opened pack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedDecision {
    /// The contract decided; the one the opening was attested for.
    pub contract_hash: ContractHash,
    /// The decision record's evidence hash (`None` when its trial table was malformed).
    pub evidence_hash: Option<EvidenceHash>,
    /// The verdict that stands for this pack.
    pub verdict: Verdict,
}

/// Proof, inside one process, that this opening was attested. Neither `Clone` nor
/// deserializable: it exists only as the result of [`SealState::begin_opening`].
#[derive(Debug)]
pub struct OpeningPermit {
    commitment: Commitment,
}

/// Burn-once bookkeeping of one sealed pack (`geode.seal_state.v1`), persisted by the harness.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SealState {
    /// Always [`SEAL_STATE_SCHEMA`].
    pub schema: String,
    /// The sealed pack's public commitment; a permit and a blob must match it.
    pub commitment: Commitment,
    /// Hash of the plaintext pack; the blob's header must claim it.
    pub pack_hash: PackHash,
    /// Set by the first (and only) opening.
    pub opening: Option<Attestation>,
    /// Set by the first decision after the opening; never replaced.
    pub decision: Option<RecordedDecision>,
}

impl SealState {
    /// State of a freshly sealed pack.
    pub fn new(sealed: &SealedPack) -> SealState {
        SealState {
            schema: SEAL_STATE_SCHEMA.to_owned(),
            commitment: sealed.commitment.clone(),
            pack_hash: sealed.pack_hash.clone(),
            opening: None,
            decision: None,
        }
    }

    /// Whether the pack was opened (its one opening is spent).
    pub fn is_opened(&self) -> bool {
        self.opening.is_some()
    }

    /// Attests the opening of this pack for `contract` (a test-stage contract whose test pack is
    /// this pack). Refused if the pack was opened before: the first result stands.
    pub fn begin_opening(
        &mut self,
        contract: &FrozenContract,
        opened_at: &str,
    ) -> Result<(Attestation, OpeningPermit), SealError> {
        if let Some(first) = &self.opening {
            return Err(SealError::AlreadyOpened {
                commitment: self.commitment.to_string(),
                opened_at: first.opened_at.clone(),
                contract_hash: first.contract_hash.to_string(),
            });
        }
        let c = contract.contract();
        if c.stage != Stage::Test {
            return Err(SealError::Mismatch(
                "a sealed pack is opened only by a test-stage contract".into(),
            ));
        }
        if c.packs.test != self.pack_hash {
            return Err(SealError::Mismatch(format!(
                "contract's test pack {} is not the sealed pack {}",
                c.packs.test, self.pack_hash
            )));
        }
        let attestation = Attestation {
            schema: ATTESTATION_SCHEMA.to_owned(),
            commitment: self.commitment.clone(),
            pack_hash: self.pack_hash.clone(),
            contract_hash: contract.hash().clone(),
            candidate_scaffold_hash: c.candidate.scaffold_hash.clone(),
            evaluator: c.evaluator.clone(),
            opened_at: opened_at.to_owned(),
        };
        self.opening = Some(attestation.clone());
        Ok((
            attestation,
            OpeningPermit {
                commitment: self.commitment.clone(),
            },
        ))
    }

    /// Whether `key` opens `blob` as this pack, checked before the opening is burned: a wrong
    /// key, or a blob that is not this pack, then costs nothing. The plaintext is dropped.
    pub fn check_key(&self, blob: &[u8], key: &SealKey) -> Result<(), SealError> {
        let pack_hash = verify_commitment(blob, &self.commitment)?;
        if pack_hash != self.pack_hash {
            return Err(SealError::Mismatch("blob claims another pack hash".into()));
        }
        decrypt(blob, key).map(drop)
    }

    /// Decrypts the blob with the permit of this state's opening (consumed).
    pub fn open(
        &self,
        permit: OpeningPermit,
        blob: &[u8],
        key: &SealKey,
    ) -> Result<Vec<ArchiveEntry>, SealError> {
        if permit.commitment != self.commitment || self.opening.is_none() {
            return Err(SealError::Mismatch(
                "permit belongs to another sealed pack".into(),
            ));
        }
        let pack_hash = verify_commitment(blob, &self.commitment)?;
        if pack_hash != self.pack_hash {
            return Err(SealError::Mismatch("blob claims another pack hash".into()));
        }
        decrypt(blob, key)
    }

    /// Records the first decision for the opening's contract; a second one is refused.
    pub fn record_decision(&mut self, record: &DecisionRecord) -> Result<(), SealError> {
        let Some(opening) = &self.opening else {
            return Err(SealError::Mismatch("the pack was never opened".into()));
        };
        if opening.contract_hash != record.contract_hash {
            return Err(SealError::Mismatch(format!(
                "decision is for contract {}, the opening for {}",
                record.contract_hash, opening.contract_hash
            )));
        }
        if self.decision.is_some() {
            return Err(SealError::DecisionAlreadyRecorded(
                self.commitment.to_string(),
            ));
        }
        self.decision = Some(RecordedDecision {
            contract_hash: record.contract_hash.clone(),
            evidence_hash: record.evidence_hash.clone(),
            verdict: record.verdict,
        });
        Ok(())
    }
}
