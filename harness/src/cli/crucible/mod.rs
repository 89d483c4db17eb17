//! `geode crucible`: freeze a contract, run a paired campaign, decide, simulate power,
//! replicate, seal a holdout pack.
//!
//! Exit codes of `run`, `decide` and `replicate`: 0 KEEP, 1 REJECT, 2 INVALID (errors: 1 with a
//! message on stderr, before any verdict is printed).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use geode_crucible::{
    ArmSpec, Budgets, CONTRACT_SCHEMA, Clustering, Contract, DecisionRecord, DecisionRule,
    EvaluatorIdentity, Evidence, FrozenContract, LowerBoundMethod, PowerSpec, Stage, StagePacks,
    Vetoes, compare_decisions, decide, power,
};
use geode_harness::crucible_run::{
    Campaign, pack_hash, run_campaign, scaffold_hash, tests_grader_hash, write_atomic,
};
use geode_harness::pack::TaskPack;
use geode_harness::sealing;
use geode_runtime::scaffold::Scaffold;
use tokio_util::sync::CancellationToken;

use super::progress::Progress;

#[derive(Debug, Subcommand)]
pub enum CrucibleCommand {
    /// Write a frozen contract (canonical JSON) and print its hash.
    Freeze(FreezeArgs),
    /// Run a contract's paired campaign, then decide.
    Run(RunArgs),
    /// Decide a campaign folder again from its contract and evidence.
    Decide { campaign: PathBuf },
    /// Simulate campaigns through the decision rule: P(KEEP) and the minimum detectable effect.
    Power(PowerArgs),
    /// Re-run a decided campaign with a fresh run seed and say whether the verdict replicates.
    Replicate(ReplicateArgs),
    /// Encrypt a holdout pack at rest and publish its commitment.
    Seal(SealArgs),
    /// Check that commitments, openings ledgers, seal states and decision records agree; exit 1
    /// naming each removed, rewritten or reset record.
    Audit(AuditArgs),
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    #[arg(long, default_value = "datasets/commitments")]
    commitments: PathBuf,
    /// The folder of the seal states (`<name>.seal-state.json`).
    #[arg(long, default_value = "sealed")]
    sealed: PathBuf,
    /// Folders searched for decision.json records (repeatable; default jobs/crucible).
    #[arg(long = "decisions")]
    decisions: Vec<PathBuf>,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct FreezeArgs {
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
    #[arg(long)]
    baseline_scaffold: Option<PathBuf>,
    #[arg(long)]
    candidate_scaffold: Option<PathBuf>,
    /// Model route of both arms (or of the baseline with --candidate-model).
    #[arg(long)]
    model: String,
    #[arg(long)]
    candidate_model: Option<String>,
    #[arg(short = 'k', long, default_value_t = 5)]
    trials: u32,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[arg(long, default_value_t = 0.95)]
    confidence: f64,
    #[arg(long, default_value_t = 10_000)]
    resamples: u32,
    #[arg(long, default_value_t = 0.02)]
    materiality: f64,
    #[arg(long, default_value_t = 20)]
    min_tasks: u32,
    #[arg(long, default_value_t = 2)]
    min_families: u32,
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
    #[arg(long, default_value_t = 7200.0)]
    budget_wall: f64,
    #[arg(long, default_value_t = 1_000_000)]
    budget_calls: u64,
    #[arg(long, default_value_t = 1_000_000_000)]
    budget_tokens: u64,
    #[arg(long, default_value_t = 100.0)]
    budget_cost: f64,
    #[arg(long, default_value_t = 0.05)]
    safety_tolerance: f64,
    #[arg(long, default_value_t = 0.02)]
    infra_allowance: f64,
    /// Score this key of each trial's `reward.json` (a multi-reward task's `correctness`, say)
    /// instead of its headline reward; a trial without the key counts as infrastructure.
    #[arg(long, value_name = "KEY")]
    reward_key: Option<String>,
    #[arg(long)]
    out: PathBuf,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum StageArg {
    Train,
    Test,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    contract: PathBuf,
    /// The stage's pack (train stage).
    #[arg(long)]
    pack: Option<PathBuf>,
    /// The sealed test pack's state file (test stage), with --key.
    #[arg(long)]
    sealed: Option<PathBuf>,
    #[arg(long)]
    key: Option<PathBuf>,
    /// The folder of the sealed pack's public commitment, where its opening is recorded.
    #[arg(long, default_value = "datasets/commitments")]
    commitments: PathBuf,
    #[arg(long)]
    baseline_scaffold: Option<PathBuf>,
    #[arg(long)]
    candidate_scaffold: Option<PathBuf>,
    #[arg(short = 'n', long, default_value_t = 1)]
    concurrency: usize,
    #[arg(long, default_value = "jobs")]
    jobs_dir: PathBuf,
    #[arg(long, default_value_t = 1.0)]
    timeout_multiplier: f64,
}

#[derive(Debug, Args)]
pub struct PowerArgs {
    #[arg(long)]
    baseline_rate: f64,
    #[arg(long)]
    effect: f64,
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
    #[arg(long)]
    families: Option<u32>,
    #[arg(long, default_value_t = 1000)]
    simulations: u32,
    #[arg(long, default_value_t = 0)]
    seed: u64,
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
    #[arg(long)]
    pack: PathBuf,
    #[arg(long)]
    baseline_scaffold: Option<PathBuf>,
    #[arg(long)]
    candidate_scaffold: Option<PathBuf>,
    #[arg(short = 'n', long, default_value_t = 1)]
    concurrency: usize,
}

#[derive(Debug, Args)]
pub struct SealArgs {
    pack: PathBuf,
    /// Key file (64 hex characters), kept outside the repository.
    #[arg(long)]
    key: PathBuf,
    /// Create the key file (mode 0600) instead of reading it.
    #[arg(long)]
    new_key: bool,
    #[arg(long)]
    name: String,
    /// Trials per task the pack will be run with (part of its pack hash).
    #[arg(short = 'k', long, default_value_t = 5)]
    trials: u32,
    #[arg(long, default_value = "sealed")]
    out: PathBuf,
    #[arg(long, default_value = "datasets/commitments")]
    commitments: PathBuf,
}

fn load_scaffold(path: &Option<PathBuf>) -> anyhow::Result<Scaffold> {
    match path {
        None => Ok(Scaffold::default()),
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            toml::from_str(&text).with_context(|| format!("scaffold {}", p.display()))
        }
    }
}

fn evaluator() -> EvaluatorIdentity {
    geode_harness::crucible_ops::evaluator()
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
        if let Some(v) = stats.get(key) {
            println!("{key} {v}");
        }
    }
    if let Some(p) = stats.get("permutation").and_then(|p| p.get("p_value")) {
        println!("sign_flip_p_value {p}");
    }
    if let Some(safety) = &record.safety {
        let v = serde_json::to_value(safety).unwrap_or_default();
        println!(
            "safety: flagged baseline {} candidate {}, upper bound of the excess {} (tolerance {})",
            v["baseline"]["flagged"], v["candidate"]["flagged"], v["upper_bound"], v["tolerance"]
        );
    }
}

