//! The tournament phase: judges vote on scheduled pairs of tasks, each pair shown both ways
//! round; judges who rank by presentation order are discounted (or stop the run), and the
//! rest rate the tasks.

use serde_json::{Value, json};

use super::{Ctx, Journal, to_value};
use crate::curate::CurateError;
use crate::curate::pipeline::{Candidate, OnPositionBias, TextModel};
use crate::curate::review::Rated;
use crate::curate::tournament::{
    self, Matchup, Outcome, PositionBias, Ratings, TournamentConfig, Vote,
};
use crate::pack::Task;

/// Which of two shown tasks the judge prefers: the first standalone `A` or `B` of its reply.
pub fn parse_vote(reply: &str) -> Option<bool> {
    reply
        .split(|c: char| !c.is_ascii_alphanumeric())
        .find_map(|w| match w {
            "A" => Some(true),
            "B" => Some(false),
            _ => None,
        })
}

const JUDGE_SYSTEM: &str = "You compare two benchmark tasks for terminal agents. The better task \
is clear, realistic, verifiable by its tests and not trivial. Answer with one letter: A or B.";

/// One judge's vote on two tasks as shown: true when the first (`A`) wins.
async fn ask_vote(
    judge: &dyn TextModel,
    route: &str,
    first: &str,
    second: &str,
) -> Result<bool, CurateError> {
    let prompt =
        format!("Task A:\n{first}\n\nTask B:\n{second}\n\nWhich is the better task? A or B.");
    let model = |message: String| CurateError::Model {
        route: route.to_string(),
        message,
    };
    let reply = judge.ask(JUDGE_SYSTEM, &prompt).await.map_err(model)?;
    parse_vote(&reply)
        .ok_or_else(|| model(format!("the judge answered neither A nor B: {reply:?}")))
}

