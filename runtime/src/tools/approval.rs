//! The approval gate: who is asked before a call runs, and what happens when nobody can answer.

use std::collections::BTreeSet;
use std::sync::Mutex;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::policy::{HitlLevel, SafetyLevel, SessionPolicy};
use crate::tools::builtin::{EditFileInput, WriteFileInput};
use crate::tools::input::parse_input;
use crate::tools::plan::ToolSpec;

/// What the approver is shown.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApprovalRequest {
    pub(crate) call_id: String,
    pub(crate) tool_name: String,
    pub(crate) input: Value,
    pub(crate) safety_level: SafetyLevel,
    /// Why a hook asked for permission, when one did.
    pub reason: Option<String>,
    /// What a person reads before answering ([`preview`]).
    pub preview: String,
}

/// Lines of a preview beyond which it is cut.
const PREVIEW_LINES: usize = 60;

/// What a person reads before answering: a command (the tool's declared command argument) as
/// the shell line it is, a file write or an edit as a unified diff (`current`: the file as it
/// is now, when it exists), anything else as compact JSON; cut after [`PREVIEW_LINES`] lines.
pub fn preview(spec: &ToolSpec, input: &Value, current: Option<&str>) -> String {
    let text = if let Some(command) = spec.command(input) {
        format!("$ {command}")
    } else {
        file_diff(&spec.name, input, current).unwrap_or_else(|| input.to_string())
    };
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= PREVIEW_LINES {
        return text;
    }
    format!(
        "{}\n... {} more lines",
        lines[..PREVIEW_LINES].join("\n"),
        lines.len() - PREVIEW_LINES
    )
}

/// Whether `tool`'s preview is the diff of a file it changes (see [`preview`]).
pub fn changes_a_file(tool: &str) -> bool {
    matches!(tool, "write_file" | "edit_file")
}

/// A write or an edit as the diff it makes, read through the tool's own input type.
fn file_diff(tool: &str, input: &Value, current: Option<&str>) -> Option<String> {
    match tool {
        "write_file" => {
            let write: WriteFileInput = parse_input(input).ok()?;
            let path = write.path;
            Some(match current {
                Some(old) => format!("{path}\n{}", diff(old, &write.content)),
                None => format!("new file {path}\n{}", diff("", &write.content)),
            })
        }
        "edit_file" => {
            let edit: EditFileInput = parse_input(input).ok()?;
            let edited = diff(&edit.old_string, &edit.new_string);
            Some(format!("{}\n{edited}", edit.path))
        }
        _ => None,
    }
}

/// A unified diff of `old` to `new`: its hunks, without the `---`/`+++` header (the caller
/// names the file once).
fn diff(old: &str, new: &str) -> String {
    let diff = similar::TextDiff::from_lines(old, new);
    let body = diff
        .unified_diff()
        .context_radius(3)
        .missing_newline_hint(false)
        .to_string();
    if body.is_empty() {
        "(no change)".into()
    } else {
        body.trim_end().to_string()
    }
}

/// A human's answer: y / n / a (always for this tool in this session) / n with the reason the
/// model is told. On the wire (the daemon's `approval_response`) it is the text a person types,
/// `y`, `n`, `a` or `n: WHY`, parsed once where it arrives ([`ApprovalAnswer::from_str`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum ApprovalAnswer {
    /// Run this call (`y`).
    Yes,
    /// Refuse this call (`n`).
    No,
    /// Run this call and every later call of the same tool in this session (`a`).
    Always,
    /// Refuse this call and tell the model why (`n: WHY`).
    NoBecause(String),
}

/// An answer that is none of `y`, `n`, `a`, `n: WHY` (or their long forms).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("decision {0:?}: use y, n, a or n: WHY")]
pub struct UnknownAnswer(pub String);

impl std::str::FromStr for ApprovalAnswer {
    type Err = UnknownAnswer;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if let Some((word, why)) = s.split_once(':')
            && matches!(word.trim().to_ascii_lowercase().as_str(), "n" | "no")
            && !why.trim().is_empty()
        {
            return Ok(ApprovalAnswer::NoBecause(why.trim().to_string()));
        }
        match s.to_ascii_lowercase().as_str() {
            "y" | "yes" => Ok(ApprovalAnswer::Yes),
            "n" | "no" => Ok(ApprovalAnswer::No),
            "a" | "always" => Ok(ApprovalAnswer::Always),
            _ => Err(UnknownAnswer(s.to_string())),
        }
    }
}

