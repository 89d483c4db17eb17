//! Command-line surface of `geode`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod backends;
mod crucible;
mod dataset;
mod exec;
mod progress;
mod receipts;
mod resume;
mod run;
mod tasks;

#[derive(Debug, Parser)]
#[command(
    name = "geode",
    version,
    about = "GEODE: an agent runtime and research harness"
)]
pub struct Cli {
    /// More logging on stderr (-v info, -vv debug). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one prompt headless: the final answer on stdout, everything else on stderr.
    Exec(exec::ExecArgs),
    /// Continue a checkpointed session: finish its interrupted turn, or give it a new prompt.
    Resume(resume::ResumeArgs),
    /// List effect receipts; reconcile uncertain effects by hand.
    #[command(subcommand)]
    Receipts(receipts::ReceiptsCommand),
    /// Run a benchmark: every task of a pack, K attempts each, in sandboxes.
    Run(run::RunArgs),
    /// Frozen contracts, paired campaigns, the promotion gate, power, sealed holdouts.
    #[command(subcommand)]
    Crucible(crucible::CrucibleCommand),
    /// Inspect, hash and import task packs.
    #[command(subcommand)]
    Tasks(tasks::TasksCommand),
    /// Data governance: privacy scan, releases, verification, split isolation.
    #[command(subcommand)]
    Dataset(dataset::DatasetCommand),
}

pub fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Command::Exec(args) => runtime.block_on(exec::run(args)),
        Command::Resume(args) => runtime.block_on(resume::run(args)),
        Command::Receipts(cmd) => receipts::run(cmd),
        Command::Run(args) => runtime.block_on(run::run(args)),
        Command::Tasks(cmd) => tasks::run(cmd),
        Command::Dataset(cmd) => dataset::run(cmd),
        Command::Crucible(cmd) => runtime.block_on(crucible::run(cmd)),
    }
}
