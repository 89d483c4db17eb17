//! One trial: environment -> agent -> verifier -> teardown, each phase timed and bounded.
//!
//! The agent is always the GEODE runtime (HEADLESS, tools auto-approved inside the sandbox)
//! with its tools bound to the sandbox's workspace. An agent timeout is recorded and the
//! verifier still runs. The agent's background services keep running through verification
//! (as in Harbor), but the verifier runs in a view of its own (`Sandbox::run_verifier`): the
//! tests arrive only then, and its `/logs/verifier` is one the agent's processes never saw.
//! With `environment_mode = "separate"` the verifier runs in a fresh sandbox instead, which
//! receives only the task's declared artifacts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use geode_crucible::IntegritySignals;
use geode_graders::{GradeInput, TestScriptGrader, TrialOutcome, Validity, write_grade};
use geode_runtime::agent::TerminationReason;
use geode_runtime::model::Model;
use geode_runtime::model::embedded::OracleModel;
use geode_runtime::model::flaky::FlakyOracle;
use geode_runtime::policy::{SafetyLevel, SessionMode, SessionPolicy};
use geode_runtime::scaffold::Scaffold;
use geode_runtime::session::{SessionConfig, create_session};
use geode_runtime::store::timeline::{CallOutcome, SessionTimeline, TimelineEvent, TimelineRow};
use geode_runtime::tools::plan::ToolSchemaShape;
use geode_runtime::tools::workspace::ExecRequest;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::images::ImageCache;
use super::services::{self, GroupStart};
use crate::atif;
use crate::env::compose::MAIN_SERVICE;
use crate::env::{Backend, EnvError, EnvironmentSpec, NetworkPolicy, Sandbox, TESTS_DIR};
use crate::pack::{
    EnvironmentSection, Healthcheck, Step, StepRewards, Task, TaskHash, VerifierMode,
};
use crate::store::{TrialRow, TrialUsage};

/// Where the oracle finds the reference solution inside the sandbox.
pub const SOLUTION_DIR: &str = "/solution";
/// Bytes of verifier output kept in `verifier/test-stdout.txt`.
const VERIFIER_OUTPUT_CAP: usize = 256 * 1024;

/// Everything one trial needs.
#[derive(Debug, Clone)]
pub struct TrialPlan {
    pub run_id: String,
    pub trial_name: String,
    pub task: Arc<Task>,
    pub attempt: u32,
    pub seed: u64,
    /// Seed of an embedded simulation model (`flaky-oracle`): the trial seed in a plain run,
    /// the arm's own in a paired campaign (see `TrialSeed::arm_model_seed`).
    pub model_seed: u64,
    pub model_route: String,
    pub scaffold: Arc<Scaffold>,
    pub trial_dir: PathBuf,
    pub timeout_multiplier: f64,
    /// Host paths of sealed data (a crucible's opened holdout): a tool call naming one is a
    /// `sealed_data_access` signal.
    pub sealed_paths: Vec<String>,
    /// Copy the final workspace out to `<trial_dir>/workspace/` after the verifier.
    pub keep_workspace: bool,
}

/// Observer of a trial's phases (progress bars, log lines).
pub trait PhaseObserver: Send + Sync {
    fn phase(&self, trial: &str, phase: &str);
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// What the trial ended with, before it becomes a store row.
struct Ending {
    outcome: TrialOutcome,
    reward: Option<f64>,
    rewards: BTreeMap<String, f64>,
    exception: Option<(String, String)>,
}

impl Ending {
    fn infra(outcome: TrialOutcome, class: &str, message: impl Into<String>) -> Self {
        Ending {
            outcome,
            reward: None,
            rewards: BTreeMap::new(),
            exception: Some((class.to_string(), message.into())),
        }
    }
}

fn env_outcome(e: &EnvError) -> TrialOutcome {
    match e {
        EnvError::SetupFailed { .. } => TrialOutcome::EnvironmentSetupFailed,
        EnvError::Unsupported(_) => TrialOutcome::EnvironmentUnsupported,
        EnvError::Lost(_) | EnvError::BrokenFromInside(_) | EnvError::Io { .. } => {
            TrialOutcome::SandboxLost
        }
    }
}

/// The pieces of a trial's record that the phases fill in.
#[derive(Default)]
struct Record {
    phases: BTreeMap<String, f64>,
    /// Each phase's `[started, finished]` timestamps (Harbor's `TimingInfo`); over a
    /// multi-step trial, the first start and the last finish (`phases` sums the seconds).
    phase_times: BTreeMap<String, [String; 2]>,
    /// The latest pass of each phase, for a step's own timing.
    last_times: BTreeMap<String, [String; 2]>,
    /// A multi-step trial's steps as Harbor's `StepResult`s, with GEODE's `outcome`.
    steps: Vec<serde_json::Value>,
    usage: TrialUsage,
    /// What the integrity signals were, in words, for result.json.
    integrity: Vec<String>,
    signals: IntegritySignals,
    notes: Vec<String>,
    agent: Option<AgentEnd>,
    /// The image the trial started from (base, cache hit, build time).
    image: Option<serde_json::Value>,
}

/// When a phase began, on the wall clock (for the record) and the monotonic one (for its length).
struct PhaseClock {
    at: String,
    t: Instant,
}

impl PhaseClock {
    fn start() -> Self {
        PhaseClock {
            at: now(),
            t: Instant::now(),
        }
    }
}

impl Record {
    fn close_phase(&mut self, phase: &str, clock: PhaseClock) {
        *self.phases.entry(phase.into()).or_default() += clock.t.elapsed().as_secs_f64();
        let ends = [clock.at, now()];
        self.phase_times
            .entry(phase.into())
            .and_modify(|t| t[1] = ends[1].clone())
            .or_insert_with(|| ends.clone());
        self.last_times.insert(phase.into(), ends);
    }
}

/// One agent-then-verifier pass: the whole of a single-step task, or one step of a multi-step
/// one (its instruction, solution, tests and timeouts).
struct Stage<'a> {
    instruction: &'a str,
    solution: Option<PathBuf>,
    agent_timeout: Duration,
    /// The host folder the verifier sees as `/tests`.
    tests: PathBuf,
    verifier_timeout: Duration,
    verifier_env: Vec<(String, String)>,
    /// The last pass: collect hooks, artifacts and the kept workspace belong to it.
    last: bool,
}

impl<'a> Stage<'a> {
    fn whole(task: &'a Task) -> Self {
        Stage {
            instruction: &task.instruction,
            solution: task.solution(),
            agent_timeout: task.config.agent_timeout(),
            tests: task.tests_dir(),
            verifier_timeout: task.config.verifier_timeout(),
            verifier_env: task.config.verifier.env.clone().into_iter().collect(),
            last: true,
        }
    }

