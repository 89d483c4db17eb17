//! Pairwise judge tournament: Elo ratings (start 1000, K = 32, expected score
//! 1/(1+10^((Rb-Ra)/400))) over about N log2 N distinct pairs, several voters per pair with a
//! majority; and a Bradley-Terry fit (Hunter's MM algorithm) with seeded bootstrap intervals,
//! the order-independent alternative to Elo.
//!
//! Presentation order is balanced per pair: a seeded coin picks which task the first voter
//! sees first, and the voters alternate from there, so each task of a pair is shown first to
//! half the voters (one more for one of them when the count is odd). A judge that prefers a
//! position then cannot decide a pair by itself, and its preference shows: `position_bias`
//! measures each judge's first-position rate with an exact two-sided binomial test against
//! 0.5, and `agreement` is Fleiss' kappa of the voters over the pairs.
//!
//! The schedule is a pure function of (N, config, seed): first the edges of a random
//! Hamiltonian path (so every item plays and the comparison graph is connected, which the
//! Bradley-Terry fit needs), then random further pairs up to the target count.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// How a tournament is played and rated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TournamentConfig {
    /// Votes per pair; at least 3 and odd, so there is always a majority.
    pub voters: usize,
    /// Distinct pairs; `None`: ceil(N log2 N), capped at N(N-1)/2.
    pub pairs: Option<usize>,
    /// Elo K factor: the most one game moves a rating.
    pub k: f64,
    /// Elo rating every item starts from.
    pub start: f64,
    /// Bootstrap resamples for the Bradley-Terry intervals.
    pub bootstrap: usize,
}

impl Default for TournamentConfig {
    fn default() -> Self {
        TournamentConfig {
            voters: 3,
            pairs: None,
            k: 32.0,
            start: 1000.0,
            bootstrap: 200,
        }
    }
}

/// One scheduled pair and, per voter, whether `b` is shown first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Matchup {
    /// Index of one item.
    pub a: usize,
    /// Index of the other item.
    pub b: usize,
    /// Per voter, whether `b` is shown first.
    pub b_first: Vec<bool>,
}

/// A decided pair.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Index of one item.
    pub a: usize,
    /// Index of the other item.
    pub b: usize,
    /// Counted votes for `a`.
    pub votes_a: usize,
    /// Counted votes for `b`.
    pub votes_b: usize,
}

impl Outcome {
    /// `a` has the majority (a tie goes to `b`).
    pub(crate) fn a_wins(&self) -> bool {
        self.votes_a > self.votes_b
    }
}

/// The ratings of the items, by item index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ratings {
    /// Elo ratings after the outcomes in order.
    pub elo: Vec<f64>,
    /// Bradley-Terry strengths on the Elo scale (400 log10 p + 1000).
    pub bt: Vec<f64>,
    /// 2.5% and 97.5% bootstrap percentiles of `bt`.
    pub bt_interval: Vec<(f64, f64)>,
}

/// Distinct pairs to play: `wanted`, or ceil(N log2 N), kept between N-1 and N(N-1)/2.
pub(crate) fn target_pairs(n: usize, wanted: Option<usize>) -> usize {
    let all = n * n.saturating_sub(1) / 2;
    let default = (n as f64 * (n as f64).log2()).ceil() as usize;
    wanted
        .unwrap_or(default)
        .clamp(n.saturating_sub(1), all.max(n.saturating_sub(1)))
        .min(all)
}

/// The seeded schedule: a random Hamiltonian path, further pairs up to `target_pairs`, shuffled.
pub(crate) fn schedule(n: usize, config: &TournamentConfig, seed: u64) -> Vec<Matchup> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let target = target_pairs(n, config.pairs);
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut rng);
    let mut chosen: Vec<(usize, usize)> = order
        .windows(2)
        .map(|w| (w[0].min(w[1]), w[0].max(w[1])))
        .collect();
    let mut rest: Vec<(usize, usize)> = (0..n)
        .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
        .filter(|p| !chosen.contains(p))
        .collect();
    rest.shuffle(&mut rng);
    chosen.extend(rest.into_iter().take(target.saturating_sub(chosen.len())));
    // Play in a random order: Elo depends on it, so it must come from the seed too.
    chosen.shuffle(&mut rng);
    let voters = config.voters.max(1);
    chosen
        .into_iter()
        .map(|(a, b)| {
            let start = rng.random_bool(0.5);
            Matchup {
                a,
                b,
                b_first: (0..voters).map(|v| start ^ (v % 2 == 1)).collect(),
            }
        })
        .collect()
}

