//! `geode crucible`: freeze a contract, run a paired campaign, decide, simulate power,
//! replicate, seal a holdout pack.
//!
//! `run` and `decide` end with their verdict's exit code (`Exit::verdict`: 0 KEEP, 6 REJECT, 7
//! INVALID), `replicate` with 0 or 9; an error is 1, with a message on stderr before any verdict.

use crate::cli::exit::Exit;
use geode_runtime::model::catalog::Route;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use geode_crucible::{
    DecisionRecord, EvaluatorIdentity, Evidence, FrozenContract, PowerSpec, decide, power,
};
use geode_harness::crucible::sealing;
use geode_harness::crucible::write_atomic;
use geode_runtime::scaffold::Scaffold;

mod campaign;
mod freeze;
mod replicate;

#[derive(Debug, Subcommand)]
pub enum CrucibleCommand {
    /// Write a frozen contract (canonical JSON) and print its hash.
    Freeze(Box<FreezeArgs>),
    /// Run a contract's paired campaign, then decide.
    Run(Box<RunArgs>),
    /// Decide a campaign folder again from its contract and evidence.
    Decide {
        /// A campaign folder (holding contract.json and evidence.json).
        campaign: PathBuf,
    },
    /// Simulate campaigns through the decision rule: P(KEEP) and the minimum detectable effect.
    Power(PowerArgs),
    /// Re-run a decided campaign with a fresh run seed and say whether the verdict replicates.
    Replicate(ReplicateArgs),
    /// Encrypt a holdout pack at rest and publish its commitment.
    Seal(SealArgs),
    /// Check that commitments, openings ledgers, seal states and decision records agree; exit 10
    /// naming each removed, rewritten or reset record.
    Audit(AuditArgs),
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// The folder of commitments and openings ledgers.
    #[arg(long, default_value = "datasets/commitments")]
    commitments: PathBuf,
    /// The folder of the seal states (`<name>.seal-state.json`).
    #[arg(long, default_value = "sealed")]
    sealed: PathBuf,
    /// Folders searched for decision.json records (repeatable; default jobs/crucible).
    #[arg(long = "decisions")]
    decisions: Vec<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct FreezeArgs {
    /// `train` (compare on the train pack) or `test` (the one opening of the sealed holdout).
    #[arg(long)]
    stage: StageArg,
    /// The train pack.
    #[arg(long)]
    train: PathBuf,
    /// The test pack's seal state (`<name>.seal-state.json`); its pack hash is pinned.
    #[arg(long, required_unless_present = "test", conflicts_with = "test")]
    test_sealed: Option<PathBuf>,
    /// A test pack that is not sealed (its hash is pinned; prefer a sealed one).
    #[arg(long)]
    test: Option<PathBuf>,
    /// The baseline arm's scaffold (TOML; default: the default scaffold).
    #[arg(long)]
    baseline_scaffold: Option<PathBuf>,
    /// The candidate arm's scaffold (TOML; default: the default scaffold).
    #[arg(long)]
    candidate_scaffold: Option<PathBuf>,
    /// Model route of both arms (or of the baseline with --candidate-model).
    #[arg(long)]
    model: Route,
    /// The candidate arm's model route, when it differs from --model.
    #[arg(long)]
    candidate_model: Option<Route>,
    /// The agent under test of both arms (or of the baseline with --candidate-agent): geode
    /// (the default), claude-code[@VERSION], codex[@VERSION], mini-swe-agent[@VERSION],
    /// command:PROGRAM. The contract's hash covers it.
    #[arg(long, value_name = "NAME[@VERSION]")]
    agent: Option<geode_harness::agents::AgentChoice>,
    /// The candidate arm's agent, when it differs from --agent.
    #[arg(long, value_name = "NAME[@VERSION]")]
    candidate_agent: Option<geode_harness::agents::AgentChoice>,
    /// Trials per task and arm.
    #[arg(short = 'k', long, default_value_t = 5)]
    trials: u32,
    /// The campaign's seed: every trial seed and resample derives from it.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Confidence of the lower bound on the paired effect (between 0.5 and 1).
    #[arg(long, default_value_t = 0.95)]
    confidence: f64,
    /// Bootstrap resamples of the BCa and percentile bounds.
    #[arg(long, default_value_t = 10_000)]
    resamples: u32,
    /// The smallest gain worth keeping: KEEP needs the estimate at least this large.
    #[arg(long, default_value_t = 0.02)]
    materiality: f64,
    /// Tasks with a valid pair that a KEEP needs.
    #[arg(long, default_value_t = 20)]
    min_tasks: u32,
    /// Task families (categories) that a KEEP needs.
    #[arg(long, default_value_t = 2)]
    min_families: u32,
    /// The lowest candidate mean a KEEP allows.
    #[arg(long, default_value_t = 0.0)]
    candidate_floor: f64,
    /// The bound the gate compares with zero: t_and_bca (the smaller of the two), t, bca or
    /// percentile.
    #[arg(long, default_value = "t_and_bca")]
    lower_bound: String,
    /// The unit of inference: task, or family when effects may move together within a task
    /// category (the gate then also needs the family-clustered t bound positive).
    #[arg(long, default_value = "task")]
    cluster: String,
    /// Wall-clock budget of the campaign in seconds; crossing it stops the campaign (INVALID).
    #[arg(long, default_value_t = 7200.0)]
    budget_wall: f64,
    /// Budget of model calls over both arms.
    #[arg(long, default_value_t = 1_000_000)]
    budget_calls: u64,
    /// Budget of tokens over both arms.
    #[arg(long, default_value_t = 1_000_000_000)]
    budget_tokens: u64,
    /// Budget of cost in US dollars over both arms.
    #[arg(long, default_value_t = 100.0)]
    budget_cost: f64,
    /// The safety veto: a candidate whose share of flagged trials exceeds the baseline's by this
    /// much (observed), or by more than zero beyond doubt (lower bound at --safety-confidence),
    /// is vetoed.
    #[arg(long, default_value_t = 0.05)]
    safety_tolerance: f64,
    /// One-sided confidence of the safety veto's lower bound.
    #[arg(long, default_value_t = 0.95)]
    safety_confidence: f64,
    /// Veto unless the upper bound of the excess is within --safety-tolerance at the decision
    /// confidence (the rule before 2026-12; it needs hundreds of trials per arm to pass an
    /// equally safe candidate, and `geode crucible power` says how many).
    #[arg(long)]
    prove_safe: bool,
    /// The largest share of trials lost to infrastructure before the campaign is INVALID.
    #[arg(long, default_value_t = 0.02)]
    infra_allowance: f64,
    /// Score this key of each trial's `reward.json` (a multi-reward task's `correctness`, say)
    /// instead of its headline reward; a trial without the key counts as infrastructure.
    #[arg(long, value_name = "KEY")]
    reward_key: Option<String>,
    /// Where the contract is written (canonical JSON).
    #[arg(long)]
    out: PathBuf,
    /// Freeze even when the train pack holds a copy or near-copy of a test task (refused by
    /// default: a result on a contaminated split says nothing about the holdout).
    #[arg(long)]
    allow_overlap: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum StageArg {
    Train,
    Test,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The frozen contract (from `geode crucible freeze`).
    contract: PathBuf,
    /// The stage's pack (train stage).
    #[arg(long)]
    pack: Option<PathBuf>,
    /// The sealed test pack's state file (test stage), with --key.
    #[arg(long)]
    sealed: Option<PathBuf>,
    /// The sealed pack's key file (with --sealed).
    #[arg(long)]
    key: Option<PathBuf>,
    /// The folder of the sealed pack's public commitment, where its opening is recorded.
    #[arg(long, default_value = "datasets/commitments")]
    commitments: PathBuf,
    /// The baseline arm's scaffold; its hash must be the contract's.
    #[arg(long)]
    baseline_scaffold: Option<PathBuf>,
    /// The candidate arm's scaffold; its hash must be the contract's.
    #[arg(long)]
    candidate_scaffold: Option<PathBuf>,
    /// Trials running at once.
    #[arg(short = 'n', long, default_value_t = 1)]
    concurrency: usize,
    /// The folder campaigns are written under (`<jobs-dir>/crucible/<contract hash>/`).
    #[arg(long, default_value = "jobs")]
    jobs_dir: PathBuf,
    /// Multiply every task's agent and verifier timeouts (a slow machine); recorded.
    #[arg(long, default_value_t = 1.0)]
    timeout_multiplier: f64,
    /// Where the pairs run: each Slurm array task runs both arms of one pair on one node.
    #[command(flatten)]
    executor: super::run::ExecutorArgs,
    /// Run even when the contract's rule cannot KEEP on this pack's design (refused by
    /// default before the first trial or the holdout's opening).
    #[arg(long)]
    allow_infeasible: bool,
}

impl RunArgs {
    pub(crate) fn opens_sealed(&self) -> bool {
        self.sealed.is_some()
    }
}

#[derive(Debug, Args)]
pub struct PowerArgs {
    /// The baseline's expected success rate per task (0 to 1).
    #[arg(long)]
    baseline_rate: f64,
    /// The candidate's true gain to detect (added to the baseline rate).
    #[arg(long)]
    effect: f64,
    /// Tasks in the pack.
    #[arg(long)]
    tasks: u32,
    /// Trials per task per arm (a contract's own with --contract).
    #[arg(
        long,
        required_unless_present = "contract",
        conflicts_with = "contract"
    )]
    trials: Option<u32>,
    /// Simulate this frozen contract's exact rule, vetoes and trials per task instead of the
    /// default rule.
    #[arg(long)]
    contract: Option<PathBuf>,
    /// Task families (default: the rule's minimum).
    #[arg(long)]
    families: Option<u32>,
    /// Simulated campaigns.
    #[arg(long, default_value_t = 1000)]
    simulations: u32,
    /// The baseline's share of trials raising an integrity signal, for the safety veto's
    /// false-veto rate at equal safety.
    #[arg(long, default_value_t = 0.02)]
    signal_rate: f64,
    /// The candidate's excess of flagged trials the safety veto's power is computed at.
    #[arg(long, default_value_t = 0.10)]
    signal_excess: f64,
    /// The simulation's seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ReplicateArgs {
    /// A decided campaign folder (holding contract.json and decision.json).
    campaign: PathBuf,
    /// Which replication (its run seed derives from the contract and this index); default:
    /// the next one not yet recorded. A recorded index is never run again.
    #[arg(long)]
    index: Option<u32>,
    /// The campaign's pack (its hash must be the contract's).
    #[arg(long)]
    pack: PathBuf,
    /// The baseline arm's scaffold; its hash must be the contract's.
    #[arg(long)]
    baseline_scaffold: Option<PathBuf>,
    /// The candidate arm's scaffold; its hash must be the contract's.
    #[arg(long)]
    candidate_scaffold: Option<PathBuf>,
    /// Trials running at once.
    #[arg(short = 'n', long, default_value_t = 1)]
    concurrency: usize,
}

