//! `geode crucible audit`: the commitments, openings ledgers, seal states and decision
//! records read side by side, each disagreement a sign that a record was removed, rewritten
//! or reset.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use geode_crucible::record::HoldoutReceipt;
use serde::Serialize;

use super::{Entry, Event, OpeningsLedger, committed_names};
use crate::crucible::CrucibleRunError;

/// What `geode crucible audit` found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Audit {
    /// Sealed packs with a commitment.
    pub packs: usize,
    /// Opening lines found across the openings ledgers.
    pub openings: usize,
    /// Decision records read from the decision folders.
    pub decisions: usize,
    /// Disagreements: each one means a record was removed, rewritten or reset.
    pub problems: Vec<String>,
    /// Facts worth knowing that prove nothing wrong (a test decision on an unsealed pack).
    pub notes: Vec<String>,
}

/// What the ledgers say, across packs: opening entry hash -> (pack, contract), and the
/// decision recorded under each opening.
#[derive(Default)]
struct Known {
    opened: BTreeMap<String, (String, String)>,
    decided: BTreeMap<String, (String, Option<String>)>,
}

/// Verify that commitments, openings ledgers, seal states (`<sealed>/<name>.seal-state.json`,
/// where present) and the decision records below `decisions` agree.
pub fn audit(
    commitments: &Path,
    sealed: &Path,
    decisions: &[PathBuf],
) -> Result<Audit, CrucibleRunError> {
    let mut out = Audit::default();
    let mut known = Known::default();
    for name in committed_names(commitments)? {
        audit_pack(&name, commitments, sealed, &mut known, &mut out)?;
    }
    // Holdout (its content, and the sealed file apart: a ledger that lost the sealing knows
    // only the file) -> the distinct openings (ledger heads) decided under, with where.
    let mut receipts: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for dir in decisions {
        for entry in walkdir::WalkDir::new(dir).sort_by_file_name() {
            let entry = entry.map_err(|e| CrucibleRunError::files(dir, e))?;
            if entry.file_name() == "decision.json"
                && let Some(receipt) = audit_decision(entry.path(), &known, &mut out)?
            {
                for holdout in [receipt.content, receipt.sealed_pack_hash] {
                    receipts
                        .entry(holdout)
                        .or_default()
                        .entry(receipt.head.clone())
                        .or_default()
                        .push(entry.path().display().to_string());
                }
            }
        }
    }
    // One content opened under two ledger heads is two openings, whatever the ledgers and
    // seal states say now (both may have been deleted or reset between them).
    let mut named = std::collections::BTreeSet::new();
    for (holdout, heads) in receipts.iter().filter(|(_, h)| h.len() > 1) {
        let places: Vec<String> = heads.values().map(|p| p.join(" and ")).collect();
        // The same decisions found twice (by content and by file) are one problem.
        if named.insert(places.clone()) {
            out.problems.push(format!(
                "holdout {} was opened {} times: decisions {}; a holdout opens once",
                &holdout[..16.min(holdout.len())],
                heads.len(),
                places.join("; ")
            ));
        }
    }
    Ok(out)
}

