//! Record and replay of provider exchanges.
//!
//! `--record DIR` writes one file per HTTP exchange (every attempt, retries included), named
//! `NNNNN-<body hash>.json`, in the `geode.cassette.v1` shape:
//!
//! ```json
//! {"schema": "geode.cassette.v1", "route": "anthropic:claude-sonnet-5", "effort": null,
//!  "max_output_tokens": null, "seq": 0,
//!  "request": {"method": "POST", "url": "...", "headers": [["anthropic-version", "..."]],
//!              "body_sha256": "...", "body": {...}},
//!  "response": {"status": 200, "headers": [...], "body": "event: ...", "end": "complete"}}
//! ```
//!
//! Credential headers are never written (the key travels apart from the other headers), and
//! the key's text is scrubbed from the file should it appear anywhere else. `cassette:DIR`
//! replays a directory offline: each request is matched by the SHA-256 of its canonical JSON
//! body (recorded order for repeats), and a request with no match fails loudly.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::credentials::is_secret_header;
use super::effort::Effort;
use super::http::wire::{StreamEnd, WireRequest};
use crate::ids::canonical_sha256;

pub(crate) const SCHEMA: &str = "geode.cassette.v1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Exchange {
    pub schema: String,
    /// The route that made the request; a cassette rebuilds that adapter.
    pub route: String,
    /// The adapter settings that shape request bodies, so a replay builds identical ones.
    pub effort: Option<Effort>,
    pub max_output_tokens: Option<u64>,
    pub seq: u32,
    pub request: RecordedRequest,
    pub response: RecordedResponse,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RecordedRequest {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body_sha256: String,
    pub body: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RecordedResponse {
    /// 0: no response (the connection failed; `error` says how).
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// `complete`, `eof` (closed early), `idle` (went silent), `error` (broke).
    pub end: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn public_headers(headers: &[(String, String)]) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(k, _)| !is_secret_header(k))
        .cloned()
        .collect()
}

/// Writes exchanges into a directory.
#[derive(Debug)]
pub struct Recorder {
    dir: PathBuf,
    route: String,
    effort: Option<Effort>,
    max_output_tokens: Option<u64>,
    next: AtomicU32,
}

impl Recorder {
    pub(crate) fn new(
        dir: &Path,
        route: &str,
        effort: Option<Effort>,
        max_output_tokens: Option<u64>,
    ) -> Result<Self, String> {
        std::fs::create_dir_all(dir).map_err(|e| {
            format!(
                "cannot create the recording directory {}: {e}",
                dir.display()
            )
        })?;
        let existing = json_files(dir)?.len();
        Ok(Recorder {
            dir: dir.to_path_buf(),
            route: route.to_string(),
            effort,
            max_output_tokens,
            next: AtomicU32::new(u32::try_from(existing).unwrap_or(u32::MAX)),
        })
    }

    pub(crate) fn record(
        &self,
        request: &WireRequest,
        status: u16,
        headers: &[(String, String)],
        body: &[u8],
        end: &StreamEnd,
    ) -> Result<(), String> {
        let hash = canonical_sha256(&request.body);
        let (end, error) = match end {
            StreamEnd::Complete => ("complete", None),
            StreamEnd::Eof => ("eof", None),
            StreamEnd::Idle => ("idle", None),
            StreamEnd::Error(e) => ("error", Some(e.clone())),
        };
        let mut exchange = Exchange {
            schema: SCHEMA.into(),
            route: self.route.clone(),
            effort: self.effort,
            max_output_tokens: self.max_output_tokens,
            seq: 0,
            request: RecordedRequest {
                method: "POST".into(),
                url: request.url.clone(),
                headers: public_headers(&request.headers),
                body_sha256: hash.clone(),
                body: request.body.clone(),
            },
            response: RecordedResponse {
                status,
                headers: public_headers(headers),
                body: String::from_utf8_lossy(body).into_owned(),
                end: end.into(),
                error,
            },
        };
        for _ in 0..10_000 {
            let seq = self.next.fetch_add(1, Ordering::SeqCst);
            exchange.seq = seq;
            let mut text = serde_json::to_string_pretty(&exchange).map_err(|e| e.to_string())?;
            if let Some((_, key)) = &request.auth {
                let secret = key.expose();
                text = redact(&text, secret.strip_prefix("Bearer ").unwrap_or(secret));
            }
            let path = self.dir.join(format!("{seq:05}-{}.json", &hash[..12]));
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(mut f) => {
                    use std::io::Write;
                    return f.write_all(text.as_bytes()).map_err(|e| {
                        format!("cannot write the recording {}: {e}", path.display())
                    });
                }
                // Another recorder took the number; take the next one.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(format!(
                        "cannot write the recording {}: {e}",
                        path.display()
                    ));
                }
            }
        }
        Err(format!("no free file name in {}", self.dir.display()))
    }
}

/// Keys shorter than this are placeholders (`x`, `EMPTY`, what local servers take), not secrets:
/// replacing them would corrupt the recording wherever those letters occur.
const MIN_SECRET_LEN: usize = 12;

/// `text` with every whole occurrence of `secret` (not a piece of a longer token) replaced.
fn redact(text: &str, secret: &str) -> String {
    if secret.len() < MIN_SECRET_LEN {
        return text.to_string();
    }
    let token = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(secret) {
        let (before, after) = (&rest[..at], &rest[at + secret.len()..]);
        let whole = !before.chars().next_back().is_some_and(token)
            && !after.chars().next().is_some_and(token);
        out.push_str(before);
        out.push_str(if whole { "<redacted>" } else { secret });
        rest = after;
    }
    out.push_str(rest);
    out
}

fn json_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    Ok(files)
}

/// Load every exchange of a recording directory, in recorded order.
pub(crate) fn load_exchanges(dir: &Path) -> Result<Vec<Exchange>, String> {
    let mut out = Vec::new();
    for path in json_files(dir)? {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let ex: Exchange = serde_json::from_str(&text)
            .map_err(|e| format!("{} is not a recorded exchange: {e}", path.display()))?;
        if ex.schema != SCHEMA {
            return Err(format!(
                "{}: schema {:?} is not {SCHEMA}",
                path.display(),
                ex.schema
            ));
        }
        out.push(ex);
    }
    out.sort_by_key(|e| e.seq);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn only_whole_secrets_of_realistic_length_are_redacted() {
        let key = "sk-test-0123456789abcdef";
        assert_eq!(
            redact(
                &format!("{{\"echo\": \"{key}\", \"k\": \"Bearer {key}\"}}"),
                key
            ),
            "{\"echo\": \"<redacted>\", \"k\": \"Bearer <redacted>\"}"
        );
        // A longer token that merely contains the key is not the key.
        let longer = format!("{key}9");
        assert_eq!(redact(&longer, key), longer);
        // A placeholder key leaves the recording as it was.
        let body = "{\"text\": \"x marks the spot; EMPTY box\"}";
        assert_eq!(redact(body, "x"), body);
        assert_eq!(redact(body, "EMPTY"), body);
    }
}
