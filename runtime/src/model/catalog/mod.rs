//! The model catalog (data in `catalog.toml`), the route grammar, and the judge-only role.
//!
//! Routes name a provider and an exact model id: `anthropic:claude-sonnet-5`, `openai:gpt-6-sol`,
//! `openai-codex:gpt-6-sol` (the ChatGPT subscription), `glm:glm-5.3`,
//! `openrouter:openrouter/auto`, `compat:http://127.0.0.1:8000/v1:my-model`, plus the embedded
//! models (`nop`, `scripted:..`, `oracle[:..]`, `replay:..`, `flaky-oracle:..`), `cassette:DIR` and
//! `judge:ROUTE`. Ids of catalog providers must be listed exactly: nothing is upgraded or
//! matched by prefix, so a run always names the model that answered.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::Deserialize;

use super::ModelError;
use super::effort::Effort;
use crate::conversation::Usage;

const CATALOG_TOML: &str = include_str!("catalog.toml");
/// The catalog schema `catalog.toml` must declare.
pub const SCHEMA: &str = "geode.catalog.v1";

mod judge;
mod route;
pub use judge::{JudgeDecision, JudgeModel};
pub use route::{
    EmbeddedRoute, ProviderRoute, Route, ensure_root_route, judge_as_root, parse_route,
};

/// The wire API a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Wire {
    /// Anthropic Messages (`/v1/messages`).
    AnthropicMessages,
    /// OpenAI Responses (`/responses`).
    OpenaiResponses,
    /// OpenAI-compatible Chat Completions (`/chat/completions`).
    ChatCompletions,
}

/// A provider the catalog knows; its snake_case name is the route prefix and the catalog key.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum ProviderKind {
    /// Anthropic's API.
    Anthropic,
    /// OpenAI's API, billed per token.
    Openai,
    /// Z.ai (GLM models).
    Glm,
    /// OpenRouter, which routes to many models.
    Openrouter,
    /// Any OpenAI-compatible server at a URL the route gives (often local).
    Compat,
    /// The ChatGPT (Codex) subscription: OpenAI models over the sign-in of `geode login openai`.
    #[serde(rename = "openai-codex")]
    #[strum(serialize = "openai-codex")]
    OpenaiCodex,
}

impl ProviderKind {
    /// The route prefix and the catalog's provider key.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The provider whose catalog models this route serves: a subscription route serves the
    /// models of the API it fronts.
    pub fn model_owner(self) -> ProviderKind {
        match self {
            ProviderKind::OpenaiCodex => ProviderKind::Openai,
            other => other,
        }
    }

    fn parse(s: &str) -> Option<ProviderKind> {
        s.parse().ok()
    }
}

/// How a model receives its effort setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThinkingStyle {
    /// Anthropic adaptive thinking with `output_config.effort`.
    Adaptive,
    /// Anthropic `thinking: {type: enabled, budget_tokens}`.
    Budget,
    /// A reasoning effort field (OpenAI `reasoning.effort`, OpenRouter, `reasoning_effort`).
    Effort,
    /// Thinking on or off (Z.ai GLM `thinking.type`).
    Toggle,
}

/// US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prices {
    /// Per million plain (uncached) prompt tokens.
    pub input: f64,
    pub(crate) cached_input: f64,
    /// Per million output tokens, reasoning included.
    pub output: f64,
    /// Anthropic prompt-cache writes; `input` when absent.
    #[serde(default)]
    pub cache_write: Option<f64>,
}

impl Prices {
    /// The cost of one call. `usage.input_tokens` counts every prompt token, of which
    /// `cached_input_tokens` were cache reads and `cache_write_tokens` cache writes; reasoning
    /// tokens are billed as output.
    pub fn cost(&self, usage: &Usage, cache_write_tokens: u64) -> f64 {
        let plain = usage
            .input_tokens
            .saturating_sub(usage.cached_input_tokens)
            .saturating_sub(cache_write_tokens);
        let write = self.cache_write.unwrap_or(self.input);
        let dollars_per_million = plain as f64 * self.input
            + usage.cached_input_tokens as f64 * self.cached_input
            + cache_write_tokens as f64 * write
            + (usage.output_tokens + usage.reasoning_tokens) as f64 * self.output;
        dollars_per_million / 1_000_000.0
    }
}

