//! The EvidenceLedger: one masked diagnostic row per notable event of a session (tool denials,
//! uncertain effects, guard stops, verification failures, hook failures, checkpoint failures),
//! as JSONL in the session directory (`evidence.jsonl`).
//!
//! Secrets (API keys, tokens, private keys, bearer and authorization headers, `password=`
//! style assignments) and personal data (e-mail addresses, phone numbers) are replaced by
//! `[<class>#<hash>]`, where the hash is SHA-256 over a per-session salt (`ledger.salt`, kept in
//! the session directory, mode 0600) and the value: the same value gives the same hash within a
//! session, so rows correlate without revealing it, and a hash from one session says nothing
//! about another.
//!
//! Writes are best effort: never in a transaction with the timeline or the checkpoint, and a
//! failed write is logged, never returned to the loop. A row is a diagnostic observation; it
//! proves no effect.
//!
//! Row schema `geode.evidence.v1`:
//! `{"schema", "ts", "session_id", "seq", "kind", "detail": {...masked}}`.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rand::RngCore;
use regex::{Captures, Regex};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::StoreError;
use crate::ids::SessionId;

pub(crate) const SCHEMA: &str = "geode.evidence.v1";
pub(crate) const LEDGER_FILE: &str = "evidence.jsonl";
pub(crate) const SALT_FILE: &str = "ledger.salt";
/// Hex characters of a correlation hash: enough to tell values apart, too few to brute-force
/// the salt back out.
const HASH_CHARS: usize = 16;

/// One masking rule: what it matches, which class it reports, and which capture group holds
/// the value (0: the whole match).
struct Rule {
    class: &'static str,
    pattern: Regex,
    group: usize,
}

/// The masking rules, most specific first (a private key block before the tokens inside it).
fn rules() -> Result<Vec<Rule>, regex::Error> {
    let rule = |class, pattern: &str, group| -> Result<Rule, regex::Error> {
        Ok(Rule {
            class,
            pattern: Regex::new(pattern)?,
            group,
        })
    };
    Ok(vec![
        rule(
            "private_key",
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)",
            0,
        )?,
        rule(
            "secret",
            r"(?i)\b(?:authorization|proxy-authorization)\s*[:=]\s*((?:bearer|basic|token)\s+)?[^\s,;]+",
            0,
        )?,
        rule("secret", r"(?i)\bbearer\s+([A-Za-z0-9._~+/=-]{8,})", 1)?,
        rule(
            "secret",
            r"\b(?:sk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,}|glpat-[A-Za-z0-9_-]{20,})",
            0,
        )?,
        rule(
            "secret",
            r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
            0,
        )?,
        rule(
            "secret",
            r#"(?i)\b(?:api[_-]?key|access[_-]?key|secret(?:[_-]?key)?|client[_-]?secret|token|passw(?:or)?d|pwd)\b["']?\s*[:=]\s*["']?([^\s"',;]{4,})"#,
            1,
        )?,
        rule(
            "email",
            r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b",
            0,
        )?,
        rule(
            "phone",
            r"(?:\+\d{1,3}[\s.-]?)?(?:\(\d{2,4}\)[\s.-]?)?\b\d{3,4}[\s.-]\d{3,4}(?:[\s.-]\d{2,4})?\b",
            0,
        )?,
    ])
}

/// Masks strings with a session's salt.
pub struct Masker {
    salt: String,
    rules: Vec<Rule>,
}

impl std::fmt::Debug for Masker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Masker").finish_non_exhaustive()
    }
}

impl Masker {
    pub(crate) fn new(salt: impl Into<String>) -> Result<Self, regex::Error> {
        Ok(Masker {
            salt: salt.into(),
            rules: rules()?,
        })
    }

    /// The correlation hash of `value` under this session's salt.
    pub fn hash(&self, value: &str) -> String {
        let mut h = Sha256::new();
        h.update(self.salt.as_bytes());
        h.update(b"\0");
        h.update(value.as_bytes());
        let mut hex = hex::encode(h.finalize());
        hex.truncate(HASH_CHARS);
        hex
    }

