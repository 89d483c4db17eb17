//! Task packs in Harbor format, loaded exactly as users write them, and their content hashes.
//!
//! A task is a folder with `task.toml`, `instruction.md`, `environment/`, `tests/test.sh` and
//! optionally `solution/solve.sh`. Any 1.x `task.toml` loads: unknown keys are ignored, known
//! keys with a wrong type are an error naming the file and the field. A broken task is
//! reported next to the pack; it never stops the others from loading.
//!
//! Identity: the task hash is SHA-256 over every file of the folder (relative path, mode and
//! bytes, each length-prefixed, in path order), so renaming a folder or a pack changes
//! nothing; the pack hash covers the ordered task hashes plus the trials per task.

use std::collections::BTreeMap;
use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::env::NetworkPolicy;
use crate::env::compose::{self, Compose, ComposeError};

/// SHA-256 (hex) of a task folder's content.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TaskHash(pub String);

/// SHA-256 (hex) of a pack: ordered task hashes plus trials per task.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PackHash(pub String);

impl fmt::Display for TaskHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for PackHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

fn invalid(path: &Path, message: impl Into<String>) -> PackError {
    PackError::Invalid {
        path: path.display().to_string(),
        message: message.into(),
    }
}

fn io_err(path: &Path, source: std::io::Error) -> PackError {
    PackError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// `task.toml`, every section optional.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct TaskConfig {
    pub schema_version: Option<String>,
    /// Older Harbor files put the format version at the top as `version`.
    pub version: Option<String>,
    pub task: TaskSection,
    /// Free-form: difficulty, category, tags, time estimates.
    pub metadata: toml::Table,
    pub agent: AgentSection,
    pub verifier: VerifierSection,
    pub solution: SolutionSection,
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
    #[serde(default)]
    pub agent: AgentSection,
    #[serde(default)]
    pub verifier: VerifierSection,
    /// Stop the remaining steps when this step's rewards fall short: a number gates the
    /// `reward` key, a table each key it names (a missing key counts as below).
    #[serde(default)]
    pub min_reward: Option<MinReward>,
    /// Run after the step's setup, before its agent (beside the task's own).
    #[serde(default)]
    pub healthcheck: Option<Healthcheck>,
    #[serde(default)]
    pub artifacts: Vec<ArtifactEntry>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum MinReward {
    Reward(f64),
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
    Path(String),
    Table {
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

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct TaskSection {
    pub name: Option<String>,
    pub version: Option<String>,
    pub description: Option<String>,
    /// Strings or `{name, email}` tables, as users write them.
    pub authors: Vec<toml::Value>,
    pub keywords: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct AgentSection {
    pub timeout_sec: Option<f64>,
    pub user: Option<String>,
    pub network_mode: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct VerifierSection {
    pub timeout_sec: Option<f64>,
    pub env: BTreeMap<String, String>,
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
    pub command: String,
    /// The compose service it runs in; only `main` exists without compose.
    #[serde(default = "main_service")]
    pub service: String,
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

/// `[environment.healthcheck]`, with Docker's HEALTHCHECK meaning and Harbor's defaults: after
/// the environment starts, `command` runs until it exits 0; failures during `start_period_sec`
/// do not count, and `retries` consecutive failures after it fail the trial's setup.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Healthcheck {
    pub command: String,
    #[serde(default = "five")]
    pub interval_sec: f64,
    #[serde(default = "thirty")]
    pub timeout_sec: f64,
    #[serde(default)]
    pub start_period_sec: f64,
    #[serde(default = "five")]
    pub start_interval_sec: f64,
    #[serde(default = "three")]
    pub retries: u32,
}

fn five() -> f64 {
    5.0
}

fn thirty() -> f64 {
    30.0
}

fn three() -> u32 {
    3
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct SolutionSection {
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct EnvironmentSection {
    pub build_timeout_sec: Option<f64>,
    pub docker_image: Option<String>,
    pub cpus: Option<f64>,
    pub memory_mb: Option<u64>,
    pub storage_mb: Option<u64>,
    /// Harbor's deprecated sizes (`"2G"`, `"512M"`), read into `memory_mb`/`storage_mb` at load.
    pub memory: Option<String>,
    pub storage: Option<String>,
    /// `linux` (the default) or `windows`; only Linux runs here.
    pub os: Option<String>,
    pub gpus: Option<u64>,
    pub gpu_types: Option<Vec<String>>,
    pub tpu: Option<toml::Value>,
    /// Skills inside the environment for the agent (Harbor copies them to the agent's skills
    /// folder).
    pub skills_dir: Option<String>,
    pub healthcheck: Option<Healthcheck>,
    /// MCP servers the task offers its agent (Harbor's `[[environment.mcp_servers]]`).
    pub mcp_servers: Vec<toml::Table>,
    /// `public`, `no-network` or `allowlist`.
    pub network_mode: Option<String>,
    pub allowed_hosts: Vec<String>,
    pub allow_internet: Option<bool>,
    pub env: BTreeMap<String, String>,
    pub workdir: Option<String>,
    /// Values for the Dockerfile's ARGs (`docker build --build-arg NAME=VALUE`).
    pub build_args: BTreeMap<String, String>,
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
    fn resolve_sizes(&mut self, section: &str, file: &Path) -> Result<(), PackError> {
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
const DEFAULT_AGENT_TIMEOUT: f64 = 600.0;
const DEFAULT_VERIFIER_TIMEOUT: f64 = 600.0;
const DEFAULT_BUILD_TIMEOUT: f64 = 600.0;

fn seconds(value: Option<f64>, default: f64) -> Duration {
    Duration::from_secs_f64(
        value
            .filter(|v| v.is_finite() && *v > 0.0)
            .unwrap_or(default),
    )
}

/// The longest timeout a task may ask for (a week): anything longer is a typo, and
/// `Duration` cannot hold every float anyway (`1e300` would panic).
const MAX_TIMEOUT_SEC: f64 = 7.0 * 24.0 * 3600.0;

/// What `network_mode` may say (Harbor's three, and `none` for `no-network`).
const NETWORK_MODES: &[&str] = &["public", "no-network", "allowlist", "none"];

/// A host name (RFC 1123 labels) or an IP literal: what `allowed_hosts` may list.
fn is_host(text: &str) -> bool {
    if text.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    let name = text.strip_suffix('.').unwrap_or(text);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

impl TaskConfig {
    /// Values that would be misread rather than refused: an absurd timeout, a mistyped
    /// network mode (which must never grant the network).
    fn validate(&self, file: &Path) -> Result<(), PackError> {
        for (field, value) in [
            ("agent.timeout_sec", self.agent.timeout_sec),
            ("verifier.timeout_sec", self.verifier.timeout_sec),
            (
                "environment.build_timeout_sec",
                self.environment.build_timeout_sec,
            ),
        ] {
            if let Some(v) = value
                && !(v.is_finite() && v > 0.0 && v <= MAX_TIMEOUT_SEC)
            {
                return Err(invalid(
                    file,
                    format!(
                        "{field} = {v:?}: must be a number of seconds above 0 and at most \
                         {MAX_TIMEOUT_SEC} (a week)"
                    ),
                ));
            }
        }
        let mut waits: Vec<(String, f64)> = Vec::new();
        if let Some(h) = &self.environment.healthcheck {
            for (name, v) in [
                ("interval_sec", h.interval_sec),
                ("timeout_sec", h.timeout_sec),
                ("start_interval_sec", h.start_interval_sec),
            ] {
                waits.push((format!("environment.healthcheck.{name}"), v));
            }
        }
        for (i, hook) in self.verifier.collect.iter().enumerate() {
            waits.push((
                format!("verifier.collect[{i}].timeout_sec"),
                hook.timeout_sec,
            ));
        }
        for (field, v) in waits {
            if !(v.is_finite() && v > 0.0 && v <= MAX_TIMEOUT_SEC) {
                return Err(invalid(
                    file,
                    format!(
                        "{field} = {v:?}: must be a number of seconds above 0 and at most a week"
                    ),
                ));
            }
        }
        let none = None;
        let verifier_mode = self
            .verifier
            .environment
            .as_ref()
            .map_or(&none, |e| &e.network_mode);
        for (field, value) in [
            ("environment.network_mode", &self.environment.network_mode),
            ("agent.network_mode", &self.agent.network_mode),
            ("verifier.environment.network_mode", verifier_mode),
        ] {
            if let Some(mode) = value
                && !NETWORK_MODES.contains(&mode.as_str())
            {
                return Err(invalid(
                    file,
                    format!(
                        "{field} = {mode:?}: expected one of {}",
                        NETWORK_MODES.join(", ")
                    ),
                ));
            }
        }
        match self.verifier.environment_mode.as_deref() {
            None | Some("separate") => {}
            Some("shared") if self.verifier.environment.is_some() => {
                return Err(invalid(
                    file,
                    "verifier.environment_mode = \"shared\" with a [verifier.environment]: \
                     either drop the environment or make the mode \"separate\"",
                ));
            }
            Some("shared") => {}
            Some(other) => {
                return Err(invalid(
                    file,
                    format!(
                        "verifier.environment_mode = {other:?}: expected \"shared\" or \"separate\""
                    ),
                ));
            }
        }
        for (i, artifact) in self.artifacts.iter().enumerate() {
            let source = artifact.source();
            let dest = artifact.destination();
            let problem = if !source.starts_with('/') {
                Some("the source must be an absolute path")
            } else if source.split('/').any(|c| c == "..") || dest.split('/').any(|c| c == "..") {
                Some("no `..` in a source or destination")
            } else if dest.is_empty() || dest.starts_with('/') {
                Some("the destination must be a relative path under artifacts/")
            } else if dest == "manifest.json" {
                Some("artifacts/manifest.json is reserved")
            } else {
                None
            };
            if let Some(problem) = problem {
                return Err(invalid(
                    file,
                    format!("artifacts[{i}] (source {source:?}): {problem}"),
                ));
            }
        }
        let hosts = &self.environment.allowed_hosts;
        if self.network_mode() == Some("allowlist")
            && self.environment.allow_internet != Some(false)
            && hosts.is_empty()
        {
            return Err(invalid(
                file,
                "environment.allowed_hosts is empty: network_mode = \"allowlist\" needs at least \
                 one host (\"no-network\" is the mode for none)",
            ));
        }
        self.validate_steps(file)?;
        for (i, host) in hosts.iter().enumerate() {
            if !is_host(host) {
                return Err(invalid(
                    file,
                    format!(
                        "environment.allowed_hosts[{i}] = {host:?}: expected a host name or an IP \
                         address (no scheme, port, path or wildcard)"
                    ),
                ));
            }
        }
        Ok(())
    }

    fn validate_steps(&self, file: &Path) -> Result<(), PackError> {
        match self.multi_step_reward_strategy.as_deref() {
            None | Some("mean") | Some("final") => {}
            Some(other) => {
                return Err(invalid(
                    file,
                    format!(
                        "multi_step_reward_strategy = {other:?}: expected \"mean\" or \"final\""
                    ),
                ));
            }
        }
        let Some(steps) = &self.steps else {
            return Ok(());
        };
        if steps.is_empty() {
            return Err(invalid(
                file,
                "steps = []: a multi-step task needs at least one step",
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, step) in steps.iter().enumerate() {
            let name = &step.name;
            let portable = !name.is_empty()
                && name != "."
                && name != ".."
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
            if !portable {
                return Err(invalid(
                    file,
                    format!(
                        "steps[{i}].name = {name:?}: a folder name of letters, digits, `.`, `_` and `-`"
                    ),
                ));
            }
            if !seen.insert(name.to_ascii_lowercase()) {
                return Err(invalid(
                    file,
                    format!(
                        "steps[{i}].name = {name:?}: step names must be unique (ignoring case)"
                    ),
                ));
            }
            for (field, v) in [
                ("agent.timeout_sec", step.agent.timeout_sec),
                ("verifier.timeout_sec", step.verifier.timeout_sec),
            ] {
                if let Some(v) = v
                    && !(v.is_finite() && v > 0.0 && v <= MAX_TIMEOUT_SEC)
                {
                    return Err(invalid(
                        file,
                        format!(
                            "steps[{i}].{field} = {v:?}: must be a number of seconds above 0 and at most a week"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The reward strategy of a multi-step task (`mean` unless it says `final`).
    pub fn step_rewards(&self) -> StepRewards {
        match self.multi_step_reward_strategy.as_deref() {
            Some("final") => StepRewards::Final,
            _ => StepRewards::Mean,
        }
    }

    pub fn agent_timeout(&self) -> Duration {
        seconds(self.agent.timeout_sec, DEFAULT_AGENT_TIMEOUT)
    }

    pub fn verifier_timeout(&self) -> Duration {
        seconds(self.verifier.timeout_sec, DEFAULT_VERIFIER_TIMEOUT)
    }

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

    fn network_mode(&self) -> Option<&str> {
        self.environment
            .network_mode
            .as_deref()
            .or(self.agent.network_mode.as_deref())
    }

    fn metadata_str(&self, key: &str) -> Option<&str> {
        self.metadata.get(key).and_then(toml::Value::as_str)
    }

    pub fn category(&self) -> &str {
        self.metadata_str("category").unwrap_or("uncategorized")
    }

    pub fn difficulty(&self) -> &str {
        self.metadata_str("difficulty").unwrap_or("unknown")
    }
}

/// A multi-step task's steps: each needs `steps/<name>/instruction.md` (not empty) and a test
/// script, its own `steps/<name>/tests/test.sh` or the task's `tests/test.sh`.
fn load_steps(dir: &Path, config: &TaskConfig) -> Result<Vec<Step>, PackError> {
    let mut steps = Vec::new();
    for section in config.steps.iter().flatten() {
        let step_dir = dir.join("steps").join(&section.name);
        let path = step_dir.join("instruction.md");
        let instruction = std::fs::read_to_string(&path).map_err(|e| io_err(&path, e))?;
        if instruction.trim().is_empty() {
            return Err(invalid(&path, "the step's instruction is empty"));
        }
        let own = step_dir.join("tests/test.sh");
        if !own.is_file() && !dir.join("tests/test.sh").is_file() {
            return Err(invalid(
                &own,
                format!(
                    "missing: step {:?} needs steps/{0}/tests/test.sh or the task's tests/test.sh",
                    section.name
                ),
            ));
        }
        steps.push(Step {
            config: section.clone(),
            dir: step_dir,
            instruction,
        });
    }
    Ok(steps)
}

/// One loaded task.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    /// `task.name` when set, else the folder name.
    pub id: String,
    pub dir: PathBuf,
    pub config: TaskConfig,
    /// The task's instruction; empty for a multi-step task without a top-level one.
    pub instruction: String,
    pub hash: TaskHash,
    /// A multi-step task's steps, in order (empty for a single-step task).
    pub steps: Vec<Step>,
    /// `environment/docker-compose.yaml`, when the task has one.
    pub compose: Option<Compose>,
}

/// One step of a multi-step task, loaded: its `[[steps]]` entry and `steps/<name>/`.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub config: StepSection,
    pub dir: PathBuf,
    pub instruction: String,
}

impl Step {
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// `steps/<name>/solution/solve.sh`, when the step has its own.
    pub fn solution(&self) -> Option<PathBuf> {
        let p = self.dir.join("solution").join("solve.sh");
        p.is_file().then_some(p)
    }

    pub fn tests_dir(&self) -> PathBuf {
        self.dir.join("tests")
    }

    /// The step's agent timeout, else the task's, else Harbor's default.
    pub fn agent_timeout(&self, task: &TaskConfig) -> Duration {
        seconds(
            self.config.agent.timeout_sec.or(task.agent.timeout_sec),
            DEFAULT_AGENT_TIMEOUT,
        )
    }

    /// The step's verifier timeout, else the task's, else Harbor's default.
    pub fn verifier_timeout(&self, task: &TaskConfig) -> Duration {
        seconds(
            self.config
                .verifier
                .timeout_sec
                .or(task.verifier.timeout_sec),
            DEFAULT_VERIFIER_TIMEOUT,
        )
    }
}

impl Task {
    /// Load and validate one task folder.
    pub fn load(dir: &Path) -> Result<Task, PackError> {
        let toml_path = dir.join("task.toml");
        let text = std::fs::read_to_string(&toml_path).map_err(|e| io_err(&toml_path, e))?;
        let mut config: TaskConfig =
            toml::from_str(&text).map_err(|e| invalid(&toml_path, e.to_string().trim_end()))?;
        if let Some(v) = config
            .schema_version
            .as_deref()
            .or(config.version.as_deref())
            && !v.starts_with('1')
        {
            return Err(invalid(
                &toml_path,
                format!("schema_version {v:?} is not a 1.x task format"),
            ));
        }
        config.validate(&toml_path)?;
        let steps = load_steps(dir, &config)?;
        let instruction_path = dir.join("instruction.md");
        let instruction = match std::fs::read_to_string(&instruction_path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !steps.is_empty() => {
                String::new()
            }
            Err(e) => return Err(io_err(&instruction_path, e)),
            Ok(text) if text.trim().is_empty() && steps.is_empty() => {
                return Err(invalid(&instruction_path, "the instruction is empty"));
            }
            Ok(text) => text,
        };
        config
            .environment
            .resolve_sizes("environment", &toml_path)?;
        if let Some(verifier) = config.verifier.environment.as_mut() {
            verifier.resolve_sizes("verifier.environment", &toml_path)?;
        }
        let compose = compose::load(&dir.join("environment")).map_err(|e| match e {
            ComposeError::Io { path, source } => PackError::Io { path, source },
            ComposeError::Invalid {
                path,
                field,
                message,
            } => PackError::Invalid {
                path,
                message: format!("{field}: {message}"),
            },
        })?;
        let dockerfile = dir.join("environment").join("Dockerfile");
        if !dockerfile.is_file()
            && config.environment.docker_image.is_none()
            && compose
                .as_ref()
                .and_then(|c| c.main.image.as_ref())
                .is_none()
        {
            return Err(invalid(
                &dockerfile,
                "missing: environment/ needs a Dockerfile, or task.toml an [environment] \
                 docker_image, or docker-compose.yaml an image for `main`",
            ));
        }
        let folder = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(Task {
            id: config.task.name.clone().unwrap_or(folder),
            dir: dir.to_path_buf(),
            hash: hash_task_dir(dir)?,
            config,
            instruction,
            steps,
            compose,
        })
    }

    pub fn solution(&self) -> Option<PathBuf> {
        let p = self.dir.join("solution").join("solve.sh");
        p.is_file().then_some(p)
    }

    pub fn environment_dir(&self) -> PathBuf {
        self.dir.join("environment")
    }

    pub fn tests_dir(&self) -> PathBuf {
        self.dir.join("tests")
    }

    /// Harbor requires `tests/test.sh`; a task without one still loads, and each of its trials
    /// ends `verifier_crashed` (infrastructure, never the agent's failure).
    pub fn has_test_script(&self) -> bool {
        self.tests_dir().join("test.sh").is_file()
    }
}

/// A folder of tasks; broken tasks are kept as errors beside the good ones.
#[derive(Debug)]
pub struct TaskPack {
    pub root: PathBuf,
    pub tasks: Vec<Task>,
    pub broken: Vec<PackError>,
}

impl TaskPack {
    /// Every subfolder holding a `task.toml` is a task (sorted by id). A folder that is itself a
    /// task loads as a pack of one.
    pub fn load(root: &Path) -> Result<TaskPack, PackError> {
        if !root.is_dir() {
            return Err(invalid(root, "not a directory"));
        }
        let mut dirs = Vec::new();
        if root.join("task.toml").is_file() {
            dirs.push(root.to_path_buf());
        } else {
            for entry in std::fs::read_dir(root).map_err(|e| io_err(root, e))? {
                let path = entry.map_err(|e| io_err(root, e))?.path();
                if path.join("task.toml").is_file() {
                    dirs.push(path);
                }
            }
        }
        let mut tasks = Vec::new();
        let mut broken = Vec::new();
        for dir in dirs {
            match Task::load(&dir) {
                Ok(t) => tasks.push(t),
                Err(e) => broken.push(e),
            }
        }
        tasks.sort_by(|a, b| a.id.cmp(&b.id));
        if let Some(pair) = tasks.windows(2).find(|w| w[0].id == w[1].id) {
            return Err(invalid(
                &pair[1].dir,
                format!("task name {:?} is used by two folders", pair[1].id),
            ));
        }
        Ok(TaskPack {
            root: root.to_path_buf(),
            tasks,
            broken,
        })
    }

    /// Keep the tasks whose id matches a shell-style glob (`*`, `?`).
    pub fn filter(&mut self, pattern: &str) {
        self.tasks.retain(|t| glob_match(pattern, &t.id));
    }

    pub fn hash(&self, trials_per_task: u32) -> PackHash {
        pack_hash(
            self.tasks.iter().map(|t| (t.id.as_str(), &t.hash)),
            trials_per_task,
        )
    }
}

/// The pack hash over (id, task hash) pairs in id order plus the trials per task.
pub fn pack_hash<'a>(
    tasks: impl Iterator<Item = (&'a str, &'a TaskHash)>,
    trials_per_task: u32,
) -> PackHash {
    let mut entries: Vec<(&str, &TaskHash)> = tasks.collect();
    entries.sort();
    let canonical = serde_json::json!({
        "schema": "geode.pack.v1",
        "tasks": entries.iter().map(|(id, h)| serde_json::json!([id, h.0])).collect::<Vec<_>>(),
        "trials_per_task": trials_per_task,
    });
    PackHash(hex::encode(Sha256::digest(
        canonical.to_string().as_bytes(),
    )))
}

fn put(hasher: &mut Sha256, bytes: &[u8]) {
    hasher.update((bytes.len() as u64).to_le_bytes());
    hasher.update(bytes);
}

/// SHA-256 over (relative path, mode, content) of every file below `dir`, in path order.
/// Symbolic links contribute their target, not what they point to.
pub fn hash_task_dir(dir: &Path) -> Result<TaskHash, PackError> {
    let mut hasher = Sha256::new();
    hasher.update(b"geode.task.v1\0");
    let walker = walkdir::WalkDir::new(dir)
        .follow_links(false)
        .sort_by_file_name();
    for entry in walker {
        let entry = entry.map_err(|e| {
            invalid(
                e.path().unwrap_or(dir),
                format!("cannot walk the task folder: {e}"),
            )
        })?;
        let ft = entry.file_type();
        if ft.is_dir() {
            continue;
        }
        let path = entry.path();
        let rel = path.strip_prefix(dir).unwrap_or(path);
        let meta = entry.metadata().map_err(|e| invalid(path, e.to_string()))?;
        put(&mut hasher, rel.to_string_lossy().as_bytes());
        hasher.update(meta.permissions().mode().to_le_bytes());
        if ft.is_symlink() {
            let target = std::fs::read_link(path).map_err(|e| io_err(path, e))?;
            put(&mut hasher, target.to_string_lossy().as_bytes());
        } else {
            let bytes = std::fs::read(path).map_err(|e| io_err(path, e))?;
            put(&mut hasher, &bytes);
        }
    }
    Ok(TaskHash(hex::encode(hasher.finalize())))
}

/// Shell-style glob: `*` any run, `?` one character.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("geode/*", "geode/git-log"));
        assert!(glob_match("*log*", "geode/git-log"));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "abbc"));
        assert!(!glob_match("geode/x*", "geode/git"));
    }

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

    #[test]
    fn allowed_hosts_are_names_or_addresses() {
        for good in [
            "deb.debian.org",
            "pypi.org.",
            "10.0.0.1",
            "::1",
            "a-b.example",
        ] {
            assert!(is_host(good), "{good}");
        }
        for bad in [
            "",
            "https://pypi.org",
            "pypi.org:443",
            "*.debian.org",
            "a/b",
            "-a.org",
            "a..b",
        ] {
            assert!(!is_host(bad), "{bad}");
        }
    }
}
