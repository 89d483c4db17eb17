//! Line-oriented verifier output: pytest `-rA` short summaries, TAP, `PASS:` / `FAIL:` lines.

use super::ParseError;
use crate::check::{Check, CheckStatus};

fn none_found(file: &str, what: &str) -> ParseError {
    ParseError::new(file, format!("no {what} line found"))
}

/// Split `path::test - message` (pytest's separator) into name and message.
fn name_and_message(rest: &str) -> (String, String) {
    match rest.split_once(" - ") {
        Some((n, m)) => (n.trim().to_string(), m.trim().to_string()),
        None => (rest.trim().to_string(), String::new()),
    }
}

/// pytest's `-rA` short test summary: `PASSED path::test`, `FAILED path::test - msg`,
/// `ERROR path::test - msg`, `SKIPPED [1] path:line: reason`, `XFAIL path::test - reason`
/// (an expected failure: a skip), `XPASS path::test` (an unexpected pass: a failure, as under
/// `xfail_strict`). The section is found by its header; without one, every such line counts.
pub fn parse_pytest_summary(text: &str, file: &str) -> Result<Vec<Check>, ParseError> {
    let lines: Vec<&str> = text.lines().collect();
    // Lines before the summary header can be captured output that happens to start with
    // "PASSED "; after it, only summary lines follow until the final "=== N passed ===" rule.
    let start = lines
        .iter()
        .position(|l| l.contains("short test summary info"))
        .map_or(0, |i| i + 1);
    let mut checks = Vec::new();
    for line in &lines[start..] {
        let line = line.trim_end();
        if start > 0 && line.starts_with("==") {
            break;
        }
        let (status, rest) = if let Some(r) = line.strip_prefix("PASSED ") {
            (CheckStatus::Pass, r)
        } else if let Some(r) = line.strip_prefix("FAILED ") {
            (CheckStatus::Fail, r)
        } else if let Some(r) = line.strip_prefix("ERROR ") {
            (CheckStatus::Fail, r)
        } else if let Some(r) = line.strip_prefix("XPASS ") {
            (CheckStatus::Fail, r)
        } else if let Some(r) = line.strip_prefix("XFAIL ") {
            (CheckStatus::Skip, r)
        } else if let Some(r) = line.strip_prefix("SKIPPED ") {
            checks.push(skipped_line(r));
            continue;
        } else {
            continue;
        };
        let (name, message) = name_and_message(rest);
        let message = if line.starts_with("ERROR ") && message.is_empty() {
            "error (setup or collection)".to_string()
        } else {
            message
        };
        checks.push(Check::new(name, status).with_message(message));
    }
    if checks.is_empty() {
        return Err(none_found(
            file,
            "pytest summary (PASSED/FAILED/ERROR/SKIPPED)",
        ));
    }
    Ok(checks)
}

/// `SKIPPED [1] tests/test_x.py:20: reason`: the location is the name.
fn skipped_line(rest: &str) -> Check {
    let rest = rest.trim();
    let rest = match rest.strip_prefix('[') {
        Some(r) => r.split_once(']').map_or(r, |(_, after)| after).trim(),
        None => rest,
    };
    // "path:line: reason": split at the first ": " after the location.
    let (name, reason) = match rest.split_once(": ") {
        Some((n, r)) => (n.to_string(), r.to_string()),
        None => (rest.to_string(), String::new()),
    };
    Check::new(name, CheckStatus::Skip).with_message(reason)
}

