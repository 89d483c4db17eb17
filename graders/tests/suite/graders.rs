//! The test-script grader, outcomes, summaries, the rubric grader and grader specs.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use geode_graders::rubric::Rubric;
use geode_graders::{
    AgentEnd, CheckStatus, CommandOutput, CommandRunner, Evidence, GradeInput, Grader, GraderSpec,
    RubricGrader, TestScriptGrader, TrialOutcome, Validity, read_grade, render_checks,
    render_grade, write_grade,
};
use serde_json::json;

use super::fixture;

/// A finished trial folder with the verifier files given.
fn trial(files: &[(&str, &str)]) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for sub in ["agent", "verifier", "artifacts"] {
        std::fs::create_dir_all(d.path().join(sub)).unwrap();
    }
    for (name, text) in files {
        std::fs::write(d.path().join(name), text).unwrap();
    }
    d
}

fn input(dir: &Path) -> GradeInput {
    GradeInput::from_trial_dir(dir, None)
}

#[test]
fn tests_grader_reads_the_reward_and_the_checks() {
    let ctrf = std::fs::read_to_string(fixture("ctrf.json")).unwrap();
    let d = trial(&[
        (
            "verifier/reward.json",
            r#"{"reward": 1, "runtime_sec": 1.5}"#,
        ),
        ("verifier/reward.txt", "0"),
        ("verifier/ctrf.json", &ctrf),
        ("verifier/test-stdout.txt", "pytest output\n"),
    ]);
    let g = TestScriptGrader.grade_dir(&input(d.path()));
    // reward.json wins over reward.txt (the documented precedence).
    assert_eq!(g.primary(), Some(1.0));
    assert_eq!(g.rewards().unwrap().all().get("runtime_sec"), Some(&1.5));
    assert_eq!(g.outcome(AgentEnd::Finished), TrialOutcome::Passed);
    assert_eq!(g.outcome(AgentEnd::TimedOut), TrialOutcome::AgentTimeout);
    assert_eq!(g.outcome(AgentEnd::Cancelled), TrialOutcome::Cancelled);
    assert_eq!(g.checks().len(), 4);
    assert!(g.evidence().iter().any(
        |e| matches!(e, Evidence::File { path, .. } if path.ends_with("verifier/reward.json"))
    ));
    assert!(render_checks(g.checks()).ends_with("2 passed, 1 failed, 1 skipped\n"));
    // Stored, read back, rendered for `geode show`.
    let path = write_grade(d.path(), &g).unwrap();
    assert!(path.ends_with("grade.json"));
    assert_eq!(read_grade(&path).unwrap(), g);
    let shown = render_grade(&g);
    assert!(
        shown.starts_with("grader: tests\nreward: 1 (runtime_sec=1.5)\nPASS  "),
        "{shown}"
    );
    assert!(shown.contains("evidence: reward: "), "{shown}");
    let json = serde_json::to_value(&g).unwrap();
    assert_eq!(json["schema"], "geode.grade.v1");
    assert_eq!(json["validity"]["validity"], "valid");
}

