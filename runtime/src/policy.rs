//! Session modes, safety levels, personal-data classes and the session policy.
//!
//! These live low in the crate because the approval step of the tool pipeline needs them and
//! the session layer builds on top of the pipeline.

use std::collections::BTreeSet;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// How much a tool can change or reach, ordered from harmless to dangerous.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum SafetyLevel {
    /// Read-only.
    Safe,
    /// Changes files in the workspace.
    Write,
    /// Costs money or a lot of time.
    Expensive,
    /// Touches credentials, accounts or people.
    Sensitive,
    /// Arbitrary code: shell, computer use.
    Dangerous,
}

impl SafetyLevel {
    /// Every level, from `Safe` to `Dangerous`.
    pub const ALL: [SafetyLevel; 5] = [
        SafetyLevel::Safe,
        SafetyLevel::Write,
        SafetyLevel::Expensive,
        SafetyLevel::Sensitive,
        SafetyLevel::Dangerous,
    ];

    /// The snake_case name, as config files and timelines write it.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The level of a snake_case name; `None` for an unknown one.
    pub fn parse(s: &str) -> Option<SafetyLevel> {
        s.parse().ok()
    }
}

/// What kind of personal data a call may carry, ordered from none to special categories.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum PersonalDataClass {
    /// No personal data.
    #[default]
    None,
    /// Identifiers that point to a person indirectly (user ids, hashed e-mails).
    Pseudonymous,
    /// Names, e-mail addresses, phone numbers.
    Personal,
    /// Health, finance, credentials of a person.
    Special,
}

/// The two ordered labels a call carries through the pipeline. A rewrite may raise them, never
/// lower them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Classification {
    /// How much the call can change or reach.
    pub safety: SafetyLevel,
    /// The most sensitive personal data the call may carry.
    pub personal_data: PersonalDataClass,
}

impl Classification {
    /// True when `self` is lower than `before` in either dimension.
    pub fn lowers(&self, before: &Classification) -> bool {
        self.safety < before.safety || self.personal_data < before.personal_data
    }

    /// The larger of the two in each dimension.
    pub fn max(self, other: Classification) -> Classification {
        Classification {
            safety: self.safety.max(other.safety),
            personal_data: self.personal_data.max(other.personal_data),
        }
    }
}

/// Who, if anyone, can answer an approval prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum SessionMode {
    /// Interactive terminal; a human answers prompts.
    Repl,
    /// A thin client on the serve daemon's socket; prompts are relayed to its human.
    Ipc,
    /// Messaging-channel sessions of the daemon: no human.
    Daemon,
    /// `geode exec`, `run_agent`, benchmark trials: no human.
    Headless,
}

impl SessionMode {
    /// The name on the wire and in `/status` (the serde name).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub(crate) fn has_human(self) -> bool {
        matches!(self, SessionMode::Repl | SessionMode::Ipc)
    }

    /// Tools removed from the session before the model ever sees them.
    pub fn default_deny_list(self) -> BTreeSet<String> {
        let names: &[&str] = match self {
            SessionMode::Repl | SessionMode::Ipc => &[],
            SessionMode::Daemon => &["delegate_task", "computer"],
            SessionMode::Headless => &["bash", "delegate_task", "computer"],
        };
        names.iter().map(|s| s.to_string()).collect()
    }
}

/// When a human is asked before a call runs (the HITL level).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum HitlLevel {
    /// Nothing prompts.
    Auto,
    /// Only dangerous tools (shell, MCP, computer use) prompt.
    DangerousOnly,
    /// Every non-read-only call prompts.
    Everything,
}