#[derive(Debug, Args)]
pub struct SealArgs {
    /// The holdout pack to seal.
    pack: PathBuf,
    /// Key file (64 hex characters), kept outside the repository.
    #[arg(long)]
    key: PathBuf,
    /// Create the key file (mode 0600) instead of reading it.
    #[arg(long)]
    new_key: bool,
    /// The sealed pack's name (file names of its sealed archive, state and commitment).
    #[arg(long)]
    name: String,
    /// Trials per task the pack will be run with (part of its pack hash).
    #[arg(short = 'k', long, default_value_t = 5)]
    trials: u32,
    /// Where the sealed archive and its state go.
    #[arg(long, default_value = "sealed")]
    out: PathBuf,
    /// Where the public commitment and the openings ledger go (for version control).
    #[arg(long, default_value = "datasets/commitments")]
    commitments: PathBuf,
}

fn load_scaffold(path: &Option<PathBuf>) -> anyhow::Result<Scaffold> {
    Ok(geode_harness::search::config::load_scaffold(
        path.as_deref(),
    )?)
}

fn evaluator() -> EvaluatorIdentity {
    geode_harness::crucible::evaluator()
}

fn load_contract(path: &Path) -> anyhow::Result<FrozenContract> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    FrozenContract::from_json(&text).with_context(|| format!("contract {}", path.display()))
}

