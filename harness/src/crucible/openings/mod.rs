//! The openings ledger: every opening of a sealed pack, and the decision made under it, appended
//! to a hash-chained log kept beside the pack's public commitment.
//!
//! The seal state burns an opening, but it is a writable file: set `opening` and `decision` to
//! null and it says "never opened". The ledger is the record that does not forget. It lives in
//! the commitments folder (`<commitments>/<name>.openings.jsonl`, meant for version control
//! beside `<name>.json`), so a reset shows as a removed line in the history; and each line
//! carries the hash of the one before it, so a line removed or rewritten in the middle breaks
//! the chain where it happened.
//!
//! Format (`geode.openings.v1`, one JSON object per line):
//! ```json
//! {"schema": "geode.openings.v1", "seq": 0, "prev": "<anchor>", "at": "2026-…",
//!  "event": {"kind": "opening", "commitment": "…", "contract_hash": "…",
//!            "candidate_scaffold_hash": "…"},
//!  "hash": "…"}
//! {"schema": "geode.openings.v1", "seq": 1, "prev": "<hash of line 0>", "at": "…",
//!  "event": {"kind": "decision", "opening": "<hash of line 0>", "contract_hash": "…",
//!            "verdict": "KEEP", "evidence_hash": "…"},
//!  "hash": "…"}
//! ```
//! `hash` is the SHA-256 of the line's canonical JSON without `hash`; the first line's `prev`
//! is the anchor, the SHA-256 of the published commitment's canonical JSON (so the chain is
//! bound to one commitment, and a rewritten commitment breaks it too).
//!
//! Rules: an opening is appended before anything is decrypted (after the seal state is burned,
//! before the plaintext exists); a pack whose ledger holds an opening is never opened again,
//! whatever its seal state says; a pack whose ledger is broken is not opened at all.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::crucible::CrucibleRunError;
use crate::crucible::sealing::PublishedCommitment;

mod audit;

pub use audit::{Audit, audit};

pub(crate) const SCHEMA: &str = "geode.openings.v1";

/// What a ledger line records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// A sealed pack opened for a test-stage contract, recorded before anything is decrypted.
    Opening {
        /// The sealed pack's commitment (from its public commitment file).
        commitment: String,
        /// The contract the pack was opened for.
        contract_hash: String,
        /// The hash of that contract's candidate scaffold.
        candidate_scaffold_hash: String,
    },
    /// The decision of the campaign run under an opening.
    Decision {
        /// The hash of the opening line this decision was made under.
        opening: String,
        /// The contract decided.
        contract_hash: String,
        /// The verdict, as its record spells it.
        verdict: String,
        /// The hash of the evidence behind the verdict, when there is one.
        evidence_hash: Option<String>,
    },
}

/// One line of the ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Always `geode.openings.v1`.
    pub schema: String,
    /// The 0-based position of the line; each line's is one more than the line before.
    pub seq: u64,
    pub(crate) prev: String,
    /// When the line was written (RFC 3339, UTC).
    pub at: String,
    /// What the line records.
    pub event: Event,
    /// SHA-256 (hex) of the line's canonical JSON without this field.
    pub hash: String,
}

/// The content a line's hash covers: the line without its hash.
#[derive(Serialize)]
struct Unhashed<'a> {
    schema: &'a str,
    seq: u64,
    prev: &'a str,
    at: &'a str,
    event: &'a Event,
}

impl Entry {
    /// The contract of an opening line; `None` for a decision.
    pub fn opened_for(&self) -> Option<&str> {
        match &self.event {
            Event::Opening { contract_hash, .. } => Some(contract_hash),
            Event::Decision { .. } => None,
        }
    }

    fn content_hash(&self) -> Result<String, CrucibleRunError> {
        let body = Unhashed {
            schema: &self.schema,
            seq: self.seq,
            prev: &self.prev,
            at: &self.at,
            event: &self.event,
        };
        geode_crucible::canonical_sha256(&body)
            .map(hex::encode)
            .map_err(|e| CrucibleRunError::Invalid(format!("ledger entry {}: {e}", self.seq)))
    }
}

