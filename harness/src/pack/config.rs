//! `task.toml` as Harbor writes it: every section optional, unknown keys ignored, and the
//! defaults and derived values (timeouts, network policy, verifier mode) the trial reads.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{PackError, glob_match, invalid};
pub use crate::env::Healthcheck;
use crate::env::NetworkPolicy;

/// `task.toml`, every section optional.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct TaskConfig {
    /// The task format's version; accepted whatever its value, as Harbor does.
    pub schema_version: Option<String>,
    /// Older Harbor files put the format version at the top as `version`.
    pub version: Option<String>,
    /// `[task]`: the task's name and descriptive fields.
    pub task: TaskSection,
    /// Free-form: difficulty, category, tags, time estimates.
    pub metadata: toml::Table,
    /// `[agent]`: the agent phase's timeout and network mode.
    pub agent: AgentSection,
    /// `[verifier]`: how the tests run.
    pub verifier: VerifierSection,
    /// `[solution]`: settings of the reference solution.
    pub solution: SolutionSection,
    /// `[environment]`: the sandbox the trial runs in.
    pub environment: EnvironmentSection,
    /// Paths copied out of the agent's sandbox when it finishes (Harbor's `artifacts`): into
    /// the trial's `artifacts/`, and into a separate verifier's environment at the same path.
    pub artifacts: Vec<ArtifactEntry>,
    /// Harbor's multi-step tasks: steps run in order in one environment, each with its own
    /// instruction and tests (`steps/<name>/`).
    pub steps: Option<Vec<StepSection>>,
    /// `mean` (the default: per-key means over the steps that were verified) or `final` (the
    /// last step's rewards).
    pub multi_step_reward_strategy: Option<String>,
}

/// One `[[steps]]` entry.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct StepSection {
    /// The folder under `steps/`: letters, digits, `.`, `_` and `-`.
    pub name: String,
    /// The step's own `[agent]` settings; its timeout overrides the task's.
    #[serde(default)]
    pub agent: AgentSection,
    /// The step's own `[verifier]` settings; its env adds to the task's.
    #[serde(default)]
    pub verifier: VerifierSection,
    /// Stop the remaining steps when this step's rewards fall short: a number gates the
    /// `reward` key, a table each key it names (a missing key counts as below).
    #[serde(default)]
    pub min_reward: Option<MinReward>,
    /// Run after the step's setup, before its agent (beside the task's own).
    #[serde(default)]
    pub healthcheck: Option<Healthcheck>,
    /// Paths copied out of the sandbox after this step, as the task's `artifacts`.
    #[serde(default)]
    pub artifacts: Vec<ArtifactEntry>,
}

/// A step's `min_reward`: one threshold for `reward`, or one per reward key.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum MinReward {
    /// The least `reward` that lets the next steps run.
    Reward(f64),
    /// Reward key -> the least value it must reach.
    Keys(BTreeMap<String, f64>),
}

impl MinReward {
    /// The first key below its threshold (or missing), with its value; `None` when all pass.
    pub fn shortfall(&self, rewards: &BTreeMap<String, f64>) -> Option<(String, Option<f64>)> {
        let gates: Vec<(&str, f64)> = match self {
            MinReward::Reward(min) => vec![("reward", *min)],
            MinReward::Keys(keys) => keys.iter().map(|(k, v)| (k.as_str(), *v)).collect(),
        };
        gates
            .into_iter()
            .find_map(|(key, min)| match rewards.get(key) {
                Some(v) if *v >= min => None,
                got => Some((key.to_string(), got.copied())),
            })
    }
}

/// How a multi-step trial's rewards come from its steps' (`multi_step_reward_strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepRewards {
    /// Per-key means over the steps that have rewards; a key a step lacks counts 0 there.
    Mean,
    /// The last step's rewards as they are.
    Final,
}

/// One `artifacts` entry, as Harbor takes it: a path, or a table.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum ArtifactEntry {
    /// A path inside the sandbox, copied to the same path under `artifacts/`.
    Path(String),
    /// A path inside the sandbox with where to put it and what to leave out.
    Table {
        /// The path inside the sandbox (file or folder).
        source: String,
        /// Where under the trial's `artifacts/` (relative); the source's own path by default.
        #[serde(default)]
        destination: Option<String>,
        /// Names (globs) left out of a folder.
        #[serde(default)]
        exclude: Vec<String>,
    },
}

impl ArtifactEntry {
    /// The path inside the sandbox to copy out.
    pub fn source(&self) -> &str {
        match self {
            ArtifactEntry::Path(source) | ArtifactEntry::Table { source, .. } => source,
        }
    }

