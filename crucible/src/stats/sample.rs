//! Uniform draws from the crucible's generator, specified here rather than borrowed from `rand`'s
//! distributions so the golden vectors depend only on the ChaCha stream.

use rand::RngCore;

use crate::seed::CrucibleRng;

/// A uniform double in [0, 1): the top 53 bits of one `u64`.
pub fn unit_f64(rng: &mut CrucibleRng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Draws uniform indices in `0..n` without bias (Lemire's multiply-and-reject).
///
/// For `n <= 65 536` each `u64` from the generator is cut into four 16-bit words (low word
/// first) and each word yields one candidate index, so a bootstrap pays a quarter of a ChaCha
/// output per resampled task. Larger `n` use one 32-bit half per index (low half first).
pub struct IndexSampler {
    n: u32,
    threshold: u32,
    narrow: bool,
    buf: u64,
    left: u32,
}

impl IndexSampler {
    /// A sampler for `0..n`; `n` must be at least 1 (callers check emptiness first).
    pub fn new(n: usize) -> IndexSampler {
        let n = u32::try_from(n.max(1)).unwrap_or(u32::MAX);
        let narrow = n <= 1 << 16;
        let threshold = if narrow {
            ((1u32 << 16) - n) % n
        } else {
            n.wrapping_neg() % n
        };
        IndexSampler {
            n,
            threshold,
            narrow,
            buf: 0,
            left: 0,
        }
    }

    #[inline]
    fn word(&mut self, rng: &mut CrucibleRng) -> u32 {
        if self.left == 0 {
            self.buf = rng.next_u64();
            self.left = if self.narrow { 4 } else { 2 };
        }
        self.left -= 1;
        if self.narrow {
            let w = (self.buf & 0xFFFF) as u32;
            self.buf >>= 16;
            w
        } else {
            let w = self.buf as u32;
            self.buf >>= 32;
            w
        }
    }

    /// The next index.
    #[inline]
    pub fn next(&mut self, rng: &mut CrucibleRng) -> usize {
        loop {
            let x = self.word(rng);
            if self.narrow {
                let m = x * self.n;
                if (m & 0xFFFF) >= self.threshold {
                    return (m >> 16) as usize;
                }
            } else {
                let m = u64::from(x) * u64::from(self.n);
                if (m as u32) >= self.threshold {
                    return (m >> 32) as usize;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seed::rng_from_seed;

    #[test]
    fn indices_are_in_range_and_roughly_uniform() {
        for n in [1usize, 3, 7, 1000, 70_000] {
            let mut rng = rng_from_seed(1);
            let mut s = IndexSampler::new(n);
            let mut counts = vec![0u32; n.min(8)];
            for _ in 0..20_000 {
                let i = s.next(&mut rng);
                assert!(i < n);
                if n <= 8 {
                    counts[i] += 1;
                }
            }
            if n <= 8 {
                let expect = 20_000.0 / n as f64;
                for c in counts {
                    assert!((f64::from(c) - expect).abs() < 5.0 * expect.sqrt(), "{n}");
                }
            }
        }
    }

    #[test]
    fn unit_is_in_unit_interval() {
        let mut rng = rng_from_seed(2);
        for _ in 0..1000 {
            let u = unit_f64(&mut rng);
            assert!((0.0..1.0).contains(&u));
        }
    }
}
