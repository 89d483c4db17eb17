//! Command hooks, from a hooks file in one of two shapes. GEODE's own, TOML:
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
//! and Claude Code's settings JSON (`.claude/settings.json`, any file ending in `.json`), read
//! as it is: `{"hooks": {"PreToolUse": [{"matcher": "Bash|Edit", "hooks": [{"type":
//! "command", "command": "...", "timeout": 10}]}]}}`, other keys of the file ignored. A JSON
//! file is in Claude Code's dialect (`claude_code`): its matchers and its scripts' input name
//! tools and fields as Claude Code does (`Bash`, `tool_input.file_path`), and an event or a
//! hook type GEODE does not have (`Notification`, `"type": "prompt"`) is skipped with a
//! warning instead of failing the file, so a Claude Code user's settings load unchanged.
//!
//! The command gets the event as JSON on stdin (`session_id`, `cwd`, `hook_event_name`,
//! `tool_name`, `tool_input`, `tool_response`, `prompt`, ...) and may answer JSON on stdout.
//! Exit code 2 blocks with stderr as the reason; any other non-zero exit is a recorded failure
//! that does not block. Recognised answer fields (Claude Code's, plus GEODE's verify fields):
//! `continue: false` + `stopReason`; `decision: "block" | "approve"` + `reason`;
//! `hookSpecificOutput.permissionDecision: "allow" | "deny" | "ask"`, `.permissionDecisionReason`,
//! `.updatedInput`, `.additionalContext`, `.decision.behavior` (PermissionRequest); for
//! PreVerify `misses: [..]`; for PostVerify `decision: "accept" | "revise" | "escalate"`; for
//! PreCompact `decision: "defer"` or `keep_recent: N`. Plain stdout of a UserPromptSubmit hook
//! is context for the model in both dialects; of a PostToolUse hook only in GEODE's (Claude
//! Code shows it to the person alone).
//!
//! A PreToolUse `allow` or `approve` (a `hook_decision` event) means no person is asked, as in
//! Claude Code; it cannot grant what the policy refuses (plan mode, an unattended session's
//! ceiling), and a call asking to leave the command sandbox is still put to the person.
//!
//! A GEODE matcher may name Claude Code's tools (`Bash`, `Edit`, ...): each is read as the GEODE
//! tool that does the same (`claude_code::TOOLS`). An answer that starts like JSON but does not
//! parse is a hook failure (recorded, and the event goes on), not silently nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;
use tokio::io::AsyncWriteExt;

use super::claude_code;
use super::events::{HookDecision, HookEnvelope, HookEventKind};
use super::registry::{HookConfigError, HookHandler, HookRegistry, ToolMatcher};

const DEFAULT_TIMEOUT_SECS: u64 = 60;
/// Bytes of stdout/stderr a hook may answer with; more is a failure, not a bigger decision.
const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// Whose names a hooks file and its scripts use for tools, their input fields and matchers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookDialect {
    /// GEODE's TOML file: `bash`, `path`, anchored regex matchers.
    Geode,
    /// Claude Code's settings JSON: `Bash`, `file_path`, Claude Code's matchers.
    ClaudeCode,
}

impl HookDialect {
    /// The dialect of a hooks file, by its name: JSON is Claude Code's settings.
    pub fn of(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("json") => HookDialect::ClaudeCode,
            _ => HookDialect::Geode,
        }
    }
}

#[derive(Debug, Deserialize)]
struct HooksFile {
    #[serde(default)]
    hooks: BTreeMap<String, Vec<MatcherGroup>>,
}

#[derive(Debug, Deserialize)]
struct MatcherGroup {
    #[serde(default)]
    matcher: Option<String>,
    hooks: Vec<CommandSpec>,
}

#[derive(Debug, Deserialize)]
struct CommandSpec {
    #[serde(rename = "type")]
    kind: String,
    /// Absent in Claude Code's other hook types (`prompt`, `agent`).
    command: Option<String>,
    timeout: Option<u64>,
}

/// What a hooks file registered, and what of it was skipped (each with why).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadedHooks {
    /// Command hooks registered.
    pub count: usize,
    /// Each hook or event left out, with why; those never run.
    pub skipped: Vec<String>,
}

/// Read a hooks file (GEODE's TOML, `[[hooks.<Event>]]` tables, or Claude Code's settings
/// JSON; other top-level keys are ignored so the hooks can live in a larger config file) and
/// register every command hook in it.
pub fn load_command_hooks(
    registry: &mut HookRegistry,
    path: &Path,
    cwd: &Path,
) -> Result<LoadedHooks, HookConfigError> {
    let source_name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| HookConfigError::Invalid {
        source_name: source_name.clone(),
        message: format!("cannot read: {e}"),
    })?;
    register_command_hooks(registry, &text, &source_name, HookDialect::of(path), cwd)
}

