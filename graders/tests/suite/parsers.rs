//! Each parser on real-format fixtures, malformed inputs, auto-detection and rendering.

use geode_graders::parsers::{parse_file, sniff};
use geode_graders::{Check, CheckStatus, ReportFormat, detect_checks, render_checks};

use super::fixture;

fn statuses(checks: &[Check]) -> Vec<(&str, CheckStatus)> {
    checks.iter().map(|c| (c.name.as_str(), c.status)).collect()
}

#[test]
fn ctrf_report_as_pytest_json_ctrf_writes_it() {
    let parsed = parse_file(&fixture("ctrf.json")).unwrap();
    assert_eq!(parsed.format, ReportFormat::Ctrf);
    assert_eq!(
        statuses(&parsed.checks),
        vec![
            (
                "test_outputs.py::test_output_file_exists",
                CheckStatus::Pass
            ),
            ("test_outputs.py::test_totals_by_region", CheckStatus::Fail),
            ("test_outputs.py::test_row_count", CheckStatus::Pass),
            ("test_outputs.py::test_gpu_kernel", CheckStatus::Skip),
        ]
    );
    let msg = parsed.checks[1].message.as_deref().unwrap();
    assert!(msg.starts_with("AssertionError: assert 1520.5"), "{msg}");
}

#[test]
fn junit_xml_with_failure_error_and_skip() {
    let parsed = parse_file(&fixture("junit.xml")).unwrap();
    assert_eq!(parsed.format, ReportFormat::Junit);
    assert_eq!(
        statuses(&parsed.checks),
        vec![
            ("test_outputs::test_output_file_exists", CheckStatus::Pass),
            ("test_outputs::test_totals_by_region", CheckStatus::Fail),
            ("test_outputs::test_database_schema", CheckStatus::Fail),
            ("test_outputs::test_gpu_kernel", CheckStatus::Skip),
            ("test_outputs::test_row_count", CheckStatus::Pass),
        ]
    );
    let error = parsed.checks[2].message.as_deref().unwrap();
    assert!(
        error.contains("failed on setup with \"FileNotFoundError"),
        "{error}"
    );
    assert_eq!(
        parsed.checks[3].message.as_deref(),
        Some("no GPU in this sandbox")
    );
}

#[test]
fn pytest_short_summary() {
    let parsed = parse_file(&fixture("pytest_ra.txt")).unwrap();
    assert_eq!(parsed.format, ReportFormat::PytestSummary);
    assert_eq!(
        statuses(&parsed.checks),
        vec![
            (
                "../tests/test_outputs.py::test_output_file_exists",
                CheckStatus::Pass
            ),
            (
                "../tests/test_outputs.py::test_row_count",
                CheckStatus::Pass
            ),
            ("../tests/test_outputs.py:30", CheckStatus::Skip),
            (
                "../tests/test_outputs.py::test_database_schema",
                CheckStatus::Fail
            ),
            (
                "../tests/test_outputs.py::test_totals_by_region",
                CheckStatus::Fail
            ),
        ]
    );
    assert_eq!(
        parsed.checks[2].message.as_deref(),
        Some("no GPU in this sandbox")
    );
    assert_eq!(
        parsed.checks[4].message.as_deref(),
        Some("AssertionError: assert 1520.5 == 1520.75")
    );
}

#[test]
fn go_test_json_stream() {
    let parsed = parse_file(&fixture("go_test.json")).unwrap();
    assert_eq!(parsed.format, ReportFormat::GoTestJson);
    assert_eq!(
        statuses(&parsed.checks),
        vec![
            ("TestParse", CheckStatus::Pass),
            ("TestNextRun", CheckStatus::Fail),
            ("TestDST", CheckStatus::Skip),
            ("example.com/cronnext/cmd (package)", CheckStatus::Fail),
        ]
    );
    let msg = parsed.checks[1].message.as_deref().unwrap();
    assert!(msg.starts_with("next_test.go:42:"), "{msg}");
}

#[test]
fn tap_with_yaml_skip_todo_and_subtests() {
    let parsed = parse_file(&fixture("tap.txt")).unwrap();
    assert_eq!(parsed.format, ReportFormat::Tap);
    assert_eq!(
        statuses(&parsed.checks),
        vec![
            ("parses an empty file", CheckStatus::Pass),
            ("parses headers", CheckStatus::Pass),
            ("rejects a ragged row", CheckStatus::Fail),
            ("streams large input", CheckStatus::Skip),
            ("handles CRLF line endings", CheckStatus::Skip),
            ("quotes embedded commas", CheckStatus::Pass),
        ]
    );
    assert_eq!(
        parsed.checks[2].message.as_deref(),
        Some("expected an error for row 4, got none")
    );
    assert_eq!(
        parsed.checks[3].message.as_deref(),
        Some("SKIP needs 2 GB of memory")
    );
}

