//! Models that need no key and no network.
//!
//! - `nop`: ends the turn at once with a short text.
//! - `scripted`: plays a script file (JSON or TOML) of assistant turns, in order.
//! - `oracle`: runs a task's reference solution through the `bash` tool, then reports.
//! - `replay`: replays the assistant messages of a session recorded in a timeline.
//!
//! Script format (`geode.script.v1`), TOML shown; JSON has the same shape:
//! ```toml
//! repeat_last = false          # after the last turn, repeat it instead of failing
//! [[turns]]
//! text = "Listing files."
//! thinking = "optional"
//! delay_ms = 0                 # simulated latency
//! error = "optional"           # fail this call with a transient error instead
//! [[turns.tool_calls]]
//! name = "bash"
//! input = { command = "ls" }
//! [turns.usage]
//! input_tokens = 100
//! output_tokens = 20
//! ```

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{DeltaSink, Model, ModelDelta, ModelError, ModelRequest};
use crate::conversation::{AssistantTurn, ContentBlock, Message, Role, StopReason, Usage};
use crate::ids::SessionId;
use crate::store::timeline::{SessionTimeline, TimelineEvent};

fn text_turn(text: &str) -> AssistantTurn {
    AssistantTurn {
        message: Message::assistant_text(text),
        usage: Usage::default(),
        stop_reason: StopReason::EndTurn,
    }
}

/// Ends every turn at once. Every sound benchmark task must fail under it.
#[derive(Debug, Clone, Copy, Default)]
pub struct NopModel;

#[async_trait]
impl Model for NopModel {
    fn id(&self) -> &str {
        "nop"
    }

    async fn complete(&self, _: &ModelRequest<'_>) -> Result<AssistantTurn, ModelError> {
        Ok(text_turn("Nothing to do."))
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptFile {
    #[serde(default)]
    schema: Option<String>,
    #[serde(default)]
    repeat_last: bool,
    turns: Vec<ScriptTurn>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptTurn {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thinking: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ScriptCall>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    delay_ms: u64,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptCall {
    #[serde(default)]
    id: Option<String>,
    name: String,
    #[serde(default = "empty_object")]
    input: Value,
}

fn empty_object() -> Value {
    json!({})
}

/// Plays a script of assistant turns; each model call takes the next one.
#[derive(Debug)]
pub struct ScriptedModel {
    path: String,
    script: ScriptFile,
    next: Mutex<usize>,
}

impl ScriptedModel {
    /// Load a `.json` or `.toml` script (by extension; anything else is tried as JSON, then
    /// TOML). Errors name the file and what is wrong.
    pub fn load(path: PathBuf) -> Result<Self, ModelError> {
        let shown = path.display().to_string();
        let err = |message: String| ModelError::Script {
            path: shown.clone(),
            message,
        };
        let text = std::fs::read_to_string(&path).map_err(|e| err(format!("cannot read: {e}")))?;
        let is_toml = path.extension().is_some_and(|e| e == "toml");
        let script: ScriptFile = if is_toml {
            toml::from_str(&text).map_err(|e| err(e.to_string()))?
        } else {
            match serde_json::from_str(&text) {
                Ok(s) => s,
                Err(json_err) => toml::from_str(&text)
                    .map_err(|_| err(format!("not a JSON script: {json_err}")))?,
            }
        };
        ScriptedModel::from_parts(shown, script)
    }

    /// A script given inline as JSON (tests and benches).
    pub fn from_json(value: Value) -> Result<Self, ModelError> {
        let script: ScriptFile = serde_json::from_value(value).map_err(|e| ModelError::Script {
            path: "<inline>".into(),
            message: e.to_string(),
        })?;
        ScriptedModel::from_parts("<inline>".into(), script)
    }

    fn from_parts(path: String, script: ScriptFile) -> Result<Self, ModelError> {
        if let Some(schema) = &script.schema
            && schema != "geode.script.v1"
        {
            return Err(ModelError::Script {
                path,
                message: format!("schema {schema:?} is not geode.script.v1"),
            });
        }
        if script.turns.is_empty() {
            return Err(ModelError::Script {
                path,
                message: "turns: the script has no turns".into(),
            });
        }
        Ok(ScriptedModel {
            path,
            script,
            next: Mutex::new(0),
        })
    }

    fn take_turn(&self) -> Result<(usize, ScriptTurn), ModelError> {
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let turns = &self.script.turns;
        let index = if *next < turns.len() {
            *next
        } else if self.script.repeat_last {
            turns.len() - 1
        } else {
            return Err(ModelError::Exhausted {
                model: format!("scripted:{}", self.path),
                turns: turns.len(),
            });
        };
        *next += 1;
        Ok((*next, turns[index].clone()))
    }
}

/// A scripted reply streams word by word, as a provider's would, so drivers and tests see
/// deltas without a network.
fn stream_words(sink: &DeltaSink, thinking: Option<&str>, text: Option<&str>) {
    for word in thinking.unwrap_or_default().split_inclusive(' ') {
        sink.send(ModelDelta::Thinking(word.into()));
    }
    for word in text.unwrap_or_default().split_inclusive(' ') {
        sink.send(ModelDelta::Text(word.into()));
    }
}

#[async_trait]
impl Model for ScriptedModel {
    fn id(&self) -> &str {
        "scripted"
    }

    async fn complete(&self, request: &ModelRequest<'_>) -> Result<AssistantTurn, ModelError> {
        let (number, turn) = self.take_turn()?;
        if turn.delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(turn.delay_ms)).await;
        }
        if let Some(error) = turn.error {
            return Err(ModelError::Transient {
                model: "scripted".into(),
                message: error,
            });
        }
        stream_words(
            &request.deltas,
            turn.thinking.as_deref(),
            turn.text.as_deref(),
        );
        let mut content = Vec::new();
        if let Some(thinking) = turn.thinking {
            content.push(ContentBlock::Thinking {
                thinking,
                signature: None,
            });
        }
        if let Some(text) = turn.text {
            content.push(ContentBlock::Text { text });
        }
        let has_calls = !turn.tool_calls.is_empty();
        for (i, call) in turn.tool_calls.into_iter().enumerate() {
            content.push(ContentBlock::ToolUse {
                // Deterministic ids: the n-th model call's i-th tool call.
                id: call.id.unwrap_or_else(|| format!("call_{number}_{i}")),
                name: call.name,
                input: call.input,
            });
        }
        Ok(AssistantTurn {
            message: Message {
                role: Role::Assistant,
                content,
            },
            usage: turn.usage.unwrap_or_default(),
            stop_reason: if has_calls {
                StopReason::ToolUse
            } else {
                StopReason::EndTurn
            },
        })
    }
}

/// Proposes one `bash` call that runs the reference solution, then a final text turn.
#[derive(Debug, Clone)]
pub struct OracleModel {
    solve_sh: PathBuf,
}

/// The call id the oracle uses, so it can find its own result in the conversation.
const ORACLE_CALL_ID: &str = "oracle_solve";

impl OracleModel {
    /// An oracle that runs the solution script `solve_sh`.
    pub fn new(solve_sh: PathBuf) -> Self {
        OracleModel { solve_sh }
    }
}

#[async_trait]
impl Model for OracleModel {
    fn id(&self) -> &str {
        "oracle"
    }

    async fn complete(&self, request: &ModelRequest<'_>) -> Result<AssistantTurn, ModelError> {
        let result = request.messages.iter().rev().find_map(|m| {
            m.content.iter().find_map(|b| match b {
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                } if tool_use_id == ORACLE_CALL_ID => Some((content.clone(), *is_error)),
                _ => None,
            })
        });
        if let Some((content, is_error)) = result {
            let last = content.lines().last().unwrap_or("").to_string();
            let text = if is_error {
                format!("The reference solution failed ({last}); the task is probably not solved.")
            } else {
                format!("The reference solution finished ({last}); the task should now be solved.")
            };
            return Ok(text_turn(&text));
        }
        if request.force_text {
            return Ok(text_turn(
                "The oracle had no round left to run the solution.",
            ));
        }
        let quoted = format!(
            "'{}'",
            self.solve_sh.display().to_string().replace('\'', r"'\''")
        );
        Ok(AssistantTurn {
            message: Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::Text {
                        text: "Running the reference solution.".into(),
                    },
                    ContentBlock::ToolUse {
                        id: ORACLE_CALL_ID.into(),
                        name: "bash".into(),
                        input: json!({ "command": format!("bash {quoted}") }),
                    },
                ],
            },
            usage: Usage::default(),
            stop_reason: StopReason::ToolUse,
        })
    }
}