#[test]
fn tests_grader_infrastructure_classes() {
    let cases = [
        (vec![], TrialOutcome::VerifierCrashed),
        (
            vec![("verifier/test-stdout.txt", "ran\n")],
            TrialOutcome::RewardMissing,
        ),
        (
            vec![
                ("verifier/test-stdout.txt", "ran\n"),
                ("verifier/reward.txt", "yes"),
            ],
            TrialOutcome::RewardMalformed,
        ),
        (
            vec![
                ("verifier/reward.txt", "1"),
                ("result.json", r#"{"outcome": "environment_setup_failed"}"#),
            ],
            TrialOutcome::EnvironmentSetupFailed,
        ),
        (
            vec![("result.json", r#"{"outcome": "verifier_timeout"}"#)],
            TrialOutcome::VerifierTimeout,
        ),
    ];
    for (files, want) in cases {
        let d = trial(&files);
        let g = TestScriptGrader.grade_dir(&input(d.path()));
        assert_eq!(g.primary(), None, "{want}");
        assert!(
            matches!(g.validity(), Validity::Invalid(c) if c.class() == want),
            "{want}: {g:?}"
        );
        // Infrastructure outranks the agent's own ending: it says nothing about the agent.
        assert_eq!(g.outcome(AgentEnd::TimedOut), want);
        assert!(render_grade(&g).contains(&format!("INVALID ({want})")));
    }
    // A recorded reward_missing is re-decided by re-grading (the reward is there now).
    let d = trial(&[
        ("verifier/reward.txt", "0.25"),
        ("result.json", r#"{"outcome": "reward_missing"}"#),
    ]);
    let g = TestScriptGrader.grade_dir(&input(d.path()));
    assert_eq!(
        (g.primary(), g.outcome(AgentEnd::Finished)),
        (Some(0.25), TrialOutcome::Failed)
    );
}

#[test]
fn a_broken_report_is_a_note_not_a_different_reward() {
    let broken = std::fs::read_to_string(fixture("ctrf_malformed.json")).unwrap();
    let d = trial(&[
        ("verifier/reward.txt", "1"),
        ("verifier/ctrf.json", &broken),
    ]);
    let g = TestScriptGrader.grade_dir(&input(d.path()));
    assert_eq!(g.primary(), Some(1.0));
    assert!(g.notes()[0].contains("ctrf.json"), "{:?}", g.notes());
}

#[test]
fn final_answer_comes_from_the_trajectory() {
    let doc = json!({"schema_version": "ATIF-v1.7", "steps": [
        {"step_id": 1, "source": "user", "message": "do it"},
        {"step_id": 2, "source": "agent", "message": "Total: 42"},
        {"step_id": 3, "source": "agent", "message": ""}]});
    let d = trial(&[("agent/trajectory.json", &doc.to_string())]);
    assert_eq!(input(d.path()).final_answer.as_deref(), Some("Total: 42"));
}

/// A sandbox stand-in: answers by command, records what it ran.
struct FakeRunner {
    ran: Mutex<Vec<String>>,
    fail: bool,
}

#[async_trait]
impl CommandRunner for FakeRunner {
    async fn run(&self, command: &str, _: Duration) -> Result<CommandOutput, String> {
        self.ran.lock().unwrap().push(command.to_string());
        if self.fail {
            return Err("sandbox gone".into());
        }
        Ok(CommandOutput {
            exit_code: Some(0),
            ..CommandOutput::default()
        })
    }
}

fn rubric_trial() -> tempfile::TempDir {
    let doc = json!({"steps": [
        {"source": "user", "message": "fix it"},
        {"source": "agent", "message": "ran", "tool_calls": [{"function_name": "bash", "arguments": {"command": "pytest -q"}}]},
        {"source": "agent", "message": "Done. Total: 41"}]});
    trial(&[("agent/trajectory.json", &doc.to_string())])
}

#[tokio::test]
async fn rubric_weighted_mean_with_a_runner() {
    let grader = RubricGrader::new(Rubric::load(&fixture("rubric.toml")).unwrap());
    let d = rubric_trial();
    let runner = FakeRunner {
        ran: Mutex::new(vec![]),
        fail: false,
    };
    let g = grader.grade(&input(d.path()), Some(&runner)).await;
    let by_name = |n: &str| g.checks().iter().find(|c| c.name == n).unwrap().status;
    assert_eq!(by_name("report written"), CheckStatus::Pass);
    assert_eq!(by_name("states the total"), CheckStatus::Fail);
    assert_eq!(by_name("ran the tests"), CheckStatus::Pass);
    assert_eq!(by_name("never used curl"), CheckStatus::Pass);
    // No [judge] in the rubric: skipped, not failed.
    assert_eq!(by_name("explains the cause"), CheckStatus::Skip);
    // Passed weight 2 + 1 + 1 of 5 counted.
    assert_eq!(g.primary(), Some(0.8));
    assert_eq!(
        runner.ran.lock().unwrap().as_slice(),
        ["test -s /app/report.md"]
    );
    assert!(
        g.checks()[1]
            .message
            .as_deref()
            .unwrap()
            .contains("no match")
    );
}

#[tokio::test]
async fn rubric_without_a_runner_skips_commands_and_a_broken_runner_is_infra() {
    let grader = RubricGrader::new(Rubric::load(&fixture("rubric.toml")).unwrap());
    let d = rubric_trial();
    let g = grader.grade(&input(d.path()), None).await;
    let skipped = g
        .checks()
        .iter()
        .find(|c| c.name == "report written")
        .unwrap();
    assert_eq!(skipped.status, CheckStatus::Skip);
    assert!(
        skipped
            .message
            .as_deref()
            .unwrap()
            .contains("no sandbox runner")
    );
    assert_eq!(g.primary(), Some(2.0 / 3.0));
    let broken = FakeRunner {
        ran: Mutex::new(vec![]),
        fail: true,
    };
    let g = grader.grade(&input(d.path()), Some(&broken)).await;
    assert_eq!(g.outcome(AgentEnd::Finished), TrialOutcome::VerifierCrashed);
}

#[test]
fn rubric_errors_name_the_file() {
    let cases = [
        ("", "no [[criterion]]"),
        (
            "[[criterion]]\nname = \"a\"\nkind = \"regex_answer\"\npattern = \"(\"\n",
            "pattern",
        ),
        (
            "[[criterion]]\nname = \"a\"\nkind = \"command\"\n",
            "needs `command`",
        ),
        (
            "[[criterion]]\nname = \"a\"\nkind = \"vibes\"\n",
            "is not command",
        ),
        (
            "[[criterion]]\nname = \"a\"\nweight = 0\nkind = \"judge\"\nquestion = \"q\"\n",
            "weight",
        ),
        (
            "[[criterion]]\nname = \"a\"\nkind = \"judge\"\nquestion = \"q\"\n[[criterion]]\nname = \"a\"\nkind = \"judge\"\nquestion = \"q\"\n",
            "used twice",
        ),
    ];
    for (text, want) in cases {
        let e = Rubric::parse(text, "pack/rubric.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("pack/rubric.toml: ") && e.contains(want),
            "{e}"
        );
    }
}

#[test]
fn grader_specs_parse_and_print() {
    let p = |s: &str| s.parse::<GraderSpec>();
    assert_eq!(p("tests").unwrap(), GraderSpec::Tests);
    assert_eq!(
        p("rubric:r.toml").unwrap(),
        GraderSpec::Rubric {
            path: "r.toml".into()
        }
    );
    assert_eq!(
        p("judge:scripted:/x/j.json:3").unwrap(),
        GraderSpec::Judge {
            route: "scripted:/x/j.json".into(),
            votes: 3,
            template: None
        }
    );
    assert_eq!(
        p("judge:anthropic:claude-haiku-4-5@t.md").unwrap(),
        GraderSpec::Judge {
            route: "anthropic:claude-haiku-4-5".into(),
            votes: 1,
            template: Some("t.md".into())
        }
    );
    assert_eq!(
        p("judge:scripted:/x/j.json:3").unwrap().to_string(),
        "judge:scripted:/x/j.json:3"
    );
    for bad in ["", "vibes", "rubric:", "judge:", "judge:nop:2"] {
        assert!(p(bad).is_err(), "{bad}");
    }
}
