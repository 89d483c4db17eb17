//! `geode unshare CMD...`: a command in the rootless sandbox's user namespace, as `podman
//! unshare` and `buildah unshare` do. Files a rootless trial's users wrote (a verifier's
//! folder, build layers) belong to the user's subordinate ids on the host; as root of the
//! namespace the user may read and remove them.

use std::os::unix::process::CommandExt;
use std::process::ExitCode;

use anyhow::Context;

#[derive(Debug, clap::Args)]
pub struct UnshareArgs {
    /// The command and its arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    pub command: Vec<String>,
}

/// Runs with root of the namespace (main entered it) or of the machine: the command replaces
/// this process.
pub fn run(args: UnshareArgs) -> anyhow::Result<ExitCode> {
    if let Some(why) = geode_harness::env::rootless::unavailable() {
        anyhow::bail!("{why}");
    }
    let (program, rest) = args
        .command
        .split_first()
        .context("geode unshare: no command given")?;
    let e = std::process::Command::new(program).args(rest).exec();
    Err(e).with_context(|| format!("run {program}"))
}
