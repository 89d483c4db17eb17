//! The typed conversation: messages made of content blocks, token usage and stop reasons.
//!
//! These are the plain types every driver and adapter speaks; provider adapters translate them
//! to and from each wire format, so nothing above this module sees provider JSON.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who wrote a message. Tool results travel in `User` messages, as in the Anthropic Messages API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Written by the runtime for the model: the task, follow-ups and tool results.
    User,
    /// Written by the model.
    Assistant,
}

/// One block of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// The text, verbatim.
        text: String,
    },
    /// A tool call the model proposes.
    ToolUse {
        /// The provider's id of the call; the matching result quotes it.
        id: String,
        /// The tool to call.
        name: String,
        /// The arguments, as the model wrote them (a JSON object for a well-formed call).
        input: Value,
    },
    /// The outcome of one tool call.
    ToolResult {
        /// The id of the `ToolUse` block this result answers.
        tool_use_id: String,
        /// What the tool returned, or the error text.
        content: String,
        /// True when the call failed, timed out or was denied.
        is_error: bool,
    },
    /// The model's reasoning, kept so it can be replayed to the provider.
    Thinking {
        /// The reasoning text; may be empty when the provider only returns a signature.
        thinking: String,
        /// Provider signature or encrypted content that must be replayed verbatim.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// A picture (a `computer` screenshot). In a user message it belongs to the tool result
    /// before it: each adapter folds it into or after that result as its wire format allows.
    Image(Image),
}

/// The one image format the runtime sends: screenshots are PNG.
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
pub enum ImageMediaType {
    /// `image/png`.
    #[serde(rename = "image/png")]
    #[strum(serialize = "image/png")]
    Png,
}

impl ImageMediaType {
    /// The MIME type, as the providers' wire formats spell it.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// An image as it travels to a model: its bytes base64-encoded (standard alphabet, padded).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// The image format.
    pub media_type: ImageMediaType,
    /// The bytes, base64-encoded.
    pub data_b64: String,
}

impl Image {
    /// `data:image/png;base64,...`, the form the OpenAI wire formats take.
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.media_type.as_str(), self.data_b64)
    }

    /// What the timeline and the ledger keep of an image instead of its bytes: the SHA-256
    /// of the base64 text and its length, so rows stay small and the image stays identifiable.
    pub fn digest(&self) -> ImageDigest {
        use sha2::{Digest, Sha256};
        ImageDigest {
            media_type: self.media_type,
            sha256: hex::encode(Sha256::digest(self.data_b64.as_bytes())),
            b64_len: self.data_b64.len(),
        }
    }
}

/// An image's stand-in in observation logs (see [`Image::digest`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageDigest {
    /// The format of the image.
    pub media_type: ImageMediaType,
    /// Lowercase hex SHA-256 of the base64 text.
    pub sha256: String,
    pub(crate) b64_len: usize,
}

/// A proposed tool call, as the model wrote it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id of the call; the result quotes it.
    pub id: String,
    /// The tool to call.
    pub name: String,
    /// The arguments, as the model wrote them.
    pub input: Value,
}

/// The uniform result every call ends in: success, error, timeout and denial alike.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The id of the call this answers.
    pub tool_use_id: String,
    /// What the tool returned, or the error text.
    pub content: String,
    /// True for an error, a timeout or a denial.
    pub is_error: bool,
    /// Screenshots the call returned; they follow the result block in the conversation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
}

impl ToolResult {
    /// The result block followed by its images, in the order a user message carries them.
    pub fn into_blocks(self) -> Vec<ContentBlock> {
        let mut blocks = vec![ContentBlock::ToolResult {
            tool_use_id: self.tool_use_id,
            content: self.content,
            is_error: self.is_error,
        }];
        blocks.extend(self.images.into_iter().map(ContentBlock::Image));
        blocks
    }
}

/// One message of a conversation: who wrote it and its blocks in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote the message.
    pub role: Role,
    /// The blocks, in order.
    pub content: Vec<ContentBlock>,
}

impl Message {
    /// A user message of one text block.
    pub fn user_text(text: impl Into<String>) -> Self {
        Message {
            role: Role::User,
            content: vec![ContentBlock::Text { text: text.into() }],
        }
    }

