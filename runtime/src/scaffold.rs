//! The scaffold: everything the loop's behaviour depends on besides the model, as one typed,
//! hashable value the runtime takes as input (never from environment variables).
//!
//! On disk (`geode.scaffold.v1`, TOML or JSON) every field has a default, so a scaffold file
//! names only what it changes.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::ids::canonical_sha256;

pub(crate) const SCHEMA: &str = "geode.scaffold.v1";

/// Whether the loop checks the model's final answer before ending a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerifyMode {
    /// Answers are accepted as they are.
    Off,
    /// Answers are checked by rules (and verify hooks); a miss asks for a repair.
    RuleBased,
}

/// How the model's hypotheses are refreshed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReflectionMode {
    /// Hypotheses change only through the `record_reflection` tool.
    Off,
    /// One extra model call per round asks for a reflection (costs a call per round).
    ModelCall,
}

/// Limits of the loop's guards.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GuardLimits {
    /// Model rounds one user turn may take.
    pub max_rounds: u32,
    /// Wall-clock budget of one user turn, in seconds.
    pub turn_time_budget_secs: Option<u64>,
    /// Total tokens (input + output + reasoning) of the session.
    pub token_budget: Option<u64>,
    /// Session cost, in US dollars, at which the turn ends; `None`: no limit.
    pub cost_budget_usd: Option<f64>,
    /// The last N tool errors identical -> convergence_detected.
    pub convergence_window: usize,
    /// The same successful call (tool, input, result) N times -> repeated_success_no_progress.
    pub repeated_success_limit: usize,
    /// The same call (tool, input) N times -> a diversity hint to the model.
    pub repeated_call_limit: usize,
    /// In the last N allowed rounds the call is forced text-only.
    pub wrap_up_rounds: u32,
    /// Consecutive retryable model failures before the turn ends with llm_error.
    pub max_llm_retries: u32,
}

impl Default for GuardLimits {
    fn default() -> Self {
        GuardLimits {
            max_rounds: 50,
            turn_time_budget_secs: None,
            token_budget: None,
            cost_budget_usd: None,
            convergence_window: 3,
            repeated_success_limit: 5,
            repeated_call_limit: 5,
            wrap_up_rounds: 1,
            max_llm_retries: 5,
        }
    }
}

/// When and how the context is compacted (agent/compaction.rs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompactionLimits {
    /// The model's context window, in tokens.
    pub context_window_tokens: u64,
    /// Compact once the context passes this fraction of the window.
    pub threshold: f64,
    /// Messages kept verbatim after a compaction (a PreCompact hook may change it).
    pub keep_recent_messages: usize,
    /// Tool calls of the dropped part listed in the summary, newest last.
    pub summary_tool_calls: usize,
}

impl Default for CompactionLimits {
    fn default() -> Self {
        CompactionLimits {
            context_window_tokens: 200_000,
            threshold: 0.8,
            keep_recent_messages: 8,
            summary_tool_calls: 10,
        }
    }
}

impl CompactionLimits {
    /// Default limits are left out of the scaffold's JSON, so adding them did not change the
    /// hash of any existing scaffold.
    pub fn is_default(&self) -> bool {
        *self == CompactionLimits::default()
    }

    /// Token count past which the context is compacted.
    pub fn threshold_tokens(&self) -> u64 {
        (self.context_window_tokens as f64 * self.threshold.clamp(0.0, 1.0)) as u64
    }
}

impl GuardLimits {
    pub(crate) fn turn_time_budget(&self) -> Option<Duration> {
        self.turn_time_budget_secs.map(Duration::from_secs)
    }
}

/// Everything the loop's behaviour depends on besides the model; see the module docs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Scaffold {
    /// `geode.scaffold.v1`; written by `Default`, not checked by `parse`.
    pub schema: String,
    /// Static sections of the system prompt, joined by blank lines.
    pub system_prompt: Vec<String>,
    /// Whether final answers are verified.
    pub verify: VerifyMode,
    /// Repairs after a failed verification within one turn.
    pub repair_budget: u32,
    /// How hypotheses are refreshed.
    pub reflection: ReflectionMode,
    /// Limits of the loop's guards.
    pub guards: GuardLimits,
    /// Characters of one tool_result kept in the conversation.
    pub tool_result_cap: usize,
    /// When and how the context is compacted; left out of the JSON at its default.
    #[serde(skip_serializing_if = "CompactionLimits::is_default")]
    pub compaction: CompactionLimits,
    /// The content hash of the session's skills (`SkillSet::hash`), set when the session is
    /// built; absent without skills, so scaffolds of sessions without skills keep their hash.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skills: Option<String>,
}

impl Default for Scaffold {
    fn default() -> Self {
        Scaffold {
            schema: SCHEMA.to_string(),
            system_prompt: vec![
                "You are GEODE, an agent working in a terminal workspace. Use the tools to \
                 inspect and change the workspace; check your work before you answer. When the \
                 task is done, answer with a short summary of what you did."
                    .to_string(),
            ],
            verify: VerifyMode::RuleBased,
            repair_budget: 2,
            reflection: ReflectionMode::Off,
            guards: GuardLimits::default(),
            tool_result_cap: 64 * 1024,
            compaction: CompactionLimits::default(),
            skills: None,
        }
    }
}

impl Scaffold {
    /// A scaffold file's text: JSON when it starts with `{`, TOML otherwise. A key the scaffold
    /// does not have is refused by name: a misspelled knob would otherwise run at its default
    /// under a scaffold hash of its own.
    pub fn parse(text: &str) -> Result<Scaffold, String> {
        if text.trim_start().starts_with('{') {
            serde_json::from_str(text).map_err(|e| e.to_string())
        } else {
            toml::from_str(text).map_err(|e| e.to_string())
        }
    }

    /// SHA-256 over the canonical JSON of the whole scaffold.
    pub fn hash(&self) -> String {
        match serde_json::to_value(self) {
            Ok(v) => canonical_sha256(&v),
            // Serializing plain data cannot fail; an empty hash would still never collide with
            // a real one.
            Err(_) => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_toml_keeps_defaults_and_changes_the_hash() {
        let s: Scaffold = toml::from_str("repair_budget = 4\n[guards]\nmax_rounds = 7\n").unwrap();
        assert_eq!(s.repair_budget, 4);
        assert_eq!(s.guards.max_rounds, 7);
        assert_eq!(s.guards.convergence_window, 3);
        assert_ne!(s.hash(), Scaffold::default().hash());
    }

    #[test]
    fn default_compaction_limits_leave_the_hash_alone() {
        let json = serde_json::to_value(Scaffold::default()).unwrap();
        assert!(json.get("compaction").is_none());
        let s: Scaffold =
            toml::from_str("[compaction]\ncontext_window_tokens = 1000\nthreshold = 0.5\n")
                .unwrap();
        assert_eq!(s.compaction.threshold_tokens(), 500);
        assert_eq!(s.compaction.keep_recent_messages, 8);
        assert_ne!(s.hash(), Scaffold::default().hash());
    }
}