    /// Relative to the trial's `artifacts/`: the destination, or the source without its `/`.
    pub fn destination(&self) -> &str {
        match self {
            ArtifactEntry::Table {
                destination: Some(d),
                ..
            } if !d.is_empty() => d.trim_end_matches('/'),
            _ => self.source().trim_start_matches('/').trim_end_matches('/'),
        }
    }

    /// Whether a folder entry named `name` matches one of the `exclude` globs.
    pub fn excludes(&self, name: &str) -> bool {
        match self {
            ArtifactEntry::Table { exclude, .. } => exclude.iter().any(|g| glob_match(g, name)),
            ArtifactEntry::Path(_) => false,
        }
    }
}

/// Where the verifier runs (`[verifier] environment_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifierMode {
    /// In the agent's sandbox, with its services still running (Harbor's default).
    Shared,
    /// In a fresh sandbox from the task's image (or `[verifier.environment]`), with the
    /// declared artifacts copied in at their paths.
    Separate,
}

/// `[task]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct TaskSection {
    /// The task's id; the folder name when unset.
    pub name: Option<String>,
    /// The task's own version, free-form.
    pub version: Option<String>,
    /// A short description for people.
    pub description: Option<String>,
    /// Strings or `{name, email}` tables, as users write them.
    pub authors: Vec<toml::Value>,
    /// Free-form tags.
    pub keywords: Vec<String>,
}

/// `[agent]` (also a step's).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct AgentSection {
    /// Seconds the agent may run; Harbor's 600 when unset or not positive.
    pub timeout_sec: Option<f64>,
    /// Harbor's field; GEODE does not use it.
    pub user: Option<String>,
    /// The network mode when `[environment] network_mode` is unset.
    pub network_mode: Option<String>,
}

/// `[verifier]` (also a step's).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct VerifierSection {
    /// Seconds the tests may run; Harbor's 600 when unset or not positive.
    pub timeout_sec: Option<f64>,
    /// Extra environment of the test script.
    pub env: BTreeMap<String, String>,
    /// Harbor's field; GEODE does not use it.
    pub user: Option<String>,
    /// `shared` (default) or `separate` (a fresh environment for the verifier).
    pub environment_mode: Option<String>,
    /// The separate verifier's environment (implies `separate`); the task's own by default.
    pub environment: Option<EnvironmentSection>,
    /// Commands run after the agent phase, before artifacts are collected (Harbor's
    /// `[[verifier.collect]]`), to snapshot state into files.
    pub collect: Vec<CollectHook>,
}

/// One `[[verifier.collect]]` block.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct CollectHook {
    /// The shell command to run.
    pub command: String,
    /// The compose service it runs in; only `main` exists without compose.
    #[serde(default = "main_service")]
    pub service: String,
    /// Seconds it may run (default 60).
    #[serde(default = "collect_timeout")]
    pub timeout_sec: f64,
    /// Harbor's field; GEODE's sandbox runs every command as the image's user.
    #[serde(default)]
    pub user: Option<toml::Value>,
}

fn main_service() -> String {
    "main".into()
}

fn collect_timeout() -> f64 {
    60.0
}

/// `[solution]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct SolutionSection {
    /// Environment for the reference solution. Harbor's field; GEODE does not use it.
    pub env: BTreeMap<String, String>,
}

/// `[environment]` (also `[verifier.environment]`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct EnvironmentSection {
    /// Seconds the image build may take; Harbor's 600 when unset or not positive.
    pub build_timeout_sec: Option<f64>,
    /// A prebuilt image to run instead of building `environment/Dockerfile`.
    pub docker_image: Option<String>,
    /// CPU limit in cores (fractions allowed).
    pub cpus: Option<f64>,
    /// Memory limit in MB.
    pub memory_mb: Option<u64>,
    /// The trial's disk (its writable layer) in MB.
    pub storage_mb: Option<u64>,
    /// Harbor's deprecated sizes (`"2G"`, `"512M"`), read into `memory_mb`/`storage_mb` at load.
    pub memory: Option<String>,
    /// Harbor's deprecated storage size; see `memory`.
    pub storage: Option<String>,
    /// `linux` (the default) or `windows`; only Linux runs here.
    pub os: Option<String>,
    /// GPUs asked for; a task asking for any cannot run here.
    pub gpus: Option<u64>,
    /// GPU models accepted, named in the refusal.
    pub gpu_types: Option<Vec<String>>,
    /// A TPU request in any form; a task with one cannot run here.
    pub tpu: Option<toml::Value>,
    /// Skills inside the environment for the agent (Harbor copies them to the agent's skills
    /// folder).
    pub skills_dir: Option<String>,
    /// Run after the environment starts, before the agent, until it passes.
    pub healthcheck: Option<Healthcheck>,
    /// MCP servers the task offers its agent (Harbor's `[[environment.mcp_servers]]`).
    pub mcp_servers: Vec<toml::Table>,
    /// `public`, `no-network` or `allowlist`.
    pub network_mode: Option<String>,
    /// Host names or IP literals an `allowlist` network lets the trial reach.
    pub allowed_hosts: Vec<String>,
    /// `false` turns the network off whatever `network_mode` says.
    pub allow_internet: Option<bool>,
    /// Extra environment of every process of the trial.
    pub env: BTreeMap<String, String>,
    /// Harbor's field; GEODE does not use it.
    pub workdir: Option<String>,
    /// Values for the Dockerfile's ARGs (`docker build --build-arg NAME=VALUE`).
    pub build_args: BTreeMap<String, String>,
    /// GEODE's key (Harbor ignores it): the task asks for an X display of this size inside
    /// its sandbox, and with it grants its agent the `computer` tool.
    pub display: Option<DisplaySize>,
}

