//! Choosing an environment backend by name.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};
use geode_harness::env::Backend;
use geode_harness::env::host::HostBackend;
use geode_harness::env::sandbox::{SandboxBackend, SandboxConfig};

/// `sandbox` keeps image layers and trial scratch under `<jobs>/.sandbox` (one filesystem, as
/// overlayfs needs) and hides the jobs folder from trials, so no trial reads another's logs.
pub fn make(name: &str, allow_host: bool, jobs_dir: &Path) -> anyhow::Result<Arc<dyn Backend>> {
    std::fs::create_dir_all(jobs_dir)
        .with_context(|| format!("creating {}", jobs_dir.display()))?;
    let jobs = std::fs::canonicalize(jobs_dir)?;
    match name {
        "sandbox" => {
            let exe = std::env::current_exe().context("locating the geode executable")?;
            let mut config = SandboxConfig::new(exe, jobs.join(".sandbox"));
            config.hide.push(jobs);
            Ok(Arc::new(SandboxBackend::new(config)?))
        }
        "host" if allow_host => Ok(Arc::new(HostBackend::new(jobs.join(".host")))),
        "host" => {
            bail!("the host backend runs tasks without isolation: pass --allow-host to use it")
        }
        "docker" => bail!("the docker backend needs a docker engine, and none is reachable here"),
        other => bail!("unknown environment backend {other:?} (sandbox, host)"),
    }
}
