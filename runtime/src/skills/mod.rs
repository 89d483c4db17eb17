//! Skills: folders of instructions (`SKILL.md`) and files beside it that the model loads on
//! demand, in the shape Claude Code, Codex and Harbor share.
//!
//! A session takes one `SkillSet`, a snapshot read once at its start: the system prompt lists
//! each skill's name and description, the `load_skill` tool returns a body, and `read_file` of a
//! skill's file is served from the same snapshot. So the content hash (part of the scaffold
//! hash) names exactly the bytes the model could see, wherever the skills came from (this
//! machine's folders or a task's environment).

mod discover;
mod front_matter;
mod tool;
mod workspace;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::scaffold::Scaffold;

pub use discover::{SkillRoot, discover_in_workspace, discover_local};
pub use front_matter::SkillName;
pub(crate) use tool::LOAD_SKILL_TOOL;
pub use tool::load_skill_tool;
pub(crate) use workspace::SkillWorkspace;

/// The file that makes a folder a skill.
pub const SKILL_FILE: &str = "SKILL.md";

/// Why skills could not be read. Each names the file (and the field) at fault.
#[derive(Debug, thiserror::Error)]
pub enum SkillError {
    /// A file or folder could not be read, or `SKILL.md` is not a UTF-8 file.
    #[error("{path}: {message}")]
    Read {
        /// The file or folder.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// `SKILL.md` does not open with `---` delimited front matter, or it is not valid YAML.
    #[error("{path}: front matter: {message}")]
    FrontMatter {
        /// The `SKILL.md` file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A front-matter field is missing or invalid.
    #[error("{path}: field `{field}`: {message}")]
    Field {
        /// The `SKILL.md` file.
        path: PathBuf,
        /// The field's name as written (`name`, `description`, ...).
        field: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// A limit was passed: folder depth, files per skill, bytes per file or per root.
    #[error("{path}: {message}")]
    TooLarge {
        /// The file or folder where a limit was passed.
        path: PathBuf,
        /// Which limit.
        message: String,
    },
}

/// One skill as read: its declared name and description, its body and every file of its folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// The skill's name from its front matter.
    pub name: SkillName,
    /// What the skill is for; all the model sees before it loads the skill.
    pub description: String,
    /// `allowed-tools`: the tools the skill expects to use (shown, not a grant).
    pub allowed_tools: Vec<String>,
    /// The folder, as the workspace addresses it (absolute).
    pub dir: PathBuf,
    /// `SKILL.md` after its front matter.
    pub body: String,
    /// Every file of the folder by path relative to `dir`, `SKILL.md` included.
    pub files: BTreeMap<PathBuf, Vec<u8>>,
}

impl Skill {
    /// SHA-256 over the name and every file (relative path and content), in path order.
    pub fn hash(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.name.as_str().as_bytes());
        h.update([0]);
        for (rel, bytes) in &self.files {
            h.update(rel.to_string_lossy().as_bytes());
            h.update([0]);
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        }
        hex::encode(h.finalize())
    }
}

/// The skills of one session, by name. Later roots shadow earlier ones by name; each shadowing
/// is kept as a warning for the driver to show.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkillSet {
    skills: BTreeMap<SkillName, Skill>,
    warnings: Vec<String>,
}

impl SkillSet {
    /// The set of `roots`, in order (a later root's skill replaces an earlier one's of the same
    /// name).
    pub fn from_roots(roots: Vec<SkillRoot>) -> Self {
        let mut set = SkillSet::default();
        for root in roots {
            set.warnings.extend(root.warnings);
            for skill in root.skills {
                if let Some(old) = set.skills.get(&skill.name) {
                    set.warnings.push(format!(
                        "skill {} in {} shadows the one in {}",
                        skill.name,
                        skill.dir.display(),
                        old.dir.display()
                    ));
                }
                set.skills.insert(skill.name.clone(), skill);
            }
        }
        set
    }

    /// The set has no skill.
    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    /// Skills in the set.
    pub fn len(&self) -> usize {
        self.skills.len()
    }

    /// Skills in name order.
    pub fn iter(&self) -> impl Iterator<Item = &Skill> {
        self.skills.values()
    }

    /// The skill named `name`, if the set has one.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.values().find(|s| s.name.as_str() == name)
    }

    /// Shadowed skills, one line each.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// SHA-256 over every skill's hash in name order; `None` when there are no skills, so a
    /// session without skills keeps the scaffold hash it had before skills existed.
    pub fn hash(&self) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let mut h = Sha256::new();
        for skill in self.iter() {
            h.update(skill.name.as_str().as_bytes());
            h.update([0]);
            h.update(skill.hash().as_bytes());
            h.update([0]);
        }
        Some(hex::encode(h.finalize()))
    }

    /// The system prompt's section: what each skill is for and how to load it. `None` without
    /// skills.
    pub fn prompt_section(&self) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let mut out = format!(
            "<skills>\nSkills are folders of instructions and files for particular kinds of \
             work. When the task matches a skill's description, call {LOAD_SKILL_TOOL} with its \
             name before you start and follow what it says; read the files it lists with \
             read_file.\n"
        );
        for s in self.iter() {
            out.push_str(&format!("- {}: {}\n", s.name, s.description));
        }
        out.push_str("</skills>");
        Some(out)
    }

    /// `scaffold` as a session with these skills runs it: the prompt's skills section after the
    /// declared sources, and the content hash. Unchanged without skills.
    pub fn apply_to(&self, mut scaffold: Scaffold) -> Scaffold {
        if let Some(section) = self.prompt_section() {
            scaffold.system_prompt.push(section);
            scaffold.skills = self.hash();
        }
        scaffold
    }

    /// The skill whose folder holds `path` (absolute), and `path` relative to that folder.
    fn locate(&self, path: &Path) -> Option<(&Skill, PathBuf)> {
        self.iter().find_map(|s| {
            path.strip_prefix(&s.dir)
                .ok()
                .map(|rel| (s, rel.to_path_buf()))
        })
    }

    /// The bytes of a skill's file at `path` (absolute).
    pub fn file(&self, path: &Path) -> Option<&[u8]> {
        let (skill, rel) = self.locate(path)?;
        skill.files.get(&rel).map(Vec::as_slice)
    }

    /// Whether `path` (absolute) is a skill's folder, one of its sub-folders or one of its files.
    pub fn contains(&self, path: &Path) -> bool {
        self.locate(path).is_some_and(|(skill, rel)| {
            rel.as_os_str().is_empty() || skill.files.keys().any(|f| f.starts_with(&rel))
        })
    }

    /// The entries of a skill's folder or sub-folder at `path` (absolute): name and whether it
    /// is a folder, sorted by name. `None` when `path` is no folder of a skill.
    pub fn dir_entries(&self, path: &Path) -> Option<Vec<(String, bool, u64)>> {
        let (skill, rel) = self.locate(path)?;
        let mut entries: BTreeMap<String, (bool, u64)> = BTreeMap::new();
        for (file, bytes) in &skill.files {
            let Ok(below) = file.strip_prefix(&rel) else {
                continue;
            };
            let mut parts = below.components();
            let Some(first) = parts.next() else {
                // `path` is this file itself, not a folder.
                return None;
            };
            let name = first.as_os_str().to_string_lossy().into_owned();
            let is_dir = parts.next().is_some();
            entries.insert(name, (is_dir, if is_dir { 0 } else { bytes.len() as u64 }));
        }
        if entries.is_empty() && !rel.as_os_str().is_empty() {
            return None;
        }
        Some(
            entries
                .into_iter()
                .map(|(n, (d, len))| (n, d, len))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests;