/// The size of a sandbox's X display, `"WIDTHxHEIGHT"` in task.toml.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub struct DisplaySize {
    /// Width in pixels, 64 to 4096.
    pub width: u32,
    /// Height in pixels, 64 to 4096.
    pub height: u32,
}

impl DisplaySize {
    /// Xvfb's limits are larger, but a screen beyond 4K is no desktop a task needs, and a
    /// tiny one cannot show a window.
    const RANGE: std::ops::RangeInclusive<u32> = 64..=4096;
}

impl TryFrom<String> for DisplaySize {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        let bad = || {
            format!(
                "display = {text:?}: expected \"WIDTHxHEIGHT\" such as \"1024x768\", each 64 to 4096"
            )
        };
        let (w, h) = text.split_once('x').ok_or_else(bad)?;
        let (width, height) = (w.parse().map_err(|_| bad())?, h.parse().map_err(|_| bad())?);
        if !Self::RANGE.contains(&width) || !Self::RANGE.contains(&height) {
            return Err(bad());
        }
        Ok(DisplaySize { width, height })
    }
}

impl From<DisplaySize> for String {
    fn from(size: DisplaySize) -> String {
        size.to_string()
    }
}

impl std::fmt::Display for DisplaySize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.width, self.height)
    }
}

/// Harbor's size strings: a number and `G`, `M` or `K` (case-insensitive), in MiB.
fn size_to_mb(text: &str) -> Option<u64> {
    let t = text.trim().to_ascii_uppercase();
    let (number, per_mb) = match t.chars().last()? {
        'G' => (&t[..t.len() - 1], 1024.0),
        'M' => (&t[..t.len() - 1], 1.0),
        'K' => (&t[..t.len() - 1], 1.0 / 1024.0),
        _ => return None,
    };
    let n: f64 = number.trim().parse().ok()?;
    (n.is_finite() && n >= 0.0).then_some((n * per_mb) as u64)
}

impl EnvironmentSection {
    /// Reads the deprecated `memory`/`storage` strings into `memory_mb`/`storage_mb`, as
    /// Harbor does; a value that disagrees with the `_mb` field is an error.
    pub(super) fn resolve_sizes(&mut self, section: &str, file: &Path) -> Result<(), PackError> {
        for (name, text, mb) in [
            ("memory", &self.memory, &mut self.memory_mb),
            ("storage", &self.storage, &mut self.storage_mb),
        ] {
            let Some(text) = text else { continue };
            let Some(parsed) = size_to_mb(text) else {
                return Err(invalid(
                    file,
                    format!("{section}.{name} = {text:?}: expected a size like \"2G\" or \"512M\""),
                ));
            };
            match mb {
                Some(given) if *given != parsed => {
                    return Err(invalid(
                        file,
                        format!(
                            "{section}.{name} = {text:?} ({parsed} MB) conflicts with \
                             {section}.{name}_mb = {given}"
                        ),
                    ));
                }
                _ => *mb = Some(parsed),
            }
        }
        Ok(())
    }

