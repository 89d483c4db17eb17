//! The cost of one checkpoint save in a 200-message session, on a real SQLite file (WAL,
//! `synchronous = FULL`) and a real `state.json` (temp file, fsync, rename, fsync of the dir),
//! in a temp directory.
//!
//! - `checkpoint/save_200_incremental`: what the loop pays at a save point: the one message
//!   new since the last save is appended, then `state.json` (plan, guards, pending batch) is
//!   rewritten. The 200 earlier messages are not touched.
//! - `checkpoint/save_200_full`: all 200 messages rewritten plus `state.json`, for comparison
//!   (what a save would cost if it were not incremental).
//! - `checkpoint/save_200_incremental_tmpfs`: the incremental save in `/dev/shm` (when it
//!   exists), where fsync costs nothing: the CPU side of a save (serialization, SQLite).
//!
//! Messages alternate a tool_use (~200 bytes of input) and a tool_result (~2 KB), the shape of
//! an agent conversation. The numbers are dominated by the fsyncs, so they depend on the disk.

#![allow(clippy::unwrap_used)]

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use geode_runtime::agent::durable::{
    CheckpointState, ConversationView, PendingBatch, STATE_SCHEMA, TurnState,
};
use geode_runtime::agent::guards::GuardCounters;
use geode_runtime::cognition::{CognitiveState, Plan, PlanStep, StepStatus};
use geode_runtime::conversation::{ContentBlock, Message, Role, ToolCall, Usage};
use geode_runtime::ids::SessionId;
use geode_runtime::model::effort::Effort;
use geode_runtime::store::checkpoint::{CheckpointStore, SavePoint};
use serde_json::json;

const MESSAGES: usize = 200;

fn message(i: usize) -> Message {
    let id = format!("call_{i}");
    if i.is_multiple_of(2) {
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Text {
                    text: "Checking the build output next.".into(),
                },
                ContentBlock::ToolUse {
                    id,
                    name: "bash".into(),
                    input: json!({"command": format!("make -C src target_{i} 2>&1 | tail -n 40"), "timeout_sec": 120}),
                },
            ],
        }
    } else {
        Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: format!("call_{}", i - 1),
                content: "gcc -O2 -c module.c -o module.o\n".repeat(64),
                is_error: false,
            }],
        }
    }
}

fn state(next_seq: u64) -> CheckpointState {
    let plan = Plan {
        objective: "make the build green".into(),
        steps: (0..6)
            .map(|i| PlanStep {
                description: format!("step {i}: fix the next failing target"),
                expected_outcome: "exit 0".into(),
                status: if i < 3 {
                    StepStatus::Completed
                } else {
                    StepStatus::Pending
                },
            })
            .collect(),
    };
    let cognition = CognitiveState {
        plan: Some(plan),
        ..CognitiveState::default()
    };
    let guards = GuardCounters {
        recent_error_keys: VecDeque::from(vec!["bash: exit 2".to_string()]),
        success_repeats: (0..50).map(|i| (i, 1)).collect::<HashMap<u64, usize>>(),
        call_repeats: (0..100).map(|i| (i, 1)).collect::<HashMap<u64, usize>>(),
        consecutive_llm_failures: 0,
    };
    CheckpointState {
        schema: STATE_SCHEMA.into(),
        session_id: SessionId::new("bench"),
        saved_at: "2026-11-30T00:00:00Z".into(),
        stage: SavePoint::PendingBatch,
        turn_number: 3,
        model_calls: 100,
        round: 12,
        model: "anthropic:claude-sonnet-5".into(),
        model_route: "anthropic:claude-sonnet-5".into(),
        provider: "anthropic".into(),
        effort: Some(Effort::High),
        cwd: "/work/project".into(),
        system_prompt_hash: Some("0".repeat(64)),
        cognition,
        guards,
        turn: Some(TurnState {
            rounds: 12,
            tool_calls: 40,
            usage: Usage::default(),
            ..TurnState::default()
        }),
        pending_verification: None,
        pending_batch: Some(PendingBatch {
            turn: 3,
            round: 12,
            model_id: "anthropic:claude-sonnet-5".into(),
            correlation_id: "bench:3:100".into(),
            calls: vec![ToolCall {
                id: "call_next".into(),
                name: "bash".into(),
                input: json!({"command": "make test"}),
            }],
        }),
        conversation: ConversationView {
            next_seq,
            ..ConversationView::default()
        },
        session_usage: Usage::default(),
    }
}

/// A store in `dir` holding the 200 messages and a state.
fn seeded(dir: &std::path::Path, messages: &[Message]) -> CheckpointStore {
    let store = CheckpointStore::create(dir, &SessionId::new("bench"), "m", dir).unwrap();
    store.append_messages(0, messages).unwrap();
    store.write_state(&state(MESSAGES as u64)).unwrap();
    store
}

/// One save point: the message new since the last save, then `state.json`. Appending at
/// `next` keeps the 200 live messages plus the new one; the row count grows, as it does in a
/// long session.
fn incremental(store: &CheckpointStore, next: &mut u64) {
    store
        .append_messages(*next, &[message(*next as usize)])
        .unwrap();
    store.write_state(&state(*next + 1)).unwrap();
    *next += 1;
}

fn bench(c: &mut Criterion) {
    let messages: Vec<Message> = (0..MESSAGES).map(message).collect();
    let mut group = c.benchmark_group("checkpoint");

    let dir = tempfile::tempdir().unwrap();
    let store = seeded(dir.path(), &messages);
    let mut next = MESSAGES as u64;
    group.bench_function("save_200_incremental", |b| {
        b.iter(|| incremental(&store, &mut next))
    });

    let full_dir = tempfile::tempdir().unwrap();
    let full = seeded(full_dir.path(), &messages);
    group.bench_function("save_200_full", |b| {
        b.iter(|| {
            full.append_messages(0, &messages).unwrap();
            full.write_state(&state(MESSAGES as u64)).unwrap();
        })
    });

    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        let mem_dir = tempfile::tempdir_in(shm).unwrap();
        let mem = seeded(mem_dir.path(), &messages);
        let mut next = MESSAGES as u64;
        group.bench_function("save_200_incremental_tmpfs", |b| {
            b.iter(|| incremental(&mem, &mut next))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50).measurement_time(Duration::from_secs(4));
    targets = bench
}
criterion_main!(benches);
