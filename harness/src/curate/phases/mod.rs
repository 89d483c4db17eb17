//! The phases of `geode curate`, in order, each behind its checkpoint (see `pipeline`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::CurateError;
use super::pipeline::{
    Candidate, CurateConfig, ModelFactory, OnPositionBias, POOL_SCHEMA, Phase, PhaseReport,
    PhaseStatus, PilotRunner, STATE_SCHEMA, State, TextModel, load_config,
};
use super::review::{MetaReview, Rated, Selected, meta_review, select};
use super::synth;
use super::tournament::{self, Outcome, Ratings, TournamentConfig, Vote};
use crate::datasets::allowlist::pack_origin;
use crate::datasets::minhash::{MinHashParams, MinHasher, cluster};
use crate::datasets::{canonical_hash, task_text, write_new_json};
use crate::pack::{Task, TaskPack, hash_task_dir, pack_hash};

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CurateError + '_ {
    move |source| CurateError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Work finished inside a phase (one pilot task, one vote), appended as it is done, so a phase
/// killed midway resumes where it stopped: `NN-PHASE.partial.jsonl` beside the checkpoint,
/// lines `{"key", "item", "value"}`. Only lines of the phase's current key count (a changed
/// config or input starts the phase over); the file goes once the checkpoint is written.
struct Journal {
    path: PathBuf,
    key: String,
    done: std::collections::BTreeMap<String, Value>,
}

impl Journal {
    fn open(path: PathBuf, key: &str) -> Journal {
        let done = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            // A line cut short by a crash does not parse and is simply not done.
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["key"] == key)
            .filter_map(|v| Some((v["item"].as_str()?.to_string(), v["value"].clone())))
            .collect();
        Journal {
            path,
            key: key.to_string(),
            done,
        }
    }

    fn get(&self, item: &str) -> Option<&Value> {
        self.done.get(item)
    }

    fn record(&mut self, item: &str, value: Value) -> Result<(), CurateError> {
        use std::io::Write;
        let line = json!({"key": self.key, "item": item, "value": value});
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(io(&self.path))?;
        writeln!(f, "{line}").map_err(io(&self.path))?;
        self.done.insert(item.to_string(), value);
        Ok(())
    }

    fn finish(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn to_value<T: Serialize>(v: &T) -> Result<Value, CurateError> {
    serde_json::to_value(v).map_err(|e| CurateError::Generator(format!("serialize: {e}")))
}

fn from_value<T: for<'de> Deserialize<'de>>(v: &Value, what: &str) -> Result<T, CurateError> {
    serde_json::from_value(v.clone()).map_err(|e| CurateError::Config {
        path: format!("checkpoint {what}"),
        message: e.to_string(),
    })
}

struct Ctx<'a> {
    config: CurateConfig,
    base: PathBuf,
    out: PathBuf,
    pilot: Option<&'a dyn PilotRunner>,
    models: &'a dyn ModelFactory,
    /// Candidate folders already found unchanged in this run: each phase's candidates are a
    /// subset of the one before, so each folder is hashed once, not once per phase.
    unchanged: std::sync::Mutex<std::collections::HashSet<(PathBuf, crate::pack::TaskHash)>>,
}

