//! What a person's session is told about where it runs: the working directory, the operating
//! system and the state of the git checkout, as Claude Code and Codex tell their models. Read
//! once when a session starts, so every round of the session sends the same prompt; benchmark
//! trials leave it out, since a trial's folder and a checkout's state are not part of the task.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long `git status` may take before the prompt says the state is unknown: a huge
/// checkout must not hold up the first prompt.
const GIT_STATUS_BUDGET: Duration = Duration::from_secs(2);

/// The `<dynamic_context>` lines for a session rooted at `root`.
pub fn describe_environment(root: &Path) -> Vec<String> {
    vec![
        format!("cwd: {}", root.display()),
        format!("os: {}", operating_system()),
        format!("git: {}", git_state(root)),
    ]
}

/// `PRETTY_NAME` of os-release when there is one, else the target's OS name.
fn operating_system() -> String {
    let pretty = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_string())
        });
    match pretty {
        Some(name) => format!("{} ({})", std::env::consts::OS, name),
        None => std::env::consts::OS.to_string(),
    }
}

fn git_state(root: &Path) -> String {
    let child = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["status", "--porcelain=v1", "--branch"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else {
        return "unknown (git is not installed)".into();
    };
    let deadline = Instant::now() + GIT_STATUS_BUDGET;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return "unknown (git status took too long)".into();
            }
        }
    }
    match child.wait_with_output() {
        Ok(out) if out.status.success() => summarize_status(&String::from_utf8_lossy(&out.stdout)),
        _ => "not a repository".into(),
    }
}

/// `## main...origin/main [ahead 1]` plus one line per changed path, in words.
fn summarize_status(porcelain: &str) -> String {
    let mut lines = porcelain.lines();
    let branch = lines
        .next()
        .and_then(|l| l.strip_prefix("## "))
        .map(|b| b.split("...").next().unwrap_or(b))
        .map(|b| match b.strip_prefix("No commits yet on ") {
            Some(name) => format!("{name} (no commits yet)"),
            None => b.to_string(),
        })
        .unwrap_or_else(|| "unknown".into());
    let changed = lines.filter(|l| !l.is_empty()).count();
    match changed {
        0 => format!("branch {branch}, clean"),
        1 => format!("branch {branch}, 1 changed path"),
        n => format!("branch {branch}, {n} changed paths"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_is_put_in_words() {
        assert_eq!(summarize_status("## main\n"), "branch main, clean");
        assert_eq!(
            summarize_status("## dev...origin/dev [ahead 2]\n M a.rs\n?? b.rs\n"),
            "branch dev, 2 changed paths"
        );
        assert_eq!(
            summarize_status("## No commits yet on main\n?? x\n"),
            "branch main (no commits yet), 1 changed path"
        );
    }

    #[test]
    fn a_folder_outside_git_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let lines = describe_environment(dir.path());
        assert_eq!(lines[0], format!("cwd: {}", dir.path().display()));
        assert!(lines[1].starts_with(&format!("os: {}", std::env::consts::OS)));
        assert_eq!(lines[2], "git: not a repository");
    }

    #[test]
    fn a_checkout_names_its_branch_and_counts_its_changes() {
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            let ok = Command::new("git")
                .arg("-C")
                .arg(dir.path())
                .args(args)
                .status()
                .unwrap()
                .success();
            assert!(ok, "git {args:?}");
        };
        git(&["init", "-q", "-b", "trunk"]);
        std::fs::write(dir.path().join("a.txt"), "a").unwrap();
        std::fs::write(dir.path().join("b.txt"), "b").unwrap();
        assert_eq!(
            describe_environment(dir.path())[2],
            "git: branch trunk (no commits yet), 2 changed paths"
        );
    }
}
