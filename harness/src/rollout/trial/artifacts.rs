//! What a trial keeps of its sandbox once the agent is done: the task's declared artifacts
//! and, when asked, the final workspace. Best effort: what cannot be kept is a note.

use std::path::{Path, PathBuf};

use super::plan::TrialPlan;
use super::record::Record;
use crate::env::Sandbox;

/// Where a kept workspace goes inside the trial folder.
pub const WORKSPACE_DIR: &str = "workspace";

/// Copies the final workspace (the image's WORKDIR) to `<trial>/workspace/`; links and special
/// files are left out, and a failure is a note, never the trial's outcome.
pub(super) async fn keep_workspace(plan: &TrialPlan, sandbox: &dyn Sandbox, rec: &mut Record) {
    let root = sandbox.workspace().root().to_string_lossy().into_owned();
    let dest = plan.trial_dir.join(WORKSPACE_DIR);
    match sandbox.copy_out(&root, &dest, &|_| false).await {
        Ok(left_out) if !left_out.is_empty() => rec.notes.push(format!(
            "workspace kept without {} link(s) or special file(s)",
            left_out.len()
        )),
        Ok(_) => {}
        Err(e) => rec.notes.push(format!("workspace not kept: {e}")),
    }
}

/// Copy the task's declared artifacts out of `sandbox` (no agent process running) into the
/// trial's `artifacts/`; what was collected, by host path and source. Best effort, as in
/// Harbor: a missing source is a note.
pub(super) async fn collect_artifacts(
    plan: &TrialPlan,
    sandbox: &dyn Sandbox,
    rec: &mut Record,
) -> Vec<(PathBuf, String)> {
    let base = plan.trial_dir.join("artifacts");
    let mut collected = Vec::new();
    for artifact in &plan.task.config.artifacts {
        let source = artifact.source();
        let dest = match clear_destination(&base, artifact.destination()) {
            Ok(dest) => dest,
            Err(e) => {
                rec.notes.push(format!(
                    "artifact {source}: no place for it under artifacts/: {e}"
                ));
                continue;
            }
        };
        match sandbox
            .copy_out(source, &dest, &|name| artifact.excludes(name))
            .await
        {
            Ok(left_out) => {
                rec.notes.extend(
                    left_out
                        .into_iter()
                        .map(|l| format!("artifact {source}: left out {l}")),
                );
                collected.push((dest, source.to_string()));
            }
            Err(e) => rec
                .notes
                .push(format!("artifact {source}: not collected: {e}")),
        }
    }
    collected
}

/// `base/rel` made ready for a fresh copy: its parent folders real folders (a link the agent
/// left under `/logs/artifacts` is removed, never followed), nothing at the path itself.
fn clear_destination(base: &Path, rel: &str) -> std::io::Result<PathBuf> {
    let mut path = base.to_path_buf();
    let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
    for (i, part) in parts.iter().enumerate() {
        path.push(part);
        let last = i + 1 == parts.len();
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() && !last => continue,
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path)?,
            Ok(_) => std::fs::remove_file(&path)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        if !last {
            std::fs::create_dir(&path)?;
        }
    }
    Ok(path)
}
