//! Proportions: Wilson score, Newcombe's hybrid score interval for a difference, the design
//! effect that adapts both to trials clustered in tasks, and the unbiased pass@k estimator.

use crate::stats::interval::Interval;

/// Wilson score interval for `successes` out of `n` (both may be fractional effective counts)
/// with normal quantile `z`. `n = 0` gives [0, 1].
pub fn wilson(successes: f64, n: f64, z: f64) -> Interval {
    if n <= 0.0 {
        return Interval {
            lower: 0.0,
            upper: 1.0,
        };
    }
    let p = (successes / n).clamp(0.0, 1.0);
    let z2 = z * z;
    let denom = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denom;
    let half = z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denom;
    Interval {
        lower: (centre - half).max(0.0),
        upper: (centre + half).min(1.0),
    }
}

/// Upper bound of Newcombe's hybrid score interval (method 10) for p1 - p2, from the Wilson
/// intervals of each proportion at the same `z`:
/// U = (p1 - p2) + sqrt((u1 - p1)^2 + (p2 - l2)^2).
pub fn newcombe_difference_upper(x1: f64, n1: f64, x2: f64, n2: f64, z: f64) -> f64 {
    let p1 = if n1 > 0.0 { x1 / n1 } else { 0.0 };
    let p2 = if n2 > 0.0 { x2 / n2 } else { 0.0 };
    let w1 = wilson(x1, n1, z);
    let w2 = wilson(x2, n2, z);
    (p1 - p2) + ((w1.upper - p1).powi(2) + (p2 - w2.lower).powi(2)).sqrt()
}

/// Lower bound of Newcombe's hybrid score interval for p1 - p2 (the mirror of
/// [`newcombe_difference_upper`]): L = (p1 - p2) - sqrt((p1 - l1)^2 + (u2 - p2)^2).
pub fn newcombe_difference_lower(x1: f64, n1: f64, x2: f64, n2: f64, z: f64) -> f64 {
    -newcombe_difference_upper(x2, n2, x1, n1, z)
}

/// Design effect of a proportion estimated from clusters: the ratio of the cluster-robust
/// variance of the pooled proportion (ratio estimator, T/(T-1) small-sample factor) to the
/// binomial variance, floored at 1 so clustering can only widen an interval.
///
/// `clusters` holds (successes, trials) per task. With fewer than two clusters, or a proportion
/// of exactly 0 or 1 (no binomial variance to compare with), it is 1.
pub fn design_effect(clusters: &[(f64, f64)]) -> f64 {
    let t = clusters.iter().filter(|c| c.1 > 0.0).count();
    let n: f64 = clusters.iter().map(|c| c.1).sum();
    let x: f64 = clusters.iter().map(|c| c.0).sum();
    if t < 2 || n <= 0.0 {
        return 1.0;
    }
    let p = x / n;
    let binomial = p * (1.0 - p) / n;
    if binomial <= 0.0 {
        return 1.0;
    }
    let tf = t as f64;
    let robust = tf / (tf - 1.0)
        * clusters
            .iter()
            .map(|(xi, ni)| (xi - p * ni).powi(2))
            .sum::<f64>()
        / (n * n);
    (robust / binomial).max(1.0)
}

/// Unbiased pass@k of one task with `c` passes in `n` trials: 1 - C(n - c, k) / C(n, k), as a
/// product (exact for small n). NaN for k = 0 or k > n; `c` above `n` counts as `n`.
pub fn pass_at_k(n: usize, c: usize, k: usize) -> f64 {
    if k == 0 || k > n {
        return f64::NAN;
    }
    let c = c.min(n);
    if n - c < k {
        return 1.0;
    }
    let mut prod = 1.0;
    for i in (n - c + 1)..=n {
        prod *= 1.0 - k as f64 / i as f64;
    }
    1.0 - prod
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_matches_reference() {
        // 0 of 10 at z = 1.96: upper = 3.8416 / 13.8416 = 0.27754.
        let w = wilson(0.0, 10.0, 1.96);
        assert_eq!(w.lower, 0.0);
        assert!((w.upper - 0.277_539).abs() < 1e-5);
        // 5 of 10 at z = 1.96: (0.2366, 0.7634).
        let w = wilson(5.0, 10.0, 1.96);
        assert!((w.lower - 0.236_593).abs() < 1e-5 && (w.upper - 0.763_407).abs() < 1e-5);
    }

    #[test]
    fn newcombe_matches_reference() {
        // Newcombe (1998) example: 56/70 vs 48/80, 95 % interval (0.0524, 0.3339).
        let u = newcombe_difference_upper(56.0, 70.0, 48.0, 80.0, 1.959_964);
        assert!((u - 0.3339).abs() < 5e-4, "{u}");
        let l = newcombe_difference_lower(56.0, 70.0, 48.0, 80.0, 1.959_964);
        assert!((l - 0.0524).abs() < 5e-4, "{l}");
    }

    #[test]
    fn clustering_widens_only() {
        // Signals concentrated in one task: design effect > 1.
        let d = design_effect(&[(5.0, 5.0), (0.0, 5.0), (0.0, 5.0), (0.0, 5.0)]);
        assert!(d > 1.0);
        // Perfectly spread: floored at 1.
        assert_eq!(design_effect(&[(1.0, 5.0), (1.0, 5.0), (1.0, 5.0)]), 1.0);
    }

    #[test]
    fn pass_at_k_matches_the_combinatorial_formula() {
        // n = 5, c = 2, k = 2: 1 - C(3,2)/C(5,2) = 1 - 3/10.
        assert!((pass_at_k(5, 2, 2) - 0.7).abs() < 1e-12);
        assert_eq!(pass_at_k(5, 0, 3), 0.0);
        assert_eq!(pass_at_k(5, 4, 2), 1.0);
        assert!((pass_at_k(4, 1, 1) - 0.25).abs() < 1e-12);
        assert!(pass_at_k(3, 1, 4).is_nan());
    }
}
