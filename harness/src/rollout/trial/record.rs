//! What a trial's phases leave behind for its row and its `result.json`: the ending (outcome,
//! rewards, exception) and the record (phase times, usage, integrity signals, notes). Every
//! phase writes here, so these types sit apart from any one phase.

use std::collections::BTreeMap;
use std::time::Instant;

use geode_crucible::IntegritySignals;
use geode_graders::TrialOutcome;

use super::phase::TrialPhase;
use crate::env::EnvError;
use crate::store::TrialUsage;
use geode_graders::AgentEnd;

pub(super) fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// What the trial ended with, before it becomes a store row.
pub(super) struct Ending {
    pub(super) outcome: TrialOutcome,
    pub(super) reward: Option<f64>,
    pub(super) rewards: BTreeMap<String, f64>,
    pub(super) exception: Option<(String, String)>,
}

impl Ending {
    pub(super) fn infra(outcome: TrialOutcome, class: &str, message: impl Into<String>) -> Self {
        Ending {
            outcome,
            reward: None,
            rewards: BTreeMap::new(),
            exception: Some((class.to_string(), message.into())),
        }
    }
}

pub(super) fn env_outcome(e: &EnvError) -> TrialOutcome {
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
pub(super) struct Record {
    pub(super) phases: BTreeMap<TrialPhase, f64>,
    /// Each phase's `[started, finished]` timestamps (Harbor's `TimingInfo`); over a
    /// multi-step trial, the first start and the last finish (`phases` sums the seconds).
    pub(super) phase_times: BTreeMap<TrialPhase, [String; 2]>,
    /// The latest pass of each phase, for a step's own timing.
    pub(super) last_times: BTreeMap<TrialPhase, [String; 2]>,
    /// A multi-step trial's steps as Harbor's `StepResult`s, with GEODE's `outcome`.
    pub(super) steps: Vec<serde_json::Value>,
    pub(super) usage: TrialUsage,
    /// The agent session's scaffold hash when the task's skills joined it (else the run's).
    pub(super) scaffold_hash: Option<String>,
    /// What the integrity signals were, in words, for result.json.
    pub(super) integrity: Vec<String>,
    pub(super) signals: IntegritySignals,
    pub(super) notes: Vec<String>,
    pub(super) agent: Option<AgentEnd>,
    /// The image the trial started from (base, cache hit, build time).
    pub(super) image: Option<serde_json::Value>,
    /// The agent ran something in the sandbox (a dispatched tool call, or a timeline that
    /// could not be read to show otherwise): from then on, a verifier that fails is its doing
    /// unless the host shows a cause of its own.
    pub(super) agent_acted: bool,
}

/// When a phase began, on the wall clock (for the record) and the monotonic one (for its length).
pub(super) struct PhaseClock {
    pub(super) at: String,
    pub(super) t: Instant,
}

impl PhaseClock {
    pub(super) fn start() -> Self {
        PhaseClock {
            at: now(),
            t: Instant::now(),
        }
    }
}

impl Record {
    pub(super) fn close_phase(&mut self, phase: TrialPhase, clock: PhaseClock) {
        *self.phases.entry(phase).or_default() += clock.t.elapsed().as_secs_f64();
        let ends = [clock.at, now()];
        self.phase_times
            .entry(phase)
            .and_modify(|t| t[1] = ends[1].clone())
            .or_insert_with(|| ends.clone());
        self.last_times.insert(phase, ends);
    }
}

/// A verifier that ran after the agent acted and could not finish, or left no usable reward
/// (timed out, could not start its command, wrote nothing or garbage): the agent's failure,
/// reward 0 with the flag naming what happened, never an excluded infrastructure error. What
/// the host can show is its own (a missing tests/test.sh, a sandbox lost from outside, the
/// verifier's own sandbox not starting) is never brought here. No integrity counter moves: the
/// cause may be the task's, and the flag says which verifier failure it was.
pub(super) fn verifier_failed_after_agent(rec: &mut Record, ending: Ending) -> Ending {
    let (class, message) = ending.exception.unwrap_or_default();
    rec.integrity.push(format!(
        "verifier_failed_after_agent_acted: {} ({class}: {message})",
        ending.outcome.as_str()
    ));
    Ending {
        outcome: TrialOutcome::Failed,
        reward: Some(0.0),
        rewards: BTreeMap::from([("reward".to_string(), 0.0)]),
        exception: Some((class, message)),
    }
}

/// The exception class of a sandbox that a process inside it took down.
pub(super) const BROKEN_CLASS: &str = "SandboxBrokenByAgent";

/// A process inside the sandbox took it down (its agent killed, the disk filled so the
/// verifier cannot start): the agent gains nothing by it. It scores as a failure with an
/// integrity flag, never as an excluded infrastructure error.
pub(super) fn broke_its_sandbox(rec: &mut Record, why: &str) -> Ending {
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