#[test]
fn builtin_pack_pass_fail_lines() {
    let parsed = parse_file(&fixture("geode_checks.txt")).unwrap();
    assert_eq!(parsed.format, ReportFormat::PassFailLines);
    assert_eq!(parsed.checks.len(), 5);
    assert_eq!(parsed.checks[1].status, CheckStatus::Fail);
    let msg = parsed.checks[1].message.as_deref().unwrap();
    assert!(msg.starts_with("--- expected vs actual"), "{msg}");
    assert_eq!(parsed.checks[0].message, None);
}

#[test]
fn malformed_reports_name_the_file_and_do_not_panic() {
    for (name, want) in [
        ("ctrf_malformed.json", "not a CTRF report"),
        ("junit_malformed.xml", "not JUnit XML"),
        ("unrecognized.txt", "no known test report format"),
    ] {
        let path = fixture(name);
        let e = parse_file(&path).unwrap_err().to_string();
        assert!(
            e.contains(&path.display().to_string()) && e.contains(want),
            "{e}"
        );
    }
    // Truncated or hostile inputs of every format: errors or checks, never a panic.
    for format in [
        ReportFormat::Ctrf,
        ReportFormat::Junit,
        ReportFormat::PytestSummary,
        ReportFormat::GoTestJson,
        ReportFormat::Tap,
        ReportFormat::PassFailLines,
    ] {
        for text in [
            "",
            "{",
            "<testsuite><testcase name='x'>",
            "ok",
            "not ok #",
            "{\"Action\": 3}",
            "PASS: ",
        ] {
            let _ = format.parse(text, "x");
        }
    }
    let e = ReportFormat::GoTestJson
        .parse("{\"Action\": 3}", "verifier/test-stdout.txt")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("verifier/test-stdout.txt: line 1"), "{e}");
}

#[test]
fn sniffing_tells_the_formats_apart() {
    let read = |n: &str| std::fs::read_to_string(fixture(n)).unwrap();
    assert_eq!(sniff(&read("go_test.json")), Some(ReportFormat::GoTestJson));
    assert_eq!(sniff(&read("tap.txt")), Some(ReportFormat::Tap));
    assert_eq!(
        sniff(&read("pytest_ra.txt")),
        Some(ReportFormat::PytestSummary)
    );
    assert_eq!(
        sniff(&read("geode_checks.txt")),
        Some(ReportFormat::PassFailLines)
    );
    assert_eq!(sniff(&read("unrecognized.txt")), None);
}

#[test]
fn detection_order_ctrf_then_junit_then_stdout() {
    let d = tempfile::tempdir().unwrap();
    assert_eq!(detect_checks(d.path()).unwrap(), None);
    std::fs::copy(
        fixture("geode_checks.txt"),
        d.path().join("test-stdout.txt"),
    )
    .unwrap();
    let got = detect_checks(d.path()).unwrap().unwrap();
    assert_eq!(got.format, ReportFormat::PassFailLines);
    std::fs::copy(fixture("junit.xml"), d.path().join("junit-report.xml")).unwrap();
    assert_eq!(
        detect_checks(d.path()).unwrap().unwrap().format,
        ReportFormat::Junit
    );
    std::fs::copy(fixture("ctrf.json"), d.path().join("ctrf.json")).unwrap();
    let got = detect_checks(d.path()).unwrap().unwrap();
    assert_eq!((got.format, got.checks.len()), (ReportFormat::Ctrf, 4));
    // A broken ctrf.json is reported, not silently replaced by a weaker source.
    std::fs::copy(fixture("ctrf_malformed.json"), d.path().join("ctrf.json")).unwrap();
    let e = detect_checks(d.path()).unwrap_err().to_string();
    assert!(e.contains("ctrf.json"), "{e}");
}

#[test]
fn render_one_line_per_check_and_the_count() {
    let mut checks: Vec<Check> = (1..=18)
        .map(|i| Check::new(format!("policy {i} exists"), CheckStatus::Pass))
        .collect();
    let text = render_checks(&checks);
    assert_eq!(text.lines().count(), 19);
    assert!(text.starts_with("PASS  policy 1 exists\n"), "{text}");
    assert!(text.ends_with("18 passed, 0 failed\n"), "{text}");
    checks.push(
        Check::new("rls enabled", CheckStatus::Fail).with_message("expected on\nsecond line"),
    );
    checks.push(Check::new("gpu", CheckStatus::Skip).with_message("no gpu"));
    let text = render_checks(&checks);
    assert!(text.contains("FAIL  rls enabled: expected on\n"), "{text}");
    assert!(text.ends_with("18 passed, 1 failed, 1 skipped\n"), "{text}");
}