/// Elo's expected score of a player rated `ra` against one rated `rb`.
pub fn expected(ra: f64, rb: f64) -> f64 {
    1.0 / (1.0 + 10f64.powf((rb - ra) / 400.0))
}

/// Elo over the outcomes in order.
pub fn elo(n: usize, outcomes: &[Outcome], k: f64, start: f64) -> Vec<f64> {
    let mut r = vec![start; n];
    for o in outcomes {
        let ea = expected(r[o.a], r[o.b]);
        let sa = if o.a_wins() { 1.0 } else { 0.0 };
        r[o.a] += k * (sa - ea);
        r[o.b] -= k * (sa - ea);
    }
    r
}

/// Bradley-Terry strengths by MM iterations, on the Elo scale. Every item also plays one win
/// and one loss against a virtual item of strength 1: a prior that keeps an item that never
/// won (or never lost) finite, and fixes the scale.
pub fn bradley_terry(n: usize, outcomes: &[Outcome]) -> Vec<f64> {
    let mut wins = vec![1.0; n];
    let mut games: Vec<Vec<(usize, f64)>> = vec![Vec::new(); n];
    for o in outcomes {
        let (w, _) = if o.a_wins() { (o.a, o.b) } else { (o.b, o.a) };
        wins[w] += 1.0;
        games[o.a].push((o.b, 1.0));
        games[o.b].push((o.a, 1.0));
    }
    let mut p = vec![1.0; n];
    for _ in 0..500 {
        let mut next = vec![0.0; n];
        let mut change: f64 = 0.0;
        for i in 0..n {
            let mut denom = 2.0 / (p[i] + 1.0);
            for (j, c) in &games[i] {
                denom += c / (p[i] + p[*j]);
            }
            next[i] = wins[i] / denom;
            change = change.max((next[i].ln() - p[i].ln()).abs());
        }
        p = next;
        if change < 1e-10 {
            break;
        }
    }
    p.iter().map(|v| 400.0 * v.log10() + 1000.0).collect()
}

/// Percentile bootstrap over outcomes (resampled with replacement), seeded.
pub fn bt_intervals(n: usize, outcomes: &[Outcome], samples: usize, seed: u64) -> Vec<(f64, f64)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut draws: Vec<Vec<f64>> = vec![Vec::with_capacity(samples); n];
    if outcomes.is_empty() || samples == 0 {
        let r = bradley_terry(n, outcomes);
        return r.into_iter().map(|v| (v, v)).collect();
    }
    for _ in 0..samples {
        let resample: Vec<Outcome> = (0..outcomes.len())
            .map(|_| outcomes[rng.random_range(0..outcomes.len())])
            .collect();
        for (i, v) in bradley_terry(n, &resample).into_iter().enumerate() {
            draws[i].push(v);
        }
    }
    draws
        .into_iter()
        .map(|mut d| {
            d.sort_by(f64::total_cmp);
            let at = |q: f64| d[((d.len() - 1) as f64 * q).round() as usize];
            (at(0.025), at(0.975))
        })
        .collect()
}

/// Elo, Bradley-Terry and its bootstrap intervals over the same outcomes.
pub(crate) fn ratings(
    n: usize,
    outcomes: &[Outcome],
    config: &TournamentConfig,
    seed: u64,
) -> Ratings {
    Ratings {
        elo: elo(n, outcomes, config.k, config.start),
        bt: bradley_terry(n, outcomes),
        bt_interval: bt_intervals(n, outcomes, config.bootstrap, seed ^ 0xb007),
    }
}

/// A whole tournament with a synchronous judge: `judge(first, second, voter)` returns true
/// when the first shown item wins.
pub fn run(
    n: usize,
    config: &TournamentConfig,
    seed: u64,
    mut judge: impl FnMut(usize, usize, usize) -> bool,
) -> (Vec<Outcome>, Ratings) {
    let schedule = schedule(n, config, seed);
    let mut votes = Vec::new();
    for (pair, m) in schedule.iter().enumerate() {
        for (voter, b_first) in m.b_first.iter().enumerate() {
            let (first, second) = if *b_first { (m.b, m.a) } else { (m.a, m.b) };
            votes.push(Vote {
                judge: voter,
                pair,
                b_first: *b_first,
                first_wins: judge(first, second, voter),
            });
        }
    }
    let outcomes = outcomes_without(&schedule, &votes, &[]);
    let r = ratings(n, &outcomes, config, seed);
    (outcomes, r)
}

