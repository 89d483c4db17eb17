//! Crucible decisions and scaffold-search lineages, read from the folders that made them:
//! a campaign's `decision.json` (`geode.decision.v1`) beside its `contract.json` and
//! `trials.jsonl` under `<jobs>/crucible/<hash>/`, and a search's `lineage.jsonl`,
//! `promotion.json` and per-candidate decision folders.
//!
//! Records are shown key by key, as JSON values, never through this build's types: a record
//! written by a newer crucible (a richer rule, more reasons, a next step) shows all it holds
//! without a change here, and an older one shows what it has. Only the few keys a list needs
//! (verdict, stage, reasons, contract hash) are picked out, each optional.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::ViewError;
use super::catalog::{Catalog, subfolders};
use super::files;

/// The most of a record file read.
const RECORD_CAP: u64 = 64 << 20;

/// A record file's JSON (`None` when absent), or why it could not be read.
fn read_value(path: &Path) -> Result<Option<Value>, String> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Ok(None);
    };
    files::read_json(dir, &[name], RECORD_CAP).map_err(|e| e.to_string())
}

/// One JSON value per line; a line that does not parse is named in `problems`.
fn read_lines(path: &Path, problems: &mut Vec<String>) -> Vec<Value> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            problems.push(format!("{}: {e}", path.display()));
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(v) => out.push(v),
            Err(e) => problems.push(format!("{}: line {}: {e}", path.display(), i + 1)),
        }
    }
    out
}

/// A decision in a list.
#[derive(Debug, Clone, Serialize)]
pub struct DecisionItem {
    /// The folder, relative to the jobs folder or named by its search: the decision's name.
    pub id: String,
    pub(crate) verdict: Option<String>,
    pub(crate) stage: Option<String>,
    pub(crate) reasons: Vec<String>,
    pub(crate) contract_hash: Option<String>,
    /// The arms' runs when the campaign left a run store (`<id>/baseline`, `<id>/candidate`).
    pub arms: Option<[String; 2]>,
    #[serde(skip)]
    dir: PathBuf,
}

/// A search output folder in a list.
#[derive(Debug, Clone, Serialize)]
pub struct SearchItem {
    pub(crate) id: String,
    pub(crate) path: String,
    pub(crate) entries: usize,
    pub(crate) champion: Option<String>,
    pub(crate) promotion: Option<String>,
    #[serde(skip)]
    dir: PathBuf,
}

/// Where the viewer looks for decisions and searches besides the jobs folder.
#[derive(Debug, Clone, Default)]
pub struct Roots {
    /// Search output folders named on the command line (`--search DIR`).
    pub searches: Vec<PathBuf>,
}

