//! The hook registry: runs the handlers of an event in priority order and folds their
//! decisions into one outcome. A failing, slow or out-of-place handler is recorded and skipped;
//! it never crashes the loop.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use regex::Regex;
use serde::Serialize;
use serde_json::Value;

use super::claude_code::ClaudeMatcher;
use super::decided::HookDecided;
use super::events::{HookDecision, HookEnvelope, HookEvent, HookEventKind};

/// A handler of hook events; registered with `HookRegistry` for one event kind.
#[async_trait]
pub trait HookHandler: Send + Sync {
    /// A name for records (`command: ./check.sh`, `in-process: audit`).
    fn name(&self) -> String;

    /// Decide on one event. `Err` is a handler failure (recorded, then ignored).
    async fn handle(&self, envelope: &HookEnvelope) -> Result<HookDecision, String>;
}

/// A handler that failed, timed out or answered a decision its event does not admit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HookFailure {
    /// The handler's name.
    pub hook: String,
    /// The event it was handling.
    pub event: HookEventKind,
    /// What went wrong.
    pub error: String,
}

/// The folded answer of every handler of one event.
#[derive(Debug, Clone, PartialEq)]
pub struct HookOutcome {
    /// The first chain-stopping decision, else the strongest other one, else `Continue`.
    pub decision: HookDecision,
    /// The last rewrite (each handler saw the previous handler's rewrite).
    pub rewrite: Option<Value>,
    pub(crate) added_context: Vec<String>,
    pub(crate) added_misses: Vec<String>,
    /// Handlers that failed, timed out or answered a decision not admitted.
    pub failures: Vec<HookFailure>,
    /// Each handler's decision other than continue, in run order, for the driver's events.
    pub decided: Vec<HookDecided>,
}

impl HookOutcome {
    fn empty() -> Self {
        HookOutcome {
            decision: HookDecision::Continue,
            rewrite: None,
            added_context: Vec::new(),
            added_misses: Vec::new(),
            failures: Vec::new(),
            decided: Vec::new(),
        }
    }
}

/// Why a hooks configuration could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HookConfigError {
    /// A GEODE hooks file names an event GEODE does not have (a Claude Code file skips it).
    #[error("{source_name}: unknown hook event {event:?} (known: PreToolUse, PostToolUse, ...)")]
    UnknownEvent {
        /// The hooks file.
        source_name: String,
        /// The event name as written.
        event: String,
    },
    /// A matcher is not a valid regex.
    #[error("{source_name}: matcher {matcher:?} of {event} is not a valid regex: {error}")]
    BadMatcher {
        /// The hooks file, or the handler's name for one registered in code.
        source_name: String,
        /// The event the matcher is under.
        event: String,
        /// The matcher as written.
        matcher: String,
        /// The regex error.
        error: String,
    },
    /// Any other mistake in the configuration.
    #[error("{source_name}: {message}")]
    Invalid {
        /// The hooks file.
        source_name: String,
        /// What is wrong.
        message: String,
    },
}

/// Which tools a handler of a tool event runs for, in the dialect its file was written in.
#[derive(Debug, Clone)]
pub enum ToolMatcher {
    /// Every tool.
    All,
    /// GEODE's: a regex over the whole GEODE tool name; `configured` is as written.
    Geode {
        /// The anchored regex.
        regex: Regex,
        /// The matcher as written.
        configured: String,
    },
    /// Claude Code's, over Claude Code's names of the tools.
    ClaudeCode {
        /// The parsed matcher.
        matcher: ClaudeMatcher,
        /// The matcher as written.
        configured: String,
    },
}

impl ToolMatcher {
    /// GEODE's matcher `m` (`None`, empty or `*`: every tool), anchored at both ends.
    pub fn geode(m: Option<&str>) -> Result<Self, regex::Error> {
        Ok(match m {
            None | Some("") | Some("*") => ToolMatcher::All,
            Some(m) => ToolMatcher::Geode {
                regex: Regex::new(&format!("^(?:{m})$"))?,
                configured: m.to_string(),
            },
        })
    }

    /// Claude Code's matcher `m` (`None`: every tool).
    pub fn claude_code(m: Option<&str>) -> Result<Self, regex::Error> {
        Ok(match ClaudeMatcher::parse(m.unwrap_or(""))? {
            ClaudeMatcher::All => ToolMatcher::All,
            matcher => ToolMatcher::ClaudeCode {
                matcher,
                configured: m.unwrap_or("").to_string(),
            },
        })
    }

    /// Whether it selects GEODE's tool `tool`.
    pub fn matches(&self, tool: &str) -> bool {
        match self {
            ToolMatcher::All => true,
            ToolMatcher::Geode { regex, .. } => regex.is_match(tool),
            ToolMatcher::ClaudeCode { matcher, .. } => matcher.matches(tool),
        }
    }

    /// The matcher as its file wrote it (`*` for every tool).
    pub fn configured(&self) -> &str {
        match self {
            ToolMatcher::All => "*",
            ToolMatcher::Geode { configured, .. } | ToolMatcher::ClaudeCode { configured, .. } => {
                configured
            }
        }
    }
}

