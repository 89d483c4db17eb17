//! Command-line surface of `geode`.

use std::ffi::OsString;
use std::process::ExitCode;

use anyhow::Context;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Parser, Subcommand};
use geode_runtime::model::effort::Effort;
use strum::IntoEnumIterator;

mod assembly;
mod backends;
mod bench;
mod bench_agent;
mod bench_gateway;
mod bench_pull;
mod bench_slurm;
mod bench_support;
mod bench_view;
mod config;
mod connect;
mod crucible;
mod curate;
mod dataset;
mod exec;
mod exit;
mod external;
mod image;
mod login;
mod mcp;
mod providers;
mod receipts;
mod repl;
mod resume;
mod rewind;
mod run;
mod scaffold;
mod search;
mod serve;
mod sessions;
mod show;
mod skills;
mod tasks;
mod terminal;
mod trust;
mod unshare;
mod view;
mod worker;

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
    /// Model route for the REPL and daemon sessions (config key `model`).
    #[arg(long)]
    pub model: Option<geode_runtime::model::catalog::Route>,
    /// Reasoning effort (config key `effort`).
    #[arg(long, value_parser = effort_parser())]
    pub effort: Option<Effort>,
    /// How shell commands run (config key `sandbox`): `workspace-write` (the default: the
    /// workspace writable, the rest of the machine read-only, no network) or `off`.
    #[arg(long, global = true, value_name = "MODE", value_parser = ["workspace-write", "off"])]
    pub sandbox: Option<String>,
    /// Talk to the running `geode serve` daemon instead of starting a local session.
    #[arg(long, conflicts_with = "local")]
    pub connect: bool,
    /// Start a local session even when a daemon is running.
    #[arg(long)]
    pub local: bool,
    /// Continue the most recently active session (as `/resume` with its id).
    #[arg(short = 'c', long = "continue")]
    pub continue_last: bool,
    /// Without a subcommand: the interactive REPL (or the thin client when a daemon runs).
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The daily-CLI daemon on $GEODE_HOME/cli.sock; `geode --connect` talks to it.
    Serve(serve::ServeArgs),
    /// Layered configuration: flags > GEODE_* env > .geode/config.toml > ~/.geode/config.toml.
    #[command(subcommand)]
    Config(config::ConfigCommand),
    /// Run one prompt headless: the final answer on stdout, everything else on stderr.
    Exec(exec::ExecArgs),
    /// Continue a checkpointed session: finish its interrupted turn, or give it a new prompt.
    Resume(resume::ResumeArgs),
    /// List effect receipts; reconcile uncertain effects by hand.
    #[command(subcommand)]
    Receipts(receipts::ReceiptsCommand),
    /// The checkpointed sessions, newest first: first prompt, last activity, model, cost.
    Sessions(sessions::SessionsArgs),
    /// Go back to before a turn of a session: the files its turns changed, then the
    /// conversation (without --to: the turns, with the files each changed).
    Rewind(rewind::RewindArgs),
    /// Run a benchmark: every task of a pack, K attempts each, in sandboxes.
    Run(run::RunArgs),
    /// Measure the environment: per-trial set-up/teardown over a pack, an image's first pull.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// The image store: pull, load (`docker save` tarballs, OCI layouts), ls, rm, prune.
    #[command(subcommand)]
    Image(image::ImageCommand),
    /// Frozen contracts, paired campaigns, the promotion gate, power, sealed holdouts.
    #[command(subcommand)]
    Crucible(crucible::CrucibleCommand),
    /// Print a trial's outcome and the verifier's named checks.
    Show(show::ShowArgs),
    /// A local web UI over a jobs folder: runs, trials, transcripts, comparisons, decisions.
    View(view::ViewArgs),
    /// Re-grade the stored trials of a run without running agents again.
    Grade(show::GradeArgs),
    /// Inspect, hash and import task packs.
    #[command(subcommand)]
    Tasks(tasks::TasksCommand),
    /// Data governance: privacy scan, releases, verification, split isolation.
    #[command(subcommand)]
    Dataset(dataset::DatasetCommand),
    /// Show, hash and diff scaffolds.
    #[command(subcommand)]
    Scaffold(scaffold::ScaffoldCommand),
    /// Scaffold search: run, status, promote on the sealed holdout.
    #[command(subcommand)]
    Search(search::SearchCommand),
    /// Curate tasks: synthesis, dedup, pilot, judge tournament, selection, frozen pool.
    Curate(curate::CurateArgs),
    /// GEODE as an MCP server (`run_agent`) on stdio or streamable HTTP; `geode mcp list`
    /// shows the MCP servers GEODE uses as a client.
    Mcp(mcp::McpArgs),
    /// Sign in to a subscription: `geode login openai` (ChatGPT, for openai-codex:MODEL;
    /// `--device` on a machine without a browser).
    Login(login::LoginArgs),
    /// Remove a subscription sign-in: `geode logout openai`.
    Logout(login::LogoutArgs),
    /// Allow this project's .geode/config.toml to start MCP servers (--show, --revoke).
    Trust(trust::TrustArgs),
    /// The skills sessions here see: `list`, `show NAME`.
    #[command(subcommand)]
    Skills(skills::SkillsCommand),
    /// Tables, plots and exports of runs (runs `geode-report report ARGS`; see `geode report --help`).
    #[command(disable_help_flag = true)]
    Report(external::PassThrough),
    /// Paired comparison of two runs (runs `geode-report compare ARGS`).
    #[command(disable_help_flag = true)]
    Compare(external::PassThrough),
    /// One Slurm array task of a run (started by `sbatch`, not by hand).
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
    /// Run a command in the rootless sandbox's user namespace (without root: as its root,
    /// e.g. `geode unshare rm -rf jobs/RUN` for files a trial's users wrote).
    Unshare(unshare::UnshareArgs),
    /// Any other NAME runs `geode-NAME` found next to geode or on PATH, as git does.
    #[command(external_subcommand)]
    External(Vec<OsString>),
}

