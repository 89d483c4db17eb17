//! Sign-flip permutation test over task deltas (approximate randomization, Riezler & Maxwell
//! 2005, at the task level).
//!
//! Under the null hypothesis that the candidate and the baseline are exchangeable within a task,
//! each task delta is as likely to be d as -d. The statistic is the sum of task deltas; the
//! one-sided p-value (direction of the gate: candidate better) is the share of sign vectors whose
//! sum is at least the observed one. With at most [`EXACT_MAX_TASKS`] tasks all 2^n vectors are
//! enumerated (Gray-code order, one addition per vector); above, B random vectors are drawn from
//! a seeded ChaCha stream (bit i of successive `u64`s flips task i) and p = (b + 1) / (B + 1),
//! which counts the observed vector and is never zero.

use rand::RngCore;
use serde::{Deserialize, Serialize};

use crate::seed::rng_from_seed;

/// Largest task count enumerated exactly (2^20 = 1 048 576 sign vectors).
pub const EXACT_MAX_TASKS: usize = 20;

/// How the p-value was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PermutationMethod {
    /// Every sign vector enumerated (at most [`EXACT_MAX_TASKS`] tasks).
    Exact {
        /// 2^n, the number of sign vectors of n tasks.
        sign_vectors: u64,
    },
    /// Random sign vectors drawn (more than [`EXACT_MAX_TASKS`] tasks).
    MonteCarlo {
        /// Sign vectors drawn B.
        resamples: u32,
        /// Seed of the ChaCha stream.
        seed: u64,
    },
}

/// A sign-flip test result.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PermutationTest {
    /// One-sided p-value for "candidate better".
    pub p_value: f64,
    /// Exact enumeration or Monte Carlo, with its parameters.
    pub method: PermutationMethod,
}

/// The sign-flip test of `deltas` (`None` when empty).
pub fn sign_flip_test(deltas: &[f64], mc_resamples: u32, seed: u64) -> Option<PermutationTest> {
    let n = deltas.len();
    if n == 0 {
        return None;
    }
    let observed: f64 = deltas.iter().sum();
    // Sums of the same numbers in other orders differ by rounding; count those as ties.
    let eps = 1e-9 * deltas.iter().map(|d| d.abs()).sum::<f64>().max(1e-300);
    let threshold = observed - eps;
    if n <= EXACT_MAX_TASKS {
        let total = 1u64 << n;
        let mut signs = vec![1.0f64; n];
        let mut sum = observed;
        let mut at_least = u64::from(sum >= threshold);
        for i in 1..total {
            let j = i.trailing_zeros() as usize;
            sum -= 2.0 * signs[j] * deltas[j];
            signs[j] = -signs[j];
            at_least += u64::from(sum >= threshold);
        }
        return Some(PermutationTest {
            p_value: at_least as f64 / total as f64,
            method: PermutationMethod::Exact {
                sign_vectors: total,
            },
        });
    }
    let mut rng = rng_from_seed(seed);
    let mut at_least = 0u64;
    for _ in 0..mc_resamples {
        let mut sum = 0.0;
        let mut bits = 0u64;
        for (i, d) in deltas.iter().enumerate() {
            if i % 64 == 0 {
                bits = rng.next_u64();
            }
            sum += if bits & 1 == 1 { -d } else { *d };
            bits >>= 1;
        }
        at_least += u64::from(sum >= threshold);
    }
    Some(PermutationTest {
        p_value: (at_least + 1) as f64 / (f64::from(mc_resamples) + 1.0),
        method: PermutationMethod::MonteCarlo {
            resamples: mc_resamples,
            seed,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_small_cases() {
        // All positive and distinct: only the identity reaches the observed sum.
        let p = sign_flip_test(&[0.1, 0.2, 0.3], 0, 0).unwrap();
        assert_eq!(p.p_value, 1.0 / 8.0);
        // All zero: every vector ties.
        assert_eq!(sign_flip_test(&[0.0; 4], 0, 0).unwrap().p_value, 1.0);
        // {1, -1}: sums 0, -2, 2, 0 -> three of four reach 0.
        assert_eq!(sign_flip_test(&[1.0, -1.0], 0, 0).unwrap().p_value, 0.75);
    }

    #[test]
    fn monte_carlo_agrees_with_symmetry() {
        let d: Vec<f64> = (0..40)
            .map(|i| if i % 2 == 0 { 0.1 } else { -0.1 })
            .collect();
        let p = sign_flip_test(&d, 4000, 3).unwrap();
        assert!(matches!(p.method, PermutationMethod::MonteCarlo { .. }));
        assert!(p.p_value > 0.4 && p.p_value < 0.7, "{}", p.p_value);
    }
}
