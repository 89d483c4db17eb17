//! The system prompt, rebuilt every round from declared sources: the scaffold's static sections,
//! then a `<dynamic_context>` block (date, where a person's session runs, plan and reflection
//! hints, runtime hints). The
//! conversation travels separately.

use sha2::{Digest, Sha256};

/// Everything that goes into one round's system prompt.
#[derive(Debug, Clone, Default)]
pub(crate) struct PromptSources<'a> {
    pub sections: &'a [String],
    /// `YYYY-MM-DD`, injected so tests are deterministic.
    pub date: &'a str,
    /// Where the session runs (cwd, OS, git state); empty for benchmark trials.
    pub environment: &'a [String],
    pub cognitive_hints: Vec<String>,
    pub runtime_hints: &'a [String],
}

pub(crate) fn build_system_prompt(src: &PromptSources<'_>) -> String {
    let mut out = src.sections.join("\n\n");
    out.push_str("\n\n<dynamic_context>\n");
    out.push_str(&format!("date: {}\n", src.date));
    for h in src
        .environment
        .iter()
        .chain(&src.cognitive_hints)
        .chain(src.runtime_hints)
    {
        out.push_str(h);
        out.push('\n');
    }
    out.push_str("</dynamic_context>");
    out
}

/// Recorded per turn so a result can name the prompt it was produced under.
pub fn prompt_hash(prompt: &str) -> String {
    hex::encode(Sha256::digest(prompt.as_bytes()))
}

/// The project files a session's system prompt is declared to include, beyond the scaffold:
/// chosen `## ` sections of `GEODE.md`, the whole of `AGENTS.md` and `CLAUDE.md` (what Codex and
/// Claude Code users keep for their agents), every `*.md` of the rules directory (sorted by
/// name), and the project memory file. Missing files contribute nothing; paths are relative to the
/// workspace root.
#[derive(Debug, Clone, Default)]
pub struct DeclaredSources {
    /// `## ` headings of GEODE.md to keep; empty keeps the whole file.
    pub geode_md_sections: Vec<String>,
    /// Directory whose `*.md` files are all included, sorted by name.
    pub rules_dir: Option<std::path::PathBuf>,
    /// The project memory file, included whole.
    pub memory_file: Option<std::path::PathBuf>,
}

/// Why the declared prompt sources could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum PromptSourceError {
    /// A source exists but could not be read.
    #[error("cannot read prompt source {path}: {source}")]
    Read {
        /// The file that could not be read.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Sections chosen from GEODE.md are not in it.
    #[error("GEODE.md has no section(s) {missing:?} (it has {present:?})")]
    MissingSections {
        /// The chosen headings GEODE.md lacks.
        missing: Vec<String>,
        /// The `## ` headings GEODE.md has.
        present: Vec<String>,
    },
}

