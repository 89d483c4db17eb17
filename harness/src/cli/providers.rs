//! What a person reads when their session has no model that can answer: the one-screen set-up
//! hint of a first run (no `model` configured anywhere), and the sentence a session answers with
//! when its route needs a key that is not there. Both are made from the model catalog (each
//! provider's key and base-URL variables, its default model), so they name exactly what the
//! adapters read.

use geode_runtime::model::catalog::{Catalog, ProviderAuth, ProviderKind, Route};
use geode_runtime::model::credentials::Env;

/// The sentence every prompt of a session with no configured model is answered with.
pub const NO_MODEL: &str = "No model is configured, so nothing can answer: switch with /model \
     ROUTE (for example /model anthropic:claude-opus-5-5), or set `model` in the configuration \
     (`geode config explain` shows where); Ctrl-D leaves.";

/// The set-up screen of a first run: how to reach each provider, where keys and the choice of
/// model are kept, and which keys this machine already has.
pub fn setup_hint(env: &Env) -> String {
    let mut rows = Vec::new();
    let mut ready = Vec::new();
    if let Ok(catalog) = Catalog::builtin() {
        for (kind, info) in &catalog.providers {
            let example = match (kind, info.default_model.as_deref()) {
                (ProviderKind::Compat, _) => "compat:http://127.0.0.1:8000/v1:MODEL".to_string(),
                (_, Some(model)) => format!("{}:{model}", kind.as_str()),
                (_, None) => format!("{}:MODEL", kind.as_str()),
            };
            let access = match info.auth {
                ProviderAuth::ChatgptLogin => "geode login openai".to_string(),
                ProviderAuth::ApiKey if info.key_optional => {
                    format!("{} if the server needs one", info.key_env)
                }
                ProviderAuth::ApiKey => format!("export {}=...", info.key_env),
            };
            rows.push((label(*kind), access, example.clone()));
            let has_key = info.auth == ProviderAuth::ApiKey
                && !info.key_optional
                && env.var(&info.key_env).is_some();
            if has_key {
                ready.push(format!(
                    "{} is set here: `/model {example}` uses it now.",
                    info.key_env
                ));
            }
        }
    }
    let home = env.geode_home();
    let mut text = String::from(
        "No model is configured yet. GEODE talks to a provider's API with your own key:\n\n",
    );
    let width = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
    for (name, access, example) in &rows {
        text.push_str(&format!(
            "  {name:<13} {access:<width$}  then --model {example}\n"
        ));
    }
    text.push_str(&format!(
        "\nKeys may also be lines of {} (KEY=value). Keep the choice in {}:\n\
         \x20   model = \"anthropic:claude-opus-5-5\"\n\
         A gateway or proxy: ANTHROPIC_BASE_URL, OPENAI_BASE_URL, ZAI_BASE_URL, \
         OPENROUTER_BASE_URL.\n\
         No key at all: the embedded models (`nop`, `scripted:FILE`); see the README.\n\
         Here: /model ROUTE switches this session, Ctrl-D leaves.\n",
        home.join(".env").display(),
        home.join("config.toml").display(),
    ));
    for line in ready {
        text.push_str(&line);
        text.push('\n');
    }
    text
}

/// The route a headless command runs with: there is no person to show a set-up screen to, so no
/// configured model is an error saying where one is given.
pub fn required_route(configured: Option<&Route>) -> anyhow::Result<Route> {
    let Some(route) = configured else {
        anyhow::bail!(
            "no model is configured: give --model ROUTE (or GEODE_MODEL), or set `model` in \
             the configuration; `geode` alone shows how to set up a provider"
        );
    };
    Ok(route.clone())
}

/// The sentence a session answers with when its route cannot be used as configured (a key or
/// a sign-in is missing): the adapter's own reason, and how to go on.
pub fn unusable(route: &str, reason: &str) -> String {
    format!(
        "{route} cannot answer: {reason}. Set it and start again, or switch with /model ROUTE; \
         Ctrl-D leaves."
    )
}

fn label(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::Anthropic => "Anthropic",
        ProviderKind::Openai => "OpenAI",
        ProviderKind::OpenaiCodex => "ChatGPT plan",
        ProviderKind::Glm => "Z.ai GLM",
        ProviderKind::Openrouter => "OpenRouter",
        ProviderKind::Compat => "Local server",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn the_hint_names_every_provider_s_key_and_the_keys_already_set() {
        let env = Env::from_map(
            BTreeMap::from([
                ("GEODE_HOME".to_string(), "/h".to_string()),
                ("OPENAI_API_KEY".to_string(), "sk-x".to_string()),
            ]),
            None,
        );
        let hint = setup_hint(&env);
        for needle in [
            "export ANTHROPIC_API_KEY=...",
            "export OPENAI_API_KEY=...",
            "export ZAI_API_KEY=...",
            "export OPENROUTER_API_KEY=...",
            "geode login openai",
            "compat:http://127.0.0.1:8000/v1:MODEL",
            "/h/.env",
            "/h/config.toml",
            "OPENAI_API_KEY is set here: `/model openai:gpt-6-sol`",
        ] {
            assert!(hint.contains(needle), "{needle} missing from:\n{hint}");
        }
        assert!(!hint.contains("ANTHROPIC_API_KEY is set"), "{hint}");
        assert!(hint.lines().count() <= 24, "one screen:\n{hint}");
    }
}
