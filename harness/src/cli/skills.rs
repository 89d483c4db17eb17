//! `geode skills list|show NAME` and the skills of the daily CLI's sessions: the folders under
//! Claude Code's `~/.claude/skills`, `$GEODE_HOME/skills`, then the project's `.claude/skills`
//! and `.geode/skills` (same `SKILL.md` format; a later folder's skill shadows an earlier one's
//! of the same name, with a warning: the project's over the user's, GEODE's over Claude Code's).

use super::exit::Exit;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use geode_runtime::skills::{SkillSet, discover_local};

use super::assembly::geode_home;

#[derive(Debug, Subcommand)]
pub enum SkillsCommand {
    /// Each skill's name, description and folder, in name order, with the set's content hash.
    List(SkillsArgs),
    /// One skill's front matter, body and files.
    Show {
        /// The skill's name (its front matter's `name`).
        name: String,
        #[command(flatten)]
        args: SkillsArgs,
    },
}

#[derive(Debug, Args)]
pub struct SkillsArgs {
    /// The project directory (default: the current directory).
    #[arg(long)]
    cwd: Option<PathBuf>,
}

/// Where the daily CLI looks for skills, earliest (most easily shadowed) first.
pub(super) fn skill_roots(project: &Path) -> Vec<PathBuf> {
    vec![
        geode_harness::assembly::claude_code::user_dir().join("skills"),
        geode_home().join("skills"),
        project.join(".claude").join("skills"),
        project.join(".geode").join("skills"),
    ]
}

/// The skills of `project` and this user, with each shadowing reported on stderr.
pub(super) async fn local_skills(project: &Path) -> anyhow::Result<SkillSet> {
    let set = discover_local(&skill_roots(project))
        .await
        .context("reading skills")?;
    for w in set.warnings() {
        say!("geode: {w}");
    }
    Ok(set)
}

/// One line per skill (for `geode skills list` and `/skills`).
pub(super) fn describe(set: &SkillSet) -> String {
    if set.is_empty() {
        return "no skills (folders with a SKILL.md under $GEODE_HOME/skills, .geode/skills, \
                ~/.claude/skills or .claude/skills)"
            .to_string();
    }
    let mut lines: Vec<String> = set
        .iter()
        .map(|s| format!("{}  {}  ({})", s.name, s.description, s.dir.display()))
        .collect();
    if let Some(hash) = set.hash() {
        lines.push(format!("skills hash {hash}"));
    }
    lines.join("\n")
}

pub async fn run(cmd: SkillsCommand) -> anyhow::Result<Exit> {
    let (args, name) = match &cmd {
        SkillsCommand::List(args) => (args, None),
        SkillsCommand::Show { name, args } => (args, Some(name)),
    };
    let project = match &args.cwd {
        Some(p) => p.clone(),
        None => std::env::current_dir()?,
    };
    let set = local_skills(&project).await?;
    let Some(name) = name else {
        println!("{}", describe(&set));
        return Ok(Exit::Success);
    };
    let Some(skill) = set.get(name) else {
        let names: Vec<&str> = set.iter().map(|s| s.name.as_str()).collect();
        anyhow::bail!("no skill named {name:?} (skills: {})", names.join(", "));
    };
    println!("name: {}", skill.name);
    println!("description: {}", skill.description);
    if !skill.allowed_tools.is_empty() {
        println!("allowed-tools: {}", skill.allowed_tools.join(", "));
    }
    println!("folder: {}", skill.dir.display());
    println!("hash: {}", skill.hash());
    println!("files:");
    for path in skill.files.keys() {
        println!("  {}", path.display());
    }
    println!("\n{}", skill.body.trim_end());
    Ok(Exit::Success)
}
