//! The phases of `geode curate`, in order, each behind its checkpoint (see `pipeline`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::CurateError;
use super::pipeline::{
    Candidate, CurateConfig, ModelFactory, Phase, PhaseReport, PhaseStatus, PilotRunner,
    STATE_SCHEMA, State, load_config,
};
use super::review::{MetaReview, Rated, Selected, meta_review, select};
use crate::datasets::{canonical_hash, write_new_json};
use crate::pack::hash_task_dir;
use journal::Journal;

mod intake;
mod journal;
mod judging;
mod pool;

pub use judging::parse_vote;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CurateError + '_ {
    move |source| CurateError::Io {
        path: path.display().to_string(),
        source,
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
        Phase::Synthesis => intake::synthesis(ctx).await,
        Phase::Dedup => intake::dedup(ctx, candidates(&last, "synthesis")?),
        Phase::Pilot => intake::pilot(ctx, candidates(&last, "dedup")?, journal).await,
        Phase::Tournament => judging::tourney(ctx, candidates(&last, "pilot")?, journal).await,
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
        Phase::Freeze => pool::freeze(ctx, prev, &last),
    }
}
