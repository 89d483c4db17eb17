//! What every person's session is assembled from, shared by the `geode` binary's `exec`,
//! `resume`, `rewind`, REPL, daemon, `mcp` and `skills`: where its records go (checkpoints, the
//! timeline), its workspace with commands confined (the daemon's socket hidden from them), the
//! hook files it loads (with the project's trust, and the notices a person should read), and
//! its scaffold. A library module, so the commands call it and it prints nothing: what a
//! person must be told comes back as notices.

pub mod claude_code;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use geode_runtime::agent::{CheckpointSettings, FaultInjection};
use geode_runtime::config::{Config, ConfigError, Source};
use geode_runtime::hooks::HookRegistry;
use geode_runtime::hooks::command::{LoadedHooks, load_command_hooks};
use geode_runtime::hooks::registry::HookConfigError;
use geode_runtime::mcp::{McpError, TrustStore};
use geode_runtime::model::catalog::Route;
use geode_runtime::model::effort::Effort;
use geode_runtime::scaffold::Scaffold;
use geode_runtime::store::StoreError;
use geode_runtime::store::timeline::SessionTimeline;
use geode_runtime::tools::workspace::{LocalWorkspace, WorkspaceError};

use crate::home::geode_home;

/// Why a session could not be assembled; each names the file or setting at fault.
#[derive(Debug, thiserror::Error)]
pub enum AssemblyError {
    /// A scaffold file could not be read or parsed.
    #[error("scaffold {path}: {message}")]
    Scaffold {
        /// The scaffold file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A folder for the session's records could not be made.
    #[error("creating {path}: {source}")]
    Folder {
        /// The folder.
        path: PathBuf,
        /// Why it could not be made.
        #[source]
        source: std::io::Error,
    },
    /// The fault-injection variables (tests' crash points) are set wrong.
    #[error("fault injection: {0}")]
    Faults(String),
    /// The timeline could not be opened.
    #[error(transparent)]
    Timeline(#[from] StoreError),
    /// The configuration's command sandbox could not be made.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The session's folder is no usable workspace.
    #[error("workspace {path}: {source}")]
    Workspace {
        /// The folder.
        path: PathBuf,
        /// Why it cannot be used.
        #[source]
        source: WorkspaceError,
    },
    /// A hooks file could not be read.
    #[error(transparent)]
    Hooks(#[from] HookConfigError),
    /// The project's trust could not be checked.
    #[error(transparent)]
    Trust(#[from] McpError),
}

/// Where session checkpoints live: `dir`, else `$GEODE_HOME/sessions`.
pub fn checkpoint_root(dir: Option<&PathBuf>) -> PathBuf {
    dir.cloned()
        .unwrap_or_else(|| geode_home().join("sessions"))
}

/// The scaffold of a session: `file`'s (JSON or TOML), else the default, with the guards the
/// flags override.
pub fn load_scaffold(
    file: Option<&PathBuf>,
    max_rounds: Option<u32>,
    time_budget: Option<u64>,
) -> Result<Scaffold, AssemblyError> {
    let mut scaffold = match file {
        Some(path) => {
            let bad = |message: String| AssemblyError::Scaffold {
                path: path.clone(),
                message,
            };
            let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
            Scaffold::parse(&text).map_err(bad)?
        }
        None => Scaffold::default(),
    };
    if let Some(n) = max_rounds {
        scaffold.guards.max_rounds = n;
    }
    if let Some(s) = time_budget {
        scaffold.guards.turn_time_budget_secs = Some(s);
    }
    Ok(scaffold)
}

/// Where a session's checkpoints go and what they record of its model; `route` is `None` for a
/// person's session with no model configured (recorded as an empty route, which a resume
/// replaces by the configuration's).
pub fn checkpoint_settings(
    root: PathBuf,
    route: Option<&Route>,
    effort: Option<Effort>,
) -> Result<CheckpointSettings, AssemblyError> {
    Ok(CheckpointSettings {
        root,
        model_route: route.map(Route::to_string).unwrap_or_default(),
        provider: route.map_or("none", Route::provider_label).to_string(),
        effort,
        faults: FaultInjection::from_env().map_err(AssemblyError::Faults)?,
    })
}

/// The timeline sessions append to: `path`, else `$GEODE_HOME/timeline.db`; `None` when the
/// person turned it off.
pub fn open_timeline(
    disabled: bool,
    path: Option<&PathBuf>,
) -> Result<Option<Arc<SessionTimeline>>, AssemblyError> {
    if disabled {
        return Ok(None);
    }
    let path = path
        .cloned()
        .unwrap_or_else(|| geode_home().join("timeline.db"));
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| AssemblyError::Folder {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    Ok(Some(Arc::new(SessionTimeline::open(&path)?)))
}

/// The workspace of a person's session in `cwd`, its commands confined as the configuration
/// says (the daemon's socket hidden from them).
pub fn person_workspace(cwd: &Path, cfg: &Config) -> Result<LocalWorkspace, AssemblyError> {
    let sandbox = cfg.command_sandbox(vec![socket_path(cfg)])?;
    Ok(LocalWorkspace::new(cwd)
        .map_err(|source| AssemblyError::Workspace {
            path: cwd.to_path_buf(),
            source,
        })?
        .with_sandbox(sandbox))
}

/// The daemon socket of a configuration: `socket`, else `$GEODE_HOME/cli.sock`.
pub fn socket_path(cfg: &Config) -> PathBuf {
    cfg.settings()
        .socket
        .clone()
        .unwrap_or_else(|| geode_home().join("cli.sock"))
}

/// The hook files a session loads, and what a person should be told about them.
#[derive(Debug, Default)]
pub struct HookFiles {
    /// The files, in the order their hooks run.
    pub files: Vec<PathBuf>,
    /// One line each: a project's hooks left out because it is not trusted, a hook GEODE
    /// cannot run, a matcher no tool answers to.
    pub notices: Vec<String>,
}

/// The hook files of a session: Claude Code's settings (the user's, then the project's
/// `.claude/settings.json` and `.claude/settings.local.json`), then the files the
/// configuration's `hooks` names, relative to the folder of the file that names them (the
/// project root, `$GEODE_HOME`) or to `cwd` for a flag or the environment. A project's hooks
/// are commands a cloned repository would run: they need the project trusted (`geode trust`),
/// as its MCP servers do. Every file is read once here, so a bad one stops the start.
pub fn configured_hooks(cfg: &Config, cwd: &Path) -> Result<HookFiles, AssemblyError> {
    let mut out = HookFiles {
        files: claude_code::user_settings(),
        notices: Vec::new(),
    };
    // Settings files hold more than hooks (permissions, model, ...): one without hooks is no
    // reason to ask for trust.
    let mut with_hooks = Vec::new();
    for file in claude_code::project_settings(cwd) {
        let (_, loaded) = probe_hooks(&file, cwd)?;
        if loaded.count > 0 || !loaded.skipped.is_empty() {
            with_hooks.push(file);
        }
    }
    if !with_hooks.is_empty() {
        let shown: Vec<String> = with_hooks.iter().map(|f| f.display().to_string()).collect();
        let what = format!("Claude Code hooks ({})", shown.join(", "));
        if trusted(cwd, &what, &mut out.notices)? {
            out.files.extend(with_hooks);
        }
    }
    let named = config_hooks(cfg, cwd, &mut out.notices)?;
    out.files.extend(named);
    for file in &out.files {
        let (registry, loaded) = probe_hooks(file, cwd)?;
        out.notices.extend(skipped_notices(&loaded.skipped));
        out.notices
            .extend(unmatched_notices(&registry, &file.display().to_string()));
    }
    Ok(out)
}

/// The hook files the configuration's `hooks` names (none of an untrusted project's).
fn config_hooks(
    cfg: &Config,
    cwd: &Path,
    notices: &mut Vec<String>,
) -> Result<Vec<PathBuf>, AssemblyError> {
    let Some(setting) = cfg.get("hooks") else {
        return Ok(Vec::new());
    };
    let base = match &setting.source {
        Source::Project(_) => {
            if !trusted(cwd, &format!("hooks ({})", setting.value), notices)? {
                return Ok(Vec::new());
            }
            cwd.to_path_buf()
        }
        Source::User(_) => geode_home(),
        Source::Flag(_) | Source::Env(_) | Source::Default => cwd.to_path_buf(),
    };
    Ok(cfg.settings().hooks.iter().map(|f| base.join(f)).collect())
}

/// Whether the project in `cwd` is trusted; if not, a notice says its `what` are not loaded,
/// and why.
fn trusted(cwd: &Path, what: &str, notices: &mut Vec<String>) -> Result<bool, AssemblyError> {
    let trust = TrustStore::new(&geode_home()).check(cwd)?;
    if !trust.is_trusted() {
        notices.push(format!(
            "the project's {what} are not loaded: {}",
            trust.explain(cwd)
        ));
    }
    Ok(trust.is_trusted())
}

/// The hooks of `file` in a registry of their own, and what loading them skipped.
fn probe_hooks(file: &Path, cwd: &Path) -> Result<(HookRegistry, LoadedHooks), AssemblyError> {
    let mut probe = HookRegistry::new();
    let loaded = load_command_hooks(&mut probe, file, cwd)?;
    Ok((probe, loaded))
}

/// A notice per hook a file holds that GEODE cannot run (an event it does not have, a hook
/// type other than `command`).
pub fn skipped_notices(skipped: &[String]) -> Vec<String> {
    skipped.iter().map(|s| format!("warning: {s}")).collect()
}

/// A notice per hook from `source` whose matcher no standard tool answers to: copied from
/// another tool's configuration or mistyped, it would never run, silently.
pub fn unmatched_notices(hooks: &HookRegistry, source: &str) -> Vec<String> {
    let tools = geode_runtime::session::standard_tool_names();
    hooks
        .matchers_matching_no_tool(&tools)
        .into_iter()
        .map(|warning| format!("warning: {source}: {warning}"))
        .collect()
}
