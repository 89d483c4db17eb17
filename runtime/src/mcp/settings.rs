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
//!
//! A project's `.mcp.json`, Claude Code's file, is read as it is (`parse_mcp_json`):
//!
//! ```json
//! {"mcpServers": {
//!   "files": {"command": "npx", "args": ["-y", "srv"], "env": {"ROOT": "${HOME}/data"}},
//!   "web": {"type": "http", "url": "http://127.0.0.1:8123/mcp",
//!           "headers": {"Authorization": "Bearer ${WEB_TOKEN}"}}}}
//! ```
//!
//! `${VAR}` and `${VAR:-default}` expand from the environment as Claude Code expands them; a
//! bearer `Authorization` header that is just `${VAR}` becomes `token_env = VAR`, so the secret
//! stays in the environment. Claude Code asks before each MCP tool call; these servers get the
//! policy `CLAUDE_CODE_POLICY` (every call approved as dangerous, one call per server at a
//! time), as a `[mcp.servers.NAME]` table without a policy would never be callable. A server of
//! the same name in `.geode/config.toml` wins over `.mcp.json`'s.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::config::source::ConfigError;
use crate::policy::SafetyLevel;

/// Which config file declared a server. Project servers run only in a trusted project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerOrigin {
    /// `$GEODE_HOME/config.toml`.
    User(PathBuf),
    /// The project's `.geode/config.toml` or `.mcp.json`.
    Project(PathBuf),
}

impl ServerOrigin {
    /// The config file that declared the server.
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
        /// The program to run.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables set for it, on top of the inherited environment.
        env: BTreeMap<String, String>,
    },
    /// Streamable HTTP at this URL; with `token_env`, every request carries
    /// `Authorization: Bearer $token_env` (the secret stays in the environment, not the file).
    Http {
        /// The server's MCP endpoint.
        url: String,
        /// The variable holding the bearer token; `None`: requests carry no token.
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
    /// The approval level every call of the server's tools needs.
    pub safety: SafetyLevel,
    /// Resource keys locked by every call of the server's tools.
    pub resources: Vec<String>,
    /// Whether calls change the world, so each gets an effect receipt.
    pub effectful: bool,
    /// Only these tools of the server are callable (`None`: all).
    pub tools: Option<Vec<String>>,
}

/// One configured server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    /// The server's name (the key of its table); its tools bind as `mcp:NAME/TOOL`.
    pub name: String,
    /// How GEODE reaches the server.
    pub transport: McpTransport,
    /// `None`: the server's tools are listed but never called.
    pub policy: Option<McpPolicy>,
    /// Which config file declared the server.
    pub origin: ServerOrigin,
}

/// The MCP servers of the two config files, kept apart: project servers need a trust check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McpSettings {
    /// Servers of the user's config file.
    pub user: Vec<McpServerConfig>,
    /// Servers of the project's files; they run only in a trusted project.
    pub project: Vec<McpServerConfig>,
    /// The project's `.geode/config.toml`, when there is one.
    pub project_file: Option<PathBuf>,
}

impl McpSettings {
    /// No server in either file.
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

/// The policy of a `.mcp.json` server: Claude Code asks before every MCP tool call, and a
/// server GEODE knows nothing about may do anything a program can, as the shell may.
pub const CLAUDE_CODE_POLICY: McpPolicy = McpPolicy {
    safety: SafetyLevel::Dangerous,
    resources: Vec::new(),
    effectful: true,
    tools: None,
};

#[derive(Debug, Deserialize)]
struct McpJson {
    #[serde(default, rename = "mcpServers")]
    servers: BTreeMap<String, McpJsonServer>,
}

#[derive(Debug, Deserialize)]
struct McpJsonServer {
    #[serde(rename = "type")]
    kind: Option<String>,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// `text` with `${VAR}` and `${VAR:-default}` replaced from `env`, as Claude Code expands
/// `.mcp.json`; a variable that is unset and has no default is an error naming it.
fn expand(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("{text:?}: `${{` without a closing `}}`"))?;
        let (name, default) = match after[..end].split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (&after[..end], None),
        };
        match (env(name), default) {
            (Some(v), _) => out.push_str(&v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err(format!(
                    "${{{name}}} is not set in the environment and has no default"
                ));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Read a project's `.mcp.json` (Claude Code's `mcpServers`), every server of it in the
/// project's origin with `CLAUDE_CODE_POLICY`. Errors name the file and the field
/// (`mcpServers.web.url`).
pub fn parse_mcp_json(path: &Path) -> Result<Vec<McpServerConfig>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut de = serde_json::Deserializer::from_str(&text);
    let file: McpJson = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let at = e.path().to_string();
        bad(path, &at, e.into_inner())
    })?;
    let env = |name: &str| std::env::var(name).ok();
    let mut out = Vec::new();
    for (name, raw) in file.servers {
        let field = format!("mcpServers.{name}");
        check_name(&name, path, &field)?;
        let ex = |value: &str, at: &str| {
            expand(value, &env).map_err(|m| bad(path, &format!("{field}.{at}"), m))
        };
        let transport = match raw.kind.as_deref() {
            None | Some("stdio") if raw.command.is_some() => {
                if !raw.headers.is_empty() || raw.url.is_some() {
                    return Err(bad(path, &field, "give either command or url, not both"));
                }
                let command = ex(raw.command.as_deref().unwrap_or_default(), "command")?;
                if command.trim().is_empty() {
                    return Err(bad(path, &format!("{field}.command"), "is empty"));
                }
                let mut args = Vec::new();
                for (i, a) in raw.args.iter().enumerate() {
                    args.push(ex(a, &format!("args[{i}]"))?);
                }
                let mut vars = BTreeMap::new();
                for (k, v) in &raw.env {
                    vars.insert(k.clone(), ex(v, &format!("env.{k}"))?);
                }
                McpTransport::Stdio {
                    command,
                    args,
                    env: vars,
                }
            }
            None | Some("http") if raw.url.is_some() => {
                let url = ex(raw.url.as_deref().unwrap_or_default(), "url")?;
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(bad(
                        path,
                        &format!("{field}.url"),
                        format!("{url:?} is not an http:// or https:// URL"),
                    ));
                }
                McpTransport::Http {
                    url,
                    token_env: bearer_env(&raw.headers, path, &field)?,
                }
            }
            Some("sse") => {
                return Err(bad(
                    path,
                    &format!("{field}.type"),
                    "\"sse\" (the old HTTP+SSE transport) is not supported; GEODE speaks \
                     streamable HTTP (\"type\": \"http\")",
                ));
            }
            Some(other @ ("stdio" | "http")) => {
                let needs = if other == "stdio" { "command" } else { "url" };
                return Err(bad(path, &field, format!("a {other} server needs {needs}")));
            }
            Some(other) => {
                return Err(bad(
                    path,
                    &format!("{field}.type"),
                    format!("unknown type {other:?} (stdio or http)"),
                ));
            }
            None => {
                return Err(bad(
                    path,
                    &field,
                    "needs command (a stdio server) or url (streamable HTTP)",
                ));
            }
        };
        out.push(McpServerConfig {
            name,
            transport,
            policy: Some(CLAUDE_CODE_POLICY),
            origin: ServerOrigin::Project(path.to_path_buf()),
        });
    }
    Ok(out)
}