impl Ctx<'_> {
    /// Why a checkpoint's candidates can no longer be trusted: a folder gone or changed since
    /// (an older version recorded seed-pack folders relative to the wrong place).
    fn stale(&self, output: &Value) -> Option<String> {
        let cands: Vec<Candidate> = serde_json::from_value(output["candidates"].clone()).ok()?;
        let mut unchanged = self.unchanged.lock().unwrap_or_else(|p| p.into_inner());
        cands.iter().find_map(|c| {
            let dir = self.task_dir(c);
            let key = (dir.clone(), c.hash.clone());
            if unchanged.contains(&key) {
                return None;
            }
            match hash_task_dir(&dir) {
                Ok(h) if h == c.hash => {
                    unchanged.insert(key);
                    None
                }
                Ok(_) => Some(format!("{} changed since", dir.display())),
                Err(e) => Some(format!("{}: {e}", dir.display())),
            }
        })
    }

    fn task_dir(&self, c: &Candidate) -> PathBuf {
        let p = Path::new(&c.dir);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.out.join(p)
        }
    }

    fn state_path(&self, phase: Phase) -> PathBuf {
        let n = Phase::ALL.iter().position(|p| *p == phase).unwrap_or(0) + 1;
        self.out
            .join("state")
            .join(format!("{n:02}-{}.json", phase.name()))
    }

    /// The part of the config a phase depends on.
    fn section(&self, phase: Phase) -> Result<Value, CurateError> {
        let c = &self.config;
        Ok(match phase {
            Phase::Synthesis => json!({"synthesis": to_value(&c.synthesis)?,
                                       "seed_packs": to_value(&c.seed_packs)?}),
            Phase::Dedup => to_value(&c.dedup)?,
            Phase::Pilot => to_value(&c.pilot)?,
            Phase::Tournament => to_value(&c.tournament)?,
            Phase::MetaReview => json!({"meta": to_value(&c.meta)?,
                                        "topics": to_value(&c.synthesis.topics)?}),
            Phase::Selection => to_value(&c.selection)?,
            Phase::Freeze => Value::Null,
        })
    }
}

/// Run the pipeline from `config_path`, stopping after `until` if given.
pub async fn run(
    config_path: &Path,
    until: Option<Phase>,
    pilot: Option<&dyn PilotRunner>,
    models: &dyn ModelFactory,
) -> Result<Vec<PhaseReport>, CurateError> {
    let config = load_config(config_path)?;
    // Absolute, so every folder recorded in a checkpoint names the same place from anywhere.
    let base = config_path
        .parent()
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .unwrap_or(Path::new("."));
    let base = std::fs::canonicalize(base).map_err(io(base))?;
    let out = base.join(&config.out);
    std::fs::create_dir_all(out.join("state")).map_err(io(&out))?;
    let ctx = Ctx {
        config,
        base,
        out,
        pilot,
        models,
        unchanged: Default::default(),
    };
    let mut reports = Vec::new();
    let mut prev_hash = String::new();
    let mut outputs: Vec<Value> = Vec::new();
    for phase in Phase::ALL {
        let key = canonical_hash(&json!({
            "phase": phase, "seed": ctx.config.seed,
            "section": ctx.section(phase)?, "previous": prev_hash,
        }))?;
        let path = ctx.state_path(phase);
        let saved: Option<State> = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        let stale = match &saved {
            Some(s) if s.key == key && s.schema == STATE_SCHEMA => ctx.stale(&s.output),
            _ => None,
        };
        let (state, status, summary) = match saved {
            Some(s) if s.key == key && s.schema == STATE_SCHEMA && stale.is_none() => {
                (s, PhaseStatus::Resumed, "checkpoint reused".to_string())
            }
            _ => {
                let mut journal = Journal::open(path.with_extension("partial.jsonl"), &key);
                let (output, mut summary) = run_phase(&ctx, phase, &outputs, &mut journal).await?;
                if let Some(why) = stale {
                    summary = format!("{summary} (checkpoint not reused: {why})");
                }
                let output_hash = canonical_hash(&output)?;
                let state = State {
                    schema: STATE_SCHEMA.into(),
                    phase,
                    key,
                    output,
                    output_hash,
                };
                // Replace a stale checkpoint atomically: a crash leaves the old or the new one.
                let tmp = path.with_extension("json.tmp");
                let _ = std::fs::remove_file(&tmp);
                write_new_json(&tmp, &state)?;
                std::fs::rename(&tmp, &path).map_err(io(&path))?;
                journal.finish();
                (state, PhaseStatus::Ran, summary)
            }
        };
        prev_hash = state.output_hash.clone();
        outputs.push(state.output);
        reports.push(PhaseReport {
            phase,
            status,
            summary,
        });
        if until == Some(phase) {
            break;
        }
    }
    Ok(reports)
}