/// One pack: its chain, its openings, and its seal state against its ledger.
fn audit_pack(
    name: &str,
    commitments: &Path,
    sealed: &Path,
    known: &mut Known,
    out: &mut Audit,
) -> Result<(), CrucibleRunError> {
    out.packs += 1;
    let ledger = OpeningsLedger::beside(commitments, name)?;
    let reading = ledger.read()?;
    for b in &reading.breaks {
        out.problems
            .push(format!("{name}: {}: {b}", ledger.path().display()));
    }
    let openings: Vec<&Entry> = reading.openings().collect();
    out.openings += openings.len();
    if openings.len() > 1 {
        let seqs: Vec<String> = openings.iter().map(|e| e.seq.to_string()).collect();
        out.problems.push(format!(
            "{name}: opened {} times (entries {}); a sealed pack opens once",
            openings.len(),
            seqs.join(", ")
        ));
    }
    for e in &reading.entries {
        match &e.event {
            Event::Opening { contract_hash, .. } => {
                known
                    .opened
                    .insert(e.hash.clone(), (name.to_string(), contract_hash.clone()));
            }
            Event::Decision {
                opening,
                verdict,
                evidence_hash,
                ..
            } => {
                if !openings.iter().any(|o| o.hash == *opening) {
                    out.problems.push(format!(
                        "{name}: entry {} records a decision under an opening the ledger does \
                         not hold",
                        e.seq
                    ));
                }
                known
                    .decided
                    .insert(opening.clone(), (verdict.clone(), evidence_hash.clone()));
            }
        }
    }
    let state_path = sealed.join(format!("{name}.seal-state.json"));
    if !state_path.is_file() {
        out.notes.push(format!(
            "{name}: no seal state at {} to compare with",
            state_path.display()
        ));
        return Ok(());
    }
    let state = crate::crucible::sealing::load_state(&state_path)?;
    if state.commitment != ledger.commitment.commitment {
        out.problems.push(format!(
            "{name}: the seal state's commitment {} is not the published {}",
            state.commitment, ledger.commitment.commitment
        ));
    }
    let first = openings.first();
    match (&state.opening, first) {
        (None, Some(first)) => out.problems.push(format!(
            "{name}: the seal state says unopened, but ledger entry {} records an opening at \
             {}: the state was reset",
            first.seq, first.at
        )),
        (Some(a), None) => out.problems.push(format!(
            "{name}: the seal state records an opening at {} that the ledger does not: its \
             entry was removed",
            a.opened_at
        )),
        (Some(a), Some(first)) if first.opened_for() != Some(&a.contract_hash.to_string()) => {
            out.problems.push(format!(
                "{name}: the seal state's opening (contract {}) is not the ledger's first",
                a.contract_hash
            ))
        }
        _ => {}
    }
    let ledger_verdict = first
        .and_then(|o| known.decided.get(&o.hash))
        .map(|(v, _)| v.clone());
    let state_verdict = state.decision.as_ref().map(|d| d.verdict.to_string());
    if state_verdict.is_some() && ledger_verdict != state_verdict {
        out.problems.push(format!(
            "{name}: the seal state's decision {} is not the ledger's {}",
            state_verdict.as_deref().unwrap_or("-"),
            ledger_verdict.as_deref().unwrap_or("(none)")
        ));
    }
    Ok(())
}

/// One decision record against the ledgers: a test-stage decision must name an opening some
/// ledger holds, for its contract, with the verdict and evidence the ledger recorded. Returns
/// its holdout receipt, for the check across decisions.
fn audit_decision(
    path: &Path,
    known: &Known,
    out: &mut Audit,
) -> Result<Option<HoldoutReceipt>, CrucibleRunError> {
    use geode_crucible::{DecisionRecord, Stage};
    let text = std::fs::read_to_string(path).map_err(|e| CrucibleRunError::files(path, e))?;
    let record = DecisionRecord::from_json(&text).map_err(|e| CrucibleRunError::files(path, e))?;
    out.decisions += 1;
    if record.stage != Stage::Test {
        return Ok(None);
    }
    let shown = path.display();
    let Some(h) = &record.ledger_entry else {
        out.notes.push(format!(
            "{shown}: a test-stage decision that names no openings-ledger entry (an unsealed \
             test pack, or a record older than the ledger)"
        ));
        return Ok(record.holdout);
    };
    let problem = match known.opened.get(h) {
        None => Some(format!(
            "{shown}: names ledger entry {} that no ledger holds (removed or rewritten)",
            &h[..16.min(h.len())]
        )),
        Some((name, contract)) if *contract != record.contract_hash.to_string() => Some(format!(
            "{shown}: decided contract {} under {name}'s opening for contract {contract}",
            record.contract_hash
        )),
        Some((name, _)) => {
            let evidence = record.evidence_hash.as_ref().map(|e| e.to_string());
            match known.decided.get(h) {
                Some((v, e)) if *v == record.verdict.to_string() && *e == evidence => None,
                Some((v, _)) => Some(format!(
                    "{shown}: verdict {} with its evidence, but {name}'s ledger records {v} for \
                     this opening",
                    record.verdict
                )),
                None => Some(format!(
                    "{shown}: {name}'s ledger records no decision for this opening"
                )),
            }
        }
    };
    out.problems.extend(problem);
    Ok(record.holdout)
}
