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

pub(crate) const LINEAGE_SCHEMA: &str = "geode.search.lineage.v1";
/// The lineage's file name in the output folder.
pub const LINEAGE_FILE: &str = "lineage.jsonl";

/// What a lineage entry records.
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
    /// Wall clock of the campaign, in seconds.
    pub wall_seconds: f64,
    /// Model tokens the campaign used.
    pub tokens: u64,
    /// The campaign's model cost, in US dollars.
    pub cost_usd: f64,
}

/// One line of the lineage: a decided proposal, or the baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Always `geode.search.lineage.v1`.
    pub schema: String,
    /// `c0000` is the baseline; candidates count up from `c0001`.
    pub id: String,
    /// Baseline, compared candidate, or proposal refused without trials.
    pub kind: EntryKind,
    /// The id of the scaffold the mutation was applied to; `None` for the baseline.
    pub parent: Option<String>,
    /// The champion this entry was compared against (the baseline arm of its contract).
    pub against: Option<String>,
    /// The name of the policy that proposed it (`random`, `grid`, ...).
    pub policy: String,
    /// The one knob change; `None` for the baseline or a refused answer that named none.
    pub mutation: Option<Mutation>,
    /// What the change was expected to do; `None` where `mutation` is.
    pub hypothesis: Option<String>,
    /// Fingerprint: the scaffold's hash.
    pub scaffold_hash: String,
    /// The scaffold evaluated.
    pub scaffold: Scaffold,
    /// The frozen contract of the candidate's campaign.
    pub contract_hash: Option<geode_crucible::ContractHash>,
    /// The hash of the campaign's evidence, from the decision record.
    pub evidence_hash: Option<geode_crucible::EvidenceHash>,
    /// KEEP, REJECT, INVALID; `None` for the baseline and rejected proposals.
    pub verdict: Option<String>,
    /// The decision's reason codes.
    pub reasons: Vec<String>,
    /// Mean over tasks of the champion arm's per-task means.
    pub baseline_mean: Option<f64>,
    /// Mean over tasks of the candidate arm's per-task means.
    pub candidate_mean: Option<f64>,
    /// Point estimate: the mean task delta, candidate minus champion.
    pub estimate: Option<f64>,
    /// The one-sided lower bound the gate compared with zero.
    pub lower_bound: Option<f64>,
    /// Why a proposal was refused without trials.
    pub rejection: Option<String>,
    /// The champion after this entry.
    pub champion: String,
    /// What the campaign spent; zero for entries without one.
    pub spent: Spent,
    /// Closed failure codes of the campaign (see `proposer::failure_codes`), both arms.
    #[serde(default)]
    pub failures: std::collections::BTreeMap<String, u32>,
    pub(crate) recorded_at: String,
}

impl Entry {
    /// Whether the verdict was KEEP.
    pub fn is_keep(&self) -> bool {
        self.verdict.as_deref() == Some("KEEP")
    }
}

/// The lineage of one search, as read from its file and appended since.
pub struct Lineage {
    path: PathBuf,
    /// Every entry, in file order.
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

    /// The entry with this id.
    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.id == id)
    }

    /// The baseline's entry, once recorded.
    pub fn baseline(&self) -> Option<&Entry> {
        self.entries.iter().find(|e| e.kind == EntryKind::Baseline)
    }

    /// The current champion: the last entry's `champion`, the baseline if none.
    pub fn champion(&self) -> Option<&Entry> {
        let id = self.entries.last().map(|e| e.champion.clone())?;
        self.get(&id)
    }

    /// The candidates compared through the crucible, in order (not the baseline or rejections).
    pub fn evaluated(&self) -> impl DoubleEndedIterator<Item = &Entry> {
        self.entries
            .iter()
            .filter(|e| e.kind == EntryKind::Candidate)
    }

    /// What all entries' campaigns spent, summed.
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
