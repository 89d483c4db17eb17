//! Command hooks, configured in TOML in the shape Claude Code users already write:
//!
//! ```toml
//! [[hooks.PreToolUse]]
//! matcher = "bash|write_file"          # regex over tool names; omit for all
//! [[hooks.PreToolUse.hooks]]
//! type = "command"
//! command = "python3 .geode/hooks/check.py"
//! timeout = 10                          # seconds, default 60
//! ```
//!
//! The command gets the event as JSON on stdin (`session_id`, `cwd`, `hook_event_name`,
//! `tool_name`, `tool_input`, `tool_response`, `prompt`, ...) and may answer JSON on stdout.
//! Exit code 2 blocks with stderr as the reason; any other non-zero exit is a recorded failure
//! that does not block. Recognised answer fields (Claude Code's, plus GEODE's verify fields):
//! `continue: false` + `stopReason`; `decision: "block" | "approve"` + `reason`;
//! `hookSpecificOutput.permissionDecision: "allow" | "deny" | "ask"`, `.permissionDecisionReason`,
//! `.updatedInput`, `.additionalContext`, `.decision.behavior` (PermissionRequest); for
//! PreVerify `misses: [..]`; for PostVerify `decision: "accept" | "revise" | "escalate"`; for
//! PreCompact `decision: "defer"` or `keep_recent: N`.
//!
//! A hook cannot grant what the approval step would refuse: a PreToolUse `allow` or `approve` is
//! recorded as the hook's decision (a `hook_decision` event) and the approval step still decides.
//!
//! A matcher may name Claude Code's tools (`Bash`, `Read`, `Write`, `Edit`, `MultiEdit`, `Glob`,
//! `Grep`, `LS`, `Task`, `TodoWrite`): each is read as the GEODE tool that does the same, so a
//! Claude Code hooks file works as it is. An answer that starts like JSON but does not parse is
//! a hook failure (recorded, and the event goes on), not silently nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;
use tokio::io::AsyncWriteExt;

use super::events::{HookDecision, HookEnvelope, HookEventKind};
use super::registry::{HookConfigError, HookHandler, HookRegistry};

const DEFAULT_TIMEOUT_SECS: u64 = 60;
/// Bytes of stdout/stderr a hook may answer with; more is a failure, not a bigger decision.
const MAX_ANSWER_BYTES: usize = 256 * 1024;

#[derive(Debug, Deserialize)]
struct HooksFile {
    #[serde(default)]
    hooks: BTreeMap<String, Vec<MatcherGroup>>,
}

#[derive(Debug, Deserialize)]
struct MatcherGroup {
    matcher: Option<String>,
    hooks: Vec<CommandSpec>,
}

#[derive(Debug, Deserialize)]
struct CommandSpec {
    #[serde(rename = "type")]
    kind: String,
    command: String,
    timeout: Option<u64>,
}

/// Read a hooks TOML file (`[[hooks.<Event>]]` tables; other top-level keys are ignored so the
/// hooks can live in a larger config file) and register every command hook in it.
pub fn load_command_hooks(
    registry: &mut HookRegistry,
    path: &Path,
    cwd: &Path,
) -> Result<usize, HookConfigError> {
    let source_name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| HookConfigError::Invalid {
        source_name: source_name.clone(),
        message: format!("cannot read: {e}"),
    })?;
    register_command_hooks(registry, &text, &source_name, cwd)
}

/// As `load_command_hooks`, from TOML text.
pub fn register_command_hooks(
    registry: &mut HookRegistry,
    toml_text: &str,
    source_name: &str,
    cwd: &Path,
) -> Result<usize, HookConfigError> {
    let file: HooksFile = toml::from_str(toml_text).map_err(|e| HookConfigError::Invalid {
        source_name: source_name.to_string(),
        message: e.to_string(),
    })?;
    let mut count = 0;
    for (event, groups) in file.hooks {
        let kind = HookEventKind::parse(&event).ok_or_else(|| HookConfigError::UnknownEvent {
            source_name: source_name.to_string(),
            event: event.clone(),
        })?;
        for group in groups {
            for spec in group.hooks {
                if spec.kind != "command" {
                    return Err(HookConfigError::Invalid {
                        source_name: source_name.to_string(),
                        message: format!(
                            "hooks.{event}: type {:?} is not supported (only \"command\")",
                            spec.kind
                        ),
                    });
                }
                let timeout = Duration::from_secs(spec.timeout.unwrap_or(DEFAULT_TIMEOUT_SECS));
                let hook = CommandHook {
                    command: spec.command,
                    cwd: cwd.to_path_buf(),
                };
                // Config order is run order.
                registry.register(
                    kind,
                    group.matcher.as_deref().map(geode_tool_names).as_deref(),
                    count as i32,
                    timeout,
                    Arc::new(hook),
                )?;
                count += 1;
            }
        }
    }
    Ok(count)
}

