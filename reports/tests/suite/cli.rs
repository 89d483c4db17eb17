//! The geode-report executable: formats, outputs and exit codes.

use std::process::Command;

use super::fixture::{self, RUN_A, RUN_B};

fn geode_report() -> Command {
    Command::new(env!("CARGO_BIN_EXE_geode-report"))
}

#[test]
fn report_and_compare_succeed_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = fixture::write(dir.path());
    let jobs_s = jobs.to_str().unwrap();
    for format in ["term", "md", "html", "csv"] {
        let out = geode_report()
            .args([
                "report",
                RUN_A,
                RUN_B,
                "--format",
                format,
                "--jobs-dir",
                jobs_s,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{format}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.stdout.is_empty(), "{format}");
    }
    let pq = dir.path().join("t.parquet");
    let out = geode_report()
        .args([
            "report",
            RUN_A,
            "--format",
            "parquet",
            "--jobs-dir",
            jobs_s,
            "--out",
        ])
        .arg(&pq)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(pq.is_file());
    // A run folder path works without --jobs-dir.
    let out = geode_report()
        .args(["compare", RUN_A])
        .arg(jobs.join(RUN_B))
        .args(["--format", "md", "--jobs-dir", jobs_s])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with(&format!("# GEODE comparison: {RUN_B} vs {RUN_A}")));
}

#[test]
fn errors_exit_1_and_name_the_store_and_the_runs() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = fixture::write(dir.path());
    let out = geode_report()
        .args(["report", "2025-nope", "--jobs-dir", jobs.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("geode.db") && err.contains("2025-nope"),
        "{err}"
    );
    assert!(err.contains(RUN_A) && err.contains(RUN_B), "{err}");
    // Usage errors exit 1 too; --help is a success.
    let out = geode_report()
        .args(["report", RUN_A, "--format", "pdf"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let out = geode_report().arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
}
