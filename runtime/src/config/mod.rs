//! Layered user configuration of the daily CLI: flags > `GEODE_*` environment > the project's
//! `.geode/config.toml` > `~/.geode/config.toml` > defaults. Every effective value remembers
//! which layer it came from, so `geode config explain` can say why a value is what it is.
//!
//! Files hold plain TOML; a table nests keys (`[prompt] sections = ["Rules"]` is the key
//! `prompt.sections`). The environment variable of a key is `GEODE_` plus the key upper-cased
//! with dots as underscores (`GEODE_PROMPT_SECTIONS`); a list in the environment or a flag is
//! comma-separated. Unknown keys in a file are an error naming the file, so a typo is not
//! silently ignored.
//!
//! The one structured part is `[mcp.servers.NAME]` (MCP servers, `mcp::settings`): those tables
//! are parsed into typed values and kept per file, since a project's servers run only after
//! `geode trust`. A project's `.mcp.json` (Claude Code's servers) joins its servers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::mcp::settings::{McpServerConfig, McpSettings, parse_mcp_json, parse_mcp_table};

mod settings;
pub mod source;
pub use settings::{PromptSettings, Settings};
pub use source::{ConfigError, Setting, Source};

/// One known key: its name, default and what it is for.
#[derive(Debug, Clone, Copy)]
pub struct KeySpec {
    /// The key as written in a configuration file.
    pub key: &'static str,
    /// The value when no flag, variable or file sets it; empty for none.
    pub default: &'static str,
    /// One line on what the key is for.
    pub help: &'static str,
}

/// Every key the CLI reads. Defaults are strings, parsed by the typed accessors.
pub const KEYS: &[KeySpec] = &[
    KeySpec {
        key: "model",
        default: "",
        help: "model route (provider:model, scripted:FILE, nop); empty: none configured yet",
    },
    KeySpec {
        key: "effort",
        default: "",
        help: "reasoning effort (empty: the model's default)",
    },
    KeySpec {
        key: "hitl",
        default: "everything",
        help: "which calls prompt: everything, dangerous_only, auto",
    },
    KeySpec {
        key: "approval_timeout_secs",
        default: "120",
        help: "an unanswered approval is denied after this many seconds",
    },
    KeySpec {
        key: "global_lanes",
        default: "4",
        help: "turns the daemon runs at once across sessions",
    },
    KeySpec {
        key: "socket",
        default: "",
        help: "daemon socket (empty: $GEODE_HOME/cli.sock)",
    },
    KeySpec {
        key: "sandbox",
        default: "workspace-write",
        help: "how shell commands run: workspace-write (the workspace writable, the rest of the \
               machine read-only, no network) or off; a project's file cannot turn it off",
    },
    KeySpec {
        key: "sandbox.network",
        default: "false",
        help: "whether sandboxed commands reach the network (true or false)",
    },
    KeySpec {
        key: "max_rounds",
        default: "50",
        help: "rounds per turn",
    },
    KeySpec {
        key: "prompt.sections",
        default: "",
        help: "GEODE.md sections (## headings) in the system prompt; empty: all",
    },
    KeySpec {
        key: "prompt.rules_dir",
        default: ".geode/rules",
        help: "directory of rule files (*.md) added to the system prompt",
    },
    KeySpec {
        key: "hooks",
        default: "",
        help: "command hook files (TOML, comma-separated; a project's only once trusted)",
    },
    KeySpec {
        key: "prompt.memory",
        default: ".geode/MEMORY.md",
        help: "project memory file added to the system prompt",
    },
];

/// The inputs of the layering, gathered by the caller (injected so tests need no real home).
#[derive(Debug, Default, Clone)]
pub struct Layers {
    /// `(key, value)` from command-line flags.
    pub flags: Vec<(String, String)>,
    /// The `GEODE_*` variables of the environment.
    pub env: BTreeMap<String, String>,
    /// The project's `.geode/config.toml`, when it exists.
    pub project_file: Option<PathBuf>,
    /// `~/.geode/config.toml` (`$GEODE_HOME/config.toml`), when it exists.
    pub user_file: Option<PathBuf>,
    /// The project's `.mcp.json` (Claude Code's MCP servers), when it exists.
    pub mcp_json: Option<PathBuf>,
}

impl Layers {
    /// The layers of a real process: this environment, `project_root/.geode/config.toml` and
    /// `geode_home/config.toml` when present.
    pub fn discover(flags: Vec<(String, String)>, project_root: &Path, geode_home: &Path) -> Self {
        let env = std::env::vars()
            .filter(|(k, _)| k.starts_with("GEODE_"))
            .collect();
        let existing = |p: PathBuf| p.is_file().then_some(p);
        Layers {
            flags,
            env,
            project_file: existing(project_root.join(".geode").join("config.toml")),
            user_file: existing(geode_home.join("config.toml")),
            mcp_json: existing(project_root.join(".mcp.json")),
        }
    }
}

