//! The model of an interactive session whose route cannot answer yet: none is configured, or its
//! key is missing. The REPL and the daemon still start (a person can switch with `/model` or leave
//! with Ctrl-D) and every prompt is answered with one sentence saying why and what to do, where
//! failing at start would leave a newcomer with nothing. Headless drivers (`geode exec`, benchmark
//! trials) never use it: there, a route that cannot answer is an error before any session.

use async_trait::async_trait;

use super::{Model, ModelError, ModelRequest};
use crate::conversation::AssistantTurn;

/// A model that refuses every call with the reason it cannot answer.
#[derive(Debug, Clone)]
pub struct Unavailable {
    id: String,
    reason: String,
    /// What a driver shows when the session starts; the reason when not set.
    notice: Option<String>,
}

impl Unavailable {
    /// `id` is what timelines record (the configured route, or `none`); `reason` is one
    /// sentence a person reads, naming what to set.
    pub fn new(id: impl Into<String>, reason: impl Into<String>) -> Self {
        Unavailable {
            id: id.into(),
            reason: reason.into(),
            notice: None,
        }
    }

    /// A longer text for the start of the session (a set-up screen), where the reason is what
    /// each prompt is answered with.
    pub fn with_notice(mut self, notice: impl Into<String>) -> Self {
        self.notice = Some(notice.into());
        self
    }
}

#[async_trait]
impl Model for Unavailable {
    fn id(&self) -> &str {
        &self.id
    }

    fn unavailable(&self) -> Option<&str> {
        Some(self.notice.as_deref().unwrap_or(&self.reason))
    }

    async fn complete(&self, _request: &ModelRequest<'_>) -> Result<AssistantTurn, ModelError> {
        Err(ModelError::Unavailable {
            model: self.id.clone(),
            reason: self.reason.clone(),
        })
    }
}
