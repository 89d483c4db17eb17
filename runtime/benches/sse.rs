//! SSE throughput on a generated ~1 MB Anthropic Messages stream (text and tool-argument
//! deltas, pings), fed in 16 KiB reads as a socket would deliver it: the parser alone, and the
//! parser plus the adapter's event assembly (JSON decoding included).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use geode_runtime::model::anthropic::StreamState;
use geode_runtime::model::http::Assembler;
use geode_runtime::model::sse::SseParser;
use serde_json::json;

fn event(data: serde_json::Value) -> String {
    format!(
        "event: {}\ndata: {data}\n\n",
        data["type"].as_str().unwrap()
    )
}

/// A recorded-looking stream of about `target` bytes.
fn stream(target: usize) -> Vec<u8> {
    let mut s = event(json!({"type": "message_start", "message": {"id": "msg_1",
        "usage": {"input_tokens": 1200, "output_tokens": 1}}}));
    s.push_str(&event(
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ));
    let words = [
        "The ", "quick ", "brown ", "fox ", "jumps ", "over ", "the ", "lazy ", "dog. ",
    ];
    let mut i = 0;
    while s.len() < target / 2 {
        s.push_str(&event(json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": words[i % words.len()]}})));
        if i % 200 == 0 {
            s.push_str(&event(json!({"type": "ping"})));
        }
        i += 1;
    }
    s.push_str(&event(json!({"type": "content_block_stop", "index": 0})));
    s.push_str(&event(json!({"type": "content_block_start", "index": 1,
        "content_block": {"type": "tool_use", "id": "toolu_1", "name": "write_file", "input": {}}})));
    s.push_str(&event(json!({"type": "content_block_delta", "index": 1,
        "delta": {"type": "input_json_delta", "partial_json": "{\"path\": \"out.txt\", \"content\": \""}})));
    while s.len() < target {
        s.push_str(&event(json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "line of generated file content\\n"}})));
    }
    s.push_str(&event(json!({"type": "content_block_delta", "index": 1,
        "delta": {"type": "input_json_delta", "partial_json": "\"}"}})));
    s.push_str(&event(json!({"type": "content_block_stop", "index": 1})));
    s.push_str(&event(
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"},
        "usage": {"output_tokens": 90000}}),
    ));
    s.push_str(&event(json!({"type": "message_stop"})));
    s.into_bytes()
}

const READ: usize = 16 * 1024;

fn bench(c: &mut Criterion) {
    let body = stream(1 << 20);
    let mut group = c.benchmark_group("sse");
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("parse", |b| {
        b.iter(|| {
            let mut parser = SseParser::new();
            let mut events = Vec::new();
            let mut count = 0usize;
            for chunk in body.chunks(READ) {
                parser.push(chunk, &mut events).unwrap();
                count += events.len();
                events.clear();
            }
            count
        })
    });
    group.bench_function("parse_and_assemble", |b| {
        b.iter(|| {
            let mut parser = SseParser::new();
            let mut state = StreamState::default();
            let mut events = Vec::new();
            let mut done = false;
            for chunk in body.chunks(READ) {
                parser.push(chunk, &mut events).unwrap();
                for e in events.drain(..) {
                    done |= state.on_event(&e).unwrap();
                }
            }
            assert!(done);
            state
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