    /// A step: its own solution, else the task's; its timeouts, else the task's; the task's
    /// verifier environment with the step's on top; `tests` is the merged folder.
    fn step(task: &'a Task, step: &'a Step, tests: PathBuf, last: bool) -> Self {
        let mut env = task.config.verifier.env.clone();
        env.extend(step.config.verifier.env.clone());
        Stage {
            instruction: &step.instruction,
            solution: step.solution().or_else(|| task.solution()),
            agent_timeout: step.agent_timeout(&task.config),
            tests,
            verifier_timeout: step.verifier_timeout(&task.config),
            verifier_env: env.into_iter().collect(),
            last,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum AgentEnd {
    Finished,
    TimedOut,
    Errored,
    Cancelled,
}

/// Run the trial to its end. Never fails: every failure becomes an outcome.
pub async fn run_trial(
    plan: &TrialPlan,
    backend: &dyn Backend,
    images: &ImageCache,
    observer: &dyn PhaseObserver,
    cancel: &CancellationToken,
) -> TrialRow {
    let started = now();
    let mut rec = Record::default();
    let ending = run_phases(plan, backend, images, observer, cancel, &mut rec).await;
    let finished = now();
    let row = TrialRow {
        run_id: plan.run_id.clone(),
        trial_name: plan.trial_name.clone(),
        task_id: plan.task.id.clone(),
        task_hash: plan.task.hash.0.clone(),
        category: plan.task.config.category().to_string(),
        difficulty: plan.task.config.difficulty().to_string(),
        attempt: plan.attempt,
        seed: plan.seed,
        outcome: ending.outcome,
        reward: ending.reward,
        rewards_json: serde_json::to_string(&ending.rewards).unwrap_or_else(|_| "{}".into()),
        exception_class: ending.exception.as_ref().map(|e| e.0.clone()),
        exception_message: ending.exception.as_ref().map(|e| e.1.clone()),
        started,
        finished,
        phases_json: serde_json::to_string(&rec.phases).unwrap_or_else(|_| "{}".into()),
        usage: rec.usage,
        model_route: plan.model_route.clone(),
        scaffold_hash: plan.scaffold.hash(),
        infra_retries: 0,
        integrity: rec.signals,
    };
    write_result_json(plan, &row, &rec);
    row
}

/// What `task` asks of its environment, as a backend takes it: with a compose file, what it
/// adds to `main` (environment, the image when the task names none) and the group's names.
pub fn environment_spec(
    task: &Task,
    timeout_multiplier: f64,
    build_log: Option<PathBuf>,
) -> EnvironmentSpec {
    let mut spec = section_spec(
        task,
        &task.config.environment,
        task.config.network_policy(),
        task.environment_dir(),
        timeout_multiplier,
        build_log,
    );
    if let Some(compose) = &task.compose {
        spec.env.extend(compose.main.env.iter().cloned());
        if spec.docker_image.is_none() && !task.environment_dir().join("Dockerfile").is_file() {
            spec.docker_image = compose.main.image.clone();
        }
        spec.group.names = services::group_names(compose);
    }
    spec
}

/// A separate verifier's environment, as Harbor resolves it, and the key its image is cached
/// under: `[verifier.environment]`'s image when it names one; else `tests/Dockerfile` when
/// there is one; else the task's own environment (the same image as the agent's).
fn verifier_environment_spec(
    task: &Task,
    timeout_multiplier: f64,
    build_log: Option<PathBuf>,
) -> (EnvironmentSpec, TaskHash) {
    let own = task.config.verifier.environment.as_ref();
    let section = own.unwrap_or(&task.config.environment);
    let policy = match own {
        Some(section) => section.network_policy(section.network_mode.as_deref()),
        None => task.config.network_policy(),
    };
    let tests_build = task.tests_dir().join("Dockerfile").is_file();
    let dir = if tests_build && section.docker_image.is_none() {
        task.tests_dir()
    } else {
        task.environment_dir()
    };
    let mut spec = section_spec(task, section, policy, dir, timeout_multiplier, build_log);
    if own.is_some() && spec.docker_image.is_none() && !tests_build {
        spec.docker_image = task.config.environment.docker_image.clone();
    }
    if own.is_none() && !tests_build {
        return (spec, task.hash.clone());
    }
    (spec, TaskHash(format!("{}+verifier", task.hash)))
}

fn section_spec(
    task: &Task,
    environment: &EnvironmentSection,
    network: NetworkPolicy,
    environment_dir: PathBuf,
    timeout_multiplier: f64,
    build_log: Option<PathBuf>,
) -> EnvironmentSpec {
    EnvironmentSpec {
        task_name: task.id.clone(),
        environment_dir,
        network,
        cpus: environment.cpus,
        memory_mb: environment.memory_mb,
        storage_mb: environment.storage_mb,
        pids_max: Some(512),
        build_timeout: scaled(task.config.build_timeout(), timeout_multiplier),
        env: environment.env.clone().into_iter().collect(),
        docker_image: environment.docker_image.clone(),
        build_args: environment.build_args.clone().into_iter().collect(),
        build_log,
        group: Default::default(),
    }
}

fn scaled(d: Duration, multiplier: f64) -> Duration {
    d.mul_f64(multiplier.max(0.01))
}

async fn run_phases(
    plan: &TrialPlan,
    backend: &dyn Backend,
    images: &ImageCache,
    observer: &dyn PhaseObserver,
    cancel: &CancellationToken,
    rec: &mut Record,
) -> Ending {
    let task = &plan.task;
    if let Err(e) = fresh_trial_dir(&plan.trial_dir) {
        return Ending::infra(TrialOutcome::SandboxLost, "TrialDirError", e.to_string());
    }
    let env = &task.config.environment;
    if let Some(dir) = &env.skills_dir {
        rec.notes.push(format!(
            "environment.skills_dir = {dir:?}: GEODE's trial agent does not load skills yet"
        ));
    }
    if !env.mcp_servers.is_empty() {
        rec.notes.push(format!(
            "environment.mcp_servers: {} server(s) not connected to GEODE's trial agent yet",
            env.mcp_servers.len()
        ));
    }
    if let Some(why) = env.unsupported() {
        return Ending::infra(
            TrialOutcome::EnvironmentUnsupported,
            "EnvironmentUnsupportedError",
            why,
        );
    }
    let spec = environment_spec(
        task,
        plan.timeout_multiplier,
        Some(plan.trial_dir.join("build.log")),
    );

    observer.phase(&plan.trial_name, "environment");
    let t = PhaseClock::start();
    let started = async {
        let image = images.prepare(backend, &task.hash, &spec).await?;
        let mut sandbox = backend.start(&spec, &image, &plan.trial_dir).await?;
        if let Some(compose) = task.compose.as_ref().filter(|c| !c.sidecars.is_empty()) {
            let start = GroupStart {
                task,
                compose,
                main_spec: &spec,
                backend,
                images,
                trial_dir: &plan.trial_dir,
                timeout_multiplier: plan.timeout_multiplier,
                cancel,
            };
            sandbox = services::start_group(start, sandbox).await?;
        }
        Ok::<_, EnvError>((image, sandbox))
    }
    .await;
    let (image, sandbox) = match started {
        Ok(s) => s,
        Err(e) => {
            rec.close_phase("environment_setup", t);
            return Ending::infra(env_outcome(&e), "EnvironmentError", e.to_string());
        }
    };
    let healthy = match &env.healthcheck {
        Some(check) => wait_healthy(sandbox.as_ref(), check, plan.timeout_multiplier, cancel).await,
        None => Ok(()),
    };
    rec.close_phase("environment_setup", t);
    rec.notes.extend(image.notes.iter().cloned());
    if let Some(compose) = &task.compose {
        rec.notes.extend(compose.notes.iter().cloned());
    }
    rec.image = Some(json!({
        "from": image.from,
        "source": image.source,
        "digest": image.digest,
        "workdir": image.workdir,
        "cache_hit": image.cache_hit,
        "build_seconds": image.build_duration.as_secs_f64(),
    }));

    let fresh = Fresh { backend, images };
    let ending = match healthy {
        Ok(()) if task.steps.is_empty() => {
            let stage = Stage::whole(task);
            agent_then_verify(
                plan,
                &stage,
                sandbox.as_ref(),
                &fresh,
                observer,
                cancel,
                rec,
            )
            .await
        }
        Ok(()) => run_steps(plan, sandbox.as_ref(), &fresh, observer, cancel, rec).await,
        Err(why) => Ending::infra(
            TrialOutcome::EnvironmentSetupFailed,
            "HealthcheckError",
            why,
        ),
    };

    observer.phase(&plan.trial_name, "teardown");
    let t = PhaseClock::start();
    let torn = sandbox.teardown().await;
    rec.close_phase("teardown", t);
    match (torn, ending) {
        (Err(e), end) if !end.outcome.is_infrastructure() => {
            rec.notes.push(format!("teardown failed: {e}"));
            end
        }
        (_, end) => end,
    }
}

/// A command a task.toml names (a healthcheck, a collect hook, a step's setup), run in the
/// work directory; a little of its output is kept, for the message when it fails.
fn task_command(command: impl Into<String>, timeout: Duration) -> ExecRequest {
    ExecRequest {
        command: command.into(),
        cwd: None,
        timeout,
        output_cap: 4096,
        env: Vec::new(),
    }
}

/// Runs the task's healthcheck until it passes, as Docker's HEALTHCHECK counts: failures in
/// the start period do not count; `retries` failures in a row after it are the error.
pub(crate) async fn wait_healthy(
    sandbox: &dyn Sandbox,
    check: &Healthcheck,
    timeout_multiplier: f64,
    cancel: &CancellationToken,
) -> Result<(), String> {
    let began = Instant::now();
    let start_period = Duration::from_secs_f64(check.start_period_sec.max(0.0));
    let mut failures = 0u32;
    loop {
        let starting = began.elapsed() < start_period;
        let req = task_command(
            check.command.clone(),
            scaled(
                Duration::from_secs_f64(check.timeout_sec),
                timeout_multiplier,
            ),
        );
        let last = match sandbox.exec(req, cancel.clone()).await {
            Ok(out) if out.exit_code == Some(0) => return Ok(()),
            Ok(out) if out.timed_out => format!("timed out after {}s", check.timeout_sec),
            Ok(out) => format!(
                "exit {}: {}",
                out.exit_code.map_or("by signal".into(), |c| c.to_string()),
                out.stderr.trim().chars().take(300).collect::<String>()
            ),
            Err(e) => e.to_string(),
        };
        if cancel.is_cancelled() {
            return Err("cancelled during the healthcheck".into());
        }
        if !starting {
            failures += 1;
            if failures >= check.retries.max(1) {
                return Err(format!(
                    "environment.healthcheck {:?} failed {failures} time(s) in a row (last: {last})",
                    check.command
                ));
            }
        }
        let pause = if starting {
            check.start_interval_sec
        } else {
            check.interval_sec
        };
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs_f64(pause)) => {}
            _ = cancel.cancelled() => {}
        }
    }
}

/// Runs the task's `[[verifier.collect]]` hooks in the agent's sandbox once the agent is done,
/// before artifacts are collected. A failing hook is a note: the verifier decides what its
/// missing snapshot means.
async fn run_collect_hooks(plan: &TrialPlan, sandbox: &dyn Sandbox, rec: &mut Record) {
    for (i, hook) in plan.task.config.verifier.collect.iter().enumerate() {
        let target = if hook.service == MAIN_SERVICE {
            Some(sandbox)
        } else {
            sandbox.sidecar(&hook.service)
        };
        let Some(target) = target else {
            rec.notes.push(format!(
                "verifier.collect[{i}]: no service {:?} in this trial; not run",
                hook.service
            ));
            continue;
        };
        let req = task_command(
            hook.command.clone(),
            scaled(
                Duration::from_secs_f64(hook.timeout_sec),
                plan.timeout_multiplier,
            ),
        );
        match target.exec(req, CancellationToken::new()).await {
            Ok(out) if out.exit_code == Some(0) => {}
            Ok(out) => rec.notes.push(format!(
                "verifier.collect[{i}] exited {:?}{}",
                out.exit_code,
                if out.timed_out { " (timed out)" } else { "" }
            )),
            Err(e) => rec.notes.push(format!("verifier.collect[{i}]: {e}")),
        }
    }
}

/// A multi-step task (Harbor's `[[steps]]`): each step's agent then verifier in the same
/// sandbox, in order; a step's `agent/`, `verifier/` and grade move to `steps/<name>/`. The
/// steps stop at one that ends without a reward, or whose rewards fall below its
/// `min_reward`; the trial's rewards come from the steps' by the task's strategy.
async fn run_steps(
    plan: &TrialPlan,
    sandbox: &dyn Sandbox,
    fresh: &Fresh<'_>,
    observer: &dyn PhaseObserver,
    cancel: &CancellationToken,
    rec: &mut Record,
) -> Ending {
    let task = &plan.task;
    if task.config.verifier_mode() == VerifierMode::Separate {
        return Ending::infra(
            TrialOutcome::EnvironmentUnsupported,
            "EnvironmentUnsupportedError",
            "a multi-step task with a separate verifier: GEODE runs a step's verifier only in \
             the agent's sandbox",
        );
    }
    let mut endings: Vec<Ending> = Vec::new();
    for (i, step) in task.steps.iter().enumerate() {
        let name = step.name().to_string();
        observer.phase(&plan.trial_name, &format!("step {name}"));
        let tests = match merged_tests(task, step, &plan.trial_dir) {
            Ok(dir) => dir,
            Err(e) => {
                return Ending::infra(
                    TrialOutcome::VerifierCrashed,
                    "VerifierError",
                    format!("step {name}: cannot stage its tests: {e}"),
                );
            }
        };
        let stage = Stage::step(task, step, tests.clone(), i + 1 == task.steps.len());
        rec.last_times.clear();
        if !step.config.artifacts.is_empty() {
            rec.notes.push(format!(
                "step {name}: its own artifacts are not collected (the task's are, after the last step)"
            ));
        }
        let setup_failed = |class: &str, why: String| {
            Ending::infra(
                TrialOutcome::EnvironmentSetupFailed,
                class,
                format!("step {name}: {why}"),
            )
        };
        let ending = match prepare_step(step, sandbox, plan.timeout_multiplier).await {
            Err(why) => setup_failed("StepSetupError", why),
            Ok(()) => {
                let healthy = match &step.config.healthcheck {
                    Some(check) => {
                        wait_healthy(sandbox, check, plan.timeout_multiplier, cancel).await
                    }
                    None => Ok(()),
                };
                match healthy {
                    Err(why) => setup_failed("HealthcheckError", why),
                    Ok(()) => {
                        agent_then_verify(plan, &stage, sandbox, fresh, observer, cancel, rec).await
                    }
                }
            }
        };
        let _ = std::fs::remove_dir_all(&tests);
        if let Err(e) = archive_step(&plan.trial_dir, &name) {
            rec.notes
                .push(format!("step {name}: its outputs were not all moved: {e}"));
        }
        let shortfall = step
            .config
            .min_reward
            .as_ref()
            .filter(|_| ending.reward.is_some())
            .and_then(|m| m.shortfall(&ending.rewards));
        rec.steps.push(step_result(&name, &ending, &rec.last_times));
        let unrewarded = ending.reward.is_none()
            || ending
                .exception
                .as_ref()
                .is_some_and(|(class, _)| class == BROKEN_CLASS);
        endings.push(ending);
        if unrewarded {
            rec.notes.push(format!(
                "step {name} ended without a reward: the remaining steps did not run"
            ));
            break;
        }
        if let Some((key, got)) = shortfall {
            rec.notes.push(format!(
                "step {name}: {key} = {} is below its min_reward: the remaining steps did not run",
                got.map_or("missing".to_string(), |v| v.to_string())
            ));
            break;
        }
    }
    combine_steps(task, endings)
}

/// Before a step's agent, as Harbor does: the files of `steps/<name>/workdir/` are copied into
/// the sandbox's work directory (each replacing what has its name), then its `setup.sh`, if
/// any, runs there. `Err` says why the step cannot start.
async fn prepare_step(
    step: &Step,
    sandbox: &dyn Sandbox,
    timeout_multiplier: f64,
) -> Result<(), String> {
    let staged = step.dir.join("workdir");
    if !staged.is_dir() {
        return Ok(());
    }
    let root = sandbox.workspace().root().to_string_lossy().into_owned();
    let entries = std::fs::read_dir(&staged).map_err(|e| format!("{}: {e}", staged.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", staged.display()))?;
        let inside = format!(
            "{}/{}",
            root.trim_end_matches('/'),
            entry.file_name().to_string_lossy()
        );
        sandbox
            .copy_in(&entry.path(), &inside)
            .await
            .map_err(|e| format!("copying {} in: {e}", entry.path().display()))?;
    }
    if !staged.join("setup.sh").is_file() {
        return Ok(());
    }
    let req = task_command(
        "bash ./setup.sh",
        scaled(Duration::from_secs(600), timeout_multiplier),
    );
    match sandbox.exec(req, CancellationToken::new()).await {
        Ok(out) if out.exit_code == Some(0) => Ok(()),
        Ok(out) => Err(format!(
            "setup.sh exited {:?}: {}",
            out.exit_code,
            out.stderr.trim().chars().take(300).collect::<String>()
        )),
        Err(e) => Err(format!("setup.sh: {e}")),
    }
}

/// Where a step's tests are staged: in the trial folder, which the sandbox does not mount
/// (only its `agent/`, `verifier/` and `artifacts/`), and removed after the step.
const STEP_TESTS_DIR: &str = ".step-tests";

/// The tests a step's verifier sees: the task's `tests/`, with the step's own `tests/` over
/// it (its `test.sh` wins).
fn merged_tests(task: &Task, step: &Step, trial_dir: &Path) -> std::io::Result<PathBuf> {
    let dir = trial_dir.join(STEP_TESTS_DIR);
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    for source in [task.tests_dir(), step.tests_dir()] {
        if source.is_dir() {
            crate::env::fsops::copy_tree(&source, &dir)?;
        }
    }
    Ok(dir)
}

/// Moves what a step left in the trial folder (`agent/`, `verifier/`, its grade) to
/// `steps/<name>/`; the folders themselves stay, as the sandbox has them mounted.
fn archive_step(trial_dir: &Path, name: &str) -> std::io::Result<()> {
    let to = trial_dir.join("steps").join(name);
    for sub in ["agent", "verifier"] {
        let dest = to.join(sub);
        std::fs::create_dir_all(&dest)?;
        for entry in std::fs::read_dir(trial_dir.join(sub))? {
            let entry = entry?;
            std::fs::rename(entry.path(), dest.join(entry.file_name()))?;
        }
    }
    // The grade names its evidence by path: where the files now are.
    let grade = trial_dir.join(geode_graders::GRADE_FILE);
    if grade.is_file() {
        let mut doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&grade)?)
            .map_err(std::io::Error::other)?;
        let from = trial_dir.join("verifier").display().to_string();
        let into = to.join("verifier").display().to_string();
        rebase_paths(&mut doc, &from, &into);
        std::fs::write(
            to.join(geode_graders::GRADE_FILE),
            serde_json::to_string_pretty(&doc).map_err(std::io::Error::other)?,
        )?;
        std::fs::remove_file(&grade)?;
    }
    Ok(())
}

