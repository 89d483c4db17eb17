//! `geode view` in a real headless Chromium, driven through the DevTools protocol, over runs
//! of the built-in pack made while the page is open: the run list (which follows a run in
//! progress without a reload), a trial's transcript with a tool call's output, a filter by
//! outcome, the paired comparison of two runs, and a crucible decision. Each step asserts on the
//! DOM against what the run store and the trial files hold, and writes a screenshot (under the
//! test's folder, copied to `target/view-screenshots/` for people to look at).
//!
//! One set-up serves every step (two small runs and one small campaign on three tasks of the
//! built-in pack plus one task whose solution prints markup), so the whole is one test. The
//! tasks are ones whose images have no RUN step (the bootstrapped bases as they are), so the
//! test does not wait on package builds.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::browser::Browser;

/// A running `geode view` and the address it printed.
pub(super) struct View {
    child: Child,
    pub(super) url: String,
}

impl View {
    pub(super) fn start(dir: &Path, jobs: &Path) -> View {
        let mut child = super::common::geode_in(dir)
            .arg("view")
            .arg(jobs)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line.trim().to_string();
        assert!(
            url.starts_with("http://127.0.0.1:") && url.contains("/?token="),
            "{url:?}"
        );
        View { child, url }
    }

    /// `http://127.0.0.1:PORT`.
    pub(super) fn base(&self) -> &str {
        self.url.split("/?token=").next().unwrap()
    }

    pub(super) fn token(&self) -> &str {
        self.url.split("/?token=").nth(1).unwrap()
    }

    /// GET `path` with the token, as JSON.
    pub(super) fn api(&self, path: &str) -> Value {
        let sep = if path.contains('?') { '&' } else { '?' };
        let (status, body) = raw_get(
            self.base(),
            &format!("{path}{sep}token={}", self.token()),
            &[],
        );
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str(&body).unwrap()
    }
}

impl Drop for View {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 GET with the given extra headers (a `Host` among them replaces the real one),
/// over a plain socket so the test controls every header: the status and the body.
pub(super) fn raw_get(base: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let authority = base.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(authority).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let host = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("host"))
        .map_or(authority, |(_, v)| v);
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (k, v) in headers
        .iter()
        .filter(|(k, _)| !k.eq_ignore_ascii_case("host"))
    {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    // Chunked bodies (axum's JSON): join the chunks.
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = String::new();
        let mut rest = body;
        while let Some((size, tail)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            out.push_str(&tail[..n]);
            rest = &tail[n + 2..];
        }
        out
    } else {
        body.to_string()
    };
    (status, body)
}

/// `geode run` of `pack` into `jobs` (JSON on stdout): the run's folder.
fn run(dir: &Path, pack: &Path, jobs: &Path, model: &str, extra: &[&str]) -> PathBuf {
    let mut args = vec!["-k", "2", "-n", "2"];
    args.extend_from_slice(extra);
    super::common::run_model_with(super::common::geode_in(dir), pack, jobs, model, &args).1
}

/// A task whose reference solution prints markup and script: what an agent could put in its
/// transcript to attack the person reading it.
fn markup_task(pack: &Path) {
    let t = pack.join("view-markup");
    for sub in ["environment", "tests", "solution"] {
        std::fs::create_dir_all(t.join(sub)).unwrap();
    }
    std::fs::write(
        t.join("task.toml"),
        "schema_version = \"1.1\"\n[task]\nname = \"geode/view-markup\"\n[metadata]\n\
         category = \"viewer\"\n[verifier]\ntimeout_sec = 60\n[agent]\ntimeout_sec = 60\n\
         [environment]\nnetwork_mode = \"no-network\"\n",
    )
    .unwrap();
    std::fs::write(t.join("instruction.md"), "Print some markup.\n").unwrap();
    std::fs::write(
        t.join("environment/Dockerfile"),
        "FROM debian:bookworm-slim\nWORKDIR /app\n",
    )
    .unwrap();
    std::fs::write(
        t.join("solution/solve.sh"),
        "#!/bin/bash\necho '<img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=2</script><b>bold</b>'\n",
    )
    .unwrap();
    std::fs::write(
        t.join("tests/test.sh"),
        "#!/bin/bash\necho 'PASS: printed' > /logs/verifier/test-stdout.txt\necho 1 > /logs/verifier/reward.txt\n",
    )
    .unwrap();
}

/// Where screenshots go for people: `target/view-screenshots/`, beside the binary's profile.
fn published(name: &str) -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_geode"))
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("view-screenshots")
        .join(name)
}

fn shot(b: &mut Browser, dir: &Path, name: &str) {
    let path = dir.join("screenshots").join(name);
    b.screenshot(&path);
    let out = published(name);
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    std::fs::copy(&path, &out).unwrap();
}