fn candidates(v: &Value, what: &str) -> Result<Vec<Candidate>, CurateError> {
    from_value(&v["candidates"], what)
}

async fn run_phase(
    ctx: &Ctx<'_>,
    phase: Phase,
    prev: &[Value],
    journal: &mut Journal,
) -> Result<(Value, String), CurateError> {
    let last = prev.last().cloned().unwrap_or(Value::Null);
    match phase {
        Phase::Synthesis => synthesis(ctx).await,
        Phase::Dedup => dedup(ctx, candidates(&last, "synthesis")?),
        Phase::Pilot => pilot(ctx, candidates(&last, "dedup")?, journal).await,
        Phase::Tournament => tourney(ctx, candidates(&last, "pilot")?, journal).await,
        Phase::MetaReview => {
            let items: Vec<Rated> = from_value(&last["rated"], "tournament")?;
            let mut r: MetaReview = meta_review(
                &items,
                &ctx.config.synthesis.topics,
                &ctx.config.meta.difficulties,
                ctx.config.meta.min_per_category,
            );
            let judges = match &last["position_bias"] {
                Value::Null => Vec::new(),
                v => from_value(v, "tournament")?,
            };
            r.judge_review(judges, last["agreement"].as_f64());
            let summary = format!("{} categories, {} gap(s)", r.coverage.len(), r.gaps.len());
            Ok((
                json!({"review": to_value(&r)?, "rated": last["rated"].clone(),
                       "candidates": last["candidates"].clone()}),
                summary,
            ))
        }
        Phase::Selection => {
            let items: Vec<Rated> = from_value(&last["rated"], "meta-review")?;
            let s = &ctx.config.selection;
            let chosen: Vec<Selected> =
                select(&items, &s.by, s.blend, s.top_k).map_err(|m| CurateError::Config {
                    path: "selection".into(),
                    message: m,
                })?;
            let summary = format!("{} of {} selected by {}", chosen.len(), items.len(), s.by);
            Ok((
                json!({"selected": to_value(&chosen)?, "rated": last["rated"].clone(),
                       "candidates": last["candidates"].clone()}),
                summary,
            ))
        }
        Phase::Freeze => freeze(ctx, prev, &last),
    }
}

async fn synthesis(ctx: &Ctx<'_>) -> Result<(Value, String), CurateError> {
    let mut out = Vec::new();
    for pack_dir in &ctx.config.seed_packs {
        let dir = ctx.base.join(pack_dir);
        let dir = std::fs::canonicalize(&dir).map_err(io(&dir))?;
        let pack = TaskPack::load(&dir)?;
        let origin = pack_origin(&dir);
        for t in &pack.tasks {
            out.push(candidate(t, t.dir.display().to_string(), &origin));
        }
    }
    let tasks_root = ctx.out.join("tasks");
    // A re-run replaces the synthesized tasks of an older run (this folder is ours alone).
    if tasks_root.exists() {
        std::fs::remove_dir_all(&tasks_root).map_err(io(&tasks_root))?;
    }
    let mut rejected = Vec::new();
    let syn = &ctx.config.synthesis;
    if let Some(route) = &syn.generator {
        let model = ctx.models.build(route).map_err(|m| CurateError::Model {
            route: route.clone(),
            message: m,
        })?;
        for topic in &syn.topics {
            for index in 0..syn.per_topic.max(1) {
                let reply = model
                    .ask(synth::SYSTEM, &synth::prompt(topic, index, ctx.config.seed))
                    .await
                    .map_err(|m| CurateError::Model {
                        route: route.clone(),
                        message: m,
                    })?;
                let loaded = synth::parse_reply(&reply)
                    .and_then(|g| synth::write_task(&tasks_root, &g))
                    .and_then(|dir| {
                        Task::load(&dir).map_err(|e| {
                            // A rejected task leaves no folder behind.
                            let _ = std::fs::remove_dir_all(&dir);
                            CurateError::from(e)
                        })
                    });
                match loaded {
                    Ok(t) => {
                        let rel = t.dir.strip_prefix(&ctx.out).unwrap_or(&t.dir);
                        out.push(candidate(
                            &t,
                            rel.display().to_string(),
                            &format!("synth:{topic}"),
                        ));
                    }
                    Err(e) => rejected.push(json!({"topic": topic, "index": index,
                                                   "reason": e.to_string()})),
                }
            }
        }
    }
    let summary = format!("{} candidates, {} rejected", out.len(), rejected.len());
    Ok((
        json!({"candidates": to_value(&out)?, "rejected": rejected}),
        summary,
    ))
}

