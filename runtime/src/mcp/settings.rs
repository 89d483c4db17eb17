//! The `[mcp.servers.NAME]` tables of a config file, parsed into typed values.
//!
//! ```toml
//! [mcp.servers.files]
//! command = "/path/to/server"      # a child process speaking MCP on stdio; or
//! # url = "http://127.0.0.1:8123/mcp"   (streamable HTTP)
//! args = ["--flag"]
//! env = { KEY = "v" }
//! [mcp.servers.files.policy]       # without it the server's tools are listed, never called
//! safety = "write"                 # safe | write | expensive | sensitive | dangerous
//! resources = ["db:main"]          # resource keys every call of the server's tools locks
//! effectful = true                 # calls change the world: effect receipts
//! tools = ["echo", "add"]          # optional allow-list of the server's tools
//! ```
//!
//! Errors name the file and the field (`mcp.servers.files.policy.safety`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::config::ConfigError;
use crate::policy::SafetyLevel;

/// Which config file declared a server. Project servers run only in a trusted project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerOrigin {
    /// `$GEODE_HOME/config.toml`.
    User(PathBuf),
    /// The project's `.geode/config.toml`.
    Project(PathBuf),
}

impl ServerOrigin {
    pub fn path(&self) -> &Path {
        match self {
            ServerOrigin::User(p) | ServerOrigin::Project(p) => p,
        }
    }
}

impl std::fmt::Display for ServerOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerOrigin::User(p) => write!(f, "user {}", p.display()),
            ServerOrigin::Project(p) => write!(f, "project {}", p.display()),
        }
    }
}

/// How GEODE reaches a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking MCP on its stdin/stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
    },
    /// Streamable HTTP at this URL; with `token_env`, every request carries
    /// `Authorization: Bearer $token_env` (the secret stays in the environment, not the file).
    Http {
        url: String,
        token_env: Option<String>,
    },
}

impl std::fmt::Display for McpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            McpTransport::Stdio { command, .. } => write!(f, "stdio {command}"),
            McpTransport::Http { url, .. } => write!(f, "http {url}"),
        }
    }
}

/// The resource policy a server declares; a tool is callable only under one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpPolicy {
    pub safety: SafetyLevel,
    /// Resource keys locked by every call of the server's tools.
    pub resources: Vec<String>,
    pub effectful: bool,
    /// Only these tools of the server are callable (`None`: all).
    pub tools: Option<Vec<String>>,
}

/// One configured server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    pub name: String,
    pub transport: McpTransport,
    pub policy: Option<McpPolicy>,
    pub origin: ServerOrigin,
}

/// The MCP servers of the two config files, kept apart: project servers need a trust check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McpSettings {
    pub user: Vec<McpServerConfig>,
    pub project: Vec<McpServerConfig>,
    /// The project's config file, when there is one (the file `geode trust` hashes).
    pub project_file: Option<PathBuf>,
}