/// Every string of `doc` that starts with the path `from` starts with `into` instead.
fn rebase_paths(doc: &mut serde_json::Value, from: &str, into: &str) {
    match doc {
        serde_json::Value::String(s) => {
            if let Some(rest) = s.strip_prefix(from)
                && (rest.is_empty() || rest.starts_with('/'))
            {
                *s = format!("{into}{rest}");
            }
        }
        serde_json::Value::Array(items) => {
            items.iter_mut().for_each(|v| rebase_paths(v, from, into))
        }
        serde_json::Value::Object(map) => {
            map.values_mut().for_each(|v| rebase_paths(v, from, into))
        }
        _ => {}
    }
}

/// A step as Harbor's `StepResult`, with GEODE's `outcome` beside it.
fn step_result(
    name: &str,
    ending: &Ending,
    times: &BTreeMap<String, [String; 2]>,
) -> serde_json::Value {
    let timing = |phase: &str| {
        times
            .get(phase)
            .map(|[a, b]| json!({"started_at": a, "finished_at": b}))
    };
    json!({
        "step_name": name,
        "outcome": ending.outcome,
        "verifier_result": ending.reward.map(|_| json!({"rewards": ending.rewards})),
        "exception_info": ending.exception.as_ref().map(|(class, message)| {
            super::harbor::exception_info(class, message, &now())
        }),
        "agent_execution": timing("agent_execution"),
        "verifier": timing("verifier"),
    })
}