/// Parse `text` in `dialect`'s format; errors name the field at fault.
fn parse_file(
    text: &str,
    source_name: &str,
    dialect: HookDialect,
) -> Result<HooksFile, HookConfigError> {
    let invalid = |message: String| HookConfigError::Invalid {
        source_name: source_name.to_string(),
        message,
    };
    match dialect {
        HookDialect::Geode => toml::from_str(text).map_err(|e| invalid(e.to_string())),
        HookDialect::ClaudeCode => {
            let mut de = serde_json::Deserializer::from_str(text);
            serde_path_to_error::deserialize(&mut de).map_err(|e| {
                let at = e.path().to_string();
                let inner = e.into_inner();
                if inner.is_syntax() || inner.is_eof() || at == "." {
                    invalid(format!("not valid JSON: {inner}"))
                } else {
                    invalid(format!("{at}: {inner}"))
                }
            })
        }
    }
}

/// As `load_command_hooks`, from the text of a file in `dialect`.
pub fn register_command_hooks(
    registry: &mut HookRegistry,
    text: &str,
    source_name: &str,
    dialect: HookDialect,
    cwd: &Path,
) -> Result<LoadedHooks, HookConfigError> {
    let file = parse_file(text, source_name, dialect)?;
    let mut loaded = LoadedHooks::default();
    for (event, groups) in file.hooks {
        let Some(kind) = HookEventKind::parse(&event) else {
            if dialect == HookDialect::ClaudeCode {
                loaded.skipped.push(format!(
                    "{source_name}: hooks.{event}: GEODE has no such event; its hooks never run"
                ));
                continue;
            }
            return Err(HookConfigError::UnknownEvent {
                source_name: source_name.to_string(),
                event,
            });
        };
        for (g, group) in groups.into_iter().enumerate() {
            let configured = group.matcher.as_deref();
            let matcher = match dialect {
                HookDialect::Geode => {
                    ToolMatcher::geode(configured.map(geode_tool_names).as_deref())
                }
                HookDialect::ClaudeCode => ToolMatcher::claude_code(configured),
            }
            .map_err(|e| HookConfigError::BadMatcher {
                source_name: source_name.to_string(),
                event: event.clone(),
                matcher: configured.unwrap_or_default().to_string(),
                error: e.to_string(),
            })?;
            for (h, spec) in group.hooks.into_iter().enumerate() {
                let field = format!("hooks.{event}[{g}].hooks[{h}]");
                let command = match (spec.kind.as_str(), spec.command) {
                    ("command", Some(command)) => command,
                    ("command", None) => {
                        return Err(HookConfigError::Invalid {
                            source_name: source_name.to_string(),
                            message: format!("{field}: a command hook needs `command`"),
                        });
                    }
                    (other, _) if dialect == HookDialect::ClaudeCode => {
                        loaded.skipped.push(format!(
                            "{source_name}: {field}: type {other:?} is not supported (only \
                             \"command\"); this hook never runs"
                        ));
                        continue;
                    }
                    (other, _) => {
                        return Err(HookConfigError::Invalid {
                            source_name: source_name.to_string(),
                            message: format!(
                                "hooks.{event}: type {other:?} is not supported (only \"command\")"
                            ),
                        });
                    }
                };
                let timeout = Duration::from_secs(spec.timeout.unwrap_or(DEFAULT_TIMEOUT_SECS));
                let hook = CommandHook {
                    command,
                    cwd: cwd.to_path_buf(),
                    dialect,
                };
                // Config order is run order.
                registry.register_matching(
                    kind,
                    matcher.clone(),
                    loaded.count as i32,
                    timeout,
                    Arc::new(hook),
                );
                loaded.count += 1;
            }
        }
    }
    Ok(loaded)
}