pub(super) async fn tourney(
    ctx: &Ctx<'_>,
    mut cands: Vec<Candidate>,
    journal: &mut Journal,
) -> Result<(Value, String), CurateError> {
    cands.sort_by(|a, b| a.id.cmp(&b.id));
    let sec = &ctx.config.tournament;
    if sec.judges.is_empty() && cands.len() > 1 {
        return Err(CurateError::Config {
            path: "tournament.judges".into(),
            message: "at least one judge route".into(),
        });
    }
    let judges = build_judges(ctx, &sec.judges)?;
    let tcfg = TournamentConfig {
        voters: sec.voters,
        pairs: sec.pairs,
        bootstrap: sec.bootstrap,
        ..TournamentConfig::default()
    };
    let schedule = tournament::schedule(cands.len(), &tcfg, ctx.config.seed);
    let ballot = Ballot {
        judges: &judges,
        routes: &sec.judges,
        cands: &cands,
        texts: task_texts(ctx, &cands)?,
    };
    let (votes, votes_log) = ballot.cast(&schedule, journal).await?;
    let labels: Vec<String> = sec
        .judges
        .iter()
        .enumerate()
        .map(|(i, r)| format!("judges[{i}] {r}"))
        .collect();
    let bias = tournament::position_bias(&votes, &labels, sec.max_position_bias);
    let flagged: Vec<usize> = (0..bias.len()).filter(|j| bias[*j].flagged).collect();
    if !flagged.is_empty()
        && (sec.on_position_bias == OnPositionBias::Fail || flagged.len() == judges.len())
    {
        return Err(CurateError::Config {
            path: "tournament.judges".into(),
            message: format!(
                "position bias beyond {} (the judges rank by presentation order, not \
                 content):\n{}",
                sec.max_position_bias,
                flagged
                    .iter()
                    .map(|j| describe(&bias[*j]))
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
        });
    }
    let outcomes: Vec<Outcome> = tournament::outcomes_without(&schedule, &votes, &flagged);
    let kept: Vec<Vote> = votes
        .iter()
        .filter(|v| !flagged.contains(&v.judge))
        .copied()
        .collect();
    let agreement = tournament::agreement(&kept);
    let ratings: Ratings = tournament::ratings(cands.len(), &outcomes, &tcfg, ctx.config.seed);
    let rated: Vec<Rated> = cands
        .iter()
        .enumerate()
        .map(|(i, c)| Rated {
            id: c.id.clone(),
            category: c.category.clone(),
            difficulty: c.difficulty.clone(),
            origin: c.origin.clone(),
            rating: ratings.bt[i],
        })
        .collect();
    let mut summary = format!(
        "{} pairs, {} votes over {} tasks, voter agreement (Fleiss kappa) {}",
        outcomes.len(),
        votes_log.len(),
        cands.len(),
        agreement.map_or("n/a".to_string(), |k| format!("{k:.2}"))
    );
    for j in &flagged {
        summary.push_str(&format!("; votes discounted, {}", describe(&bias[*j])));
    }
    let discounted: Vec<&str> = flagged.iter().map(|j| sec.judges[*j].as_str()).collect();
    Ok((
        json!({"ids": cands.iter().map(|c| c.id.clone()).collect::<Vec<_>>(),
               "outcomes": to_value(&outcomes)?, "votes": votes_log,
               "position_bias": to_value(&bias)?, "agreement": agreement,
               "discounted": discounted,
               "ratings": to_value(&ratings)?, "rated": to_value(&rated)?,
               "candidates": to_value(&cands)?}),
        summary,
    ))
}

/// One model per judge route.
fn build_judges(ctx: &Ctx<'_>, routes: &[String]) -> Result<Vec<Box<dyn TextModel>>, CurateError> {
    routes
        .iter()
        .map(|r| {
            ctx.models.build(r).map_err(|m| CurateError::Model {
                route: r.clone(),
                message: m,
            })
        })
        .collect()
}

/// What a judge is shown of each task: its category, difficulty and instruction.
fn task_texts(ctx: &Ctx<'_>, cands: &[Candidate]) -> Result<Vec<String>, CurateError> {
    let mut texts = Vec::new();
    for c in cands {
        let t = Task::load(&ctx.task_dir(c))?;
        texts.push(format!(
            "[{} / {}]\n{}",
            c.category, c.difficulty, t.instruction
        ));
    }
    Ok(texts)
}

/// A judge's lean towards the task shown first, in words.
fn describe(b: &PositionBias) -> String {
    format!(
        "{}: the task shown first won {} of {} votes ({:.2}, p = {:.1e})",
        b.judge, b.first_wins, b.votes, b.first_rate, b.p_value
    )
}

/// The judges and what they are shown: the voting side of the tournament.
struct Ballot<'a> {
    judges: &'a [Box<dyn TextModel>],
    routes: &'a [String],
    cands: &'a [Candidate],
    texts: Vec<String>,
}

impl Ballot<'_> {
    /// Every scheduled vote, voters taking turns among the judges; a vote already in the
    /// journal is not asked again. The votes, and their log for the checkpoint.
    async fn cast(
        &self,
        schedule: &[Matchup],
        journal: &mut Journal,
    ) -> Result<(Vec<Vote>, Vec<Value>), CurateError> {
        let cands = self.cands;
        let mut votes: Vec<Vote> = Vec::new();
        let mut votes_log = Vec::new();
        for (pair, m) in schedule.iter().enumerate() {
            for (v, b_first) in m.b_first.iter().enumerate() {
                let (x, y) = if *b_first { (m.b, m.a) } else { (m.a, m.b) };
                let judge = v % self.judges.len();
                let route = &self.routes[judge];
                // The schedule is a function of the key's inputs, so (pair, voter) names one vote.
                let item = format!("{pair}/{v}");
                let vote = match journal.get(&item).and_then(Value::as_bool) {
                    Some(done) => done,
                    None => {
                        let judge = self.judges[judge].as_ref();
                        let vote = ask_vote(judge, route, &self.texts[x], &self.texts[y]).await?;
                        journal.record(&item, json!(vote))?;
                        vote
                    }
                };
                votes_log.push(json!({"a": cands[m.a].id, "b": cands[m.b].id, "voter": v,
                                      "judge": route, "shown_first": cands[x].id,
                                      "first_wins": vote}));
                votes.push(Vote {
                    judge,
                    pair,
                    b_first: *b_first,
                    first_wins: vote,
                });
            }
        }
        Ok((votes, votes_log))
    }
}
