//! Which calls get an effect receipt, and how a dispatched call's receipt is settled.
//!
//! A call gets a receipt when it changes the world: tools declared `effectful` (file writes
//! and edits, outbound messages), MCP tools above `safe`, and `bash` unless a conservative
//! classifier sees a plainly read-only command. A mistake in the classifier costs a receipt,
//! never a lost effect: anything unclear gets one.

use super::StoreError;
use super::receipts::ReceiptStore;
use super::timeline::CallOutcome;
use crate::policy::SafetyLevel;

/// What decides whether a call gets a receipt: the tool's binding (`builtin:bash`,
/// `mcp:server/tool`), its spec's `effectful` flag and safety level, and the command line the
/// call carries in its spec's declared command argument.
#[derive(Debug, Clone, Copy)]
pub struct EffectProbe<'a> {
    pub(crate) binding: &'a str,
    pub(crate) effectful: bool,
    pub(crate) safety: SafetyLevel,
    pub(crate) command: Option<&'a str>,
}

/// Whether a call changes the world and so gets a receipt: tools declared `effectful` (file
/// writes and edits, outbound messages), MCP tools above `safe`, and `bash` unless the command
/// is plainly read-only.
pub fn needs_receipt(call: EffectProbe<'_>) -> bool {
    if call.binding == "builtin:bash" {
        return !call.command.is_some_and(bash_is_read_only);
    }
    if call.binding.starts_with("mcp:") {
        return call.effectful || call.safety > SafetyLevel::Safe;
    }
    call.effectful
}

/// Programs that only read, with no option that writes (checked below for `find` and `git`).
const READ_ONLY_PROGRAMS: [&str; 25] = [
    "ls", "cat", "head", "tail", "wc", "grep", "egrep", "fgrep", "rg", "pwd", "echo", "stat",
    "file", "du", "df", "which", "whoami", "id", "date", "uname", "true", "diff", "cmp", "find",
    "git",
];
const GIT_READ_ONLY: [&str; 7] = [
    "status",
    "log",
    "diff",
    "show",
    "rev-parse",
    "ls-files",
    "blame",
];
const FIND_WRITES: [&str; 9] = [
    "-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls",
];

/// A conservative read-only test for a shell command: every stage of a pipeline or `&&` /
/// `||` chain is an allow-listed program, and the line has no redirection, substitution,
/// background job, `;`, newline, subshell or variable assignment. Anything unclear is "not
/// read-only" (it gets a receipt), so a mistake here costs a receipt, never a lost effect.
pub fn bash_is_read_only(command: &str) -> bool {
    let without_and = command.replace("&&", " ");
    let forbidden = [
        '>', '<', '`', ';', '\n', '\r', '&', '(', ')', '{', '}', '\\',
    ];
    if without_and.contains(forbidden) || command.contains("$(") || command.trim().is_empty() {
        return false;
    }
    without_and
        .split("||")
        .flat_map(|s| s.split('|'))
        .all(stage_is_read_only)
}

fn stage_is_read_only(stage: &str) -> bool {
    let words: Vec<&str> = stage.split_whitespace().collect();
    let Some(program) = words.first() else {
        return false;
    };
    if !READ_ONLY_PROGRAMS.contains(program) {
        return false;
    }
    let args = &words[1..];
    match *program {
        "find" => !args.iter().any(|a| FIND_WRITES.contains(a)),
        "git" => {
            args.first().is_some_and(|sub| GIT_READ_ONLY.contains(sub))
                && !args.iter().any(|a| a.starts_with("--output"))
        }
        _ => true,
    }
}

/// How a dispatched call ended, for its receipt.
#[derive(Debug, Clone, Copy)]
pub struct Settlement<'a> {
    pub(crate) call_id: &'a str,
    pub(crate) binding: &'a str,
    pub(crate) outcome: &'a CallOutcome,
    pub(crate) content: &'a str,
    pub(crate) is_error: bool,
    /// The step's cancellation fired while the call ran.
    pub cancelled: bool,
}

/// Settle a receipt after dispatch: `committed` with the outcome when the handler ran to its
/// end, `uncertain` when it timed out, was cancelled or was killed at its deadline (the outside
/// work may be half done or still going).
pub fn settle(receipts: &ReceiptStore, s: Settlement<'_>) -> Result<(), StoreError> {
    // bash ends its status line so when it killed the command's process group at the deadline
    // or on cancellation: the command stopped part-way.
    let killed = s.binding == "builtin:bash"
        && s.content
            .trim_end()
            .ends_with("the process group was killed]");
    match s.outcome {
        CallOutcome::TimedOut => receipts.mark_uncertain(s.call_id, "timed out"),
        _ if s.cancelled => receipts.mark_uncertain(s.call_id, "cancelled"),
        _ if killed => receipts.mark_uncertain(s.call_id, "killed at its deadline"),
        CallOutcome::Failed => receipts.commit(s.call_id, "failed", s.content, s.is_error),
        _ => receipts.commit(s.call_id, "succeeded", s.content, s.is_error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_commands_are_recognised_conservatively() {
        for ro in [
            "ls -la",
            "cat a.txt | grep x | wc -l",
            "git status && git log --oneline -3",
            "echo hello",
            "pwd",
            "find . -name '*.rs'",
            "git diff HEAD~1",
        ] {
            assert!(bash_is_read_only(ro), "{ro}");
        }
        for rw in [
            "echo hi > f",
            "echo hi >> f",
            "cat a | tee b",
            "rm -rf x",
            "ls; rm x",
            "ls & rm x",
            "echo $(rm x)",
            "echo `rm x`",
            "find . -delete",
            "git commit -m x",
            "git -C . status",
            "git diff --output=x",
            "FOO=1 ls",
            "sed -i s/a/b/ f",
            "",
            "ls\nrm x",
        ] {
            assert!(!bash_is_read_only(rw), "{rw}");
        }
    }
}
