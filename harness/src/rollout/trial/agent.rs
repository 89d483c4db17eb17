//! The agent phase: the GEODE runtime (headless, tools auto-approved inside the sandbox) on
//! the stage's instruction, with the model its route names, and what its timeline shows
//! (usage, the trajectory, denied and suspicious tool calls).

use std::path::PathBuf;
use std::sync::Arc;

use geode_runtime::agent::TerminationReason;
use geode_runtime::model::Model;
use geode_runtime::model::catalog::{EmbeddedRoute, Route};
use geode_runtime::model::computer_oracle::{COMPUTER_SOLUTION, ComputerOracle};
use geode_runtime::model::embedded::OracleModel;
use geode_runtime::model::flaky::FlakyOracle;
use geode_runtime::policy::{SafetyLevel, SessionMode, SessionPolicy};
use geode_runtime::session::{SessionConfig, create_session};
use geode_runtime::store::timeline::{CallOutcome, SessionTimeline, TimelineEvent, TimelineRow};
use geode_runtime::tools::plan::ToolSchemaShape;
use tokio_util::sync::CancellationToken;

use super::plan::{Stage, TrialPlan};
use super::record::Record;
use crate::atif;
use crate::env::{EnvError, Sandbox};
use crate::rollout::task_command::scaled;
use crate::store::TrialUsage;
use geode_graders::AgentEnd;

/// Where the oracle finds the reference solution inside the sandbox.
pub const SOLUTION_DIR: &str = "/solution";

/// Why the agent could not be set up in its sandbox, each with its cause kept.
#[derive(Debug, thiserror::Error)]
pub(super) enum AgentSetupError {
    #[error(transparent)]
    Env(#[from] EnvError),
    #[error("the agent's timeline {path}")]
    Timeline {
        path: String,
        #[source]
        source: geode_runtime::store::StoreError,
    },
    #[error("the agent's session could not be built")]
    Session(#[from] geode_runtime::session::SessionError),
    #[error("the agent's model could not be built")]
    Model(#[from] geode_runtime::model::ModelError),
    #[error("task {task} has no solution/solve.sh for the {route} agent")]
    NoSolution { task: String, route: String },
    #[error("the trial's model gateway")]
    Gateway(#[source] crate::gateway::GatewayError),
}

impl AgentSetupError {
    /// The trial's outcome: the sandbox's own failure, or a trial this set-up cannot run.
    pub(super) fn outcome(&self) -> geode_graders::TrialOutcome {
        match self {
            AgentSetupError::Env(e) => super::record::env_outcome(e),
            _ => geode_graders::TrialOutcome::EnvironmentUnsupported,
        }
    }
}

/// The agent phase: the GEODE runtime on the task's instruction, inside the sandbox.
pub(super) async fn run_agent(
    plan: &TrialPlan,
    stage: &Stage<'_>,
    sandbox: &dyn Sandbox,
    cancel: &CancellationToken,
    rec: &mut Record,
) -> Result<AgentEnd, AgentSetupError> {
    let model = trial_model(plan, stage, sandbox).await?;
    let timeline_path = plan.trial_dir.join("agent").join("timeline.db");
    let timeline = Arc::new(SessionTimeline::open(&timeline_path).map_err(|source| {
        AgentSetupError::Timeline {
            path: timeline_path.display().to_string(),
            source,
        }
    })?);
    let mut policy = SessionPolicy::for_mode(SessionMode::Headless).grant_unattended(
        SafetyLevel::Dangerous,
        "benchmark trial: tools act only inside the trial's sandbox",
    );
    // The task asked for a desktop, and its display lives inside the sandbox.
    if plan.task.config.environment.display.is_some() {
        policy = policy.grant_task_display();
    }
    let skills_dir = plan.task.config.environment.skills_dir.as_deref();
    let skills = Arc::new(super::skills::task_skills(skills_dir, sandbox, rec).await?);
    if !skills.is_empty() {
        rec.scaffold_hash = Some(skills.apply_to((*plan.scaffold).clone()).hash());
    }
    let mut cfg = SessionConfig::new(policy, sandbox.workspace(), model);
    cfg.scaffold = (*plan.scaffold).clone();
    cfg.skills = skills;
    cfg.timeline = Some(timeline.clone());
    let mut session = create_session(cfg)?;

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
    let agent_dir = plan.trial_dir.join("agent");
    let (images, image_errors) = atif::save_images(&agent_dir, session.messages());
    rec.notes.extend(image_errors);
    drop(session);
    let rows = timeline.rows(&geode_runtime::ids::SessionId::new(session_id.clone()));
    if let Err(e) = &rows {
        // The host writes the timeline where the agent's processes cannot reach: a timeline
        // that cannot be read is never silence.
        rec.integrity.push(format!(
            "records_missing: the agent's timeline could not be read: {e}"
        ));
    }
    rec.agent_acted = rows.as_ref().map_or(true, |rows| {
        rows.iter().any(|r| {
            matches!(&r.event, TimelineEvent::ToolCompleted { outcome, .. } if outcome.dispatched())
        })
    });
    if let Ok(rows) = rows {
        let denied = denied_dangerous_calls(&rows);
        if denied > 0 {
            rec.signals.denied_dangerous_calls += denied;
            rec.integrity
                .push(format!("denied_dangerous_calls: {denied}"));
        }
        timeline_evidence(plan, rec);
        let doc = atif::trajectory(&session_id, &plan.route.to_string(), tools, &rows, &images);
        let path = agent_dir.join("trajectory.json");
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
pub(super) async fn trial_model(
    plan: &TrialPlan,
    stage: &Stage<'_>,
    sandbox: &dyn Sandbox,
) -> Result<Arc<dyn Model>, AgentSetupError> {
    let flaky = match &plan.route {
        Route::Embedded(EmbeddedRoute::Oracle { solve_sh: None }) => None,
        Route::Embedded(EmbeddedRoute::FlakyOracle { p, tamper }) => Some((*p, *tamper)),
        route => {
            let opts = geode_runtime::model::http::RouteOptions::from_env();
            return Ok(geode_runtime::model::model_for(route, &opts)?);
        }
    };
    let Some(solution) = stage.solution.clone() else {
        return Err(AgentSetupError::NoSolution {
            task: plan.task.id.clone(),
            route: plan.route.to_string(),
        });
    };
    let dir = solution.parent().unwrap_or(&plan.task.dir);
    let on_screen = dir.join(COMPUTER_SOLUTION);
    if flaky.is_none() && on_screen.is_file() {
        // The reference solution is a list of actions on the screen: nothing to copy in.
        return Ok(Arc::new(ComputerOracle::load(&on_screen)?));
    }
    sandbox.copy_in(dir, SOLUTION_DIR).await?;
    let solve = PathBuf::from(SOLUTION_DIR).join("solve.sh");
    Ok(match flaky {
        None => Arc::new(OracleModel::new(solve)),
        Some((p, tamper)) => Arc::new(FlakyOracle::new(solve, p, tamper, plan.model_seed)),
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