fn candidate(t: &Task, dir: String, origin: &str) -> Candidate {
    Candidate {
        id: t.id.clone(),
        dir,
        hash: t.hash.clone(),
        origin: origin.to_string(),
        category: t.config.category().to_string(),
        difficulty: t.config.difficulty().to_string(),
    }
}

fn dedup(ctx: &Ctx<'_>, cands: Vec<Candidate>) -> Result<(Value, String), CurateError> {
    let params = MinHashParams {
        threshold: ctx.config.dedup.threshold,
        ..MinHashParams::default()
    };
    let hasher = MinHasher::new(params);
    let mut sigs = Vec::new();
    for c in &cands {
        let t = Task::load(&ctx.task_dir(c))?;
        sigs.push(hasher.signature(&task_text(&t)?));
    }
    let mut same = Vec::new();
    for i in 0..cands.len() {
        for j in i + 1..cands.len() {
            if cands[i].hash == cands[j].hash || cands[i].id == cands[j].id {
                same.push((i, j));
            }
        }
    }
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    // Seed-pack tasks come first in the candidate list, so the first member of a cluster (its
    // keeper) is an existing task whenever the cluster has one.
    for members in cluster(&sigs, &params, same) {
        let keep = members[0];
        kept.push(cands[keep].clone());
        for &m in &members[1..] {
            dropped.push(json!({"id": cands[m].id, "duplicate_of": cands[keep].id,
                "similarity": crate::datasets::minhash::estimate(&sigs[keep], &sigs[m])}));
        }
    }
    let summary = format!(
        "{} kept, {} near-duplicates dropped",
        kept.len(),
        dropped.len()
    );
    Ok((
        json!({"candidates": to_value(&kept)?, "dropped": dropped}),
        summary,
    ))
}

/// Oracle must pass every trial and nop fail every one.
async fn pilot_task(
    runner: &dyn PilotRunner,
    dir: &Path,
    id: &str,
    trials: u32,
    seed: u64,
) -> Result<Value, CurateError> {
    let oracle = runner
        .run(dir, "oracle", trials, seed)
        .await
        .map_err(CurateError::Pilot)?;
    let nop = runner
        .run(dir, "nop", trials, seed)
        .await
        .map_err(CurateError::Pilot)?;
    let flaky = oracle.iter().any(|p| *p) && !oracle.iter().all(|p| *p);
    let valid = !oracle.is_empty() && oracle.iter().all(|p| *p) && !nop.iter().any(|p| *p);
    Ok(json!({"id": id, "oracle": oracle, "nop": nop, "flaky": flaky, "valid": valid}))
}