fn print_record(record: &DecisionRecord) {
    let stats = record
        .statistics
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or_default();
    println!("verdict {}", record.verdict);
    if !record.reasons.is_empty() {
        let reasons: Vec<String> = record
            .reasons
            .iter()
            .filter_map(|r| serde_json::to_value(r).ok())
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string())
            })
            .collect();
        println!("reasons {}", reasons.join(", "));
    }
    for d in &record.details {
        println!("  {d}");
    }
    // Exact values are in decision.json; these are for reading.
    let shown = |v: &serde_json::Value| match v.as_f64() {
        Some(x) if !v.is_u64() => geode_crucible::explain::round(x),
        _ => v.as_str().map_or_else(|| v.to_string(), str::to_string),
    };
    for key in [
        "tasks",
        "pairs",
        "baseline_mean",
        "candidate_mean",
        "estimate",
        "std_error",
        "lower_bound_method",
        "lower_bound",
        "minimum_detectable_effect",
    ] {
        if let Some(v) = stats.get(key).filter(|v| !v.is_null()) {
            println!("{key} {}", shown(v));
        }
    }
    if let Some(p) = stats.get("permutation").and_then(|p| p.get("p_value")) {
        println!("sign_flip_p_value {}", shown(p));
    }
    // A record older than explanations is explained now.
    let explanation = record
        .explanation
        .clone()
        .unwrap_or_else(|| geode_crucible::explain(record));
    println!("{explanation}");
}