impl McpSettings {
    pub fn is_empty(&self) -> bool {
        self.user.is_empty() && self.project.is_empty()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMcp {
    #[serde(default)]
    servers: BTreeMap<String, toml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    url: Option<String>,
    token_env: Option<String>,
    policy: Option<RawPolicy>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    safety: String,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    effectful: bool,
    tools: Option<Vec<String>>,
}

fn bad(path: &Path, field: &str, message: impl std::fmt::Display) -> ConfigError {
    ConfigError::Parse {
        path: path.to_path_buf(),
        message: format!("{field}: {message}"),
    }
}

/// Parse the `[mcp]` table of `path`. `project` says which layer the file is.
pub fn parse_mcp_table(
    value: toml::Value,
    path: &Path,
    project: bool,
) -> Result<Vec<McpServerConfig>, ConfigError> {
    let raw: RawMcp = value.try_into().map_err(|e| bad(path, "mcp", e))?;
    let mut out = Vec::new();
    for (name, table) in raw.servers {
        let field = format!("mcp.servers.{name}");
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(bad(
                path,
                &field,
                "a server name may hold only letters, digits, '_' and '-'",
            ));
        }
        let mut raw: RawServer = table.try_into().map_err(|e| bad(path, &field, e))?;
        let raw_policy = raw.policy.take();
        let transport = transport_of(raw, path, &field)?;
        let policy = raw_policy.map(|p| policy_of(p, path, &field)).transpose()?;
        let origin = if project {
            ServerOrigin::Project(path.to_path_buf())
        } else {
            ServerOrigin::User(path.to_path_buf())
        };
        out.push(McpServerConfig {
            name,
            transport,
            policy,
            origin,
        });
    }
    Ok(out)
}

/// The transport a server table names: a command (stdio) or a URL (streamable HTTP), with
/// only the fields that belong to it.
fn transport_of(raw: RawServer, path: &Path, field: &str) -> Result<McpTransport, ConfigError> {
    Ok(match (raw.command, raw.url) {
        (Some(command), None) => {
            if raw.token_env.is_some() {
                return Err(bad(path, field, "token_env belongs to a url server"));
            }
            if command.trim().is_empty() {
                return Err(bad(path, &format!("{field}.command"), "is empty"));
            }
            McpTransport::Stdio {
                command,
                args: raw.args,
                env: raw.env,
            }
        }
        (None, Some(url)) => {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(bad(
                    path,
                    &format!("{field}.url"),
                    format!("{url:?} is not an http:// or https:// URL"),
                ));
            }
            if !raw.args.is_empty() || !raw.env.is_empty() {
                return Err(bad(
                    path,
                    field,
                    "args and env belong to a command server, not a url server",
                ));
            }
            McpTransport::Http {
                url,
                token_env: raw.token_env,
            }
        }
        (Some(_), Some(_)) => {
            return Err(bad(path, field, "give either command or url, not both"));
        }
        (None, None) => {
            return Err(bad(
                path,
                field,
                "needs command (a stdio server) or url (streamable HTTP)",
            ));
        }
    })
}

/// The resource policy of a server table; without one the server's tools are listed but not
/// callable.
fn policy_of(p: RawPolicy, path: &Path, field: &str) -> Result<McpPolicy, ConfigError> {
    let safety = SafetyLevel::parse(&p.safety).ok_or_else(|| {
        bad(
            path,
            &format!("{field}.policy.safety"),
            format!(
                "unknown safety level {:?} (safe, write, expensive, sensitive, \
                 dangerous)",
                p.safety
            ),
        )
    })?;
    if p.resources.iter().any(|r| r.trim().is_empty()) {
        return Err(bad(
            path,
            &format!("{field}.policy.resources"),
            "holds an empty key",
        ));
    }
    Ok(McpPolicy {
        safety,
        resources: p.resources,
        effectful: p.effectful,
        tools: p.tools,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse(text: &str) -> Result<Vec<McpServerConfig>, ConfigError> {
        let mut table: toml::Table = toml::from_str(text).unwrap();
        let mcp = table.remove("mcp").unwrap();
        parse_mcp_table(mcp, Path::new("/x/config.toml"), false)
    }

    #[test]
    fn a_stdio_server_with_a_policy() {
        let s = parse(
            "[mcp.servers.files]\ncommand = \"srv\"\nargs = [\"-v\"]\nenv = { K = \"v\" }\n\
             [mcp.servers.files.policy]\nsafety = \"write\"\nresources = [\"db:main\"]\n\
             effectful = true\ntools = [\"echo\"]\n",
        )
        .unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].name, "files");
        assert!(
            matches!(&s[0].transport, McpTransport::Stdio { command, args, env }
            if command == "srv" && args == &["-v"] && env["K"] == "v")
        );
        let p = s[0].policy.as_ref().unwrap();
        assert_eq!(p.safety, SafetyLevel::Write);
        assert_eq!(p.resources, vec!["db:main"]);
        assert!(p.effectful);
        assert_eq!(p.tools.as_deref(), Some(&["echo".to_string()][..]));
    }

    #[test]
    fn bad_input_names_file_and_field() {
        let e =
            parse("[mcp.servers.a]\ncommand = \"x\"\n[mcp.servers.a.policy]\nsafety = \"meh\"\n")
                .unwrap_err()
                .to_string();
        assert!(
            e.contains("/x/config.toml") && e.contains("mcp.servers.a.policy.safety"),
            "{e}"
        );
        let e = parse("[mcp.servers.a]\ncomand = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("mcp.servers.a") && e.contains("comand"), "{e}");
        let e = parse("[mcp.servers.a]\nurl = \"ftp://x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("mcp.servers.a.url"), "{e}");
        let e = parse("[mcp.servers.a]\nargs = []\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs command"), "{e}");
        let e = parse("[mcp]\nserver = 1\n").unwrap_err().to_string();
        assert!(e.contains("server"), "{e}");
    }
}