/// Replays the assistant messages of one recorded session, in order.
#[derive(Debug)]
pub struct ReplayModel {
    path: String,
    messages: Vec<Message>,
    next: Mutex<usize>,
}

impl ReplayModel {
    /// Read `message.assistant` rows of `session` (default: the newest session) from a
    /// timeline database.
    pub fn load(db: PathBuf, session: Option<&str>) -> Result<Self, ModelError> {
        let path = db.display().to_string();
        let err = |message: String| ModelError::Replay {
            path: path.clone(),
            message,
        };
        if !db.exists() {
            return Err(err("no such timeline database".into()));
        }
        let tl = SessionTimeline::open(&db).map_err(|e| err(e.to_string()))?;
        let session = match session {
            Some(s) => SessionId::new(s),
            None => tl
                .latest_session()
                .map_err(|e| err(e.to_string()))?
                .ok_or_else(|| err("the timeline holds no session".into()))?,
        };
        let messages: Vec<Message> = tl
            .rows(&session)
            .map_err(|e| err(e.to_string()))?
            .into_iter()
            .filter_map(|r| match r.event {
                TimelineEvent::AssistantMessage { message, .. } => Some(message),
                _ => None,
            })
            .collect();
        if messages.is_empty() {
            return Err(err(format!("session {session} has no assistant messages")));
        }
        Ok(ReplayModel {
            path,
            messages,
            next: Mutex::new(0),
        })
    }
}

#[async_trait]
impl Model for ReplayModel {
    fn id(&self) -> &str {
        "replay"
    }

    async fn complete(&self, _: &ModelRequest<'_>) -> Result<AssistantTurn, ModelError> {
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let Some(message) = self.messages.get(*next).cloned() else {
            return Err(ModelError::Exhausted {
                model: format!("replay:{}", self.path),
                turns: self.messages.len(),
            });
        };
        *next += 1;
        let stop_reason = if message.tool_calls().is_empty() {
            StopReason::EndTurn
        } else {
            StopReason::ToolUse
        };
        Ok(AssistantTurn {
            message,
            usage: Usage::default(),
            stop_reason,
        })
    }
}
