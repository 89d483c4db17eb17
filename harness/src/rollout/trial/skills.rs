//! A task's skills (`environment.skills_dir`, Harbor's key): a folder INSIDE the task's
//! environment holding skill folders. They are copied out of the running sandbox before the
//! agent starts (so they come from the task's image, never from this machine's skills), read
//! into the session's `SkillSet`, and addressed by their paths inside the sandbox: the model's
//! `read_file` of `/skills/NAME/...` is served from that snapshot, and its commands run the
//! skill's scripts where they lie.

use std::path::Path;

use geode_runtime::skills::{SkillSet, discover_in_workspace};
use geode_runtime::tools::workspace::{LocalWorkspace, Workspace};

use super::record::Record;
use crate::env::{EnvError, Sandbox};

/// The task's skills; empty when the task declares no `skills_dir`. A `skills_dir` that cannot
/// be read, or a malformed skill, is an error naming the path inside the environment.
pub(super) async fn task_skills(
    skills_dir: Option<&str>,
    sandbox: &dyn Sandbox,
    rec: &mut Record,
) -> Result<SkillSet, EnvError> {
    let Some(dir) = skills_dir else {
        return Ok(SkillSet::default());
    };
    let bad = |message: String| EnvError::Unsupported(format!("environment.skills_dir: {message}"));
    if !dir.starts_with('/') {
        return Err(bad(format!("{dir:?} must be an absolute path")));
    }
    let scratch = tempfile::tempdir().map_err(|e| EnvError::Io {
        context: "a scratch folder for the task's skills".into(),
        source: e,
    })?;
    let copy = scratch.path().join("skills");
    let left_out = sandbox
        .copy_out(dir, &copy, &|_| false)
        .await
        .map_err(|e| bad(format!("cannot copy {dir} out of the environment: {e}")))?;
    if !left_out.is_empty() {
        rec.notes.push(format!(
            "environment.skills_dir: links and special files left out of the skills: {}",
            left_out.join(", ")
        ));
    }
    let ws = LocalWorkspace::new(&copy).map_err(|e| bad(e.to_string()))?;
    let root = ws.root().to_path_buf();
    let mut found = discover_in_workspace(&ws, &root).await.map_err(|e| {
        // Name the path the task's author knows, not the scratch copy.
        bad(e.to_string().replace(&root.display().to_string(), dir))
    })?;
    for skill in &mut found.skills {
        skill.dir = Path::new(dir).join(skill.name.as_str());
    }
    let scratch_root = root.display().to_string();
    for w in &found.warnings {
        rec.notes.push(format!(
            "environment.skills_dir: {}",
            w.replace(&scratch_root, dir)
        ));
    }
    found.warnings.clear();
    let set = SkillSet::from_roots(vec![found]);
    if let Some(hash) = set.hash() {
        rec.notes.push(format!(
            "environment.skills_dir = {dir:?}: {} skill(s), skills hash {hash}",
            set.len()
        ));
    }
    Ok(set)
}
