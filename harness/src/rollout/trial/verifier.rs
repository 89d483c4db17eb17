//! The verifier phase: `tests/test.sh` in the agent's sandbox (in a view of its own) or in a
//! fresh one, the grade of what it left, and the integrity signals read around it.

use std::collections::BTreeMap;
use std::time::Duration;

use geode_graders::{GradeInput, TestScriptGrader, TrialOutcome, Validity, write_grade};
use geode_runtime::tools::workspace::{ExecOutput, ExecRequest};
use tokio_util::sync::CancellationToken;

use super::artifacts::{collect_artifacts, keep_workspace};
use super::environment::verifier_environment_spec;
use super::plan::{Fresh, Stage, TrialPlan};
use super::record::{BROKEN_CLASS, Ending, Record, env_outcome, verifier_failed_after_agent};
use crate::env::compose::MAIN_SERVICE;
use crate::env::{ChangedInputs, EnvError, Judgment, Sandbox, TESTS_DIR};
use crate::pack::VerifierMode;
use crate::rollout::task_command::{scaled, task_command};

/// Bytes of verifier output kept in `verifier/test-stdout.txt`.
const VERIFIER_OUTPUT_CAP: usize = 256 * 1024;

/// The verifier phase. `Err` is an infrastructure ending.
pub(super) async fn verify(
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
    // What the agent left in /logs/artifacts goes with the declared artifacts to the verifier.
    rec.notes.extend(sandbox.sync_logs().await);
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
    // A fresh environment of Harbor's comes up as the agent's did: ENTRYPOINT first.
    if !image.entrypoint.is_empty() {
        match crate::env::entrypoint::start(
            verifier.as_ref(),
            &image.entrypoint,
            &CancellationToken::new(),
        )
        .await
        {
            Ok(notes) => rec.notes.extend(notes),
            Err(e) => {
                let _ = verifier.teardown().await;
                return Err(setup(e));
            }
        }
    }
    for (host, source) in collected {
        if let Err(e) = verifier.copy_in(&host, &source).await {
            rec.notes.push(format!(
                "artifact {source}: not copied to the verifier: {e}"
            ));
        }
    }
    Ok(verifier)
}

/// Run `tests/test.sh` in `sandbox` and grade what it left. `agent_layer`: the sandbox is
/// the agent's, whose writable layer is read for changes to what the verifier runs. Once the
/// agent has acted, a verifier that fails is the agent's failure.
async fn run_tests(
    plan: &TrialPlan,
    stage: &Stage<'_>,
    sandbox: &dyn Sandbox,
    agent_layer: bool,
    rec: &mut Record,
) -> Result<(f64, BTreeMap<String, f64>), Ending> {
    match run_and_grade(plan, stage, sandbox, agent_layer, rec).await {
        Err(ending) if rec.agent_acted && is_verifier_failure(&ending) => {
            Err(verifier_failed_after_agent(rec, ending))
        }
        graded => graded,
    }
}

/// A verifier that could not start its command, ran out of time or left no usable reward; not
/// a sandbox lost from outside, nor one the agent took down (that is its own ending).
fn is_verifier_failure(ending: &Ending) -> bool {
    let host_class = ending
        .exception
        .as_ref()
        .is_some_and(|(class, _)| class == "SandboxError" || class == BROKEN_CLASS);
    !host_class
        && matches!(
            ending.outcome,
            TrialOutcome::VerifierTimeout
                | TrialOutcome::VerifierCrashed
                | TrialOutcome::RewardMissing
                | TrialOutcome::RewardMalformed
        )
}

async fn run_and_grade(
    plan: &TrialPlan,
    stage: &Stage<'_>,
    sandbox: &dyn Sandbox,
    agent_layer: bool,
    rec: &mut Record,
) -> Result<(f64, BTreeMap<String, f64>), Ending> {
    let timeout = scaled(stage.verifier_timeout, plan.timeout_multiplier);
    let workdir = sandbox.workspace().root().to_string_lossy().into_owned();
    // Judged twice from the host's side of the layer: as the agent handed over (a wrapper that
    // deletes itself once it has forged is still there), and after the verifier (what changed
    // while it ran).
    let before = if agent_layer {
        sandbox
            .changed_verifier_inputs(&workdir, Judgment::HandOver)
            .await
    } else {
        ChangedInputs::default()
    };
    let ran = run_test_script(stage, sandbox, timeout).await;
    if agent_layer {
        let after = sandbox
            .changed_verifier_inputs(&workdir, Judgment::AfterVerifier)
            .await;
        note_changed_inputs(before, after, rec);
    }
    let out = ran?;
    keep_verifier_log(plan, &out, rec);
    if out.timed_out {
        return Err(Ending::infra(
            TrialOutcome::VerifierTimeout,
            "VerifierTimeoutError",
            format!("tests/test.sh ran past {}s", timeout.as_secs()),
        ));
    }
    grade(plan, rec)
}

