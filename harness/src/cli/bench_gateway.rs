//! `geode bench gateway`: what the model gateway adds to a streamed call. The same embedded
//! model (`scripted`, one text turn, repeated) is asked directly, timed from the call to its
//! first text delta, and through a gateway on loopback in this process, timed from sending the
//! request (reqwest, kept-alive connection, as an agent's client) to the response's first body
//! byte and to the first frame that carries text. Calls alternate so both see the same machine;
//! after `--warmup` calls of each, medians and 90th percentiles of `--repeat` calls, in
//! milliseconds, and the added latency: gateway minus direct, by medians.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use geode_harness::gateway::{self, Budgets, GatewayConfig, Listen};
use geode_runtime::conversation::Message;
use geode_runtime::ids::{CorrelationId, StepSnapshot};
use geode_runtime::model::embedded::ScriptedModel;
use geode_runtime::model::{DeltaSink, Model, ModelRequest};
use geode_runtime::tools::plan::BoundToolPlan;
use serde::Serialize;
use serde_json::{Value, json};

use super::exit::Exit;

/// The wire format the bench's calls use.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum BenchFormat {
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
    /// OpenAI Responses (`/v1/responses`).
    Responses,
    /// Chat Completions (`/v1/chat/completions`).
    Chat,
}

#[derive(Debug, Args)]
pub struct BenchGatewayArgs {
    /// Measured calls of each kind.
    #[arg(short = 'r', long, default_value_t = 200)]
    repeat: usize,
    /// Calls of each kind before measuring (connection and caches warm).
    #[arg(long, default_value_t = 20)]
    warmup: usize,
    /// The wire format of the gateway's calls.
    #[arg(long, value_enum, default_value = "anthropic")]
    format: BenchFormat,
    /// One JSON object on stdout instead of lines.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Figures {
    median_ms: f64,
    p90_ms: f64,
}

fn figures(mut v: Vec<Duration>) -> Figures {
    v.sort();
    let at = |q: f64| {
        let i = ((v.len() as f64 - 1.0) * q).round() as usize;
        v.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    Figures {
        median_ms: at(0.5),
        p90_ms: at(0.9),
    }
}

const TEXT: &str = "Hello from the script, word by word.";

fn model() -> anyhow::Result<Arc<dyn Model>> {
    let script = json!({"repeat_last": true, "turns": [
        {"text": TEXT, "usage": {"input_tokens": 10, "output_tokens": 8}}]});
    Ok(Arc::new(ScriptedModel::from_json(script)?))
}

/// The time from the call to the model's first text delta.
async fn direct(model: &dyn Model) -> anyhow::Result<Duration> {
    let plan = BoundToolPlan::new(0, Vec::new());
    let snapshot = StepSnapshot {
        model_id: model.id().to_string(),
        plan_generation: 0,
        plan_hash: plan.hash().clone(),
        correlation_id: CorrelationId::new("bench"),
        round: 1,
    };
    let messages = [Message::user_text("Say hello.")];
    let first = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let seen = first.clone();
    let deltas = DeltaSink::new(move |_| {
        let mut at = seen.lock().unwrap_or_else(|p| p.into_inner());
        at.get_or_insert_with(Instant::now);
    });
    let start = Instant::now();
    model
        .complete(&ModelRequest {
            system: "",
            messages: &messages,
            plan: &plan,
            snapshot: &snapshot,
            force_text: false,
            deltas,
        })
        .await?;
    let at = *first.lock().unwrap_or_else(|p| p.into_inner());
    Ok(at.context("the model sent no delta")? - start)
}

fn request(format: BenchFormat, base: &str) -> (String, Value) {
    let user = "Say hello.";
    match format {
        BenchFormat::Anthropic => (
            format!("{base}/v1/messages?beta=true"),
            json!({"model": "bench", "max_tokens": 100, "stream": true,
                   "messages": [{"role": "user", "content": user}]}),
        ),
        BenchFormat::Responses => (
            format!("{base}/v1/responses"),
            json!({"model": "bench", "stream": true, "store": false, "input": user}),
        ),
        BenchFormat::Chat => (
            format!("{base}/v1/chat/completions"),
            json!({"model": "bench", "stream": true,
                   "messages": [{"role": "user", "content": user}]}),
        ),
    }
}

/// The marker of the first frame that carries reply text, per format.
fn text_marker(format: BenchFormat) -> &'static str {
    match format {
        BenchFormat::Anthropic => "\"text_delta\"",
        BenchFormat::Responses => "response.output_text.delta",
        BenchFormat::Chat => "\"content\":\"Hello",
    }
}

/// Times to the first body byte and to the first text frame of one streamed call.
async fn through(
    client: &reqwest::Client,
    format: BenchFormat,
    url: &str,
    body: &Value,
    token: &str,
) -> anyhow::Result<(Duration, Duration)> {
    let start = Instant::now();
    let mut resp = client
        .post(url)
        .header("x-api-key", token)
        .json(body)
        .send()
        .await?;
    if !resp.status().is_success() {
        bail!("gateway answered {}", resp.status());
    }
    let (mut first_byte, mut first_text) = (None, None);
    let mut seen = String::new();
    while let Some(chunk) = resp.chunk().await? {
        first_byte.get_or_insert_with(|| start.elapsed());
        if first_text.is_none() {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains(text_marker(format)) {
                first_text = Some(start.elapsed());
            }
        }
    }
    Ok((
        first_byte.context("empty body")?,
        first_text.context("no text in the stream")?,
    ))
}

pub async fn run(args: BenchGatewayArgs) -> anyhow::Result<Exit> {
    let dir = tempfile::tempdir()?;
    let gw = gateway::start(GatewayConfig {
        model: model()?,
        model_name: "bench".into(),
        budgets: Budgets::default(),
        record_file: dir.path().join("gateway.jsonl"),
        listen: Listen::loopback(),
        secrets: Vec::new(),
    })
    .await?;
    let base = gw.url().context("the gateway has no loopback address")?;
    let (url, body) = request(args.format, &base);
    let client = reqwest::Client::new();
    let direct_model = model()?;
    let (mut d, mut byte, mut text) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..args.warmup + args.repeat {
        let dt = direct(&*direct_model).await?;
        let (b, t) = through(&client, args.format, &url, &body, gw.token()).await?;
        if i >= args.warmup {
            d.push(dt);
            byte.push(b);
            text.push(t);
        }
    }
    let records = gw.finish().await?;
    let (d, byte, text) = (figures(d), figures(byte), figures(text));
    let added = text.median_ms - d.median_ms;
    let out = json!({
        "format": format!("{:?}", args.format).to_lowercase(),
        "calls": args.repeat,
        "warmup": args.warmup,
        "direct_first_delta": d,
        "gateway_first_byte": byte,
        "gateway_first_text": text,
        "added_median_ms": added,
        "records": records.len(),
    });
    if args.json {
        println!("{out}");
    } else {
        println!(
            "gateway bench ({} calls after {} warm-up, {:?})",
            args.repeat, args.warmup, args.format
        );
        println!(
            "  direct model, first text delta:  median {:.3} ms  p90 {:.3} ms",
            d.median_ms, d.p90_ms
        );
        println!(
            "  gateway, first body byte:        median {:.3} ms  p90 {:.3} ms",
            byte.median_ms, byte.p90_ms
        );
        println!(
            "  gateway, first text frame:       median {:.3} ms  p90 {:.3} ms",
            text.median_ms, text.p90_ms
        );
        println!("  added (first text, medians):     {added:.3} ms (target <= 2 ms)");
    }
    Ok(Exit::Success)
}
