//! Near-duplicate detection: MinHash signatures over word shingles, LSH banding for candidate
//! pairs, and union-find clusters of pairs whose estimated Jaccard similarity reaches a
//! threshold.
//!
//! Text is lower-cased and split on anything that is not a letter or digit; a shingle is
//! `shingle` consecutive words. Each shingle hashes to 64 bits (FNV-1a), and permutation `i` is
//! `(a_i * x + b_i) mod (2^61 - 1)` with `a_i`, `b_i` drawn from ChaCha8 seeded by `seed`, so a
//! signature is reproducible from (text, parameters) alone and can be stored and compared later.

use std::collections::{BTreeMap, BTreeSet};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

const MERSENNE_61: u64 = (1 << 61) - 1;

/// Everything a signature depends on; stored beside signatures so they stay comparable.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MinHashParams {
    /// Words per shingle.
    pub shingle: usize,
    /// Permutations (signature length); `bands * rows` must equal it.
    pub num_perm: usize,
    /// LSH bands the signature is cut into; `rows = num_perm / bands`.
    pub bands: usize,
    /// Seed of the ChaCha8 stream the permutations are drawn from.
    pub seed: u64,
    /// Estimated Jaccard at or above which two texts are near-duplicates.
    pub threshold: f64,
}

impl Default for MinHashParams {
    /// 128 permutations in 32 bands of 4 rows: the LSH candidate curve reaches 50% near a
    /// Jaccard of 0.42, well below the 0.6 threshold, so few true pairs are missed; every
    /// candidate is then checked against the threshold on the full signature.
    fn default() -> Self {
        MinHashParams {
            shingle: 3,
            num_perm: 128,
            bands: 32,
            seed: 0x006e_6561_7264_7570,
            threshold: 0.6,
        }
    }
}

/// MinHash signatures under fixed `MinHashParams` (the permutations are drawn once, seeded).
pub struct MinHasher {
    params: MinHashParams,
    perms: Vec<(u64, u64)>,
}

impl MinHasher {
    /// Draws `params.num_perm` hash permutations from `params.seed`; same params, same hasher.
    pub fn new(params: MinHashParams) -> MinHasher {
        let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
        let perms = (0..params.num_perm)
            .map(|_| {
                (
                    rng.random_range(1..MERSENNE_61),
                    rng.random_range(0..MERSENNE_61),
                )
            })
            .collect();
        MinHasher { params, perms }
    }

    /// The parameters the hasher was built with.
    pub fn params(&self) -> &MinHashParams {
        &self.params
    }

    /// The signature of `text`: per permutation, the minimum hash over its word shingles.
    pub fn signature(&self, text: &str) -> Vec<u64> {
        let shingles = shingles(text, self.params.shingle);
        let mut sig = vec![u64::MAX; self.perms.len()];
        for s in &shingles {
            let x = fnv1a(s.as_bytes()) % MERSENNE_61;
            for (slot, (a, b)) in sig.iter_mut().zip(&self.perms) {
                let h = ((u128::from(*a) * u128::from(x) + u128::from(*b))
                    % u128::from(MERSENNE_61)) as u64;
                *slot = (*slot).min(h);
            }
        }
        sig
    }
}

/// The set of word shingles of a text (a text shorter than one shingle is one shingle).
pub fn shingles(text: &str, k: usize) -> BTreeSet<String> {
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let k = k.max(1);
    if words.len() <= k {
        return std::iter::once(words.join(" ")).collect();
    }
    words.windows(k).map(|w| w.join(" ")).collect()
}