/// A place where the ledger and what it should be disagree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Break {
    /// The 1-based line of the file, 0 for the file as a whole.
    pub line: usize,
    pub(crate) problem: String,
}

impl std::fmt::Display for Break {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.problem)
    }
}

/// The ledger of one sealed pack.
#[derive(Debug, Clone)]
pub struct OpeningsLedger {
    path: PathBuf,
    anchor: String,
    /// The sealed pack's public commitment; its canonical hash anchors the chain.
    pub commitment: PublishedCommitment,
}

/// What `read` found: the parsed lines and where the chain breaks.
pub struct Reading {
    /// The lines that parsed, in file order.
    pub entries: Vec<Entry>,
    /// Where the chain breaks; empty for an intact ledger.
    pub breaks: Vec<Break>,
}

impl Reading {
    /// The opening lines, in order.
    pub fn openings(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| e.opened_for().is_some())
    }
}

impl OpeningsLedger {
    /// The ledger beside `<commitments>/<name>.json`, which must exist: a sealed pack opens
    /// only where its openings are recorded.
    pub fn beside(commitments: &Path, name: &str) -> Result<OpeningsLedger, CrucibleRunError> {
        let published_path = commitments.join(format!("{name}.json"));
        let text = std::fs::read_to_string(&published_path).map_err(|e| {
            CrucibleRunError::files(
                &published_path,
                format!(
                    "{e}: the public commitment of sealed pack {name:?} is needed to record its \
                     opening (pass --commitments, or keep it at datasets/commitments)"
                ),
            )
        })?;
        let commitment: PublishedCommitment =
            serde_json::from_str(&text).map_err(|e| CrucibleRunError::files(&published_path, e))?;
        let anchor = geode_crucible::canonical_sha256(&commitment)
            .map(hex::encode)
            .map_err(|e| CrucibleRunError::files(&published_path, e))?;
        Ok(OpeningsLedger {
            path: commitments.join(format!("{name}.openings.jsonl")),
            anchor,
            commitment,
        })
    }

