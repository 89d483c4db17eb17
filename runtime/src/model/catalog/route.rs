//! The route grammar: how a route string names a provider and an exact catalog model, an
//! embedded model with its parameters, or a judge, and why a route is refused. A route is a
//! string exactly once, where it enters (a flag, a config file); inward it is a `Route`, so no
//! caller re-splits `scripted:FILE` or `flaky-oracle:P` on its own.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::{Catalog, ModelInfo, ProviderKind};
use crate::model::ModelError;

/// A parsed model route. `Display` writes it back so that parsing the text gives the same route.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Route {
    /// The models that need no key and no network.
    Embedded(EmbeddedRoute),
    /// `cassette:DIR`: recorded provider exchanges replayed offline.
    Cassette(PathBuf),
    /// Boxed: the catalog entry it carries would make every route as large as itself.
    Provider(Box<ProviderRoute>),
    /// `judge:ROUTE`: a model for decisions only, never the root text model.
    Judge(Box<Route>),
}

/// An embedded model and its parameters.
#[derive(Debug, Clone, PartialEq)]
pub enum EmbeddedRoute {
    /// `nop`: answers at once, does nothing.
    Nop,
    /// `scripted:FILE`: plays the turns a script file lists.
    Scripted {
        /// The script file.
        script: PathBuf,
    },
    /// `oracle[:SOLVE_SH]`: runs the reference solution. Without a path only a benchmark
    /// trial can build it (the trial copies the task's solution into the sandbox).
    Oracle {
        /// The solution script to run; `None` when a benchmark trial supplies it.
        solve_sh: Option<PathBuf>,
    },
    /// `replay:DB[#SESSION]`: replays the assistant turns of a recorded session.
    Replay {
        /// The timeline database holding the session.
        db: PathBuf,
        /// The session to replay; `None` picks the latest one in the database.
        session: Option<String>,
    },
    /// `flaky-oracle:P[:tamper]`: the simulation model of `model::flaky`; only a benchmark
    /// trial can build it (it needs the task's solution and the trial's seed).
    FlakyOracle {
        /// The chance, from 0 to 1, that an attempt runs the reference solution.
        p: f64,
        /// Whether it also tries to write the reward file before each attempt.
        tamper: bool,
    },
}

/// A catalog provider and the exact model a route names.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderRoute {
    /// The route as written; the adapter's `Model::id`.
    pub text: String,
    /// The provider the route names.
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

impl Route {
    /// The model a judge route holds; any other route is its own model.
    pub fn without_judge(&self) -> &Route {
        match self {
            Route::Judge(inner) => inner,
            other => other,
        }
    }

    /// Whether this is a `judge:` route (decisions only).
    pub fn is_judge(&self) -> bool {
        matches!(self, Route::Judge(_))
    }

    /// The same route with the relative paths of embedded models (script, solution, replay
    /// database) taken relative to `base`, for routes written in a file that lives there.
    pub fn rebased(self, base: &Path) -> Route {
        let join = |p: PathBuf| if p.is_relative() { base.join(p) } else { p };
        match self {
            Route::Embedded(EmbeddedRoute::Scripted { script }) => {
                Route::Embedded(EmbeddedRoute::Scripted {
                    script: join(script),
                })
            }
            Route::Embedded(EmbeddedRoute::Oracle { solve_sh }) => {
                Route::Embedded(EmbeddedRoute::Oracle {
                    solve_sh: solve_sh.map(join),
                })
            }
            Route::Embedded(EmbeddedRoute::Replay { db, session }) => {
                Route::Embedded(EmbeddedRoute::Replay {
                    db: join(db),
                    session,
                })
            }
            Route::Judge(inner) => Route::Judge(Box::new(inner.rebased(base))),
            other @ (Route::Embedded(EmbeddedRoute::Nop | EmbeddedRoute::FlakyOracle { .. })
            | Route::Cassette(_)
            | Route::Provider(_)) => other,
        }
    }

