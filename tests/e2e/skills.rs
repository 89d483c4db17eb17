//! Skills as a user meets them: folders under `$GEODE_HOME/skills` and `.geode/skills`, listed
//! by `geode skills` and `/skills`, loaded by a scripted model in `geode exec`, and part of the
//! scaffold hash the timeline records.

use std::io::Write;
use std::path::Path;
use std::process::{Output, Stdio};

use geode_runtime::ids::SessionId;
use geode_runtime::store::timeline::{SessionTimeline, TimelineEvent};

use super::common::geode_in as geode;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A skill folder `root/name` whose script writes the skill's own token into `stamp.txt`.
fn stamp_skill(root: &Path, name: &str, description: &str, token: &str) {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("scripts")).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        format!(
            "---\nname: {name}\ndescription: {description}\nallowed-tools: bash, read_file\n---\n\
             # Stamping\nRun `sh scripts/stamp.sh` from this folder with the workspace as the \
             current directory.\n"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("scripts/stamp.sh"),
        format!("echo '{token}' > stamp.txt\n"),
    )
    .unwrap();
}

/// The script of a model that loads `stamp`, reads its script and runs it.
fn stamp_script(dir: &Path, skill_dir: &Path) {
    let script = skill_dir.join("scripts/stamp.sh");
    std::fs::write(
        dir.join("model.toml"),
        format!(
            "[[turns]]\n[[turns.tool_calls]]\nname = \"load_skill\"\ninput = {{ name = \"stamp\" }}\n\
             [[turns]]\n[[turns.tool_calls]]\nname = \"read_file\"\ninput = {{ path = \"{s}\" }}\n\
             [[turns]]\n[[turns.tool_calls]]\nname = \"bash\"\ninput = {{ command = \"sh {s}\" }}\n\
             [[turns]]\ntext = \"Stamped as the stamp skill says.\"\n",
            s = script.display()
        ),
    )
    .unwrap();
}

fn exec(dir: &Path, session: &str) -> Output {
    geode(dir)
        .args([
            "exec",
            "--model",
            "scripted:model.toml",
            "--allow",
            "dangerous",
            "--json",
            "--session-id",
            session,
            "stamp the workspace",
        ])
        .output()
        .unwrap()
}

fn scaffold_hash(dir: &Path, session: &str) -> String {
    let tl = SessionTimeline::open(dir.join("home/timeline.db")).unwrap();
    tl.rows(&SessionId::new(session.to_string()))
        .unwrap()
        .into_iter()
        .find_map(|r| match r.event {
            TimelineEvent::SessionStarted { scaffold_hash, .. } => Some(scaffold_hash),
            _ => None,
        })
        .unwrap()
}

/// The `output` of the `tool_ended` event of `tool`.
fn tool_output(out: &Output, tool: &str) -> serde_json::Value {
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["type"] == "tool_ended" && e["tool"] == tool)
        .unwrap_or_else(|| panic!("no {tool} call: {}", text(&out.stdout)))
}

#[test]
fn exec_loads_a_user_skill_reads_its_file_follows_it_and_the_hash_names_it() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().canonicalize().unwrap();
    let skills = d.join("home/skills");
    stamp_skill(&skills, "stamp", "Stamp a workspace.", "token-7f3a");
    stamp_script(&d, &skills.join("stamp"));

    let out = exec(&d, "with-skill");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let loaded = tool_output(&out, "load_skill");
    assert_eq!(loaded["is_error"], false, "{loaded}");
    let body = loaded["output"].as_str().unwrap();
    assert!(body.contains("Run `sh scripts/stamp.sh`"), "{body}");
    assert!(body.contains("scripts/stamp.sh"), "{body}");
    // The skill lies outside the workspace; read_file still reads it through the pipeline.
    let read = tool_output(&out, "read_file");
    assert_eq!(read["is_error"], false, "{read}");
    assert!(
        read["output"].as_str().unwrap().contains("token-7f3a"),
        "{read}"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("stamp.txt")).unwrap(),
        "token-7f3a\n"
    );
    let with = scaffold_hash(&d, "with-skill");

    // A file beside SKILL.md changes: same prompt, another scaffold hash.
    std::fs::write(
        skills.join("stamp/scripts/stamp.sh"),
        "echo 'token-8b1c' > stamp.txt\n",
    )
    .unwrap();
    let out = exec(&d, "changed-skill");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(d.join("stamp.txt")).unwrap(),
        "token-8b1c\n"
    );
    let changed = scaffold_hash(&d, "changed-skill");
    assert_ne!(changed, with);

    // Without skills the model's load_skill is no tool of the session.
    std::fs::remove_dir_all(&skills).unwrap();
    let out = exec(&d, "no-skill");
    let refused = tool_output(&out, "load_skill");
    assert_eq!(refused["is_error"], true, "{refused}");
    let without = scaffold_hash(&d, "no-skill");
    assert!(without != with && without != changed);
}