fn decision_item(
    id: String,
    dir: PathBuf,
    c: &Catalog,
    problems: &mut Vec<String>,
) -> Option<DecisionItem> {
    let record = match read_value(&dir.join("decision.json")) {
        Ok(Some(v)) => v,
        Ok(None) => return None,
        Err(e) => {
            problems.push(e);
            return None;
        }
    };
    let text = |k: &str| record.get(k).and_then(Value::as_str).map(str::to_owned);
    let arms = [format!("{id}/baseline"), format!("{id}/candidate")];
    let arms = arms.iter().all(|k| c.run(k).is_ok()).then_some(arms);
    Some(DecisionItem {
        verdict: text("verdict"),
        stage: text("stage"),
        reasons: record
            .get("reasons")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|r| r.as_str().map_or_else(|| r.to_string(), str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
        contract_hash: text("contract_hash"),
        arms,
        id,
        dir,
    })
}

/// The search output folders: the jobs folder's subfolders holding a lineage, then the named
/// ones.
pub fn searches(c: &Catalog, roots: &Roots, problems: &mut Vec<String>) -> Vec<SearchItem> {
    let mut dirs: Vec<(String, PathBuf)> = subfolders(c.jobs())
        .into_iter()
        .map(|n| (n.clone(), c.jobs().join(n)))
        .filter(|(_, d)| d.join("lineage.jsonl").is_file())
        .collect();
    for (i, d) in roots.searches.iter().enumerate() {
        dirs.push((format!("search-{}", i + 1), d.clone()));
    }
    dirs.into_iter()
        .map(|(id, dir)| {
            let entries = read_lines(&dir.join("lineage.jsonl"), problems);
            let promotion = read_value(&dir.join("promotion.json"))
                .unwrap_or_else(|e| {
                    problems.push(e);
                    None
                })
                .map(|p| {
                    p.get("verdict")
                        .and_then(Value::as_str)
                        .map_or_else(|| "not compared".to_owned(), str::to_owned)
                });
            SearchItem {
                path: dir.display().to_string(),
                entries: entries.len(),
                champion: entries
                    .last()
                    .and_then(|e| e.get("champion"))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                promotion,
                id,
                dir,
            }
        })
        .collect()
}

/// Every decision: the jobs folder's campaigns (and folders one level inside them, where
/// replications go), then each search's candidates and promotion.
pub fn decisions(c: &Catalog, roots: &Roots, problems: &mut Vec<String>) -> Vec<DecisionItem> {
    let mut found = Vec::new();
    let crucible = c.jobs().join("crucible");
    for h in subfolders(&crucible) {
        let dir = crucible.join(&h);
        let id = format!("crucible/{h}");
        found.extend(decision_item(id.clone(), dir.clone(), c, problems));
        for sub in subfolders(&dir) {
            if sub == "baseline" || sub == "candidate" {
                continue;
            }
            found.extend(decision_item(
                format!("{id}/{sub}"),
                dir.join(&sub),
                c,
                problems,
            ));
        }
    }
    for s in searches(c, roots, problems) {
        for cand in subfolders(&s.dir.join("candidates")) {
            found.extend(decision_item(
                format!("{}/candidates/{cand}", s.id),
                s.dir.join("candidates").join(&cand),
                c,
                problems,
            ));
        }
        for rel in ["promotion", "promotion/confirmation"] {
            found.extend(decision_item(
                format!("{}/{rel}", s.id),
                s.dir.join(rel),
                c,
                problems,
            ));
        }
    }
    found
}

/// A decision's page: the record, its contract and how many trials its journal holds.
#[derive(Debug, Serialize)]
pub struct DecisionDetail {
    #[serde(flatten)]
    pub(crate) item: DecisionItem,
    pub(crate) path: String,
    pub(crate) decision: Value,
    pub(crate) contract: Option<Value>,
    pub(crate) journal_trials: usize,
    pub(crate) problems: Vec<String>,
}

pub(crate) fn decision(c: &Catalog, roots: &Roots, id: &str) -> Result<DecisionDetail, ViewError> {
    let mut problems = Vec::new();
    let item = decisions(c, roots, &mut problems)
        .into_iter()
        .find(|d| d.id == id)
        .ok_or_else(|| ViewError::NotFound {
            what: "decision",
            name: id.to_owned(),
            jobs: c.jobs().to_path_buf(),
        })?;
    let decision = read_value(&item.dir.join("decision.json"))
        .map_err(|message| ViewError::BadRequest {
            field: "decision",
            message,
        })?
        .unwrap_or(Value::Null);
    let contract = read_value(&item.dir.join("contract.json")).unwrap_or_else(|e| {
        problems.push(e);
        None
    });
    let journal_trials = read_lines(&item.dir.join("trials.jsonl"), &mut problems).len();
    Ok(DecisionDetail {
        path: item.dir.display().to_string(),
        item,
        decision,
        contract,
        journal_trials,
        problems,
    })
}

/// A search's page: its resolved configuration, every lineage entry, the promotion summary.
#[derive(Debug, Serialize)]
pub struct SearchDetail {
    #[serde(flatten)]
    pub(crate) item: SearchItem,
    pub(crate) config: Option<Value>,
    pub(crate) lineage: Vec<Value>,
    pub(crate) promotion: Option<Value>,
    /// Decision ids of this search, for links from its entries.
    pub decisions: Vec<String>,
    pub(crate) problems: Vec<String>,
}

pub(crate) fn search(c: &Catalog, roots: &Roots, id: &str) -> Result<SearchDetail, ViewError> {
    let mut problems = Vec::new();
    let item = searches(c, roots, &mut problems)
        .into_iter()
        .find(|s| s.id == id)
        .ok_or_else(|| ViewError::NotFound {
            what: "search",
            name: id.to_owned(),
            jobs: c.jobs().to_path_buf(),
        })?;
    let mut problems = Vec::new();
    let lineage = read_lines(&item.dir.join("lineage.jsonl"), &mut problems);
    let config = read_value(&item.dir.join("search.json")).unwrap_or_else(|e| {
        problems.push(e);
        None
    });
    let promotion = read_value(&item.dir.join("promotion.json")).unwrap_or_else(|e| {
        problems.push(e);
        None
    });
    let prefix = format!("{id}/");
    let decisions = decisions(c, roots, &mut problems)
        .into_iter()
        .filter(|d| d.id.starts_with(&prefix))
        .map(|d| d.id)
        .collect();
    Ok(SearchDetail {
        item,
        config,
        lineage,
        promotion,
        decisions,
        problems,
    })
}