    /// The ledger file, `<commitments>/<name>.openings.jsonl`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every line, checked: schema, sequence, link to the line before, own hash. A missing
    /// file is an empty ledger.
    pub fn read(&self) -> Result<Reading, CrucibleRunError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(CrucibleRunError::files(&self.path, e)),
        };
        let mut reading = Reading {
            entries: Vec::new(),
            breaks: Vec::new(),
        };
        let mut prev = self.anchor.clone();
        for (i, line) in text.lines().enumerate() {
            let line_no = i + 1;
            let mut broke = |problem: String| {
                reading.breaks.push(Break {
                    line: line_no,
                    problem,
                })
            };
            let entry: Entry = match serde_json::from_str(line) {
                Ok(e) => e,
                Err(e) => {
                    broke(format!("not a ledger entry: {e}"));
                    continue;
                }
            };
            let expected_seq = reading.entries.len() as u64;
            if entry.schema != SCHEMA {
                broke(format!("schema {:?}, expected {SCHEMA:?}", entry.schema));
            }
            if entry.seq != expected_seq {
                broke(format!(
                    "seq {} where {expected_seq} was due: an entry was removed or inserted",
                    entry.seq
                ));
            }
            if entry.prev != prev {
                broke(if expected_seq == 0 {
                    "the first entry is not anchored to this commitment (the commitment or the \
                     entry was rewritten)"
                        .to_string()
                } else {
                    "does not link to the entry before it: an entry was removed or rewritten"
                        .to_string()
                });
            }
            let actual = entry.content_hash()?;
            if actual != entry.hash {
                broke("its hash does not match its content: the entry was rewritten".into());
            }
            if let Event::Opening { commitment, .. } = &entry.event
                && *commitment != self.commitment.commitment.as_str()
            {
                broke(format!(
                    "records an opening of commitment {commitment}, not this pack's"
                ));
            }
            prev = entry.hash.clone();
            reading.entries.push(entry);
        }
        if text.is_empty() && self.path.exists() {
            reading.breaks.push(Break {
                line: 0,
                problem: "the ledger file is empty: its entries were removed".into(),
            });
        }
        Ok(reading)
    }

    /// Appends `event` under an exclusive lock, refusing when the chain is broken and, for an
    /// opening, when one is already recorded (so two processes cannot both open the pack).
    pub fn append(&self, event: Event, at: &str) -> Result<Entry, CrucibleRunError> {
        let _held = crate::crucible::exclusive_lock(&self.path.with_extension("lock"))?;
        let reading = self.read()?;
        match event {
            Event::Opening { .. } => self.refuse_reopening(&reading)?,
            Event::Decision { .. } => self.refuse_broken(&reading)?,
        }
        let mut entry = Entry {
            schema: SCHEMA.into(),
            seq: reading.entries.len() as u64,
            prev: reading
                .entries
                .last()
                .map_or_else(|| self.anchor.clone(), |e| e.hash.clone()),
            at: at.into(),
            event,
            hash: String::new(),
        };
        entry.hash = entry.content_hash()?;
        let line =
            serde_json::to_string(&entry).map_err(|e| CrucibleRunError::files(&self.path, e))?;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| CrucibleRunError::files(&self.path, e))?;
        file.write_all(format!("{line}\n").as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| CrucibleRunError::files(&self.path, e))?;
        Ok(entry)
    }

    fn refuse_broken(&self, reading: &Reading) -> Result<(), CrucibleRunError> {
        match reading.breaks.first() {
            Some(b) => Err(CrucibleRunError::Invalid(format!(
                "{}: the openings ledger is broken at {b}; nothing is opened until `geode \
                 crucible audit` is clean",
                self.path.display()
            ))),
            None => Ok(()),
        }
    }

    fn refuse_reopening(&self, reading: &Reading) -> Result<(), CrucibleRunError> {
        self.refuse_broken(reading)?;
        if let Some(first) = reading.openings().next() {
            let contract = first.opened_for().unwrap_or_default();
            return Err(CrucibleRunError::Invalid(format!(
                "{}: the openings ledger records an opening of this sealed pack at {} for \
                 contract {contract} (entry {}); a sealed pack opens once, whatever its seal \
                 state says",
                self.path.display(),
                first.at,
                first.seq
            )));
        }
        Ok(())
    }

    /// Refuses an opening when the ledger already holds one (whatever the seal state says) or
    /// is broken; checked before anything is burned ([`Self::append`] checks again under its
    /// lock).
    pub fn check_unopened(&self) -> Result<(), CrucibleRunError> {
        self.refuse_reopening(&self.read()?)
    }
}

