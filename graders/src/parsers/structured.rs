//! Machine-readable reports: CTRF JSON, JUnit XML, `go test -json`.

use std::collections::BTreeMap;

use quick_xml::events::{BytesStart, Event};
use serde::Deserialize;

use super::ParseError;
use crate::check::{Check, CheckStatus};

#[derive(Deserialize)]
struct CtrfDoc {
    results: CtrfResults,
}

#[derive(Deserialize)]
struct CtrfResults {
    tests: Vec<CtrfTest>,
}

#[derive(Deserialize)]
struct CtrfTest {
    name: String,
    status: String,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    trace: Option<String>,
}

/// A CTRF report (`{"results": {"tool", "summary", "tests": [{name, status, message?}]}}`), as
/// pytest-json-ctrf and the built-in pack write it. Statuses: passed, failed, skipped,
/// pending (a skip), other (a failure: an unknown state must not look like success).
pub fn parse_ctrf(text: &str, file: &str) -> Result<Vec<Check>, ParseError> {
    let doc: CtrfDoc = serde_json::from_str(text)
        .map_err(|e| ParseError::new(file, format!("not a CTRF report: {e}")))?;
    doc.results
        .tests
        .into_iter()
        .map(|t| {
            let status = match t.status.as_str() {
                "passed" => CheckStatus::Pass,
                "failed" | "other" => CheckStatus::Fail,
                "skipped" | "pending" => CheckStatus::Skip,
                s => {
                    return Err(ParseError::new(
                        file,
                        format!("test {:?}: unknown status {s:?}", t.name),
                    ));
                }
            };
            let message = t.message.or(t.trace).unwrap_or_default();
            Ok(Check::new(t.name, status).with_message(message))
        })
        .collect()
}

fn attr(e: &BytesStart<'_>, key: &[u8], file: &str) -> Result<Option<String>, ParseError> {
    for a in e.attributes() {
        let a = a.map_err(|err| ParseError::new(file, format!("bad attribute: {err}")))?;
        if a.key.as_ref() == key {
            let v = a
                .unescape_value()
                .map_err(|err| ParseError::new(file, format!("bad attribute value: {err}")))?;
            return Ok(Some(v.into_owned()));
        }
    }
    Ok(None)
}

/// A test case being read: its name and the worst status seen inside it.
struct OpenCase {
    name: String,
    status: CheckStatus,
    message: String,
    /// Inside a failure/error/skipped element whose body is the message when there is no
    /// `message` attribute.
    in_detail: bool,
}

impl OpenCase {
    fn mark(&mut self, status: CheckStatus, message: Option<String>) {
        // A failure or error outranks a skip (pytest reports an error in teardown after a skip).
        if self.status != CheckStatus::Fail {
            self.status = status;
        }
        if self.message.is_empty() {
            self.message = message.unwrap_or_default();
        }
    }
}

fn open_case(e: &BytesStart<'_>, file: &str) -> Result<OpenCase, ParseError> {
    let name =
        attr(e, b"name", file)?.ok_or_else(|| ParseError::new(file, "a <testcase> has no name"))?;
    let name = match attr(e, b"classname", file)? {
        Some(c) if !c.is_empty() => format!("{c}::{name}"),
        _ => name,
    };
    Ok(OpenCase {
        name,
        status: CheckStatus::Pass,
        message: String::new(),
        in_detail: false,
    })
}

fn detail_status(tag: &[u8]) -> Option<CheckStatus> {
    match tag {
        b"failure" | b"error" => Some(CheckStatus::Fail),
        b"skipped" => Some(CheckStatus::Skip),
        _ => None,
    }
}

