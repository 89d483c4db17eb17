//! Durable sessions in-process: the checkpoint's save points, the batch that must not run when
//! it cannot be saved, effect receipts, resume (plan, effort, guards, pending verification),
//! compaction with its hooks, and the evidence ledger. A "crash" here drops the running turn
//! and the loop, which leaves the stores exactly as a killed process would (tests/e2e/crash.rs
//! kills a real process).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use geode_runtime::agent::compaction::pairing_problem;
use geode_runtime::agent::restore::{Disposition, load_checkpoint};
use geode_runtime::agent::{
    AgenticLoop, CheckpointSettings, FaultInjection, TerminationReason, Verdict,
};
use geode_runtime::conversation::{AssistantTurn, ContentBlock, Message, Role, StopReason, Usage};
use geode_runtime::ids::SessionId;
use geode_runtime::model::effort::Effort;
use geode_runtime::model::embedded::ScriptedModel;
use geode_runtime::model::{Model, ModelError, ModelRequest};
use geode_runtime::policy::SafetyLevel;
use geode_runtime::scaffold::Scaffold;
use geode_runtime::session::{SessionConfig, create_session, resume_session};
use geode_runtime::store::checkpoint::{SavePoint, SessionStatus};
use geode_runtime::store::receipts::{ReceiptState, ReceiptStore, ReconcileOutcome};
use geode_runtime::store::timeline::TimelineEvent;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::common::{Fixture, headless, run, tool_result_for};

pub fn sessions_root(f: &Fixture) -> PathBuf {
    f.root.parent().unwrap().join("sessions")
}

pub fn settings(f: &Fixture) -> CheckpointSettings {
    CheckpointSettings {
        root: sessions_root(f),
        model_route: "scripted:inline".into(),
        provider: "embedded".into(),
        effort: Some(Effort::High),
        faults: FaultInjection::default(),
    }
}

/// A config for session `id` on `model`, checkpointed.
pub fn durable_config(
    f: &Fixture,
    id: &str,
    model: Arc<dyn Model>,
    allow: SafetyLevel,
) -> SessionConfig {
    let mut cfg = f.config(model, headless(allow));
    cfg.session_id = SessionId::new(id);
    cfg.checkpoint = Some(settings(f));
    cfg
}

pub fn scripted(script: Value) -> Arc<dyn Model> {
    Arc::new(ScriptedModel::from_json(script).unwrap())
}

pub fn durable(f: &Fixture, id: &str, script: Value, allow: SafetyLevel) -> AgenticLoop {
    create_session(durable_config(f, id, scripted(script), allow)).unwrap()
}

fn lines(p: &Path) -> usize {
    std::fs::read_to_string(p).map_or(0, |t| t.lines().count())
}

