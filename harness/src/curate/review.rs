//! Meta-review (coverage by category and difficulty, gaps) and survivor selection: pure
//! functions over the candidates that reached the tournament.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::tournament::PositionBias;

/// Fleiss' kappa below which the voters' ratings are called mostly noise (Landis and Koch's
/// "slight" agreement).
pub const LOW_AGREEMENT: f64 = 0.2;

/// What review and selection need to know of a candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rated {
    /// The task's id.
    pub id: String,
    /// The task's category.
    pub category: String,
    /// The task's difficulty (`easy`, `medium`, `hard`, or as the task says).
    pub difficulty: String,
    /// `synth:TOPIC` or the origin of its seed pack.
    pub origin: String,
    /// The task's Bradley-Terry rating from the tournament.
    pub rating: f64,
}

/// Coverage of the rated candidates, the gaps found, and the tournament's judge statistics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetaReview {
    /// category -> difficulty -> count.
    pub coverage: BTreeMap<String, BTreeMap<String, usize>>,
    /// Gaps in words: missing difficulties, thin categories, topics with no survivor, flagged
    /// judges and low voter agreement.
    pub gaps: Vec<String>,
    /// Each judge's first-position rate in the tournament.
    #[serde(default)]
    pub judges: Vec<PositionBias>,
    /// Fleiss' kappa of the counted votes.
    #[serde(default)]
    pub voter_agreement: Option<f64>,
}

impl MetaReview {
    /// Adds the tournament's judge statistics, and a gap for each flagged judge and for
    /// agreement too low to rank by.
    pub fn judge_review(&mut self, judges: Vec<PositionBias>, agreement: Option<f64>) {
        for j in judges.iter().filter(|j| j.flagged) {
            self.gaps.push(format!(
                "{} prefers the task shown first at rate {:.2} (p = {:.1e}); its votes were \
                 discounted",
                j.judge, j.first_rate, j.p_value
            ));
        }
        if let Some(k) = agreement
            && k < LOW_AGREEMENT
        {
            self.gaps.push(format!(
                "voters barely agree (Fleiss kappa {k:.2} < {LOW_AGREEMENT}): the ratings are \
                 mostly noise"
            ));
        }
        self.judges = judges;
        self.voter_agreement = agreement;
    }
}

/// Coverage by category and difficulty, with a gap for each difficulty in `difficulties` with no
/// task, each category below `min_per_category` and each topic with no surviving task.
pub fn meta_review(
    items: &[Rated],
    topics: &[String],
    difficulties: &[String],
    min_per_category: usize,
) -> MetaReview {
    let mut coverage: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for i in items {
        *coverage
            .entry(i.category.clone())
            .or_default()
            .entry(i.difficulty.clone())
            .or_default() += 1;
    }
    let mut gaps = Vec::new();
    for d in difficulties {
        if !items.iter().any(|i| &i.difficulty == d) {
            gaps.push(format!("no task of difficulty {d}"));
        }
    }
    for (cat, by_diff) in &coverage {
        let n: usize = by_diff.values().sum();
        if n < min_per_category {
            gaps.push(format!(
                "category {cat} has {n} task(s), fewer than {min_per_category}"
            ));
        }
    }
    for t in topics {
        let origin = format!("synth:{t}");
        if !items.iter().any(|i| i.origin == origin) {
            gaps.push(format!("seed topic {t:?} has no surviving task"));
        }
    }
    MetaReview {
        coverage,
        gaps,
        judges: Vec::new(),
        voter_agreement: None,
    }
}

/// Difficulty as a number: easy 1, medium 2, hard 3, anything else 0.
pub fn difficulty_level(d: &str) -> f64 {
    match d.to_ascii_lowercase().as_str() {
        "easy" => 1.0,
        "medium" => 2.0,
        "hard" => 3.0,
        _ => 0.0,
    }
}

fn min_max(values: &[f64]) -> Vec<f64> {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    values
        .iter()
        .map(|v| if hi > lo { (v - lo) / (hi - lo) } else { 0.5 })
        .collect()
}

/// A selected task and the score it was ranked by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Selected {
    /// The task's id.
    pub id: String,
    /// Rating, difficulty level or blend, as `selection.by` asked.
    pub score: f64,
}

/// Top `k` (0: all) by `rating`, `difficulty` or `blend` (weight `w` on the min-max scaled
/// rating, `1 - w` on the scaled difficulty); ties go to the smaller id.
pub fn select(items: &[Rated], by: &str, w: f64, k: usize) -> Result<Vec<Selected>, String> {
    let ratings: Vec<f64> = items.iter().map(|i| i.rating).collect();
    let levels: Vec<f64> = items
        .iter()
        .map(|i| difficulty_level(&i.difficulty))
        .collect();
    let scores: Vec<f64> = match by {
        "rating" => ratings,
        "difficulty" => levels,
        "blend" => {
            let (r, d) = (min_max(&ratings), min_max(&levels));
            r.iter()
                .zip(&d)
                .map(|(r, d)| w * r + (1.0 - w) * d)
                .collect()
        }
        other => {
            return Err(format!(
                "selection.by {other:?}: use rating, difficulty or blend"
            ));
        }
    };
    let mut out: Vec<Selected> = items
        .iter()
        .zip(scores)
        .map(|(i, score)| Selected {
            id: i.id.clone(),
            score,
        })
        .collect();
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.id.cmp(&b.id)));
    if k > 0 {
        out.truncate(k);
    }
    Ok(out)
}
