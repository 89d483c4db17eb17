//! `geode view`'s guards and its benchmark, over HTTP without a browser: the token (in the
//! query or the cookie it sets), the host and origin rule, names that are not the catalog's,
//! links and FIFOs planted in a trial, typed filters, a Harbor-shaped folder and a search
//! folder written by hand; and `geode bench view`'s counts against the store it made.

use std::path::Path;

use serde_json::Value;

use super::view::{View, raw_get};

/// A Harbor-shaped job folder written by hand: one trial whose agent planted a link to a host
/// file as its trajectory and a FIFO as its verifier output, and one plain trial.
fn hostile_harbor_folder(jobs: &Path) {
    let job = jobs.join("harbor-job");
    std::fs::create_dir_all(&job).unwrap();
    std::fs::write(
        job.join("config.json"),
        r#"{"job_name": "harbor-job", "n_attempts": 1, "agents": [{"name": "oracle"}],
            "datasets": [{"path": "tasks/x"}]}"#,
    )
    .unwrap();
    for (name, reward) in [("hello__AbCd123", 1.0), ("hello__ZzZz999", 0.0)] {
        let t = job.join(name);
        std::fs::create_dir_all(t.join("agent")).unwrap();
        std::fs::create_dir_all(t.join("verifier")).unwrap();
        std::fs::write(
            t.join("result.json"),
            serde_json::json!({
                "task_name": "hello", "trial_name": name,
                "started_at": "2026-01-01T00:00:00.000000", "finished_at": "2026-01-01T00:00:30.000000",
                "verifier_result": {"rewards": {"reward": reward}},
                "agent_info": {"name": "oracle", "version": "1.0"},
                "agent_result": {"n_input_tokens": 0, "cost_usd": 0.0},
                "exception_info": null,
            })
            .to_string(),
        )
        .unwrap();
    }
    // A trial whose result file is cut short, and a search folder with a torn lineage line.
    std::fs::create_dir_all(job.join("hello__Torn000")).unwrap();
    std::fs::write(job.join("hello__Torn000/result.json"), "{\"task_name\": ").unwrap();
    let search = jobs.join("search-out");
    std::fs::create_dir_all(search.join("candidates/c0001")).unwrap();
    std::fs::write(
        search.join("lineage.jsonl"),
        "{\"id\": \"c0000\", \"kind\": \"baseline\", \"champion\": \"c0000\"}\n\
         {\"id\": \"c0001\", \"kind\": \"candidate\", \"verdict\": \"KEEP\", \"champion\": \"c0001\", \"next_step\": \"promote\"}\n{\"id\": \"c00",
    )
    .unwrap();
    std::fs::write(
        search.join("candidates/c0001/decision.json"),
        r#"{"verdict": "KEEP", "stage": "train", "reasons": [], "rule": {"min_tasks": 2, "bound": {"method": "t", "value": 0.01}}}"#,
    )
    .unwrap();
    let bad = job.join("hello__ZzZz999");
    std::os::unix::fs::symlink("/etc/passwd", bad.join("agent/trajectory.json")).unwrap();
    nix::unistd::mkfifo(
        &bad.join("verifier/test-stdout.txt"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
}

/// The guards: the token (in the query or the cookie it sets), the host and origin rule, names
/// that are not the catalog's, planted links and FIFOs, and typed filters with errors that name
/// the field. Also the Harbor layout read without a store.
#[test]
fn the_viewer_answers_only_its_token_and_host_and_never_leaves_the_jobs_folder() {
    let d = tempfile::tempdir().unwrap();
    let jobs = d.path().join("jobs");
    hostile_harbor_folder(&jobs);
    let view = View::start(d.path(), &jobs);
    let (base, token) = (view.base().to_string(), view.token().to_string());
    let with = |p: &str| {
        format!(
            "{p}{}token={token}",
            if p.contains('?') { '&' } else { '?' }
        )
    };

    assert_eq!(raw_get(&base, "/api/runs", &[]).0, 403);
    assert_eq!(raw_get(&base, "/", &[]).0, 403);
    assert_eq!(raw_get(&base, "/api/runs?token=0123", &[]).0, 403);
    let cookie = format!("geode-view-{}", base.rsplit(':').next().unwrap());
    assert_eq!(
        raw_get(&base, "/api/runs", &[("Cookie", &format!("{cookie}=nope"))]).0,
        403
    );
    assert_eq!(
        raw_get(
            &base,
            "/api/runs",
            &[("Cookie", &format!("{cookie}={token}"))]
        )
        .0,
        200
    );
    assert_eq!(
        raw_get(&base, &with("/api/runs"), &[("Host", "evil.example")]).0,
        403
    );
    assert_eq!(
        raw_get(
            &base,
            &with("/api/runs"),
            &[("Origin", "http://evil.example")]
        )
        .0,
        403
    );
    assert_eq!(raw_get(&base, &with("/assets/main.js"), &[]).0, 200);

    // The Harbor job, read without a store: its trials, outcomes and rewards.
    let page = view.api("/api/trials?run=harbor-job&sort=reward");
    let items: Vec<(String, String, f64)> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["trial_name"].as_str().unwrap().into(),
                t["outcome"].as_str().unwrap().into(),
                t["reward"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        items,
        [
            ("hello__ZzZz999".into(), "failed".into(), 0.0),
            ("hello__AbCd123".into(), "passed".into(), 1.0)
        ]
    );
    let runs = view.api("/api/runs");
    assert_eq!(runs["runs"][0]["origin"], "harbor");
    assert_eq!(runs["runs"][0]["model"], "oracle");
    let problems = runs["problems"].to_string();
    assert!(
        problems.contains("hello__Torn000/result.json"),
        "{problems}"
    );
    assert!(problems.contains("lineage.jsonl: line 3"), "{problems}");
    // The search and its candidate's decision, every key of the record kept (one this build
    // has no field for, `bound`, `next_step`, included).
    assert_eq!(runs["searches"][0]["id"], "search-out");
    assert_eq!(runs["searches"][0]["entries"], 2);
    assert_eq!(runs["searches"][0]["champion"], "c0001");
    let search = view.api("/api/search?id=search-out");
    assert_eq!(search["lineage"][1]["next_step"], "promote");
    assert_eq!(search["decisions"][0], "search-out/candidates/c0001");
    let decision = view.api("/api/decision?id=search-out/candidates/c0001");
    assert_eq!(decision["decision"]["rule"]["bound"]["method"], "t");
    assert_eq!(decision["verdict"], "KEEP");

    // A planted link is no trajectory, a FIFO no output, and neither hangs the server.
    let detail = view.api("/api/trial?run=harbor-job&trial=hello__ZzZz999");
    assert_eq!(detail["has_trajectory"], false);
    assert!(detail["verifier"]["stdout"].is_null(), "{detail}");
    let (status, body) = raw_get(
        &base,
        &with("/api/trajectory?run=harbor-job&trial=hello__ZzZz999"),
        &[],
    );
    assert_eq!(status, 404, "{body}");
    assert!(!body.contains("root:"), "{body}");

    // Names not in the catalog are refused before any path is made.
    for path in [
        "/api/trial?run=harbor-job&trial=..%2F..%2Fetc",
        "/api/trial?run=..&trial=passwd",
        "/api/screenshot?run=harbor-job&trial=hello__AbCd123&file=..%2Fresult.json",
        "/api/decision?id=..%2F..%2Fetc",
    ] {
        assert_eq!(raw_get(&base, &with(path), &[]).0, 404, "{path}");
    }
    // Filters are typed: a wrong value or an unknown field is a 400 that names it.
    let (status, body) = raw_get(&base, &with("/api/trials?run=harbor-job&outcome=won"), &[]);
    assert_eq!(status, 400);
    assert!(body.contains("won"), "{body}");
    let (status, body) = raw_get(
        &base,
        &with("/api/trials?run=harbor-job&sortby=reward"),
        &[],
    );
    assert_eq!(status, 400);
    assert!(body.contains("sortby"), "{body}");

    // Off loopback only when asked; a missing folder is named.
    let o = super::common::geode_in(d.path())
        .args(["view", "--addr", "0.0.0.0:0"])
        .arg(&jobs)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--allow-remote"));
    let o = super::common::geode_in(d.path())
        .args(["view", "no-such-jobs"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no-such-jobs"));
}

/// `geode bench view` on a small synthetic folder: what each measured answer matched is what
/// the store and the trajectories hold (the timings themselves are the report's, not asserted).
#[test]
fn the_viewer_benchmark_answers_what_the_store_holds() {
    let d = tempfile::tempdir().unwrap();
    let folder = d.path().join("bench");
    let o = super::common::geode_in(d.path())
        .args(["bench", "view", "--trials", "2000", "-r", "1", "--json"])
        .arg(&folder)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    let matched = |name: &str| {
        report["measures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"].as_str().unwrap().starts_with(name))
            .unwrap()["matched"]
            .as_i64()
            .unwrap()
    };
    let conn = rusqlite::Connection::open(folder.join("geode.db")).unwrap();
    let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(matched("list trials"), 2000);
    assert_eq!(matched("list runs"), 1);
    assert_eq!(
        matched("filter outcome=failed"),
        count("SELECT count(*) FROM trials WHERE outcome = 'failed'")
    );
    assert_eq!(matched("transcript search"), 200);
}
