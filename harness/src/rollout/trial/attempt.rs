//! One attempt of a stage: the agent, then the verifier in a view of its own; the ending the
//! two make together (a cancelled agent is not graded, a broken sandbox is the agent's doing).

use geode_graders::{AgentEnd, Validity, trial_outcome};
use tokio_util::sync::CancellationToken;

use super::agent::{self, AgentSetupError};
use super::phase::{PhaseEvent, TrialPhase};
use super::plan::{Fresh, PhaseObserver, Stage, TrialPlan};
use super::record::{BROKEN_CLASS, Ending, PhaseClock, Record, broke_its_sandbox};
use super::verifier;
use crate::env::{EnvError, Sandbox};
use geode_runtime::error_chain::error_chain;

pub(super) async fn agent_then_verify(
    plan: &TrialPlan,
    stage: &Stage<'_>,
    sandbox: &dyn Sandbox,
    fresh: &Fresh<'_>,
    observer: &dyn PhaseObserver,
    cancel: &CancellationToken,
    rec: &mut Record,
) -> Ending {
    observer.phase(
        &plan.trial_name,
        PhaseEvent::Phase(TrialPhase::AgentExecution),
    );
    let t = PhaseClock::start();
    let agent = if plan.agent.is_geode() {
        agent::run_agent(plan, stage, sandbox, cancel, rec).await
    } else {
        super::external::run_external_agent(plan, stage, sandbox, cancel, rec).await
    };
    rec.close_phase(TrialPhase::AgentExecution, t);
    let agent = match agent {
        Ok(end) => end,
        Err(AgentSetupError::Env(e @ EnvError::BrokenFromInside(_))) => {
            return broke_its_sandbox(rec, &e.to_string());
        }
        Err(e) => return Ending::infra(e.outcome(), "AgentSetupError", error_chain(&e)),
    };
    rec.agent = Some(agent);
    if agent == AgentEnd::Cancelled {
        // The verifier never runs for a cancelled agent: there is nothing to grade.
        return Ending::infra(
            trial_outcome(&Validity::Valid, None, agent),
            "Cancelled",
            "the run was cancelled",
        );
    }

    observer.phase(&plan.trial_name, PhaseEvent::Phase(TrialPhase::Verifier));
    let t = PhaseClock::start();
    let verified = match verifier::verify(plan, stage, sandbox, fresh, rec).await {
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
    rec.close_phase(TrialPhase::Verifier, t);
    let (reward, rewards) = match verified {
        Ok(r) => r,
        Err(ending) => return ending,
    };
    Ending {
        outcome: trial_outcome(&Validity::Valid, Some(reward), agent),
        reward: Some(reward),
        rewards,
        exception: match agent {
            AgentEnd::TimedOut => Some(("AgentTimeoutError".into(), "agent timed out".into())),
            AgentEnd::Errored => Some(("AgentError".into(), "the model call failed".into())),
            _ => None,
        },
    }
}