/// Logging on stderr. By default people read warnings and errors as sentences (`geode: warning:
/// ...`); `-v`, `-vv` or `RUST_LOG` turn it into a log (time, level, module) for whoever debugs.
pub fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let from_env = tracing_subscriber::EnvFilter::try_from_default_env().ok();
    let for_people = verbose == 0 && from_env.is_none();
    let filter = from_env.unwrap_or_else(|| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if for_people {
        builder.event_format(Sentences).init();
    } else {
        builder.init();
    }
}

/// A log event as a person reads it: `geode: warning: MESSAGE`, no time, no module path.
struct Sentences;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for Sentences
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let kind = match *event.metadata().level() {
            tracing::Level::ERROR => "error",
            tracing::Level::WARN => "warning",
            _ => "note",
        };
        write!(writer, "geode: {kind}: ")?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// Whether `cli` may open a sealed holdout (`crucible run` of a test-stage contract with
/// `--sealed`, `search promote`): such a command needs a mount namespace of its own, made
/// before any thread exists, to keep the holdout's files in memory (`env::vault`).
/// Commands that may start sandboxes (trials, image builds, bootstraps): without root they
/// run in the rootless sandbox's user namespace (`geode_env::rootless`). The daily CLI's own
/// command sandbox (`confine.rs`) makes its namespaces per command and needs none of it.
pub fn starts_sandboxes(cli: &Cli) -> bool {
    matches!(
        &cli.command,
        Some(
            Command::Run(_)
                | Command::Worker(_)
                | Command::Image(_)
                | Command::Crucible(_)
                | Command::Search(_)
                | Command::Tasks(_)
                | Command::Bench(_)
                | Command::Unshare(_)
        )
    )
}