/// The effective configuration: one setting per known key, and the MCP servers per file.
#[derive(Debug, Clone)]
pub struct Config {
    settings: BTreeMap<&'static str, Setting>,
    mcp: McpSettings,
    /// The same settings parsed, once, by `resolve`.
    typed: Settings,
}

/// `GEODE_` plus the key upper-cased, dots as underscores.
pub fn env_var(key: &str) -> String {
    format!("GEODE_{}", key.replace('.', "_").to_uppercase())
}

/// A config file: its flat keys and its `[mcp]` servers.
struct FileContents {
    flat: BTreeMap<String, String>,
    mcp: Vec<crate::mcp::settings::McpServerConfig>,
}

fn parse_file(
    path: &Path,
    project: bool,
) -> Result<(toml::Table, Vec<crate::mcp::settings::McpServerConfig>), ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut table: toml::Table = toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    // `[images]` (the image store and registry mirrors) and `[environment]` (what trials
    // trust) belong to the harness, which reads them itself; they are no setting of a session.
    table.remove("images");
    table.remove("environment");
    let mcp = match table.remove("mcp") {
        Some(value) => parse_mcp_table(value, path, project)?,
        None => Vec::new(),
    };
    Ok((table, mcp))
}

fn read_file(path: &Path, project: bool) -> Result<FileContents, ConfigError> {
    let (table, mcp) = parse_file(path, project)?;
    let mut out = BTreeMap::new();
    flatten("", &table, &mut out);
    for key in out.keys() {
        if !KEYS.iter().any(|k| k.key == key) {
            return Err(ConfigError::UnknownKey {
                path: path.to_path_buf(),
                key: key.clone(),
                known: KEYS.iter().map(|k| k.key).collect::<Vec<_>>().join(", "),
            });
        }
    }
    Ok(FileContents { flat: out, mcp })
}

/// Only the MCP servers of the layers' files (their flat keys are not checked): for drivers
/// that take no other setting from config files (`geode exec`).
pub fn mcp_settings(layers: &Layers) -> Result<McpSettings, ConfigError> {
    let mut mcp = McpSettings {
        project_file: layers.project_file.clone(),
        ..McpSettings::default()
    };
    if let Some(p) = &layers.user_file {
        mcp.user = parse_file(p, false)?.1;
    }
    if let Some(p) = &layers.project_file {
        mcp.project = parse_file(p, true)?.1;
    }
    add_mcp_json(&mut mcp.project, layers)?;
    Ok(mcp)
}

/// The servers of the project's `.mcp.json` after `project`'s, except those a server of the
/// same name in `.geode/config.toml` already declares (GEODE's table may carry a policy).
fn add_mcp_json(project: &mut Vec<McpServerConfig>, layers: &Layers) -> Result<(), ConfigError> {
    let Some(path) = &layers.mcp_json else {
        return Ok(());
    };
    for server in parse_mcp_json(path)? {
        if !project.iter().any(|p| p.name == server.name) {
            project.push(server);
        }
    }
    Ok(())
}