/// The environment variable of a `headers` table that holds only `Authorization: Bearer
/// ${VAR}`: GEODE sends a bearer token read from the environment, and no other header.
fn bearer_env(
    headers: &BTreeMap<String, String>,
    path: &Path,
    field: &str,
) -> Result<Option<String>, ConfigError> {
    let mut token_env = None;
    for (name, value) in headers {
        let var = value
            .strip_prefix("Bearer ${")
            .and_then(|v| v.strip_suffix('}'))
            .filter(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        match var {
            Some(var) if name.eq_ignore_ascii_case("authorization") => {
                token_env = Some(var.to_string());
            }
            _ => {
                return Err(bad(
                    path,
                    &format!("{field}.headers.{name}"),
                    "only `Authorization: Bearer ${VAR}` is supported (the token stays in \
                     the environment variable VAR)",
                ));
            }
        }
    }
    Ok(token_env)
}

/// A server name GEODE can put in a tool's name (`mcp__<server>__<tool>`).
fn check_name(name: &str, path: &Path, field: &str) -> Result<(), ConfigError> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(bad(
            path,
            field,
            "a server name may hold only letters, digits, '_' and '-'",
        ));
    }
    Ok(())
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
        check_name(&name, path, &field)?;
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

    fn mcp_json(text: &str) -> Result<Vec<McpServerConfig>, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".mcp.json");
        std::fs::write(&path, text).unwrap();
        parse_mcp_json(&path)
    }

    #[test]
    fn a_claude_code_mcp_json_reads_as_it_is() {
        let s = mcp_json(
            r#"{"mcpServers": {
              "files": {"command": "srv", "args": ["--root", "${GEODE_TEST_UNSET_X:-/data}"],
                        "env": {"K": "v"}},
              "web": {"type": "http", "url": "http://127.0.0.1:9/mcp",
                      "headers": {"Authorization": "Bearer ${WEB_TOKEN}"}}}}"#,
        )
        .unwrap();
        assert_eq!(s.len(), 2);
        assert!(
            matches!(&s[0].transport, McpTransport::Stdio { command, args, env }
            if command == "srv" && args == &["--root", "/data"] && env["K"] == "v")
        );
        assert_eq!(s[0].policy, Some(CLAUDE_CODE_POLICY));
        assert!(matches!(s[0].origin, ServerOrigin::Project(_)));
        assert_eq!(
            s[1].transport,
            McpTransport::Http {
                url: "http://127.0.0.1:9/mcp".into(),
                token_env: Some("WEB_TOKEN".into())
            }
        );
    }

    #[test]
    fn a_bad_mcp_json_names_the_file_and_the_field() {
        let cases = [
            (
                r#"{"mcpServers": {"a": {"command": 3}}}"#,
                "mcpServers.a.command",
            ),
            (
                r#"{"mcpServers": {"a": {"type": "sse", "url": "http://x"}}}"#,
                "mcpServers.a.type",
            ),
            (r#"{"mcpServers": {"a": {"args": []}}}"#, "needs command"),
            (
                r#"{"mcpServers": {"a": {"command": "${GEODE_TEST_UNSET_Y}"}}}"#,
                "mcpServers.a.command: ${GEODE_TEST_UNSET_Y} is not set",
            ),
            (
                r#"{"mcpServers": {"a": {"url": "http://x", "headers": {"X-Key": "k"}}}}"#,
                "mcpServers.a.headers.X-Key",
            ),
            (r#"{"mcpServers": "#, ".mcp.json"),
        ];
        for (text, wanted) in cases {
            let e = mcp_json(text).unwrap_err().to_string();
            assert!(e.contains(".mcp.json") && e.contains(wanted), "{text}: {e}");
        }
    }
}
