//! `geode search`: run (or resume) a scaffold search, show its progress and lineage, and
//! promote its champion on the sealed holdout.
//!
//! Exit codes of `promote`: 0 KEEP (promoted), 1 REJECT or nothing to promote, 2 INVALID.

use super::exit::Exit;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Subcommand};
use geode_crucible::explain::round;
use geode_harness::rollout::slurm::SlurmSettings;
use geode_harness::search::champion::{Env, load_resolved, run_search};
use geode_harness::search::config::SearchConfig;
use geode_harness::search::lineage::{Lineage, table};
use geode_harness::search::promote::promote;
use tokio_util::sync::CancellationToken;

use super::terminal::progress::Progress;

#[derive(Debug, Subcommand)]
pub enum SearchCommand {
    /// Run a search from its configuration (`geode.search.v1`); resumes if its output exists.
    Run(RunArgs),
    /// Print a search's progress and its lineage table.
    Status {
        /// The search's output folder (`out` of its configuration).
        out: PathBuf,
    },
    /// Compare the final champion with the baseline on the sealed holdout (once).
    Promote(PromoteArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The search's configuration (`search.toml`, `geode.search.v1`).
    config: PathBuf,
    /// Multiply every task's agent and verifier timeouts (a slow machine); recorded.
    #[arg(long, default_value_t = 1.0)]
    timeout_multiplier: f64,
    /// Where the train campaigns' pairs run: each Slurm array task runs both arms of one pair
    /// on one node.
    #[command(flatten)]
    executor: super::run::ExecutorArgs,
}

#[derive(Debug, Args)]
pub struct PromoteArgs {
    /// The search's output folder.
    out: PathBuf,
    /// Multiply every task's agent and verifier timeouts (a slow machine); recorded.
    #[arg(long, default_value_t = 1.0)]
    timeout_multiplier: f64,
}

fn env(out: &Path, timeout_multiplier: f64, slurm: Option<SlurmSettings>) -> anyhow::Result<Env> {
    // The output folder is the sandbox's jobs folder: trials never see the lineage.
    let backend = super::backends::sandbox(out)?;
    let cancel = CancellationToken::new();
    crate::cli::run::cancel_on_signals(cancel.clone());
    Ok(Env {
        backend,
        observer: Arc::new(Progress::new()),
        cancel,
        timeout_multiplier,
        slurm,
        backend_over: Arc::new({
            let out = out.to_path_buf();
            move |store: &Path| {
                super::backends::sandbox_over(&out, store).map_err(|e| format!("{e:#}"))
            }
        }),
    })
}

pub async fn run(cmd: SearchCommand) -> anyhow::Result<Exit> {
    match cmd {
        SearchCommand::Run(a) => {
            let config = SearchConfig::load(&a.config)?;
            let env = env(
                &config.out,
                a.timeout_multiplier,
                a.executor.slurm_settings()?,
            )?;
            let summary = run_search(&config, &env, &mut |l| say!("search: {l}")).await?;
            println!("{}", serde_json::to_string(&summary)?);
            Ok(Exit::Success)
        }
        SearchCommand::Status { out } => {
            let r = load_resolved(&out)?;
            let lineage = Lineage::open(&out)?;
            let evaluated = lineage.evaluated().count();
            let spent = lineage.spent();
            println!(
                "policy {}, model {}, {} of {} candidates evaluated, {} kept, champion {}",
                geode_harness::search::champion::policy_name(r.config.policy),
                r.config.model,
                evaluated,
                r.config.budgets.candidates,
                lineage.evaluated().filter(|e| e.is_keep()).count(),
                lineage.champion().map(|e| e.id.as_str()).unwrap_or("-"),
            );
            let alpha = 1.0 - r.config.rule.confidence;
            let budget = r.config.budgets.candidates.max(1);
            println!(
                "family-wise error of the train KEEPs <= {} ({evaluated} of {budget} tests spent, \
                 at most {} over the budget): Bonferroni, each candidate at confidence {}",
                round(alpha * f64::from(evaluated as u32) / f64::from(budget)),
                round(alpha),
                round(r.config.rule.per_candidate(budget).confidence)
            );
            println!(
                "spent: {:.0} s wall, {} tokens, ${:.4}",
                spent.wall_seconds, spent.tokens, spent.cost_usd
            );
            let promotion = out.join("promotion.json");
            if let Ok(text) = std::fs::read_to_string(&promotion) {
                let p: serde_json::Value = serde_json::from_str(&text)
                    .with_context(|| format!("reading {}", promotion.display()))?;
                println!(
                    "promotion: champion {} against baseline {}: {}{}",
                    p["champion"].as_str().unwrap_or("-"),
                    p["baseline"].as_str().unwrap_or("-"),
                    p["verdict"].as_str().unwrap_or("nothing compared"),
                    if p["promoted"].as_bool() == Some(true) {
                        ", promoted"
                    } else {
                        ", not promoted"
                    },
                );
                // The holdout's decision in words, when one was made.
                let decision = out.join("promotion/decision.json");
                if let Ok(text) = std::fs::read_to_string(&decision) {
                    let record = geode_crucible::DecisionRecord::from_json(&text)
                        .with_context(|| format!("reading {}", decision.display()))?;
                    println!("{}", geode_crucible::explain(&record));
                } else if let Some(reasons) = p["reasons"].as_array() {
                    let reasons: Vec<&str> = reasons.iter().filter_map(|r| r.as_str()).collect();
                    println!("reasons {}", reasons.join(", "));
                }
            }
            print!("{}", table(&lineage.entries));
            Ok(Exit::Success)
        }
        SearchCommand::Promote(a) => {
            // The holdout is opened in a vault on this machine; promotion runs here.
            let env = env(&a.out, a.timeout_multiplier, None)?;
            let p = promote(&a.out, &env).await?;
            println!("{}", serde_json::to_string_pretty(&p)?);
            match (p.verdict.as_deref(), &p.confirmation) {
                (Some(v), _) => println!("promotion verdict {v}"),
                (None, Some(c)) => println!(
                    "not promoted: the champion's confirmation on fresh train seeds is {} \
                     (estimate {}, {} when selected); the holdout stays sealed",
                    c.verdict,
                    c.estimate.map_or("n/a".into(), |e| format!("{e:.4}")),
                    c.selected_estimate
                        .map_or("n/a".into(), |e| format!("{e:.4}"))
                ),
                (None, None) => println!("nothing to promote: the champion is the baseline"),
            }
            // Not promoted without a holdout decision (the champion is the baseline, or it did
            // not confirm) is a decision not to promote, as a REJECT is.
            Ok(
                match p
                    .verdict
                    .as_deref()
                    .map(str::parse::<geode_crucible::Verdict>)
                {
                    Some(Ok(v)) => Exit::verdict(v),
                    Some(Err(_)) => Exit::Failed,
                    None => Exit::Reject,
                },
            )
        }
    }
}
