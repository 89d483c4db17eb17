//! Claude Code's hook dialect: the names Claude Code gives GEODE's tools and their input
//! fields, how its matchers select tools, and the JSON its hook scripts read on stdin.
//!
//! A hooks file in Claude Code's shape (`.claude/settings.json`) is loaded in this dialect, so
//! a script written for Claude Code reads `"tool_name": "Bash"` and
//! `tool_input.file_path` (absolute, as Claude Code gives it) and answers in the same terms;
//! GEODE's own TOML hooks keep GEODE's names (`bash`, `path`). `TOOLS` is the one table of
//! the translation, both ways.

use std::path::{Path, PathBuf};

use regex::Regex;
use serde_json::{Map, Value};

use super::events::{HookEnvelope, HookEvent};

/// How a GEODE input field's value reads in Claude Code's `tool_input`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// The same value.
    Same,
    /// A path: GEODE's is relative to the workspace root, Claude Code's is absolute.
    Path,
    /// A timeout: GEODE's in seconds, Claude Code's in milliseconds.
    SecondsAsMillis,
}

/// One input field: GEODE's name, Claude Code's name, and how the value converts.
#[derive(Debug, Clone, Copy)]
struct Field {
    geode: &'static str,
    claude: &'static str,
    form: Form,
}

const fn field(geode: &'static str, claude: &'static str, form: Form) -> Field {
    Field {
        geode,
        claude,
        form,
    }
}

/// A GEODE tool as Claude Code's hooks know it. Fields the table does not name pass under
/// GEODE's name, unchanged.
#[derive(Debug, Clone, Copy)]
pub struct ClaudeCodeTool {
    /// GEODE's name of the tool.
    pub geode: &'static str,
    /// Claude Code's name: the `tool_name` hook scripts read.
    pub claude: &'static str,
    /// Other Claude Code tools this one stands for: a matcher naming one of them selects it.
    pub also: &'static [&'static str],
    fields: &'static [Field],
}

/// GEODE's tools and Claude Code's names for them. Claude Code tools GEODE has no
/// counterpart of (`WebFetch`, `WebSearch`, `NotebookEdit`, ...) are absent: a matcher that
/// names only them matches no tool, and the loader warns about it.
pub const TOOLS: [ClaudeCodeTool; 9] = [
    ClaudeCodeTool {
        geode: "bash",
        claude: "Bash",
        also: &[],
        fields: &[
            field("command", "command", Form::Same),
            field("timeout_sec", "timeout", Form::SecondsAsMillis),
        ],
    },
    ClaudeCodeTool {
        geode: "read_file",
        claude: "Read",
        also: &[],
        fields: &[
            field("path", "file_path", Form::Path),
            field("offset", "offset", Form::Same),
            field("limit", "limit", Form::Same),
        ],
    },
    ClaudeCodeTool {
        geode: "write_file",
        claude: "Write",
        also: &[],
        fields: &[
            field("path", "file_path", Form::Path),
            field("content", "content", Form::Same),
        ],
    },
    ClaudeCodeTool {
        geode: "edit_file",
        claude: "Edit",
        also: &["MultiEdit"],
        fields: &[
            field("path", "file_path", Form::Path),
            field("old_string", "old_string", Form::Same),
            field("new_string", "new_string", Form::Same),
            field("replace_all", "replace_all", Form::Same),
        ],
    },
    ClaudeCodeTool {
        geode: "list_dir",
        claude: "LS",
        also: &[],
        fields: &[field("path", "path", Form::Path)],
    },
    ClaudeCodeTool {
        geode: "glob",
        claude: "Glob",
        also: &[],
        fields: &[
            field("pattern", "pattern", Form::Same),
            field("path", "path", Form::Path),
        ],
    },
    ClaudeCodeTool {
        geode: "grep",
        claude: "Grep",
        also: &[],
        fields: &[
            field("pattern", "pattern", Form::Same),
            field("path", "path", Form::Path),
            field("glob", "glob", Form::Same),
        ],
    },
    ClaudeCodeTool {
        geode: "delegate_task",
        claude: "Task",
        also: &[],
        fields: &[field("task", "prompt", Form::Same)],
    },
    ClaudeCodeTool {
        geode: "update_plan",
        claude: "TodoWrite",
        also: &[],
        fields: &[],
    },
];