/// The items of a comma-separated value (a list in the environment or a flag), trimmed, empty
/// ones dropped.
fn list_items(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn flatten(prefix: &str, table: &toml::Table, out: &mut BTreeMap<String, String>) {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        let value = match v {
            toml::Value::Table(t) => {
                flatten(&key, t, out);
                continue;
            }
            toml::Value::String(s) => s.clone(),
            toml::Value::Array(items) => items
                .iter()
                .map(|i| match i {
                    toml::Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect::<Vec<_>>()
                .join(","),
            other => other.to_string(),
        };
        out.insert(key, value);
    }
}

impl Config {
    /// Resolve every key through the layers, highest first.
    pub fn resolve(layers: &Layers) -> Result<Config, ConfigError> {
        let empty = || FileContents {
            flat: BTreeMap::new(),
            mcp: Vec::new(),
        };
        let project_contents = match &layers.project_file {
            Some(p) => read_file(p, true)?,
            None => empty(),
        };
        let user_contents = match &layers.user_file {
            Some(p) => read_file(p, false)?,
            None => empty(),
        };
        let mut project_servers = project_contents.mcp;
        add_mcp_json(&mut project_servers, layers)?;
        let mcp = McpSettings {
            user: user_contents.mcp,
            project: project_servers,
            project_file: layers.project_file.clone(),
        };
        let (project, user) = (project_contents.flat, user_contents.flat);
        let mut settings = BTreeMap::new();
        for spec in KEYS {
            let var = env_var(spec.key);
            let flag = layers.flags.iter().rev().find(|(k, _)| k == spec.key);
            let setting = if let Some((_, v)) = flag {
                Setting {
                    value: v.clone(),
                    source: Source::Flag(format!("--{}", spec.key.replace(['.', '_'], "-"))),
                }
            } else if let Some(v) = layers.env.get(&var) {
                Setting {
                    value: v.clone(),
                    source: Source::Env(var),
                }
            } else if let (Some(v), Some(p)) = (project.get(spec.key), &layers.project_file) {
                Setting {
                    value: v.clone(),
                    source: Source::Project(p.clone()),
                }
            } else if let (Some(v), Some(p)) = (user.get(spec.key), &layers.user_file) {
                Setting {
                    value: v.clone(),
                    source: Source::User(p.clone()),
                }
            } else {
                Setting {
                    value: spec.default.to_string(),
                    source: Source::Default,
                }
            };
            settings.insert(spec.key, setting);
        }
        // Every key is parsed now, so a bad value fails at start, naming its layer.
        let typed = Settings::parse(&settings)?;
        let cfg = Config {
            settings,
            mcp,
            typed,
        };
        cfg.command_sandbox(Vec::new())?;
        Ok(cfg)
    }

    /// The MCP servers of the user and project files (project ones still need a trust check).
    pub fn mcp(&self) -> &McpSettings {
        &self.mcp
    }

    /// Every key, typed.
    pub fn settings(&self) -> &Settings {
        &self.typed
    }

    /// The effective setting of `key` and where it came from; `None` for an unknown key.
    pub fn get(&self, key: &str) -> Option<&Setting> {
        self.settings.get(key)
    }

    /// The value of a known key (empty for an unknown one).
    pub fn value(&self, key: &str) -> &str {
        self.settings.get(key).map_or("", |s| s.value.as_str())
    }

    /// How shell commands run, `hidden` folders emptied inside the sandbox (GEODE's home). A
    /// project's file may tighten the sandbox but not turn it off: a repository would otherwise
    /// unconfine the commands of whoever opens it.
    pub fn command_sandbox(
        &self,
        hidden: Vec<PathBuf>,
    ) -> Result<crate::tools::workspace::CommandSandbox, ConfigError> {
        use crate::tools::workspace::{CommandSandbox, SandboxPolicy};
        let invalid = |key: &str, message: &str| settings::invalid(&self.settings, key, message);
        let from_project = |key: &str| {
            self.settings
                .get(key)
                .is_some_and(|s| matches!(s.source, Source::Project(_)))
        };
        let network = match self.value("sandbox.network") {
            "false" => false,
            "true" if from_project("sandbox.network") => {
                return Err(invalid(
                    "sandbox.network",
                    "a project's configuration cannot open the network; set it in the user's \
                     configuration, GEODE_SANDBOX_NETWORK or a flag",
                ));
            }
            "true" => true,
            _ => return Err(invalid("sandbox.network", "true or false")),
        };
        match self.value("sandbox") {
            "workspace-write" => Ok(CommandSandbox::WorkspaceWrite(SandboxPolicy {
                network,
                hidden,
            })),
            "off" if from_project("sandbox") => Err(invalid(
                "sandbox",
                "a project's configuration cannot turn the sandbox off; use `--sandbox off` or \
                 the user's configuration",
            )),
            "off" => Ok(CommandSandbox::Off),
            _ => Err(invalid("sandbox", "workspace-write or off")),
        }
    }

    /// `key = value  (source)` lines, one per key, for `geode config explain`.
    pub fn explain(&self) -> String {
        let width = KEYS.iter().map(|k| k.key.len()).max().unwrap_or(0);
        let mut out = String::new();
        for spec in KEYS {
            if let Some(s) = self.settings.get(spec.key) {
                out.push_str(&format!(
                    "{:width$} = {:?}  ({})\n",
                    spec.key,
                    s.value,
                    s.source,
                    width = width
                ));
            }
        }
        for server in self.mcp.user.iter().chain(&self.mcp.project) {
            let policy = match &server.policy {
                Some(p) => format!("policy {}", p.safety),
                None => "no policy".to_string(),
            };
            out.push_str(&format!(
                "mcp.servers.{} = {}, {}  ({})\n",
                server.name, server.transport, policy, server.origin
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn each_layer_overrides_the_ones_below() {
        let dir = tempfile::tempdir().unwrap();
        let user = dir.path().join("user.toml");
        let project = dir.path().join("project.toml");
        std::fs::write(
            &user,
            "model = \"oracle\"\nhitl = \"auto\"\nglobal_lanes = 2\nmax_rounds = 9\n",
        )
        .unwrap();
        std::fs::write(
            &project,
            "model = \"scripted:project.json\"\nhitl = \"dangerous_only\"\nglobal_lanes = 3\n\
             [prompt]\nsections = [\"Rules\", \"Style\"]\n",
        )
        .unwrap();
        let layers = Layers {
            flags: vec![("model".into(), "nop".into())],
            env: BTreeMap::from([("GEODE_HITL".into(), "everything".into())]),
            project_file: Some(project.clone()),
            user_file: Some(user.clone()),
            mcp_json: None,
        };
        let c = Config::resolve(&layers).unwrap();
        assert_eq!(c.value("model"), "nop");
        assert_eq!(c.settings().model, Some("nop".parse().unwrap()));
        assert_eq!(
            c.get("model").unwrap().source,
            Source::Flag("--model".into())
        );
        assert_eq!(c.settings().hitl, crate::policy::HitlLevel::Everything);
        assert_eq!(
            c.get("hitl").unwrap().source,
            Source::Env("GEODE_HITL".into())
        );
        assert_eq!(c.settings().global_lanes, 3);
        assert_eq!(
            c.get("global_lanes").unwrap().source,
            Source::Project(project)
        );
        assert_eq!(c.settings().max_rounds, 9);
        assert_eq!(c.get("max_rounds").unwrap().source, Source::User(user));
        assert_eq!(c.settings().prompt.sections, vec!["Rules", "Style"]);
        assert_eq!(c.settings().socket, None);
        assert_eq!(c.get("socket").unwrap().source, Source::Default);
        let text = c.explain();
        assert!(
            text.contains("model") && text.contains("(flag --model)"),
            "{text}"
        );
    }

    #[test]
    fn mcp_server_tables_are_typed_and_kept_per_file() {
        let dir = tempfile::tempdir().unwrap();
        let user = dir.path().join("user.toml");
        let project = dir.path().join("project.toml");
        std::fs::write(
            &user,
            "model = \"nop\"\n[mcp.servers.files]\ncommand = \"srv\"\n\
             [mcp.servers.files.policy]\nsafety = \"safe\"\n",
        )
        .unwrap();
        std::fs::write(
            &project,
            "max_rounds = 3\n[mcp.servers.web]\nurl = \"http://127.0.0.1:9/mcp\"\n",
        )
        .unwrap();
        let layers = Layers {
            project_file: Some(project.clone()),
            user_file: Some(user.clone()),
            ..Layers::default()
        };
        let c = Config::resolve(&layers).unwrap();
        assert_eq!(c.settings().max_rounds, 3);
        assert_eq!(c.mcp().user.len(), 1);
        assert_eq!(c.mcp().user[0].name, "files");
        assert_eq!(c.mcp().project.len(), 1);
        assert_eq!(c.mcp().project_file.as_ref(), Some(&project));
        assert!(c.mcp().project[0].policy.is_none());
        let text = c.explain();
        assert!(
            text.contains("mcp.servers.files = stdio srv, policy safe"),
            "{text}"
        );
        assert!(
            text.contains("mcp.servers.web = http http://127.0.0.1:9/mcp, no policy"),
            "{text}"
        );
        let only = mcp_settings(&layers).unwrap();
        assert_eq!(&only, c.mcp());
        // A bad server table names the file and the field.
        std::fs::write(&project, "[mcp.servers.web]\nurl = 3\n").unwrap();
        let err = Config::resolve(&layers).unwrap_err().to_string();
        assert!(
            err.contains("project.toml") && err.contains("mcp.servers.web"),
            "{err}"
        );
    }

    #[test]
    fn an_unknown_key_or_a_bad_number_names_its_origin() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(&f, "modle = \"x\"\n").unwrap();
        let layers = Layers {
            project_file: Some(f),
            ..Layers::default()
        };
        let err = Config::resolve(&layers).unwrap_err().to_string();
        assert!(err.contains("unknown key \"modle\""), "{err}");
        let layers = Layers {
            env: BTreeMap::from([("GEODE_GLOBAL_LANES".into(), "many".into())]),
            ..Layers::default()
        };
        let err = Config::resolve(&layers).unwrap_err().to_string();
        assert!(err.contains("env GEODE_GLOBAL_LANES"), "{err}");
        // Each typed key refuses what it cannot read, naming the key and where it came from.
        for (var, value, key) in [
            ("GEODE_HITL", "sometimes", "hitl"),
            ("GEODE_MODEL", "no-such-provider:x", "model"),
            ("GEODE_EFFORT", "loud", "effort"),
            ("GEODE_GLOBAL_LANES", "0", "global_lanes"),
            ("GEODE_MAX_ROUNDS", "99999999999", "max_rounds"),
        ] {
            let layers = Layers {
                env: BTreeMap::from([(var.into(), value.into())]),
                ..Layers::default()
            };
            let err = Config::resolve(&layers).unwrap_err().to_string();
            assert!(err.contains(key) && err.contains(var), "{var}: {err}");
        }
    }
}