/// One vote as cast: which judge, which pair, and whether the task shown first won.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Vote {
    /// Index of the judge that cast the vote (in the judge list, or the voter index).
    pub judge: usize,
    /// Index of the matchup in the schedule.
    pub pair: usize,
    /// Whether the pair's `b` was shown first.
    pub b_first: bool,
    /// Whether the task shown first won.
    pub first_wins: bool,
}

impl Vote {
    /// The first shown won when `first_wins`; mapped back to the pair's `a` or `b`.
    pub fn a_wins(&self) -> bool {
        self.first_wins != self.b_first
    }
}

/// A judge's preference for the position of a task rather than its content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PositionBias {
    /// The judge's route.
    pub judge: String,
    /// Votes the judge cast.
    pub votes: usize,
    /// Votes that went to the task shown first.
    pub first_wins: usize,
    /// `first_wins / votes`; 0.5 when the judge cast none.
    pub first_rate: f64,
    /// Exact two-sided binomial test of `first_rate == 0.5`.
    pub p_value: f64,
    /// `|first_rate - 0.5|` above the limit and `p_value` below `BIAS_ALPHA`.
    pub flagged: bool,
}

/// Significance a judge's position preference must reach to be flagged (with balanced
/// presentation, an unbiased judge's first-position count is Binomial(n, 1/2)).
pub const BIAS_ALPHA: f64 = 0.01;

