//! The search configuration (`geode.search.v1`, TOML). Relative paths are resolved against the
//! folder of the configuration file.
//!
//! ```toml
//! schema = "geode.search.v1"
//! space = "space.toml"
//! baseline = "base.toml"        # optional; the default scaffold otherwise
//! policy = "grid"               # random | grid | evolutionary | model
//! seed = 7
//! model = "flaky-oracle:0.5"    # the model of both arms (frozen)
//! proposer = "scripted:proposals.json"   # policy = "model" only
//! train = "train"
//! trials = 3
//! concurrency = 2
//! out = "search-out"
//! [test]
//! sealed = "sealed/holdout.seal-state.json"   # or: pack = "test"
//! key = "seal.key"
//! commitments = "datasets/commitments"       # default; where the openings ledger is kept
//! trials = 5
//! [rule]                        # the decision rule of every train contract
//! min_tasks = 10                # (confidence: family-wise over the candidate budget)
//! [test_rule]                   # the promotion contract's rule (defaults to [rule])
//! min_tasks = 8
//! [budgets]
//! candidates = 4
//! max_consecutive_invalid = 3
//! ```

use std::path::{Path, PathBuf};

use geode_runtime::model::catalog::Route;
use geode_runtime::scaffold::Scaffold;
use serde::{Deserialize, Serialize};

use super::SearchError;
use super::mutate::PolicyKind;

/// Schema tag of a search configuration file.
pub const CONFIG_SCHEMA: &str = "geode.search.v1";

/// The test pack promotion runs on: a sealed holdout (`sealed` and `key`) or a plain `pack`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestPack {
    /// The sealed pack's state file (`<name>.seal-state.json`); the blob sits beside it.
    #[serde(default)]
    pub sealed: Option<PathBuf>,
    /// The sealing key file (64 hex characters, readable by its owner only).
    #[serde(default)]
    pub key: Option<PathBuf>,
    /// The folder of the sealed pack's public commitment, where its openings are recorded
    /// (default `datasets/commitments` beside this file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commitments: Option<PathBuf>,
    /// A plain (unsealed) test pack; promotion then runs it as is.
    #[serde(default)]
    pub pack: Option<PathBuf>,
    /// Trials per task on the test pack (must match the seal's `-k`).
    pub trials: u32,
}

/// The crucible decision rule and vetoes of the contracts the search freezes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Rule {
    /// One-sided confidence; in `rule`, family-wise over all train KEEPs (split per candidate).
    pub confidence: f64,
    /// Bootstrap and permutation resamples per decision.
    pub resamples: u32,
    /// Smallest improvement (mean task delta, reward units) worth a KEEP.
    pub materiality: f64,
    /// Fewest tasks with a valid comparison.
    pub min_tasks: u32,
    /// Fewest task families among those tasks.
    pub min_families: u32,
    /// Lowest acceptable candidate mean, in [0, 1].
    pub candidate_floor: f64,
    /// Excess rate of integrity signals in the candidate's trials that is not tolerated.
    pub safety_tolerance: f64,
    /// Confidence of the safety veto's bound (`evident_harm`): not divided among candidates
    /// like `confidence`, since a stricter veto bound only vetoes less.
    pub safety_confidence: f64,
    /// Largest fraction of trials that may be infrastructure-invalid before INVALID.
    pub infra_allowance: f64,
    /// Per-campaign budgets written into each contract.
    pub campaign_wall_seconds: f64,
    pub(crate) campaign_tokens: u64,
    pub(crate) campaign_cost_usd: f64,
    pub(crate) campaign_model_calls: u64,
}

impl Default for Rule {
    fn default() -> Self {
        Rule {
            confidence: 0.95,
            resamples: 2000,
            materiality: 0.02,
            min_tasks: 10,
            min_families: 2,
            candidate_floor: 0.0,
            safety_tolerance: 0.05,
            safety_confidence: 0.95,
            infra_allowance: 0.02,
            campaign_wall_seconds: 7200.0,
            campaign_tokens: 1_000_000_000,
            campaign_cost_usd: 100.0,
            campaign_model_calls: 1_000_000,
        }
    }
}

impl Rule {
    /// The rule of one train candidate's contract when `self.confidence` is the search's
    /// family-wise confidence over a budget of `candidates` tests.
    ///
    /// Bonferroni alpha spending: each candidate is judged at 1 - (1 - confidence) /
    /// candidates, so the chance that any of the search's train KEEPs is false is at most
    /// 1 - confidence, whatever the order of the candidates and however their tests depend on
    /// one another (a search compares each candidate with the champion of the moment, on the
    /// same tasks). Holm's step-down would spend the same alpha less conservatively, but it
    /// needs every p-value before any decision, and a search decides as it goes.
    pub fn per_candidate(&self, candidates: u32) -> Rule {
        Rule {
            confidence: 1.0 - (1.0 - self.confidence) / f64::from(candidates.max(1)),
            ..self.clone()
        }
    }
}