/// Cloned with its registry: a sub-agent session runs the parent's hooks.
#[derive(Clone)]
struct Registered {
    kind: HookEventKind,
    matcher: ToolMatcher,
    priority: i32,
    timeout: Duration,
    handler: Arc<dyn HookHandler>,
}

/// Handlers for every event of one session.
#[derive(Default, Clone)]
pub struct HookRegistry {
    hooks: Vec<Registered>,
}

impl std::fmt::Debug for HookRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(
                self.hooks
                    .iter()
                    .map(|h| (h.kind.name(), h.handler.name(), h.priority)),
            )
            .finish()
    }
}

/// How strongly a non-stopping decision overrides another.
fn rank(d: &HookDecision) -> u8 {
    match d {
        HookDecision::Continue | HookDecision::AddContext(_) | HookDecision::Strengthen(_) => 0,
        HookDecision::Rewrite { .. } => 0,
        HookDecision::Accept | HookDecision::Finalize | HookDecision::Allow => 1,
        HookDecision::Ask | HookDecision::Defer | HookDecision::KeepRecent(_) => 2,
        HookDecision::RequestPermission(_)
        | HookDecision::Revise(_)
        | HookDecision::ContinueWith(_) => 3,
        HookDecision::Block(_) | HookDecision::Deny(_) | HookDecision::Escalate(_) => 4,
    }
}

impl HookRegistry {
    /// An empty registry; handlers are added with `register` or `register_matching`.
    pub fn new() -> Self {
        HookRegistry::default()
    }

    /// One line per handler, in run order: its event, matcher and name (for `/hooks`).
    pub fn describe(&self) -> Vec<String> {
        let mut hooks: Vec<&Registered> = self.hooks.iter().collect();
        hooks.sort_by_key(|h| h.priority);
        hooks
            .iter()
            .map(|h| {
                let matcher = h.matcher.configured();
                format!("{} {matcher}: {}", h.kind.name(), h.handler.name())
            })
            .collect()
    }

    /// One warning per tool-event handler whose matcher matches none of `tools`, the names of
    /// a session's tools: a matcher written for another tool set (or mistyped) would otherwise
    /// never run, silently. Matchers naming MCP tools (`mcp__`) are left out, as their servers'
    /// tools are known only once connected.
    pub fn matchers_matching_no_tool(&self, tools: &[String]) -> Vec<String> {
        self.hooks
            .iter()
            .filter(|h| h.kind.has_tool())
            .filter_map(|h| {
                let configured = h.matcher.configured();
                let dead =
                    !configured.contains("mcp__") && !tools.iter().any(|t| h.matcher.matches(t));
                dead.then(|| {
                    format!(
                        "{} matcher {configured:?} of {:?} matches no tool (tools: {})",
                        h.kind.name(),
                        h.handler.name(),
                        tools.join(", ")
                    )
                })
            })
            .collect()
    }

    /// Add a handler. `matcher` is a regex over the tool name (tool events only; `None` or
    /// `"*"` matches all). Handlers run in ascending `priority`, then in registration order.
    pub fn register(
        &mut self,
        kind: HookEventKind,
        matcher: Option<&str>,
        priority: i32,
        timeout: Duration,
        handler: Arc<dyn HookHandler>,
    ) -> Result<(), HookConfigError> {
        let matcher = ToolMatcher::geode(matcher).map_err(|e| HookConfigError::BadMatcher {
            source_name: handler.name(),
            event: kind.name().to_string(),
            matcher: matcher.unwrap_or_default().to_string(),
            error: e.to_string(),
        })?;
        self.register_matching(kind, matcher, priority, timeout, handler);
        Ok(())
    }

    /// `register` with a matcher already built (in either dialect).
    pub fn register_matching(
        &mut self,
        kind: HookEventKind,
        matcher: ToolMatcher,
        priority: i32,
        timeout: Duration,
        handler: Arc<dyn HookHandler>,
    ) {
        self.hooks.push(Registered {
            kind,
            matcher,
            priority,
            timeout,
            handler,
        });
        // Stable sort keeps registration order within one priority.
        self.hooks.sort_by_key(|h| h.priority);
    }

    /// Whether any handler listens to `kind` (lets hot paths skip building payloads).
    pub fn has(&self, kind: HookEventKind) -> bool {
        self.hooks.iter().any(|h| h.kind == kind)
    }

    /// Handlers registered, over all events.
    pub fn len(&self) -> usize {
        self.hooks.len()
    }

