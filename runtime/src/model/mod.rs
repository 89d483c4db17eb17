//! The `Model` trait every adapter implements, the request it receives, and model routes.
//!
//! Embedded models (`scripted`, `oracle`, `nop`, `replay`) need no key and no network; they are
//! how benchmark runs and tests drive the full pipeline offline. Provider adapters (Anthropic
//! Messages, OpenAI Responses, OpenAI-compatible Chat Completions) stream SSE over reqwest;
//! `model_for` builds either kind from a parsed `catalog::Route`.

pub mod anthropic;
pub mod cassette;
pub mod catalog;
pub mod chat_compat;
pub mod computer_oracle;
pub mod credentials;
pub mod effort;
pub mod embedded;
pub mod errors;
pub mod flaky;
pub mod http;
pub mod login;
pub mod openai_responses;
pub mod record;
pub mod sse;
pub mod unavailable;

use std::sync::Arc;

use async_trait::async_trait;

use crate::conversation::{AssistantTurn, Message};
use crate::ids::StepSnapshot;
use crate::tools::plan::BoundToolPlan;
use catalog::{EmbeddedRoute, Route};

/// What one model call sees.
#[derive(Debug, Clone)]
pub struct ModelRequest<'a> {
    /// The system prompt.
    pub system: &'a str,
    /// The conversation so far, oldest first.
    pub messages: &'a [Message],
    /// The tools bound to this step; adapters project them to their wire shape.
    pub plan: &'a BoundToolPlan,
    /// The step's identity (session, turn, step), recorded with the call.
    pub snapshot: &'a StepSnapshot,
    /// The wrap-up rule: the model must answer with text, no tool calls.
    pub force_text: bool,
    /// Where the reply's text and thinking go as they arrive, for a person watching.
    pub deltas: DeltaSink,
}

/// A piece of a reply as it streams in. The whole reply still comes back from `complete`;
/// deltas only let a driver show it early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelDelta {
    /// A piece of the reply's text.
    Text(String),
    /// A piece of the reply's reasoning.
    Thinking(String),
}

/// Receives a reply's deltas; the default one drops them (judges, reflection, benchmarks).
#[derive(Clone, Default)]
pub struct DeltaSink(Option<Arc<dyn Fn(ModelDelta) + Send + Sync>>);

impl DeltaSink {
    /// A sink that calls `f` with every non-empty delta.
    pub fn new(f: impl Fn(ModelDelta) + Send + Sync + 'static) -> Self {
        DeltaSink(Some(Arc::new(f)))
    }

    /// Hand on a delta; empty pieces (a block's opening event) are not worth a wake-up.
    pub fn send(&self, delta: ModelDelta) {
        let empty = match &delta {
            ModelDelta::Text(t) | ModelDelta::Thinking(t) => t.is_empty(),
        };
        if let (Some(f), false) = (&self.0, empty) {
            f(delta);
        }
    }
}

impl std::fmt::Debug for DeltaSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "DeltaSink(on)"
        } else {
            "DeltaSink(off)"
        })
    }
}