/// One model of the catalog: its exact id, limits, effort settings and prices.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelInfo {
    /// The exact model id, as sent to the provider.
    pub id: String,
    /// The provider whose API serves the model.
    pub provider: ProviderKind,
    /// Route prefixes the model may be used with (some of them may be refused routes).
    pub routes: Vec<String>,
    pub(crate) context_window: u64,
    pub(crate) max_output: u64,
    /// How the model receives its effort setting.
    pub thinking: ThinkingStyle,
    pub(crate) efforts: Vec<Effort>,
    #[serde(default)]
    pub(crate) default_effort: Option<Effort>,
    pub(crate) binds_thinking: bool,
    /// What a call costs.
    pub prices: Prices,
}

impl ModelInfo {
    /// The effort to send: the configured one (or the model's default) clamped to the model.
    pub fn effort(&self, configured: Option<Effort>) -> Option<Effort> {
        configured
            .or(self.default_effort)
            .map(|e| e.clamp_to(&self.efforts))
    }
}

/// What a provider's requests carry as their credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderAuth {
    /// An API key from `key_env`; calls are billed per token at the catalog's prices.
    #[default]
    ApiKey,
    /// The ChatGPT sign-in (`geode login openai`); calls are covered by the subscription, so
    /// no price applies.
    ChatgptLogin,
}

/// How to reach one provider: wire API, base URL, credential and defaults.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderInfo {
    /// The wire API the provider speaks.
    pub wire: Wire,
    #[serde(default)]
    pub(crate) base_url: Option<String>,
    #[serde(default)]
    pub(crate) base_url_env: Option<String>,
    /// What the provider's requests carry as their credential.
    #[serde(default)]
    pub auth: ProviderAuth,
    /// The key's variable; empty for providers that take no key (`auth = "chatgpt_login"`).
    #[serde(default)]
    pub key_env: String,
    /// Local servers often need no key.
    #[serde(default)]
    pub key_optional: bool,
    /// What to check when the provider says the account cannot pay.
    pub account: String,
    /// The model shown as the example route for this provider in the first-run set-up hint.
    #[serde(default)]
    pub default_model: Option<String>,
    #[serde(default)]
    pub(crate) roles: BTreeMap<String, String>,
    /// Any model id is passed through (routers and local servers).
    #[serde(default)]
    pub open_ids: bool,
    /// Effort levels for ids the catalog does not list.
    #[serde(default)]
    pub efforts: Vec<Effort>,
}

/// The model catalog: providers, models and the routes that are refused.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    /// Must be `SCHEMA`.
    pub schema: String,
    /// Models tried when the chosen one fails for good. Empty: GEODE never switches models.
    pub fallback_chain: Vec<String>,
    /// Every provider the catalog describes.
    pub providers: BTreeMap<ProviderKind, ProviderInfo>,
    /// Route prefixes that are refused, with the reason shown to the user.
    pub refused_routes: BTreeMap<String, String>,
    /// Every model, in catalog order.
    pub models: Vec<ModelInfo>,
}

/// Why a catalog failed to parse or check.
#[derive(Debug, thiserror::Error)]
#[error("model catalog: {0}")]
pub struct CatalogError(String);

