//! Checks of a parsed `task.toml` for values that would be misread rather than refused: an
//! absurd timeout, a mistyped network mode (which must never grant the network), a path that
//! escapes, a step folder name that is not portable.

use std::path::Path;

use super::config::EnvironmentSection;
use super::{PackError, TaskConfig, invalid};

/// `Duration` cannot hold every float anyway (`1e300` would panic).
const MAX_TIMEOUT_SEC: f64 = 7.0 * 24.0 * 3600.0;

/// The sane range of each resource a task may ask for: below, nothing runs (no CPU, a few
/// megabytes); above, no machine this runs on has it, and a number that large is a typo (a value
/// in bytes, an extra digit) that would otherwise surface as a lost sandbox.
const CPUS: std::ops::RangeInclusive<f64> = 0.01..=1024.0;
/// 16 MiB to 16 TiB.
const MEMORY_MB: std::ops::RangeInclusive<u64> = 16..=16 * 1024 * 1024;
/// 16 MiB to 16 TiB (the trial's disk is a sparse file of this size).
const STORAGE_MB: std::ops::RangeInclusive<u64> = 16..=16 * 1024 * 1024;
/// GPUs are refused per trial anyway; a count past this is a typo.
const GPUS: std::ops::RangeInclusive<u64> = 0..=64;

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

impl EnvironmentSection {
    /// `cpus`, `memory_mb`, `storage_mb` and `gpus` in their sane ranges (after `memory` and
    /// `storage` strings were read into the `_mb` fields), each error naming `section.field`.
    pub(super) fn validate_resources(&self, section: &str, file: &Path) -> Result<(), PackError> {
        let out_of_range = |field: &str, value: String, range: String, unit: &str| {
            invalid(
                file,
                format!("{section}.{field} = {value}: must be {range}{unit}"),
            )
        };
        if let Some(cpus) = self.cpus
            && !(cpus.is_finite() && CPUS.contains(&cpus))
        {
            let range = format!("from {} to {}", CPUS.start(), CPUS.end());
            return Err(out_of_range("cpus", format!("{cpus:?}"), range, " CPUs"));
        }
        for (field, value, range) in [
            ("memory_mb", self.memory_mb, MEMORY_MB),
            ("storage_mb", self.storage_mb, STORAGE_MB),
            ("gpus", self.gpus, GPUS),
        ] {
            if let Some(v) = value
                && !range.contains(&v)
            {
                let unit = if field == "gpus" {
                    ""
                } else {
                    " (MiB; 16 TiB at most)"
                };
                let range = format!("from {} to {}", range.start(), range.end());
                return Err(out_of_range(field, v.to_string(), range, unit));
            }
        }
        Ok(())
    }
}

impl TaskConfig {
    /// Values that would be misread rather than refused: an absurd timeout, a mistyped
    /// network mode (which must never grant the network).
    pub(super) fn validate(&self, file: &Path) -> Result<(), PackError> {
        self.validate_timeouts(file)?;
        self.validate_waits(file)?;
        self.validate_network_modes(file)?;
        self.validate_verifier_mode(file)?;
        self.validate_artifacts(file)?;
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

    /// The phase timeouts: the agent's, the verifier's, the image build's.
    fn validate_timeouts(&self, file: &Path) -> Result<(), PackError> {
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
        Ok(())
    }

    /// The healthcheck's and the collect hooks' waits, which have no default to fall back on.
    fn validate_waits(&self, file: &Path) -> Result<(), PackError> {
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
        Ok(())
    }

    /// Every `network_mode` is one GEODE knows: a typo must never grant the network.
    fn validate_network_modes(&self, file: &Path) -> Result<(), PackError> {
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
        Ok(())
    }

    /// `verifier.environment_mode`, and a `[verifier.environment]` only where it is used.
    fn validate_verifier_mode(&self, file: &Path) -> Result<(), PackError> {
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
        Ok(())
    }

    /// Artifact paths: an absolute source, a destination under `artifacts/`, no `..`.
    fn validate_artifacts(&self, file: &Path) -> Result<(), PackError> {
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