async fn pilot(
    ctx: &Ctx<'_>,
    cands: Vec<Candidate>,
    journal: &mut Journal,
) -> Result<(Value, String), CurateError> {
    let cfg = &ctx.config.pilot;
    if !cfg.enabled {
        let n = cands.len();
        return Ok((
            json!({"enabled": false, "candidates": to_value(&cands)?}),
            format!("skipped (pilot.enabled = false); {n} pass through"),
        ));
    }
    let runner = ctx
        .pilot
        .ok_or_else(|| CurateError::Pilot("pilot.enabled but no pilot runner".into()))?;
    let (mut kept, mut results) = (Vec::new(), Vec::new());
    for (i, c) in cands.iter().enumerate() {
        // One journal item per task, keyed by content: a task finished before a crash is not
        // piloted again.
        let item = format!("{}@{}", c.id, c.hash.0);
        let result = match journal.get(&item) {
            Some(done) => done.clone(),
            None => {
                let seed = ctx.config.seed.wrapping_add(i as u64);
                let result = pilot_task(runner, &ctx.task_dir(c), &c.id, cfg.trials, seed).await?;
                journal.record(&item, result.clone())?;
                result
            }
        };
        if result["valid"] == true {
            kept.push(c.clone());
        }
        results.push(result);
    }
    let summary = format!("{} of {} valid", kept.len(), cands.len());
    Ok((
        json!({"enabled": true, "results": results, "candidates": to_value(&kept)?}),
        summary,
    ))
}

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