/// Claude Code's tool names and the GEODE tools that do the same.
const CLAUDE_CODE_TOOLS: [(&str, &str); 10] = [
    ("Bash", "bash"),
    ("Read", "read_file"),
    ("Write", "write_file"),
    ("Edit", "edit_file"),
    ("MultiEdit", "edit_file"),
    ("Glob", "glob"),
    ("Grep", "grep"),
    ("LS", "list_dir"),
    ("Task", "delegate_task"),
    ("TodoWrite", "update_plan"),
];

/// A matcher with each Claude Code tool name that stands alone (not part of a longer name such
/// as `mcp__x__Bash`) replaced by GEODE's.
fn geode_tool_names(matcher: &str) -> String {
    let mut out = String::with_capacity(matcher.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        let name = CLAUDE_CODE_TOOLS
            .iter()
            .find(|(claude, _)| claude == word)
            .map_or(word.as_str(), |(_, geode)| geode);
        out.push_str(name);
        word.clear();
    };
    for c in matcher.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// One shell command run for an event.
#[derive(Debug, Clone)]
pub struct CommandHook {
    pub command: String,
    pub cwd: PathBuf,
}

#[async_trait]
impl HookHandler for CommandHook {
    fn name(&self) -> String {
        format!("command: {}", self.command)
    }

    async fn handle(&self, envelope: &HookEnvelope) -> Result<HookDecision, String> {
        let input = serde_json::to_vec(envelope).map_err(|e| e.to_string())?;
        let mut child = tokio::process::Command::new("bash")
            .arg("-c")
            .arg(&self.command)
            .current_dir(&self.cwd)
            .env("GEODE_PROJECT_DIR", &self.cwd)
            .env("CLAUDE_PROJECT_DIR", &self.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // The registry's timeout drops this future; the child must not outlive it.
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start: {e}"))?;
        if let Some(mut stdin) = child.stdin.take() {
            // A hook that ignores stdin may close it early; that is not a failure.
            let _ = stdin.write_all(&input).await;
        }
        let out = child
            .wait_with_output()
            .await
            .map_err(|e| format!("wait failed: {e}"))?;
        if out.stdout.len() > MAX_ANSWER_BYTES || out.stderr.len() > MAX_ANSWER_BYTES {
            return Err(format!("answer larger than {MAX_ANSWER_BYTES} bytes"));
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        let kind = envelope.event.kind();
        match out.status.code() {
            Some(0) => parse_answer(kind, stdout.trim()),
            Some(2) => Ok(blocking_exit(kind, stderr)),
            Some(code) => Err(format!("exit code {code}: {stderr}")),
            None => Err("killed by a signal".to_string()),
        }
    }
}

/// Exit code 2: the event's blocking decision, stderr as the reason.
fn blocking_exit(kind: HookEventKind, stderr: String) -> HookDecision {
    let reason = if stderr.is_empty() {
        "blocked by hook (exit code 2)".to_string()
    } else {
        stderr
    };
    match kind {
        HookEventKind::PermissionRequest => HookDecision::Deny(reason),
        HookEventKind::Stop => HookDecision::ContinueWith(reason),
        HookEventKind::PostVerify => HookDecision::Revise(reason),
        HookEventKind::PreVerify => HookDecision::Strengthen(vec![reason]),
        HookEventKind::PreCompact => HookDecision::Defer,
        // Observe-only events cannot block; the registry records this as a failure.
        _ => HookDecision::Block(reason),
    }
}

fn str_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// Turn a hook's stdout into a decision for `kind`.
fn parse_answer(kind: HookEventKind, stdout: &str) -> Result<HookDecision, String> {
    if stdout.is_empty() {
        return Ok(HookDecision::Continue);
    }
    let parsed = serde_json::from_str::<Value>(stdout);
    if let Err(e) = &parsed
        && (stdout.starts_with('{') || stdout.starts_with('['))
    {
        let shown: String = stdout.chars().take(200).collect();
        return Err(format!("its answer is not valid JSON ({e}): {shown}"));
    }
    let Ok(v) = parsed else {
        // Claude Code treats plain stdout of these events as context for the model.
        return Ok(match kind {
            HookEventKind::UserPromptSubmit | HookEventKind::PostToolUse => {
                HookDecision::AddContext(stdout.to_string())
            }
            _ => HookDecision::Continue,
        });
    };
    let reason = str_field(&v, "reason")
        .or_else(|| str_field(&v, "stopReason"))
        .unwrap_or("blocked by hook")
        .to_string();
    if v.get("continue") == Some(&Value::Bool(false)) {
        return Ok(blocking_exit(kind, reason));
    }
    Ok(json_decision(kind, &v, reason))
}

/// The decision a hook's JSON answer `v` gives for `kind`; `reason` is the answer's reason or
/// its default.
fn json_decision(kind: HookEventKind, v: &Value, reason: String) -> HookDecision {
    let specific = v.get("hookSpecificOutput").cloned().unwrap_or(Value::Null);
    let decision = str_field(v, "decision");
    match kind {
        HookEventKind::PreToolUse => {
            let perm = str_field(&specific, "permissionDecision");
            let perm_reason = str_field(&specific, "permissionDecisionReason")
                .map(str::to_string)
                .unwrap_or_else(|| reason.clone());
            if perm == Some("deny") || decision == Some("block") {
                return HookDecision::Block(perm_reason);
            }
            if let Some(input) = specific.get("updatedInput") {
                let reason = str_field(&specific, "permissionDecisionReason")
                    .or_else(|| str_field(v, "reason"));
                return HookDecision::Rewrite {
                    input: input.clone(),
                    reason: reason.map(str::to_string),
                };
            }
            match (perm, decision) {
                (Some("ask"), _) => HookDecision::RequestPermission(perm_reason),
                (Some("allow"), _) | (None, Some("approve")) => HookDecision::Allow,
                _ => HookDecision::Continue,
            }
        }
        HookEventKind::PostToolUse | HookEventKind::UserPromptSubmit => {
            if decision == Some("block") {
                return HookDecision::Block(reason);
            }
            match str_field(&specific, "additionalContext") {
                Some(ctx) => HookDecision::AddContext(ctx.to_string()),
                None => HookDecision::Continue,
            }
        }
        HookEventKind::PermissionRequest => {
            let behavior = specific
                .get("decision")
                .and_then(|d| str_field(d, "behavior"))
                .or(decision);
            match behavior {
                Some("allow") | Some("approve") => HookDecision::Allow,
                Some("deny") | Some("block") => HookDecision::Deny(reason),
                Some("ask") => HookDecision::Ask,
                _ => HookDecision::Continue,
            }
        }
        HookEventKind::Stop => match decision {
            Some("block") => HookDecision::ContinueWith(reason),
            _ => HookDecision::Continue,
        },
        HookEventKind::PreVerify => {
            let misses: Vec<String> = v
                .get("misses")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|m| m.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            if misses.is_empty() {
                HookDecision::Continue
            } else {
                HookDecision::Strengthen(misses)
            }
        }
        HookEventKind::PostVerify => match decision {
            Some("accept") => HookDecision::Accept,
            Some("revise") | Some("block") => HookDecision::Revise(reason),
            Some("escalate") => HookDecision::Escalate(reason),
            _ => HookDecision::Continue,
        },
        HookEventKind::PreCompact => {
            if decision == Some("defer") {
                return HookDecision::Defer;
            }
            match v.get("keep_recent").and_then(Value::as_u64) {
                Some(n) => HookDecision::KeepRecent(n as usize),
                None => HookDecision::Continue,
            }
        }
        _ => HookDecision::Continue,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_code_pre_tool_use_answers() {
        let k = HookEventKind::PreToolUse;
        let deny = r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no rm"}}"#;
        assert_eq!(
            parse_answer(k, deny).unwrap(),
            HookDecision::Block("no rm".into())
        );
        let rewrite = r#"{"hookSpecificOutput":{"updatedInput":{"command":"ls"},"permissionDecisionReason":"list instead"}}"#;
        assert_eq!(
            parse_answer(k, rewrite).unwrap(),
            HookDecision::Rewrite {
                input: serde_json::json!({"command":"ls"}),
                reason: Some("list instead".into()),
            }
        );
        // Recorded as the hook's word; the approval step still decides.
        assert_eq!(
            parse_answer(k, r#"{"decision":"approve"}"#).unwrap(),
            HookDecision::Allow
        );
        assert_eq!(
            parse_answer(
                k,
                r#"{"hookSpecificOutput":{"permissionDecision":"allow"}}"#
            )
            .unwrap(),
            HookDecision::Allow
        );
    }

    #[test]
    fn claude_code_tool_names_match_geode_tools() {
        assert_eq!(geode_tool_names("Bash"), "bash");
        assert_eq!(
            geode_tool_names("Write|Edit|MultiEdit"),
            "write_file|edit_file|edit_file"
        );
        assert_eq!(geode_tool_names("(Read|Grep)"), "(read_file|grep)");
        // Longer names that contain one are left alone, and GEODE's own names too.
        assert_eq!(geode_tool_names("mcp__fs__Bash"), "mcp__fs__Bash");
        assert_eq!(geode_tool_names("Bashful|bash"), "Bashful|bash");
        assert_eq!(geode_tool_names("mcp__.*"), "mcp__.*");
    }

    #[test]
    fn an_answer_that_looks_like_json_but_is_not_is_a_failure() {
        let k = HookEventKind::PreToolUse;
        let err = parse_answer(k, r#"{"decision": "block", }"#).unwrap_err();
        assert!(err.contains("not valid JSON"), "{err}");
        // Plain words stay what Claude Code makes of them.
        assert_eq!(parse_answer(k, "checked").unwrap(), HookDecision::Continue);
        assert_eq!(
            parse_answer(HookEventKind::PostToolUse, "note this").unwrap(),
            HookDecision::AddContext("note this".into())
        );
    }

    #[test]
    fn unknown_event_names_the_file() {
        let mut r = HookRegistry::new();
        let err = register_command_hooks(
            &mut r,
            "[[hooks.PreToolUze]]\nhooks = []\n",
            "hooks.toml",
            Path::new("/"),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("hooks.toml") && msg.contains("PreToolUze"),
            "{msg}"
        );
    }
}
