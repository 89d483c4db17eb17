//! What every person's session is assembled from, shared by `exec`, `resume`, `rewind`, the
//! REPL, the daemon, `geode mcp` and `geode skills`: where its records go (checkpoints, the
//! timeline), its workspace with commands confined (the daemon's socket hidden from them), the
//! hook files it loads (with the project's trust and the warnings a person should read), and
//! its scaffold. The commands import it; it imports none of them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use geode_runtime::agent::{CheckpointSettings, FaultInjection};
use geode_runtime::config::Config;
use geode_runtime::mcp::TrustStore;
use geode_runtime::model::catalog::Route;
use geode_runtime::model::effort::Effort;
use geode_runtime::scaffold::Scaffold;
use geode_runtime::store::timeline::SessionTimeline;
use geode_runtime::tools::workspace::LocalWorkspace;

pub(super) use geode_harness::home::geode_home;

/// Where session checkpoints live.
pub(super) fn checkpoint_root(dir: Option<&PathBuf>) -> PathBuf {
    dir.cloned()
        .unwrap_or_else(|| geode_home().join("sessions"))
}

pub(super) fn load_scaffold(
    file: Option<&PathBuf>,
    max_rounds: Option<u32>,
    time_budget: Option<u64>,
) -> anyhow::Result<Scaffold> {
    let mut scaffold = match file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read scaffold {}", path.display()))?;
            Scaffold::parse(&text)
                .map_err(|e| anyhow::anyhow!("scaffold {}: {e}", path.display()))?
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

/// The checkpoint settings of a session built from `route`.
/// Where a session's checkpoints go and what they record of its model; `route` is `None` for a
/// person's session with no model configured (recorded as an empty route, which a resume
/// replaces by the configuration's).
pub(super) fn checkpoint_settings(
    root: PathBuf,
    route: Option<&Route>,
    effort: Option<Effort>,
) -> anyhow::Result<CheckpointSettings> {
    Ok(CheckpointSettings {
        root,
        model_route: route.map(Route::to_string).unwrap_or_default(),
        provider: route.map_or("none", Route::provider_label).to_string(),
        effort,
        faults: FaultInjection::from_env().map_err(anyhow::Error::msg)?,
    })
}

pub(super) fn open_timeline(
    disabled: bool,
    path: Option<&PathBuf>,
) -> anyhow::Result<Option<Arc<SessionTimeline>>> {
    if disabled {
        return Ok(None);
    }
    let path = path
        .cloned()
        .unwrap_or_else(|| geode_home().join("timeline.db"));
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    Ok(Some(Arc::new(SessionTimeline::open(&path)?)))
}

/// The workspace of a person's session in `cwd`, its commands confined as the configuration
/// says (the daemon's socket hidden from them).
pub(super) fn person_workspace(
    cwd: &std::path::Path,
    cfg: &Config,
) -> anyhow::Result<LocalWorkspace> {
    let sandbox = cfg.command_sandbox(vec![socket_path(cfg)])?;
    Ok(LocalWorkspace::new(cwd)
        .with_context(|| format!("workspace {}", cwd.display()))?
        .with_sandbox(sandbox))
}

/// The daemon socket of a configuration.
pub(super) fn socket_path(cfg: &Config) -> PathBuf {
    cfg.settings()
        .socket
        .clone()
        .unwrap_or_else(|| geode_home().join("cli.sock"))
}

/// The hook files of a session: Claude Code's settings (the user's, then the project's
/// `.claude/settings.json` and `.claude/settings.local.json`), then the files the
/// configuration's `hooks` names, relative to the folder of the file that names them (the
/// project root, `$GEODE_HOME`) or to `cwd` for a flag or the environment. A project's hooks
/// are commands a cloned repository would run: they need the project trusted (`geode trust`),
/// as its MCP servers do. Every file is read once here, so a bad one stops the start.
pub(super) fn configured_hooks(cfg: &Config, cwd: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = super::claude_code::user_settings();
    // Settings files hold more than hooks (permissions, model, ...): one without hooks is no
    // reason to ask for trust.
    let mut with_hooks = Vec::new();
    for file in super::claude_code::project_settings(cwd) {
        let (_, loaded) = probe_hooks(&file, cwd)?;
        if loaded.count > 0 || !loaded.skipped.is_empty() {
            with_hooks.push(file);
        }
    }
    if !with_hooks.is_empty() {
        let shown: Vec<String> = with_hooks.iter().map(|f| f.display().to_string()).collect();
        if trusted(cwd, &format!("Claude Code hooks ({})", shown.join(", ")))? {
            files.extend(with_hooks);
        }
    }
    files.extend(config_hooks(cfg, cwd)?);
    for file in &files {
        let (registry, loaded) = probe_hooks(file, cwd)?;
        warn_skipped(&loaded.skipped);
        warn_matchers_matching_no_tool(&registry, &file.display().to_string());
    }
    Ok(files)
}

/// The hook files the configuration's `hooks` names (none of an untrusted project's).
fn config_hooks(cfg: &Config, cwd: &Path) -> anyhow::Result<Vec<PathBuf>> {
    use geode_runtime::config::Source;
    let Some(setting) = cfg.get("hooks") else {
        return Ok(Vec::new());
    };
    let base = match &setting.source {
        Source::Project(_) => {
            if !trusted(cwd, &format!("hooks ({})", setting.value))? {
                return Ok(Vec::new());
            }
            cwd.to_path_buf()
        }
        Source::User(_) => geode_home(),
        Source::Flag(_) | Source::Env(_) | Source::Default => cwd.to_path_buf(),
    };
    Ok(cfg.settings().hooks.iter().map(|f| base.join(f)).collect())
}

/// Whether the project in `cwd` is trusted; if not, says on stderr that its `what` are not
/// loaded, and why.
fn trusted(cwd: &Path, what: &str) -> anyhow::Result<bool> {
    let trust = TrustStore::new(&geode_home()).check(cwd)?;
    if !trust.is_trusted() {
        say!(
            "geode: the project's {what} are not loaded: {}",
            trust.explain(cwd)
        );
    }
    Ok(trust.is_trusted())
}

/// The hooks of `file` in a registry of their own, and what loading them skipped.
fn probe_hooks(
    file: &Path,
    cwd: &Path,
) -> anyhow::Result<(
    geode_runtime::hooks::registry::HookRegistry,
    geode_runtime::hooks::command::LoadedHooks,
)> {
    let mut probe = geode_runtime::hooks::registry::HookRegistry::new();
    let loaded = geode_runtime::hooks::command::load_command_hooks(&mut probe, file, cwd)?;
    Ok((probe, loaded))
}

/// Say, on stderr, each hook a file holds that GEODE cannot run (an event it does not have, a
/// hook type other than `command`).
pub(super) fn warn_skipped(skipped: &[String]) {
    for s in skipped {
        say!("geode: warning: {s}");
    }
}

/// Say, on stderr, which hooks from `source` have a matcher no standard tool answers to:
/// copied from another tool's configuration or mistyped, they would never run, silently.
pub(super) fn warn_matchers_matching_no_tool(
    hooks: &geode_runtime::hooks::HookRegistry,
    source: &str,
) {
    let tools = geode_runtime::session::standard_tool_names();
    for warning in hooks.matchers_matching_no_tool(&tools) {
        say!("geode: warning: {source}: {warning}");
    }
}
