//! What the gateway keeps of every call, and the budgets it enforces from the same tally.
//!
//! The record file (`geode.gateway.call.v1`, one JSON object a line, appended as each call
//! ends): the call's format and whether it streamed, the request as the runtime's typed
//! conversation (so the trajectory is built the same way whatever format the agent spoke), the
//! reply, tokens and cost (the route's adapter prices with the catalog; embedded models cost
//! 0), latency to the first byte and to the end, and the status: `ok`, or why not
//! (`unauthorized`, `bad_request`, `budget_exhausted`, `model_error`) with the message.
//!
//! Budgets are checked when a call arrives, against what ended calls used and how many calls
//! were let in: a call is refused once the calls, tokens or cost reached their limit. A call in
//! flight is never cut, so the last one may end past the token or cost limit (its cost is not
//! known before it ends); the next is refused.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use geode_runtime::conversation::{AssistantTurn, ContentBlock, Message, Role, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::GatewayError;

/// The record file's schema name.
pub const SCHEMA: &str = "geode.gateway.call.v1";

/// The wire format a call came in.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::Display,
    strum::EnumIter,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum WireFormat {
    /// Anthropic Messages, `POST /v1/messages`.
    AnthropicMessages,
    /// OpenAI Responses, `POST /v1/responses`.
    OpenaiResponses,
    /// OpenAI Chat Completions, `POST /v1/chat/completions`.
    ChatCompletions,
}

/// How a call ended.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::Display,
    strum::EnumIter,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum CallStatus {
    /// The model answered and the answer was sent.
    Ok,
    /// No valid per-trial token: the model was not asked.
    Unauthorized,
    /// The request could not be read in its format: the model was not asked.
    BadRequest,
    /// A budget was used up: the model was not asked.
    BudgetExhausted,
    /// The model (the route) failed.
    ModelError,
}

/// A tool the agent declared, as it declared it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentTool {
    /// The tool's name.
    pub name: String,
    /// What the agent says it does.
    #[serde(default)]
    pub description: String,
    /// The JSON Schema of its input.
    pub input_schema: Value,
}

/// A call's request, in the runtime's typed terms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedRequest {
    /// The model the agent asked for (the gateway's route answers whatever it names).
    pub model: String,
    /// The system prompt (every system / developer / instructions text, joined).
    pub system: String,
    /// The conversation as the agent sent it.
    pub messages: Vec<Message>,
    /// The agent's tools.
    pub tools: Vec<AgentTool>,
}

/// One call through the gateway.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// 1 for the first record of the file, in the order calls ended.
    pub seq: u64,
    /// When the call arrived, RFC 3339.
    pub started_at: String,
    /// The wire format.
    pub format: WireFormat,
    /// Whether the agent asked for a stream.
    pub stream: bool,
    /// The route's model id (`scripted`, `anthropic:claude-...`).
    pub route_model: String,
    /// The request, when it could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<RecordedRequest>,
    /// The model's reply, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<AssistantTurn>,
    /// Tokens and cost of the call (zero when the model was not asked).
    pub usage: Usage,
    /// From arrival to the first byte of the answer's body, in milliseconds.
    pub first_byte_ms: f64,
    /// From arrival to the answer's last byte, in milliseconds.
    pub latency_ms: f64,
    /// How the call ended.
    pub status: CallStatus,
    /// Why it did not end `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A trial's limits on its agent's model use. `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Budgets {
    /// Model calls let in.
    pub max_calls: Option<u64>,
    /// Tokens (input, output and reasoning) of ended calls.
    pub max_tokens: Option<u64>,
    /// Cost in US dollars of ended calls.
    pub max_cost_usd: Option<f64>,
}

struct State {
    file: File,
    records: Vec<CallRecord>,
    admitted: u64,
    used: Usage,
}

/// The record file and the budget tally, one lock for both so a refusal and a record agree.
pub(super) struct Ledger {
    path: PathBuf,
    budgets: Budgets,
    state: Mutex<State>,
}

