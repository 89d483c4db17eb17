//! The HTML report is well-formed and self-contained: balanced tags (every <svg> closed), one
//! document, and no URL or external resource of any kind.

use geode_reports::{TextFormat, TrialColumns, build, load, render, resolve_run};

use super::fixture::{self, RUN_A, RUN_B};

const VOID: [&str; 6] = ["meta", "br", "hr", "img", "input", "link"];

/// Checks that tags nest and close; returns how many of each element were opened.
fn check_tags(html: &str) -> std::collections::BTreeMap<String, usize> {
    let mut stack: Vec<String> = Vec::new();
    let mut seen = std::collections::BTreeMap::new();
    let mut rest = html;
    while let Some(i) = rest.find('<') {
        rest = &rest[i + 1..];
        let end = rest.find('>').expect("unterminated tag");
        let tag = &rest[..end];
        rest = &rest[end + 1..];
        if tag.starts_with('!') {
            continue; // <!DOCTYPE html>
        }
        let self_closing = tag.ends_with('/');
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        assert!(!name.is_empty(), "bad tag <{tag}>");
        if let Some(closing) = tag.strip_prefix('/') {
            let open = stack
                .pop()
                .unwrap_or_else(|| panic!("</{closing}> closes nothing"));
            assert_eq!(open, name, "<{open}> closed by </{name}>");
        } else {
            *seen.entry(name.clone()).or_insert(0) += 1;
            if !self_closing && !VOID.contains(&name.as_str()) {
                stack.push(name);
            }
        }
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
    seen
}

fn html_of(runs: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let jobs = fixture::write(dir.path());
    let refs: Vec<_> = runs.iter().map(|r| resolve_run(r, &jobs)).collect();
    render::report(
        &build(&load(&refs, TrialColumns::Report).unwrap()).unwrap(),
        TextFormat::Html,
    )
}

#[test]
fn html_report_is_well_formed_with_four_plots() {
    let html = html_of(&[RUN_A, RUN_B]);
    assert!(html.starts_with("<!DOCTYPE html>"));
    let seen = check_tags(&html);
    assert_eq!(seen.get("html"), Some(&1));
    // Per-task rewards, forest plot, cost vs accuracy, durations.
    assert_eq!(seen.get("svg"), Some(&4), "{seen:?}");
    assert!(seen.get("table").copied().unwrap_or(0) >= 10);
}

#[test]
fn html_report_has_no_external_resources() {
    for runs in [&[RUN_A][..], &[RUN_A, RUN_B][..]] {
        let html = html_of(runs).to_ascii_lowercase();
        for needle in [
            "http:", "https:", "//", "src=", "href=", "url(", "@import", "<script", "<link",
        ] {
            assert!(!html.contains(needle), "found {needle:?}");
        }
    }
}

#[test]
fn one_run_html_has_no_forest_plot() {
    let seen = check_tags(&html_of(&[RUN_A]));
    assert_eq!(seen.get("svg"), Some(&3));
}
