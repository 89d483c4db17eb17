//! The route grammar: how a route string names a provider and an exact catalog model, and
//! why a route is refused. Kept apart from the catalog data so the grammar reads as one piece.

use std::path::PathBuf;

use super::{Catalog, ModelInfo, ProviderKind};
use crate::model::ModelError;

/// A parsed model route.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// `nop`, `scripted:FILE`, `oracle:SOLVE_SH`, `replay:DB[#SESSION]`, kept as written.
    Embedded(String),
    /// `cassette:DIR`: recorded provider exchanges replayed offline.
    Cassette(PathBuf),
    Provider(ProviderRoute),
    /// `judge:ROUTE`: a model for decisions only, never the root text model.
    Judge(Box<Route>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProviderRoute {
    /// The route as written; the adapter's `Model::id`.
    pub text: String,
    pub provider: ProviderKind,
    /// The model id sent on the wire.
    pub model: String,
    /// The base URL written in a `compat:` route.
    pub base_url: Option<String>,
    /// The catalog entry; `None` for ids of open providers the catalog does not list.
    pub info: Option<ModelInfo>,
}

impl ProviderRoute {
    /// The catalog entry, for adapters that cannot run a model the catalog does not list
    /// (`provider` names them in the error).
    pub fn listed_info(&self, provider: &str) -> Result<ModelInfo, ModelError> {
        self.info.clone().ok_or_else(|| ModelError::UnknownRoute {
            route: self.text.clone(),
            hint: format!("{provider} models must be listed in the catalog"),
        })
    }
}

const EMBEDDED: [&str; 4] = ["nop", "scripted", "oracle", "replay"];

/// Parse a route against the built-in catalog.
pub fn parse_route(route: &str) -> Result<Route, ModelError> {
    parse_route_in(Catalog::builtin()?, route)
}

pub fn parse_route_in(catalog: &Catalog, route: &str) -> Result<Route, ModelError> {
    let (kind, rest) = route.split_once(':').unwrap_or((route, ""));
    let unknown = |hint: String| ModelError::UnknownRoute {
        route: route.to_string(),
        hint,
    };
    if EMBEDDED.contains(&kind) {
        return Ok(Route::Embedded(route.to_string()));
    }
    if kind == "cassette" {
        if rest.is_empty() {
            return Err(unknown(
                "cassette needs a directory, e.g. cassette:DIR".into(),
            ));
        }
        return Ok(Route::Cassette(PathBuf::from(rest)));
    }
    if kind == "judge" {
        return match parse_route_in(catalog, rest)? {
            Route::Judge(_) => Err(unknown("judge:judge:... is not a route".into())),
            inner => Ok(Route::Judge(Box::new(inner))),
        };
    }
    if let Some(reason) = catalog.refused_routes.get(kind) {
        return Err(ModelError::RefusedRoute {
            route: route.to_string(),
            reason: reason.clone(),
        });
    }
    let Some(provider) = ProviderKind::parse(kind) else {
        return Err(unknown(
            "routes are anthropic:MODEL, openai:MODEL, openai-codex:MODEL, glm:MODEL, \
             openrouter:MODEL, compat:BASE_URL:MODEL, cassette:DIR, judge:ROUTE, nop, \
             scripted:FILE, oracle:SOLVE_SH, replay:DB[#SESSION]"
                .into(),
        ));
    };
    let Some(pinfo) = catalog.provider(provider) else {
        return Err(unknown(format!("the catalog has no provider {kind}")));
    };
    let (base_url, model) = if provider == ProviderKind::Compat {
        let (base, model) = split_compat(rest).ok_or_else(|| {
            unknown("compat routes are compat:BASE_URL:MODEL, e.g. compat:http://127.0.0.1:8000/v1:my-model".into())
        })?;
        (Some(base.to_string()), model.to_string())
    } else {
        (None, rest.to_string())
    };
    let info = catalog.model(&model).cloned();
    if !pinfo.open_ids {
        let Some(m) = &info else {
            return Err(unknown(format!(
                "{kind} has no model {model:?}; exact ids only (nothing is upgraded): {}",
                catalog.ids_on_route(kind).join(", ")
            )));
        };
        if m.provider != provider.model_owner() || !m.routes.iter().any(|r| r == kind) {
            return Err(unknown(format!(
                "{model} is not served on the {kind} route (its routes: {}; the {kind} route \
                 serves: {})",
                m.routes.join(", "),
                catalog.ids_on_route(kind).join(", ")
            )));
        }
    } else if model.is_empty() {
        return Err(unknown(format!(
            "{kind} needs a model id, e.g. {kind}:MODEL"
        )));
    }
    Ok(Route::Provider(ProviderRoute {
        text: route.to_string(),
        provider,
        model,
        base_url,
        info: info.filter(|m| m.provider == provider.model_owner()),
    }))
}

/// `http://host:port/v1:model` -> (`http://host:port/v1`, `model`). The separator is the first
/// ':' after the start of the URL's path: the scheme and port colons come before it, and model
/// ids may hold colons of their own (Ollama tags such as `llama3:8b`).
pub(super) fn split_compat(rest: &str) -> Option<(&str, &str)> {
    let scheme_end = rest.find("://")? + 3;
    let path_start = scheme_end + rest[scheme_end..].find('/')?;
    let sep = path_start + rest[path_start..].find(':')?;
    let (base, model) = (&rest[..sep], &rest[sep + 1..]);
    let scheme = &rest[..scheme_end];
    if !(scheme == "http://" || scheme == "https://") || model.is_empty() {
        return None;
    }
    Some((base.trim_end_matches('/'), model))
}

/// Refuse a route that is judge-only where a root text model is needed: the session layer
/// calls this before building the root model of a session.
pub fn ensure_root_route(route: &str) -> Result<(), ModelError> {
    if route.starts_with("judge:") {
        return Err(judge_as_root(route));
    }
    Ok(())
}

/// The refusal of a judge route as a root model.
pub fn judge_as_root(route: &str) -> ModelError {
    ModelError::RefusedRoute {
        route: route.to_string(),
        reason: "a judge route is for decisions (graders, tournaments) only; it cannot be the \
                 root text model of a session"
            .into(),
    }
}
