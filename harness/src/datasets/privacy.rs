//! Privacy review: a scanner for secrets and personal data in task files and trajectories, and
//! the waiver file that records, per finding, why it may ship.
//!
//! Rules (`RULES_VERSION`): AWS access key ids (`AKIA`/`ASIA` + 16), AWS secret access keys (40
//! base64 characters assigned to a name like `aws_secret_access_key`), OpenAI/Anthropic style keys
//! (`sk-` + 20 or more), GitHub tokens (`ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_`), Slack tokens
//! (`xoxa-`, `xoxb-`, ...), bearer tokens (`Bearer` + 20 or more token characters), PEM private
//! key headers, e-mail addresses, home paths (`/home/<user>`, `/Users/<user>`), IPv4 addresses
//! and phone numbers (digit groups apart: `+1 415 555 0100`, `(415) 555-0100`).
//!
//! Default policy (applied before waivers, recorded as `policy:` in the review), because these
//! values identify no one and no system:
//! - e-mail at RFC 2606 names: `example.com`, `example.net`, `example.org` (and subdomains), and
//!   the reserved top-level names `.example`, `.test`, `.invalid`, `.localhost`;
//! - IPv4 loopback `127.0.0.0/8`, unspecified `0.0.0.0`, broadcast `255.255.255.255`, the
//!   RFC 5737 documentation ranges `192.0.2.0/24`, `198.51.100.0/24`, `203.0.113.0/24`, and the
//!   RFC 1918 private ranges `10/8`, `172.16/12`, `192.168/16` (they name no host outside its
//!   own network), and an ascending run of single digits (`1.2.3.4`: a version or placeholder);
//! - phone numbers reserved for fiction (NANP `555-0100`..`555-0199`, Ofcom `020 7946 0xxx`).
//!
//! Secrets are never waived by policy: a planted fake key in a task needs a waiver with a reason.
//!
//! What is read: every regular file, up to `MAX_SCAN_BYTES`. A gzip stream is decompressed first,
//! and a tar archive (plain or gzipped) is read member by member (findings name the member as
//! `ARCHIVE!MEMBER`). What is still binary after that is not scanned, and the review lists it
//! under `skipped` so nothing is passed over silently.
//!
//! Waiver file (`geode.waivers.v1`, TOML):
//! ```toml
//! schema = "geode.waivers.v1"
//! [[waivers]]
//! fingerprint = "3f2a9c0d1e4b5a6f"   # from `geode dataset scan`
//! reason = "fake key the task asks the agent to purge"
//! rule = "api_key_sk"                 # optional, for the reader
//! ```
//! A fingerprint covers (rule, task, file, matched text), not the line: moving text within a
//! file keeps its waiver, changing the secret or the file does not.

use std::collections::BTreeMap;
use std::path::Path;

use regex::Regex;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{DatasetError, check_schema, files_below, invalid, io_err};

/// Version of the rule set; recorded in every review so a rule change is visible.
pub(crate) const RULES_VERSION: &str = "geode.privacy-rules.v3";
/// The waiver file's `schema` value.
pub(crate) const WAIVERS_SCHEMA: &str = "geode.waivers.v1";
/// The review's `schema` value.
pub(crate) const REVIEW_SCHEMA: &str = "geode.privacy.v1";

/// Files larger than this are scanned only up to this size (tasks ship small fixtures; a huge
/// blob is data, and its head is where headers and keys sit).
const MAX_SCAN_BYTES: usize = 4 << 20;

/// One match of a rule in one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// The rule that matched (`aws_access_key`, `ipv4`, ...).
    pub rule: String,
    /// The task id (or `trajectory:NAME`) the file belongs to.
    pub scope: String,
    /// Path relative to the scope's folder.
    pub file: String,
    /// 1-based line of the match.
    pub line: usize,
    /// The match with most of it masked, so reports never repeat a secret.
    pub excerpt: String,
    /// 16 hex digits over (rule, scope, file, matched text): what a waiver names.
    pub fingerprint: String,
}