fn sql_count(jobs: &Path, sql: &str, run: &str) -> i64 {
    let conn = rusqlite::Connection::open(jobs.join("geode.db")).unwrap();
    conn.query_row(sql, [run], |r| r.get(0)).unwrap()
}

fn js(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

#[test]
fn a_researcher_reads_runs_transcripts_filters_comparisons_and_decisions_in_a_browser() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let jobs = dir.join("jobs");
    std::fs::create_dir_all(&jobs).unwrap();
    let core = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tasks/geode-core");
    let pack = dir.join("pack");
    for task in ["json-flatten", "semver-sort", "cron-next"] {
        super::common::copy_tree(&core.join(task), &pack.join(task));
    }
    markup_task(&pack);

    let view = View::start(dir, &jobs);
    let mut b = Browser::start();
    b.goto(&view.url);
    b.wait_for(
        "document.body.dataset.state === 'ready' && document.querySelector('[data-test=runs]')",
        Duration::from_secs(30),
    );
    // The token leaves the address bar once the cookie holds it.
    assert_eq!(b.eval("location.search"), Value::from(""));
    b.eval("window.__noReload = 1");

    // Live: a run started now appears, and finishes, on the open page without a reload.
    let mut live = super::common::geode_in(dir)
        .arg("run")
        .arg(&pack)
        .args([
            "--model",
            "oracle",
            "-k",
            "2",
            "-n",
            "2",
            "--json",
            "--jobs-dir",
        ])
        .arg(&jobs)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    b.wait_for(
        "document.querySelector('[data-test=runs] tr[data-run]')",
        Duration::from_secs(300),
    );
    let mut out = String::new();
    live.stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(live.wait().unwrap().success(), "{out}");
    let summary: Value = serde_json::from_str(&out).unwrap();
    let oracle = PathBuf::from(summary["run_dir"].as_str().unwrap());
    let oracle_id = oracle.file_name().unwrap().to_str().unwrap().to_string();
    b.wait_for(
        &format!(
            "document.querySelector('tr[data-run={}] [data-test=finished]').textContent === '8'",
            js(&oracle_id)
        ),
        Duration::from_secs(60),
    );
    assert_eq!(
        b.eval("window.__noReload"),
        Value::from(1),
        "the page reloaded"
    );
    assert!(
        b.eval("Number(document.body.dataset.redraws || 0)")
            .as_f64()
            .unwrap()
            >= 1.0,
        "the runs list never redrew"
    );

    // Two more runs and a campaign, then the run list as a person sees it.
    let flaky = run(dir, &pack, &jobs, "flaky-oracle:0.5", &["--seed", "3"]);
    let flaky_id = flaky.file_name().unwrap().to_str().unwrap().to_string();
    let decision = campaign(dir, &pack, &jobs);
    b.route("#/");
    b.wait_for(
        &format!(
            "document.querySelectorAll('[data-test=runs] tr[data-run]').length === 4 && \
             document.querySelector('tr[data-decision={}]') && \
             document.querySelector('tr[data-run={}]')",
            js(&decision),
            js(&format!("{decision}/candidate"))
        ),
        Duration::from_secs(30),
    );
    let accuracy = b.eval(&format!(
        "document.querySelector('tr[data-run={}] [data-test=accuracy]').textContent",
        js(&oracle_id)
    ));
    let conn = rusqlite::Connection::open(jobs.join("geode.db")).unwrap();
    let ended: Vec<String> = conn
        .prepare("SELECT trial_name || ' ' || outcome || ' ' || coalesce(exception_message, '') FROM trials WHERE run_id = ?1")
        .unwrap()
        .query_map([&oracle_id], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(accuracy, Value::from("1.000 [1.000, 1.000]"), "{ended:#?}");
    shot(&mut b, dir, "runs.png");

    transcript_with_a_tool_call_s_output(&mut b, dir, &oracle, &oracle_id);
    markup_stays_text(&mut b, &oracle_id);
    filter_by_outcome(&mut b, dir, &jobs, &flaky_id);
    paired_comparison(&mut b, dir, &jobs, &oracle_id, &flaky_id);
    crucible_decision(&mut b, dir, &jobs, &decision);
}

/// A trial of the oracle: its transcript shows the bash call the oracle made and exactly the
/// output the trajectory file recorded for it.
fn transcript_with_a_tool_call_s_output(b: &mut Browser, dir: &Path, run_dir: &Path, run: &str) {
    let trial = "geode-json-flatten__0";
    b.route(&format!("#/trial?run={run}&trial={trial}"));
    b.wait_for(
        "document.querySelector('[data-test=transcript] [data-test=tool-call]')",
        Duration::from_secs(30),
    );
    let traj: Value = serde_json::from_str(
        &std::fs::read_to_string(run_dir.join(trial).join("agent/trajectory.json")).unwrap(),
    )
    .unwrap();
    let recorded: Vec<String> = traj["steps"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| {
            s["observation"]["results"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|r| r["content"].as_str().unwrap().to_string())
        .collect();
    assert!(!recorded.is_empty(), "the oracle made no tool call: {traj}");
    let shown = b.eval(
        "[...document.querySelectorAll('[data-test=tool-call]')].map(c => \
           (c.querySelector('details [data-test=tool-output]') || c.querySelector('[data-test=tool-output]')).textContent)",
    );
    let shown: Vec<String> = serde_json::from_value(shown).unwrap();
    assert_eq!(shown, recorded);
    assert_eq!(
        b.eval("document.querySelector('[data-test=tool-call]').dataset.tool"),
        Value::from("bash")
    );
    // The verifier's checks and the record beside the transcript.
    let checks = b.eval("document.querySelectorAll('[data-test=checks] tr').length");
    assert!(checks.as_u64().unwrap() >= 1, "no checks shown");
    assert_eq!(
        b.eval("document.querySelector('[data-test=outcome]').textContent"),
        Value::from("passed")
    );
    let timeline = b.eval("document.querySelector('[data-test=timeline]') !== null");
    assert_eq!(timeline, Value::from(true));
    shot(b, dir, "trial.png");
}

/// Markup an agent printed reaches the page as text: no element made from it, no script run.
fn markup_stays_text(b: &mut Browser, run: &str) {
    b.route(&format!("#/trial?run={run}&trial=geode-view-markup__0"));
    let text = b.wait_for(
        "document.querySelector('[data-test=tool-output]').textContent",
        Duration::from_secs(30),
    );
    assert!(
        text.as_str()
            .unwrap()
            .contains("<img src=x onerror=\"window.__pwned=1\"><script>"),
        "{text}"
    );
    assert_eq!(b.eval("typeof window.__pwned"), Value::from("undefined"));
    let made =
        b.eval("document.querySelectorAll('[data-test=transcript] :is(img, script, b)').length");
    assert_eq!(
        made,
        Value::from(0),
        "elements made from the agent's output"
    );
}

/// The flaky run's failed trials, picked with the page's own outcome filter: the count is the
/// store's, and every row shown failed.
fn filter_by_outcome(b: &mut Browser, dir: &Path, jobs: &Path, run: &str) {
    let failed = sql_count(
        jobs,
        "SELECT count(*) FROM trials WHERE run_id = ?1 AND outcome = 'failed'",
        run,
    );
    let passed = sql_count(
        jobs,
        "SELECT count(*) FROM trials WHERE run_id = ?1 AND outcome = 'passed'",
        run,
    );
    assert!(
        failed > 0 && passed > 0,
        "seed 3 should give both outcomes: {failed} failed, {passed} passed"
    );
    b.route(&format!("#/run?run={run}"));
    b.wait_for(
        "document.querySelectorAll('[data-test=trials] tr[data-trial]').length === 8",
        Duration::from_secs(30),
    );
    b.eval(
        "const s = document.querySelector('select[data-filter=outcome]'); s.value = 'failed'; \
         s.dispatchEvent(new Event('change')); true",
    );
    b.wait_for(
        &format!("document.querySelectorAll('[data-test=trials] tr[data-trial]').length === {failed} && location.hash.includes('outcome=failed')"),
        Duration::from_secs(30),
    );
    b.wait_for(
        "document.body.dataset.state === 'ready'",
        Duration::from_secs(30),
    );
    let outcomes = b.eval("[...document.querySelectorAll('[data-test=trials] tr[data-trial]')].map(r => r.dataset.outcome)");
    let outcomes: Vec<String> = serde_json::from_value(outcomes).unwrap();
    assert!(outcomes.iter().all(|o| o == "failed"), "{outcomes:?}");
    assert_eq!(
        b.eval("document.querySelector('[data-test=count]').textContent.split(',')[0]"),
        Value::from(format!("{failed} of 8 trials"))
    );
    shot(b, dir, "filter.png");
}

/// Two runs picked on the run list and compared: each task's delta is the candidate's mean
/// reward minus the baseline's, as the store holds them.
fn paired_comparison(b: &mut Browser, dir: &Path, jobs: &Path, baseline: &str, candidate: &str) {
    b.route("#/");
    for run in [baseline, candidate] {
        b.eval(&format!(
            "document.querySelector('input[data-pick={}]').click(); true",
            js(run)
        ));
    }
    b.eval("document.querySelector('[data-test=compare-picked]').click(); true");
    b.wait_for(
        "document.querySelectorAll('[data-test=compare-tasks] tr[data-task]').length === 4",
        Duration::from_secs(30),
    );
    let conn = rusqlite::Connection::open(jobs.join("geode.db")).unwrap();
    let mean = |run: &str, task: &str| -> f64 {
        conn.query_row(
            "SELECT avg(coalesce(reward, 0)) FROM trials WHERE run_id = ?1 AND task_id = ?2",
            [run, task],
            |r| r.get(0),
        )
        .unwrap()
    };
    let shown = b.eval(
        "[...document.querySelectorAll('[data-test=compare-tasks] tr[data-task]')].map(r => \
           [r.dataset.task, r.querySelector('[data-test=delta]').textContent])",
    );
    let shown: Vec<(String, String)> = serde_json::from_value(shown).unwrap();
    for (task, delta) in &shown {
        let want = mean(candidate, task) - mean(baseline, task);
        assert_eq!(delta, &format!("{want:.2}"), "{task}");
    }
    shot(b, dir, "compare.png");
}

/// A campaign of the same tasks, flaky-oracle against itself with a larger repair budget:
/// the decision folder's name under the jobs folder.
fn campaign(dir: &Path, pack: &Path, jobs: &Path) -> String {
    let train = dir.join("train");
    let test = dir.join("test");
    for entry in std::fs::read_dir(pack).unwrap().flatten() {
        let to = if entry.file_name() == "cron-next" {
            &test
        } else {
            &train
        };
        super::common::copy_tree(&entry.path(), &to.join(entry.file_name()));
    }
    std::fs::write(dir.join("base.toml"), "repair_budget = 0\n").unwrap();
    std::fs::write(dir.join("cand.toml"), "repair_budget = 2\n").unwrap();
    let geode = |args: &[&str]| {
        let o = super::common::geode_in(dir).args(args).output().unwrap();
        // 0 KEEP, 6 REJECT, 7 INVALID: a decision either way.
        assert!(
            matches!(o.status.code(), Some(0 | 6 | 7)),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    geode(&[
        "crucible",
        "freeze",
        "--stage",
        "train",
        "--train",
        "train",
        "--test",
        "test",
        "--baseline-scaffold",
        "base.toml",
        "--candidate-scaffold",
        "cand.toml",
        "--model",
        "flaky-oracle:0.5",
        "--seed",
        "5",
        "-k",
        "1",
        "--out",
        "contract.json",
    ]);
    let jobs_arg = jobs.to_str().unwrap();
    geode(&[
        "crucible",
        "run",
        "contract.json",
        "--allow-infeasible",
        "--pack",
        "train",
        "--baseline-scaffold",
        "base.toml",
        "--candidate-scaffold",
        "cand.toml",
        "-n",
        "2",
        "--jobs-dir",
        jobs_arg,
    ]);
    let h = std::fs::read_dir(jobs.join("crucible"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .file_name();
    format!("crucible/{}", h.to_str().unwrap())
}

/// The decision page shows the record's verdict, its reasons and its rule key by key, and
/// links the two arms' paired view.
fn crucible_decision(b: &mut Browser, dir: &Path, jobs: &Path, id: &str) {
    let record: Value = serde_json::from_str(
        &std::fs::read_to_string(jobs.join(id).join("decision.json")).unwrap(),
    )
    .unwrap();
    b.route(&format!("#/decision?id={id}"));
    b.wait_for(
        "document.querySelector('[data-test=verdict]')",
        Duration::from_secs(30),
    );
    assert_eq!(
        b.eval("document.querySelector('[data-test=verdict]').textContent"),
        record["verdict"]
    );
    let reasons = b.eval(
        "[...document.querySelectorAll('[data-test=reasons] .badge')].map(x => x.textContent)",
    );
    assert_eq!(reasons, record["reasons"]);
    let rule = b.eval(
        "Object.fromEntries([...document.querySelectorAll('[data-test=rule] > table > tr')].map(r => \
           [r.dataset.key, r.children[1].textContent]))",
    );
    for (key, value) in record["rule"].as_object().unwrap() {
        if let Some(n) = value.as_f64() {
            assert_eq!(rule[key], Value::from(n.to_string()), "{key}");
        } else if let Some(s) = value.as_str() {
            assert_eq!(rule[key], Value::from(s), "{key}");
        }
    }
    shot(b, dir, "decision.png");
    // The arms open as a paired view.
    b.eval("document.querySelector('[data-test=arms]').click(); true");
    b.wait_for(
        "document.querySelectorAll('[data-test=compare-tasks] tr[data-task]').length === 3",
        Duration::from_secs(30),
    );
}