pub fn may_open_a_holdout(cli: &Cli) -> bool {
    match &cli.command {
        Some(Command::Crucible(crucible::CrucibleCommand::Run(a))) => a.opens_sealed(),
        Some(Command::Search(search::SearchCommand::Promote(_))) => true,
        _ => false,
    }
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let command = match cli.command {
        Some(c) => c,
        None => {
            let cfg = daily_config(&cli.model, cli.effort, cli.sandbox.as_deref())?;
            let first = cli.continue_last.then(continue_command).transpose()?;
            return runtime
                .block_on(interactive(cli.connect, cli.local, cfg, first))
                .map(ExitCode::from);
        }
    };
    match command {
        Command::Serve(args) => runtime.block_on(serve::run(
            args,
            daily_config(&cli.model, cli.effort, cli.sandbox.as_deref())?,
        )),
        Command::Config(cmd) => config::run(
            cmd,
            &daily_config(&cli.model, cli.effort, cli.sandbox.as_deref())?,
        ),
        Command::Exec(args) => runtime.block_on(exec::run(args, cli.sandbox.as_deref())),
        Command::Resume(args) => runtime.block_on(resume::run(args, cli.sandbox.as_deref())),
        Command::Receipts(cmd) => receipts::run(cmd),
        Command::Sessions(args) => sessions::run(args),
        Command::Rewind(args) => rewind::run(args),
        Command::Run(args) => runtime.block_on(run::run(args)),
        Command::Worker(args) => runtime.block_on(worker::run(args)),
        Command::Image(cmd) => runtime.block_on(image::run(cmd)),
        Command::Bench(cmd) => runtime.block_on(bench::run(cmd)),
        Command::Tasks(cmd) => runtime.block_on(tasks::run(cmd)),
        Command::Show(args) => show::show(args),
        Command::View(args) => runtime.block_on(view::run(args)),
        Command::Grade(args) => runtime.block_on(show::grade(args)),
        Command::Dataset(cmd) => dataset::run(cmd),
        Command::Curate(args) => runtime.block_on(curate::run(args)),
        Command::Crucible(cmd) => runtime.block_on(crucible::run(cmd)),
        Command::Scaffold(cmd) => scaffold::run(cmd),
        Command::Search(cmd) => runtime.block_on(search::run(cmd)),
        Command::Mcp(args) => {
            let model = args.model.clone().or(cli.model);
            runtime.block_on(mcp::run(
                args,
                daily_config(&model, cli.effort, cli.sandbox.as_deref())?,
            ))
        }
        Command::Trust(args) => trust::run(args),
        Command::Skills(cmd) => runtime.block_on(skills::run(cmd)),
        Command::Login(args) => runtime.block_on(login::login(args)),
        Command::Logout(args) => login::logout(args),
        // These replace this process (exec): the child's own status is geode's.
        Command::Unshare(args) => return unshare::run(args),
        Command::Report(pass) => return external::dispatch("report", &["report"], &pass.args),
        Command::Compare(pass) => return external::dispatch("report", &["compare"], &pass.args),
        Command::External(argv) => return external::dispatch_unknown(&argv),
    }
    .map(ExitCode::from)
}

/// Text from outside (a path, a task's error message, a server's reply) as it may reach a
/// terminal: control characters other than newlines and tabs are escaped (`\u{1b}`), so an
/// escape sequence in a file name or an error cannot rewrite the screen.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return std::borrow::Cow::Borrowed(text);
    }
    text.chars()
        .map(|c| match c {
            '\n' | '\t' => c.to_string(),
            c if c.is_control() => c.escape_unicode().to_string(),
            c => c.to_string(),
        })
        .collect::<String>()
        .into()
}

/// `--effort LEVEL`, parsed once by clap: a bad level is a usage error that lists the levels.
fn effort_parser() -> impl TypedValueParser<Value = Effort> {
    PossibleValuesParser::new(Effort::iter().map(Effort::as_str)).try_map(|s| s.parse::<Effort>())
}