fn read_optional(path: &std::path::Path) -> Result<Option<String>, PromptSourceError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(PromptSourceError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The `## ` sections of a markdown text, by heading, in order (text before the first heading
/// is dropped when sections are chosen).
fn markdown_sections(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            out.push((h.trim().to_string(), format!("{line}\n")));
        } else if let Some((_, body)) = out.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    out
}

/// Load the declared sources under `root` as system-prompt sections, each labelled with its
/// origin so the model (and a reader of the prompt) can tell them apart. A chosen GEODE.md
/// section that does not exist is an error: a silently empty prompt is worse.
pub fn load_declared_sections(
    root: &std::path::Path,
    decl: &DeclaredSources,
) -> Result<Vec<String>, PromptSourceError> {
    let mut out = Vec::new();
    if let Some(text) = read_optional(&root.join("GEODE.md"))? {
        let body = if decl.geode_md_sections.is_empty() {
            text.trim_end().to_string()
        } else {
            let sections = markdown_sections(&text);
            let missing: Vec<String> = decl
                .geode_md_sections
                .iter()
                .filter(|w| !sections.iter().any(|(h, _)| h == *w))
                .cloned()
                .collect();
            if !missing.is_empty() {
                return Err(PromptSourceError::MissingSections {
                    missing,
                    present: sections.into_iter().map(|(h, _)| h).collect(),
                });
            }
            sections
                .into_iter()
                .filter(|(h, _)| decl.geode_md_sections.contains(h))
                .map(|(_, b)| b)
                .collect::<String>()
                .trim_end()
                .to_string()
        };
        out.push(format!(
            "<project_instructions source=\"GEODE.md\">\n{body}\n</project_instructions>"
        ));
    }
    for name in ["AGENTS.md", "CLAUDE.md"] {
        if let Some(text) = read_optional(&root.join(name))? {
            out.push(format!(
                "<project_instructions source=\"{name}\">\n{}\n</project_instructions>",
                text.trim_end()
            ));
        }
    }
    if let Some(dir) = &decl.rules_dir {
        let dir = root.join(dir);
        let mut files: Vec<std::path::PathBuf> = match std::fs::read_dir(&dir) {
            Ok(rd) => rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "md"))
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => return Err(PromptSourceError::Read { path: dir, source }),
        };
        files.sort();
        for f in files {
            if let Some(text) = read_optional(&f)? {
                let name = f.file_name().map(|n| n.to_string_lossy().into_owned());
                out.push(format!(
                    "<rule source=\"{}\">\n{}\n</rule>",
                    name.unwrap_or_default(),
                    text.trim_end()
                ));
            }
        }
    }
    if let Some(mem) = &decl.memory_file
        && let Some(text) = read_optional(&root.join(mem))?
    {
        out.push(format!(
            "<project_memory>\n{}\n</project_memory>",
            text.trim_end()
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_go_into_the_dynamic_block() {
        let sections = vec!["static".to_string()];
        let hints = vec!["be brief".to_string()];
        let environment = vec!["cwd: /w".to_string()];
        let p = build_system_prompt(&PromptSources {
            sections: &sections,
            date: "2026-11-30",
            environment: &environment,
            cognitive_hints: vec!["Plan: x".into()],
            runtime_hints: &hints,
        });
        assert!(p.starts_with(
            "static\n\n<dynamic_context>\ndate: 2026-11-30\ncwd: /w\nPlan: x\nbe brief\n"
        ));
        assert_eq!(prompt_hash(&p).len(), 64);
    }

    #[test]
    fn declared_sources_pick_sections_rules_and_memory() {
        #![allow(clippy::unwrap_used)]
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(
            root.join("GEODE.md"),
            "intro\n## Build\ncargo build\n## Secrets\nnone here\n## Style\nshort\n",
        )
        .unwrap();
        std::fs::create_dir_all(root.join(".geode/rules")).unwrap();
        std::fs::write(root.join(".geode/rules/b.md"), "rule b\n").unwrap();
        std::fs::write(root.join(".geode/rules/a.md"), "rule a\n").unwrap();
        std::fs::write(root.join(".geode/rules/skip.txt"), "no").unwrap();
        std::fs::write(root.join(".geode/MEMORY.md"), "remember x").unwrap();
        let decl = DeclaredSources {
            geode_md_sections: vec!["Build".into(), "Style".into()],
            rules_dir: Some(".geode/rules".into()),
            memory_file: Some(".geode/MEMORY.md".into()),
        };
        let s = load_declared_sections(root, &decl).unwrap();
        assert_eq!(s.len(), 4, "{s:?}");
        assert!(s[0].contains("cargo build") && s[0].contains("short"));
        assert!(!s[0].contains("none here") && !s[0].contains("intro"));
        assert!(s[1].contains("rule a") && s[2].contains("rule b"));
        assert!(s[3].contains("remember x"));
        let bad = DeclaredSources {
            geode_md_sections: vec!["Nope".into()],
            ..DeclaredSources::default()
        };
        assert!(load_declared_sections(root, &bad).is_err());
        // Codex's and Claude Code's project files come right after GEODE.md, labelled.
        std::fs::write(root.join("AGENTS.md"), "use tabs\n").unwrap();
        std::fs::write(root.join("CLAUDE.md"), "run make test\n").unwrap();
        let s = load_declared_sections(root, &decl).unwrap();
        assert_eq!(s.len(), 6, "{s:?}");
        assert!(s[1].starts_with("<project_instructions source=\"AGENTS.md\">\nuse tabs"));
        assert!(s[2].starts_with("<project_instructions source=\"CLAUDE.md\">\nrun make test"));
    }
}