    /// The provider the route talks to, for checkpoints: the provider's name, `cassette`, or
    /// `embedded` (a judge route names its model's).
    pub fn provider_label(&self) -> &str {
        match self.without_judge() {
            Route::Provider(p) => p.provider.as_str(),
            Route::Cassette(_) => "cassette",
            Route::Embedded(_) | Route::Judge(_) => "embedded",
        }
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Route::Embedded(e) => e.fmt(f),
            Route::Cassette(dir) => write!(f, "cassette:{}", dir.display()),
            Route::Provider(p) => f.write_str(&p.text),
            Route::Judge(inner) => write!(f, "judge:{inner}"),
        }
    }
}

impl fmt::Display for EmbeddedRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EmbeddedRoute::Nop => f.write_str("nop"),
            EmbeddedRoute::Scripted { script } => write!(f, "scripted:{}", script.display()),
            EmbeddedRoute::Oracle { solve_sh: None } => f.write_str("oracle"),
            EmbeddedRoute::Oracle { solve_sh: Some(p) } => write!(f, "oracle:{}", p.display()),
            EmbeddedRoute::Replay { db, session } => {
                write!(f, "replay:{}", db.display())?;
                match session {
                    Some(s) => write!(f, "#{s}"),
                    None => Ok(()),
                }
            }
            EmbeddedRoute::FlakyOracle { p, tamper } => {
                write!(f, "flaky-oracle:{p}")?;
                if *tamper {
                    f.write_str(":tamper")?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for Route {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_route(s)
    }
}

impl TryFrom<String> for Route {
    type Error = ModelError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        parse_route(&s)
    }
}

impl From<Route> for String {
    fn from(r: Route) -> String {
        r.to_string()
    }
}

const ROUTES_HINT: &str = "routes are anthropic:MODEL, openai:MODEL, openai-codex:MODEL, \
     glm:MODEL, openrouter:MODEL, compat:BASE_URL:MODEL, cassette:DIR, judge:ROUTE, nop, scripted:FILE, \
     oracle[:SOLVE_SH], replay:DB[#SESSION], flaky-oracle:P[:tamper]";

/// Parse a route against the built-in catalog.
pub fn parse_route(route: &str) -> Result<Route, ModelError> {
    parse_route_in(Catalog::builtin()?, route)
}

pub(crate) fn parse_route_in(catalog: &Catalog, route: &str) -> Result<Route, ModelError> {
    let (kind, rest) = match route.split_once(':') {
        Some((k, r)) => (k, Some(r)),
        None => (route, None),
    };
    let unknown = |hint: String| ModelError::UnknownRoute {
        route: route.to_string(),
        hint,
    };
    if let Some(embedded) = parse_embedded(route, kind, rest)? {
        return Ok(Route::Embedded(embedded));
    }
    let rest = rest.unwrap_or("");
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
    parse_provider(catalog, route, kind, rest).map(|p| Route::Provider(Box::new(p)))
}

/// The embedded part of the grammar: `None` when `kind` names no embedded model.
fn parse_embedded(
    route: &str,
    kind: &str,
    arg: Option<&str>,
) -> Result<Option<EmbeddedRoute>, ModelError> {
    let need = |what: &str| ModelError::UnknownRoute {
        route: route.to_string(),
        hint: format!("{kind} needs {what}, e.g. {kind}:{what}"),
    };
    let arg = arg.filter(|a| !a.is_empty());
    Ok(Some(match (kind, arg) {
        ("nop", None) => EmbeddedRoute::Nop,
        ("nop", Some(_)) => {
            return Err(ModelError::UnknownRoute {
                route: route.to_string(),
                hint: "nop takes no argument".into(),
            });
        }
        ("scripted", Some(path)) => EmbeddedRoute::Scripted {
            script: PathBuf::from(path),
        },
        ("scripted", None) => return Err(need("FILE")),
        ("oracle", arg) => EmbeddedRoute::Oracle {
            solve_sh: arg.map(PathBuf::from),
        },
        ("replay", Some(arg)) => {
            let (db, session) = match arg.split_once('#') {
                Some((db, s)) => (db, Some(s.to_string())),
                None => (arg, None),
            };
            EmbeddedRoute::Replay {
                db: PathBuf::from(db),
                session,
            }
        }
        ("replay", None) => return Err(need("TIMELINE_DB")),
        ("flaky-oracle", arg) => parse_flaky(route, arg.unwrap_or(""))?,
        _ => return Ok(None),
    }))
}