impl TryFrom<String> for ApprovalAnswer {
    type Error = UnknownAnswer;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl std::fmt::Display for ApprovalAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApprovalAnswer::Yes => f.write_str("y"),
            ApprovalAnswer::No => f.write_str("n"),
            ApprovalAnswer::Always => f.write_str("a"),
            ApprovalAnswer::NoBecause(why) => write!(f, "n: {why}"),
        }
    }
}

impl From<ApprovalAnswer> for String {
    fn from(answer: ApprovalAnswer) -> String {
        answer.to_string()
    }
}

/// Who answers a call that prompts: a person at the REPL or the daemon's client, or nobody.
#[async_trait]
pub trait Approver: Send + Sync {
    /// The answer to one prompt; the call waits for it.
    async fn ask(&self, request: &ApprovalRequest) -> ApprovalAnswer;

    /// A file change allowed without asking (the level or an earlier "always" let it through):
    /// its diff is shown all the same, so a person never loses sight of what changes. Nothing
    /// where no person watches.
    async fn show(&self, _request: &ApprovalRequest) {}
}

/// The approver of modes without a human: every prompt is a refusal.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHuman;

#[async_trait]
impl Approver for NoHuman {
    async fn ask(&self, _: &ApprovalRequest) -> ApprovalAnswer {
        ApprovalAnswer::No
    }
}

/// Whether a tool's calls prompt at HITL 1 and 2 whatever safety level it declares: its code
/// runs outside GEODE, so only a human vouches for it (runtime.md HITL 1: shell, MCP and
/// computer prompt). MCP tools are bound as `mcp:server/tool`.
pub fn always_prompts(binding: &str) -> bool {
    binding.starts_with("mcp:")
}

/// What the gate decides before any prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateDecision {
    /// The call runs without a prompt.
    Allowed,
    /// A human must be asked (or, without one, the call is denied).
    Prompt,
    /// The call is refused; the reason is what the model is told.
    Denied(String),
}

/// How a person lets the session act right now, switched during a session (`/mode`, Shift-Tab
/// in the REPL), as in Claude Code.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::Display,
    strum::EnumIter,
)]
#[strum(serialize_all = "kebab-case")]
pub enum PermissionMode {
    /// As the policy says.
    #[default]
    Default,
    /// File edits (`write` calls) approved without asking; anything above still asks.
    AcceptEdits,
    /// Read-only: every call above `safe` is refused, so the model can only look and plan.
    Plan,
}

impl PermissionMode {
    /// The kebab-case name (`default`, `accept-edits`, `plan`), as `/mode` takes it.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The mode a kebab-case name stands for; `None` for any other text.
    pub fn parse(s: &str) -> Option<PermissionMode> {
        s.parse().ok()
    }

    /// The mode after this one, in Shift-Tab's cycle.
    pub fn next(self) -> PermissionMode {
        match self {
            PermissionMode::Default => PermissionMode::AcceptEdits,
            PermissionMode::AcceptEdits => PermissionMode::Plan,
            PermissionMode::Plan => PermissionMode::Default,
        }
    }
}

/// The approval rule of one session: policy plus the tools answered "always" and the
/// person's permission mode.
#[derive(Debug)]
pub struct ApprovalGate {
    always: Mutex<BTreeSet<String>>,
    mode: Mutex<PermissionMode>,
}

impl ApprovalGate {
    pub(crate) fn new() -> Self {
        ApprovalGate {
            always: Mutex::new(BTreeSet::new()),
            mode: Mutex::new(PermissionMode::Default),
        }
    }

    pub(crate) fn permission_mode(&self) -> PermissionMode {
        self.mode.lock().map(|m| *m).unwrap_or_default()
    }

    pub(crate) fn set_permission_mode(&self, mode: PermissionMode) {
        if let Ok(mut m) = self.mode.lock() {
            *m = mode;
        }
    }

    fn always_allowed(&self, tool: &str) -> bool {
        self.always
            .lock()
            .map(|s| s.contains(tool))
            .unwrap_or(false)
    }

    pub(crate) fn remember_always(&self, tool: &str) {
        if let Ok(mut s) = self.always.lock() {
            s.insert(tool.to_string());
        }
    }