#[test]
fn skills_list_show_and_slash_skills_see_user_and_project_skills() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    stamp_skill(&d.join("home/skills"), "stamp", "User stamp.", "u");
    stamp_skill(&d.join("home/skills"), "lint", "Lint the code.", "l");
    stamp_skill(&d.join(".geode/skills"), "stamp", "Project stamp.", "p");

    let out = geode(d).args(["skills", "list"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed = text(&out.stdout);
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 3, "{listed}");
    assert!(lines[0].starts_with("lint  Lint the code."), "{listed}");
    assert!(lines[1].starts_with("stamp  Project stamp."), "{listed}");
    assert!(lines[2].starts_with("skills hash "), "{listed}");
    assert!(
        text(&out.stderr).contains("shadows"),
        "{}",
        text(&out.stderr)
    );

    let out = geode(d).args(["skills", "show", "stamp"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains("allowed-tools: bash, read_file"), "{shown}");
    assert!(shown.contains("  scripts/stamp.sh"), "{shown}");
    assert!(shown.contains("# Stamping"), "{shown}");
    let out = geode(d).args(["skills", "show", "nope"]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("lint, stamp"),
        "{}",
        text(&out.stderr)
    );

    // A malformed skill is an error naming its file and field.
    stamp_skill(&d.join(".geode/skills"), "bad", "", "b");
    let out = geode(d).args(["skills", "list"]).output().unwrap();
    assert!(!out.status.success());
    let e = text(&out.stderr);
    assert!(
        e.contains("bad/SKILL.md") && e.contains("description"),
        "{e}"
    );
    std::fs::remove_dir_all(d.join(".geode/skills/bad")).unwrap();

    std::fs::write(d.join("model.toml"), "[[turns]]\ntext = \"hi\"\n").unwrap();
    let mut child = geode(d)
        .args(["--local", "--model", "scripted:model.toml"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _ = child.stdin.take().unwrap().write_all(b"/skills\n/exit\n");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains("stamp  Project stamp."), "{shown}");
    assert!(shown.contains("lint  Lint the code."), "{shown}");
}

/// A task from debian:bookworm-slim whose image carries a `stamp` skill at `/skills` and whose
/// verifier passes only if `/app/stamp.txt` holds the token that exists only in that skill.
fn task_with_a_skill(task: &Path) {
    let env = task.join("environment");
    stamp_skill(
        &env.join("skills"),
        "stamp",
        "Stamp a workspace.",
        "token-in-image",
    );
    for (rel, text) in [
        (
            "task.toml",
            "version = \"1.0\"\n[agent]\ntimeout_sec = 120.0\n[verifier]\ntimeout_sec = 60.0\n\
             [environment]\nskills_dir = \"/skills\"\n",
        ),
        ("instruction.md", "Stamp the workspace /app.\n"),
        (
            "environment/Dockerfile",
            "FROM debian:bookworm-slim\nWORKDIR /app\nCOPY skills /skills\n",
        ),
        (
            "solution/solve.sh",
            "#!/bin/sh\nsh /skills/stamp/scripts/stamp.sh\n",
        ),
        (
            "tests/test.sh",
            "#!/bin/sh\nif [ \"$(cat /app/stamp.txt)\" = token-in-image ]; then echo 1; \
             else echo 0; fi > /logs/verifier/reward.txt\n",
        ),
    ] {
        std::fs::create_dir_all(task.join(rel).parent().unwrap()).unwrap();
        std::fs::write(task.join(rel), text).unwrap();
    }
}

#[test]
fn a_tasks_skills_dir_reaches_the_agent_in_a_sandboxed_run_and_host_skills_do_not() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    task_with_a_skill(&d.join("pack/stamp-task"));
    // A skill of this machine's user: a benchmark trial must not see it.
    stamp_skill(
        &d.join("home/skills"),
        "host-only",
        "Not for trials.",
        "host",
    );
    std::fs::write(
        d.join("model.toml"),
        "[[turns]]\n[[turns.tool_calls]]\nname = \"load_skill\"\ninput = { name = \"stamp\" }\n\
         [[turns.tool_calls]]\nname = \"load_skill\"\ninput = { name = \"host-only\" }\n\
         [[turns]]\n[[turns.tool_calls]]\nname = \"read_file\"\n\
         input = { path = \"/skills/stamp/scripts/stamp.sh\" }\n\
         [[turns]]\n[[turns.tool_calls]]\nname = \"bash\"\n\
         input = { command = \"sh /skills/stamp/scripts/stamp.sh\" }\n\
         [[turns]]\ntext = \"Stamped as the stamp skill says.\"\n",
    )
    .unwrap();
    let route = format!("scripted:{}", d.join("model.toml").display());
    let (summary, run) = super::common::run_model_with(
        geode(d),
        &d.join("pack"),
        &d.join("jobs"),
        &route,
        &["-k", "1"],
    );
    let trial = super::common::trial_result(&run, "stamp-task__0");
    assert_eq!(trial["outcome"], "passed", "{summary}\n{trial}");
    let notes = trial["notes"].to_string();
    assert!(notes.contains("1 skill(s), skills hash"), "{notes}");
    // The trial's scaffold hash names the task's skills; the run's (lock.json) cannot.
    let lock: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("lock.json")).unwrap()).unwrap();
    let run_hash = lock["scaffold_hash"].as_str().unwrap();
    assert_eq!(
        trial["scaffold_hash"].as_str().unwrap().len(),
        64,
        "{trial}"
    );
    assert_ne!(trial["scaffold_hash"].as_str(), Some(run_hash), "{trial}");
    let trajectory =
        std::fs::read_to_string(run.join("stamp-task__0/agent/trajectory.json")).unwrap();
    assert!(
        trajectory.contains("Run `sh scripts/stamp.sh`"),
        "{trajectory}"
    );
    assert!(
        trajectory.contains("token-in-image"),
        "read_file read the skill: {trajectory}"
    );
    assert!(
        trajectory.contains("no skill named \\\"host-only\\\""),
        "{trajectory}"
    );
}
