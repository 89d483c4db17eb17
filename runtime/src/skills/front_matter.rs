//! `SKILL.md`'s YAML front matter, the Agent Skills shape: `name` (lowercase letters, digits
//! and hyphens, as Claude Code requires), `description` (required: it is
//! all the model sees before loading the skill), optional `allowed-tools` (a list, or one string
//! of names separated by commas or spaces, as Claude Code writes it). Other keys (`license`,
//! `metadata`, ...) are read as YAML and ignored.

use std::fmt;
use std::path::Path;

use serde::Deserialize;

use super::SkillError;

/// Longest name and description the Agent Skills format allows.
const NAME_MAX: usize = 64;
const DESCRIPTION_MAX: usize = 1024;

/// A skill's name: `[a-z0-9-]+`, at most 64 characters.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SkillName(String);

impl SkillName {
    /// `s` as a name; `Err` says why it is not one (empty, too long, a character not allowed).
    pub fn parse(s: &str) -> Result<Self, String> {
        if s.is_empty() || s.len() > NAME_MAX {
            return Err(format!("{s:?} must be 1 to {NAME_MAX} characters"));
        }
        if !s
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(format!(
                "{s:?} may hold only lowercase letters, digits and hyphens"
            ));
        }
        Ok(SkillName(s.to_string()))
    }

    /// The name as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SkillName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Deserialize)]
struct Raw {
    name: Option<String>,
    description: Option<String>,
    #[serde(rename = "allowed-tools")]
    allowed_tools: Option<AllowedTools>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum AllowedTools {
    List(Vec<String>),
    Text(String),
}

/// What `SKILL.md` declares, and the body after its front matter.
#[derive(Debug)]
pub(super) struct Parsed {
    pub name: SkillName,
    pub description: String,
    pub allowed_tools: Vec<String>,
    pub body: String,
}

/// Parse `text`, the `SKILL.md` at `path`.
pub(super) fn parse(path: &Path, text: &str) -> Result<Parsed, SkillError> {
    let fm_err = |message: String| SkillError::FrontMatter {
        path: path.to_path_buf(),
        message,
    };
    let field = |field: &'static str, message: String| SkillError::Field {
        path: path.to_path_buf(),
        field,
        message,
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    if lines.next().map(str::trim_end) != Some("---") {
        return Err(fm_err(
            "the file must open with a `---` line and YAML front matter".to_string(),
        ));
    }
    let mut yaml = String::new();
    let mut closed = false;
    for line in lines.by_ref() {
        if line.trim_end() == "---" {
            closed = true;
            break;
        }
        yaml.push_str(line);
    }
    if !closed {
        return Err(fm_err("no closing `---` line".to_string()));
    }
    let body: String = lines.collect();
    let de = serde_yaml_ng::Deserializer::from_str(&yaml);
    let raw: Raw = serde_path_to_error::deserialize(de).map_err(|e| {
        let at = e.path().to_string();
        fm_err(format!("at `{at}`: {}", e.into_inner()))
    })?;
    let name = raw
        .name
        .ok_or_else(|| field("name", "missing".to_string()))?;
    let name = SkillName::parse(&name).map_err(|m| field("name", m))?;
    let description = raw
        .description
        .map(|d| d.trim().to_string())
        .filter(|d| !d.is_empty())
        .ok_or_else(|| field("description", "missing or empty".to_string()))?;
    if description.chars().count() > DESCRIPTION_MAX {
        return Err(field(
            "description",
            format!("longer than {DESCRIPTION_MAX} characters"),
        ));
    }
    // A description is one line of the prompt's list.
    let description = description.split_whitespace().collect::<Vec<_>>().join(" ");
    let allowed_tools = match raw.allowed_tools {
        None => Vec::new(),
        Some(AllowedTools::List(v)) => v,
        // `Bash(git add:*)` holds a space, so commas separate when there are any.
        Some(AllowedTools::Text(s)) if s.contains(',') => s
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect(),
        Some(AllowedTools::Text(s)) => s.split_whitespace().map(str::to_string).collect(),
    };
    Ok(Parsed {
        name,
        description,
        allowed_tools,
        body: body.trim_start_matches('\n').to_string(),
    })
}