/// The trial's ending from its steps'. A step that ended without a reward (infrastructure, a
/// cancelled run) is the trial's ending: averaging the steps that were verified, as Harbor
/// does, would score a task whose later steps never ran.
fn combine_steps(task: &Task, mut endings: Vec<Ending>) -> Ending {
    if endings.last().is_none_or(|e| e.reward.is_none()) {
        return endings.pop().unwrap_or_else(|| {
            Ending::infra(
                TrialOutcome::VerifierCrashed,
                "VerifierError",
                "no step ran",
            )
        });
    }
    let rewards: BTreeMap<String, f64> = match task.config.step_rewards() {
        StepRewards::Final => endings
            .last()
            .map(|e| e.rewards.clone())
            .unwrap_or_default(),
        StepRewards::Mean => {
            let keys: std::collections::BTreeSet<&String> =
                endings.iter().flat_map(|e| e.rewards.keys()).collect();
            keys.into_iter()
                .map(|k| {
                    let sum: f64 = endings
                        .iter()
                        .map(|e| e.rewards.get(k).copied().unwrap_or(0.0))
                        .sum();
                    (k.clone(), sum / endings.len() as f64)
                })
                .collect()
        }
    };
    let first_exception = endings.iter().find_map(|e| e.exception.clone());
    let declared = task
        .config
        .metadata
        .get("reward_key")
        .and_then(toml::Value::as_str);
    let reward = match geode_graders::reward::headline(&rewards, declared) {
        Ok((primary, _)) => primary,
        Err(why) => {
            return Ending::infra(
                TrialOutcome::RewardMalformed,
                "VerifierOutputParseError",
                format!("the steps' rewards: {why}"),
            );
        }
    };
    let agent_end = endings.iter().find(|e| {
        matches!(
            e.outcome,
            TrialOutcome::AgentTimeout | TrialOutcome::AgentError
        )
    });
    let outcome = match agent_end {
        Some(e) => e.outcome,
        None if reward >= geode_graders::PASS_THRESHOLD => TrialOutcome::Passed,
        None => TrialOutcome::Failed,
    };
    Ending {
        outcome,
        reward: Some(reward),
        rewards,
        exception: first_exception,
    }
}

