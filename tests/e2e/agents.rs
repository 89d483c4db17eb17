//! Third-party agents under test (`geode run --agent`): Claude Code, Codex CLI and
//! mini-swe-agent, each installed from its registry as a layer over the task's image, driven by
//! a `scripted` model behind the trial's gateway; a `command:` agent probing what it can reach.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::common::{copy_tree, geode_in, run_model_ending, trial_result};

/// The task every agent solves: a shell script, one command of the agent's writes it.
const TASK: &str = "largest-files";

/// Agents' layers, installed once per machine (as the image store is), not once per test.
fn agents_cache() -> PathBuf {
    PathBuf::from("/var/cache/geode-test/agents")
}

/// `geode` in `dir` with the shared agents' cache.
fn geode(dir: &Path) -> Command {
    let mut c = geode_in(dir);
    c.env("GEODE_AGENTS", agents_cache());
    c
}

/// A pack of the one task, in `dir/pack`.
fn one_task_pack(dir: &Path) -> PathBuf {
    let core = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tasks/geode-core");
    let pack = dir.join("pack");
    copy_tree(&core.join(TASK), &pack.join(TASK));
    pack
}

/// The task's reference solution as one shell command.
fn solution_command() -> String {
    let core = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tasks/geode-core");
    std::fs::read_to_string(core.join(TASK).join("solution/solve.sh")).unwrap()
}

