//! Where Claude Code keeps the files GEODE reads as they are: its user folder
//! (`$CLAUDE_CONFIG_DIR`, else `~/.claude`) with `settings.json` and `skills/`, and a
//! project's `.claude/settings.json`, `.claude/settings.local.json` and `.claude/skills/`
//! (a project's `.mcp.json` is found with its config, `geode_runtime::config::Layers`).

use std::path::{Path, PathBuf};

/// Claude Code's user folder: `$CLAUDE_CONFIG_DIR`, as Claude Code honours it, else
/// `~/.claude` (`./.claude` without a home directory).
pub fn user_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CLAUDE_CONFIG_DIR") {
        return PathBuf::from(dir);
    }
    std::env::var_os("HOME")
        .map_or_else(|| PathBuf::from("."), PathBuf::from)
        .join(".claude")
}

fn existing(paths: impl IntoIterator<Item = PathBuf>) -> Vec<PathBuf> {
    paths.into_iter().filter(|p| p.is_file()).collect()
}

/// The user's `settings.json`, when there is one (its hooks run in every project).
pub fn user_settings() -> Vec<PathBuf> {
    existing([user_dir().join("settings.json")])
}

/// The project's settings files that exist, shared one first, as Claude Code layers them.
/// Both are the project's: they run only once it is trusted (`geode trust`), as a cloned
/// repository may hold either.
pub fn project_settings(project: &Path) -> Vec<PathBuf> {
    let dir = project.join(".claude");
    existing([dir.join("settings.json"), dir.join("settings.local.json")])
}