/// The exception class of a sandbox that a process inside it took down./// The exception class of a sandbox that a process inside it took down.
const BROKEN_CLASS: &str = "SandboxBrokenByAgent";

/// A process inside the sandbox took it down (its agent killed, the disk filled so the
/// verifier cannot start): the agent gains nothing by it. It scores as a failure with an
/// integrity flag, never as an excluded infrastructure error.
fn broke_its_sandbox(rec: &mut Record, why: &str) -> Ending {
    rec.signals.reward_tampering += 1;
    rec.integrity
        .push(format!("sandbox_lost_after_agent_acted: {why}"));
    Ending {
        outcome: TrialOutcome::Failed,
        reward: Some(0.0),
        rewards: BTreeMap::from([("reward".to_string(), 0.0)]),
        exception: Some((BROKEN_CLASS.into(), why.to_string())),
    }
}

/// Where a separate verifier's sandbox comes from.
struct Fresh<'a> {
    backend: &'a dyn Backend,
    images: &'a ImageCache,
}

async fn agent_then_verify(
    plan: &TrialPlan,
    stage: &Stage<'_>,
    sandbox: &dyn Sandbox,
    fresh: &Fresh<'_>,
    observer: &dyn PhaseObserver,
    cancel: &CancellationToken,
    rec: &mut Record,
) -> Ending {
    observer.phase(&plan.trial_name, "agent");
    let t = PhaseClock::start();
    let agent = run_agent(plan, stage, sandbox, cancel, rec).await;
    rec.close_phase("agent_execution", t);
    let agent = match agent {
        Ok(end) => end,
        Err(e @ EnvError::BrokenFromInside(_)) => return broke_its_sandbox(rec, &e.to_string()),
        Err(e) => return Ending::infra(env_outcome(&e), "AgentSetupError", e.to_string()),
    };
    rec.agent = Some(agent);
    if agent == AgentEnd::Cancelled {
        return Ending::infra(
            TrialOutcome::Cancelled,
            "Cancelled",
            "the run was cancelled",
        );
    }

    observer.phase(&plan.trial_name, "verifier");
    let t = PhaseClock::start();
    let verified = match verify(plan, stage, sandbox, fresh, rec).await {
        Err(ending)
            if ending
                .exception
                .as_ref()
                .is_some_and(|(c, _)| c == BROKEN_CLASS) =>
        {
            let why = ending.exception.map(|(_, m)| m).unwrap_or_default();
            return broke_its_sandbox(rec, &why);
        }
        other => other,
    };
    rec.close_phase("verifier", t);
    let (reward, rewards) = match verified {
        Ok(r) => r,
        Err(ending) => return ending,
    };
    let outcome = match agent {
        AgentEnd::TimedOut => TrialOutcome::AgentTimeout,
        AgentEnd::Errored => TrialOutcome::AgentError,
        _ if reward >= geode_graders::PASS_THRESHOLD => TrialOutcome::Passed,
        _ => TrialOutcome::Failed,
    };
    Ending {
        outcome,
        reward: Some(reward),
        rewards,
        exception: match agent {
            AgentEnd::TimedOut => Some(("AgentTimeoutError".into(), "agent timed out".into())),
            AgentEnd::Errored => Some(("AgentError".into(), "the model call failed".into())),
            _ => None,
        },
    }
}

fn fresh_trial_dir(dir: &Path) -> std::io::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    for sub in ["agent", "verifier", "artifacts"] {
        std::fs::create_dir_all(dir.join(sub))?;
    }
    Ok(())
}