/// The argument of `flaky-oracle:P[:tamper]`.
fn parse_flaky(route: &str, arg: &str) -> Result<EmbeddedRoute, ModelError> {
    let (p, flag) = match arg.split_once(':') {
        Some((p, f)) => (p, Some(f)),
        None => (arg, None),
    };
    let bad = |why: &str| ModelError::UnknownRoute {
        route: route.to_string(),
        hint: format!("{why}; use flaky-oracle:P or flaky-oracle:P:tamper with P in [0, 1]"),
    };
    let p: f64 = p.parse().map_err(|_| bad("P is not a number"))?;
    if !(0.0..=1.0).contains(&p) {
        return Err(bad("P is outside [0, 1]"));
    }
    let tamper = match flag {
        None => false,
        Some("tamper") => true,
        Some(_) => return Err(bad("unknown flag")),
    };
    Ok(EmbeddedRoute::FlakyOracle { p, tamper })
}

/// A provider route, checked against the catalog.
fn parse_provider(
    catalog: &Catalog,
    route: &str,
    kind: &str,
    rest: &str,
) -> Result<ProviderRoute, ModelError> {
    let unknown = |hint: String| ModelError::UnknownRoute {
        route: route.to_string(),
        hint,
    };
    if let Some(reason) = catalog.refused_routes.get(kind) {
        return Err(ModelError::RefusedRoute {
            route: route.to_string(),
            reason: reason.clone(),
        });
    }
    let Some(provider) = ProviderKind::parse(kind) else {
        return Err(unknown(ROUTES_HINT.into()));
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
    Ok(ProviderRoute {
        text: route.to_string(),
        provider,
        model,
        base_url,
        info: info.filter(|m| m.provider == provider.model_owner()),
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn embedded(route: &str) -> EmbeddedRoute {
        match parse_route(route) {
            Ok(Route::Embedded(e)) => e,
            other => panic!("{route}: {other:?}"),
        }
    }

    #[test]
    fn embedded_routes_carry_their_parameters() {
        assert_eq!(embedded("nop"), EmbeddedRoute::Nop);
        assert_eq!(
            embedded("scripted:a/b:c.json"),
            EmbeddedRoute::Scripted {
                script: "a/b:c.json".into()
            }
        );
        assert_eq!(embedded("oracle"), EmbeddedRoute::Oracle { solve_sh: None });
        assert_eq!(
            embedded("oracle:/s/solve.sh"),
            EmbeddedRoute::Oracle {
                solve_sh: Some("/s/solve.sh".into())
            }
        );
        assert_eq!(
            embedded("replay:t.db#s1"),
            EmbeddedRoute::Replay {
                db: "t.db".into(),
                session: Some("s1".into())
            }
        );
        assert_eq!(
            embedded("replay:t.db"),
            EmbeddedRoute::Replay {
                db: "t.db".into(),
                session: None
            }
        );
        assert_eq!(
            embedded("flaky-oracle:0.5:tamper"),
            EmbeddedRoute::FlakyOracle {
                p: 0.5,
                tamper: true
            }
        );
        assert_eq!(
            embedded("flaky-oracle:1"),
            EmbeddedRoute::FlakyOracle {
                p: 1.0,
                tamper: false
            }
        );
    }

    #[test]
    fn display_round_trips() {
        for text in [
            "nop",
            "scripted:/x/s.json",
            "oracle",
            "oracle:solve.sh",
            "replay:/t/timeline.db",
            "replay:/t/timeline.db#abc",
            "flaky-oracle:0.5",
            "flaky-oracle:0:tamper",
            "flaky-oracle:0.25:tamper",
            "cassette:/c/dir",
            "anthropic:claude-sonnet-5",
            "compat:http://localhost:11434/v1:llama3:8b",
            "openrouter:anthropic/claude-sonnet-5",
            "judge:scripted:/x/j.json",
            "judge:anthropic:claude-haiku-4-5-20251001",
        ] {
            let route: Route = text.parse().unwrap();
            assert_eq!(route.to_string(), text);
            assert_eq!(parse_route(&route.to_string()).unwrap(), route);
            let through_serde: Route =
                serde_json::from_value(serde_json::to_value(&route).unwrap()).unwrap();
            assert_eq!(through_serde, route);
        }
        // Spellings of the same parameters come back in one canonical form.
        let r: Route = "flaky-oracle:0.50".parse().unwrap();
        assert_eq!(r.to_string(), "flaky-oracle:0.5");
    }

    #[test]
    fn bad_routes_fail_naming_the_route() {
        for (bad, says) in [
            ("scripted", "scripted needs FILE"),
            ("scripted:", "scripted needs FILE"),
            ("replay", "replay needs TIMELINE_DB"),
            ("nop:x", "nop takes no argument"),
            ("flaky-oracle", "P is not a number"),
            ("flaky-oracle:x", "P is not a number"),
            ("flaky-oracle:1.5", "outside [0, 1]"),
            ("flaky-oracle:NaN", "outside [0, 1]"),
            ("flaky-oracle:0.5:loud", "unknown flag"),
            ("cassette", "cassette needs a directory"),
            ("judge:judge:nop", "is not a route"),
            ("gpt4", "flaky-oracle:P[:tamper]"),
        ] {
            let err = bad.parse::<Route>().unwrap_err().to_string();
            assert!(err.contains(&format!("{bad:?}")), "{bad}: {err}");
            assert!(err.contains(says), "{bad}: {err}");
        }
        let err = serde_json::from_str::<Route>("\"flaky-oracle:2\"").unwrap_err();
        assert!(err.to_string().contains("flaky-oracle:2"), "{err}");
    }

    #[test]
    fn rebased_joins_only_relative_embedded_paths() {
        let base = Path::new("/cfg");
        let r = |s: &str| parse_route(s).unwrap().rebased(base).to_string();
        assert_eq!(r("scripted:s.json"), "scripted:/cfg/s.json");
        assert_eq!(r("judge:scripted:s.json"), "judge:scripted:/cfg/s.json");
        assert_eq!(r("replay:t.db#x"), "replay:/cfg/t.db#x");
        assert_eq!(r("oracle:solve.sh"), "oracle:/cfg/solve.sh");
        assert_eq!(r("scripted:/abs.json"), "scripted:/abs.json");
        assert_eq!(r("oracle"), "oracle");
        assert_eq!(r("cassette:c"), "cassette:c");
        assert_eq!(r("flaky-oracle:0.5"), "flaky-oracle:0.5");
    }

    #[test]
    fn judge_routes_hold_their_model() {
        let j = parse_route("judge:nop").unwrap();
        assert!(j.is_judge());
        assert_eq!(j.without_judge(), &Route::Embedded(EmbeddedRoute::Nop));
        assert_eq!(j.provider_label(), "embedded");
        let p = parse_route("judge:anthropic:claude-sonnet-5").unwrap();
        assert_eq!(p.provider_label(), "anthropic");
        assert_eq!(
            parse_route("cassette:d").unwrap().provider_label(),
            "cassette"
        );
    }
}