/// The table's entry for GEODE's tool `geode`.
pub fn tool(geode: &str) -> Option<&'static ClaudeCodeTool> {
    TOOLS.iter().find(|t| t.geode == geode)
}

/// The GEODE tool Claude Code's `claude` names (its own name or one it stands for).
pub fn geode_tool(claude: &str) -> Option<&'static str> {
    TOOLS
        .iter()
        .find(|t| t.claude == claude || t.also.contains(&claude))
        .map(|t| t.geode)
}

/// Claude Code's name of GEODE's tool `geode`: the table's, else the name itself (MCP tools
/// are `mcp__<server>__<tool>` in both).
pub fn claude_name(geode: &str) -> &str {
    tool(geode).map_or(geode, |t| t.claude)
}

fn absolute(cwd: &Path, value: &Value) -> Value {
    match value.as_str() {
        Some(p) if !Path::new(p).is_absolute() => {
            Value::String(cwd.join(p).to_string_lossy().into_owned())
        }
        _ => value.clone(),
    }
}

fn relative(cwd: &Path, value: &Value) -> Value {
    match value.as_str().map(Path::new) {
        Some(p) => match p.strip_prefix(cwd) {
            Ok(rel) if rel.as_os_str().is_empty() => Value::String(".".into()),
            Ok(rel) => Value::String(rel.to_string_lossy().into_owned()),
            Err(_) => value.clone(),
        },
        None => value.clone(),
    }
}

