//! The agent under test: GEODE's own runtime (the default), a built-in third-party agent
//! (Claude Code, Codex CLI, mini-swe-agent) installed as a cached layer over the task's image,
//! or any program (`command:...`). A third-party agent runs inside the trial's sandbox with the
//! trial's model gateway as its only provider.

mod choice;
pub mod install;
pub mod spec;

pub use choice::{AgentChoice, AgentChoiceError};
pub use install::{InstallError, InstalledAgent};
pub use spec::{BUILTIN, BuiltinAgent, LaunchCommand, LaunchContext};

use std::path::Path;

/// The agent of a run's trials, resolved where the run starts: a built-in agent with its
/// layer installed.
#[derive(Debug, Clone, Default)]
pub enum TrialAgent {
    /// GEODE's own runtime.
    #[default]
    Geode,
    /// A built-in third-party agent and its installed layer.
    Builtin {
        /// Which one.
        agent: &'static BuiltinAgent,
        /// Its layer on this machine.
        installed: InstalledAgent,
    },
    /// Any program (`command:...`), run with `sh -c` in the sandbox.
    Command(String),
}

impl TrialAgent {
    /// `choice` made ready on this machine: a built-in agent's layer installed under
    /// `agents_dir` (once per agent and version; later runs find it).
    pub fn resolve(choice: &AgentChoice, agents_dir: &Path) -> Result<TrialAgent, InstallError> {
        Ok(match choice {
            AgentChoice::Geode => TrialAgent::Geode,
            AgentChoice::Builtin { agent, version } => TrialAgent::Builtin {
                agent,
                installed: install::ensure(agents_dir, agent, version)?,
            },
            AgentChoice::Command(program) => TrialAgent::Command(program.clone()),
        })
    }

    /// GEODE's own runtime.
    pub fn is_geode(&self) -> bool {
        matches!(self, TrialAgent::Geode)
    }

    /// How the agent starts headless on `ctx`'s instruction; `None` for GEODE's own runtime,
    /// which runs in the harness, not as a program in the sandbox.
    pub fn launch(&self, ctx: &LaunchContext<'_>) -> Option<LaunchCommand> {
        match self {
            TrialAgent::Geode => None,
            TrialAgent::Builtin { agent, .. } => Some(agent.launch(ctx)),
            TrialAgent::Command(program) => Some(spec::command_launch(program, ctx)),
        }
    }

    /// The layer a trial stacks over its task's image, if the agent has one.
    pub fn layer(&self) -> Option<&Path> {
        match self {
            TrialAgent::Builtin { installed, .. } => Some(&installed.layer),
            TrialAgent::Geode | TrialAgent::Command(_) => None,
        }
    }

    /// The agent's name as results give it.
    pub fn name(&self) -> &str {
        match self {
            TrialAgent::Geode => "geode",
            TrialAgent::Builtin { agent, .. } => agent.name,
            TrialAgent::Command(_) => "command",
        }
    }

    /// The installed version of a built-in agent.
    pub fn version(&self) -> Option<&str> {
        match self {
            TrialAgent::Builtin { installed, .. } => Some(&installed.version),
            TrialAgent::Geode | TrialAgent::Command(_) => None,
        }
    }

    /// The agent as Harbor's files name it.
    pub fn harbor(&self) -> HarborAgent<'_> {
        HarborAgent {
            name: self.name(),
            version: self.version(),
        }
    }

    /// `name@version` for a built-in agent, `command:...` for a program, `geode` for ours.
    pub fn label(&self) -> String {
        match self {
            TrialAgent::Geode => "geode".into(),
            TrialAgent::Builtin { agent, installed } => {
                format!("{}@{}", agent.name, installed.version)
            }
            TrialAgent::Command(program) => format!("command:{program}"),
        }
    }
}

/// The agent as Harbor names it: `geode` (GEODE's own loop, whatever model drives it),
/// `claude-code`, `codex`, `mini-swe-agent` (Harbor's own names for those agents) or `command`,
/// with the version installed.
#[derive(Debug, Clone, Copy)]
pub struct HarborAgent<'a> {
    /// The agent's name.
    pub name: &'a str,
    /// The installed version; GEODE's own is this build's.
    pub version: Option<&'a str>,
}

impl HarborAgent<'_> {
    /// The version Harbor's files give: the installed one, or this build's for GEODE's own.
    pub fn version(&self) -> &str {
        self.version.unwrap_or(env!("CARGO_PKG_VERSION"))
    }
}
