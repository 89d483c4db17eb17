//! Statistics the reports show beside the scores (the scores themselves are the graders' one
//! summary, `geode_graders::summary`, which the harness's end-of-run summary also uses).

use geode_graders::summary::mean;

/// Pearson correlation; `None` below two points or when either side has no spread.
pub fn correlation(xs: &[f64], ys: &[f64]) -> Option<f64> {
    let n = xs.len().min(ys.len());
    if n < 2 {
        return None;
    }
    let mx = mean(&xs[..n])?;
    let my = mean(&ys[..n])?;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (x, y) in xs.iter().zip(ys) {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx) * (x - mx);
        syy += (y - my) * (y - my);
    }
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx * syy).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn correlation_by_hand() {
        let r = correlation(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.5]).unwrap_or(0.0);
        assert!(r > 0.99);
        assert_eq!(correlation(&[1.0, 1.0], &[0.0, 1.0]), None);
    }
}