/// Convert `input`'s fields with `convert(field, value) -> (name, value)`; unnamed fields and
/// non-object inputs pass unchanged.
fn map_fields(
    input: &Value,
    lookup: impl Fn(&str) -> Option<Field>,
    convert: impl Fn(Field, &Value) -> (&'static str, Value),
) -> Value {
    let Some(object) = input.as_object() else {
        return input.clone();
    };
    let mut out = Map::new();
    for (key, value) in object {
        match lookup(key) {
            Some(f) => {
                let (name, value) = convert(f, value);
                out.insert(name.to_string(), value);
            }
            None => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    Value::Object(out)
}

/// GEODE's `input` of `geode_tool` as Claude Code's `tool_input`; `cwd` is the workspace root
/// relative paths are joined to.
pub fn claude_input(geode_tool: &str, input: &Value, cwd: &Path) -> Value {
    let Some(t) = tool(geode_tool) else {
        return input.clone();
    };
    map_fields(
        input,
        |k| t.fields.iter().find(|f| f.geode == k).copied(),
        |f, v| {
            let v = match f.form {
                Form::Same => v.clone(),
                Form::Path => absolute(cwd, v),
                Form::SecondsAsMillis => v
                    .as_u64()
                    .and_then(|s| s.checked_mul(1000))
                    .map_or_else(|| v.clone(), Value::from),
            };
            (f.claude, v)
        },
    )
}

/// Claude Code's `tool_input` (a hook's `updatedInput`) as GEODE's input of `geode_tool`.
pub fn geode_input(geode_tool: &str, input: &Value, cwd: &Path) -> Value {
    let Some(t) = tool(geode_tool) else {
        return input.clone();
    };
    map_fields(
        input,
        |k| t.fields.iter().find(|f| f.claude == k).copied(),
        |f, v| {
            let v = match f.form {
                Form::Same => v.clone(),
                Form::Path => relative(cwd, v),
                // Rounded up: a hook's 1500 ms must not become a one-second limit.
                Form::SecondsAsMillis => v
                    .as_u64()
                    .map_or_else(|| v.clone(), |ms| Value::from(ms.div_ceil(1000))),
            };
            (f.geode, v)
        },
    )
}

/// The JSON a Claude Code hook script reads on stdin for `envelope`: Claude Code's common
/// fields (`session_id`, `transcript_path`, `cwd`, `hook_event_name`), its tool names and
/// input fields, and GEODE's other event fields beside them.
pub fn payload(envelope: &HookEnvelope) -> Result<Value, serde_json::Error> {
    let mut v = serde_json::to_value(envelope)?;
    let cwd = PathBuf::from(&envelope.cwd);
    let Some(object) = v.as_object_mut() else {
        return Ok(v);
    };
    // GEODE keeps no transcript file in Claude Code's format; scripts that read one find
    // the field, and an empty path, rather than a file of another shape.
    object.insert("transcript_path".into(), Value::String(String::new()));
    let tool = match &envelope.event {
        HookEvent::PreToolUse {
            tool_name,
            tool_input,
            ..
        }
        | HookEvent::PermissionRequest {
            tool_name,
            tool_input,
            ..
        } => Some((tool_name, tool_input)),
        HookEvent::PostToolUse {
            tool_name,
            tool_input,
            tool_response,
            ..
        } => {
            // Claude Code's file tools answer with the file they touched; scripts read
            // `tool_response.filePath` as often as `tool_input.file_path`.
            let mut response = serde_json::to_value(tool_response)?;
            if let Some(r) = response.as_object_mut() {
                r.insert("success".into(), Value::Bool(!tool_response.is_error));
                if let Some(path) = claude_input(tool_name, tool_input, &cwd).get("file_path") {
                    r.insert("filePath".into(), path.clone());
                }
            }
            object.insert("tool_response".into(), response);
            Some((tool_name, tool_input))
        }
        HookEvent::Stop { .. } => {
            // Claude Code's loop guard: true when the turn goes on because a Stop hook said so.
            object.insert(
                "stop_hook_active".into(),
                Value::Bool(envelope.verify_attempt > 0),
            );
            None
        }
        _ => None,
    };
    if let Some((name, input)) = tool {
        object.insert("tool_name".into(), Value::String(claude_name(name).into()));
        object.insert("tool_input".into(), claude_input(name, input, &cwd));
    }
    Ok(v)
}

/// A matcher as Claude Code reads it: empty or `*` for every tool; a word or `|`-separated
/// words for exactly those tools; anything else a regex found anywhere in the name. It is
/// tested against Claude Code's names of a GEODE tool.
#[derive(Debug, Clone)]
pub enum ClaudeMatcher {
    /// Empty or `*`: every tool.
    All,
    /// `|`-separated words: exactly these Claude Code tool names.
    Names(Vec<String>),
    /// Anything else: a regex that may match anywhere in the name.
    Regex(Regex),
}

impl ClaudeMatcher {
    /// Read a matcher as Claude Code does; `Err` when it is neither a word list nor a valid regex.
    pub fn parse(matcher: &str) -> Result<Self, regex::Error> {
        let m = matcher.trim();
        if m.is_empty() || m == "*" {
            return Ok(ClaudeMatcher::All);
        }
        if m.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '|')
        {
            return Ok(ClaudeMatcher::Names(
                m.split('|').map(|n| n.trim().to_string()).collect(),
            ));
        }
        Regex::new(m).map(ClaudeMatcher::Regex)
    }

    /// Whether it selects GEODE's tool `geode_tool`.
    pub fn matches(&self, geode_tool: &str) -> bool {
        let names: Vec<&str> = match tool(geode_tool) {
            Some(t) => std::iter::once(t.claude)
                .chain(t.also.iter().copied())
                .collect(),
            None => vec![geode_tool],
        };
        match self {
            ClaudeMatcher::All => true,
            ClaudeMatcher::Names(list) => names.iter().any(|n| list.iter().any(|l| l == n)),
            ClaudeMatcher::Regex(re) => names.iter().any(|n| re.is_match(n)),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn inputs_translate_both_ways() {
        let cwd = Path::new("/work/p");
        let geode = json!({"path": "src/a.rs", "old_string": "a", "new_string": "b"});
        let claude = claude_input("edit_file", &geode, cwd);
        assert_eq!(
            claude,
            json!({"file_path": "/work/p/src/a.rs", "old_string": "a", "new_string": "b"})
        );
        assert_eq!(geode_input("edit_file", &claude, cwd), geode);
        let bash = json!({"command": "ls", "timeout_sec": 3});
        assert_eq!(
            claude_input("bash", &bash, cwd),
            json!({"command": "ls", "timeout": 3000})
        );
        assert_eq!(
            geode_input("bash", &json!({"command": "ls", "timeout": 1500}), cwd),
            json!({"command": "ls", "timeout_sec": 2})
        );
        // An absolute path outside the workspace stays as it is; unknown tools pass through.
        assert_eq!(
            geode_input("read_file", &json!({"file_path": "/etc/hosts"}), cwd),
            json!({"path": "/etc/hosts"})
        );
        let mcp = json!({"x": 1});
        assert_eq!(claude_input("mcp__s__t", &mcp, cwd), mcp);
    }

    #[test]
    fn matchers_read_as_claude_code_reads_them() {
        let m = |s: &str| ClaudeMatcher::parse(s).unwrap();
        assert!(m("").matches("bash") && m("*").matches("mcp__x__y"));
        assert!(m("Bash").matches("bash"));
        assert!(!m("Bash").matches("edit_file"));
        // Plain words match whole names only; `MultiEdit` stands for GEODE's one edit tool.
        assert!(m("Edit|Write").matches("edit_file") && m("Edit|Write").matches("write_file"));
        assert!(m("MultiEdit").matches("edit_file"));
        assert!(!m("Edi").matches("edit_file"));
        // Anything else is a regex found anywhere in the name.
        assert!(m("^Ed.*").matches("edit_file"));
        assert!(m("mcp__fs__.*").matches("mcp__fs__read"));
        assert!(!m("mcp__fs__.*").matches("bash"));
        assert!(ClaudeMatcher::parse("(").is_err());
    }

    #[test]
    fn every_claude_name_is_one_tool() {
        for t in &TOOLS {
            assert_eq!(geode_tool(t.claude), Some(t.geode));
            for a in t.also {
                assert_eq!(geode_tool(a), Some(t.geode));
            }
            assert_eq!(claude_name(t.geode), t.claude);
        }
    }

    #[test]
    fn a_post_tool_use_payload_reads_as_claude_code_s() {
        use crate::hooks::events::ToolResponsePayload;
        use crate::ids::SessionId;
        let envelope = HookEnvelope {
            session_id: SessionId::new("s1"),
            turn: 1,
            plan_generation: 1,
            verify_attempt: 0,
            correlation_id: None,
            cwd: "/work/p".into(),
            event: HookEvent::PostToolUse {
                tool_name: "write_file".into(),
                tool_input: json!({"path": "a.txt", "content": "hi"}),
                tool_use_id: "c1".into(),
                tool_response: ToolResponsePayload {
                    content: "wrote a.txt".into(),
                    is_error: false,
                },
            },
        };
        let v = payload(&envelope).unwrap();
        assert_eq!(v["hook_event_name"], "PostToolUse");
        assert_eq!(v["session_id"], "s1");
        assert_eq!(v["cwd"], "/work/p");
        assert_eq!(v["transcript_path"], "");
        assert_eq!(v["tool_name"], "Write");
        assert_eq!(
            v["tool_input"],
            json!({"file_path": "/work/p/a.txt", "content": "hi"})
        );
        assert_eq!(v["tool_response"]["filePath"], "/work/p/a.txt");
        assert_eq!(v["tool_response"]["success"], true);
        assert_eq!(v["tool_use_id"], "c1");
    }
}