/// `tests/test.sh` itself, in the verifier's view; `Err` is the ending of a verifier that
/// could not run, with the sandbox's failure sorted by who caused it.
async fn run_test_script(
    stage: &Stage<'_>,
    sandbox: &dyn Sandbox,
    timeout: Duration,
) -> Result<ExecOutput, Ending> {
    let infra = |o, class: &str, e: String| Ending::infra(o, class, e);
    // The agent's background services keep running (Harbor's semantics); the verifier's view
    // keeps them away from its reward.
    sandbox
        .run_verifier(
            &stage.tests,
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
            // The agent's background processes hold every pid the trial may have.
            EnvError::Io { ref source, .. } if source.kind() == std::io::ErrorKind::WouldBlock => {
                infra(
                    TrialOutcome::VerifierCrashed,
                    BROKEN_CLASS,
                    format!(
                        "the verifier could not start: the processes the agent left hold the \
                         trial's pids: {e}"
                    ),
                )
            }
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
        })
}

/// The verifier's output, kept as `verifier/test-stdout.txt`.
fn keep_verifier_log(plan: &TrialPlan, out: &ExecOutput, rec: &mut Record) {
    let log = format!(
        "{}\n[stderr]\n{}\n[exit code {:?}]\n",
        out.stdout, out.stderr, out.exit_code
    );
    let stdout_file = plan.trial_dir.join("verifier").join("test-stdout.txt");
    if let Err(e) = geode_graders::safe_fs::write(&stdout_file, log.as_bytes()) {
        rec.notes
            .push(format!("could not write {}: {e}", stdout_file.display()));
    }
}

/// Changes in the agent's writable layer to what the verifier runs. Those there as the agent
/// handed over are reward tampering, and so is a file written while the verifier ran that was
/// gone again by the end (a wrapper planted by what the agent left running, covering its
/// tracks). What appeared while the verifier ran and stayed is named apart and counted as
/// nothing: a verifier that installs its own tools (`apt-get install curl`, `pip install
/// pytest`, as Terminal-Bench's do) writes there too.
fn note_changed_inputs(before: ChangedInputs, after: ChangedInputs, rec: &mut Record) {
    let mut tampered = before.present;
    tampered.extend(after.vanished);
    if !tampered.is_empty() {
        rec.signals.reward_tampering += 1;
        rec.integrity
            .push(format!("verifier_inputs_changed: {}", tampered.join(", ")));
    }
    let during: Vec<String> = after
        .present
        .into_iter()
        .filter(|p| !tampered.contains(p))
        .collect();
    if !during.is_empty() {
        rec.integrity.push(format!(
            "verifier_inputs_changed_while_verifying: {} (by the verifier itself or by what the \
             agent left running)",
            during.join(", ")
        ));
    }
}

/// The grader reads what the verifier left (reward file, CTRF/JUnit/stdout checks) and keeps
/// it beside the trial as grade.json, so `geode show` and re-grades need no sandbox.
fn grade(plan: &TrialPlan, rec: &mut Record) -> Result<(f64, BTreeMap<String, f64>), Ending> {
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
        && geode_graders::summary::passes(r.primary())
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
        (Validity::Invalid(cause), _) => Err(Ending::infra(
            cause.class(),
            verifier_exception_class(cause.class()),
            cause.reason().to_string(),
        )),
        (Validity::Valid, None) => Err(Ending::infra(
            TrialOutcome::RewardMissing,
            "RewardFileNotFoundError",
            "the grade has no reward".to_string(),
        )),
    }
}

/// The exception class Harbor gives a verifier that left no usable reward, so `harbor jobs
/// resume -f CLASS` and `geode resume --rerun CLASS` name the same trials.
fn verifier_exception_class(outcome: TrialOutcome) -> &'static str {
    crate::rollout::harbor::exception_class(outcome).unwrap_or("VerifierResultError")
}