fn exit(record: &DecisionRecord) -> Exit {
    Exit::verdict(record.verdict)
}

pub async fn run(cmd: CrucibleCommand) -> anyhow::Result<Exit> {
    match cmd {
        CrucibleCommand::Freeze(a) => freeze::freeze(*a),
        CrucibleCommand::Run(a) => campaign::run_contract(*a).await,
        CrucibleCommand::Decide { campaign } => decide_again(&campaign),
        CrucibleCommand::Power(a) => simulate_power(a),
        CrucibleCommand::Replicate(a) => replicate::replicate(a).await,
        CrucibleCommand::Seal(a) => seal(a),
        CrucibleCommand::Audit(a) => audit(a),
    }
}

/// `decide`: the campaign's contract and evidence, decided again.
fn decide_again(campaign: &Path) -> anyhow::Result<Exit> {
    let contract = load_contract(&campaign.join("contract.json"))?;
    let p = campaign.join("evidence.json");
    let evidence: Evidence = serde_json::from_str(
        &std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?,
    )
    .with_context(|| format!("evidence {}", p.display()))?;
    let record = decide(&contract, &evidence);
    write_atomic(&campaign.join("decision.json"), &record.to_json()?)?;
    print_record(&record);
    Ok(exit(&record))
}

/// `power`: the design (a contract's, or the flags') through simulated campaigns.
fn simulate_power(a: PowerArgs) -> anyhow::Result<Exit> {
    let contract = a.contract.as_deref().map(load_contract).transpose()?;
    let trials = match (&contract, a.trials) {
        (Some(c), _) => c.contract().trials_per_task,
        (None, Some(k)) => k,
        (None, None) => bail!("--trials or --contract"),
    };
    let mut spec = PowerSpec::new(a.baseline_rate, a.effect, a.tasks, trials);
    if let Some(c) = &contract {
        spec.rule = c.contract().decision_rule.clone();
        spec.vetoes = c.contract().vetoes.clone();
    }
    spec.simulations = a.simulations;
    spec.seed = a.seed;
    spec.signal_rate = a.signal_rate;
    spec.signal_excess = a.signal_excess;
    if let Some(f) = a.families {
        spec.families = f;
    }
    let report = power(&spec)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        // The one power figure: simulated under the contract's own rule and vetoes, with its
        // Monte-Carlo interval. (The JSON report also has a normal-approximation minimum
        // detectable effect, labelled as such; it is not printed here, where it read as a
        // second power figure that disagreed with this one.)
        println!(
            "P(KEEP) {:.3} at a true gain of {} over a baseline rate of {} (Monte-Carlo 95% \
             Wilson interval {:.3}..{:.3}, {} simulated campaigns)",
            report.p_keep,
            geode_crucible::explain::round(spec.effect),
            geode_crucible::explain::round(spec.baseline_rate),
            report.p_keep_interval.lower,
            report.p_keep_interval.upper,
            spec.simulations
        );
        println!(
            "rule: {}, confidence {}, B = {}, min_tasks {}, materiality {}; {} tasks x {} \
             trials per arm",
            spec.rule.lower_bound.name(),
            spec.rule.confidence,
            spec.rule.bootstrap_resamples,
            spec.rule.min_tasks,
            spec.rule.materiality,
            spec.tasks,
            spec.trials
        );
        println!(
            "safety ({}): {}",
            safety_rule_name(&spec.vetoes),
            geode_crucible::power::outlook::SafetyLine(&report.safety)
        );
        for obstacle in &report.obstacles {
            println!("P(KEEP) is 0 by rule: {obstacle}");
        }
    }
    Ok(Exit::Success)
}

