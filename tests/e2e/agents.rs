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
        doc["schema_version"].as_str().unwrap().starts_with("ATIF-v1"),
        "{doc:#}"
    );
    let steps = doc["steps"].as_array().unwrap();
    assert!(
        steps.iter().all(|s| matches!(
            s["source"].as_str(),
            Some("user" | "agent" | "system")
        )),
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

    let other = tempfile::tempdir().unwrap();
    let talking = script(other.path(), "talking", None, finish(agent));
    let (_, trial) = run_agent(other.path(), agent, &talking, 0);
    assert_eq!(reward(&trial), 0.0, "answered without acting: {}", log(&trial));
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
    cmd.env("ANTHROPIC_API_KEY", &secret).env("OPENAI_API_KEY", &secret);
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
        assert!(out.contains(&format!("unreachable: {target}")), "{target}: {out}");
    }
    assert!(!out.contains("reached: "), "{out}");
    let files = out.split("files:").nth(1).unwrap_or_default();
    assert!(files.trim().is_empty(), "files with a key's prefix: {files}");
    assert!(!out.contains(&secret), "the real key reached the agent: {out}");
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
