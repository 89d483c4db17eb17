//! What the benches share: medians, a sandbox backend over a store, and scratch beside it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use geode_harness::env::{SandboxBackend, SandboxConfig};

use super::backends::ImageSettings;

/// The median of `v` (the upper one of an even count); zero for none.
pub(super) fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// A sandbox backend over `store` with this machine's image settings, its state under `state`.
pub(super) fn backend(store: PathBuf, state: &Path) -> anyhow::Result<SandboxBackend> {
    let exe = std::env::current_exe().context("locating the geode executable")?;
    let settings = ImageSettings::load()?;
    let mut config = SandboxConfig::new(exe, state, store);
    config.mirrors = settings.mirrors;
    config.aliases = settings.aliases;
    config.stand_in_pinned = settings.stand_in_pinned;
    config.progress = super::backends::stderr_progress();
    Ok(SandboxBackend::new(config)?)
}

/// Scratch beside the store (one filesystem, as the sandbox's layers want).
pub(super) fn tempfile_dir(store: &Path) -> anyhow::Result<PathBuf> {
    let parent = store.parent().unwrap_or(store);
    let dir = parent.join(format!(".geode-bench-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}