/// Exact Jaccard similarity of two shingle sets.
pub fn jaccard(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f64 {
    let union = a.union(b).count();
    if union == 0 {
        return 1.0;
    }
    a.intersection(b).count() as f64 / union as f64
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Estimated Jaccard: the share of equal signature slots.
pub fn estimate(a: &[u64], b: &[u64]) -> f64 {
    if a.is_empty() || a.len() != b.len() {
        return 0.0;
    }
    a.iter().zip(b).filter(|(x, y)| x == y).count() as f64 / a.len() as f64
}

/// Candidate pairs `(i, j)`, `i < j`, that share at least one LSH band.
pub fn lsh_candidates(signatures: &[Vec<u64>], bands: usize) -> BTreeSet<(usize, usize)> {
    let mut pairs = BTreeSet::new();
    let Some(len) = signatures.first().map(Vec::len) else {
        return pairs;
    };
    let bands = bands.clamp(1, len.max(1));
    let rows = (len / bands).max(1);
    for band in 0..bands {
        let mut buckets: BTreeMap<&[u64], Vec<usize>> = BTreeMap::new();
        for (i, sig) in signatures.iter().enumerate() {
            if let Some(slice) = sig.get(band * rows..(band + 1) * rows) {
                buckets.entry(slice).or_default().push(i);
            }
        }
        for members in buckets.values() {
            for (x, &i) in members.iter().enumerate() {
                for &j in &members[x + 1..] {
                    pairs.insert((i, j));
                }
            }
        }
    }
    pairs
}

/// Up to this many texts every pair is compared (about 2 million signature comparisons);
/// beyond, LSH banding proposes the pairs. LSH misses a pair right at the 0.6 threshold with
/// probability (1 - 0.6^4)^32, about 1.2% (0.015% at 0.7), so small sets get the exact answer.
pub const EXHAUSTIVE_MAX: usize = 2000;

/// The pairs worth comparing: all of them for small sets, else the LSH candidates.
pub fn candidate_pairs(signatures: &[Vec<u64>], bands: usize) -> BTreeSet<(usize, usize)> {
    let n = signatures.len();
    if n <= EXHAUSTIVE_MAX {
        return (0..n)
            .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
            .collect();
    }
    lsh_candidates(signatures, bands)
}

/// Pairs whose estimated Jaccard reaches the threshold, with that estimate.
pub fn near_duplicate_pairs(
    signatures: &[Vec<u64>],
    params: &MinHashParams,
) -> Vec<(usize, usize, f64)> {
    candidate_pairs(signatures, params.bands)
        .into_iter()
        .filter_map(|(i, j)| {
            let s = estimate(&signatures[i], &signatures[j]);
            (s >= params.threshold).then_some((i, j, s))
        })
        .collect()
}

/// Union-find over `n` items.
pub struct UnionFind {
    parent: Vec<usize>,
}

impl UnionFind {
    /// `n` singleton sets, item `i` in set `i`.
    pub fn new(n: usize) -> UnionFind {
        UnionFind {
            parent: (0..n).collect(),
        }
    }

    /// The root of `x`'s set (halves paths as it goes).
    pub fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] != x {
            self.parent[x] = self.parent[self.parent[x]];
            x = self.parent[x];
        }
        x
    }

    /// Join two sets; the smaller root becomes the root, so clusters are independent of the
    /// order in which pairs arrive.
    pub fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            let (lo, hi) = (ra.min(rb), ra.max(rb));
            self.parent[hi] = lo;
        }
    }

    /// Clusters as sorted member lists, ordered by their smallest member.
    pub fn clusters(&mut self) -> Vec<Vec<usize>> {
        let mut by_root: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for i in 0..self.parent.len() {
            let r = self.find(i);
            by_root.entry(r).or_default().push(i);
        }
        by_root.into_values().collect()
    }
}

/// Cluster texts: near-duplicates (and any extra `same` pairs, e.g. equal hashes) share a
/// cluster.
pub fn cluster(
    signatures: &[Vec<u64>],
    params: &MinHashParams,
    same: impl IntoIterator<Item = (usize, usize)>,
) -> Vec<Vec<usize>> {
    let mut uf = UnionFind::new(signatures.len());
    for (i, j, _) in near_duplicate_pairs(signatures, params) {
        uf.union(i, j);
    }
    for (i, j) in same {
        uf.union(i, j);
    }
    uf.clusters()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimate_tracks_exact_jaccard() {
        let h = MinHasher::new(MinHashParams::default());
        let a = "the quick brown fox jumps over the lazy dog and runs far away from home today";
        let b = "the quick brown fox jumps over the lazy cat and runs far away from home today";
        let exact = jaccard(&shingles(a, 3), &shingles(b, 3));
        let est = estimate(&h.signature(a), &h.signature(b));
        assert!((exact - est).abs() < 0.15, "exact {exact} est {est}");
    }
}