/// Two-sided exact binomial p-value of `k` successes in `n` trials at probability 1/2.
pub fn binomial_two_sided(k: usize, n: usize) -> f64 {
    if n == 0 {
        return 1.0;
    }
    let extreme = k.max(n - k);
    // P(X >= extreme) summed in log space: ln C(n, i) - n ln 2.
    let ln_half = -(n as f64) * std::f64::consts::LN_2;
    let mut ln_c = 0.0; // ln C(n, 0)
    let mut tail = 0.0;
    for i in 0..=n {
        if i > 0 {
            ln_c += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        if i >= extreme {
            tail += (ln_c + ln_half).exp();
        }
    }
    (2.0 * tail).min(1.0)
}

/// Each judge's first-position rate; flagged when it is further than `max_bias` from 0.5 and
/// significant at `BIAS_ALPHA`.
pub fn position_bias(votes: &[Vote], judges: &[String], max_bias: f64) -> Vec<PositionBias> {
    judges
        .iter()
        .enumerate()
        .map(|(j, name)| {
            let mine: Vec<&Vote> = votes.iter().filter(|v| v.judge == j).collect();
            let first = mine.iter().filter(|v| v.first_wins).count();
            let n = mine.len();
            let rate = if n == 0 { 0.5 } else { first as f64 / n as f64 };
            let p = binomial_two_sided(first, n);
            PositionBias {
                judge: name.clone(),
                votes: n,
                first_wins: first,
                first_rate: rate,
                p_value: p,
                flagged: (rate - 0.5).abs() > max_bias && p < BIAS_ALPHA,
            }
        })
        .collect()
}

/// Fleiss' kappa of the voters over the pairs (categories: a wins, b wins), for pairs with at
/// least two votes; `None` when no pair has two, or every vote went one way.
pub fn agreement(votes: &[Vote]) -> Option<f64> {
    let mut per_pair: std::collections::BTreeMap<usize, (f64, f64)> = Default::default();
    for v in votes {
        let e = per_pair.entry(v.pair).or_default();
        if v.a_wins() {
            e.0 += 1.0;
        } else {
            e.1 += 1.0;
        }
    }
    let (mut p_sum, mut items, mut total_a, mut total) = (0.0, 0.0, 0.0, 0.0);
    for (a, b) in per_pair.values() {
        let n = a + b;
        if n < 2.0 {
            continue;
        }
        p_sum += (a * a + b * b - n) / (n * (n - 1.0));
        items += 1.0;
        total_a += a;
        total += n;
    }
    if items == 0.0 {
        return None;
    }
    let p_bar = p_sum / items;
    let pa = total_a / total;
    let p_e = pa * pa + (1.0 - pa) * (1.0 - pa);
    (p_e < 1.0).then(|| (p_bar - p_e) / (1.0 - p_e))
}

/// The outcomes of the schedule from the votes of the judges not in `discounted`; a pair left
/// without votes is dropped.
pub fn outcomes_without(
    schedule: &[Matchup],
    votes: &[Vote],
    discounted: &[usize],
) -> Vec<Outcome> {
    let mut outcomes: Vec<Outcome> = schedule
        .iter()
        .map(|m| Outcome {
            a: m.a,
            b: m.b,
            votes_a: 0,
            votes_b: 0,
        })
        .collect();
    for v in votes.iter().filter(|v| !discounted.contains(&v.judge)) {
        if let Some(o) = outcomes.get_mut(v.pair) {
            if v.a_wins() {
                o.votes_a += 1;
            } else {
                o.votes_b += 1;
            }
        }
    }
    outcomes.retain(|o| o.votes_a + o.votes_b > 0);
    outcomes
}

/// Kendall's tau-a between two score vectors (1: same order, -1: reversed).
pub fn kendall_tau(x: &[f64], y: &[f64]) -> f64 {
    let n = x.len().min(y.len());
    let (mut concordant, mut discordant) = (0i64, 0i64);
    for i in 0..n {
        for j in i + 1..n {
            let s = (x[i] - x[j]).signum() * (y[i] - y[j]).signum();
            if s > 0.0 {
                concordant += 1;
            } else if s < 0.0 {
                discordant += 1;
            }
        }
    }
    let pairs = (n * n.saturating_sub(1) / 2).max(1) as f64;
    (concordant - discordant) as f64 / pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_score_is_symmetric() {
        assert!((expected(1000.0, 1000.0) - 0.5).abs() < 1e-12);
        assert!((expected(1400.0, 1000.0) + expected(1000.0, 1400.0) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn schedule_is_distinct_connected_and_seeded() {
        let c = TournamentConfig::default();
        let s = schedule(16, &c, 3);
        assert_eq!(s.len(), 64);
        let mut pairs: Vec<(usize, usize)> = s.iter().map(|m| (m.a, m.b)).collect();
        pairs.sort();
        pairs.dedup();
        assert_eq!(pairs.len(), 64);
        assert_eq!(s, schedule(16, &c, 3));
        assert!(s.iter().all(|m| m.b_first.len() == 3));
        // Balanced per pair: each task is shown first to one or two of the three voters, and
        // over the schedule both tasks lead about equally often.
        assert!(s.iter().all(|m| {
            let b = m.b_first.iter().filter(|x| **x).count();
            b == 1 || b == 2
        }));
        let b_shown_first: usize = s
            .iter()
            .map(|m| m.b_first.iter().filter(|x| **x).count())
            .sum();
        assert!(
            (64..=128).contains(&b_shown_first),
            "{b_shown_first} of 192"
        );
    }

    #[test]
    fn binomial_p_values() {
        assert!((binomial_two_sided(5, 10) - 1.0).abs() < 1e-12);
        // P(X >= 9 | n = 10) = 11/1024, two-sided 22/1024.
        assert!((binomial_two_sided(9, 10) - 22.0 / 1024.0).abs() < 1e-12);
        assert!((binomial_two_sided(1, 10) - 22.0 / 1024.0).abs() < 1e-12);
        assert!(binomial_two_sided(444, 444) < 1e-100);
    }

    #[test]
    fn kappa_is_one_for_unanimous_voters_and_low_for_coin_flips() {
        let unanimous: Vec<Vote> = (0..20)
            .flat_map(|pair| {
                (0..3).map(move |judge| Vote {
                    judge,
                    pair,
                    b_first: judge == 1,
                    first_wins: (pair % 2 == 0) != (judge == 1),
                })
            })
            .collect();
        assert!((agreement(&unanimous).unwrap() - 1.0).abs() < 1e-12);
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let coins: Vec<Vote> = (0..400)
            .flat_map(|pair| (0..3).map(move |judge| (pair, judge)))
            .map(|(pair, judge)| Vote {
                judge,
                pair,
                b_first: false,
                first_wins: rng.random_bool(0.5),
            })
            .collect();
        assert!(agreement(&coins).unwrap().abs() < 0.1);
    }
}