/// The sealed pack names whose commitments are in `dir` (`<name>.json`), sorted.
pub fn committed_names(dir: &Path) -> Result<Vec<String>, CrucibleRunError> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| CrucibleRunError::files(dir, e))? {
        let path = entry.map_err(|e| CrucibleRunError::files(dir, e))?.path();
        let Some(file) = path.file_name().map(|f| f.to_string_lossy().into_owned()) else {
            continue;
        };
        if let Some(name) = file.strip_suffix(".json") {
            names.push(name.to_string());
        }
    }
    names.sort();
    Ok(names)
}
#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(dir: &Path) -> OpeningsLedger {
        let published = PublishedCommitment {
            schema: "geode.commitment.v1".into(),
            name: "h".into(),
            commitment: geode_crucible::Commitment::of_bytes(b"c0ffee"),
            pack_hash: geode_crucible::PackHash::of_bytes(b"p"),
            trials_per_task: 1,
            tasks: 3,
        };
        std::fs::write(
            dir.join("h.json"),
            serde_json::to_string(&published).unwrap(),
        )
        .unwrap();
        OpeningsLedger::beside(dir, "h").unwrap()
    }

    fn opening() -> Event {
        Event::Opening {
            commitment: geode_crucible::Commitment::of_bytes(b"c0ffee").to_string(),
            contract_hash: "k1".into(),
            candidate_scaffold_hash: "s".into(),
        }
    }

    #[test]
    fn removed_and_rewritten_entries_break_the_chain() {
        let tmp = tempfile::tempdir().unwrap();
        let l = ledger(tmp.path());
        l.check_unopened().unwrap();
        let first = l.append(opening(), "t0").unwrap();
        let decision = Event::Decision {
            opening: first.hash.clone(),
            contract_hash: "k1".into(),
            verdict: "REJECT".into(),
            evidence_hash: None,
        };
        l.append(decision, "t1").unwrap();
        // A second opening is refused under the lock, not only by `check_unopened`.
        let again = l.append(opening(), "t2").unwrap_err();
        assert!(again.to_string().contains("opens once"), "{again}");
        let later = Event::Decision {
            opening: first.hash.clone(),
            contract_hash: "k1".into(),
            verdict: "KEEP".into(),
            evidence_hash: None,
        };
        l.append(later, "t2").unwrap();
        let r = l.read().unwrap();
        assert!(r.breaks.is_empty(), "{:?}", r.breaks);
        assert_eq!(r.entries.len(), 3);
        assert!(l.check_unopened().is_err(), "an opening is on record");

        let text = std::fs::read_to_string(l.path()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        // The middle line removed.
        std::fs::write(l.path(), format!("{}\n{}\n", lines[0], lines[2])).unwrap();
        let breaks = l.read().unwrap().breaks;
        assert!(breaks.iter().any(|b| b.line == 2), "{breaks:?}");
        // A verdict rewritten in place.
        std::fs::write(l.path(), text.replace("REJECT", "KEEP")).unwrap();
        let breaks = l.read().unwrap().breaks;
        assert_eq!(breaks.len(), 1, "{breaks:?}");
        assert!(
            breaks[0].line == 2 && breaks[0].problem.contains("rewritten"),
            "{breaks:?}"
        );
        // Rewritten with its hash recomputed: the next line no longer links to it.
        let mut forged: Entry = serde_json::from_str(lines[1]).unwrap();
        if let Event::Decision { verdict, .. } = &mut forged.event {
            *verdict = "KEEP".into();
        }
        forged.hash = forged.content_hash().unwrap();
        let forged = serde_json::to_string(&forged).unwrap();
        std::fs::write(l.path(), format!("{}\n{forged}\n{}\n", lines[0], lines[2])).unwrap();
        let breaks = l.read().unwrap().breaks;
        assert_eq!(breaks.len(), 1, "{breaks:?}");
        assert!(
            breaks[0].line == 3 && breaks[0].problem.contains("link"),
            "{breaks:?}"
        );
        assert!(
            l.append(opening(), "t3").is_err(),
            "a broken chain takes no entry"
        );
        // Emptied.
        std::fs::write(l.path(), "").unwrap();
        assert_eq!(l.read().unwrap().breaks[0].line, 0);
        // The commitment rewritten under the same name: the chain no longer starts from it.
        std::fs::write(l.path(), &text).unwrap();
        let mut other: PublishedCommitment =
            serde_json::from_str(&std::fs::read_to_string(tmp.path().join("h.json")).unwrap())
                .unwrap();
        other.tasks = 4;
        std::fs::write(
            tmp.path().join("h.json"),
            serde_json::to_string(&other).unwrap(),
        )
        .unwrap();
        let l = OpeningsLedger::beside(tmp.path(), "h").unwrap();
        let breaks = l.read().unwrap().breaks;
        assert!(
            breaks[0].line == 1 && breaks[0].problem.contains("anchored"),
            "{breaks:?}"
        );
    }

    #[test]
    fn no_commitment_no_opening() {
        let tmp = tempfile::tempdir().unwrap();
        let err = OpeningsLedger::beside(tmp.path(), "absent").unwrap_err();
        assert!(err.to_string().contains("--commitments"), "{err}");
    }
}
