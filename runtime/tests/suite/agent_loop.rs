//! The loop end to end on scripted models: verify and repair, guards, cancellation, plan and
//! reflexion, replay.

use std::sync::Arc;
use std::time::{Duration, Instant};

use geode_runtime::agent::{TerminationReason, Verdict};
use geode_runtime::cognition::RevisionTrigger;
use geode_runtime::model::catalog::{EmbeddedRoute, Route};
use geode_runtime::model::credentials::Env;
use geode_runtime::model::http::RouteOptions;
use geode_runtime::model::model_for;
use geode_runtime::policy::SafetyLevel;
use geode_runtime::session::create_session;
use geode_runtime::store::timeline::TimelineEvent;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::common::*;

fn verifications(f: &Fixture, s: &geode_runtime::agent::AgenticLoop) -> Vec<String> {
    f.rows(s)
        .into_iter()
        .filter_map(|r| match r.event {
            TimelineEvent::Verification { verdict, .. } => Some(verdict),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_repairs_stop_at_the_budget() {
    let f = Fixture::new();
    let mut s = f.session(
        json!({"repeat_last": true, "turns": [{"text": ""}]}),
        SafetyLevel::Safe,
    );
    let out = run(&mut s, "answer").await;
    assert_eq!(out.termination, TerminationReason::Natural);
    assert!(
        matches!(out.verdict, Verdict::Failed { ref misses } if misses[0].starts_with("empty answer"))
    );
    // One answer plus the default budget of two repairs.
    assert_eq!(out.rounds, 3);
    assert_eq!(verifications(&f, &s), ["repair", "repair", "failed"]);

    let f = Fixture::new();
    let mut s = f.session_with(
        json!({"repeat_last": true, "turns": [{"text": ""}]}),
        SafetyLevel::Safe,
        |c| c.scaffold.repair_budget = 4,
    );
    let out = run(&mut s, "answer").await;
    assert_eq!(out.rounds, 5);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_repair_continues_without_replaying_completed_tools() {
    let f = Fixture::new();
    let script = json!({"turns": [
        {"tool_calls": [{"name": "bash", "input": {"command": "echo run >> effects.log"}}]},
        {"text": ""},
        {"text": "Appended one line to effects.log."}
    ]});
    let mut s = f.session(script, SafetyLevel::Dangerous);
    let out = run(&mut s, "append").await;
    assert_eq!(out.verdict, Verdict::Passed);
    assert_eq!(out.rounds, 3);
    assert_eq!(
        std::fs::read_to_string(f.path("effects.log")).unwrap(),
        "run\n"
    );
    assert_eq!(verifications(&f, &s), ["repair", "passed"]);
    // The failed verification armed a replan, recorded as a plan revision.
    let c = s.cognition();
    assert!(matches!(
        c.revisions[0].trigger,
        RevisionTrigger::VerifyFailed { .. }
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_off_skips_rules() {
    let f = Fixture::new();
    let mut s = f.session_with(json!({"turns": [{"text": ""}]}), SafetyLevel::Safe, |c| {
        c.scaffold.verify = geode_runtime::scaffold::VerifyMode::Off
    });
    let out = run(&mut s, "answer").await;
    assert_eq!((out.rounds, out.verdict), (1, Verdict::Skipped));
}

#[tokio::test(flavor = "multi_thread")]
async fn post_verify_escalation_withholds_the_text() {
    let f = Fixture::new();
    let hooks = f.hooks(
        r#"
[[hooks.PostVerify]]
[[hooks.PostVerify.hooks]]
type = "command"
command = "echo '{\"decision\":\"escalate\",\"reason\":\"needs a human review\"}'"
"#,
    );
    let mut s = f.session_with(
        json!({"turns": [{"text": "Deployed to production successfully."}]}),
        SafetyLevel::Safe,
        |c| c.hooks = hooks,
    );
    let out = run(&mut s, "deploy").await;
    assert_eq!(
        out.termination,
        TerminationReason::ExternalVerificationRequired
    );
    assert_eq!(out.text, "");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stop_hook_can_send_the_model_back_to_work() {
    let f = Fixture::new();
    // Blocks the first stop only (a marker file remembers).
    let hooks = f.hooks(
        r#"
[[hooks.Stop]]
[[hooks.Stop.hooks]]
type = "command"
command = "if [ -e stopped-once ]; then exit 0; fi; touch stopped-once; echo 'run the tests first' >&2; exit 2"
"#,
    );
    let script = json!({"turns": [{"text": "Everything is finished now."}, {"text": "Ran the tests; all finished."}]});
    let mut s = f.session_with(script, SafetyLevel::Safe, |c| c.hooks = hooks);
    let out = run(&mut s, "work").await;
    assert_eq!((out.rounds, &out.verdict), (2, &Verdict::Passed));
    let repair = s.messages()[2].text();
    assert!(repair.contains("run the tests first"), "{repair}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_blocked_prompt_ends_the_turn_before_any_model_call() {
    let f = Fixture::new();
    let hooks = f.hooks(
        r#"
[[hooks.UserPromptSubmit]]
[[hooks.UserPromptSubmit.hooks]]
type = "command"
command = "echo '{\"decision\":\"block\",\"reason\":\"no secrets in prompts\"}'"
"#,
    );
    let mut s = f.session_with(
        json!({"turns": [{"text": "should not be called"}]}),
        SafetyLevel::Safe,
        |c| c.hooks = hooks,
    );
    let out = run(&mut s, "my password is x").await;
    assert_eq!(
        (out.termination, out.rounds),
        (TerminationReason::InputBlocked, 0)
    );
    assert!(out.text.contains("no secrets in prompts"));
}

#[tokio::test(flavor = "multi_thread")]
async fn max_rounds_forces_text_then_stops() {
    let f = Fixture::new();
    let script = json!({"repeat_last": true, "turns": [{"tool_calls": [{"name": "list_dir", "input": {}}]}]});
    let mut s = f.session_with(script, SafetyLevel::Safe, |c| {
        c.scaffold.guards.max_rounds = 3
    });
    let out = run(&mut s, "loop").await;
    assert_eq!(out.termination, TerminationReason::MaxRounds);
    assert_eq!(out.rounds, 3);
    // The last round's calls were not run, yet every tool_use has its tool_result.
    assert_eq!(out.tool_calls, 2);
    let uses: usize = s.messages().iter().map(|m| m.tool_calls().len()).sum();
    let results: usize = s
        .messages()
        .iter()
        .flat_map(|m| &m.content)
        .filter(|b| {
            matches!(
                b,
                geode_runtime::conversation::ContentBlock::ToolResult { .. }
            )
        })
        .count();
    assert_eq!(uses, results);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_error_three_times_is_convergence() {
    let f = Fixture::new();
    let script = json!({"repeat_last": true, "turns": [{"tool_calls": [{"name": "read_file", "input": {"path": "missing.txt"}}]}]});
    let mut s = f.session(script, SafetyLevel::Safe);
    let out = run(&mut s, "read").await;
    assert_eq!(
        (out.termination, out.rounds),
        (TerminationReason::ConvergenceDetected, 3)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_success_five_times_is_no_progress() {
    let f = Fixture::new();
    std::fs::write(f.path("a.txt"), "a").unwrap();
    let script = json!({"repeat_last": true, "turns": [{"tool_calls": [{"name": "read_file", "input": {"path": "a.txt"}}]}]});
    let mut s = f.session(script, SafetyLevel::Safe);
    let out = run(&mut s, "read").await;
    assert_eq!(
        (out.termination, out.rounds),
        (TerminationReason::RepeatedSuccessNoProgress, 5)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn token_and_time_budgets_end_the_turn() {
    let f = Fixture::new();
    let script = json!({"repeat_last": true, "turns": [{"tool_calls": [{"name": "list_dir", "input": {"path": "."}}], "usage": {"input_tokens": 600, "output_tokens": 10}}]});
    let mut s = f.session_with(script, SafetyLevel::Safe, |c| {
        c.scaffold.guards.token_budget = Some(1000)
    });
    let out = run(&mut s, "spend").await;
    assert_eq!(
        (out.termination, out.rounds),
        (TerminationReason::TokenBudgetExceeded, 2)
    );

    let f = Fixture::new();
    let script = json!({"turns": [{"text": "slow", "delay_ms": 5000}]});
    let mut s = f.session_with(script, SafetyLevel::Safe, |c| {
        c.scaffold.guards.turn_time_budget_secs = Some(1)
    });
    let started = Instant::now();
    let out = run(&mut s, "wait").await;
    assert_eq!(out.termination, TerminationReason::TimeBudgetExpired);
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test(flavor = "multi_thread")]
async fn cancellation_stops_a_running_command() {
    let f = Fixture::new();
    let script = json!({"turns": [{"tool_calls": [{"name": "bash", "input": {"command": "sleep 60"}}]}, {"text": "done"}]});
    let mut s = f.session(script, SafetyLevel::Dangerous);
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        c2.cancel();
    });
    let started = Instant::now();
    let out = s.run_turn("sleep", &cancel).await;
    assert_eq!(out.termination, TerminationReason::UserCancelled);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_transient_model_error_is_retried() {
    let f = Fixture::new();
    let script = json!({"turns": [{"error": "overloaded"}, {"text": "Answer after one retry."}]});
    let mut s = f.session(script, SafetyLevel::Safe);
    let out = run(&mut s, "hi").await;
    assert_eq!(out.termination, TerminationReason::Natural);
    assert_eq!(out.text, "Answer after one retry.");
}

#[tokio::test(flavor = "multi_thread")]
async fn plan_updates_and_contradicted_hypotheses_arm_a_replan() {
    let f = Fixture::new();
    let script = json!({"turns": [
        {"tool_calls": [
            {"name": "update_plan", "input": {"objective": "fix the build", "steps": [
                {"description": "run make", "expected_outcome": "exit 0", "status": "in_progress"},
                {"description": "report", "status": "pending"}]}},
            {"name": "record_reflection", "input": {"hypotheses": [
                {"statement": "the file exists", "confidence": 0.5, "refuted_by": "No such file|not found"}]}}
        ]},
        {"tool_calls": [{"name": "read_file", "input": {"path": "missing.c"}}]},
        {"tool_calls": [{"name": "update_plan", "input": {"objective": "create the file", "steps": [
            {"description": "write missing.c", "status": "pending"}], "reason": "file missing"}}]},
        {"text": "The file was missing; the plan now creates it."}
    ]});
    let mut s = f.session(script, SafetyLevel::Safe);
    let out = run(&mut s, "build").await;
    assert_eq!(out.verdict, Verdict::Passed);
    let c = s.cognition();
    let triggers: Vec<&RevisionTrigger> = c.revisions.iter().map(|r| &r.trigger).collect();
    assert!(
        matches!(triggers[0], RevisionTrigger::ModelUpdate { .. }),
        "{triggers:?}"
    );
    assert!(
        matches!(triggers[1], RevisionTrigger::LowConfidence { .. }),
        "{triggers:?}"
    );
    assert!(
        matches!(
            triggers[2],
            RevisionTrigger::ModelUpdate { reason: Some(_) }
        ),
        "{triggers:?}"
    );
    assert_eq!(c.plan.as_ref().unwrap().objective, "create the file");
    assert!(c.replan_pending.is_none());
    assert_eq!(c.hypotheses[0].contradictions, 1);
    let revised = f
        .rows(&s)
        .iter()
        .filter(|r| r.kind == "plan.revised")
        .count();
    assert_eq!(revised, 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_recorded_session_replays_through_the_pipeline() {
    let f = Fixture::new();
    let script = json!({"turns": [
        {"tool_calls": [{"name": "write_file", "input": {"path": "a.txt", "content": "1"}}]},
        {"text": "Wrote a.txt with content 1."}
    ]});
    let mut s = f.session(script, SafetyLevel::Write);
    run(&mut s, "write").await;
    let recorded = s.session_id().clone();
    std::fs::remove_file(f.path("a.txt")).unwrap();
    // The replay model opens the file on its own handle: commit what this one queued.
    f.timeline.flush().unwrap();

    let route = Route::Embedded(EmbeddedRoute::Replay {
        db: f.timeline.path().to_path_buf(),
        session: Some(recorded.to_string()),
    });
    let model = model_for(&route, &RouteOptions::with_env(Env::empty())).unwrap();
    let mut cfg = f.config(model, headless(SafetyLevel::Write));
    cfg.timeline = Some(f.timeline.clone());
    let mut replay = create_session(cfg).unwrap();
    let out = run(&mut replay, "write").await;
    assert_eq!(out.text, "Wrote a.txt with content 1.");
    // Replay re-drives the pipeline: the effect happens again in the fresh workspace.
    assert_eq!(std::fs::read_to_string(f.path("a.txt")).unwrap(), "1");
}

#[tokio::test(flavor = "multi_thread")]
async fn each_model_call_is_pinned_to_the_plan_it_saw() {
    let f = Fixture::new();
    let mut s = f.session(
        json!({"turns": [{"text": "A sufficiently long answer."}]}),
        SafetyLevel::Safe,
    );
    run(&mut s, "hi").await;
    let rows = f.rows(&s);
    let (plan_hash, generation) = rows
        .iter()
        .find_map(|r| match &r.event {
            TimelineEvent::SessionStarted {
                plan_hash,
                plan_generation,
                ..
            } => Some((plan_hash.clone(), *plan_generation)),
            _ => None,
        })
        .unwrap();
    let snap = rows
        .iter()
        .find_map(|r| match &r.event {
            TimelineEvent::AssistantMessage { snapshot, .. } => Some(snapshot.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(snap.plan_hash.as_str(), plan_hash);
    assert_eq!(snap.plan_generation, generation);
    // Generation 1 narrowed by the headless deny list.
    assert_eq!(generation, 2);
    assert_eq!(snap.model_id, "scripted");
    let _ = Arc::new(());
}
