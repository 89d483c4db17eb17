//! `geode scaffold`: show a scaffold with every default filled in, print its hash, or list the
//! differences between two scaffolds.

use super::exit::Exit;
use std::path::PathBuf;

use clap::Subcommand;
use geode_harness::search::config::load_scaffold;
use geode_harness::search::space::diff;

#[derive(Debug, Subcommand)]
pub enum ScaffoldCommand {
    /// Print the scaffold (TOML, all fields); without FILE, the default scaffold.
    Show {
        /// The scaffold (TOML); default: the default scaffold.
        file: Option<PathBuf>,
        /// Print it as JSON instead of TOML.
        #[arg(long)]
        json: bool,
    },
    /// Print the scaffold's hash (SHA-256 of its canonical JSON), the fingerprint search uses.
    Hash {
        /// The scaffold (TOML); default: the default scaffold.
        file: Option<PathBuf>,
    },
    /// List changed fields as `path: before -> after`; exit 0 if equal, 10 if different.
    Diff {
        /// The scaffold compared from (TOML).
        a: PathBuf,
        /// The scaffold compared to (TOML).
        b: PathBuf,
    },
}

pub fn run(cmd: ScaffoldCommand) -> anyhow::Result<Exit> {
    match cmd {
        ScaffoldCommand::Show { file, json } => {
            let s = load_scaffold(file.as_deref())?;
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                print!("{}", toml::to_string(&s)?);
            }
            Ok(Exit::Success)
        }
        ScaffoldCommand::Hash { file } => {
            println!("{}", load_scaffold(file.as_deref())?.hash());
            Ok(Exit::Success)
        }
        ScaffoldCommand::Diff { a, b } => {
            let d = diff(&load_scaffold(Some(&a))?, &load_scaffold(Some(&b))?);
            for x in &d {
                println!("{}: {} -> {}", x.path, x.before, x.after);
            }
            Ok(if d.is_empty() {
                Exit::Success
            } else {
                Exit::Findings
            })
        }
    }
}