/// Everything the pipeline needs to decide whether a call may run in this session.
#[derive(Debug, Clone)]
pub struct SessionPolicy {
    /// Who, if anyone, answers approval prompts.
    pub mode: SessionMode,
    /// When a human is asked before a call runs.
    pub hitl: HitlLevel,
    /// Tools refused at the scope step.
    pub deny_list: BTreeSet<String>,
    /// In modes without a human, calls up to this level are approved without asking. Anything
    /// above is denied. `Safe` by default: no-human modes never approve writes implicitly.
    pub unattended_approval_ceiling: SafetyLevel,
    /// Highest personal-data class a call may carry in this session.
    pub personal_data_ceiling: PersonalDataClass,
    /// Shell commands matching any of these are refused at the policy step.
    pub forbidden_commands: Vec<Regex>,
    /// Why this policy differs from the mode's defaults, recorded in the timeline.
    pub grant_reason: Option<String>,
    /// When set, the only tools of the session (a messaging channel's allow-list): the others
    /// are removed from the plan the model sees, and a call to one is refused at the scope step.
    /// Enforced by the pipeline, never merely stated in the prompt.
    pub tool_allow_list: Option<BTreeSet<String>>,
    /// The operator's separate switch for computer use (a channel's `computer_use = true`).
    /// Honoured in `SessionMode::Daemon` only, and only for the tool named
    /// [`COMPUTER_TOOL`]: the approval gate then approves it unattended. Set it with
    /// [`SessionPolicy::enable_operator_computer_use`], which also lifts it from the deny list.
    pub operator_computer_use: bool,
    /// How this session's driver grants the shell (`geode exec --allow dangerous`), told to
    /// whoever meets the shell's scope denial, so the refusal says what would allow it.
    pub shell_grant_hint: Option<String>,
}

/// The tools an unattended grant of the dangerous level lifts from a mode's deny list.
pub const GRANTED_BY_DANGEROUS: &[&str] = &["bash"];

/// The name of the computer-use tool: on the deny list of every mode without a human, and the
/// one exception an operator may enable in DAEMON sessions.
pub const COMPUTER_TOOL: &str = "computer";

impl SessionPolicy {
    /// The defaults of a mode: its deny list, its HITL level, no unattended writes.
    pub fn for_mode(mode: SessionMode) -> Self {
        SessionPolicy {
            mode,
            hitl: if mode.has_human() {
                HitlLevel::Everything
            } else {
                HitlLevel::Auto
            },
            deny_list: mode.default_deny_list(),
            unattended_approval_ceiling: SafetyLevel::Safe,
            personal_data_ceiling: PersonalDataClass::Personal,
            forbidden_commands: default_forbidden_commands(),
            grant_reason: None,
            tool_allow_list: None,
            operator_computer_use: false,
            shell_grant_hint: None,
        }
    }

    /// Keep only these tools (a channel's allow-list).
    pub fn with_tool_allow_list(mut self, tools: impl IntoIterator<Item = String>) -> Self {
        self.tool_allow_list = Some(tools.into_iter().collect());
        self
    }

    /// The operator's computer-use switch. In `Daemon` mode it lifts `computer` from the deny
    /// list and lets the gate approve it unattended; in every other mode it changes nothing.
    pub fn enable_operator_computer_use(mut self) -> Self {
        if self.mode == SessionMode::Daemon {
            self.operator_computer_use = true;
            self.deny_list.remove(COMPUTER_TOOL);
        }
        self
    }

    /// Lifts `computer` from the deny list for a benchmark trial whose task declared a display:
    /// the task's author asked for a desktop, and the display lives inside the trial's sandbox,
    /// so the tool reaches nothing the sandbox's shell could not. Approval still follows the
    /// unattended ceiling ([`SessionPolicy::grant_unattended`]).
    pub fn grant_task_display(mut self) -> Self {
        self.deny_list.remove(COMPUTER_TOOL);
        self
    }

    /// Whether the operator's switch approves this call without a human: DAEMON mode, the
    /// switch on, and the computer tool itself.
    pub fn operator_allows_computer(&self, tool: &str) -> bool {
        self.mode == SessionMode::Daemon && self.operator_computer_use && tool == COMPUTER_TOOL
    }

    /// Why `tool` is refused at the scope step of this session, for the model and the person.
    pub fn scope_denial(&self, tool: &str) -> String {
        let mut text = format!("tool {tool} is not allowed in {} sessions", self.mode);
        if GRANTED_BY_DANGEROUS.contains(&tool)
            && let Some(hint) = &self.shell_grant_hint
        {
            text.push_str(&format!(" ({hint})"));
        }
        text
    }

