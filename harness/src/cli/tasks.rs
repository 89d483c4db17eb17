//! `geode tasks`: list, hash and import task packs.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use geode_harness::pack::TaskPack;
use geode_harness::tb1::import_tb1;

#[derive(Debug, Subcommand)]
pub enum TasksCommand {
    /// List the tasks of a pack (and the broken ones, with why).
    List { pack: PathBuf },
    /// Print each task's content hash and the pack hash.
    Hash {
        pack: PathBuf,
        /// Trials per task, part of the pack hash.
        #[arg(short = 'k', long, default_value_t = 1)]
        trials: u32,
    },
    /// Convert Terminal-Bench 1 tasks (task.yaml, solution.sh, run-tests.sh) to Harbor layout.
    ImportTb1 { src: PathBuf, dest: PathBuf },
}

pub fn run(cmd: TasksCommand) -> anyhow::Result<ExitCode> {
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
        TasksCommand::ImportTb1 { src, dest } => {
            for dir in import_tb1(&src, &dest)? {
                println!("{}", dir.display());
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn report_broken(pack: &TaskPack) -> anyhow::Result<ExitCode> {
    for b in &pack.broken {
        eprintln!("geode: broken task: {b}");
    }
    Ok(if pack.broken.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
