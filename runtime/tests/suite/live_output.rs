//! Live tool output: a running `bash` call's output reaches the driver as `tool_output_delta`
//! events while the command still runs, and watching changes nothing the model or the records
//! see.

use std::time::Duration;

use geode_runtime::agent::{AgenticLoop, LoopEvent};
use geode_runtime::policy::SafetyLevel;
use geode_runtime::store::timeline::TimelineEvent;
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;

use super::common::{Fixture, calls_then_text, run, tool_result_for};

fn bash_script(command: &str) -> Value {
    calls_then_text(
        json!([{"id": "c1", "name": "bash", "input": {"command": command}}]),
        "done",
    )
}

/// A session running `command`, with its events when `watched`.
fn session(
    fx: &Fixture,
    command: &str,
    watched: bool,
) -> (AgenticLoop, Option<UnboundedReceiver<LoopEvent>>) {
    let mut rx = None;
    let session = fx.session_with(bash_script(command), SafetyLevel::Dangerous, |cfg| {
        if watched {
            let (tx, events) = tokio::sync::mpsc::unbounded_channel();
            cfg.events = Some(tx);
            rx = Some(events);
        }
    });
    (session, rx)
}

fn completed_content(fx: &Fixture, session: &AgenticLoop) -> String {
    fx.rows(session)
        .into_iter()
        .find_map(|r| match r.event {
            TimelineEvent::ToolCompleted { content, .. } => Some(content),
            _ => None,
        })
        .expect("a tool.completed row")
}

fn live_text(rx: &mut UnboundedReceiver<LoopEvent>) -> String {
    let mut text = String::new();
    while let Ok(event) = rx.try_recv() {
        if let LoopEvent::ToolOutputDelta { call_id, text: t } = event {
            assert_eq!(call_id, "c1");
            text.push_str(&t);
        }
    }
    text
}

#[tokio::test]
async fn the_result_is_byte_identical_with_and_without_a_sink() {
    // Both streams, more than the 30000-byte cap of stdout, and a failing exit.
    let command = "printf 'start\\n'; printf 'oops\\n' >&2; seq 1 10000; exit 3";
    let fx = Fixture::new();
    let (mut plain, _) = session(&fx, command, false);
    let (mut watched, rx) = session(&fx, command, true);
    run(&mut plain, "go").await;
    run(&mut watched, "go").await;

    let unwatched_result = tool_result_for(&plain, "c1");
    assert!(unwatched_result.1, "exit 3 is an error");
    assert!(
        unwatched_result
            .0
            .contains("output truncated at 30000 bytes")
    );
    assert_eq!(tool_result_for(&watched, "c1"), unwatched_result);
    assert_eq!(
        completed_content(&fx, &watched),
        completed_content(&fx, &plain)
    );

    // The live copy saw everything, past the result's cap, up to its own.
    let live = live_text(&mut rx.expect("watched"));
    assert!(
        live.contains("start\n") && live.contains("oops\n"),
        "{live:.200}"
    );
    assert!(
        live.contains("\n10000\n"),
        "the live copy is not cut at 30000 bytes"
    );
}

#[tokio::test]
async fn output_arrives_while_the_command_still_runs() {
    let fx = Fixture::new();
    let release = fx.path("release");
    let command = "echo first-marker; while [ ! -e release ]; do sleep 0.05; done; \
                   echo second-marker";
    let (mut session, rx) = session(&fx, command, true);
    let mut rx = rx.expect("watched");
    let watch = async {
        let mut seen = String::new();
        let first = async {
            while let Some(event) = rx.recv().await {
                if let LoopEvent::ToolOutputDelta { text, .. } = event {
                    seen.push_str(&text);
                    if seen.contains("first-marker") {
                        break;
                    }
                }
            }
        };
        // Without live output the command would wait for the file until its deadline.
        tokio::time::timeout(Duration::from_secs(20), first)
            .await
            .expect("no live output within 20 s");
        // The command is still waiting for the file: the output came before its end.
        assert!(seen.contains("first-marker\n"), "{seen}");
        assert!(!release.exists());
        std::fs::write(&release, "").unwrap();
        rx
    };
    let (outcome, mut rx) = tokio::join!(run(&mut session, "go"), watch);
    assert_eq!(outcome.text, "done");
    assert!(live_text(&mut rx).contains("second-marker\n"));
    let (result, is_error) = tool_result_for(&session, "c1");
    assert_eq!(result, "first-marker\nsecond-marker\n[exit code 0]\n");
    assert!(!is_error);
}
