//! From a resolved provider route to a running adapter: where the key and base URL come from,
//! the request shape every provider shares, and which adapter speaks the provider's wire.
//! The transport and retry loop above do not care which provider they serve.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;

use super::{CredentialHint, Driver, HttpSettings, ReqwestTransport, Transport, WireRequest};
use crate::model::catalog::{Catalog, ProviderAuth, ProviderInfo, ProviderRoute, Wire};
use crate::model::credentials::{ApiKey, Env};
use crate::model::effort::Effort;
use crate::model::errors::ErrorClass;
use crate::model::login::{ChatgptAuth, OAuthSettings};
use crate::model::record::Recorder;
use crate::model::{Model, ModelError};

/// How `model_from_route` builds provider models: where keys and base URLs come from, and the
/// settings every adapter takes.
#[derive(Debug, Clone)]
pub struct RouteOptions {
    /// Where keys and base URLs are looked up.
    pub env: Env,
    /// Overrides the base URL of the route's provider (config beats environment).
    pub base_url: Option<String>,
    /// Overrides the key of the route's provider.
    pub api_key: Option<ApiKey>,
    /// The effort to ask for (clamped per model); `None`: the model's default.
    pub effort: Option<Effort>,
    pub(crate) max_output_tokens: Option<u64>,
    /// Timeouts and retries of every adapter built.
    pub http: HttpSettings,
    /// Write every request/response pair here (keys stripped).
    pub record_dir: Option<PathBuf>,
}

impl RouteOptions {
    /// Keys and base URLs from the process environment and `$GEODE_HOME/.env`.
    pub fn from_env() -> Self {
        RouteOptions::with_env(Env::from_process())
    }

    /// Nothing overridden: keys and base URLs from `env`, default HTTP settings.
    pub fn with_env(env: Env) -> Self {
        RouteOptions {
            env,
            base_url: None,
            api_key: None,
            effort: None,
            max_output_tokens: None,
            http: HttpSettings::default(),
            record_dir: None,
        }
    }
}

/// What an adapter is built from once the route is resolved.
#[derive(Debug, Clone)]
pub(crate) struct ProviderConfig {
    pub base_url: String,
    pub api_key: Option<ApiKey>,
    pub effort: Option<Effort>,
    pub max_output_tokens: Option<u64>,
}

/// The header that carries the API key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyHeader {
    /// The key as the value of a header of its own (`x-api-key`).
    Plain(&'static str),
    /// `authorization: Bearer KEY`.
    Bearer,
}

impl ProviderConfig {
    /// A streamed POST of `body` to `{base_url}{path}`: `headers`, then `accept:
    /// text/event-stream`, and the key (when there is one) in `key`.
    pub(crate) fn sse_request(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        key: KeyHeader,
        body: Value,
    ) -> WireRequest {
        let mut headers: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        headers.push(("accept".into(), "text/event-stream".into()));
        let auth = self.api_key.as_ref().map(|k| match key {
            KeyHeader::Plain(name) => (name.to_string(), k.clone()),
            KeyHeader::Bearer => (
                "authorization".to_string(),
                ApiKey::new(format!("Bearer {}", k.expose())),
            ),
        });
        WireRequest {
            url: format!("{}{path}", self.base_url),
            headers,
            auth,
            body,
        }
    }
}

/// Build the adapter of a provider route. With `transport` (a cassette) no key is needed.
pub fn provider_model(
    route: &ProviderRoute,
    opts: &RouteOptions,
    transport: Option<Arc<dyn Transport>>,
) -> Result<Arc<dyn Model>, ModelError> {
    let catalog = Catalog::builtin()?;
    let info = catalog
        .provider(route.provider)
        .ok_or_else(|| ModelError::UnknownRoute {
            route: route.text.clone(),
            hint: "the catalog lists no such provider".into(),
        })?;
    let base_url = route
        .base_url
        .clone()
        .or_else(|| opts.base_url.clone())
        .or_else(|| info.base_url_env.as_deref().and_then(|v| opts.env.var(v)))
        .or_else(|| info.base_url.clone())
        .ok_or_else(|| ModelError::UnknownRoute {
            route: route.text.clone(),
            hint: "no base URL: give one in the route or the config".into(),
        })?;
    let replaying = transport.is_some();
    let subscription = info.auth == ProviderAuth::ChatgptLogin;
    // A replay answers from the cassette: it needs no sign-in.
    let login = if subscription && !replaying {
        Some(chatgpt_login(route, opts)?)
    } else {
        None
    };
    let api_key = match info.auth {
        ProviderAuth::ApiKey => opts.api_key.clone().or_else(|| opts.env.key(&info.key_env)),
        ProviderAuth::ChatgptLogin => None,
    };
    if api_key.is_none() && !info.key_optional && !replaying && !subscription {
        return Err(ModelError::Provider {
            model: route.text.clone(),
            class: ErrorClass::Auth,
            message: format!(
                "no API key: set {}",
                opts.env.describe_sources(&info.key_env)
            ),
        });
    }
    let hint = credential_hint(info, opts);
    let transport = match transport {
        Some(t) => t,
        None => Arc::new(ReqwestTransport::new(&opts.http)?),
    };
    let recorder = match &opts.record_dir {
        Some(dir) if !replaying => Some(
            Recorder::new(dir, &route.text, opts.effort, opts.max_output_tokens).map_err(
                |message| ModelError::Fatal {
                    model: route.text.clone(),
                    message,
                },
            )?,
        ),
        _ => None,
    };
    let driver = Driver::new(
        route.text.clone(),
        transport,
        opts.http.clone(),
        hint,
        recorder,
        replaying,
    );
    let config = ProviderConfig {
        base_url: base_url.trim_end_matches('/').to_string(),
        api_key,
        effort: opts.effort,
        max_output_tokens: opts.max_output_tokens,
    };
    Ok(match info.wire {
        Wire::AnthropicMessages => Arc::new(crate::model::anthropic::AnthropicModel::new(
            route.clone(),
            config,
            driver,
        )?),
        Wire::OpenaiResponses => Arc::new(
            crate::model::openai_responses::ResponsesModel::new(route.clone(), config, driver)?
                .subscription(subscription, login),
        ),
        Wire::ChatCompletions => Arc::new(crate::model::chat_compat::ChatModel::new(
            route.clone(),
            config,
            driver,
        )),
    })
}

/// The stored ChatGPT sign-in, refused before any request when there is none.
fn chatgpt_login(
    route: &ProviderRoute,
    opts: &RouteOptions,
) -> Result<Arc<ChatgptAuth>, ModelError> {
    ChatgptAuth::load(OAuthSettings::from_env(&opts.env))
        .map(Arc::new)
        .map_err(|e| ModelError::Provider {
            model: route.text.clone(),
            class: ErrorClass::Auth,
            message: e.to_string(),
        })
}

/// What the errors of a call name as the credential and the account to check.
fn credential_hint(info: &ProviderInfo, opts: &RouteOptions) -> CredentialHint {
    match info.auth {
        ProviderAuth::ApiKey => CredentialHint {
            key_env: info.key_env.clone(),
            sources: opts.env.describe_sources(&info.key_env),
            account: info.account.clone(),
        },
        ProviderAuth::ChatgptLogin => CredentialHint {
            key_env: "the ChatGPT sign-in".into(),
            sources: "the ChatGPT sign-in (run `geode login openai` again)".into(),
            account: info.account.clone(),
        },
    }
}