impl Catalog {
    /// Parse and check a catalog: known schema, unique ids, providers present, effort lists
    /// non-empty and holding the default.
    pub fn parse(text: &str) -> Result<Catalog, CatalogError> {
        let c: Catalog = toml::from_str(text).map_err(|e| CatalogError(e.to_string()))?;
        if c.schema != SCHEMA {
            return Err(CatalogError(format!(
                "schema {:?} is not {SCHEMA}",
                c.schema
            )));
        }
        for (kind, p) in &c.providers {
            if p.auth == ProviderAuth::ApiKey && p.key_env.is_empty() {
                return Err(CatalogError(format!(
                    "provider {}: key_env is required with API keys",
                    kind.as_str()
                )));
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for m in &c.models {
            let bad = |what: &str| CatalogError(format!("model {}: {what}", m.id));
            if !seen.insert(m.id.as_str()) {
                return Err(bad("listed twice"));
            }
            if !c.providers.contains_key(&m.provider) {
                return Err(bad("its provider has no [providers] table"));
            }
            if m.efforts.is_empty() || m.routes.is_empty() {
                return Err(bad("efforts and routes must not be empty"));
            }
            if m.default_effort.is_some_and(|d| !m.efforts.contains(&d)) {
                return Err(bad("default_effort is not one of its efforts"));
            }
            let p = &m.prices;
            if [
                p.input,
                p.cached_input,
                p.output,
                p.cache_write.unwrap_or(0.0),
            ]
            .iter()
            .any(|x| !x.is_finite() || *x < 0.0)
            {
                return Err(bad("prices must be finite and not negative"));
            }
        }
        Ok(c)
    }

    /// The catalog built into the runtime, parsed once.
    pub fn builtin() -> Result<&'static Catalog, ModelError> {
        static BUILTIN: OnceLock<Result<Catalog, String>> = OnceLock::new();
        BUILTIN
            .get_or_init(|| Catalog::parse(CATALOG_TOML).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| ModelError::Fatal {
                model: "catalog".into(),
                message: e.clone(),
            })
    }

    /// The exact id, or nothing: ids are never matched by prefix or upgraded.
    pub fn model(&self, id: &str) -> Option<&ModelInfo> {
        self.models.iter().find(|m| m.id == id)
    }

    /// The provider's table, if the catalog has one.
    pub fn provider(&self, kind: ProviderKind) -> Option<&ProviderInfo> {
        self.providers.get(&kind)
    }

    /// The ids a route prefix may be used with, in catalog order.
    pub fn ids_on_route(&self, route_kind: &str) -> Vec<&str> {
        self.models
            .iter()
            .filter(|m| m.routes.iter().any(|r| r == route_kind))
            .map(|m| m.id.as_str())
            .collect()
    }

    /// The ids of the models a provider serves, in catalog order.
    pub fn ids_of(&self, kind: ProviderKind) -> Vec<&str> {
        self.models
            .iter()
            .filter(|m| m.provider == kind)
            .map(|m| m.id.as_str())
            .collect()
    }
}

/// A session's cost as a person reads it: dollars at the catalog's prices, or `subscription`
/// on a route whose calls a subscription covers, where no price applies and none is made up.
pub fn cost_text(route: &str, cost_usd: f64) -> String {
    let covered = Catalog::builtin()
        .ok()
        .zip(parse_route(route).ok())
        .and_then(|(catalog, route)| match route {
            Route::Provider(p) => catalog.provider(p.provider),
            _ => None,
        })
        .is_some_and(|info| info.auth == ProviderAuth::ChatgptLogin);
    if covered {
        "subscription".into()
    } else {
        format!("${cost_usd:.4}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subscription_route_costs_subscription_not_a_price() {
        assert_eq!(cost_text("openai-codex:gpt-6-sol", 0.0), "subscription");
        assert_eq!(cost_text("openai:gpt-6-sol", 0.01234), "$0.0123");
        assert_eq!(cost_text("scripted:s.toml", 0.0), "$0.0000");
        assert_eq!(cost_text("not a route", 1.0), "$1.0000");
    }

    const MISSION_IDS: [&str; 34] = [
        "claude-fable-5-1",
        "claude-opus-5-5",
        "claude-opus-5",
        "claude-sonnet-5",
        "claude-haiku-4-5-20251001",
        "claude-fable-5",
        "claude-opus-4-8",
        "claude-opus-4-7",
        "claude-opus-4-6",
        "claude-opus-4-5",
        "claude-sonnet-4-6",
        "claude-sonnet-4-5-20250929",
        "gpt-6-astra",
        "gpt-6-sol",
        "gpt-6-luna",
        "gpt-5.6-sol",
        "gpt-5.6-terra",
        "gpt-5.6-luna",
        "gpt-5.5",
        "gpt-5.3-codex",
        "gpt-5.4",
        "gpt-5.4-mini",
        "gpt-5.4-nano",
        "glm-5.3",
        "glm-5.3-flash",
        "glm-5.3-flashx",
        "glm-5.2",
        "glm-5.1",
        "glm-5",
        "glm-4.7",
        "glm-4.7-flashx",
        "glm-4.7-flash",
        "openrouter/free",
        "openrouter/auto",
    ];

    #[test]
    fn every_mission_id_is_in_the_catalog() {
        let c = Catalog::builtin().unwrap();
        for id in MISSION_IDS {
            assert!(c.model(id).is_some(), "{id} missing from catalog.toml");
        }
        assert_eq!(c.models.len(), MISSION_IDS.len());
        assert_eq!(c.ids_of(ProviderKind::Anthropic).len(), 12);
        assert!(c.fallback_chain.is_empty());
        let a = c.provider(ProviderKind::Anthropic).unwrap();
        assert_eq!(a.default_model.as_deref(), Some("claude-opus-5-5"));
        assert_eq!(a.roles["helper"], "claude-sonnet-5");
        assert_eq!(a.roles["cheap"], "claude-haiku-4-5-20251001");
        let o = c.provider(ProviderKind::Openai).unwrap();
        assert_eq!(o.default_model.as_deref(), Some("gpt-6-sol"));
        let g = c.provider(ProviderKind::Glm).unwrap();
        assert_eq!(g.base_url.as_deref(), Some("https://api.z.ai/api/paas/v4"));
        assert_eq!(g.default_model.as_deref(), Some("glm-5.3"));
    }

    #[test]
    fn codex_route_models_match_the_mission() {
        let c = Catalog::builtin().unwrap();
        let both = ["gpt-6-astra", "gpt-6-sol", "gpt-6-luna", "gpt-5.6-sol"];
        for id in both.iter().chain(&["gpt-5.6-terra", "gpt-5.6-luna"]) {
            assert!(c.model(id).unwrap().routes.contains(&"openai-codex".into()));
        }
        for id in [
            "gpt-5.5",
            "gpt-5.3-codex",
            "gpt-5.4",
            "gpt-5.4-mini",
            "gpt-5.4-nano",
        ] {
            assert_eq!(c.model(id).unwrap().routes, ["openai"]);
        }
    }

    #[test]
    fn the_codex_route_serves_its_listed_models_on_the_sign_in() {
        let c = Catalog::builtin().unwrap();
        let p = c.provider(ProviderKind::OpenaiCodex).unwrap();
        assert_eq!(
            (p.auth, p.wire),
            (ProviderAuth::ChatgptLogin, Wire::OpenaiResponses)
        );
        assert!(p.key_env.is_empty() && !c.refused_routes.contains_key("openai-codex"));
        let Route::Provider(r) = parse_route("openai-codex:gpt-5.6-terra").unwrap() else {
            panic!()
        };
        assert_eq!(r.provider, ProviderKind::OpenaiCodex);
        assert_eq!(r.info.unwrap().provider, ProviderKind::Openai);
        let err = parse_route("openai-codex:gpt-5.4").unwrap_err().to_string();
        assert!(err.contains("serves: gpt-6-astra, gpt-6-sol"), "{err}");
        // A provider that takes keys must name its variable.
        let bad = CATALOG_TOML.replace("key_env = \"ZAI_API_KEY\"", "");
        assert!(
            Catalog::parse(&bad)
                .unwrap_err()
                .to_string()
                .contains("key_env")
        );
    }

    #[test]
    fn prices_cover_cache_reads_writes_and_reasoning() {
        let p = Prices {
            input: 3.0,
            cached_input: 0.3,
            output: 15.0,
            cache_write: Some(3.75),
        };
        let u = Usage {
            input_tokens: 1_000_000,
            cached_input_tokens: 200_000,
            output_tokens: 100_000,
            reasoning_tokens: 100_000,
            cost_usd: 0.0,
        };
        // 700k plain * 3 + 200k * 0.3 + 100k writes * 3.75 + 200k * 15, per million.
        let want = 2.1 + 0.06 + 0.375 + 3.0;
        assert!((p.cost(&u, 100_000) - want).abs() < 1e-9);
    }

    #[test]
    fn routes_parse_exact_ids_only() {
        let r = parse_route("anthropic:claude-sonnet-5").unwrap();
        let Route::Provider(p) = r else { panic!() };
        assert_eq!(
            (p.provider, p.model.as_str()),
            (ProviderKind::Anthropic, "claude-sonnet-5")
        );
        let err = parse_route("anthropic:claude-sonnet-5-latest")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("exact ids only") && err.contains("claude-opus-5-5"),
            "{err}"
        );
        assert!(parse_route("anthropic:claude-opus-4").is_err());
        assert!(parse_route("openai:claude-sonnet-5").is_err());
        assert!(parse_route("glm:glm-5.3").is_ok());
        let Route::Provider(p) = parse_route("openrouter:anthropic/claude-sonnet-5").unwrap()
        else {
            panic!()
        };
        assert_eq!(p.model, "anthropic/claude-sonnet-5");
        assert!(p.info.is_none());
    }

    #[test]
    fn compat_routes_split_after_the_path() {
        let Route::Provider(p) = parse_route("compat:http://127.0.0.1:8000/v1:my-model").unwrap()
        else {
            panic!()
        };
        assert_eq!(p.base_url.as_deref(), Some("http://127.0.0.1:8000/v1"));
        assert_eq!(p.model, "my-model");
        let Route::Provider(p) = parse_route("compat:http://localhost:11434/v1:llama3:8b").unwrap()
        else {
            panic!()
        };
        assert_eq!(p.model, "llama3:8b");
        assert!(parse_route("compat:http://127.0.0.1:8000/v1").is_err());
        assert!(parse_route("compat:127.0.0.1:8000/v1:m").is_err());
    }

    #[test]
    fn refused_routes_say_why() {
        for (route, word) in [
            ("anthropic-oauth:claude-sonnet-5", "OAuth"),
            ("glm-coding:glm-5.3", "coding plan"),
        ] {
            let err = parse_route(route).unwrap_err();
            assert!(matches!(err, ModelError::RefusedRoute { .. }), "{err}");
            assert!(err.to_string().contains(word), "{err}");
        }
    }

    #[test]
    fn judge_routes_are_not_root_routes() {
        assert!(matches!(
            parse_route("judge:anthropic:claude-haiku-4-5-20251001").unwrap(),
            Route::Judge(_)
        ));
        assert!(ensure_root_route("judge:nop").is_err());
        assert!(ensure_root_route("anthropic:claude-sonnet-5").is_ok());
    }

    #[test]
    fn effort_defaults_and_clamps_per_model() {
        let c = Catalog::builtin().unwrap();
        let opus46 = c.model("claude-opus-4-6").unwrap();
        assert_eq!(opus46.effort(Some(Effort::Xhigh)), Some(Effort::High));
        assert_eq!(opus46.effort(None), Some(Effort::High));
        let haiku = c.model("claude-haiku-4-5-20251001").unwrap();
        assert_eq!(haiku.effort(None), Some(Effort::None));
        let codex = c.model("gpt-5.3-codex").unwrap();
        assert_eq!(codex.effort(Some(Effort::None)), Some(Effort::Low));
        assert_eq!(codex.effort(Some(Effort::Max)), Some(Effort::Xhigh));
    }
}