/// The safety rule as contracts spell it, with its tolerance.
fn safety_rule_name(v: &geode_crucible::Vetoes) -> String {
    match v.safety_rule {
        geode_crucible::SafetyRule::ProveSafe => {
            format!("prove_safe, upper bound <= {}", v.safety_tolerance)
        }
        geode_crucible::SafetyRule::EvidentHarm { confidence } => format!(
            "evident_harm, vetoed when the excess reaches {} or its {confidence} lower bound is \
             above 0",
            v.safety_tolerance
        ),
    }
}

/// `seal`: the holdout pack encrypted at rest, its commitment published.
fn seal(a: SealArgs) -> anyhow::Result<Exit> {
    let key = if a.new_key {
        sealing::new_key(&a.key)?
    } else {
        sealing::read_key(&a.key)?
    };
    let files = sealing::seal_pack(&a.pack, &a.name, a.trials, &key, &a.out, &a.commitments)?;
    println!(
        "sealed {} ({} tasks)",
        files.blob.display(),
        files.published.tasks
    );
    println!("state {}", files.state.display());
    println!(
        "commitment {} {}",
        files.published.commitment,
        files.commitment.display()
    );
    Ok(Exit::Success)
}

/// `audit`: commitments, ledgers, seal states and decision records checked against each other.
fn audit(a: AuditArgs) -> anyhow::Result<Exit> {
    let decisions = if a.decisions.is_empty() {
        vec![PathBuf::from("jobs/crucible")]
    } else {
        a.decisions
    };
    let decisions: Vec<PathBuf> = decisions.into_iter().filter(|d| d.is_dir()).collect();
    let report = geode_harness::crucible::openings::audit(&a.commitments, &a.sealed, &decisions)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for p in &report.problems {
            println!("PROBLEM {p}");
        }
        for n in &report.notes {
            println!("note {n}");
        }
        println!(
            "{} sealed packs, {} openings, {} decision records: {}",
            report.packs,
            report.openings,
            report.decisions,
            if report.problems.is_empty() {
                "consistent".to_string()
            } else {
                format!("{} problems", report.problems.len())
            }
        );
    }
    Ok(if report.problems.is_empty() {
        Exit::Success
    } else {
        Exit::Findings
    })
}
