//! External subcommands: `geode NAME ARGS...` runs `geode-NAME ARGS...`, the way git and cargo
//! do. The reports live in `geode-report` (crate `reports`) so that polars stays off the build
//! path of `geode` itself; `geode report` and `geode compare` are its two entry points.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::bail;

/// Arguments handed through untouched (flags included) to the external program.
#[derive(Debug, clap::Args)]
pub struct PassThrough {
    /// The arguments handed to the program as they are.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<OsString>,
}

/// Replaces this process with `geode-PROGRAM PREFIX... ARGS...`; returns only on failure.
pub fn dispatch(program: &str, prefix: &[&str], args: &[OsString]) -> anyhow::Result<ExitCode> {
    let executable = format!("geode-{program}");
    let Some(path) = find(&executable) else {
        // The programs we ship say how to build them; others are the user's own.
        let hint = match program {
            "report" => "; build it with `cargo build --release -p geode-reports`",
            _ => "; see `geode --help` for the built-in subcommands",
        };
        bail!("`{executable}` was not found next to this executable or on PATH{hint}");
    };
    let err = Command::new(&path).args(prefix).args(args).exec();
    bail!("could not run {}: {err}", path.display())
}

/// Next to the running `geode` first (a cargo build puts both in the same target directory),
/// then the directories of PATH.
fn find(executable: &str) -> Option<PathBuf> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(executable)));
    let on_path = std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(executable))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    beside.into_iter().chain(on_path).find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// `geode NAME ...` for a NAME clap does not know: the first element is NAME.
pub fn dispatch_unknown(argv: &[OsString]) -> anyhow::Result<ExitCode> {
    let Some((name, rest)) = argv.split_first() else {
        bail!("no subcommand given");
    };
    let name = name.to_string_lossy();
    if name.is_empty() || name.contains('/') {
        bail!("`{name}` is not a subcommand");
    }
    dispatch(&name, &[], rest)
}