    pub(crate) fn assistant_text(text: impl Into<String>) -> Self {
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::Text { text: text.into() }],
        }
    }

    /// All text blocks joined by newlines (thinking excluded).
    pub fn text(&self) -> String {
        let parts: Vec<&str> = self
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        parts.join("\n")
    }

    /// A copy without its images, for observation logs (the timeline): their hash and size
    /// are on the call's `tool.completed` row, their bytes in the checkpoint.
    pub fn without_images(&self) -> Message {
        Message {
            role: self.role,
            content: self
                .content
                .iter()
                .filter(|b| !matches!(b, ContentBlock::Image(_)))
                .cloned()
                .collect(),
        }
    }

    /// The images of this message by the tool call whose result they follow.
    pub fn tool_images(&self) -> Vec<(&str, &Image)> {
        let mut owner = None;
        let mut out = Vec::new();
        for b in &self.content {
            match b {
                ContentBlock::ToolResult { tool_use_id, .. } => owner = Some(tool_use_id.as_str()),
                ContentBlock::Image(image) => {
                    if let Some(id) = owner {
                        out.push((id, image));
                    }
                }
                _ => owner = None,
            }
        }
        out
    }

    /// The tool calls this message proposes, in order.
    pub fn tool_calls(&self) -> Vec<ToolCall> {
        self.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolUse { id, name, input } => Some(ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    input: input.clone(),
                }),
                _ => None,
            })
            .collect()
    }
}

/// Token usage of one model call, or a sum of calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Usage {
    /// Prompt tokens, cache reads and writes included.
    pub input_tokens: u64,
    /// The part of `input_tokens` read from the provider's prompt cache.
    pub cached_input_tokens: u64,
    /// Tokens written by the model, reasoning excluded.
    pub output_tokens: u64,
    /// Reasoning (thinking) tokens, when the provider reports them apart.
    pub reasoning_tokens: u64,
    /// Cost in US dollars as priced by the catalog; 0 for embedded models.
    pub cost_usd: f64,
}

impl Usage {
    /// Adds another call's usage (tokens and cost) to this one.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.cached_input_tokens += other.cached_input_tokens;
        self.output_tokens += other.output_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
        self.cost_usd += other.cost_usd;
    }

    /// Input, output and reasoning tokens together.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens + self.reasoning_tokens
    }
}

/// Why the model stopped producing output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model finished its reply.
    EndTurn,
    /// The model stopped to have its tool calls run.
    ToolUse,
    /// The reply hit the output token limit.
    MaxTokens,
    /// The reply hit a stop sequence.
    StopSequence,
    /// The provider refused to answer.
    Refusal,
}

/// One assistant reply as returned by a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantTurn {
    /// The reply.
    pub message: Message,
    /// What the call used.
    pub usage: Usage,
    /// Why the model stopped.
    pub stop_reason: StopReason,
}

/// An assistant call and its result with one screenshot, as the loop appends them: what the
/// adapters' tests put into each wire format.
#[cfg(test)]
pub(crate) fn screenshot_turn() -> Vec<Message> {
    let result = ToolResult {
        tool_use_id: "c1".into(),
        content: "screenshot 1x1".into(),
        is_error: false,
        images: vec![Image {
            media_type: ImageMediaType::Png,
            data_b64: "iVBORw0K".into(),
        }],
    };
    vec![
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolUse {
                id: "c1".into(),
                name: "computer".into(),
                input: serde_json::json!({"action": "screenshot"}),
            }],
        },
        Message {
            role: Role::User,
            content: result.into_blocks(),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_blocks_use_the_messages_api_tags() {
        let block = ContentBlock::ToolUse {
            id: "t1".into(),
            name: "bash".into(),
            input: serde_json::json!({"command": "ls"}),
        };
        let json = serde_json::to_value(&block).unwrap();
        assert_eq!(json["type"], "tool_use");
        let back: ContentBlock = serde_json::from_value(json).unwrap();
        assert_eq!(back, block);
    }

    #[test]
    fn text_joins_only_text_blocks() {
        let m = Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "hmm".into(),
                    signature: None,
                },
                ContentBlock::Text { text: "a".into() },
                ContentBlock::Text { text: "b".into() },
            ],
        };
        assert_eq!(m.text(), "a\nb");
    }
}