/// TAP (versions 12-14): `ok 1 - desc`, `not ok 2 - desc`, directives `# SKIP reason` and
/// `# TODO reason` (a TODO does not count against the run, so it is a skip, as TAP says). A
/// failed test's YAML block (`---` ... `...`) gives its message (the `message:` key or the first
/// line). Indented subtest lines are left to their parent line. `Bail out!` is a failed check.
pub fn parse_tap(text: &str, file: &str) -> Result<Vec<Check>, ParseError> {
    let mut checks: Vec<Check> = Vec::new();
    let mut yaml: Option<Vec<String>> = None;
    for line in text.lines() {
        if let Some(block) = yaml.as_mut() {
            let t = line.trim();
            if t == "..." {
                let message = yaml_message(block);
                yaml = None;
                if let Some(last) = checks.last_mut()
                    && last.message.is_none()
                {
                    *last = last.clone().with_message(message);
                }
            } else {
                block.push(t.to_string());
            }
            continue;
        }
        if line.trim() == "---" && line.starts_with(' ') {
            yaml = Some(Vec::new());
            continue;
        }
        if line.starts_with(' ') || line.starts_with('\t') {
            continue;
        }
        if let Some(reason) = line.strip_prefix("Bail out!") {
            checks.push(Check::new("bail out", CheckStatus::Fail).with_message(reason.trim()));
            continue;
        }
        let (ok, rest) = if let Some(r) = line.strip_prefix("not ok") {
            (false, r)
        } else if let Some(r) = line.strip_prefix("ok") {
            (true, r)
        } else {
            continue;
        };
        let rest = rest.trim_start();
        let number: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let rest = rest[number.len()..].trim_start();
        let rest = rest.strip_prefix("- ").unwrap_or(rest);
        let (desc, directive) = match rest.split_once(" # ").or_else(|| rest.split_once('#')) {
            Some((d, dir)) => (d.trim(), Some(dir.trim())),
            None => (rest.trim(), None),
        };
        let upper = directive.map(str::to_ascii_uppercase);
        let (status, message) = match (&upper, directive) {
            (Some(u), Some(d)) if u.starts_with("SKIP") => (CheckStatus::Skip, d.to_string()),
            (Some(u), Some(d)) if u.starts_with("TODO") => (CheckStatus::Skip, d.to_string()),
            _ if ok => (CheckStatus::Pass, String::new()),
            _ => (CheckStatus::Fail, String::new()),
        };
        let name = match (desc.is_empty(), number.is_empty()) {
            (false, _) => desc.to_string(),
            (true, false) => format!("test {number}"),
            (true, true) => format!("test {}", checks.len() + 1),
        };
        checks.push(Check::new(name, status).with_message(message));
    }
    if checks.is_empty() {
        return Err(none_found(file, "TAP test (ok / not ok)"));
    }
    Ok(checks)
}

fn yaml_message(block: &[String]) -> String {
    block
        .iter()
        .find_map(|l| l.strip_prefix("message:"))
        .map(|m| m.trim().trim_matches(|c| c == '\'' || c == '"').to_string())
        .or_else(|| block.first().cloned())
        .unwrap_or_default()
}

/// The built-in pack's lines: `PASS: name`, `FAIL: name` (followed by indented output, the
/// first lines of which become the message), `SKIP: name`. The `N passed, M failed` summary
/// line is the script's own count and is not a check.
pub fn parse_pass_fail_lines(text: &str, file: &str) -> Result<Vec<Check>, ParseError> {
    const MESSAGE_LINES: usize = 5;
    let mut checks: Vec<Check> = Vec::new();
    let mut detail: Vec<String> = Vec::new();
    let flush = |checks: &mut Vec<Check>, detail: &mut Vec<String>| {
        if let Some(last) = checks.last_mut()
            && last.status == CheckStatus::Fail
            && !detail.is_empty()
        {
            *last = last.clone().with_message(detail.join("\n"));
        }
        detail.clear();
    };
    for line in text.lines() {
        let status = if line.starts_with("PASS: ") {
            Some(CheckStatus::Pass)
        } else if line.starts_with("FAIL: ") {
            Some(CheckStatus::Fail)
        } else if line.starts_with("SKIP: ") {
            Some(CheckStatus::Skip)
        } else {
            None
        };
        match status {
            Some(s) => {
                flush(&mut checks, &mut detail);
                checks.push(Check::new(line[6..].trim(), s));
            }
            None if line.starts_with("    ") && detail.len() < MESSAGE_LINES => {
                detail.push(line.trim().to_string());
            }
            None if !line.starts_with("    ") => flush(&mut checks, &mut detail),
            None => {}
        }
    }
    flush(&mut checks, &mut detail);
    if checks.is_empty() {
        return Err(none_found(file, "PASS: / FAIL:"));
    }
    Ok(checks)
}