/// How an agent is told the work is done: a text reply, or (mini-swe-agent) its submit
/// command.
fn finish(agent: &str) -> serde_json::Value {
    if agent == "mini-swe-agent" {
        serde_json::json!({"tool_calls": [{"name": "bash",
            "input": {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}]})
    } else {
        serde_json::json!({"text": "Done: /app/largest.sh is written."})
    }
}

/// A script whose first turn calls `tool` with `input`, then finishes; or, with no tool, one
/// that only finishes (says it is done without acting).
fn script(
    dir: &Path,
    name: &str,
    call: Option<(&str, serde_json::Value)>,
    finish: serde_json::Value,
) -> PathBuf {
    let mut turns = Vec::new();
    if let Some((tool, input)) = call {
        turns.push(serde_json::json!({"tool_calls": [{"name": tool, "input": input}]}));
    }
    turns.push(finish);
    let path = dir.join(format!("{name}.json"));
    let doc = serde_json::json!({"schema": "geode.script.v1", "turns": turns, "repeat_last": true});
    std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    path
}

/// Runs the pack with `agent` on `script`, expecting exit `code`; returns the trial's folder.
fn run_agent(dir: &Path, agent: &str, script: &Path, code: i32) -> (serde_json::Value, PathBuf) {
    let pack = one_task_pack(dir);
    let model = format!("scripted:{}", script.display());
    let (summary, run_dir) = run_model_ending(
        geode(dir),
        &pack,
        &dir.join("jobs"),
        &model,
        &["--agent", agent],
        code,
    );
    let trial = std::fs::read_dir(&run_dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("result.json").is_file())
        .unwrap_or_else(|| panic!("no trial folder in {}", run_dir.display()));
    (summary, trial)
}

fn reward(trial: &Path) -> f64 {
    let name = trial.file_name().unwrap().to_string_lossy().into_owned();
    let result = trial_result(trial.parent().unwrap(), &name);
    result["verifier_result"]["rewards"]["reward"]
        .as_f64()
        .unwrap_or_else(|| panic!("no reward in {result:#}"))
}

/// The trajectory is ATIF, made from the gateway's records: the agent's step calls the tool
/// the script named, and every step's source is one ATIF knows.
fn check_trajectory(trial: &Path, tool: &str) {
    let text = std::fs::read_to_string(trial.join("agent/trajectory.json")).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(
        doc["schema_version"]
            .as_str()
            .unwrap()
            .starts_with("ATIF-v1"),
        "{doc:#}"
    );
    let steps = doc["steps"].as_array().unwrap();
    assert!(
        steps
            .iter()
            .all(|s| matches!(s["source"].as_str(), Some("user" | "agent" | "system"))),
        "{doc:#}"
    );
    let called: Vec<&str> = steps
        .iter()
        .flat_map(|s| s["tool_calls"].as_array().into_iter().flatten())
        .filter_map(|c| c["function_name"].as_str())
        .collect();
    assert!(called.contains(&tool), "{called:?} in {doc:#}");
    let records = std::fs::read_to_string(trial.join("agent/gateway.jsonl")).unwrap();
    assert!(records.lines().count() >= 2, "{records}");
}

/// One agent: solves the task when its script acts, fails it when the script only talks.
fn solves_and_fails(agent: &str, tool: &str, input: serde_json::Value, acted_note: &str) {
    let dir = tempfile::tempdir().unwrap();
    let acting = script(dir.path(), "acting", Some((tool, input)), finish(agent));
    let (_, trial) = run_agent(dir.path(), agent, &acting, 0);
    let log = |t: &Path| {
        let mut text = String::new();
        for entry in std::fs::read_dir(t.join("agent")).unwrap().flatten() {
            if entry.file_name().to_string_lossy().ends_with(".txt") {
                text.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
            }
        }
        text
    };
    assert_eq!(reward(&trial), 1.0, "{acted_note}: {}", log(&trial));
    check_trajectory(&trial, tool);
    // Harbor's own models read the job: its config names the agent as Harbor does, and the
    // trajectory built from the gateway's records is a valid `Trajectory`.
    let python = super::harbor::harbor_python();
    let (ok, report) = super::harbor::harbor_check(
        &python,
        &dir.path().join("pack"),
        &dir.path().join("jobs"),
        &[],
    );
    assert!(ok, "{report}");
    assert_eq!(
        super::harbor::counted(&report, "Trajectory"),
        (1, 1),
        "{report}"
    );
    let config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(trial.parent().unwrap().join("config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(config["agents"][0]["name"], agent, "{config:#}");

    let other = tempfile::tempdir().unwrap();
    let talking = script(other.path(), "talking", None, finish(agent));
    let (_, trial) = run_agent(other.path(), agent, &talking, 0);
    assert_eq!(
        reward(&trial),
        0.0,
        "answered without acting: {}",
        log(&trial)
    );
}

#[test]
fn claude_code_solves_a_task_through_the_gateway_and_fails_it_without_acting() {
    solves_and_fails(
        "claude-code",
        "Bash",
        serde_json::json!({"command": solution_command(), "description": "write the script"}),
        "claude-code",
    );
}

#[test]
fn codex_solves_a_task_through_the_gateway_and_fails_it_without_acting() {
    solves_and_fails(
        "codex",
        "exec_command",
        serde_json::json!({"cmd": solution_command(), "tty": false}),
        "codex",
    );
}

#[test]
fn mini_swe_agent_solves_a_task_through_the_gateway_and_fails_it_without_acting() {
    solves_and_fails(
        "mini-swe-agent",
        "bash",
        // mini-swe-agent runs its commands with /bin/sh (dash here): the bash script is fed
        // to bash.
        serde_json::json!({"command": format!("bash <<'GEODE_SOLVE'\n{}\nGEODE_SOLVE", solution_command())}),
        "mini-swe-agent",
    );
}

/// A `command:` agent in a no-network task reaches the gateway and nothing else, and finds the
/// real API key of GEODE's environment nowhere: not in its environment, not in its files.
#[test]
fn a_command_agent_reaches_only_the_gateway_and_never_sees_the_real_key() {
    let dir = tempfile::tempdir().unwrap();
    let secret = format!("sk-ant-e2e-{}", uuid::Uuid::new_v4().simple());
    // A host service the agent must not reach, on the host's loopback and its own address.
    let host_listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let host_port = host_listener.local_addr().unwrap().port();
    let probe = format!(
        r#"
port=${{GEODE_GATEWAY_URL##*:}}
exec 3<>/dev/tcp/127.0.0.1/$port && printf 'GET /v1/models HTTP/1.1\r\nHost: x\r\nx-api-key: %s\r\nConnection: close\r\n\r\n' "$GEODE_GATEWAY_TOKEN" >&3 && head -c 200 <&3 | head -1 | sed 's/^/gateway: /'
for target in 127.0.0.1/{host_port} 10.0.2.2/{host_port} 1.1.1.1/80; do
  if timeout 3 bash -c "exec 4<>/dev/tcp/$target" 2>/dev/null; then echo "reached: $target"; else echo "unreachable: $target"; fi
done
echo "env:"; env
echo "proc:"; cat /proc/*/environ 2>/dev/null | tr '\0' '\n'
echo "files:"; grep -rIl --exclude-dir=proc --exclude-dir=sys -e "$GEODE_PROBE_PATTERN" / 2>/dev/null | head
true
"#
    );
    let pack = one_task_pack(dir.path());
    let talking = script(dir.path(), "talking", None, finish("command"));
    let mut cmd = geode(dir.path());
    cmd.env("ANTHROPIC_API_KEY", &secret)
        .env("OPENAI_API_KEY", &secret);
    // `sh -c` is dash in this image, and /dev/tcp is bash's: the probe goes to bash whole.
    let probe = format!("GEODE_PROBE_PATTERN=sk-ant-e2e-\n{probe}");
    let encoded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, probe);
    let agent = format!("command:echo {encoded} | base64 -d | bash");
    let (_, run_dir) = run_model_ending(
        cmd,
        &pack,
        &dir.path().join("jobs"),
        &format!("scripted:{}", talking.display()),
        &["--agent", &agent],
        0,
    );
    let trial = std::fs::read_dir(&run_dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("result.json").is_file())
        .unwrap();
    let out = std::fs::read_to_string(trial.join("agent/command.stdout.txt")).unwrap();
    assert!(out.contains("gateway: HTTP/1.1 200"), "{out}");
    for target in [
        format!("127.0.0.1/{host_port}"),
        format!("10.0.2.2/{host_port}"),
        "1.1.1.1/80".into(),
    ] {
        assert!(
            out.contains(&format!("unreachable: {target}")),
            "{target}: {out}"
        );
    }
    assert!(!out.contains("reached: "), "{out}");
    let files = out.split("files:").nth(1).unwrap_or_default();
    assert!(
        files.trim().is_empty(),
        "files with a key's prefix: {files}"
    );
    assert!(
        !out.contains(&secret),
        "the real key reached the agent: {out}"
    );
    // Nor did the gateway's records or anything else of the trial take it.
    for entry in walkdir::WalkDir::new(&run_dir).into_iter().flatten() {
        if entry.file_type().is_file() {
            let bytes = std::fs::read(entry.path()).unwrap();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(&secret),
                "{} holds the real key",
                entry.path().display()
            );
        }
    }
    drop(host_listener);
}

/// A task of `pack` from debian:bookworm-slim whose test passes when `/app/out.txt` says `want`.
fn echo_task(pack: &Path, name: &str, family: &str, want: &str) {
    let dir = pack.join(name);
    let files = [
        (
            "task.toml",
            format!(
                "schema_version = \"1.1\"\n[task]\nname = \"e2e/{name}\"\n[metadata]\n\
                 category = \"{family}\"\n[agent]\ntimeout_sec = 120\n[verifier]\n\
                 timeout_sec = 60\n[environment]\nnetwork_mode = \"no-network\"\n"
            ),
        ),
        ("instruction.md", format!("Write {want} to /app/out.txt.\n")),
        (
            "environment/Dockerfile",
            "FROM debian:bookworm-slim\nWORKDIR /app\n".into(),
        ),
        (
            "solution/solve.sh",
            format!("#!/bin/sh\necho {want} > /app/out.txt\n"),
        ),
        (
            "tests/test.sh",
            format!(
                "#!/bin/sh\nif [ \"$(cat /app/out.txt 2>/dev/null)\" = {want} ]; then echo 1; \
                 else echo 0; fi > /logs/verifier/reward.txt\n"
            ),
        ),
    ];
    for (rel, text) in files {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

/// The crucible decides between GEODE's own agent and Claude Code as arms of one contract: the
/// agents are in the contract (its hash covers them), both arms run on the same pack and
/// seeds, and Claude Code, whose script acts, is kept over GEODE, whose script only talks.
#[test]
fn a_crucible_campaign_decides_between_geode_and_claude_code_arms() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for split in ["train", "test"] {
        // Five tasks the acting script solves, one it does not, in two families.
        for i in 0..6 {
            let want = if i == 5 { "other" } else { "done" };
            let family = if i % 2 == 0 { "even" } else { "odd" };
            echo_task(&d.join(split), &format!("{split}-{i}"), family, want);
        }
    }
    let talking = script(d, "talking", None, finish("claude-code"));
    let acting = script(
        d,
        "acting",
        Some((
            "Bash",
            serde_json::json!({"command": "echo done > /app/out.txt", "description": "answer"}),
        )),
        finish("claude-code"),
    );
    let geode_cmd = |args: &[&str]| {
        let out = geode(d).args(args).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    std::fs::write(d.join("scaffold.toml"), "repair_budget = 0\n").unwrap();
    let base_model = format!("scripted:{}", talking.display());
    let cand_model = format!("scripted:{}", acting.display());
    let freeze = |out: &str, candidate_agent: &str| {
        let (code, printed, err) = geode_cmd(&[
            "crucible",
            "freeze",
            "--train",
            "train",
            "--test",
            "test",
            "--stage",
            "train",
            "--baseline-scaffold",
            "scaffold.toml",
            "--candidate-scaffold",
            "scaffold.toml",
            "--model",
            &base_model,
            "--candidate-model",
            &cand_model,
            "--candidate-agent",
            candidate_agent,
            "-k",
            "1",
            "--min-tasks",
            "6",
            "--min-families",
            "2",
            // The test split is never opened at the train stage; these tiny tasks look alike.
            "--allow-overlap",
            "--out",
            out,
        ]);
        assert_eq!(code, 0, "freeze: {err}");
        let hash = printed
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string();
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d.join(out)).unwrap()).unwrap();
        (hash, doc)
    };
    let (hash, contract) = freeze("cc.json", "claude-code");
    assert!(
        contract["candidate"]["agent"]
            .as_str()
            .is_some_and(|a| a.starts_with("claude-code@")),
        "the contract names the agent: {contract:#}"
    );
    assert!(contract["baseline"].get("agent").is_none(), "{contract:#}");
    // The agent is part of what the contract's hash covers.
    let (other, _) = freeze("codex.json", "codex");
    assert!(hash.len() == 64 && hash != other, "{hash} {other}");
    let (code, out, err) = geode_cmd(&[
        "crucible",
        "run",
        "cc.json",
        "--baseline-scaffold",
        "scaffold.toml",
        "--candidate-scaffold",
        "scaffold.toml",
        "--pack",
        "train",
        "--jobs-dir",
        "jobs",
    ]);
    assert_eq!(code, 0, "expected KEEP:\n{out}\n{err}");
    assert!(out.contains("verdict KEEP"), "{out}");
    // The candidate's trials ran Claude Code (its records), the baseline's GEODE (a timeline).
    let mut claude_trials = 0;
    let mut geode_trials = 0;
    for entry in walkdir::WalkDir::new(d.join("jobs")).into_iter().flatten() {
        match entry.file_name().to_str() {
            Some("claude-code.stdout.txt") => claude_trials += 1,
            Some("timeline.db") => geode_trials += 1,
            _ => {}
        }
    }
    assert_eq!((claude_trials, geode_trials), (6, 6), "{out}");
    // The campaign's run store says each arm's agent, where the reports and the viewer read it.
    let store = walkdir::WalkDir::new(d.join("jobs"))
        .into_iter()
        .flatten()
        .find(|e| e.file_name() == "geode.db")
        .unwrap();
    let conn = rusqlite::Connection::open(store.path()).unwrap();
    let agent = |run: &str| -> Option<String> {
        conn.query_row(
            "SELECT json_extract(config, '$.agent') FROM runs WHERE run_id = ?1",
            [run],
            |r| r.get(0),
        )
        .unwrap()
    };
    assert_eq!(agent("baseline"), None);
    assert!(agent("candidate").is_some_and(|a| a.starts_with("claude-code@")));
}
