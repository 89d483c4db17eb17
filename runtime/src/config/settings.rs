//! The daily configuration as types. The layers stay text (so `geode config explain` can show
//! each value with its source); every key is parsed here once, when the layers are resolved,
//! so a bad value fails at start naming the layer it came from, and the drivers read fields
//! instead of matching on strings.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::{ConfigError, Setting, Source};
use crate::model::catalog::{Route, parse_route};
use crate::model::effort::Effort;
use crate::policy::HitlLevel;

/// Every key of [`super::KEYS`] but the command sandbox's, typed; see
/// [`Config::command_sandbox`] for that one (it needs the folders to hide, which only the driver
/// knows).
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The configured route; `None` when no layer names one yet.
    pub model: Option<Route>,
    /// `None`: the model's default effort.
    pub effort: Option<Effort>,
    /// Which calls ask a person before they run.
    pub hitl: HitlLevel,
    /// How long an approval waits before the call is denied.
    pub approval_timeout: Duration,
    /// Turns the daemon runs at once across its sessions (at least 1).
    pub global_lanes: usize,
    /// The daemon's socket; `None`: `$GEODE_HOME/cli.sock`.
    pub socket: Option<PathBuf>,
    /// Model rounds a turn may take.
    pub max_rounds: u32,
    /// What the system prompt is made of.
    pub prompt: PromptSettings,
    /// Command hook files, as written: the driver takes relative ones from the folder of the
    /// layer that names them.
    pub hooks: Vec<PathBuf>,
}

/// The `prompt.*` keys.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptSettings {
    /// GEODE.md sections (`##` headings) to include; empty: all.
    pub sections: Vec<String>,
    /// Folder of rule files (`*.md`) added to the system prompt.
    pub rules_dir: PathBuf,
    /// The project's memory file added to the system prompt.
    pub memory: PathBuf,
}

impl Settings {
    /// Parse every key of the resolved layers; the first bad value is refused with its key,
    /// value and layer.
    pub(super) fn parse(layers: &BTreeMap<&'static str, Setting>) -> Result<Settings, ConfigError> {
        let cfg = Resolved(layers);
        let model = match cfg.value("model").trim() {
            "" => None,
            text => Some(parse_route(text).map_err(|e| cfg.invalid("model", e.to_string()))?),
        };
        let effort = match cfg.value("effort").trim() {
            "" => None,
            text => Some(text.parse::<Effort>().map_err(|_| {
                let levels: Vec<&str> = Effort::ALL.iter().map(|e| e.as_str()).collect();
                cfg.invalid("effort", format!("one of {}", levels.join(", ")))
            })?),
        };
        let hitl = cfg
            .value("hitl")
            .trim()
            .parse::<HitlLevel>()
            .map_err(|_| cfg.invalid("hitl", "everything, dangerous_only or auto".into()))?;
        let global_lanes = cfg.number("global_lanes")?;
        if global_lanes == 0 {
            return Err(cfg.invalid("global_lanes", "at least 1".into()));
        }
        let max_rounds = u32::try_from(cfg.number("max_rounds")?)
            .map_err(|_| cfg.invalid("max_rounds", "at most 4294967295".into()))?;
        let path = |key: &str| PathBuf::from(cfg.value(key));
        Ok(Settings {
            model,
            effort,
            hitl,
            approval_timeout: Duration::from_secs(cfg.number("approval_timeout_secs")?),
            global_lanes: usize::try_from(global_lanes).unwrap_or(usize::MAX),
            socket: Some(cfg.value("socket"))
                .filter(|s| !s.trim().is_empty())
                .map(PathBuf::from),
            max_rounds,
            prompt: PromptSettings {
                sections: cfg.list("prompt.sections"),
                rules_dir: path("prompt.rules_dir"),
                memory: path("prompt.memory"),
            },
            hooks: cfg.list("hooks").into_iter().map(PathBuf::from).collect(),
        })
    }
}

/// The resolved layers, read as text, key by key.
struct Resolved<'a>(&'a BTreeMap<&'static str, Setting>);

impl Resolved<'_> {
    fn value(&self, key: &str) -> &str {
        self.0.get(key).map_or("", |s| s.value.as_str())
    }

    /// A comma-separated list, empty items dropped.
    fn list(&self, key: &str) -> Vec<String> {
        super::list_items(self.value(key))
    }

    fn number(&self, key: &str) -> Result<u64, ConfigError> {
        self.value(key)
            .trim()
            .parse::<u64>()
            .map_err(|e| self.invalid(key, e.to_string()))
    }

    fn invalid(&self, key: &str, message: String) -> ConfigError {
        invalid(self.0, key, &message)
    }
}

/// The refusal of `key`'s value, naming the layer it came from.
pub(super) fn invalid(
    layers: &BTreeMap<&'static str, Setting>,
    key: &str,
    message: &str,
) -> ConfigError {
    let setting = layers.get(key);
    ConfigError::Invalid {
        key: key.to_string(),
        value: setting.map_or_else(String::new, |s| s.value.clone()),
        origin: setting.map_or(Source::Default, |s| s.source.clone()),
        message: message.to_string(),
    }
}
