//! `--agent NAME[@VERSION]` as typed: GEODE's own runtime, one of the built-in third-party
//! agents at a version, or any program (`command:...`), parsed once where a run starts.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::spec::{BUILTIN, BuiltinAgent};

/// The agent a run puts on its tasks.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum AgentChoice {
    /// GEODE's own runtime in the harness, tools acting inside the sandbox (the default).
    #[default]
    Geode,
    /// A built-in third-party agent installed into the sandbox at a pinned version.
    Builtin {
        /// Which one.
        agent: &'static BuiltinAgent,
        /// The package version installed (the agent's pinned default unless the person named one).
        version: String,
    },
    /// Any program that reads the instruction: run inside the sandbox with `sh -c`, the
    /// instruction in `$GEODE_INSTRUCTION` and on its standard input, the gateway's URLs and
    /// token in its environment.
    Command(String),
}

/// Why an `--agent` value is not one.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AgentChoiceError {
    /// The name is not a built-in agent.
    #[error(
        "--agent {given:?}: no such agent; the built-in ones are geode, {known}, or command:PROGRAM"
    )]
    Unknown {
        /// What was given.
        given: String,
        /// The built-in names, comma-separated.
        known: String,
    },
    /// A version was given where none can be, or an empty or unsafe one.
    #[error("--agent {given:?}: {why}")]
    Version {
        /// What was given.
        given: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// `command:` with nothing after it.
    #[error("--agent command: needs a program, as in command:./my-agent.sh")]
    EmptyCommand,
}

impl AgentChoice {
    /// The agent's name as results and Harbor's `config.json` give it (`geode`, `claude-code`,
    /// `command`).
    pub fn name(&self) -> &str {
        match self {
            AgentChoice::Geode => "geode",
            AgentChoice::Builtin { agent, .. } => agent.name,
            AgentChoice::Command(_) => "command",
        }
    }

    /// The version installed, for a built-in third-party agent.
    pub fn version(&self) -> Option<&str> {
        match self {
            AgentChoice::Builtin { version, .. } => Some(version),
            AgentChoice::Geode | AgentChoice::Command(_) => None,
        }
    }

    /// GEODE's own runtime.
    pub fn is_geode(&self) -> bool {
        matches!(self, AgentChoice::Geode)
    }
}

impl FromStr for AgentChoice {
    type Err = AgentChoiceError;

    fn from_str(given: &str) -> Result<Self, Self::Err> {
        if let Some(program) = given.strip_prefix("command:") {
            if program.trim().is_empty() {
                return Err(AgentChoiceError::EmptyCommand);
            }
            return Ok(AgentChoice::Command(program.to_string()));
        }
        let (name, version) = match given.split_once('@') {
            Some((name, version)) => (name, Some(version)),
            None => (given, None),
        };
        if name == "geode" {
            return match version {
                None => Ok(AgentChoice::Geode),
                Some(_) => Err(AgentChoiceError::Version {
                    given: given.into(),
                    why: "geode is this build's own runtime and has no other version",
                }),
            };
        }
        let Some(agent) = BUILTIN.iter().find(|a| a.name == name) else {
            return Err(AgentChoiceError::Unknown {
                given: given.into(),
                known: BUILTIN
                    .iter()
                    .map(|a| a.name)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        let version = match version {
            None => agent.version.to_string(),
            Some(v) if valid_version(v) => v.to_string(),
            Some(_) => {
                return Err(AgentChoiceError::Version {
                    given: given.into(),
                    why: "a version is letters, digits, '.', '-' and '+' (as 2.1.332 or 0.171.0)",
                });
            }
        };
        Ok(AgentChoice::Builtin { agent, version })
    }
}

/// A version goes into a package spec and a cache folder's name: nothing that could be a
/// path, a flag or a range.
fn valid_version(v: &str) -> bool {
    !v.is_empty()
        && !v.starts_with(['-', '.'])
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'))
}

impl fmt::Display for AgentChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentChoice::Geode => f.write_str("geode"),
            AgentChoice::Builtin { agent, version } => write!(f, "{}@{version}", agent.name),
            AgentChoice::Command(program) => write!(f, "command:{program}"),
        }
    }
}

impl Serialize for AgentChoice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for AgentChoice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_versions_and_commands_parse_and_print_back() {
        assert_eq!("geode".parse::<AgentChoice>().unwrap(), AgentChoice::Geode);
        let cc: AgentChoice = "claude-code".parse().unwrap();
        assert_eq!(cc.name(), "claude-code");
        assert_eq!(
            cc.to_string(),
            format!("claude-code@{}", cc.version().unwrap())
        );
        let pinned: AgentChoice = "codex@0.170.0".parse().unwrap();
        assert_eq!(pinned.version(), Some("0.170.0"));
        assert_eq!(pinned.to_string().parse::<AgentChoice>().unwrap(), pinned);
        let cmd: AgentChoice = "command:./agent.sh --fast".parse().unwrap();
        assert_eq!(cmd, AgentChoice::Command("./agent.sh --fast".into()));
        assert_eq!(cmd.to_string(), "command:./agent.sh --fast");
    }

    #[test]
    fn bad_values_say_what_is_wrong() {
        let unknown = "claude".parse::<AgentChoice>().unwrap_err().to_string();
        assert!(
            unknown.contains("claude-code") && unknown.contains("mini-swe-agent"),
            "{unknown}"
        );
        assert!(matches!(
            "geode@1".parse::<AgentChoice>(),
            Err(AgentChoiceError::Version { .. })
        ));
        for bad in ["codex@", "codex@../x", "codex@^1.0", "codex@--registry=x"] {
            assert!(
                matches!(
                    bad.parse::<AgentChoice>(),
                    Err(AgentChoiceError::Version { .. })
                ),
                "{bad}"
            );
        }
        assert_eq!(
            "command: ".parse::<AgentChoice>(),
            Err(AgentChoiceError::EmptyCommand)
        );
    }

    #[test]
    fn serde_keeps_the_text() {
        let choice: AgentChoice = "mini-swe-agent@2.4.6".parse().unwrap();
        let json = serde_json::to_string(&choice).unwrap();
        assert_eq!(json, "\"mini-swe-agent@2.4.6\"");
        assert_eq!(serde_json::from_str::<AgentChoice>(&json).unwrap(), choice);
        assert!(serde_json::from_str::<AgentChoice>("\"nope\"").is_err());
    }
}