/// What happens to a finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "reason", rename_all = "snake_case")]
pub enum Disposition {
    /// Allowed by the documented default policy (the reason names the rule of the policy).
    Policy(String),
    /// Allowed by a waiver, with its recorded reason.
    Waived(String),
    /// Blocks a release.
    Open,
}

/// A finding and what the default policy or the waivers made of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewedFinding {
    /// The match.
    #[serde(flatten)]
    pub finding: Finding,
    /// Allowed by policy, waived, or open.
    pub disposition: Disposition,
}

/// The record of one privacy review, stored in a release manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrivacyReview {
    /// Always `REVIEW_SCHEMA`.
    pub schema: String,
    /// The `RULES_VERSION` the scan used.
    pub rules_version: String,
    /// Files (and archive members) scanned as text.
    pub files_scanned: usize,
    /// Every finding, with its disposition.
    pub findings: Vec<ReviewedFinding>,
    /// Waivers that matched nothing (stale: the finding was fixed or the file changed).
    pub unused_waivers: Vec<String>,
    /// Files (or archive members) not scanned because they are binary, as `scope:file`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

impl PrivacyReview {
    /// The findings neither the policy nor a waiver allows: each blocks a release.
    pub fn open(&self) -> Vec<&ReviewedFinding> {
        self.findings
            .iter()
            .filter(|f| f.disposition == Disposition::Open)
            .collect()
    }
}

/// The waiver file (`geode.waivers.v1`): findings allowed to ship, each with a reason.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Waivers {
    /// Always `WAIVERS_SCHEMA`.
    pub schema: String,
    /// One entry per waived finding.
    #[serde(default)]
    pub waivers: Vec<Waiver>,
}

/// One waived finding.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Waiver {
    /// The finding's fingerprint, as `geode dataset scan` prints it.
    pub fingerprint: String,
    /// Why the finding may ship; never empty.
    pub reason: String,
    /// The finding's rule, for the reader only (matching uses the fingerprint).
    #[serde(default)]
    pub rule: Option<String>,
}

impl Waivers {
    /// Reads a TOML waiver file; refuses an unknown `schema` or a waiver without a reason.
    pub fn load(path: &Path) -> Result<Waivers, DatasetError> {
        let text = std::fs::read_to_string(path).map_err(|e| io_err(path, e))?;
        let w: Waivers = toml::from_str(&text).map_err(|e| invalid(path, e.to_string()))?;
        check_schema(path, &w.schema, WAIVERS_SCHEMA)?;
        for (i, waiver) in w.waivers.iter().enumerate() {
            if waiver.reason.trim().is_empty() {
                return Err(invalid(
                    path,
                    format!("waivers[{i}].reason: a waiver needs a reason"),
                ));
            }
        }
        Ok(w)
    }
}