/// The layered configuration of the daily CLI (REPL, daemon, thin client).
fn daily_config(
    model: &Option<geode_runtime::model::catalog::Route>,
    effort: Option<Effort>,
    sandbox: Option<&str>,
) -> anyhow::Result<geode_runtime::config::Config> {
    let mut flags = Vec::new();
    if let Some(mode) = sandbox {
        flags.push(("sandbox".to_string(), mode.to_string()));
    }
    if let Some(m) = model {
        flags.push(("model".to_string(), m.to_string()));
    }
    if let Some(e) = effort {
        flags.push(("effort".to_string(), e.as_str().to_string()));
    }
    let cwd = std::env::current_dir()?;
    let layers = geode_runtime::config::Layers::discover(flags, &cwd, &assembly::geode_home());
    let cfg = geode_runtime::config::Config::resolve(&layers)?;
    // `resolve` parsed every key (the route and the effort included): a bad one has failed
    // here, before any session, rather than as a line inside a session that then ends with 0.
    Ok(cfg)
}

/// `--continue`: `/resume` with the id of the most recently active session, found before the
/// new session this start makes would become the most recent one.
fn continue_command() -> anyhow::Result<String> {
    let root = assembly::checkpoint_root(None);
    // The most recent session of this folder with a turn in it: an empty start left behind
    // (a thin client, an earlier `-c`) is not what a person continues.
    let latest = sessions::recent(&root, 1, Some(&std::env::current_dir()?))
        .into_iter()
        .next()
        .with_context(|| {
            format!(
                "--continue: no session under {} for this folder",
                root.display()
            )
        })?;
    Ok(format!("/resume {}", latest.session_id))
}

/// `geode` alone: the thin client when asked or when a daemon answers, else the local REPL.
async fn interactive(
    connect: bool,
    local: bool,
    cfg: geode_runtime::config::Config,
    first: Option<String>,
) -> anyhow::Result<exit::Exit> {
    let socket = assembly::socket_path(&cfg);
    if connect || (!local && tokio::net::UnixStream::connect(&socket).await.is_ok()) {
        return connect::run(socket, first).await;
    }
    repl::run(cfg, first).await
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every subcommand and every argument of every subcommand, with a path like
    /// `geode crucible run --pack`, that has no help text.
    fn undocumented(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            let generated = matches!(
                arg.get_action(),
                clap::ArgAction::Help
                    | clap::ArgAction::HelpShort
                    | clap::ArgAction::HelpLong
                    | clap::ArgAction::Version
            );
            if arg.is_hide_set() || generated {
                continue;
            }
            let text = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            if text.trim().is_empty() {
                missing.push(format!(
                    "{path} {}",
                    arg.get_long().map_or(id.to_string(), |l| format!("--{l}"))
                ));
            }
        }
        for sub in cmd.get_subcommands() {
            if sub.is_hide_set() || sub.get_name() == "help" {
                continue;
            }
            let sub_path = format!("{path} {}", sub.get_name());
            if sub
                .get_about()
                .is_none_or(|a| a.to_string().trim().is_empty())
            {
                missing.push(sub_path.clone());
            }
            undocumented(sub, &sub_path, missing);
        }
    }

    #[test]
    fn every_subcommand_and_flag_has_help_text() {
        let mut missing = Vec::new();
        undocumented(&super::Cli::command(), "geode", &mut missing);
        assert!(missing.is_empty(), "no help text:\n{}", missing.join("\n"));
    }

    #[test]
    fn the_command_tree_is_consistent() {
        super::Cli::command().debug_assert();
    }

    #[test]
    fn control_characters_are_escaped_for_the_terminal() {
        assert_eq!(super::printable("a\tb\nc"), "a\tb\nc");
        assert_eq!(super::printable("x\u{1b}[2Jy\r"), "x\\u{1b}[2Jy\\u{d}");
    }
}