    /// The gate's rule: by mode and safety level. `hook_asked` forces a prompt (a PreToolUse
    /// hook said request_permission), even for a tool answered "always"; `external` (see
    /// `always_prompts`) makes the tool prompt at HITL 1 and 2 whatever its level.
    pub fn decide(
        &self,
        policy: &SessionPolicy,
        tool: &str,
        safety: SafetyLevel,
        hook_asked: bool,
        external: bool,
    ) -> GateDecision {
        if !policy.mode.has_human() {
            if hook_asked {
                return GateDecision::Prompt;
            }
            // The one unattended exception above the ceiling: DAEMON computer use, switched on
            // separately by the operator.
            if policy.operator_allows_computer(tool) {
                return GateDecision::Allowed;
            }
            return if safety <= policy.unattended_approval_ceiling {
                GateDecision::Allowed
            } else {
                GateDecision::Denied(format!(
                    "no human can approve a {safety} call in {:?} mode, and the session policy \
                     allows unattended calls only up to {}",
                    policy.mode, policy.unattended_approval_ceiling
                ))
            };
        }
        match self.permission_mode() {
            PermissionMode::Plan if safety > SafetyLevel::Safe => {
                return GateDecision::Denied(format!(
                    "plan mode: only read-only calls run; this {safety} call waits until the \
                     person leaves plan mode (Shift-Tab or /mode)"
                ));
            }
            PermissionMode::AcceptEdits
                if safety == SafetyLevel::Write && !hook_asked && !external =>
            {
                return GateDecision::Allowed;
            }
            _ => {}
        }
        if hook_asked {
            return GateDecision::Prompt;
        }
        if self.always_allowed(tool) {
            return GateDecision::Allowed;
        }
        let prompts = match policy.hitl {
            HitlLevel::Auto => false,
            HitlLevel::DangerousOnly => external || safety >= SafetyLevel::Dangerous,
            HitlLevel::Everything => external || safety > SafetyLevel::Safe,
        };
        if prompts {
            GateDecision::Prompt
        } else {
            GateDecision::Allowed
        }
    }
}