/// Why a model call or the building of a model failed.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A scripted model's script could not be read or is malformed.
    #[error("script {path}: {message}")]
    Script {
        /// The script file.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// A scripted or replayed model was asked for more turns than it holds.
    #[error("{model}: no more scripted turns (the script has {turns})")]
    Exhausted {
        /// The model's id.
        model: String,
        /// How many turns the script or recording holds.
        turns: usize,
    },
    /// A replay model could not load the session it replays.
    #[error("replay {path}: {message}")]
    Replay {
        /// The timeline database replayed from.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// A failure of the model service that may pass (rate limits, overload, connection).
    #[error("{model}: {message}")]
    Transient {
        /// The model's id.
        model: String,
        /// What the service or the connection said.
        message: String,
    },
    /// A failure no retry can fix (a bad catalog, an HTTP client or recorder that cannot start).
    #[error("{model}: {message}")]
    Fatal {
        /// The model's id, or the part that failed (`catalog`, `http`).
        model: String,
        /// What went wrong.
        message: String,
    },
    /// A route string that names no known model, provider or embedded model.
    #[error("unknown model route {route:?}: {hint}")]
    UnknownRoute {
        /// The route as given.
        route: String,
        /// What is wrong with it, or what was meant.
        hint: String,
    },
    /// A route that exists but is not allowed (subscription OAuth, coding plans, judge-only).
    #[error("model route {route:?} is refused: {reason}")]
    RefusedRoute {
        /// The route as given.
        route: String,
        /// Why it is refused.
        reason: String,
    },
    /// A provider call failed for good: after the adapter's own bounded retries, or at once
    /// for a class it never retries. The loop must not retry it again.
    #[error("{model}: {class}: {message}")]
    Provider {
        /// The model's id.
        model: String,
        /// The kind of failure.
        class: errors::ErrorClass,
        /// What the provider or the connection said.
        message: String,
    },
    /// A cassette replay met a request it has no recording for.
    #[error("{model}: {message}")]
    Cassette {
        /// The model's id.
        model: String,
        /// Which request was not found.
        message: String,
    },
    /// The session's route cannot answer (none configured, no key): see `unavailable`.
    #[error("{reason}")]
    Unavailable {
        /// The model's id.
        model: String,
        /// Why it cannot answer, as shown to the user.
        reason: String,
    },
}

impl ModelError {
    /// Whether the loop may retry the call (bounded, with backoff).
    pub fn retryable(&self) -> bool {
        matches!(self, ModelError::Transient { .. })
    }

    /// The provider error class, for errors that came from a provider.
    pub fn class(&self) -> Option<errors::ErrorClass> {
        match self {
            ModelError::Provider { class, .. } => Some(*class),
            _ => None,
        }
    }
}

/// A model the loop can call: an embedded model or a provider adapter.
#[async_trait]
pub trait Model: Send + Sync {
    /// The id written to snapshots and timelines (`scripted`, `oracle`, `anthropic:...`).
    fn id(&self) -> &str;

    /// Why this model cannot answer at all, when it cannot (`unavailable::Unavailable`), as a
    /// driver shows it when the session starts, before anyone types.
    fn unavailable(&self) -> Option<&str> {
        None
    }

    /// One call: the reply to `request`, or why there is none.
    async fn complete(&self, request: &ModelRequest<'_>) -> Result<AssistantTurn, ModelError>;
}

/// The model a session calls now, shared with what must follow a `/model` switch: its
/// sub-agents. The loop keeps its own `Arc` too (it lends out `&str` ids) and updates both.
#[derive(Clone)]
pub struct ModelSlot(Arc<std::sync::RwLock<Arc<dyn Model>>>);

impl ModelSlot {
    /// A slot holding `model` until the first `set`.
    pub fn new(model: Arc<dyn Model>) -> Self {
        ModelSlot(Arc::new(std::sync::RwLock::new(model)))
    }

    /// The model the session calls now.
    pub fn get(&self) -> Arc<dyn Model> {
        // A poisoned lock still holds a whole `Arc`: writers only swap it.
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Swap the model (a `/model` switch); holders of the slot see it on their next `get`.
    pub fn set(&self, model: Arc<dyn Model>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = model;
    }
}

/// Build a model from a route string: parse it (see `catalog::Route`), then `model_for`.
pub fn model_from_route(
    route: &str,
    opts: &http::RouteOptions,
) -> Result<Arc<dyn Model>, ModelError> {
    model_for(&route.parse()?, opts)
}

/// Build the root text model a route names: a provider, a cassette, or an embedded model.
/// Judge routes are refused here: use `judge_for`.
pub fn model_for(route: &Route, opts: &http::RouteOptions) -> Result<Arc<dyn Model>, ModelError> {
    match route {
        Route::Embedded(e) => embedded_model(route, e),
        Route::Cassette(dir) => cassette::cassette_model(dir, opts),
        Route::Provider(p) => http::provider_model(p, opts, None),
        Route::Judge(_) => Err(catalog::judge_as_root(&route.to_string())),
    }
}

/// Build a judge (decisions only) from `judge:ROUTE` or a plain route string.
pub fn judge_from_route(
    route: &str,
    opts: &http::RouteOptions,
) -> Result<catalog::JudgeModel, ModelError> {
    judge_for(&route.parse()?, opts)
}

/// Build a judge (decisions only) from `judge:ROUTE` or a plain route.
pub fn judge_for(
    route: &Route,
    opts: &http::RouteOptions,
) -> Result<catalog::JudgeModel, ModelError> {
    Ok(catalog::JudgeModel::new(model_for(
        route.without_judge(),
        opts,
    )?))
}

/// An embedded model. The oracle without a path and the flaky oracle need a benchmark trial
/// (the task's solution in the sandbox, the trial's seed), which builds them itself.
fn embedded_model(route: &Route, e: &EmbeddedRoute) -> Result<Arc<dyn Model>, ModelError> {
    let trial_only = |what: &str| ModelError::RefusedRoute {
        route: route.to_string(),
        reason: format!(
            "{what} only runs inside a benchmark trial (geode run), which gives it the task's \
             solution"
        ),
    };
    Ok(match e {
        EmbeddedRoute::Nop => Arc::new(embedded::NopModel),
        EmbeddedRoute::Scripted { script } => {
            Arc::new(embedded::ScriptedModel::load(script.clone())?)
        }
        EmbeddedRoute::Oracle { solve_sh: Some(p) } => {
            Arc::new(embedded::OracleModel::new(p.clone()))
        }
        EmbeddedRoute::Oracle { solve_sh: None } => {
            return Err(trial_only("oracle without :SOLVE_SH"));
        }
        EmbeddedRoute::Replay { db, session } => {
            Arc::new(embedded::ReplayModel::load(db.clone(), session.as_deref())?)
        }
        EmbeddedRoute::FlakyOracle { .. } => return Err(trial_only("flaky-oracle")),
    })
}
