//! The conversation the loop sends to the model, with what describes it: the hash of the
//! system prompt of the last call (drivers and the checkpoint record it) and the provider's own
//! count of the context at its last reply (compaction trusts it over the estimate when it is
//! larger). One owner, so the messages cannot change without what describes them.

use super::compaction::{SUMMARY_MARKER, estimate_tokens};
use super::prompt::prompt_hash;
use crate::conversation::{Message, Usage};

#[derive(Debug, Clone, Default)]
pub(super) struct Transcript {
    messages: Vec<Message>,
    last_system_hash: Option<String>,
    /// Input + cached + output tokens of the last reply.
    last_context_tokens: u64,
}

impl Transcript {
    /// The conversation a checkpoint saved; the provider's count is unknown until the next
    /// reply.
    pub(super) fn restored(messages: Vec<Message>, system_hash: Option<String>) -> Self {
        Transcript {
            messages,
            last_system_hash: system_hash,
            last_context_tokens: 0,
        }
    }

    pub(super) fn messages(&self) -> &[Message] {
        &self.messages
    }

    pub(super) fn len(&self) -> usize {
        self.messages.len()
    }

    pub(super) fn push(&mut self, message: Message) {
        self.messages.push(message);
    }

    /// A model reply joins the conversation; its usage is the provider's measure of the context.
    pub(super) fn push_reply(&mut self, message: Message, usage: &Usage) {
        self.last_context_tokens =
            usage.input_tokens + usage.cached_input_tokens + usage.output_tokens;
        self.messages.push(message);
    }

    /// The compacted conversation replaces this one (after the checkpoint committed it).
    pub(super) fn replace(&mut self, compacted: Vec<Message>) {
        self.messages = compacted;
    }

    /// The next call is sent with `system`.
    pub(super) fn sent_with(&mut self, system: &str) {
        self.last_system_hash = Some(prompt_hash(system));
    }

    pub(super) fn system_hash(&self) -> Option<&str> {
        self.last_system_hash.as_deref()
    }

    /// The context size compaction decides on: the estimate with `system`, or the provider's
    /// last count when that is larger.
    pub(super) fn context_tokens(&self, system: &str) -> u64 {
        estimate_tokens(system, &self.messages).max(self.last_context_tokens)
    }

    /// Whether the conversation opens with a compaction summary (sessions without a checkpoint
    /// know it only by its marker).
    pub(super) fn starts_with_summary(&self) -> bool {
        self.messages
            .first()
            .is_some_and(|m| m.text().starts_with(SUMMARY_MARKER))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_providers_count_wins_when_larger() {
        let mut t = Transcript::default();
        t.push(Message::user_text("hello"));
        let estimate = t.context_tokens("");
        t.push_reply(
            Message::user_text("x"),
            &Usage {
                input_tokens: 1000,
                ..Usage::default()
            },
        );
        assert!(estimate < 1000);
        assert_eq!(t.context_tokens(""), 1000);
        assert!(!t.starts_with_summary());
        t.sent_with("sys");
        assert_eq!(t.system_hash(), Some(prompt_hash("sys").as_str()));
    }
}