/// The privacy rules, compiled once (see the module docs for the list).
pub struct Scanner {
    rules: Vec<(&'static str, Regex)>,
}

fn rule(name: &'static str, pattern: &str) -> Result<(&'static str, Regex), DatasetError> {
    Regex::new(pattern)
        .map(|r| (name, r))
        .map_err(|e| DatasetError::Invalid {
            path: format!("privacy rule {name}"),
            message: e.to_string(),
        })
}

impl Scanner {
    /// Compiles the rules; fails only if a rule's pattern is invalid.
    pub fn new() -> Result<Scanner, DatasetError> {
        Ok(Scanner {
            rules: vec![
                rule("aws_access_key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")?,
                rule(
                    "aws_secret_key",
                    r#"(?i)\b(?:aws_?)?secret_?access_?key["']?\s*[:=]\s*["']?[A-Za-z0-9/+]{40}(?:[^A-Za-z0-9/+=]|$)"#,
                )?,
                rule("api_key_sk", r"\bsk-[A-Za-z0-9_-]{20,}")?,
                rule("github_token", r"\bgh[pousr]_[A-Za-z0-9]{30,}")?,
                rule("slack_token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}")?,
                rule("bearer_token", r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{20,}")?,
                rule("private_key", r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")?,
                rule(
                    "email",
                    r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b",
                )?,
                rule("home_path", r"/(?:home|Users)/[A-Za-z0-9._-]+")?,
                rule("ipv4", r"\b(?:[0-9]{1,3}\.){3}[0-9]{1,3}\b")?,
                // Groups apart (a bare run of ten digits is an id or a timestamp as often):
                // +1 415 555 0100, (415) 555-0100, 415.555.0100, +44 20 7946 0958.
                rule(
                    "phone",
                    r"(?:\+[0-9]{1,3}[ .-]?)?(?:\([0-9]{2,4}\)|\b[0-9]{2,4})[ .-][0-9]{3,4}[ .-][0-9]{4}\b",
                )?,
            ],
        })
    }

    /// Every match in one text: (rule, matched text, line).
    fn matches(&self, text: &str) -> Vec<(&'static str, String, usize)> {
        let mut out = Vec::new();
        for (name, re) in &self.rules {
            for m in re.find_iter(text) {
                if *name == "ipv4" && !valid_ipv4(m.as_str()) {
                    continue;
                }
                let line = text[..m.start()].matches('\n').count() + 1;
                out.push((*name, m.as_str().to_string(), line));
            }
        }
        out.sort_by(|a, b| (a.2, a.0).cmp(&(b.2, b.0)));
        out
    }
}

/// What a scan reads below a folder: the texts by file label, and the labels of what is binary.
struct Texts {
    texts: Vec<(String, String)>,
    skipped: Vec<String>,
}

/// Read every file below `dir` as text, opening gzip and tar archives (see the module doc).
fn texts_below(dir: &Path) -> Result<Texts, DatasetError> {
    let mut out = Texts {
        texts: Vec::new(),
        skipped: Vec::new(),
    };
    for rel in files_below(dir)? {
        let path = dir.join(&rel);
        let bytes = std::fs::read(&path).map_err(|e| io_err(&path, e))?;
        let label = rel.to_string_lossy().into_owned();
        // By content, not name: a task may ship a text file called `backup.tar.gz`. A corrupt
        // gzip stream is scanned as it is (binary, so it lands in `skipped`).
        let bytes = match bytes.starts_with(&[0x1f, 0x8b]) {
            true => gunzip(&bytes).unwrap_or(bytes),
            false => bytes,
        };
        if is_tar(&bytes) {
            read_tar(&label, &bytes, &mut out);
        } else {
            out.push(label, &bytes);
        }
    }
    Ok(out)
}

impl Texts {
    fn push(&mut self, label: String, bytes: &[u8]) {
        let head = &bytes[..bytes.len().min(MAX_SCAN_BYTES)];
        if head.contains(&0) {
            self.skipped.push(label);
        } else {
            self.texts
                .push((label, String::from_utf8_lossy(head).into_owned()));
        }
    }
}

/// Decompress at most `MAX_SCAN_BYTES` more than a scan reads (a member of a tar needs its
/// header too), so a gzip bomb costs bounded memory.
fn gunzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .take(4 * MAX_SCAN_BYTES as u64)
        .read_to_end(&mut out)?;
    Ok(out)
}

/// A POSIX tar header carries `ustar` at offset 257.
fn is_tar(bytes: &[u8]) -> bool {
    bytes.len() >= 512 && bytes.get(257..262) == Some(b"ustar".as_slice())
}

/// The members of a tar archive, each scanned as a file. An archive that stops short (cut at
/// the decompression bound, or damaged) is read up to there, and the rest is listed as skipped.
fn read_tar(label: &str, bytes: &[u8], out: &mut Texts) {
    use std::io::Read;
    let mut archive = tar::Archive::new(bytes);
    let Ok(entries) = archive.entries() else {
        out.skipped.push(label.to_string());
        return;
    };
    for entry in entries {
        let read = entry.and_then(|mut entry| {
            let member = entry.path()?.to_string_lossy().into_owned();
            let mut data = Vec::new();
            if entry.header().entry_type().is_file() {
                (&mut entry)
                    .take(MAX_SCAN_BYTES as u64)
                    .read_to_end(&mut data)?;
            }
            Ok((member, entry.header().entry_type().is_file(), data))
        });
        match read {
            Ok((member, true, data)) => out.push(format!("{label}!{member}"), &data),
            Ok(_) => {}
            Err(_) => {
                out.skipped
                    .push(format!("{label}!(the rest of the archive)"));
                return;
            }
        }
    }
}

fn valid_ipv4(s: &str) -> bool {
    s.split('.')
        .all(|o| o.parse::<u16>().is_ok_and(|v| v <= 255))
}

fn octets(s: &str) -> Option<[u8; 4]> {
    let v: Vec<u8> = s.split('.').filter_map(|o| o.parse().ok()).collect();
    v.try_into().ok()
}

fn fingerprint(rule: &str, scope: &str, file: &str, matched: &str) -> String {
    let mut h = Sha256::new();
    for part in ["geode.finding.v1", rule, scope, file, matched] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    hex::encode(&h.finalize()[..8])
}

/// Keep the first 6 characters so a reader can find the spot; mask the rest.
fn mask(matched: &str) -> String {
    let keep: String = matched.chars().take(6).collect();
    let total = matched.chars().count();
    if total <= 6 {
        keep
    } else {
        format!("{keep}…({total} chars)")
    }
}

/// The documented default policy; `None` when the finding must be fixed or waived.
/// `matched` is the unmasked text.
pub fn policy_reason(rule: &str, matched: &str) -> Option<String> {
    match rule {
        "email" => {
            let domain = matched.rsplit('@').next()?.to_ascii_lowercase();
            let reserved_domain = ["example.com", "example.net", "example.org"]
                .iter()
                .any(|d| domain == *d || domain.ends_with(&format!(".{d}")));
            let reserved_tld = [".example", ".test", ".invalid", ".localhost"]
                .iter()
                .any(|t| domain.ends_with(t));
            (reserved_domain || reserved_tld).then(|| format!("RFC 2606 reserved domain {domain}"))
        }
        "phone" => {
            // NANP's 555-0100..0199 are reserved for fiction; Ofcom's 020 7946 0xxx for drama.
            let digits: String = matched.chars().filter(char::is_ascii_digit).collect();
            let fictional = digits.len() >= 7
                && (digits[digits.len() - 7..].starts_with("55501") || digits.contains("2079460"));
            fictional.then(|| "a number reserved for fiction".to_string())
        }
        "ipv4" => {
            let [a, b, c, d] = octets(matched)?;
            // 1.2.3.4, 0.1.2.3: an ascending run of digits is a version or a placeholder.
            if d < 10 && b == a + 1 && c == b + 1 && d == c + 1 {
                return Some("a placeholder or version (ascending single digits)".into());
            }
            let why = match (a, b, c) {
                (127, _, _) => "loopback 127.0.0.0/8",
                (0, 0, 0) if matched == "0.0.0.0" => "unspecified 0.0.0.0",
                (255, 255, 255) if matched == "255.255.255.255" => "broadcast",
                (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "RFC 5737 documentation range",
                (10, _, _) => "RFC 1918 private range 10/8",
                (172, 16..=31, _) => "RFC 1918 private range 172.16/12",
                (192, 168, _) => "RFC 1918 private range 192.168/16",
                _ => return None,
            };
            Some(why.to_string())
        }
        _ => None,
    }
}

/// Scan, apply the default policy and the waivers, and record the result.
pub fn review(
    scanner: &Scanner,
    scopes: &[(String, &Path)],
    waivers: &Waivers,
) -> Result<PrivacyReview, DatasetError> {
    let by_fp: BTreeMap<&str, &Waiver> = waivers
        .waivers
        .iter()
        .map(|w| (w.fingerprint.as_str(), w))
        .collect();
    let mut used = std::collections::BTreeSet::new();
    let mut findings = Vec::new();
    let mut files_scanned = 0;
    let mut skipped = Vec::new();
    for (scope, dir) in scopes {
        let mut raw = Vec::new();
        let read = texts_below(dir)?;
        skipped.extend(read.skipped.iter().map(|f| format!("{scope}:{f}")));
        for (file, text) in read.texts {
            files_scanned += 1;
            for (rule, matched, line) in scanner.matches(&text) {
                raw.push((rule.to_string(), matched, line, file.clone()));
            }
        }
        for (rule, matched, line, file) in raw {
            let fp = fingerprint(&rule, scope, &file, &matched);
            let disposition = if let Some(why) = policy_reason(&rule, &matched) {
                Disposition::Policy(why)
            } else if let Some(w) = by_fp.get(fp.as_str()) {
                used.insert(fp.clone());
                Disposition::Waived(w.reason.clone())
            } else {
                Disposition::Open
            };
            findings.push(ReviewedFinding {
                finding: Finding {
                    rule,
                    scope: scope.clone(),
                    file,
                    line,
                    excerpt: mask(&matched),
                    fingerprint: fp,
                },
                disposition,
            });
        }
    }
    let unused_waivers = waivers
        .waivers
        .iter()
        .filter(|w| !used.contains(&w.fingerprint))
        .map(|w| w.fingerprint.clone())
        .collect();
    Ok(PrivacyReview {
        schema: REVIEW_SCHEMA.to_string(),
        rules_version: RULES_VERSION.to_string(),
        files_scanned,
        findings,
        unused_waivers,
        skipped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Phone numbers are found with their digit groups apart; ids, timestamps and versions
    /// are not phone numbers, and `1.2.3.4` is not an address anyone has.
    #[test]
    fn phones_are_found_and_versions_are_not_addresses() {
        let scanner = Scanner::new().unwrap();
        let found = |text: &str| -> Vec<(&'static str, String)> {
            scanner
                .matches(text)
                .into_iter()
                .filter(|(rule, m, _)| policy_reason(rule, m).is_none())
                .map(|(rule, m, _)| (rule, m))
                .collect()
        };
        for phone in [
            "call +1 415 867 5309 now",
            "(415) 867-5309",
            "tel 415.867.5309",
        ] {
            assert_eq!(found(phone).len(), 1, "{phone}: {:?}", found(phone));
            assert_eq!(found(phone)[0].0, "phone");
        }
        for not_phone in [
            "id 4158675309",
            "at 2026-12-06 10:00:00",
            "version 1.2.3.4",
            "(555) 555-0123",
        ] {
            assert!(
                found(not_phone).is_empty(),
                "{not_phone}: {:?}",
                found(not_phone)
            );
        }
    }

    #[test]
    fn policy_covers_reserved_names_only() {
        assert!(policy_reason("email", "ana@example.com").is_some());
        assert!(policy_reason("email", "ana@mail.example.org").is_some());
        assert!(policy_reason("email", "ana@gmail.com").is_none());
        assert!(policy_reason("ipv4", "203.0.113.5").is_some());
        assert!(policy_reason("ipv4", "8.8.8.8").is_none());
        assert!(policy_reason("ipv4", "1.2.3.4").is_some());
        assert!(policy_reason("ipv4", "1.2.3.5").is_none());
        assert!(policy_reason("phone", "(415) 555-0134").is_some());
        assert!(policy_reason("phone", "+1 415 867 5309").is_none());
        assert!(policy_reason("api_key_sk", "sk-aaaaaaaaaaaaaaaaaaaaaaaa").is_none());
    }

    #[test]
    fn masks_secrets() {
        assert_eq!(mask("sk-abcdefghijkl"), "sk-abc…(15 chars)");
    }
}
