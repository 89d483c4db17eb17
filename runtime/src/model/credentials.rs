//! API keys and base URLs: from the environment, then `$GEODE_HOME/.env` (GEODE_HOME defaults
//! to `~/.geode`).
//!
//! A key lives in an `ApiKey`, whose `Debug` prints a placeholder and which has no `Display`,
//! so a key cannot reach a log line, the timeline or a recording by formatting.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A secret API key.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps `key` as it is; nothing is trimmed or checked.
    pub fn new(key: impl Into<String>) -> Self {
        ApiKey(key.into())
    }

    /// The key itself, for the one place that puts it in a request header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// Looks a variable up by name.
type Lookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Where variables come from: a lookup function (the process environment, or a map in tests)
/// and the `.env` file under GEODE_HOME. Variables set in the lookup win over the file.
#[derive(Clone)]
pub struct Env {
    lookup: Lookup,
    dotenv: BTreeMap<String, String>,
    dotenv_path: Option<PathBuf>,
}

impl fmt::Debug for Env {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Values may be keys: only the names are shown.
        f.debug_struct("Env")
            .field("dotenv_path", &self.dotenv_path)
            .field("dotenv_names", &self.dotenv.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Env {
    /// The process environment plus `$GEODE_HOME/.env` (a missing file is fine).
    pub fn from_process() -> Self {
        let home = std::env::var_os("GEODE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".geode")));
        let path = home.map(|h| h.join(".env"));
        let dotenv = path.as_deref().map(read_dotenv).unwrap_or_default();
        Env {
            lookup: Arc::new(|name| std::env::var(name).ok()),
            dotenv,
            dotenv_path: path,
        }
    }

    /// Fixed variables and an optional `.env` file (tests: no process state involved).
    pub fn from_map(vars: BTreeMap<String, String>, dotenv_file: Option<&Path>) -> Self {
        Env {
            lookup: Arc::new(move |name| vars.get(name).cloned()),
            dotenv: dotenv_file.map(read_dotenv).unwrap_or_default(),
            dotenv_path: dotenv_file.map(Path::to_path_buf),
        }
    }

    /// Nothing set anywhere (cassette replays, tests).
    pub fn empty() -> Self {
        Env::from_map(BTreeMap::new(), None)
    }

    /// The variable's value, from the lookup, else the `.env` file; blank values count as unset.
    pub fn var(&self, name: &str) -> Option<String> {
        (self.lookup)(name)
            .or_else(|| self.dotenv.get(name).cloned())
            .filter(|v| !v.trim().is_empty())
    }

    /// `$GEODE_HOME`, else `~/.geode`: where sign-ins are kept. Only the lookup counts, not
    /// the `.env` file that lives inside the directory.
    pub fn geode_home(&self) -> PathBuf {
        (self.lookup)("GEODE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| (self.lookup)("HOME").map(|h| PathBuf::from(h).join(".geode")))
            .unwrap_or_else(|| PathBuf::from(".geode"))
    }

    /// The variable's value as a key, trimmed; `None` when unset or blank.
    pub fn key(&self, name: &str) -> Option<ApiKey> {
        self.var(name).map(|v| ApiKey::new(v.trim()))
    }

    /// Where a key was looked for, for error messages.
    pub fn describe_sources(&self, name: &str) -> String {
        match &self.dotenv_path {
            Some(p) => format!("the environment variable {name} or {}", p.display()),
            None => format!("the environment variable {name}"),
        }
    }
}

/// `KEY=VALUE` lines; `export ` prefixes, `#` comments and matching quotes are allowed. A file
/// that cannot be read counts as empty: keys may come from the environment instead.
fn read_dotenv(path: &Path) -> BTreeMap<String, String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return BTreeMap::new();
    };
    parse_dotenv(&text)
}

pub(crate) fn parse_dotenv(text: &str) -> BTreeMap<String, String> {
    let mut vars = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let v = v.trim();
        let unquoted = ['"', '\'']
            .iter()
            .find_map(|q| v.strip_prefix(*q).and_then(|r| r.strip_suffix(*q)));
        let v = match unquoted {
            Some(inner) => inner.to_string(),
            None => v.split(" #").next().unwrap_or(v).trim().to_string(),
        };
        vars.insert(k.trim().to_string(), v);
    }
    vars
}

/// Header names whose values are credentials: stripped from every recording.
pub const SECRET_HEADERS: [&str; 7] = [
    "authorization",
    // Not a token, but it names the ChatGPT account of a subscription sign-in.
    "chatgpt-account-id",
    "x-api-key",
    "api-key",
    "cookie",
    "set-cookie",
    "proxy-authorization",
];

pub(crate) fn is_secret_header(name: &str) -> bool {
    SECRET_HEADERS.iter().any(|s| name.eq_ignore_ascii_case(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotenv_lines_parse() {
        let vars = parse_dotenv(
            "# keys\nexport ANTHROPIC_API_KEY=\"sk-ant-1\"\nOPENAI_API_KEY = 'sk-2'\nZAI_API_KEY=z # comment\nbroken\n",
        );
        assert_eq!(vars["ANTHROPIC_API_KEY"], "sk-ant-1");
        assert_eq!(vars["OPENAI_API_KEY"], "sk-2");
        assert_eq!(vars["ZAI_API_KEY"], "z");
        assert_eq!(vars.len(), 3);
    }

    #[test]
    fn environment_wins_over_the_file_and_keys_never_print() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(".env");
        std::fs::write(&file, "A=from-file\nB=file-only\n").unwrap();
        let env = Env::from_map(
            [("A".to_string(), "from-env".to_string())].into(),
            Some(&file),
        );
        assert_eq!(env.var("A").as_deref(), Some("from-env"));
        assert_eq!(env.var("B").as_deref(), Some("file-only"));
        assert_eq!(env.var("C"), None);
        let key = env.key("B").unwrap();
        assert_eq!(format!("{key:?}"), "ApiKey(<redacted>)");
        assert!(!format!("{env:?}").contains("file-only"));
        assert!(env.describe_sources("B").contains(".env"));
    }
}