/// A GEODE matcher with each Claude Code tool name that stands alone (not part of a longer
/// name such as `mcp__x__Bash`) replaced by GEODE's.
fn geode_tool_names(matcher: &str) -> String {
    let mut out = String::with_capacity(matcher.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        out.push_str(claude_code::geode_tool(word).unwrap_or(word.as_str()));
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
    /// The shell command line, as written in the hooks file.
    pub command: String,
    /// The directory it runs in.
    pub cwd: PathBuf,
    /// The names its input and answers use.
    pub dialect: HookDialect,
}

#[async_trait]
impl HookHandler for CommandHook {
    fn name(&self) -> String {
        format!("command: {}", self.command)
    }

    async fn handle(&self, envelope: &HookEnvelope) -> Result<HookDecision, String> {
        let input = match self.dialect {
            HookDialect::Geode => serde_json::to_vec(envelope),
            HookDialect::ClaudeCode => {
                claude_code::payload(envelope).and_then(|v| serde_json::to_vec(&v))
            }
        }
        .map_err(|e| e.to_string())?;
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
        let decision = match out.status.code() {
            Some(0) => parse_answer(kind, self.dialect, stdout.trim())?,
            Some(2) => blocking_exit(kind, stderr),
            Some(code) => return Err(format!("exit code {code}: {stderr}")),
            None => return Err("killed by a signal".to_string()),
        };
        Ok(match (self.dialect, decision, envelope.event.tool_name()) {
            // The script rewrote Claude Code's input; the tool takes GEODE's.
            (HookDialect::ClaudeCode, HookDecision::Rewrite { input, reason }, Some(tool)) => {
                HookDecision::Rewrite {
                    input: claude_code::geode_input(tool, &input, Path::new(&envelope.cwd)),
                    reason,
                }
            }
            (_, decision, _) => decision,
        })
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
fn parse_answer(
    kind: HookEventKind,
    dialect: HookDialect,
    stdout: &str,
) -> Result<HookDecision, String> {
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
        // Plain stdout of a prompt is context for the model; of a tool call only in GEODE's
        // dialect, as Claude Code shows a PostToolUse hook's stdout to the person alone.
        return Ok(match (kind, dialect) {
            (HookEventKind::UserPromptSubmit, _)
            | (HookEventKind::PostToolUse, HookDialect::Geode) => {
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
            parse_answer(k, HookDialect::Geode, deny).unwrap(),
            HookDecision::Block("no rm".into())
        );
        let rewrite = r#"{"hookSpecificOutput":{"updatedInput":{"command":"ls"},"permissionDecisionReason":"list instead"}}"#;
        assert_eq!(
            parse_answer(k, HookDialect::Geode, rewrite).unwrap(),
            HookDecision::Rewrite {
                input: serde_json::json!({"command":"ls"}),
                reason: Some("list instead".into()),
            }
        );
        // The hook's word; the approval step reads it (see executor/gate.rs).
        assert_eq!(
            parse_answer(k, HookDialect::Geode, r#"{"decision":"approve"}"#).unwrap(),
            HookDecision::Allow
        );
        assert_eq!(
            parse_answer(
                k,
                HookDialect::Geode,
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
        let err = parse_answer(k, HookDialect::Geode, r#"{"decision": "block", }"#).unwrap_err();
        assert!(err.contains("not valid JSON"), "{err}");
        // Plain words stay what Claude Code makes of them.
        assert_eq!(
            parse_answer(k, HookDialect::Geode, "checked").unwrap(),
            HookDecision::Continue
        );
        assert_eq!(
            parse_answer(HookEventKind::PostToolUse, HookDialect::Geode, "note this").unwrap(),
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
            HookDialect::Geode,
            Path::new("/"),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("hooks.toml") && msg.contains("PreToolUze"),
            "{msg}"
        );
    }

    /// A Claude Code user's settings file, with keys and events GEODE has no use for.
    const SETTINGS: &str = r#"{
      "permissions": {"allow": ["Bash(npm test)"]},
      "model": "opus",
      "hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "guard.sh", "timeout": 5}]}],
        "PostToolUse": [{"matcher": "Edit|MultiEdit|Write", "hooks": [{"type": "command", "command": "fmt.sh"}]}],
        "Notification": [{"hooks": [{"type": "command", "command": "notify-send hi"}]}],
        "Stop": [{"hooks": [{"type": "prompt", "prompt": "Is the work done?"}]}]
      }
    }"#;

    #[test]
    fn claude_code_settings_load_as_they_are() {
        let mut r = HookRegistry::new();
        let loaded = register_command_hooks(
            &mut r,
            SETTINGS,
            "/p/.claude/settings.json",
            HookDialect::ClaudeCode,
            Path::new("/p"),
        )
        .unwrap();
        assert_eq!(loaded.count, 2);
        assert_eq!(loaded.skipped.len(), 2, "{:?}", loaded.skipped);
        assert!(loaded.skipped[0].contains("hooks.Notification"));
        assert!(loaded.skipped[1].contains("hooks.Stop[0].hooks[0]: type \"prompt\""));
        assert_eq!(
            r.describe(),
            [
                "PostToolUse Edit|MultiEdit|Write: command: fmt.sh",
                "PreToolUse Bash: command: guard.sh"
            ]
        );
        let tools: Vec<String> = ["bash", "edit_file"].map(String::from).to_vec();
        assert!(r.matchers_matching_no_tool(&tools).is_empty());
    }

    #[test]
    fn a_malformed_settings_file_names_the_file_and_the_field() {
        let mut r = HookRegistry::new();
        let bad = r#"{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": 7}]}]}}"#;
        let err = register_command_hooks(
            &mut r,
            bad,
            ".claude/settings.json",
            HookDialect::ClaudeCode,
            Path::new("/"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains(".claude/settings.json")
                && err.contains("hooks.PreToolUse[0].hooks[0].command"),
            "{err}"
        );
        let err = register_command_hooks(
            &mut r,
            "{\"hooks\": ",
            ".claude/settings.json",
            HookDialect::ClaudeCode,
            Path::new("/"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains(".claude/settings.json: not valid JSON"),
            "{err}"
        );
        let err = register_command_hooks(
            &mut r,
            r#"{"hooks": {"PreToolUse": [{"matcher": "Bash(", "hooks": []}]}}"#,
            ".claude/settings.json",
            HookDialect::ClaudeCode,
            Path::new("/"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("matcher \"Bash(\""), "{err}");
    }

    #[test]
    fn the_dialect_is_the_file_s_format() {
        assert_eq!(
            HookDialect::of(Path::new(".claude/settings.json")),
            HookDialect::ClaudeCode
        );
        assert_eq!(HookDialect::of(Path::new("hooks.toml")), HookDialect::Geode);
    }
}