async fn wait_for(p: &Path) {
    for _ in 0..400 {
        if p.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{} never appeared", p.display());
}

fn receipts(f: &Fixture, id: &str) -> ReceiptStore {
    let path = sessions_root(f).join(id).join("receipts.db");
    ReceiptStore::open(&path, &SessionId::new(id), false).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_save_point_leaves_a_checkpoint_equal_to_the_conversation() {
    let f = Fixture::new();
    let script = json!({"turns": [
        {"tool_calls": [
            {"id": "w1", "name": "write_file", "input": {"path": "a.txt", "content": "x"}},
            {"id": "r1", "name": "read_file", "input": {"path": "a.txt"}},
            {"id": "b1", "name": "bash", "input": {"command": "ls"}}
        ]},
        {"text": "Wrote a.txt and read it back."}
    ]});
    let mut s = durable(&f, "d1", script, SafetyLevel::Dangerous);
    let out = run(&mut s, "write a file").await;
    assert_eq!(out.verdict, Verdict::Passed);
    let loaded = load_checkpoint(&sessions_root(&f), &SessionId::new("d1")).unwrap();
    assert_eq!(loaded.messages, s.messages());
    assert_eq!(loaded.state.stage, SavePoint::TurnEnd);
    assert!(loaded.state.turn.is_none() && loaded.state.pending_batch.is_none());
    assert_eq!(loaded.state.effort, Some(Effort::High));
    assert_eq!(loaded.state.model, "scripted");
    assert!(loaded.state.system_prompt_hash.is_some());
    assert_eq!(loaded.row.status, SessionStatus::Paused);
    // Only the write got a receipt: read_file and a read-only `ls` have no effect.
    let all = receipts(&f, "d1").list().unwrap();
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0].call_id, "w1");
    assert_eq!(all[0].state, ReceiptState::Committed);
    s.close("natural").await;
    drop(s);
    let loaded = load_checkpoint(&sessions_root(&f), &SessionId::new("d1")).unwrap();
    assert_eq!(loaded.row.status, SessionStatus::Completed);
    // A second session under the same id is refused, never overwriting the first.
    let err = create_session(durable_config(
        &f,
        "d1",
        scripted(json!({"turns": [{"text": "x"}]})),
        SafetyLevel::Safe,
    ))
    .err()
    .unwrap();
    assert!(err.to_string().contains("geode resume d1"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn sessions_without_a_checkpoint_write_none() {
    let f = Fixture::new();
    let mut s = f.session(
        json!({"turns": [{"tool_calls": [{"name": "write_file", "input": {"path": "a", "content": "x"}}]},
                          {"text": "Wrote the file a."}]}),
        SafetyLevel::Write,
    );
    run(&mut s, "go").await;
    assert!(f.path("a").exists());
    assert!(s.checkpoint_dir().is_none());
    assert!(!sessions_root(&f).exists());
}

/// On its first call, makes `state.json` impossible to replace (a non-empty directory in its
/// place: root ignores file modes, not this), then proposes a write.
struct BreaksTheCheckpoint {
    state_json: PathBuf,
}

#[async_trait]
impl Model for BreaksTheCheckpoint {
    fn id(&self) -> &str {
        "breaker"
    }

    async fn complete(&self, _: &ModelRequest<'_>) -> Result<AssistantTurn, ModelError> {
        std::fs::remove_file(&self.state_json).unwrap();
        std::fs::create_dir_all(self.state_json.join("blocker")).unwrap();
        Ok(AssistantTurn {
            message: Message {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolUse {
                    id: "w1".into(),
                    name: "write_file".into(),
                    input: json!({"path": "must-not-exist.txt", "content": "x"}),
                }],
            },
            usage: Usage::default(),
            stop_reason: StopReason::ToolUse,
        })
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unwritable_checkpoint_means_the_batch_never_runs() {
    let f = Fixture::new();
    let model = Arc::new(BreaksTheCheckpoint {
        state_json: sessions_root(&f).join("d2").join("state.json"),
    });
    let mut s = create_session(durable_config(&f, "d2", model, SafetyLevel::Write)).unwrap();
    let out = run(&mut s, "write it").await;
    assert_eq!(out.termination, TerminationReason::CheckpointFailed);
    assert!(!f.path("must-not-exist.txt").exists());
    let (content, is_error) = tool_result_for(&s, "w1");
    assert!(is_error && content.contains("none of it ran"), "{content}");
    let rows = f.rows(&s);
    let failed: Vec<_> = rows
        .iter()
        .filter_map(|r| match &r.event {
            TimelineEvent::CheckpointFailed { stage, .. } => Some(*stage),
            _ => None,
        })
        .collect();
    assert_eq!(failed, vec![SavePoint::PendingBatch]);
    let kinds: Vec<String> = rows.into_iter().map(|r| r.kind).collect();
    assert!(!kinds.contains(&"tool.called".to_string()), "{kinds:?}");
    assert!(receipts(&f, "d2").list().unwrap().is_empty());
    let ledger = std::fs::read_to_string(sessions_root(&f).join("d2/evidence.jsonl")).unwrap();
    assert!(ledger.contains("\"checkpoint_failed\""), "{ledger}");
    assert!(ledger.contains("\"pending_batch\""), "{ledger}");
    s.close("checkpoint_failed").await;
}

/// Run until `marker` appears (the long command started), then drop the turn and the loop:
/// what a `kill -9` leaves behind.
async fn crash_when(mut s: AgenticLoop, prompt: &str, marker: &Path) {
    let cancel = CancellationToken::new();
    tokio::select! {
        out = s.run_turn(prompt, &cancel) => panic!("the turn ended before the crash: {out:?}"),
        _ = wait_for(marker) => {}
    }
    drop(s);
}

#[tokio::test(flavor = "multi_thread")]
async fn resume_settles_an_interrupted_effect_as_uncertain_and_restores_the_session() {
    let f = Fixture::new();
    let long = "echo run >> effects.log; touch started; sleep 30";
    let script = json!({"turns": [
        {"text": ""},
        {"tool_calls": [
            {"id": "p1", "name": "update_plan", "input": {"objective": "append a line",
             "steps": [{"description": "append", "status": "in_progress"}]}},
            {"id": "e1", "name": "bash", "input": {"command": long}},
            {"id": "l1", "name": "list_dir", "input": {}}
        ]}
    ]});
    let s = durable(&f, "d3", script, SafetyLevel::Dangerous);
    crash_when(s, "append a line", &f.path("started")).await;
    assert_eq!(lines(&f.path("effects.log")), 1);

    let root = sessions_root(&f);
    let id = SessionId::new("d3");
    let before = load_checkpoint(&root, &id).unwrap();
    assert_eq!(before.row.status, SessionStatus::Active);
    let batch = before.state.pending_batch.clone().unwrap();
    assert_eq!(batch.calls.len(), 3);
    // The empty answer was rejected once: the repair is part of the saved turn.
    let pv = before.state.pending_verification.clone().unwrap();
    assert_eq!(pv.repairs_used, 1);
    assert!(pairing_problem(&before.messages, true).is_none());
    assert_eq!(
        receipts(&f, "d3").get("e1").unwrap().unwrap().state,
        ReceiptState::Accepted
    );

    let resume_script = json!({"turns": [
        {"text": "The append could not be confirmed: its outcome is uncertain after the crash."}
    ]});
    let cfg = durable_config(&f, "d3", scripted(resume_script), SafetyLevel::Dangerous);
    let (mut s, report) = resume_session(cfg).unwrap();
    let dispositions: Vec<(String, Disposition)> = report
        .pending
        .iter()
        .map(|p| (p.call_id.clone(), p.disposition))
        .collect();
    assert_eq!(
        dispositions,
        [
            ("p1".to_string(), Disposition::Rerun),
            ("e1".to_string(), Disposition::Uncertain),
            ("l1".to_string(), Disposition::Rerun)
        ]
    );
    assert_eq!(report.newly_uncertain.len(), 1);
    // The pending save came before p1 ran, so the plan returns when p1 (no effect) re-runs.
    assert!(s.cognition().plan.is_none());
    let out = s
        .resume_turn(None, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.termination, TerminationReason::Natural);
    assert_eq!(out.verdict, Verdict::Passed);
    // Never re-run: still one line.
    assert_eq!(lines(&f.path("effects.log")), 1);
    let (content, is_error) = tool_result_for(&s, "e1");
    assert!(
        is_error && content.starts_with("outcome unknown") && content.contains("NOT run again"),
        "{content}"
    );
    assert_eq!(s.cognition().plan.unwrap().objective, "append a line");
    let (listing, _) = tool_result_for(&s, "l1");
    assert!(listing.contains("effects.log"), "{listing}");
    // The repair budget continued where it stood: this answer's verification is attempt 1.
    let rows = f.timeline.rows(&id).unwrap();
    let attempts: Vec<u32> = rows
        .iter()
        .filter_map(|r| match &r.event {
            TimelineEvent::Verification { attempt, .. } => Some(*attempt),
            _ => None,
        })
        .collect();
    assert_eq!(attempts, [0, 1]);
    assert!(rows.iter().any(|r| r.kind == "session.resumed"));
    assert!(rows.iter().any(|r| matches!(&r.event,
        TimelineEvent::ToolRecovered { call_id, disposition, .. } if call_id == "e1" && disposition == "uncertain")));
    let receipt = receipts(&f, "d3").get("e1").unwrap().unwrap();
    assert_eq!(receipt.state, ReceiptState::Uncertain);
    let ledger = std::fs::read_to_string(sessions_root(&f).join("d3/evidence.jsonl")).unwrap();
    assert!(ledger.contains("\"uncertain_effect\""), "{ledger}");
    drop(s);
    let r = receipts(&f, "d3")
        .reconcile(
            "e1",
            ReconcileOutcome::Done,
            Some("one line in effects.log"),
        )
        .unwrap();
    assert_eq!(r.state, ReceiptState::Reconciled);
    let after = load_checkpoint(&root, &id).unwrap();
    assert!(pairing_problem(&after.messages, false).is_none());
    assert!(after.state.pending_batch.is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn plan_guards_and_effort_come_back_and_a_closed_session_reopens_only_with_a_prompt() {
    let f = Fixture::new();
    let script = json!({"turns": [
        {"tool_calls": [{"name": "update_plan", "input": {"objective": "ship it",
            "steps": [{"description": "build", "status": "completed"}]}}]},
        {"tool_calls": [{"name": "read_file", "input": {"path": "missing"}}]},
        {"text": "The build step is done; the file read failed as expected."}
    ]});
    let mut s = durable(&f, "d4", script, SafetyLevel::Safe);
    run(&mut s, "plan").await;
    let plan = s.cognition().plan.clone();
    let guards = s.guard_counters().clone();
    assert!(!guards.call_repeats.is_empty());
    s.close("natural").await;
    drop(s);

    let root = sessions_root(&f);
    let mut cfg = durable_config(
        &f,
        "d4",
        scripted(json!({"turns": [{"text": "Still on plan: ship it, build done."}]})),
        SafetyLevel::Safe,
    );
    cfg.checkpoint.as_mut().unwrap().effort = None;
    let (mut s, report) = resume_session(cfg).unwrap();
    assert_eq!(report.from_status, SessionStatus::Completed);
    assert!(!report.turn_in_progress);
    assert_eq!(s.cognition().plan, plan);
    assert_eq!(s.guard_counters(), &guards);
    let err = s
        .resume_turn(None, &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no interrupted turn"), "{err}");
    let out = s
        .resume_turn(Some("and now?"), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.verdict, Verdict::Passed);
    drop(s);
    let loaded = load_checkpoint(&root, &SessionId::new("d4")).unwrap();
    assert_eq!(
        loaded.row.status,
        SessionStatus::Paused,
        "reopened, then paused"
    );
    assert_eq!(loaded.messages.len(), 8);
}

#[tokio::test(flavor = "multi_thread")]
async fn compaction_keeps_pairs_stores_a_hashed_summary_and_obeys_precompact() {
    let f = Fixture::new();
    let round = |i: usize| {
        json!({"tool_calls": [{"id": format!("c{i}"), "name": "bash",
        "input": {"command": format!("echo round{i}")}}]})
    };
    let mut turns: Vec<Value> = (0..4).map(round).collect();
    turns.push(json!({"text": "Four rounds of echo are done."}));
    let mut scaffold = Scaffold::default();
    scaffold.compaction.context_window_tokens = 100;
    scaffold.compaction.threshold = 0.5;
    scaffold.compaction.keep_recent_messages = 2;
    // The first PreCompact defers, every later one asks to keep 4 messages.
    let hooks = f.hooks(
        r#"
[[hooks.PreCompact]]
[[hooks.PreCompact.hooks]]
type = "command"
command = "if [ -e deferred ]; then echo '{\"keep_recent\": 4}'; else touch deferred; echo '{\"decision\": \"defer\"}'; fi"
"#,
    );
    let mut cfg = durable_config(
        &f,
        "d5",
        scripted(json!({ "turns": turns })),
        SafetyLevel::Dangerous,
    );
    cfg.scaffold = scaffold;
    cfg.hooks = hooks;
    let mut s = create_session(cfg).unwrap();
    let out = run(&mut s, "echo four times").await;
    assert_eq!(out.verdict, Verdict::Passed, "{out:?}");
    let rows = f.timeline.rows(&SessionId::new("d5")).unwrap();
    let compactions: Vec<(String, usize, Option<String>, Option<String>)> = rows
        .iter()
        .filter_map(|r| match &r.event {
            TimelineEvent::Compaction {
                status,
                keep_recent,
                summary_sha256,
                artifact,
                ..
            } => Some((
                status.clone(),
                *keep_recent,
                summary_sha256.clone(),
                artifact.clone(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(compactions[0].0, "deferred");
    let done: Vec<_> = compactions.iter().filter(|c| c.0 == "done").collect();
    assert!(!done.is_empty(), "{compactions:?}");
    for (_, keep, sha, artifact) in &done {
        assert_eq!(*keep, 4);
        let text = std::fs::read(artifact.as_ref().unwrap()).unwrap();
        assert_eq!(
            &hex::encode(Sha256::digest(&text)),
            sha.as_ref().unwrap(),
            "the artifact's content hash is the recorded one"
        );
    }
    let m = s.messages();
    assert!(m[0].text().starts_with("[compacted context]"));
    assert!(m[0].text().contains("echo four times"));
    assert!(pairing_problem(m, false).is_none());
    // The checkpoint holds the compacted view, summary included, and brings it back as is.
    let loaded = load_checkpoint(&sessions_root(&f), &SessionId::new("d5")).unwrap();
    assert_eq!(loaded.messages, m);
    assert_eq!(loaded.state.conversation.compactions as usize, done.len());
    assert!(loaded.state.conversation.live_from_seq > 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn compaction_without_a_checkpoint_keeps_pairs_and_writes_no_artifact() {
    let f = Fixture::new();
    let turns = json!({"turns": [
        {"tool_calls": [{"id": "a", "name": "list_dir", "input": {}}]},
        {"tool_calls": [{"id": "b", "name": "list_dir", "input": {}}]},
        {"tool_calls": [{"id": "c", "name": "list_dir", "input": {}}]},
        {"text": "Listed the workspace three times."}
    ]});
    let mut s = f.session_with(turns, SafetyLevel::Safe, |cfg| {
        cfg.scaffold.compaction.context_window_tokens = 10;
        cfg.scaffold.compaction.keep_recent_messages = 2;
    });
    run(&mut s, "list it").await;
    assert!(s.messages()[0].text().starts_with("[compacted context]"));
    assert!(pairing_problem(s.messages(), false).is_none());
    let done: Vec<_> = f
        .rows(&s)
        .into_iter()
        .filter_map(|r| match r.event {
            TimelineEvent::Compaction {
                status, artifact, ..
            } => Some((status, artifact)),
            _ => None,
        })
        .collect();
    assert!(
        done.iter().all(|(st, a)| st == "done" && a.is_none()),
        "{done:?}"
    );
    assert!(done.len() >= 2, "{done:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ledger_masks_secrets_and_personal_data_in_denials() {
    let f = Fixture::new();
    let secret = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz";
    let script = json!({"turns": [
        {"tool_calls": [{"id": "w1", "name": "write_file", "input": {"path": "creds.env",
            "content": format!("ANTHROPIC_API_KEY={secret}\nowner=jane.doe@example.com\n")}}]},
        {"text": "The write was denied; it could not be done."}
    ]});
    let mut cfg = durable_config(&f, "d6", scripted(script), SafetyLevel::Safe);
    cfg.hooks = f.hooks(
        r#"
[[hooks.Stop]]
[[hooks.Stop.hooks]]
type = "command"
command = "echo 'token=abcd1234efgh failed' >&2; exit 1"
"#,
    );
    let mut s = create_session(cfg).unwrap();
    run(&mut s, "store the key").await;
    let ledger = std::fs::read_to_string(sessions_root(&f).join("d6/evidence.jsonl")).unwrap();
    let rows: Vec<Value> = ledger
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let denial = rows.iter().find(|r| r["kind"] == "tool_denied").unwrap();
    assert_eq!(denial["schema"], "geode.evidence.v1");
    assert_eq!(denial["detail"]["call_id"], "w1");
    assert!(
        !ledger.contains(secret) && !ledger.contains("jane.doe"),
        "{ledger}"
    );
    assert!(
        ledger.contains("[secret#") && ledger.contains("[email#"),
        "{ledger}"
    );
    let hook = rows.iter().find(|r| r["kind"] == "hook_failed").unwrap();
    assert_eq!(hook["detail"]["event"], "Stop");
    assert!(!ledger.contains("abcd1234efgh"), "{ledger}");
    assert!(sessions_root(&f).join("d6/ledger.salt").exists());
}
