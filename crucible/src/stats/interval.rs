//! Normal and Student-t quantiles, the t-interval on task deltas, the task-clustered standard
//! error and the minimum detectable effect.
//!
//! Confidence convention (everywhere in the crate): `confidence` c is the one-sided level of the
//! lower bound the gate compares with zero, so a false KEEP under the null happens with
//! probability about 1 - c. Two-sided intervals reported beside it use the same c as their
//! coverage (tails (1 - c) / 2 each).

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Normal, StudentsT};

use crate::stats::means::{mean, sample_variance};

/// A two-sided interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Lower end.
    pub lower: f64,
    /// Upper end.
    pub upper: f64,
}

impl Interval {
    /// Whether `x` lies in the closed interval (false for NaN).
    pub fn contains(&self, x: f64) -> bool {
        self.lower <= x && x <= self.upper
    }
}

/// Standard normal quantile.
pub fn normal_quantile(p: f64) -> f64 {
    Normal::standard().inverse_cdf(p)
}

/// Standard normal distribution function.
pub fn normal_cdf(x: f64) -> f64 {
    Normal::standard().cdf(x)
}

/// Student-t quantile with `df` degrees of freedom (`None` if `df` is not positive).
pub fn t_quantile(p: f64, df: f64) -> Option<f64> {
    StudentsT::new(0.0, 1.0, df).ok().map(|t| t.inverse_cdf(p))
}

/// Standard error of the mean task delta, clustered by task.
///
/// Each task contributes one delta (its trials averaged), and tasks are the independent units,
/// so the cluster-robust standard error of the equally weighted mean is exactly the sample
/// standard deviation of the task deltas over sqrt(T). Unlike Terminal-Bench's
/// sqrt(sum p(1-p)/(n-1))/T it includes the between-task variance, which dominates in practice.
/// `None` below two tasks.
pub fn clustered_std_error(task_deltas: &[f64]) -> Option<f64> {
    let v = sample_variance(task_deltas)?;
    Some((v / task_deltas.len() as f64).sqrt())
}

/// The family-clustered (CR1) standard error of the mean task delta and its degrees of
/// freedom G - 1 (see [`crate::contract::Clustering::Family`]); `None` below two families.
pub fn family_clustered_std_error(deltas: &[(f64, &str)]) -> Option<(f64, f64)> {
    let t = deltas.len() as f64;
    let m = deltas.iter().map(|(d, _)| d).sum::<f64>() / t;
    let mut sums: std::collections::BTreeMap<&str, f64> = std::collections::BTreeMap::new();
    for (d, family) in deltas {
        *sums.entry(family).or_default() += d - m;
    }
    let g = sums.len() as f64;
    if g < 2.0 {
        return None;
    }
    let v = g / (g - 1.0) * sums.values().map(|s| s * s).sum::<f64>() / (t * t);
    Some((v.sqrt(), g - 1.0))
}

/// The one-sided family-clustered t bound: mean - t_{c, G-1} * se_G.
pub fn family_t_lower_bound(deltas: &[(f64, &str)], confidence: f64) -> Option<f64> {
    let (se, df) = family_clustered_std_error(deltas)?;
    let m = deltas.iter().map(|(d, _)| d).sum::<f64>() / deltas.len() as f64;
    Some(m - t_quantile(confidence, df)? * se)
}

/// The t-interval on task deltas.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TInterval {
    /// Degrees of freedom (tasks - 1).
    pub df: f64,
    /// One-sided lower bound at the confidence: mean - t_{c, df} * se.
    pub lower_bound: f64,
    /// Two-sided interval at the confidence: mean -+ t_{(1+c)/2, df} * se.
    pub interval: Interval,
}

/// t-interval for the mean of `task_deltas` (`None` below two tasks or with zero spread).
pub fn t_interval(task_deltas: &[f64], confidence: f64) -> Option<TInterval> {
    let m = mean(task_deltas)?;
    let se = clustered_std_error(task_deltas)?;
    if se <= 0.0 {
        return None;
    }
    let df = (task_deltas.len() - 1) as f64;
    let one = t_quantile(confidence, df)?;
    let two = t_quantile(0.5 + confidence / 2.0, df)?;
    Some(TInterval {
        df,
        lower_bound: m - one * se,
        interval: Interval {
            lower: m - two * se,
            upper: m + two * se,
        },
    })
}

/// `(lower, upper)` clipped to `[lo, hi]` when every value lies in that range: a mean of values
/// in a range lies in it too, and a t-interval of few tasks reaches far past it (two tasks give
/// +-12.7 standard errors). Unchanged when some value is outside (no known range).
pub fn clip_to_range(interval: (f64, f64), values: &[f64], lo: f64, hi: f64) -> (f64, f64) {
    if values.iter().all(|v| (lo..=hi).contains(v)) {
        (interval.0.clamp(lo, hi), interval.1.clamp(lo, hi))
    } else {
        interval
    }
}

/// Power at which the minimum detectable effect is stated.
pub const MDE_POWER: f64 = 0.8;

/// Minimum detectable effect of the gate's one-sided test at level alpha = 1 - confidence with
/// 80 % power: MDE = (z_{1-alpha} + z_{0.8}) * se (normal approximation; for few tasks the true
/// MDE is somewhat larger, which the power simulation shows).
pub fn minimum_detectable_effect(std_error: f64, confidence: f64) -> f64 {
    (normal_quantile(confidence) + normal_quantile(MDE_POWER)) * std_error
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_match_tables() {
        assert!((normal_quantile(0.975) - 1.959_964).abs() < 1e-5);
        assert!((t_quantile(0.975, 9.0).unwrap() - 2.262_157).abs() < 1e-5);
        assert!((minimum_detectable_effect(1.0, 0.95) - 2.486_475).abs() < 1e-5);
    }

    #[test]
    fn intervals_clip_to_a_known_range() {
        assert_eq!(
            clip_to_range((-5.8, 6.8), &[0.0, 1.0], 0.0, 1.0),
            (0.0, 1.0)
        );
        assert_eq!(
            clip_to_range((-5.8, 6.8), &[0.0, 2.0], 0.0, 1.0),
            (-5.8, 6.8)
        );
    }

    #[test]
    fn t_interval_by_hand() {
        let d = [0.1, 0.2, 0.3, 0.4];
        let t = t_interval(&d, 0.95).unwrap();
        let se = (0.016_666_666_666_666_67f64 / 4.0).sqrt();
        let q = t_quantile(0.975, 3.0).unwrap();
        assert!((t.interval.lower - (0.25 - q * se)).abs() < 1e-12);
        assert!(t_interval(&[0.2, 0.2], 0.95).is_none());
    }
}