/// The agent phase: the GEODE runtime on the task's instruction, inside the sandbox.
async fn run_agent(
    plan: &TrialPlan,
    stage: &Stage<'_>,
    sandbox: &dyn Sandbox,
    cancel: &CancellationToken,
    rec: &mut Record,
) -> Result<AgentEnd, EnvError> {
    let model = trial_model(plan, stage, sandbox).await?;
    let timeline_path = plan.trial_dir.join("agent").join("timeline.db");
    let timeline = Arc::new(
        SessionTimeline::open(&timeline_path).map_err(|e| EnvError::Io {
            context: timeline_path.display().to_string(),
            source: std::io::Error::other(e.to_string()),
        })?,
    );
    let policy = SessionPolicy::for_mode(SessionMode::Headless).grant_unattended(
        SafetyLevel::Dangerous,
        "benchmark trial: tools act only inside the trial's sandbox",
    );
    let mut cfg = SessionConfig::new(policy, sandbox.workspace(), model);
    cfg.scaffold = (*plan.scaffold).clone();
    cfg.timeline = Some(timeline.clone());
    let mut session = create_session(cfg).map_err(|e| EnvError::Unsupported(e.to_string()))?;

    let turn_cancel = cancel.child_token();
    let budget = scaled(stage.agent_timeout, plan.timeout_multiplier);
    let (outcome, timed_out) = {
        let turn = session.run_turn(stage.instruction, &turn_cancel);
        tokio::pin!(turn);
        tokio::select! {
            out = &mut turn => (out, false),
            _ = tokio::time::sleep(budget) => {
                // Cancelling kills the running command's process group; the turn then ends.
                turn_cancel.cancel();
                (turn.await, true)
            }
        }
    };
    session.close(outcome.termination.as_str()).await;
    rec.usage = TrialUsage {
        input_tokens: outcome.usage.input_tokens,
        cached_tokens: outcome.usage.cached_input_tokens,
        output_tokens: outcome.usage.output_tokens,
        cost_usd: outcome.usage.cost_usd,
        model_calls: u64::from(outcome.rounds),
    };
    let tools = session_tool_definitions(&session);
    let session_id = session.session_id().to_string();
    drop(session);
    if let Ok(rows) = timeline.rows(&geode_runtime::ids::SessionId::new(session_id.clone())) {
        let denied = denied_dangerous_calls(&rows);
        if denied > 0 {
            rec.signals.denied_dangerous_calls += denied;
            rec.integrity
                .push(format!("denied_dangerous_calls: {denied}"));
        }
        timeline_evidence(plan, rec);
        let doc = atif::trajectory(&session_id, &plan.model_route, tools, &rows);
        let path = plan.trial_dir.join("agent").join("trajectory.json");
        // The agent's processes may still run, and `agent/` is theirs too: never through a link.
        if let Ok(text) = serde_json::to_string_pretty(&doc)
            && let Err(e) = geode_graders::safe_fs::write(&path, text.as_bytes())
        {
            rec.notes
                .push(format!("could not write {}: {e}", path.display()));
        }
    }
    Ok(if timed_out {
        AgentEnd::TimedOut
    } else if cancel.is_cancelled() || outcome.termination == TerminationReason::UserCancelled {
        AgentEnd::Cancelled
    } else if outcome.termination == TerminationReason::LlmError {
        AgentEnd::Errored
    } else {
        AgentEnd::Finished
    })
}

/// The trial's agent model. The oracle and the flaky oracle get the task's reference solution
/// copied to `/solution` (only they ever see it); the flaky oracle draws from the trial's seed.
async fn trial_model(
    plan: &TrialPlan,
    stage: &Stage<'_>,
    sandbox: &dyn Sandbox,
) -> Result<Arc<dyn Model>, EnvError> {
    let unsupported = |e: geode_runtime::model::ModelError| EnvError::Unsupported(e.to_string());
    let route = plan.model_route.as_str();
    let flaky = route.strip_prefix("flaky-oracle:");
    if route != "oracle" && flaky.is_none() {
        let opts = geode_runtime::model::http::RouteOptions::from_env();
        return geode_runtime::model::model_from_route(route, &opts).map_err(unsupported);
    }
    let Some(solution) = stage.solution.clone() else {
        return Err(EnvError::Unsupported(format!(
            "task {} has no solution/solve.sh for the {route} agent",
            plan.task.id
        )));
    };
    let dir = solution.parent().unwrap_or(&plan.task.dir);
    sandbox.copy_in(dir, SOLUTION_DIR).await?;
    let solve = PathBuf::from(SOLUTION_DIR).join("solve.sh");
    Ok(match flaky {
        None => Arc::new(OracleModel::new(solve)),
        Some(arg) => {
            let (p, tamper) = FlakyOracle::parse_arg(arg).map_err(unsupported)?;
            Arc::new(FlakyOracle::new(solve, p, tamper, plan.model_seed))
        }
    })
}

/// What the agent's own tool calls show (`geode_graders::derive_integrity` over the trial's
/// timeline): writes aimed at `/logs/verifier`, `/tests` or a test file's name, effects nobody
/// can confirm, and calls naming sealed data. Denied calls are counted above, and network
/// attempts by the sandbox's kernel counter, so neither is taken twice.
fn timeline_evidence(plan: &TrialPlan, rec: &mut Record) {
    use geode_graders::IntegrityKind as Kind;
    let opts = geode_graders::IntegrityOptions {
        no_network: false,
        sealed_paths: plan.sealed_paths.clone(),
        task_dir: Some(plan.task.dir.clone()),
    };
    let report = match geode_graders::derive_integrity(&plan.trial_dir, &opts) {
        Ok(report) => report,
        Err(e) => {
            rec.notes
                .push(format!("the timeline's integrity scan failed: {e}"));
            return;
        }
    };
    for signal in report.signals {
        let counter = match signal.kind {
            Kind::VerifierDirWrite | Kind::TestFileWrite => &mut rec.signals.reward_tampering,
            Kind::UncertainEffect => &mut rec.signals.uncertain_effects,
            Kind::SealedDataAccess => &mut rec.signals.sealed_data_access,
            Kind::DeniedTool | Kind::NetworkAttempt | Kind::Other => continue,
        };
        *counter = counter.saturating_add(1);
        rec.integrity
            .push(format!("{}: {}", signal.kind.as_str(), signal.detail));
    }
}