impl Ledger {
    /// Open (append to) the record file, creating its folder.
    pub fn open(path: &Path, budgets: Budgets) -> Result<Self, GatewayError> {
        let err = |source| GatewayError::Record {
            path: path.to_path_buf(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(err)?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(err)?;
        Ok(Ledger {
            path: path.to_path_buf(),
            budgets,
            state: Mutex::new(State {
                file,
                records: Vec::new(),
                admitted: 0,
                used: Usage::default(),
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A poisoned lock still holds whole records: every change is one push or one add.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Let a call in (its number, from 1), or say which budget is used up.
    pub fn admit(&self) -> Result<u64, String> {
        let mut s = self.lock();
        let b = &self.budgets;
        if let Some(max) = b.max_calls.filter(|m| s.admitted >= *m) {
            return Err(format!("the trial's call budget is used up ({max} calls)"));
        }
        if let Some(max) = b.max_tokens.filter(|m| s.used.total_tokens() >= *m) {
            return Err(format!(
                "the trial's token budget is used up ({} of {max} tokens)",
                s.used.total_tokens()
            ));
        }
        if let Some(max) = b.max_cost_usd.filter(|m| s.used.cost_usd >= *m) {
            return Err(format!(
                "the trial's cost budget is used up (${:.4} of ${max:.4})",
                s.used.cost_usd
            ));
        }
        s.admitted += 1;
        Ok(s.admitted)
    }

    /// Append a call's record (its `seq` is set here) and count its usage.
    pub fn append(&self, mut record: CallRecord) -> Result<(), GatewayError> {
        let mut s = self.lock();
        record.seq = s.records.len() as u64 + 1;
        s.used.add(&record.usage);
        let line = serde_json::to_string(&record).map_err(|e| GatewayError::Record {
            path: self.path.clone(),
            source: std::io::Error::other(e),
        })?;
        let written = writeln!(s.file, "{line}").and_then(|()| s.file.flush());
        s.records.push(record);
        written.map_err(|source| GatewayError::Record {
            path: self.path.clone(),
            source,
        })
    }

    /// Give back the signatures of reasoning the agent returns without one. A stream passes
    /// the model's thinking on as it is written, before the provider signs it, so the agent
    /// got the block unsigned; a provider that checks signatures (Anthropic, and encrypted
    /// Responses reasoning) needs it back verbatim, and the record of the reply has it.
    pub fn restore_signatures(&self, messages: &mut [Message]) {
        let s = self.lock();
        for message in messages.iter_mut().filter(|m| m.role == Role::Assistant) {
            for block in &mut message.content {
                let ContentBlock::Thinking {
                    thinking,
                    signature: signature @ None,
                } = block
                else {
                    continue;
                };
                let signed = s
                    .records
                    .iter()
                    .rev()
                    .filter_map(|r| r.reply.as_ref())
                    .flat_map(|t| &t.message.content)
                    .find_map(|b| match b {
                        ContentBlock::Thinking {
                            thinking: t,
                            signature: Some(sig),
                        } if t == thinking => Some(sig.clone()),
                        _ => None,
                    });
                *signature = signed;
            }
        }
    }

    /// Every record so far.
    pub fn records(&self) -> Vec<CallRecord> {
        self.lock().records.clone()
    }
}

/// Read a record file back, each line checked against [`SCHEMA`]; errors name the line.
pub fn read(path: &Path) -> Result<Vec<CallRecord>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, line)| {
            let record: CallRecord = serde_json::from_str(line)
                .map_err(|e| format!("{} line {}: {e}", path.display(), i + 1))?;
            if record.schema != SCHEMA {
                return Err(format!(
                    "{} line {}: schema {:?} is not {SCHEMA}",
                    path.display(),
                    i + 1,
                    record.schema
                ));
            }
            Ok(record)
        })
        .collect()
}