    pub(crate) fn mask_text(&self, text: &str) -> String {
        let mut out = text.to_string();
        for rule in &self.rules {
            out = rule
                .pattern
                .replace_all(&out, |c: &Captures<'_>| {
                    let whole = c.get(0).map_or("", |m| m.as_str());
                    let value = c.get(rule.group).filter(|_| rule.group > 0);
                    let shown = value.map_or(whole, |v| v.as_str());
                    // Already masked by an earlier rule: leave it, so its hash stays the one
                    // of the original value.
                    if shown.starts_with('[') {
                        return whole.to_string();
                    }
                    let tag = format!("[{}#{}]", rule.class, self.hash(shown));
                    match value {
                        Some(v) => {
                            let start = v.start() - c.get(0).map_or(0, |m| m.start());
                            format!("{}{tag}", &whole[..start])
                        }
                        None => tag,
                    }
                })
                .into_owned();
        }
        out
    }

    /// Every string in `value` masked (object keys too: a key can be an e-mail address).
    pub fn mask_value(&self, value: &Value) -> Value {
        match value {
            Value::String(s) => Value::String(self.mask_text(s)),
            Value::Array(items) => Value::Array(items.iter().map(|v| self.mask_value(v)).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (self.mask_text(k), self.mask_value(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
}

/// The ledger of one session.
#[derive(Debug)]
pub struct EvidenceLedger {
    path: PathBuf,
    session_id: SessionId,
    masker: Masker,
    next_seq: Mutex<u64>,
}

impl EvidenceLedger {
    /// Open the ledger in `dir`, creating the salt on first use.
    pub fn open(dir: &Path, session: &SessionId) -> Result<Self, StoreError> {
        let salt_path = dir.join(SALT_FILE);
        let salt = match std::fs::read_to_string(&salt_path) {
            Ok(s) if !s.trim().is_empty() => s.trim().to_string(),
            Ok(_) => {
                return Err(StoreError::Json {
                    path: salt_path.display().to_string(),
                    message: "the ledger salt is empty; correlation hashes would be guessable"
                        .into(),
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => new_salt(&salt_path)?,
            Err(e) => return Err(StoreError::io(&salt_path, e)),
        };
        Self::with_salt(dir, session, salt)
    }

    /// A ledger with a given salt (tests: deterministic hashes).
    pub fn with_salt(
        dir: &Path,
        session: &SessionId,
        salt: impl Into<String>,
    ) -> Result<Self, StoreError> {
        let path = dir.join(LEDGER_FILE);
        let masker = Masker::new(salt).map_err(|e| StoreError::Json {
            path: path.display().to_string(),
            message: format!("a masking rule does not compile: {e}"),
        })?;
        let next_seq = std::fs::read_to_string(&path)
            .map(|t| t.lines().count() as u64)
            .unwrap_or(0);
        Ok(EvidenceLedger {
            path,
            session_id: session.clone(),
            masker,
            next_seq: Mutex::new(next_seq),
        })
    }

    /// The ledger file, `evidence.jsonl` in the session directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The masker of this session's rows (its salt makes the correlation hashes).
    pub fn masker(&self) -> &Masker {
        &self.masker
    }

    /// Append one masked row; a failure is logged and otherwise ignored (best effort).
    pub fn record(&self, kind: &str, detail: Value) {
        if let Err(e) = self.try_record(kind, detail) {
            tracing::warn!("evidence ledger: row lost: {e}");
        }
    }

    /// Append one masked row, reporting a failure.
    pub fn try_record(&self, kind: &str, detail: Value) -> Result<(), StoreError> {
        let mut seq = self.next_seq.lock().unwrap_or_else(|p| p.into_inner());
        let row = json!({
            "schema": SCHEMA,
            "ts": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            "session_id": self.session_id.as_str(),
            "seq": *seq,
            "kind": kind,
            "detail": self.masker.mask_value(&detail),
        });
        let mut line = row.to_string();
        line.push('\n');
        // One write of one line with O_APPEND: rows never interleave.
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .and_then(|mut f| f.write_all(line.as_bytes()))
            .map_err(|e| StoreError::io(&self.path, e))?;
        *seq += 1;
        Ok(())
    }
}

fn new_salt(path: &Path) -> Result<String, StoreError> {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let salt = hex::encode(bytes);
    let mut opts = OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    opts.open(path)
        .and_then(|mut f| f.write_all(salt.as_bytes()).and_then(|()| f.sync_all()))
        .map_err(|e| StoreError::io(path, e))?;
    Ok(salt)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masker() -> Masker {
        Masker::new("salt-1").unwrap()
    }

    #[test]
    fn secrets_and_personal_data_are_hashed() {
        let m = masker();
        let text = "curl -H 'Authorization: Bearer abcdefghijklmnop' --key sk-ant-api03-AAAAAAAAAAAAAAAAAAAA \
                    mail jane.doe@example.com or call +1 415 555 0100; api_key=hunter2hunter2 \
                    ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        let out = m.mask_text(text);
        for leaked in [
            "abcdefghijklmnop",
            "sk-ant-api03",
            "jane.doe",
            "555 0100",
            "hunter2",
            "ghp_aaaa",
        ] {
            assert!(!out.contains(leaked), "{leaked} leaked: {out}");
        }
        assert!(out.contains("[email#") && out.contains("[phone#") && out.contains("[secret#"));
        assert!(out.contains("api_key=[secret#"), "{out}");
        // Same value, same hash; another salt, another hash.
        assert_eq!(m.mask_text("a@b.io"), m.mask_text("a@b.io"));
        assert_ne!(
            m.mask_text("a@b.io"),
            Masker::new("salt-2").unwrap().mask_text("a@b.io")
        );
        let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----";
        assert!(m.mask_text(pem).starts_with("[private_key#"));
        // Ordinary diagnostics survive.
        let plain = "exit code 1 at 2026-11-30T10:00:00Z in src/main.rs:42";
        assert_eq!(m.mask_text(plain), plain);
    }

    #[test]
    fn rows_are_masked_jsonl_and_the_salt_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let s = SessionId::new("s");
        let ledger = EvidenceLedger::open(dir.path(), &s).unwrap();
        ledger
            .try_record("tool_denied", json!({"input": {"to": "x@y.org"}}))
            .unwrap();
        ledger.record("guard_stop", json!({"reason": "max_rounds"}));
        let text = std::fs::read_to_string(ledger.path()).unwrap();
        let rows: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1]["seq"], 1);
        assert_eq!(rows[0]["schema"], SCHEMA);
        assert!(!text.contains("x@y.org"));
        let again = EvidenceLedger::open(dir.path(), &s).unwrap();
        assert_eq!(
            again.masker().hash("v"),
            ledger.masker().hash("v"),
            "the salt persists"
        );
    }
}