impl Default for ApprovalGate {
    fn default() -> Self {
        ApprovalGate::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previews_read_as_what_will_happen() {
        use crate::tools::builtin::{BashTool, EditFileTool, GlobTool, WriteFileTool};
        let (bash, write_file) = (BashTool::spec(), WriteFileTool::spec());
        let (edit_file, glob) = (EditFileTool::spec(), GlobTool::spec());
        let cmd = serde_json::json!({"command": "rm -rf build && make"});
        assert_eq!(preview(&bash, &cmd, None), "$ rm -rf build && make");
        let write = serde_json::json!({"path": "a.txt", "content": "one\nTWO\nthree\n"});
        let changed = preview(&write_file, &write, Some("one\ntwo\nthree\n"));
        assert!(changed.starts_with("a.txt\n@@"), "{changed}");
        assert!(changed.contains("\n-two\n+TWO\n"), "{changed}");
        let created = preview(&write_file, &write, None);
        assert!(created.starts_with("new file a.txt\n@@"), "{created}");
        assert!(created.contains("+one\n+TWO\n+three"), "{created}");
        let edit =
            serde_json::json!({"path": "b.rs", "old_string": "x = 1", "new_string": "x = 2"});
        let edited = preview(&edit_file, &edit, None);
        assert!(edited.contains("-x = 1\n+x = 2"), "{edited}");
        // Fifteen functions do not fill the screen twice.
        let long: String = (0..200).map(|i| format!("line {i}\n")).collect();
        let big = serde_json::json!({"path": "big.txt", "content": long});
        let cut = preview(&write_file, &big, None);
        assert_eq!(cut.lines().count(), PREVIEW_LINES + 1, "{cut}");
        assert!(cut.ends_with("more lines"), "{cut}");
        assert_eq!(
            preview(&glob, &serde_json::json!({"pattern": "*.rs"}), None),
            "{\"pattern\":\"*.rs\"}"
        );
    }

    #[test]
    fn only_the_declared_command_argument_previews_as_a_command() {
        let mut tool = crate::tools::builtin::BashTool::spec();
        tool.name = "mcp__shell__run".into();
        let input = serde_json::json!({"command": "make", "cmd": "rm -rf /"});
        assert_eq!(preview(&tool, &input, None), "$ make");
        tool.command_arg = Some("cmd".into());
        assert_eq!(preview(&tool, &input, None), "$ rm -rf /");
        tool.command_arg = None;
        assert_eq!(preview(&tool, &input, None), input.to_string());
    }
    use crate::policy::SessionMode;

    #[test]
    fn headless_denies_writes_unless_granted() {
        let gate = ApprovalGate::new();
        let p = SessionPolicy::for_mode(SessionMode::Headless);
        assert_eq!(
            gate.decide(&p, "read_file", SafetyLevel::Safe, false, false),
            GateDecision::Allowed
        );
        assert!(matches!(
            gate.decide(&p, "write_file", SafetyLevel::Write, false, false),
            GateDecision::Denied(_)
        ));
        let p = p.grant_unattended(SafetyLevel::Write, "test");
        assert_eq!(
            gate.decide(&p, "write_file", SafetyLevel::Write, false, false),
            GateDecision::Allowed
        );
    }

    #[test]
    fn computer_use_needs_the_operator_switch_and_daemon_mode() {
        let gate = ApprovalGate::new();
        let daemon = SessionPolicy::for_mode(SessionMode::Daemon);
        assert!(matches!(
            gate.decide(&daemon, "computer", SafetyLevel::Dangerous, false, false),
            GateDecision::Denied(_)
        ));
        let daemon = daemon.enable_operator_computer_use();
        assert_eq!(
            gate.decide(&daemon, "computer", SafetyLevel::Dangerous, false, false),
            GateDecision::Allowed
        );
        // Only the computer tool: the switch is not a general grant.
        assert!(matches!(
            gate.decide(&daemon, "bash", SafetyLevel::Dangerous, false, false),
            GateDecision::Denied(_)
        ));
        // A hook that asks for permission still gets a prompt (and, without a human, a no).
        assert_eq!(
            gate.decide(&daemon, "computer", SafetyLevel::Dangerous, true, false),
            GateDecision::Prompt
        );
        let mut headless = SessionPolicy::for_mode(SessionMode::Headless);
        headless.operator_computer_use = true;
        assert!(matches!(
            gate.decide(&headless, "computer", SafetyLevel::Dangerous, false, false),
            GateDecision::Denied(_)
        ));
        // Where a person is present, each call of the real tool (dangerous) asks them.
        let safety = crate::tools::computer::ComputerTool::spec().safety;
        for mode in [SessionMode::Repl, SessionMode::Ipc] {
            let p = SessionPolicy::for_mode(mode);
            assert!(!p.deny_list.contains("computer"));
            assert_eq!(
                gate.decide(&p, "computer", safety, false, false),
                GateDecision::Prompt
            );
        }
    }

    #[test]
    fn repl_prompts_then_remembers_always() {
        let gate = ApprovalGate::new();
        let p = SessionPolicy::for_mode(SessionMode::Repl);
        assert_eq!(
            gate.decide(&p, "bash", SafetyLevel::Dangerous, false, false),
            GateDecision::Prompt
        );
        gate.remember_always("bash");
        assert_eq!(
            gate.decide(&p, "bash", SafetyLevel::Dangerous, false, false),
            GateDecision::Allowed
        );
        assert_eq!(
            gate.decide(&p, "bash", SafetyLevel::Dangerous, true, false),
            GateDecision::Prompt
        );
    }

    #[test]
    fn mcp_tools_prompt_in_human_modes_whatever_their_level() {
        let gate = ApprovalGate::new();
        assert!(always_prompts("mcp:files/echo") && !always_prompts("builtin:read_file"));
        let mut p = SessionPolicy::for_mode(SessionMode::Repl);
        for hitl in [HitlLevel::Everything, HitlLevel::DangerousOnly] {
            p.hitl = hitl;
            assert_eq!(
                gate.decide(&p, "mcp__files__echo", SafetyLevel::Safe, false, true),
                GateDecision::Prompt
            );
        }
        p.hitl = HitlLevel::DangerousOnly;
        assert_eq!(
            gate.decide(&p, "write_file", SafetyLevel::Write, false, false),
            GateDecision::Allowed
        );
        // Without a human the declared level decides, as for every tool.
        let h = SessionPolicy::for_mode(SessionMode::Headless);
        assert_eq!(
            gate.decide(&h, "mcp__files__echo", SafetyLevel::Safe, false, true),
            GateDecision::Allowed
        );
        assert!(matches!(
            gate.decide(&h, "mcp__files__echo", SafetyLevel::Write, false, true),
            GateDecision::Denied(_)
        ));
    }
}