/// Calls of dangerous tools (shell, computer use) that the pipeline refused.
fn denied_dangerous_calls(rows: &[TimelineRow]) -> u32 {
    let dangerous: std::collections::HashSet<&str> = rows
        .iter()
        .filter_map(|r| match &r.event {
            TimelineEvent::ToolCalled {
                call_id,
                classification: Some(c),
                ..
            } if c.safety >= SafetyLevel::Dangerous => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    rows.iter()
        .filter(|r| {
            matches!(&r.event, TimelineEvent::ToolCompleted { call_id, outcome: CallOutcome::Denied { .. }, .. }
                if dangerous.contains(call_id.as_str()))
        })
        .count() as u32
}

fn session_tool_definitions(session: &geode_runtime::agent::AgenticLoop) -> Vec<serde_json::Value> {
    session
        .tool_plan()
        .project(ToolSchemaShape::OpenAiResponses)
}

/// The verifier phase. `Err` is an infrastructure ending.
async fn verify(
    plan: &TrialPlan,
    stage: &Stage<'_>,
    sandbox: &dyn Sandbox,
    fresh: &Fresh<'_>,
    rec: &mut Record,
) -> Result<(f64, BTreeMap<String, f64>), Ending> {
    let infra = |o, class: &str, e: String| Ending::infra(o, class, e);
    // Before the verifier, whose own traffic is not the agent's.
    let attempts = sandbox.network_attempts().await;
    if attempts > 0 {
        rec.signals.network_attempts = rec
            .signals
            .network_attempts
            .saturating_add(u32::try_from(attempts).unwrap_or(u32::MAX));
        rec.integrity.push(format!(
            "network_attempt: {attempts} packet(s) towards hosts the trial may not reach (no network, or not on its allowlist)"
        ));
    }
    if stage.last {
        run_collect_hooks(plan, sandbox, rec).await;
    }
    let verifier_dir = plan.trial_dir.join("verifier");
    // What the agent saw as /logs/verifier: a decoy where the sandbox has views.
    let planted = std::fs::read_dir(sandbox.verifier_decoy().unwrap_or(verifier_dir.clone()))
        .map(|d| d.count())
        .unwrap_or(0);
    if planted > 0 {
        rec.signals.reward_tampering += 1;
        rec.integrity.push(format!(
            "verifier_dir_written_by_agent: {planted} entries under /logs/verifier before verification"
        ));
    }
    // Empty it in place: the folder itself is bind-mounted into the sandbox.
    if let Err(e) = crate::env::fsops::clear_dir(&verifier_dir) {
        return Err(infra(
            TrialOutcome::SandboxLost,
            "SandboxError",
            e.to_string(),
        ));
    }
    if !stage.tests.join("test.sh").is_file() {
        return Err(infra(
            TrialOutcome::VerifierCrashed,
            "VerifierError",
            format!("{} is missing", stage.tests.join("test.sh").display()),
        ));
    }
    match plan.task.config.verifier_mode() {
        VerifierMode::Shared => {
            let result = run_tests(plan, stage, sandbox, true, rec).await;
            // Declared artifacts (and the workspace, if asked) are kept once the services are
            // done with: after the last step of a multi-step task.
            let artifacts = !plan.task.config.artifacts.is_empty();
            if stage.last
                && (artifacts || plan.keep_workspace)
                && sandbox.kill_all_processes().await.is_ok()
            {
                if artifacts {
                    collect_artifacts(plan, sandbox, rec).await;
                }
                if plan.keep_workspace {
                    keep_workspace(plan, sandbox, rec).await;
                }
            }
            result
        }
        VerifierMode::Separate => {
            // The agent's processes are gone once the verifier's sandbox exists.
            let verifier = separate_verifier(plan, sandbox, fresh, rec).await?;
            if plan.keep_workspace {
                keep_workspace(plan, sandbox, rec).await;
            }
            let result = run_tests(plan, stage, verifier.as_ref(), false, rec).await;
            if let Err(e) = verifier.teardown().await {
                rec.notes
                    .push(format!("the verifier's sandbox teardown failed: {e}"));
            }
            result
        }
    }
}

/// Where a kept workspace goes inside the trial folder.
pub const WORKSPACE_DIR: &str = "workspace";

/// Copies the final workspace (the image's WORKDIR) to `<trial>/workspace/`; links and special
/// files are left out, and a failure is a note, never the trial's outcome.
async fn keep_workspace(plan: &TrialPlan, sandbox: &dyn Sandbox, rec: &mut Record) {
    let root = sandbox.workspace().root().to_string_lossy().into_owned();
    let dest = plan.trial_dir.join(WORKSPACE_DIR);
    match sandbox.copy_out(&root, &dest, &|_| false).await {
        Ok(left_out) if !left_out.is_empty() => rec.notes.push(format!(
            "workspace kept without {} link(s) or special file(s)",
            left_out.len()
        )),
        Ok(_) => {}
        Err(e) => rec.notes.push(format!("workspace not kept: {e}")),
    }
}

/// A fresh sandbox for a separate verifier (Harbor's `environment_mode = "separate"`): the
/// agent's processes end, its declared artifacts are copied out to the trial's `artifacts/`
/// and into the new sandbox at their own paths; `/logs/artifacts` is the trial's, as before.
async fn separate_verifier(
    plan: &TrialPlan,
    sandbox: &dyn Sandbox,
    fresh: &Fresh<'_>,
    rec: &mut Record,
) -> Result<Box<dyn Sandbox>, Ending> {
    let setup =
        |e: EnvError| Ending::infra(env_outcome(&e), "VerifierEnvironmentError", e.to_string());
    // Nothing of the agent's may run on, or change the artifacts while they are read.
    sandbox
        .kill_all_processes()
        .await
        .map_err(|e| Ending::infra(TrialOutcome::SandboxLost, "SandboxError", e.to_string()))?;
    let collected = collect_artifacts(plan, sandbox, rec).await;
    let (spec, key) = verifier_environment_spec(
        &plan.task,
        plan.timeout_multiplier,
        Some(plan.trial_dir.join("build.log")),
    );
    let image = fresh
        .images
        .prepare(fresh.backend, &key, &spec)
        .await
        .map_err(setup)?;
    let verifier = fresh
        .backend
        .start(&spec, &image, &plan.trial_dir)
        .await
        .map_err(setup)?;
    for (host, source) in collected {
        if let Err(e) = verifier.copy_in(&host, &source).await {
            rec.notes.push(format!(
                "artifact {source}: not copied to the verifier: {e}"
            ));
        }
    }
    Ok(verifier)
}

/// Copy the task's declared artifacts out of `sandbox` (no agent process running) into the
/// trial's `artifacts/`; what was collected, by host path and source. Best effort, as in
/// Harbor: a missing source is a note.
async fn collect_artifacts(
    plan: &TrialPlan,
    sandbox: &dyn Sandbox,
    rec: &mut Record,
) -> Vec<(PathBuf, String)> {
    let base = plan.trial_dir.join("artifacts");
    let mut collected = Vec::new();
    for artifact in &plan.task.config.artifacts {
        let source = artifact.source();
        let dest = match clear_destination(&base, artifact.destination()) {
            Ok(dest) => dest,
            Err(e) => {
                rec.notes.push(format!(
                    "artifact {source}: no place for it under artifacts/: {e}"
                ));
                continue;
            }
        };
        match sandbox
            .copy_out(source, &dest, &|name| artifact.excludes(name))
            .await
        {
            Ok(left_out) => {
                rec.notes.extend(
                    left_out
                        .into_iter()
                        .map(|l| format!("artifact {source}: left out {l}")),
                );
                collected.push((dest, source.to_string()));
            }
            Err(e) => rec
                .notes
                .push(format!("artifact {source}: not collected: {e}")),
        }
    }
    collected
}

/// `base/rel` made ready for a fresh copy: its parent folders real folders (a link the agent
/// left under `/logs/artifacts` is removed, never followed), nothing at the path itself.
fn clear_destination(base: &Path, rel: &str) -> std::io::Result<PathBuf> {
    let mut path = base.to_path_buf();
    let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
    for (i, part) in parts.iter().enumerate() {
        path.push(part);
        let last = i + 1 == parts.len();
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() && !last => continue,
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path)?,
            Ok(_) => std::fs::remove_file(&path)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        if !last {
            std::fs::create_dir(&path)?;
        }
    }
    Ok(path)
}

/// Run `tests/test.sh` in `sandbox` and grade what it left. `agent_layer`: the sandbox is
/// the agent's, whose writable layer is read for changes to what the verifier runs.
async fn run_tests(
    plan: &TrialPlan,
    stage: &Stage<'_>,
    sandbox: &dyn Sandbox,
    agent_layer: bool,
    rec: &mut Record,
) -> Result<(f64, BTreeMap<String, f64>), Ending> {
    let infra = |o, class: &str, e: String| Ending::infra(o, class, e);
    let verifier_dir = plan.trial_dir.join("verifier");
    let tests = &stage.tests;
    let timeout = scaled(stage.verifier_timeout, plan.timeout_multiplier);
    // The agent's background services keep running (Harbor's semantics); the verifier's view
    // keeps them away from its reward.
    let out = sandbox
        .run_verifier(
            tests,
            ExecRequest {
                command: format!("bash {TESTS_DIR}/test.sh"),
                cwd: None,
                timeout,
                output_cap: VERIFIER_OUTPUT_CAP,
                env: stage.verifier_env.clone(),
            },
        )
        .await
        .map_err(|e| match e {
            EnvError::BrokenFromInside(_) => {
                infra(TrialOutcome::SandboxLost, BROKEN_CLASS, e.to_string())
            }
            // Gone from outside (a crash, an OOM kill of its init): infrastructure.
            EnvError::Lost(_) => infra(TrialOutcome::SandboxLost, "SandboxError", e.to_string()),
            // The agent filled its disk and left the verifier no room to start.
            EnvError::Io { ref source, .. } if source.kind() == std::io::ErrorKind::StorageFull => {
                infra(
                    TrialOutcome::VerifierCrashed,
                    BROKEN_CLASS,
                    format!("the verifier could not start on the trial's full disk: {e}"),
                )
            }
            e => infra(
                TrialOutcome::VerifierCrashed,
                "VerifierError",
                e.to_string(),
            ),
        })?;
    let log = format!(
        "{}\n[stderr]\n{}\n[exit code {:?}]\n",
        out.stdout, out.stderr, out.exit_code
    );
    let stdout_file = verifier_dir.join("test-stdout.txt");
    if let Err(e) = geode_graders::safe_fs::write(&stdout_file, log.as_bytes()) {
        rec.notes
            .push(format!("could not write {}: {e}", stdout_file.display()));
    }
    // After the verifier: what the agent's services changed while it ran counts too.
    let workdir = sandbox.workspace().root().to_string_lossy().into_owned();
    let changed = if agent_layer {
        sandbox.changed_verifier_inputs(&workdir).await
    } else {
        Vec::new()
    };
    if !changed.is_empty() {
        rec.signals.reward_tampering += 1;
        rec.integrity
            .push(format!("verifier_inputs_changed: {}", changed.join(", ")));
    }
    if out.timed_out {
        return Err(infra(
            TrialOutcome::VerifierTimeout,
            "VerifierTimeoutError",
            format!("tests/test.sh ran past {}s", timeout.as_secs()),
        ));
    }
    // The grader reads what the verifier left (reward file, CTRF/JUnit/stdout checks) and keeps
    // it beside the trial as grade.json, so `geode show` and re-grades need no sandbox.
    let input = GradeInput::from_trial_dir(&plan.trial_dir, Some(&plan.task.dir));
    let grade = TestScriptGrader.grade_dir(&input);
    if let Err(e) = write_grade(&plan.trial_dir, &grade) {
        rec.notes.push(format!("could not write the grade: {e}"));
    }
    // A pass beside failed checks: the reward file says one thing, the verifier's own report
    // another (a forged reward, or a verifier whose tools were replaced).
    let failed_checks = grade
        .checks()
        .iter()
        .filter(|c| c.status == geode_graders::grade::CheckStatus::Fail)
        .count();
    if let Some(r) = grade.rewards()
        && r.primary() >= geode_graders::PASS_THRESHOLD
        && failed_checks > 0
    {
        rec.signals.reward_tampering += 1;
        rec.integrity.push(format!(
            "reward_contradicts_checks: reward {} with {failed_checks} failed check(s)",
            r.primary()
        ));
    }
    match (grade.validity(), grade.rewards()) {
        (Validity::Valid, Some(r)) => Ok((r.primary(), r.all().clone())),
        (Validity::Invalid(cause), _) => Err(infra(
            cause.class(),
            verifier_exception_class(cause.class()),
            cause.reason().to_string(),
        )),
        (Validity::Valid, None) => Err(infra(
            TrialOutcome::RewardMissing,
            "RewardFileNotFoundError",
            "the grade has no reward".to_string(),
        )),
    }
}

/// The exception class Harbor gives a verifier that left no usable reward, so `harbor jobs
/// resume -f CLASS` and `geode resume --rerun CLASS` name the same trials.
fn verifier_exception_class(outcome: TrialOutcome) -> &'static str {
    match outcome {
        TrialOutcome::RewardMissing => "RewardFileNotFoundError",
        TrialOutcome::RewardMalformed => "VerifierOutputParseError",
        TrialOutcome::VerifierTimeout => "VerifierTimeoutError",
        _ => "VerifierResultError",
    }
}

/// The trial's `result.json`: GEODE's record, with Harbor's `TrialResult` keys beside it.
fn write_result_json(plan: &TrialPlan, row: &TrialRow, rec: &Record) {
    let phases: serde_json::Value = serde_json::from_str(&row.phases_json).unwrap_or_default();
    let geode = json!({
        "schema": "geode.trial.v1",
        "trial_name": row.trial_name,
        "task_name": row.task_id,
        "task_checksum": row.task_hash,
        "run_id": row.run_id,
        "attempt": row.attempt,
        "seed": row.seed,
        "scaffold_hash": row.scaffold_hash,
        "outcome": row.outcome,
        "phase_seconds": phases,
        "image": rec.image,
        "integrity": rec.integrity,
        "notes": rec.notes,
    });
    let times = serde_json::to_value(&rec.phase_times).unwrap_or_default();
    let doc =
        super::harbor::trial_result(geode, row, &plan.task, &plan.trial_dir, &times, &rec.steps);
    if let Ok(text) = serde_json::to_string_pretty(&doc) {
        let _ = std::fs::write(plan.trial_dir.join("result.json"), text);
    }
}
