//! `geode tasks`: list, hash, check, validate and import task packs.

use super::exit::Exit;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Subcommand;
use geode_graders::{TaskTrials, ValidityReport};
use geode_harness::pack::{TaskPack, preflight};
use geode_harness::rollout::job::{CONFIG_SCHEMA, RunConfig, start_run};
use geode_harness::store::RunStore;
use geode_harness::tb1::import_tb1;
use geode_runtime::scaffold::Scaffold;
use tokio_util::sync::CancellationToken;

use super::terminal::progress::Progress;

#[derive(Debug, Subcommand)]
pub enum TasksCommand {
    /// List the tasks of a pack (and the broken ones, with why).
    List {
        /// The task pack (a folder of Harbor tasks, or one task).
        pack: PathBuf,
    },
    /// Print each task's content hash and the pack hash.
    Hash {
        /// The task pack (a folder of Harbor tasks, or one task).
        pack: PathBuf,
        /// Trials per task, part of the pack hash.
        #[arg(short = 'k', long, default_value_t = 1)]
        trials: u32,
    },
    /// Say, before anything runs, what GEODE will do with each task that Harbor would do
    /// otherwise: task.toml keys it ignores, where each base image comes from (and what stands
    /// in for it), compose fields it does not apply, and the tasks it refuses (exit 10 when
    /// any is refused).
    Check {
        /// The task pack (a folder of Harbor tasks, or one task).
        pack: PathBuf,
        /// Print the findings as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Convert Terminal-Bench 1 tasks (task.yaml, solution.sh, run-tests.sh) to Harbor layout.
    ImportTb1 {
        /// A Terminal-Bench 1 task folder, or a folder of them.
        src: PathBuf,
        /// Where the Harbor tasks are written (one folder per task, never replaced).
        dest: PathBuf,
    },
    /// Run the oracle and nop K times per task and flag tasks the oracle cannot pass, tasks nop
    /// passes and flaky tasks; writes a validity report (exit 10 when any task is flagged).
    Validate {
        /// The task pack (a folder of Harbor tasks, or one task).
        pack: PathBuf,
        /// Runs of the oracle and of nop per task.
        #[arg(short = 'k', long, default_value_t = 1)]
        trials: u32,
        /// Trials running at once.
        #[arg(short = 'n', long, default_value_t = 1)]
        concurrency: usize,
        /// Where the runs and the validity report are written.
        #[arg(long, default_value = "jobs")]
        jobs_dir: PathBuf,
    },
}

pub async fn run(cmd: TasksCommand) -> anyhow::Result<Exit> {
    match cmd {
        TasksCommand::List { pack } => {
            let pack = TaskPack::load(&pack)?;
            for t in &pack.tasks {
                println!(
                    "{:<40} {:<18} {:<8} {}",
                    t.id,
                    t.config.category(),
                    t.config.difficulty(),
                    t.config.task.description.as_deref().unwrap_or("")
                );
            }
            report_broken(&pack)
        }
        TasksCommand::Hash { pack, trials } => {
            let pack = TaskPack::load(&pack)?;
            for t in &pack.tasks {
                println!("{}  {}", t.hash, t.id);
            }
            println!(
                "{}  pack ({} tasks, {} trials per task)",
                pack.hash(trials),
                pack.tasks.len(),
                trials
            );
            report_broken(&pack)
        }
        TasksCommand::Check { pack, json } => check(&pack, json),
        TasksCommand::Validate {
            pack,
            trials,
            concurrency,
            jobs_dir,
        } => validate(&pack, trials, concurrency, &jobs_dir).await,
        TasksCommand::ImportTb1 { src, dest } => {
            let imported = import_tb1(&src, &dest)?;
            for dir in &imported.tasks {
                println!("{}", dir.display());
            }
            for why in &imported.skipped {
                say!("not imported: {why}");
            }
            say!(
                "{} imported, {} not imported",
                imported.tasks.len(),
                imported.skipped.len()
            );
            // Some tasks converted and some not is still a partial failure the caller should see.
            Ok(if imported.skipped.is_empty() {
                Exit::Success
            } else {
                Exit::Findings
            })
        }
    }
}

/// One oracle run and one nop run of the pack, folded into a validity report.
async fn validate(pack: &Path, k: u32, n: usize, jobs_dir: &Path) -> anyhow::Result<Exit> {
    let pack_dir = std::fs::canonicalize(pack)?;
    let backend = super::backends::sandbox(jobs_dir)?;
    let mut per_task: BTreeMap<String, TaskTrials> = BTreeMap::new();
    for model in ["oracle", "nop"] {
        let config = RunConfig {
            schema: CONFIG_SCHEMA.into(),
            pack: pack_dir.clone(),
            model: model.parse()?,
            attempts: k,
            concurrency: n.max(1),
            seed: 0,
            tasks_glob: None,
            timeout_multiplier: 1.0,
            backend: geode_harness::env::kind::BackendKind::Sandbox,
            base: geode_harness::env::BaseMode::Image,
            max_infra_retries: 1,
            scaffold: Scaffold::default(),
            agent: Default::default(),
            keep_workspace: false,
            slurm: None,
        };
        let outcome = start_run(
            config,
            jobs_dir,
            backend.clone(),
            Arc::new(Progress::new()),
            CancellationToken::new(),
        )
        .await?;
        let store = RunStore::open(&jobs_dir.join(geode_harness::store::STORE_FILE))?;
        for t in store.trials(&outcome.run_id)? {
            let entry = per_task
                .entry(t.task_id.clone())
                .or_insert_with(|| TaskTrials {
                    task: t.task_id.clone(),
                    oracle: Vec::new(),
                    nop: Vec::new(),
                });
            let reward = (!t.outcome.is_infrastructure()).then(|| t.reward.unwrap_or(0.0));
            if model == "oracle" {
                entry.oracle.push(reward);
            } else {
                entry.nop.push(reward);
            }
        }
    }
    let tasks: Vec<TaskTrials> = per_task.into_values().collect();
    let report = ValidityReport::build(pack_dir.display().to_string(), k as usize, &tasks);
    let path = jobs_dir.join(format!(
        "validity-{}.json",
        chrono::Utc::now().format("%Y-%m-%d__%H-%M-%S")
    ));
    std::fs::write(&path, report.to_json())?;
    print!("{}", report.render_text());
    println!("report {}", path.display());
    Ok(if report.all_ok() {
        Exit::Success
    } else {
        Exit::Findings
    })
}

fn report_broken(pack: &TaskPack) -> anyhow::Result<Exit> {
    for b in &pack.broken {
        say!("geode: broken task: {b}");
    }
    Ok(if pack.broken.is_empty() {
        Exit::Success
    } else {
        Exit::Findings
    })
}

/// `geode tasks check`: the preflight's findings, per task.
fn check(pack: &Path, json: bool) -> anyhow::Result<Exit> {
    let settings = super::backends::ImageSettings::load()?;
    // Only read: a check never makes or changes the store (which may be a read-only mount).
    let store = if settings.store.join("layers").is_dir() {
        Some(geode_harness::env::image::ImageStore::open_read_only(
            settings.store.clone(),
        )?)
    } else {
        None
    };
    let rules = geode_harness::env::SourceRules {
        store: store.as_ref(),
        mirrors: &settings.mirrors,
        aliases: &settings.aliases,
        stand_in_pinned: settings.stand_in_pinned,
    };
    let checks = preflight::check_pack(pack, &rules)?;
    let refused = checks.iter().filter(|c| c.refused.is_some()).count();
    let differing = checks
        .iter()
        .filter(|c| c.refused.is_none() && !c.differences.is_empty())
        .count();
    if json {
        let rows: Vec<serde_json::Value> = checks
            .iter()
            .map(|c| {
                serde_json::json!({
                    "task": c.task,
                    "refused": c.refused,
                    "images": c.images,
                    "differences": c.differences,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).unwrap_or_default()
        );
    } else {
        let mut text = String::new();
        for c in &checks {
            match &c.refused {
                Some(why) => text.push_str(&format!("{}: refused: {why}\n", c.task)),
                None if c.differences.is_empty() => {
                    text.push_str(&format!("{}: runs as in Harbor\n", c.task))
                }
                None => text.push_str(&format!("{}: runs, with differences\n", c.task)),
            }
            for image in &c.images {
                text.push_str(&format!("  image: {image}\n"));
            }
            for d in &c.differences {
                text.push_str(&format!("  differs: {d}\n"));
            }
        }
        text.push_str(&format!(
            "{} tasks: {} as in Harbor, {differing} with differences, {refused} refused\n",
            checks.len(),
            checks.len() - differing - refused
        ));
        print!("{}", super::printable(&text));
    }
    Ok(if refused > 0 {
        Exit::Findings
    } else {
        Exit::Success
    })
}
