//! The `Model` trait every adapter implements, the request it receives, and model routes.
//!
//! Embedded models (`scripted`, `oracle`, `nop`, `replay`) need no key and no network; they are
//! how benchmark runs and tests drive the full pipeline offline.

pub mod embedded;

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;

use crate::conversation::{AssistantTurn, Message};
use crate::tools::plan::{BoundToolPlan, StepSnapshot};

/// What one model call sees.
#[derive(Debug, Clone)]
pub struct ModelRequest<'a> {
    pub system: &'a str,
    pub messages: &'a [Message],
    /// The tools bound to this step; adapters project them to their wire shape.
    pub plan: &'a BoundToolPlan,
    pub snapshot: &'a StepSnapshot,
    /// The wrap-up rule: the model must answer with text, no tool calls.
    pub force_text: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("script {path}: {message}")]
    Script { path: String, message: String },
    #[error("{model}: no more scripted turns (the script has {turns})")]
    Exhausted { model: String, turns: usize },
    #[error("replay {path}: {message}")]
    Replay { path: String, message: String },
    /// A failure of the model service that may pass (rate limits, overload, connection).
    #[error("{model}: {message}")]
    Transient { model: String, message: String },
    #[error("{model}: {message}")]
    Fatal { model: String, message: String },
    #[error("unknown model route {route:?}: {hint}")]
    UnknownRoute { route: String, hint: String },
}

impl ModelError {
    /// Whether the loop may retry the call (bounded, with backoff).
    pub fn retryable(&self) -> bool {
        matches!(self, ModelError::Transient { .. })
    }
}

#[async_trait]
pub trait Model: Send + Sync {
    /// The id written to snapshots and timelines (`scripted`, `oracle`, `anthropic:...`).
    fn id(&self) -> &str;

    async fn complete(&self, request: &ModelRequest<'_>) -> Result<AssistantTurn, ModelError>;
}

/// Build an embedded model from a route:
/// `nop`, `scripted:FILE`, `oracle:SOLVE_SH`, `replay:TIMELINE_DB[#SESSION_ID]`.
pub fn embedded_from_route(route: &str) -> Result<Arc<dyn Model>, ModelError> {
    let (kind, arg) = match route.split_once(':') {
        Some((k, a)) => (k, Some(a)),
        None => (route, None),
    };
    let need = |what: &str| ModelError::UnknownRoute {
        route: route.to_string(),
        hint: format!("{kind} needs {what}, e.g. {kind}:{what}"),
    };
    Ok(match (kind, arg) {
        ("nop", _) => Arc::new(embedded::NopModel),
        ("scripted", Some(path)) => Arc::new(embedded::ScriptedModel::load(PathBuf::from(path))?),
        ("scripted", None) => return Err(need("FILE")),
        ("oracle", Some(path)) => Arc::new(embedded::OracleModel::new(PathBuf::from(path))),
        ("oracle", None) => return Err(need("SOLVE_SH")),
        ("replay", Some(arg)) => {
            let (db, session) = match arg.split_once('#') {
                Some((db, s)) => (db, Some(s)),
                None => (arg, None),
            };
            Arc::new(embedded::ReplayModel::load(PathBuf::from(db), session)?)
        }
        ("replay", None) => return Err(need("TIMELINE_DB")),
        _ => {
            return Err(ModelError::UnknownRoute {
                route: route.to_string(),
                hint:
                    "embedded models are nop, scripted:FILE, oracle:SOLVE_SH, replay:DB[#SESSION]"
                        .to_string(),
            });
        }
    })
}