    /// No handler is registered.
    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }

    /// Run every matching handler and fold the decisions.
    pub async fn dispatch(&self, mut envelope: HookEnvelope) -> HookOutcome {
        let kind = envelope.event.kind();
        let mut out = HookOutcome::empty();
        for hook in self.hooks.iter().filter(|h| h.kind == kind) {
            if let Some(tool) = envelope.event.tool_name()
                && !hook.matcher.matches(tool)
            {
                continue;
            }
            let fail = |error: String| HookFailure {
                hook: hook.handler.name(),
                event: kind,
                error,
            };
            let decision =
                match tokio::time::timeout(hook.timeout, hook.handler.handle(&envelope)).await {
                    Err(_) => {
                        out.failures
                            .push(fail(format!("timed out after {:?}", hook.timeout)));
                        continue;
                    }
                    Ok(Err(e)) => {
                        out.failures.push(fail(e));
                        continue;
                    }
                    Ok(Ok(d)) => d,
                };
            if !decision.allowed_for(kind)
                || (kind.observe_only() && decision != HookDecision::Continue)
            {
                out.failures.push(fail(format!(
                    "decision {decision:?} is not allowed for {}",
                    kind.name()
                )));
                continue;
            }
            out.decided
                .extend(HookDecided::new(kind, hook.handler.name(), &decision));
            match decision {
                HookDecision::AddContext(text) => out.added_context.push(text),
                HookDecision::Strengthen(misses) => out.added_misses.extend(misses),
                HookDecision::Rewrite { input, .. } => {
                    apply_rewrite(&mut envelope.event, &input);
                    out.rewrite = Some(input);
                }
                d if d.stops_chain() => {
                    out.decision = d;
                    return out;
                }
                d => {
                    if rank(&d) > rank(&out.decision) {
                        out.decision = d;
                    }
                }
            }
        }
        out
    }
}

/// Show later handlers the rewritten input.
fn apply_rewrite(event: &mut HookEvent, value: &Value) {
    match event {
        HookEvent::PreToolUse { tool_input, .. } => *tool_input = value.clone(),
        HookEvent::UserPromptSubmit { prompt } => {
            if let Value::String(s) = value {
                *prompt = s.clone();
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SessionId;

    struct Fixed(HookDecision);

    #[async_trait]
    impl HookHandler for Fixed {
        fn name(&self) -> String {
            format!("fixed {:?}", self.0)
        }
        async fn handle(&self, _: &HookEnvelope) -> Result<HookDecision, String> {
            Ok(self.0.clone())
        }
    }

    fn envelope(tool: &str) -> HookEnvelope {
        HookEnvelope {
            session_id: SessionId::new("s"),
            turn: 1,
            plan_generation: 1,
            verify_attempt: 0,
            correlation_id: None,
            cwd: "/".into(),
            event: HookEvent::PreToolUse {
                tool_name: tool.into(),
                tool_input: serde_json::json!({}),
                tool_use_id: "c1".into(),
            },
        }
    }

    fn reg(r: &mut HookRegistry, m: Option<&str>, p: i32, d: HookDecision) {
        r.register(
            HookEventKind::PreToolUse,
            m,
            p,
            Duration::from_secs(1),
            Arc::new(Fixed(d)),
        )
        .unwrap();
    }

    #[test]
    fn a_matcher_that_matches_no_tool_is_named() {
        let mut r = HookRegistry::new();
        reg(&mut r, Some("bash|Shell"), 0, HookDecision::Continue);
        reg(&mut r, Some("Shell"), 1, HookDecision::Continue);
        reg(&mut r, Some("mcp__git__.*"), 2, HookDecision::Continue);
        reg(&mut r, None, 3, HookDecision::Continue);
        // Not a tool event: its matcher never selects anything, so it is not judged.
        r.register(
            HookEventKind::SessionStart,
            Some("Shell"),
            4,
            Duration::from_secs(1),
            Arc::new(Fixed(HookDecision::Continue)),
        )
        .unwrap();
        let tools = ["bash".to_string(), "read_file".to_string()];
        let warnings = r.matchers_matching_no_tool(&tools);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with("PreToolUse matcher \"Shell\" of \"fixed Continue\"")
                && warnings[0].ends_with("(tools: bash, read_file)"),
            "{}",
            warnings[0]
        );
    }

    #[tokio::test]
    async fn first_block_stops_the_chain_and_priority_orders() {
        let mut r = HookRegistry::new();
        reg(&mut r, None, 5, HookDecision::Block("second".into()));
        reg(&mut r, None, 1, HookDecision::Block("first".into()));
        reg(&mut r, None, 0, HookDecision::Continue);
        let out = r.dispatch(envelope("bash")).await;
        assert_eq!(out.decision, HookDecision::Block("first".into()));
        // Who decided is kept; no opinion and the handler the block cut off leave nothing.
        let who: Vec<_> = out
            .decided
            .iter()
            .map(|d| (d.hook.as_str(), d.decision, d.reason.as_deref()))
            .collect();
        assert_eq!(
            who,
            [(
                "fixed Block(\"first\")",
                crate::hooks::HookDecisionKind::Deny,
                Some("first")
            )]
        );
    }

    #[tokio::test]
    async fn matcher_and_illegal_decisions() {
        let mut r = HookRegistry::new();
        reg(
            &mut r,
            Some("write_.*"),
            0,
            HookDecision::Block("no".into()),
        );
        reg(&mut r, None, 1, HookDecision::Accept);
        let out = r.dispatch(envelope("bash")).await;
        assert_eq!(out.decision, HookDecision::Continue);
        assert_eq!(out.failures.len(), 1, "Accept is not a PreToolUse decision");
        let out = r.dispatch(envelope("write_file")).await;
        assert_eq!(out.decision, HookDecision::Block("no".into()));
    }
}