fn exit(record: &DecisionRecord) -> ExitCode {
    ExitCode::from(u8::try_from(record.exit_code()).unwrap_or(1))
}

pub async fn run(cmd: CrucibleCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        CrucibleCommand::Freeze(a) => freeze(a),
        CrucibleCommand::Run(a) => run_contract(a).await,
        CrucibleCommand::Decide { campaign } => {
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
        CrucibleCommand::Power(a) => {
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
            if let Some(f) = a.families {
                spec.families = f;
            }
            let report = power(&spec)?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                println!(
                    "P(KEEP) {:.3} (95% Wilson {:.3}..{:.3}) over {} simulated campaigns",
                    report.p_keep,
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
                for obstacle in &report.obstacles {
                    println!("P(KEEP) is 0 by rule: {obstacle}");
                }
                match report.minimum_detectable_effect {
                    Some(m) => println!("minimum detectable effect at 80% power: {m:.4}"),
                    None if !report.obstacles.is_empty() => {
                        println!(
                            "minimum detectable effect: none (no campaign of this design can KEEP)"
                        )
                    }
                    None => println!("minimum detectable effect: n/a"),
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        CrucibleCommand::Replicate(a) => replicate(a).await,
        CrucibleCommand::Seal(a) => {
            let key = if a.new_key {
                sealing::new_key(&a.key)?
            } else {
                sealing::read_key(&a.key)?
            };
            let files =
                sealing::seal_pack(&a.pack, &a.name, a.trials, &key, &a.out, &a.commitments)?;
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
            Ok(ExitCode::SUCCESS)
        }
        CrucibleCommand::Audit(a) => {
            let decisions = if a.decisions.is_empty() {
                vec![PathBuf::from("jobs/crucible")]
            } else {
                a.decisions
            };
            let decisions: Vec<PathBuf> = decisions.into_iter().filter(|d| d.is_dir()).collect();
            let report = geode_harness::openings::audit(&a.commitments, &a.sealed, &decisions)?;
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
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}

fn freeze(a: FreezeArgs) -> anyhow::Result<ExitCode> {
    let train = TaskPack::load(&a.train)?;
    let test = match (&a.test_sealed, &a.test) {
        (Some(p), _) => sealing::load_state(p)?.pack_hash.clone(),
        (None, Some(p)) => pack_hash(&TaskPack::load(p)?, a.trials)?,
        (None, None) => bail!("name the test pack: --test-sealed STATE or --test PACK"),
    };
    let Some(lower_bound) = LowerBoundMethod::parse(&a.lower_bound) else {
        bail!(
            "--lower-bound {:?}: use t_and_bca, t, bca or percentile",
            a.lower_bound
        );
    };
    let cluster = match a.cluster.as_str() {
        "task" => Clustering::Task,
        "family" => Clustering::Family,
        other => bail!("--cluster {other:?}: use task or family"),
    };
    let contract = Contract {
        schema: CONTRACT_SCHEMA.into(),
        stage: match a.stage {
            StageArg::Train => Stage::Train,
            StageArg::Test => Stage::Test,
        },
        baseline: ArmSpec {
            scaffold_hash: scaffold_hash(&load_scaffold(&a.baseline_scaffold)?)?,
            model_route: a.model.clone(),
        },
        candidate: ArmSpec {
            scaffold_hash: scaffold_hash(&load_scaffold(&a.candidate_scaffold)?)?,
            model_route: a.candidate_model.clone().unwrap_or(a.model.clone()),
        },
        packs: StagePacks {
            train: pack_hash(&train, a.trials)?,
            test,
        },
        trials_per_task: a.trials,
        run_seed: a.seed,
        grader_config_hash: tests_grader_hash(a.reward_key.as_deref()),
        evaluator: evaluator(),
        decision_rule: DecisionRule {
            confidence: a.confidence,
            bootstrap_resamples: a.resamples,
            permutation_resamples: a.resamples,
            materiality: a.materiality,
            min_tasks: a.min_tasks,
            min_families: a.min_families,
            candidate_floor: a.candidate_floor,
            lower_bound,
            cluster,
        },
        budgets: Budgets {
            wall_seconds: a.budget_wall,
            model_calls: a.budget_calls,
            tokens: a.budget_tokens,
            cost_usd: a.budget_cost,
        },
        vetoes: Vetoes {
            safety_tolerance: a.safety_tolerance,
            infra_allowance: a.infra_allowance,
        },
        reward_key: a.reward_key.clone(),
    };
    let frozen = contract.freeze()?;
    warn_if_infeasible(&frozen, &a, &train)?;
    write_atomic(&a.out, frozen.canonical_json())?;
    println!("{}  {}", frozen.hash(), a.out.display());
    Ok(ExitCode::SUCCESS)
}

/// Warns on stderr about every rule the contract's campaign cannot pass on its stage's pack
/// (it is frozen anyway: the user may mean to grow the pack before running).
fn warn_if_infeasible(
    frozen: &FrozenContract,
    a: &FreezeArgs,
    train: &TaskPack,
) -> anyhow::Result<()> {
    let c = frozen.contract();
    let loaded;
    let pack = match (c.stage, &a.test) {
        (Stage::Train, _) => train,
        (Stage::Test, Some(p)) if a.test_sealed.is_none() => {
            loaded = TaskPack::load(p)?;
            &loaded
        }
        (Stage::Test, _) => {
            eprintln!(
                "note: the sealed test pack's size is hidden; check the design with \
                 `geode crucible power --contract {} --tasks N`",
                a.out.display()
            );
            return Ok(());
        }
    };
    let families: std::collections::BTreeSet<&str> =
        pack.tasks.iter().map(|t| t.config.category()).collect();
    let design = geode_crucible::Design {
        tasks: pack.tasks.len() as u32,
        trials: c.trials_per_task,
        families: families.len() as u32,
    };
    for obstacle in geode_crucible::obstacles(&c.decision_rule, &c.vetoes, design) {
        eprintln!("warning: this campaign cannot KEEP: {obstacle}");
    }
    Ok(())
}

async fn run_contract(a: RunArgs) -> anyhow::Result<ExitCode> {
    let contract = load_contract(&a.contract)?;
    let campaign_dir = a
        .jobs_dir
        .join("crucible")
        .join(&contract.hash().to_string()[..16]);
    if campaign_dir.join("decision.json").exists() {
        bail!(
            "{} already holds a decision for this contract: the first result stands",
            campaign_dir.display()
        );
    }
    std::fs::create_dir_all(&campaign_dir)?;
    write_atomic(
        &campaign_dir.join("contract.json"),
        contract.canonical_json(),
    )?;
    let baseline = Arc::new(load_scaffold(&a.baseline_scaffold)?);
    let candidate = Arc::new(load_scaffold(&a.candidate_scaffold)?);
    let cancel = CancellationToken::new();
    let on_signal = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_signal.cancel();
        }
    });
    match contract.contract().stage {
        Stage::Train => {
            let Some(pack) = &a.pack else {
                bail!("a train-stage contract needs --pack")
            };
            let pack = TaskPack::load(pack)?;
            let record = campaign(
                &contract,
                &pack,
                baseline,
                candidate,
                &campaign_dir,
                &a,
                None,
                cancel,
            )
            .await?;
            Ok(exit(&record))
        }
        Stage::Test => {
            let (Some(state_path), Some(key_path)) = (&a.sealed, &a.key) else {
                bail!(
                    "a test-stage contract runs on a sealed pack: pass --sealed STATE and --key FILE"
                );
            };
            // The opening is burned on disk before the first trial (crucible_ops).
            let opened = geode_harness::crucible_ops::open_sealed(
                &contract,
                state_path,
                key_path,
                &a.commitments,
                &a.jobs_dir,
            )?;
            let result = campaign(
                &contract,
                &opened.pack,
                baseline,
                candidate,
                &campaign_dir,
                &a,
                Some(&opened),
                cancel,
            )
            .await;
            let record = match result {
                Ok(r) => r,
                Err(e) => {
                    opened.close(None)?;
                    return Err(e);
                }
            };
            opened.close(Some(&record))?;
            Ok(exit(&record))
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn campaign(
    contract: &FrozenContract,
    pack: &TaskPack,
    baseline: Arc<Scaffold>,
    candidate: Arc<Scaffold>,
    dir: &Path,
    a: &RunArgs,
    opened: Option<&geode_harness::crucible_ops::OpenedPack>,
    cancel: CancellationToken,
) -> anyhow::Result<DecisionRecord> {
    let backend = super::backends::make("sandbox", false, &a.jobs_dir)?;
    let c = Campaign {
        contract,
        pack,
        baseline,
        candidate,
        dir: dir.to_path_buf(),
        concurrency: a.concurrency,
        timeout_multiplier: a.timeout_multiplier,
        replication: None,
        attestation: opened.map(|o| o.attestation.clone()),
        sealed_paths: opened.map(|o| o.sealed_paths()).unwrap_or_default(),
    };
    let evidence = run_campaign(&c, backend, Arc::new(Progress::new()), cancel).await?;
    write_atomic(
        &dir.join("evidence.json"),
        &serde_json::to_string_pretty(&evidence)?,
    )?;
    let mut record = decide(contract, &evidence);
    record.ledger_entry = opened.map(|o| o.ledger_entry().to_string());
    write_atomic(&dir.join("decision.json"), &record.to_json()?)?;
    print_record(&record);
    Ok(record)
}

async fn replicate(a: ReplicateArgs) -> anyhow::Result<ExitCode> {
    let contract = load_contract(&a.campaign.join("contract.json"))?;
    let p = a.campaign.join("decision.json");
    let original = DecisionRecord::from_json(
        &std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?,
    )
    .with_context(|| format!("decision {}", p.display()))?;
    let jobs_dir = a
        .campaign
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("jobs"));
    let log = a.campaign.join(REPLICATIONS_LOG);
    let recorded = read_replications(&log)?;
    let index = match a.index {
        Some(0) => bail!("--index 0: replications count from 1 (0 is the original run)"),
        Some(k) if recorded.iter().any(|r| r.index == k) => bail!(
            "replication {k} of {} is already recorded in {}: every replication counts, none is \
             run again",
            a.campaign.display(),
            log.display()
        ),
        Some(k) => k,
        None => recorded.iter().map(|r| r.index).max().unwrap_or(0) + 1,
    };
    let dir = a.campaign.join(format!("replication-{index}"));
    std::fs::create_dir_all(&dir)?;
    // Recorded before the first trial: a replication that never finishes still counts.
    append_replication(
        &log,
        &ReplicationEntry {
            index,
            at: chrono::Utc::now().to_rfc3339(),
            report: None,
        },
    )?;
    let pack = TaskPack::load(&a.pack)?;
    let backend = super::backends::make("sandbox", false, &jobs_dir)?;
    let c = Campaign {
        contract: &contract,
        pack: &pack,
        baseline: Arc::new(load_scaffold(&a.baseline_scaffold)?),
        candidate: Arc::new(load_scaffold(&a.candidate_scaffold)?),
        dir: dir.clone(),
        concurrency: a.concurrency,
        timeout_multiplier: 1.0,
        replication: Some(index),
        attestation: None,
        sealed_paths: Vec::new(),
    };
    let evidence = run_campaign(
        &c,
        backend,
        Arc::new(Progress::new()),
        CancellationToken::new(),
    )
    .await?;
    write_atomic(
        &dir.join("evidence.json"),
        &serde_json::to_string_pretty(&evidence)?,
    )?;
    let replica = decide(&contract, &evidence);
    write_atomic(&dir.join("decision.json"), &replica.to_json()?)?;
    let report = compare_decisions(&original, &replica)?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    let agreed = report.verdict_replicated;
    append_replication(
        &log,
        &ReplicationEntry {
            index,
            at: chrono::Utc::now().to_rfc3339(),
            report: Some(report),
        },
    )?;
    let all = read_replications(&log)?;
    let finished: Vec<_> = all.iter().filter_map(|r| r.report.as_ref()).collect();
    let agreeing = finished.iter().filter(|r| r.verdict_replicated).count();
    let started = all
        .iter()
        .map(|r| r.index)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    eprintln!(
        "replication {index}: the verdict {}; of {started} replications started, {} finished \
         and {agreeing} agree with the original {}",
        if agreed {
            "replicated"
        } else {
            "did NOT replicate"
        },
        finished.len(),
        original.verdict
    );
    // The exit code says whether this replication agrees, not what it decided: a replica that
    // KEEPs where the original REJECTed is a failure to replicate.
    Ok(if agreed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Every replication of a campaign, one JSON line when it starts and one when it is compared.
const REPLICATIONS_LOG: &str = "replications.jsonl";

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ReplicationEntry {
    index: u32,
    at: String,
    /// `None` on the line written when the replication starts.
    report: Option<geode_crucible::ReplicationReport>,
}

fn read_replications(path: &Path) -> anyhow::Result<Vec<ReplicationEntry>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).with_context(|| format!("{} line {}", path.display(), i + 1))
        })
        .collect()
}

fn append_replication(path: &Path, entry: &ReplicationEntry) -> anyhow::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    writeln!(f, "{}", serde_json::to_string(entry)?)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", path.display()))
}
