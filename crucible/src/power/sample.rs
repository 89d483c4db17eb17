//! Random variates for simulated campaigns (normal, gamma, beta, Bernoulli), written out so a
//! simulation depends only on the ChaCha stream and this file.

use crate::seed::CrucibleRng;
use crate::stats::sample::unit_f64;

/// Bernoulli(p) as a reward of 0 or 1.
pub fn bernoulli(rng: &mut CrucibleRng, p: f64) -> f64 {
    if unit_f64(rng) < p { 1.0 } else { 0.0 }
}

/// Standard normal by Box-Muller (cosine branch; two uniforms per variate).
pub fn standard_normal(rng: &mut CrucibleRng) -> f64 {
    let u1 = 1.0 - unit_f64(rng); // (0, 1]
    let u2 = unit_f64(rng);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Gamma(shape, 1) by Marsaglia and Tsang (2000); shape < 1 through the boost
/// Gamma(shape + 1) * U^(1/shape).
pub fn gamma(rng: &mut CrucibleRng, shape: f64) -> f64 {
    if shape < 1.0 {
        let g = gamma(rng, shape + 1.0);
        let u = 1.0 - unit_f64(rng);
        return g * u.powf(1.0 / shape);
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = standard_normal(rng);
        let t = 1.0 + c * x;
        if t <= 0.0 {
            continue;
        }
        let v = t * t * t;
        let u = 1.0 - unit_f64(rng);
        if u < 1.0 - 0.0331 * x.powi(4) || u.ln() < 0.5 * x * x + d * (1.0 - v + v.ln()) {
            return d * v;
        }
    }
}

/// Beta(a, b) as X / (X + Y) with X ~ Gamma(a), Y ~ Gamma(b).
pub fn beta(rng: &mut CrucibleRng, a: f64, b: f64) -> f64 {
    let x = gamma(rng, a);
    let y = gamma(rng, b);
    if x + y > 0.0 {
        x / (x + y)
    } else {
        a / (a + b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seed::rng_from_seed;

    #[test]
    fn beta_moments() {
        let mut rng = rng_from_seed(5);
        let (a, b) = (0.6, 1.4);
        let n = 20_000;
        let xs: Vec<f64> = (0..n).map(|_| beta(&mut rng, a, b)).collect();
        let m = xs.iter().sum::<f64>() / n as f64;
        let v = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / n as f64;
        assert!((m - 0.3).abs() < 0.01, "{m}");
        let want = a * b / ((a + b).powi(2) * (a + b + 1.0));
        assert!((v - want).abs() < 0.01, "{v} {want}");
    }
}
