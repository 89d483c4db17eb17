//! The LLM-judge grader with scripted judges (offline): majorities, ties, malformed votes.

use std::path::Path;

use geode_graders::judge::{VoteOutcome, fill};
use geode_graders::rubric::Rubric;
use geode_graders::{
    AgentEnd, CheckStatus, Evidence, GradeInput, Grader, GraderSpec, JudgeGrader, RubricGrader,
    TrialOutcome, Votes, build_grader,
};
use geode_runtime::model::http::RouteOptions;
use serde_json::json;

use super::fixture;

fn opts() -> RouteOptions {
    RouteOptions::with_env(geode_runtime::model::credentials::Env::empty())
}

fn judge(script: &str, votes: u32) -> JudgeGrader {
    let route = format!("scripted:{}", fixture(script).display());
    JudgeGrader::from_route(&route, Votes::new(votes).unwrap(), &opts()).unwrap()
}

fn trial() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("agent")).unwrap();
    let doc = json!({"steps": [{"source": "user", "message": "sum by region"},
                               {"source": "agent", "message": "West: 1520.75"}]});
    std::fs::write(d.path().join("agent/trajectory.json"), doc.to_string()).unwrap();
    d
}

fn input(dir: &Path) -> GradeInput {
    GradeInput::from_trial_dir(dir, None)
}

#[tokio::test]
async fn two_passes_and_one_malformed_vote_pass() {
    let d = trial();
    let g = judge("judge_2pass_1malformed.json", 3)
        .grade(&input(d.path()), None)
        .await;
    assert_eq!(g.outcome(AgentEnd::Finished), TrialOutcome::Passed);
    let statuses: Vec<CheckStatus> = g.checks().iter().map(|c| c.status).collect();
    assert_eq!(
        statuses,
        [CheckStatus::Pass, CheckStatus::Fail, CheckStatus::Pass]
    );
    assert!(
        g.checks()[1]
            .message
            .as_deref()
            .unwrap()
            .starts_with("malformed verdict")
    );
    let all = g.rewards().unwrap().all();
    assert!((all["judge_score"] - 0.85).abs() < 1e-9);
    assert_eq!(all["judge_pass_votes"], 2.0);
    // The judge-only route is recorded.
    assert!(g.evidence().iter().any(|e| matches!(e,
        Evidence::JudgeRoute { route, model_id } if route.starts_with("scripted:") && model_id == "judge:scripted")));
    assert!(g.grader().starts_with("judge:scripted:") && g.grader().ends_with(":3"));
}

#[tokio::test]
async fn a_tie_among_valid_votes_fails() {
    let d = trial();
    let g = judge("judge_tie.json", 3)
        .grade(&input(d.path()), None)
        .await;
    // One pass, one fail, one schema-invalid verdict: 1-1 among the valid votes.
    assert_eq!(g.primary(), Some(0.0));
    assert_eq!(g.outcome(AgentEnd::Finished), TrialOutcome::Failed);
    assert!(g.checks()[2].message.as_deref().unwrap().contains("schema"));
}

#[tokio::test]
async fn no_valid_vote_is_invalid_not_a_failure() {
    let d = trial();
    let g = judge("judge_unavailable.json", 3)
        .grade(&input(d.path()), None)
        .await;
    assert_eq!(
        g.outcome(AgentEnd::Finished),
        TrialOutcome::ProviderUnavailable
    );
    assert!(g.checks().iter().all(|c| c.status == CheckStatus::Skip));
    // A script that runs out after one malformed answer: one malformed vote, then errors.
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("j.json");
    std::fs::write(&script, r#"{"turns": [{"text": "no idea"}]}"#).unwrap();
    let spec: GraderSpec = format!("judge:scripted:{}:3", script.display())
        .parse()
        .unwrap();
    let g = build_grader(&spec, &opts())
        .unwrap()
        .grade(&input(d.path()), None)
        .await;
    assert_eq!(g.outcome(AgentEnd::Finished), TrialOutcome::RewardMalformed);
}

#[test]
fn verdicts_are_schema_checked() {
    let j = judge("judge_tie.json", 1);
    let ok = j.read_verdict("Sure: {\"verdict\": \"fail\", \"score\": 0, \"reason\": \"x\"} done");
    assert!(matches!(ok, VoteOutcome::Verdict { pass: false, .. }));
    for bad in [
        "",
        "{}",
        "[1]",
        "{\"verdict\": \"pass\", \"score\": 1.5, \"reason\": \"x\"}",
        "{\"verdict\": \"pass\", \"score\": 1}",
    ] {
        assert!(
            matches!(j.read_verdict(bad), VoteOutcome::Malformed { .. }),
            "{bad}"
        );
    }
    assert!(Votes::new(2).is_err() && Votes::new(0).is_err() && Votes::new(5).is_ok());
}

#[test]
fn templates_fill_in_one_pass() {
    let out = fill(
        "A={answer} T={trajectory} {other}",
        &[("answer", "{trajectory}"), ("trajectory", "t")],
    );
    assert_eq!(out, "A={trajectory} T=t {other}");
    let j = judge("judge_tie.json", 1);
    let e = j
        .with_template("no slots".into(), "judge.md")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("judge.md: "), "{e}");
}

#[tokio::test]
async fn rubric_judge_criteria_use_the_rubric_judge() {
    let dir = tempfile::tempdir().unwrap();
    let rubric = dir.path().join("rubric.toml");
    std::fs::write(
        &rubric,
        format!(
            "[judge]\nroute = \"scripted:{}\"\nvotes = 3\n\n[[criterion]]\nname = \"explains\"\nkind = \"judge\"\nquestion = \"Is the total explained?\"\n\n[[criterion]]\nname = \"names west\"\nkind = \"regex_answer\"\npattern = \"West\"\n",
            fixture("judge_2pass_1malformed.json").display()
        ),
    )
    .unwrap();
    let d = trial();
    let g = RubricGrader::load(&rubric, &opts())
        .unwrap()
        .grade(&input(d.path()), None)
        .await;
    assert_eq!(g.primary(), Some(1.0));
    assert!(
        g.checks()[0]
            .message
            .as_deref()
            .unwrap()
            .contains("vote 2 fail")
    );
    assert!(
        g.evidence()
            .iter()
            .any(|e| matches!(e, Evidence::JudgeRoute { .. }))
    );
    // Without the judge the same criterion is skipped.
    let text = std::fs::read_to_string(&rubric).unwrap();
    let plain = RubricGrader::new(Rubric::parse(&text, "r.toml").unwrap());
    let g = plain.grade(&input(d.path()), None).await;
    assert_eq!(g.checks()[0].status, CheckStatus::Skip);
}