/// JUnit XML as `pytest --junitxml` (and most runners) write it: `<testcase classname name>`
/// holding `<failure>`, `<error>` or `<skipped>` (with a `message` attribute or a body).
pub fn parse_junit(text: &str, file: &str) -> Result<Vec<Check>, ParseError> {
    let mut reader = quick_xml::Reader::from_str(text);
    reader.config_mut().trim_text(true);
    let mut checks = Vec::new();
    let mut case: Option<OpenCase> = None;
    let mut saw_root = false;
    loop {
        let event = reader.read_event().map_err(|e| {
            ParseError::new(
                file,
                format!("not JUnit XML at byte {}: {e}", reader.buffer_position()),
            )
        })?;
        match event {
            // An empty element is a passed case; a start waits for its end.
            Event::Empty(e) if e.name().as_ref() == b"testcase" => {
                saw_root = true;
                let c = open_case(&e, file)?;
                checks.push(Check::new(c.name, c.status));
            }
            Event::Start(e) if e.name().as_ref() == b"testcase" => {
                saw_root = true;
                case = Some(open_case(&e, file)?);
            }
            Event::Start(e) | Event::Empty(e) => {
                let tag = e.name().as_ref().to_vec();
                if tag == b"testsuites" || tag == b"testsuite" {
                    saw_root = true;
                }
                if let (Some(c), Some(status)) = (case.as_mut(), detail_status(&tag)) {
                    let message = attr(&e, b"message", file)?;
                    c.in_detail = message.is_none();
                    c.mark(status, message);
                }
            }
            Event::Text(t) => {
                if let Some(c) = case
                    .as_mut()
                    .filter(|c| c.in_detail && c.message.is_empty())
                {
                    let raw = t
                        .decode()
                        .map_err(|e| ParseError::new(file, e.to_string()))?;
                    c.message = quick_xml::escape::unescape(&raw)
                        .map(|s| s.into_owned())
                        .unwrap_or_else(|_| raw.into_owned());
                }
            }
            Event::End(e) => {
                let tag = e.name().as_ref().to_vec();
                if detail_status(&tag).is_some() {
                    if let Some(c) = case.as_mut() {
                        c.in_detail = false;
                    }
                } else if tag == b"testcase"
                    && let Some(c) = case.take()
                {
                    checks.push(Check::new(c.name, c.status).with_message(c.message));
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if case.is_some() {
        return Err(ParseError::new(file, "the XML ends inside a <testcase>"));
    }
    if !saw_root {
        return Err(ParseError::new(
            file,
            "no <testsuites>, <testsuite> or <testcase> element",
        ));
    }
    Ok(checks)
}

#[derive(Deserialize)]
struct GoEvent {
    #[serde(rename = "Action")]
    action: String,
    #[serde(rename = "Package", default)]
    package: Option<String>,
    #[serde(rename = "Test", default)]
    test: Option<String>,
    #[serde(rename = "Output", default)]
    output: Option<String>,
}

/// A `go test -json` event stream: one check per test with a final `pass`, `fail` or `skip`
/// action; a failed test's message is the tail of its output. A package that fails with no
/// failing test (a build failure) becomes a failed `PACKAGE (package)` check. Non-JSON lines
/// (the verifier's own echo, the `[stderr]` trailer) are ignored; a stream with no event at
/// all is an error.
pub fn parse_go_test_json(text: &str, file: &str) -> Result<Vec<Check>, ParseError> {
    let mut order: Vec<(String, String)> = Vec::new();
    let mut ended: BTreeMap<(String, String), CheckStatus> = BTreeMap::new();
    let mut output: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut package_failed: Vec<String> = Vec::new();
    let mut events = 0usize;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if !line.starts_with('{') {
            continue;
        }
        let ev: GoEvent = serde_json::from_str(line).map_err(|e| {
            ParseError::new(file, format!("line {}: not a go test event: {e}", n + 1))
        })?;
        events += 1;
        let pkg = ev.package.unwrap_or_default();
        let Some(test) = ev.test else {
            if ev.action == "fail" {
                package_failed.push(pkg);
            }
            continue;
        };
        let key = (pkg, test);
        let status = match ev.action.as_str() {
            "pass" => Some(CheckStatus::Pass),
            "fail" => Some(CheckStatus::Fail),
            "skip" => Some(CheckStatus::Skip),
            "output" => {
                if let Some(o) = ev.output {
                    output.entry(key.clone()).or_default().push(o);
                }
                None
            }
            _ => None,
        };
        if let Some(s) = status {
            if !ended.contains_key(&key) {
                order.push(key.clone());
            }
            ended.insert(key, s);
        }
    }
    if events == 0 {
        return Err(ParseError::new(file, "no go test -json event"));
    }
    let mut checks: Vec<Check> = order
        .iter()
        .map(|key| {
            let status = ended.get(key).copied().unwrap_or(CheckStatus::Fail);
            let message = match status {
                CheckStatus::Pass => String::new(),
                _ => go_message(output.get(key).map(Vec::as_slice).unwrap_or(&[])),
            };
            Check::new(key.1.clone(), status).with_message(message)
        })
        .collect();
    for pkg in package_failed {
        let any_test_failed = order
            .iter()
            .any(|k| k.0 == pkg && ended.get(k) == Some(&CheckStatus::Fail));
        if !any_test_failed {
            checks.push(
                Check::new(format!("{pkg} (package)"), CheckStatus::Fail)
                    .with_message("the package failed with no failing test (build failure?)"),
            );
        }
    }
    Ok(checks)
}

/// The useful lines of a test's output: not the `=== RUN` / `--- FAIL` frame lines.
fn go_message(lines: &[String]) -> String {
    lines
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty() && !l.starts_with("=== ") && !l.starts_with("--- "))
        .collect::<Vec<_>>()
        .join("\n")
}
