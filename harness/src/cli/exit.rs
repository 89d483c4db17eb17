//! How every `geode` command ends, as one closed set: a script tells "decided REJECT" from "could
//! not decide" and "found problems" from "could not check" by the code alone. The README's
//! "Exit codes" table is this enum written out; a test holds the two together.

use std::process::ExitCode;

/// The exit status of a `geode` command. Codes mean the same in every command that can end so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::EnumIter)]
pub enum Exit {
    /// Done: the answer was accepted, the run finished, KEEP, the check found nothing.
    Success,
    /// Could not do what was asked: a bad file, a missing program, a model or set-up error, an
    /// I/O failure. For a decision: could not decide; for a check: could not check.
    Failed,
    /// Bad arguments (what clap refuses, and argument values refused before any work).
    Usage,
    /// `exec`, `resume`: a guard or budget ended the turn.
    TurnStopped,
    /// `exec`, `resume`: a hook blocked the prompt.
    HookBlocked,
    /// `exec`, `resume`: verification failed after the repair budget, or a hook asked for an
    /// outside check.
    Unverified,
    /// `crucible run|decide`, `search promote`: the gate decided REJECT.
    Reject,
    /// `crucible run|decide`, `search promote`: the gate decided INVALID (no valid comparison).
    Invalid,
    /// `run`: no trial reached a verdict (every one ended before its agent or in
    /// infrastructure), so the run measured nothing.
    NothingEvaluated,
    /// `crucible replicate`: the replication's verdict differs from the original's.
    NotReplicated,
    /// A check ran and found problems: `tasks validate|check`, `tasks import-tb1` (some tasks
    /// not converted), `dataset scan|verify|check-splits`, `crucible audit`, `scaffold diff`
    /// (the scaffolds differ).
    Findings,
    /// Cancelled: Ctrl-C or SIGTERM.
    Cancelled,
    /// Standard output's reader went away (`geode ... | head`), as a SIGPIPE death would say.
    StdoutClosed,
}

impl Exit {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Failed => 1,
            Exit::Usage => 2,
            Exit::TurnStopped => 3,
            Exit::HookBlocked => 4,
            Exit::Unverified => 5,
            Exit::Reject => 6,
            Exit::Invalid => 7,
            Exit::NothingEvaluated => 8,
            Exit::NotReplicated => 9,
            Exit::Findings => 10,
            Exit::Cancelled => 130,
            Exit::StdoutClosed => 141,
        }
    }

    /// `Success` when `clean`, else `Findings`: the end of every check.
    pub fn check(clean: bool) -> Exit {
        if clean { Exit::Success } else { Exit::Findings }
    }

    /// The gate's verdict as the end of a command that decided.
    pub fn verdict(verdict: geode_crucible::Verdict) -> Exit {
        match verdict {
            geode_crucible::Verdict::Keep => Exit::Success,
            geode_crucible::Verdict::Reject => Exit::Reject,
            geode_crucible::Verdict::Invalid => Exit::Invalid,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}

#[cfg(test)]
mod tests {
    use super::Exit;
    use strum::IntoEnumIterator;

    /// The codes of the README's "Exit codes" table, in its order.
    fn readme_codes() -> Vec<u8> {
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
            .expect("README.md");
        let table = readme
            .split("\n## Exit codes\n")
            .nth(1)
            .expect("README.md has an `## Exit codes` section");
        table
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .filter_map(|l| l.trim_matches('|').split('|').next())
            .filter_map(|cell| cell.trim().trim_matches('`').parse().ok())
            .collect()
    }

    #[test]
    fn the_readme_table_lists_every_exit_code_once_in_order() {
        let ours: Vec<u8> = Exit::iter().map(Exit::code).collect();
        assert_eq!(readme_codes(), ours);
    }

    #[test]
    fn no_two_ends_share_a_code() {
        let mut codes: Vec<u8> = Exit::iter().map(Exit::code).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), Exit::iter().count());
    }
}