    /// True when the allow-list (if any) admits `tool`.
    pub fn allows_tool(&self, tool: &str) -> bool {
        self.tool_allow_list
            .as_ref()
            .is_none_or(|allowed| allowed.contains(tool))
    }

    /// Explicitly allow unattended calls up to `ceiling`. Allowing `Dangerous` also lifts the
    /// shell from the headless deny list: this is what benchmark runs inside a sandbox do.
    pub fn grant_unattended(mut self, ceiling: SafetyLevel, reason: impl Into<String>) -> Self {
        self.unattended_approval_ceiling = ceiling;
        if ceiling >= SafetyLevel::Dangerous {
            for tool in GRANTED_BY_DANGEROUS {
                self.deny_list.remove(*tool);
            }
        }
        self.grant_reason = Some(reason.into());
        self
    }
}

/// Commands no session should run even when shell access is granted.
fn default_forbidden_commands() -> Vec<Regex> {
    // Patterns are literals checked at compile time by the unit test below; an invalid one is
    // skipped rather than panicking.
    [
        r"rm\s+-[a-zA-Z]*[rf][a-zA-Z]*\s+/(\s|$|\*)",
        r":\(\)\s*\{\s*:\|:&\s*\};:",
        r"\bmkfs(\.\w+)?\s",
        r"\bdd\s+.*of=/dev/(sd|nvme|vd)",
    ]
    .iter()
    .filter_map(|p| Regex::new(p).ok())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forbidden_patterns_compile_and_match() {
        let pats = default_forbidden_commands();
        assert_eq!(pats.len(), 4);
        assert!(pats.iter().any(|p| p.is_match("rm -rf /")));
        assert!(!pats.iter().any(|p| p.is_match("rm -rf build/")));
    }

    #[test]
    fn lowering_is_detected_in_either_dimension() {
        let hi = Classification {
            safety: SafetyLevel::Dangerous,
            personal_data: PersonalDataClass::None,
        };
        let lo = Classification {
            safety: SafetyLevel::Safe,
            personal_data: PersonalDataClass::Personal,
        };
        assert!(lo.lowers(&hi));
        assert!(hi.lowers(&lo));
        assert!(!hi.max(lo).lowers(&hi));
    }

    #[test]
    fn operator_computer_use_lifts_the_deny_list_in_daemon_mode_only() {
        let daemon = SessionPolicy::for_mode(SessionMode::Daemon);
        assert!(daemon.deny_list.contains(COMPUTER_TOOL));
        assert!(!daemon.operator_allows_computer(COMPUTER_TOOL));
        let daemon = daemon.enable_operator_computer_use();
        assert!(!daemon.deny_list.contains(COMPUTER_TOOL));
        assert!(daemon.operator_allows_computer(COMPUTER_TOOL));
        assert!(!daemon.operator_allows_computer("bash"));
        let headless =
            SessionPolicy::for_mode(SessionMode::Headless).enable_operator_computer_use();
        assert!(headless.deny_list.contains(COMPUTER_TOOL));
        assert!(!headless.operator_computer_use);
        let mut forced = SessionPolicy::for_mode(SessionMode::Headless);
        forced.operator_computer_use = true;
        assert!(!forced.operator_allows_computer(COMPUTER_TOOL));
    }

    #[test]
    fn a_trial_grant_of_dangerous_keeps_computer_denied_until_the_task_has_a_display() {
        let trial = SessionPolicy::for_mode(SessionMode::Headless)
            .grant_unattended(SafetyLevel::Dangerous, "benchmark trial");
        assert!(trial.deny_list.contains(COMPUTER_TOOL));
        let desktop = trial.grant_task_display();
        assert!(!desktop.deny_list.contains(COMPUTER_TOOL));
        assert!(!desktop.deny_list.contains("bash"));
    }

    #[test]
    fn headless_denies_shell_until_granted() {
        let p = SessionPolicy::for_mode(SessionMode::Headless);
        assert!(p.deny_list.contains("bash"));
        let p = p.grant_unattended(SafetyLevel::Dangerous, "sandboxed eval");
        assert!(!p.deny_list.contains("bash"));
    }
}