    /// Why no trial of this section can run on this machine: another OS, or an accelerator
    /// GEODE's sandbox does not give a trial.
    pub fn unsupported(&self) -> Option<String> {
        if let Some(os) = &self.os
            && !os.eq_ignore_ascii_case("linux")
        {
            return Some(format!(
                "environment.os = {os:?}: this machine runs only Linux trials"
            ));
        }
        if let Some(n) = self.gpus.filter(|n| *n > 0) {
            let types = self
                .gpu_types
                .as_ref()
                .map(|t| format!(" ({})", t.join(", ")))
                .unwrap_or_default();
            return Some(format!(
                "environment.gpus = {n}{types}: GEODE's sandbox gives a trial no GPU"
            ));
        }
        if self.tpu.is_some() {
            return Some("environment.tpu: GEODE's sandbox gives a trial no TPU".into());
        }
        None
    }

    /// What a sandbox of this section may reach, `mode` being the effective `network_mode`.
    pub fn network_policy(&self, mode: Option<&str>) -> NetworkPolicy {
        if self.allow_internet == Some(false) {
            return NetworkPolicy::Off;
        }
        match mode {
            Some("no-network") | Some("none") => NetworkPolicy::Off,
            Some("allowlist") => NetworkPolicy::Allowlist(self.allowed_hosts.clone()),
            _ => NetworkPolicy::Public,
        }
    }
}

/// Defaults when task.toml says nothing (Harbor's).
pub(super) const DEFAULT_AGENT_TIMEOUT: f64 = 600.0;
pub(super) const DEFAULT_VERIFIER_TIMEOUT: f64 = 600.0;
pub(super) const DEFAULT_BUILD_TIMEOUT: f64 = 600.0;

pub(super) fn seconds(value: Option<f64>, default: f64) -> Duration {
    Duration::from_secs_f64(
        value
            .filter(|v| v.is_finite() && *v > 0.0)
            .unwrap_or(default),
    )
}

impl TaskConfig {
    /// How a multi-step trial's rewards combine: `final` when so set, else the mean.
    pub fn step_rewards(&self) -> StepRewards {
        match self.multi_step_reward_strategy.as_deref() {
            Some("final") => StepRewards::Final,
            _ => StepRewards::Mean,
        }
    }

    /// `[agent] timeout_sec`, else 600 seconds.
    pub fn agent_timeout(&self) -> Duration {
        seconds(self.agent.timeout_sec, DEFAULT_AGENT_TIMEOUT)
    }

    /// `[verifier] timeout_sec`, else 600 seconds.
    pub fn verifier_timeout(&self) -> Duration {
        seconds(self.verifier.timeout_sec, DEFAULT_VERIFIER_TIMEOUT)
    }

    /// `[environment] build_timeout_sec`, else 600 seconds.
    pub fn build_timeout(&self) -> Duration {
        seconds(self.environment.build_timeout_sec, DEFAULT_BUILD_TIMEOUT)
    }

    /// What the trial may reach: off for `no-network` or `allow_internet = false`, only
    /// `allowed_hosts` for `allowlist`, else the public network. Checked by `validate`.
    pub fn network_policy(&self) -> NetworkPolicy {
        self.environment.network_policy(self.network_mode())
    }

    /// Harbor's rule: the mode when given, else `separate` when a verifier environment is.
    pub fn verifier_mode(&self) -> VerifierMode {
        match self.verifier.environment_mode.as_deref() {
            Some("separate") => VerifierMode::Separate,
            None if self.verifier.environment.is_some() => VerifierMode::Separate,
            _ => VerifierMode::Shared,
        }
    }

    pub(super) fn network_mode(&self) -> Option<&str> {
        self.environment
            .network_mode
            .as_deref()
            .or(self.agent.network_mode.as_deref())
    }

    fn metadata_str(&self, key: &str) -> Option<&str> {
        self.metadata.get(key).and_then(toml::Value::as_str)
    }

    /// `metadata.category`, else `uncategorized`.
    pub fn category(&self) -> &str {
        self.metadata_str("category").unwrap_or("uncategorized")
    }

    /// `metadata.difficulty`, else `unknown`.
    pub fn difficulty(&self) -> &str {
        self.metadata_str("difficulty").unwrap_or("unknown")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn network_modes() {
        let mut c = TaskConfig::default();
        assert_eq!(c.network_policy(), NetworkPolicy::Public);
        c.environment.network_mode = Some("no-network".into());
        assert_eq!(c.network_policy(), NetworkPolicy::Off);
        c.environment.network_mode = Some("allowlist".into());
        c.environment.allowed_hosts = vec!["deb.debian.org".into(), "10.1.2.3".into()];
        assert_eq!(
            c.network_policy(),
            NetworkPolicy::Allowlist(c.environment.allowed_hosts.clone())
        );
        c.environment.network_mode = Some("public".into());
        c.environment.allow_internet = Some(false);
        assert_eq!(c.network_policy(), NetworkPolicy::Off);
    }
}
