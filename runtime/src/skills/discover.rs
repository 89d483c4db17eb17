//! Reading skill folders. One walker over the `Workspace` trait serves both places skills live:
//! a folder on this machine (`$GEODE_HOME/skills`, a project's `.geode/skills`, read through a
//! `LocalWorkspace` rooted there) and a folder inside a task's environment (read through the
//! sandbox's workspace), so a benchmark's skills never come from the host.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{SKILL_FILE, Skill, SkillError, SkillSet, front_matter};
use crate::tools::workspace::{LocalWorkspace, Workspace};

/// Bounds on what one root may hold: a skill is instructions and a few scripts, and every
/// byte is hashed and kept in memory for the session.
const MAX_FILE_BYTES: usize = 1024 * 1024;
const MAX_ROOT_BYTES: usize = 16 * 1024 * 1024;
const MAX_FILES_PER_SKILL: usize = 500;
/// Folder depth inside a skill; also what stops a symlink loop.
const MAX_DEPTH: usize = 8;

/// The skills of one root folder, in name order.
#[derive(Debug, Clone, Default)]
pub struct SkillRoot {
    /// The root folder.
    pub path: PathBuf,
    /// Its skills, in name order.
    pub skills: Vec<Skill>,
    /// What is odd but readable (a name that differs from its folder's, which the Agent Skills
    /// format asks for and benchmark tasks do not always keep).
    pub warnings: Vec<String>,
}

/// The skills of `roots`, in order (later shadow earlier). A root that does not exist holds no
/// skills; one that cannot be read, or a malformed skill, is an error naming the file.
pub async fn discover_local(roots: &[PathBuf]) -> Result<SkillSet, SkillError> {
    let mut found = Vec::new();
    let mut seen = Vec::new();
    for root in roots {
        // The same folder twice (`$GEODE_HOME` inside the project) must not shadow itself.
        let Ok(canonical) = root.canonicalize() else {
            continue;
        };
        if !canonical.is_dir() || seen.contains(&canonical) {
            continue;
        }
        seen.push(canonical);
        let ws = LocalWorkspace::new(root).map_err(|e| SkillError::Read {
            path: root.clone(),
            message: e.to_string(),
        })?;
        let dir = ws.root().to_path_buf();
        found.push(discover_in_workspace(&ws, &dir).await?);
    }
    Ok(SkillSet::from_roots(found))
}

/// The skills in `dir` (absolute, as `ws` addresses it): every sub-folder holding a `SKILL.md`.
/// Other sub-folders and loose files are ignored, as Claude Code ignores them.
pub async fn discover_in_workspace(
    ws: &dyn Workspace,
    dir: &Path,
) -> Result<SkillRoot, SkillError> {
    let read_err = |path: &Path, e: &dyn std::fmt::Display| SkillError::Read {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let entries = ws.list_dir(dir).await.map_err(|e| read_err(dir, &e))?;
    let mut budget = MAX_ROOT_BYTES;
    let mut skills = Vec::new();
    let mut warnings = Vec::new();
    for entry in entries.into_iter().filter(|e| e.is_dir) {
        let skill_dir = dir.join(&entry.name);
        let inside = ws
            .list_dir(&skill_dir)
            .await
            .map_err(|e| read_err(&skill_dir, &e))?;
        if !inside.iter().any(|e| e.name == SKILL_FILE && !e.is_dir) {
            continue;
        }
        let mut files = BTreeMap::new();
        collect(ws, &skill_dir, Path::new(""), 0, &mut files, &mut budget).await?;
        let skill = build(skill_dir, files)?;
        if skill.name.as_str() != entry.name {
            warnings.push(format!(
                "skill {} lives in a folder named {:?} ({})",
                skill.name,
                entry.name,
                skill.dir.display()
            ));
        }
        skills.push(skill);
    }
    Ok(SkillRoot {
        path: dir.to_path_buf(),
        skills,
        warnings,
    })
}

/// Every file under `base/rel`, by path relative to `base`.
async fn collect(
    ws: &dyn Workspace,
    base: &Path,
    rel: &Path,
    depth: usize,
    files: &mut BTreeMap<PathBuf, Vec<u8>>,
    budget: &mut usize,
) -> Result<(), SkillError> {
    let too_large = |path: PathBuf, message: String| SkillError::TooLarge { path, message };
    let here = base.join(rel);
    if depth > MAX_DEPTH {
        return Err(too_large(
            here,
            format!("folders nest deeper than {MAX_DEPTH} levels (a symlink loop?)"),
        ));
    }
    let entries = ws.list_dir(&here).await.map_err(|e| SkillError::Read {
        path: here.clone(),
        message: e.to_string(),
    })?;
    for entry in entries {
        let rel_child = rel.join(&entry.name);
        let path = base.join(&rel_child);
        if entry.is_dir {
            Box::pin(collect(ws, base, &rel_child, depth + 1, files, budget)).await?;
            continue;
        }
        if files.len() >= MAX_FILES_PER_SKILL {
            return Err(too_large(
                base.to_path_buf(),
                format!("the skill holds more than {MAX_FILES_PER_SKILL} files"),
            ));
        }
        let bytes = ws.read_file(&path).await.map_err(|e| SkillError::Read {
            path: path.clone(),
            message: e.to_string(),
        })?;
        if bytes.len() > MAX_FILE_BYTES {
            return Err(too_large(
                path,
                format!(
                    "{} bytes; a skill's file may hold {MAX_FILE_BYTES}",
                    bytes.len()
                ),
            ));
        }
        *budget = budget.checked_sub(bytes.len()).ok_or_else(|| {
            too_large(
                path.clone(),
                format!("the skills of this folder pass {MAX_ROOT_BYTES} bytes"),
            )
        })?;
        files.insert(rel_child, bytes);
    }
    Ok(())
}

fn build(dir: PathBuf, files: BTreeMap<PathBuf, Vec<u8>>) -> Result<Skill, SkillError> {
    let skill_md = dir.join(SKILL_FILE);
    let bytes = files
        .get(Path::new(SKILL_FILE))
        .ok_or_else(|| SkillError::Read {
            path: skill_md.clone(),
            message: "not a file".to_string(),
        })?;
    let text = std::str::from_utf8(bytes).map_err(|e| SkillError::Read {
        path: skill_md.clone(),
        message: format!("not UTF-8: {e}"),
    })?;
    let parsed = front_matter::parse(&skill_md, text)?;
    Ok(Skill {
        name: parsed.name,
        description: parsed.description,
        allowed_tools: parsed.allowed_tools,
        dir,
        body: parsed.body,
        files,
    })
}