/// When the search stops (any one is enough).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SearchBudgets {
    /// Evaluated candidates (duplicates rejected without trials do not count).
    pub candidates: u32,
    /// Wall clock of all campaigns, summed over restarts.
    pub wall_seconds: f64,
    /// Tokens of all campaigns, summed over restarts.
    pub tokens: u64,
    /// Cost of all campaigns in US dollars, summed over restarts.
    pub cost_usd: f64,
    /// Stop after this many INVALID verdicts in a row.
    pub max_consecutive_invalid: u32,
    /// Stop after this many proposals in a row rejected without trials (duplicates, invalid).
    pub max_consecutive_rejected: u32,
}

impl Default for SearchBudgets {
    fn default() -> Self {
        SearchBudgets {
            candidates: 10,
            wall_seconds: 24.0 * 3600.0,
            tokens: u64::MAX / 4,
            cost_usd: 1000.0,
            max_consecutive_invalid: 3,
            max_consecutive_rejected: 5,
        }
    }
}

/// A search's configuration file (TOML, `geode.search.v1`); relative paths are the file's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchConfig {
    /// Always [`CONFIG_SCHEMA`].
    pub schema: String,
    /// The search space file.
    pub space: PathBuf,
    /// The baseline scaffold file; `None` starts from the default scaffold.
    #[serde(default)]
    pub baseline: Option<PathBuf>,
    /// How candidates are proposed.
    pub policy: PolicyKind,
    /// The seed every proposal's and contract's randomness derives from.
    #[serde(default)]
    pub seed: u64,
    /// Parsed while the file is read, so a bad route fails naming itself before any trial.
    pub model: Route,
    /// The route that proposes mutations; required by the `model` policy.
    #[serde(default)]
    pub proposer: Option<Route>,
    #[serde(default = "two")]
    pub(crate) tournament_size: usize,
    /// The train pack, where candidates are compared with the champion.
    pub train: PathBuf,
    /// Trials per task on the train pack.
    pub trials: u32,
    /// How many trials run at once (default 1).
    #[serde(default = "one")]
    pub concurrency: usize,
    /// The output folder (`search.json`, `lineage.jsonl`, `candidates/`, `promotion/`).
    pub out: PathBuf,
    /// The test pack of the promotion.
    pub test: TestPack,
    /// The decision rule of the train contracts (its confidence is the family-wise one).
    #[serde(default)]
    pub rule: Rule,
    /// The promotion's decision rule; `None` uses `rule`.
    #[serde(default)]
    pub test_rule: Option<Rule>,
    /// When the search stops.
    #[serde(default)]
    pub budgets: SearchBudgets,
    /// Run campaigns whose rule cannot KEEP on their design (refused by default, before the
    /// first trial, naming what would make them feasible).
    #[serde(default)]
    pub allow_infeasible: bool,
}

fn one() -> usize {
    1
}
fn two() -> usize {
    2
}

impl SearchConfig {
    /// Reads, validates and resolves paths against the configuration's folder.
    pub fn load(path: &Path) -> Result<SearchConfig, SearchError> {
        let text = std::fs::read_to_string(path).map_err(|e| SearchError::file(path, e))?;
        let mut c: SearchConfig = toml::from_str(&text).map_err(|e| SearchError::Format {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let field = |f: &str, m: &str| SearchError::Field {
            path: path.display().to_string(),
            field: f.into(),
            message: m.into(),
        };
        if c.schema != CONFIG_SCHEMA {
            return Err(field("schema", &format!("expected {CONFIG_SCHEMA:?}")));
        }
        if c.trials == 0 || c.test.trials == 0 {
            return Err(field("trials", "must be at least 1"));
        }
        if c.policy == PolicyKind::Model && c.proposer.is_none() {
            return Err(field("proposer", "policy \"model\" needs a proposer route"));
        }
        match (&c.test.sealed, &c.test.key, &c.test.pack) {
            (Some(_), Some(_), None) | (None, None, Some(_)) => {}
            _ => {
                return Err(field(
                    "test",
                    "give either sealed + key (a sealed holdout) or pack (a plain one)",
                ));
            }
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        let abs = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        };
        abs(&mut c.space);
        abs(&mut c.train);
        abs(&mut c.out);
        for p in [
            &mut c.baseline,
            &mut c.test.sealed,
            &mut c.test.key,
            &mut c.test.commitments,
            &mut c.test.pack,
        ]
        .into_iter()
        .flatten()
        {
            abs(p);
        }
        if c.test.sealed.is_some() && c.test.commitments.is_none() {
            c.test.commitments = Some(dir.join("datasets/commitments"));
        }
        c.proposer = c.proposer.map(|route| route.rebased(dir));
        Ok(c)
    }

    /// The baseline scaffold: the `baseline` file, or the default scaffold without one.
    pub fn baseline_scaffold(&self) -> Result<Scaffold, SearchError> {
        load_scaffold(self.baseline.as_deref())
    }
}

/// A scaffold file (TOML, or JSON if it parses as JSON); `None` is the default scaffold.
pub fn load_scaffold(path: Option<&Path>) -> Result<Scaffold, SearchError> {
    let Some(p) = path else {
        return Ok(Scaffold::default());
    };
    let text = std::fs::read_to_string(p).map_err(|e| SearchError::file(p, e))?;
    Scaffold::parse(&text).map_err(|message| SearchError::Format {
        path: p.display().to_string(),
        message,
    })
}
