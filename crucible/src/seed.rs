//! Every seed the crucible uses, and how each one is derived, so a decision can be recomputed
//! bit for bit from its contract and its evidence.
//!
//! All derivations are SHA-256 over a domain tag and little-endian fields; the first 8 bytes of
//! the digest, read little-endian, are the `u64` seed. Seeds are turned into generators by
//! [`rng_from_seed`]: ChaCha8 keyed with SHA-256(`"geode.rng.v1"` || seed), which depends only on
//! the ChaCha stream (value-stable in `rand_chacha`) and not on `rand_core`'s seed expansion.
//! ChaCha8 rather than ChaCha20: the stream is for statistics, not secrecy (the sealing nonce and
//! key come from the caller's cryptographic RNG), and it is 2.5x cheaper, which matters for
//! 10 000-resample bootstraps inside power simulations.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::arm::Arm;
use crate::ids::{ContractHash, TaskId};

/// The crucible's random generator: ChaCha8, always explicitly seeded.
pub type CrucibleRng = ChaCha8Rng;

/// The generator for a `u64` seed (see the module documentation for the derivation).
pub fn rng_from_seed(seed: u64) -> CrucibleRng {
    let mut h = Sha256::new();
    h.update(b"geode.rng.v1");
    h.update(seed.to_le_bytes());
    CrucibleRng::from_seed(h.finalize().into())
}

fn first_u64(digest: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(b)
}

/// The seed of one (task, trial): both arms of the pair run with it, so baseline and candidate
/// meet the same environment randomness. Derivation: SHA-256(`"geode.trial_seed.v1"` || run seed
/// || task id length (u64) || task id bytes || trial index (u32)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TrialSeed(pub u64);

impl TrialSeed {
    /// Derives the seed of `trial` of `task` in the run seeded by `run_seed`.
    pub fn derive(run_seed: u64, task: &TaskId, trial: u32) -> TrialSeed {
        let id = task.as_str().as_bytes();
        let mut h = Sha256::new();
        h.update(b"geode.trial_seed.v1");
        h.update(run_seed.to_le_bytes());
        h.update((id.len() as u64).to_le_bytes());
        h.update(id);
        h.update(trial.to_le_bytes());
        TrialSeed(first_u64(&h.finalize()))
    }

    /// A ChaCha generator for code inside the trial that needs randomness.
    pub fn rng(self) -> CrucibleRng {
        rng_from_seed(self.0)
    }

    /// The seed of `arm`'s simulated model in this pair: SHA-256(`"geode.arm_model_seed.v1"`
    /// || trial seed || arm tag (0 baseline, 1 candidate)).
    ///
    /// The environment's randomness is shared by the pair, a model's sampling is not: a
    /// sampled model draws afresh in each arm. A simulation model (`flaky-oracle`) seeded with
    /// the shared seed would give two arms with a neutral difference identical rewards, every
    /// delta zero, and a test of "neutral knobs promote nothing" that cannot fail.
    pub fn arm_model_seed(self, arm: Arm) -> u64 {
        let mut h = Sha256::new();
        h.update(b"geode.arm_model_seed.v1");
        h.update(self.0.to_le_bytes());
        h.update([u8::from(arm == Arm::Candidate)]);
        first_u64(&h.finalize())
    }
}

fn from_contract(hash: &ContractHash, tag: &[u8], extra: &[u8]) -> u64 {
    let mut h = Sha256::new();
    h.update(hash.to_bytes());
    h.update(tag);
    h.update(extra);
    first_u64(&h.finalize())
}

/// Bootstrap seed: first 8 bytes of SHA-256(contract hash bytes || `"bootstrap"`). Tied to the
/// contract so nobody can shop for a lucky resampling after seeing the trials.
pub fn bootstrap_seed(contract: &ContractHash) -> u64 {
    from_contract(contract, b"bootstrap", &[])
}

/// Monte Carlo sign-flip seed: SHA-256(contract hash bytes || `"permutation"`).
pub fn permutation_seed(contract: &ContractHash) -> u64 {
    from_contract(contract, b"permutation", &[])
}

/// Run seed of replication number `index` (1, 2, ...) of a contract: fresh trial seeds that are
/// still determined by the contract, so a replication can itself be replicated.
/// SHA-256(contract hash bytes || `"replication"` || index (u32)).
pub fn replication_run_seed(contract: &ContractHash, index: u32) -> u64 {
    from_contract(contract, b"replication", &index.to_le_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngCore;

    #[test]
    fn arm_model_seeds_differ_by_arm_and_are_stable() {
        let t = TrialSeed(42);
        assert_ne!(
            t.arm_model_seed(Arm::Baseline),
            t.arm_model_seed(Arm::Candidate)
        );
        assert_ne!(t.arm_model_seed(Arm::Baseline), 42);
        assert_eq!(
            t.arm_model_seed(Arm::Candidate),
            TrialSeed(42).arm_model_seed(Arm::Candidate)
        );
    }

    #[test]
    fn trial_seeds_differ_by_task_and_trial_and_are_stable() {
        let a = TrialSeed::derive(7, &TaskId::new("hello-world"), 0);
        let b = TrialSeed::derive(7, &TaskId::new("hello-world"), 1);
        let c = TrialSeed::derive(7, &TaskId::new("hello-worl"), 0);
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_eq!(a, TrialSeed::derive(7, &TaskId::new("hello-world"), 0));
        let mut r1 = a.rng();
        let mut r2 = a.rng();
        assert_eq!(r1.next_u64(), r2.next_u64());
    }

    #[test]
    fn contract_seeds_are_distinct_streams() {
        let h = ContractHash::of_bytes(b"contract");
        assert_ne!(bootstrap_seed(&h), permutation_seed(&h));
        assert_ne!(replication_run_seed(&h, 1), replication_run_seed(&h, 2));
    }
}