async fn tourney(
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
    let judges = sec
        .judges
        .iter()
        .map(|r| {
            ctx.models.build(r).map_err(|m| CurateError::Model {
                route: r.clone(),
                message: m,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let tcfg = TournamentConfig {
        voters: sec.voters,
        pairs: sec.pairs,
        bootstrap: sec.bootstrap,
        ..TournamentConfig::default()
    };
    let mut texts = Vec::new();
    for c in &cands {
        let t = Task::load(&ctx.task_dir(c))?;
        texts.push(format!(
            "[{} / {}]\n{}",
            c.category, c.difficulty, t.instruction
        ));
    }
    let schedule = tournament::schedule(cands.len(), &tcfg, ctx.config.seed);
    let mut votes: Vec<Vote> = Vec::new();
    let mut votes_log = Vec::new();
    for (pair, m) in schedule.iter().enumerate() {
        for (v, b_first) in m.b_first.iter().enumerate() {
            let (x, y) = if *b_first { (m.b, m.a) } else { (m.a, m.b) };
            let judge = v % judges.len();
            let route = &sec.judges[judge];
            // The schedule is a function of the key's inputs, so (pair, voter) names one vote.
            let item = format!("{pair}/{v}");
            let vote = match journal.get(&item).and_then(Value::as_bool) {
                Some(done) => done,
                None => {
                    let vote =
                        ask_vote(judges[judge].as_ref(), route, &texts[x], &texts[y]).await?;
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
    let labels: Vec<String> = sec
        .judges
        .iter()
        .enumerate()
        .map(|(i, r)| format!("judges[{i}] {r}"))
        .collect();
    let bias = tournament::position_bias(&votes, &labels, sec.max_position_bias);
    let flagged: Vec<usize> = (0..bias.len()).filter(|j| bias[*j].flagged).collect();
    let describe = |j: &usize| {
        let b = &bias[*j];
        format!(
            "{}: the task shown first won {} of {} votes ({:.2}, p = {:.1e})",
            b.judge, b.first_wins, b.votes, b.first_rate, b.p_value
        )
    };
    if !flagged.is_empty()
        && (sec.on_position_bias == OnPositionBias::Fail || flagged.len() == judges.len())
    {
        return Err(CurateError::Config {
            path: "tournament.judges".into(),
            message: format!(
                "position bias beyond {} (the judges rank by presentation order, not \
                 content):\n{}",
                sec.max_position_bias,
                flagged.iter().map(describe).collect::<Vec<_>>().join("\n")
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
        summary.push_str(&format!("; votes discounted, {}", describe(j)));
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

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PoolTask {
    pub id: String,
    pub hash: crate::pack::TaskHash,
    pub origin: String,
    pub category: String,
    pub difficulty: String,
    pub score: f64,
    pub elo: f64,
    pub bt: f64,
    pub bt_interval: (f64, f64),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PoolManifest {
    pub schema: String,
    pub seed: u64,
    pub pack_hash: String,
    /// Output hash of every phase, in order: the pool's lineage.
    pub phases: Vec<(String, String)>,
    pub tasks: Vec<PoolTask>,
}

fn freeze(ctx: &Ctx<'_>, prev: &[Value], last: &Value) -> Result<(Value, String), CurateError> {
    let selected: Vec<Selected> = from_value(&last["selected"], "selection")?;
    let cands: Vec<Candidate> = candidates(last, "selection")?;
    let tour = prev.get(3).cloned().unwrap_or(Value::Null);
    let ratings: Ratings = from_value(&tour["ratings"], "tournament")?;
    let ids: Vec<String> = from_value(&tour["ids"], "tournament")?;
    let pool = ctx.out.join("pool");
    if pool.exists() {
        return Err(CurateError::Frozen {
            path: pool.display().to_string(),
        });
    }
    let staging = ctx.out.join(".pool.staging");
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(io(&staging))?;
    }
    let mut tasks = Vec::new();
    for s in &selected {
        let (Some(c), Some(i)) = (
            cands.iter().find(|c| c.id == s.id),
            ids.iter().position(|x| *x == s.id),
        ) else {
            return Err(CurateError::Config {
                path: "selection".into(),
                message: format!("unknown task {}", s.id),
            });
        };
        let dest = staging.join("tasks").join(&c.id);
        copy_dir(&ctx.task_dir(c), &dest)?;
        let hash = hash_task_dir(&dest)?;
        if hash != c.hash {
            return Err(CurateError::Config {
                path: ctx.task_dir(c).display().to_string(),
                message: format!("changed since synthesis: hash {hash} != {}", c.hash),
            });
        }
        tasks.push(PoolTask {
            id: c.id.clone(),
            hash,
            origin: c.origin.clone(),
            category: c.category.clone(),
            difficulty: c.difficulty.clone(),
            score: s.score,
            elo: ratings.elo[i],
            bt: ratings.bt[i],
            bt_interval: ratings.bt_interval[i],
        });
    }
    let phases = Phase::ALL
        .iter()
        .zip(prev)
        .map(|(p, v)| Ok((p.name().to_string(), canonical_hash(v)?)))
        .collect::<Result<Vec<_>, CurateError>>()?;
    let manifest = PoolManifest {
        schema: POOL_SCHEMA.into(),
        seed: ctx.config.seed,
        pack_hash: pack_hash(tasks.iter().map(|t| (t.id.as_str(), &t.hash)), 1).0,
        phases,
        tasks,
    };
    write_new_json(&staging.join("pool.json"), &manifest)?;
    std::fs::rename(&staging, &pool).map_err(io(&pool))?;
    let summary = format!(
        "{} tasks frozen, pack hash {}",
        manifest.tasks.len(),
        manifest.pack_hash
    );
    Ok((
        json!({"pool": "pool/pool.json", "pack_hash": manifest.pack_hash}),
        summary,
    ))
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), CurateError> {
    for entry in walkdir::WalkDir::new(from).sort_by_file_name() {
        let entry = entry.map_err(|e| CurateError::Config {
            path: from.display().to_string(),
            message: e.to_string(),
        })?;
        let rel = entry.path().strip_prefix(from).unwrap_or(entry.path());
        let dest = to.join(rel);
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&dest).map_err(io(&dest))?;
        } else if entry.file_type().is_symlink() {
            let target = std::fs::read_link(entry.path()).map_err(io(entry.path()))?;
            std::os::unix::fs::symlink(target, &dest).map_err(io(&dest))?;
        } else {
            std::fs::copy(entry.path(), &dest).map_err(io(&dest))?;
        }
    }
    Ok(())
}
