//! Grader specs, the `--grader SPEC` strings of `geode grade RUN`:
//!
//! - `tests`: the test-script verifier (reward file + parsed checks). The default.
//! - `rubric:FILE`: a TOML rubric (see `rubric`); its `[judge]` section builds its judge.
//! - `judge:ROUTE[:VOTES]`: an LLM judge on the default template, `VOTES` odd (default 1).
//!   `ROUTE` may itself contain colons (`scripted:/x/judge.json`, `anthropic:claude-haiku-4-5`);
//!   a trailing all-digit segment is the vote count.
//! - `judge:ROUTE[:VOTES]@TEMPLATE_FILE`: the same with a prompt template from a file.

use std::path::PathBuf;
use std::str::FromStr;

use geode_runtime::model::http::RouteOptions;

use crate::grade::Grader;
use crate::judge::{JudgeError, JudgeGrader, Votes};
use crate::rubric::{RubricError, RubricGrader};
use crate::tests_grader::TestScriptGrader;

/// A parsed grader spec (see the module); `Display` writes it back as a spec string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GraderSpec {
    /// `tests`: the test-script verifier.
    Tests,
    /// `rubric:FILE`.
    Rubric {
        /// The rubric file.
        path: PathBuf,
    },
    /// `judge:ROUTE[:VOTES][@TEMPLATE_FILE]`.
    Judge {
        /// The judge's route.
        route: String,
        /// Votes per question, odd (checked when parsed).
        votes: u32,
        /// A prompt template file; `None` uses the default template.
        template: Option<PathBuf>,
    },
}

/// Why a grader spec could not be parsed, hashed or built.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// A spec string that is none of the known forms.
    #[error(
        "grader spec {spec:?}: {why} (expected tests, rubric:FILE or judge:ROUTE[:VOTES][@TEMPLATE])"
    )]
    Syntax {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        why: String,
    },
    /// The rubric could not be loaded.
    #[error(transparent)]
    Rubric(#[from] RubricError),
    /// The judge could not be built.
    #[error(transparent)]
    Judge(#[from] JudgeError),
    /// The judge's template file could not be read.
    #[error("{file}: cannot read the judge template: {why}")]
    Template {
        /// The template file's path.
        file: String,
        /// The read error.
        why: String,
    },
    /// A file the grader hash covers (a rubric, a template) could not be read.
    #[error("{file}: cannot read the grader's file: {why}")]
    Read {
        /// The file's path.
        file: String,
        /// The read error.
        why: String,
    },
}

impl FromStr for GraderSpec {
    type Err = SpecError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| SpecError::Syntax {
            spec: spec.to_string(),
            why: why.to_string(),
        };
        if spec == "tests" {
            return Ok(GraderSpec::Tests);
        }
        if let Some(path) = spec.strip_prefix("rubric:") {
            if path.is_empty() {
                return Err(bad("rubric: needs a file"));
            }
            return Ok(GraderSpec::Rubric { path: path.into() });
        }
        let Some(rest) = spec.strip_prefix("judge:") else {
            return Err(bad("unknown grader"));
        };
        let (rest, template) = match rest.rsplit_once('@') {
            Some((r, t)) if !t.is_empty() => (r, Some(PathBuf::from(t))),
            _ => (rest, None),
        };
        let (route, votes) = match rest.rsplit_once(':') {
            Some((r, n)) if !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) => (
                r,
                n.parse::<u32>()
                    .map_err(|_| bad("the vote count is too large"))?,
            ),
            _ => (rest, 1),
        };
        if route.is_empty() {
            return Err(bad("judge: needs a route"));
        }
        Votes::new(votes).map_err(|e| bad(&e.to_string()))?;
        Ok(GraderSpec::Judge {
            route: route.to_string(),
            votes,
            template,
        })
    }
}

impl std::fmt::Display for GraderSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GraderSpec::Tests => f.write_str("tests"),
            GraderSpec::Rubric { path } => write!(f, "rubric:{}", path.display()),
            GraderSpec::Judge {
                route,
                votes,
                template,
            } => {
                write!(f, "judge:{route}:{votes}")?;
                match template {
                    Some(t) => write!(f, "@{}", t.display()),
                    None => Ok(()),
                }
            }
        }
    }
}

/// What a grader is, hashed: its kind and the content that decides its grades (the rubric
/// file's bytes; the judge's route, votes and template), never the path it was named by.
pub fn grader_hash(spec: &GraderSpec) -> Result<String, SpecError> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let mut part = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    let read = |path: &PathBuf| {
        std::fs::read(path).map_err(|e| SpecError::Read {
            file: path.display().to_string(),
            why: e.to_string(),
        })
    };
    match spec {
        GraderSpec::Tests => part(b"geode.grader.tests.v1"),
        GraderSpec::Rubric { path } => {
            part(b"geode.grader.rubric.v1");
            part(&read(path)?);
        }
        GraderSpec::Judge {
            route,
            votes,
            template,
        } => {
            part(b"geode.grader.judge.v1");
            part(route.as_bytes());
            part(&votes.to_le_bytes());
            if let Some(t) = template {
                part(&read(t)?);
            }
        }
    }
    Ok(hex::encode(h.finalize()))
}

/// Build the grader a spec names. `opts` resolves judge routes (keys, base URLs, cassettes).
pub fn build_grader(spec: &GraderSpec, opts: &RouteOptions) -> Result<Box<dyn Grader>, SpecError> {
    Ok(match spec {
        GraderSpec::Tests => Box::new(TestScriptGrader),
        GraderSpec::Rubric { path } => Box::new(RubricGrader::load(path, opts)?),
        GraderSpec::Judge {
            route,
            votes,
            template,
        } => {
            let mut judge = JudgeGrader::from_route(route, Votes::new(*votes)?, opts)?;
            if let Some(t) = template {
                let file = t.display().to_string();
                let text = std::fs::read_to_string(t).map_err(|e| SpecError::Template {
                    file: file.clone(),
                    why: e.to_string(),
                })?;
                judge = judge.with_template(text, &file)?;
            }
            Box::new(judge)
        }
    })
}
