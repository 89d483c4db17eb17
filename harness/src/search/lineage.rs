//! The lineage: one JSON line per decided proposal (`geode.search.lineage.v1`), appended and
//! synced after the proposal's campaign is decided. It is the search's only state: a restarted
//! search replays it to find the champion, the population and the budgets spent, and skips
//! every candidate it holds. A candidate without a line was interrupted and is re-run.

use std::io::Write;
use std::path::{Path, PathBuf};

use geode_runtime::scaffold::Scaffold;
use serde::{Deserialize, Serialize};

use super::SearchError;
use super::space::Mutation;

pub const LINEAGE_SCHEMA: &str = "geode.search.lineage.v1";
pub const LINEAGE_FILE: &str = "lineage.jsonl";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// The original scaffold: recorded, never compared with itself.
    Baseline,
    /// A candidate compared with the champion through the crucible.
    Candidate,
    /// A proposal refused before any trial (duplicate fingerprint, outside the space).
    Rejected,
}

/// Spent by one campaign.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Spent {
    pub wall_seconds: f64,
    pub tokens: u64,
    pub cost_usd: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub schema: String,
    /// `c0000` is the baseline; candidates count up from `c0001`.
    pub id: String,
    pub kind: EntryKind,
    pub parent: Option<String>,
    /// The champion this entry was compared against (the baseline arm of its contract).
    pub against: Option<String>,
    pub policy: String,
    pub mutation: Option<Mutation>,
    pub hypothesis: Option<String>,
    /// Fingerprint: the scaffold's hash.
    pub scaffold_hash: String,
    pub scaffold: Scaffold,
    pub contract_hash: Option<String>,
    pub evidence_hash: Option<String>,
    /// KEEP, REJECT, INVALID; `None` for the baseline and rejected proposals.
    pub verdict: Option<String>,
    pub reasons: Vec<String>,
    pub baseline_mean: Option<f64>,
    pub candidate_mean: Option<f64>,
    pub estimate: Option<f64>,
    pub lower_bound: Option<f64>,
    /// Why a proposal was refused without trials.
    pub rejection: Option<String>,
    /// The champion after this entry.
    pub champion: String,
    pub spent: Spent,
    /// Closed failure codes of the campaign (see `proposer::failure_codes`), both arms.
    #[serde(default)]
    pub failures: std::collections::BTreeMap<String, u32>,
    pub recorded_at: String,
}

impl Entry {
    pub fn is_keep(&self) -> bool {
        self.verdict.as_deref() == Some("KEEP")
    }
}

pub struct Lineage {
    path: PathBuf,
    pub entries: Vec<Entry>,
}

impl Lineage {
    /// Opens `<out>/lineage.jsonl` (empty if missing). A torn last line (a kill mid-write) is
    /// dropped; a bad line anywhere else is an error naming the line.
    pub fn open(out: &Path) -> Result<Lineage, SearchError> {
        let path = out.join(LINEAGE_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(SearchError::file(&path, e)),
        };
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let mut entries = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            match serde_json::from_str::<Entry>(line) {
                Ok(e) if e.schema == LINEAGE_SCHEMA => entries.push(e),
                Ok(e) => {
                    return Err(SearchError::Field {
                        path: path.display().to_string(),
                        field: format!("line {}: schema", i + 1),
                        message: format!("{:?} is not {LINEAGE_SCHEMA}", e.schema),
                    });
                }
                Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => {
                    tracing::warn!("{}: dropping a torn last line", path.display());
                }
                Err(e) => {
                    return Err(SearchError::Format {
                        path: path.display().to_string(),
                        message: format!("line {}: {e}", i + 1),
                    });
                }
            }
        }
        let mut l = Lineage { path, entries };
        // Rewrite without the torn line so the next append starts on a fresh line.
        if !text.is_empty() && !text.ends_with('\n') {
            l.rewrite()?;
        }
        Ok(l)
    }

    fn rewrite(&mut self) -> Result<(), SearchError> {
        let mut text = String::new();
        for e in &self.entries {
            let line = serde_json::to_string(e).map_err(|e| SearchError::file(&self.path, e))?;
            text.push_str(&line);
            text.push('\n');
        }
        crate::crucible::write_atomic(&self.path, &text)?;
        Ok(())
    }

    /// Appends one entry and syncs it to disk before returning.
    pub fn append(&mut self, e: Entry) -> Result<(), SearchError> {
        let err = |x: std::io::Error| SearchError::file(&self.path, x);
        let mut line = serde_json::to_string(&e).map_err(|x| SearchError::file(&self.path, x))?;
        line.push('\n');
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(err)?;
        f.write_all(line.as_bytes()).map_err(err)?;
        f.sync_all().map_err(err)?;
        self.entries.push(e);
        Ok(())
    }

    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.id == id)
    }

    pub fn baseline(&self) -> Option<&Entry> {
        self.entries.iter().find(|e| e.kind == EntryKind::Baseline)
    }

    /// The current champion: the last entry's `champion`, the baseline if none.
    pub fn champion(&self) -> Option<&Entry> {
        let id = self.entries.last().map(|e| e.champion.clone())?;
        self.get(&id)
    }

    pub fn evaluated(&self) -> impl DoubleEndedIterator<Item = &Entry> {
        self.entries
            .iter()
            .filter(|e| e.kind == EntryKind::Candidate)
    }

    pub fn spent(&self) -> Spent {
        let mut s = Spent::default();
        for e in &self.entries {
            s.wall_seconds += e.spent.wall_seconds;
            s.tokens += e.spent.tokens;
            s.cost_usd += e.spent.cost_usd;
        }
        s
    }

    /// Trailing run of entries matching `pred` (consecutive INVALIDs, rejections).
    pub fn trailing(&self, pred: impl Fn(&Entry) -> bool) -> u32 {
        self.entries.iter().rev().take_while(|e| pred(e)).count() as u32
    }
}

/// The lineage as a table, one row per entry.
pub fn table(entries: &[Entry]) -> String {
    let mut out = format!(
        "{:<6} {:<9} {:<6} {:<34} {:<8} {:>8} {:>8} {:>8} {:<6} {}\n",
        "id", "kind", "parent", "mutation", "verdict", "base", "cand", "est", "champ", "scaffold"
    );
    let num = |v: Option<f64>| v.map(|x| format!("{x:.3}")).unwrap_or_else(|| "-".into());
    for e in entries {
        let mutation = e
            .mutation
            .as_ref()
            .map(|m| m.to_string())
            .unwrap_or_else(|| "-".into());
        let verdict = e
            .verdict
            .clone()
            .or_else(|| e.rejection.as_ref().map(|_| "DUP/BAD".to_string()))
            .unwrap_or_else(|| "-".into());
        out.push_str(&format!(
            "{:<6} {:<9} {:<6} {:<34} {:<8} {:>8} {:>8} {:>8} {:<6} {}\n",
            e.id,
            format!("{:?}", e.kind).to_lowercase(),
            e.parent.as_deref().unwrap_or("-"),
            mutation.chars().take(34).collect::<String>(),
            verdict,
            num(e.baseline_mean),
            num(e.candidate_mean),
            num(e.estimate),
            e.champion,
            &e.scaffold_hash[..12.min(e.scaffold_hash.len())],
        ));
    }
    out
}
