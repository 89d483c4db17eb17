//! `geode bench agent NAME PACK`: what a third-party agent adds to a trial's set-up once its
//! layer is installed (the warm cache): sandboxes started on each task's image with and without
//! the agent's layer, alternated, and the per-trial pieces of the agent phase before the agent
//! runs (the installed layer found, the listener on the sandbox's loopback, the gateway up and
//! down).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use geode_harness::agents::{AgentChoice, TrialAgent, install};
use geode_harness::env::{Backend, ImageRoot, Sandbox};
use geode_harness::gateway::{self, Budgets, GatewayConfig, Listen};
use geode_harness::pack::TaskPack;
use geode_harness::rollout::trial::environment_spec;
use geode_runtime::model::embedded::NopModel;

use super::backends::ImageSettings;

/// Medians in milliseconds, for printing.
fn median_ms(v: Vec<Duration>) -> f64 {
    super::bench_support::median(v).as_secs_f64() * 1e3
}

/// The bench: `repeat` alternated pairs per task.
pub async fn run(agent: &AgentChoice, pack: &Path, repeat: usize) -> anyhow::Result<()> {
    let agents_dir = install::agents_dir();
    // First resolution: installs when the cache is cold (not timed: the bench is of the warm
    // cache); the second is what every later run pays.
    TrialAgent::resolve(agent, &agents_dir)?;
    let t = Instant::now();
    let trial_agent = TrialAgent::resolve(agent, &agents_dir)?;
    let resolve = t.elapsed();
    let Some(layer) = trial_agent.layer().map(Path::to_path_buf) else {
        anyhow::bail!("{agent} has no layer to stack: name a built-in third-party agent");
    };
    let settings = ImageSettings::load()?;
    let scratch = super::bench_support::tempfile_dir(&settings.store)?;
    let result = bench(&settings, &scratch, &layer, pack, repeat.max(1)).await;
    let _ = std::fs::remove_dir_all(&scratch);
    let (plain, layered, gateway_up) = result?;
    println!(
        "{agent}: warm layer found in {:.2} ms (once per run)",
        resolve.as_secs_f64() * 1e3
    );
    let (p, l) = (median_ms(plain), median_ms(layered));
    println!(
        "sandbox set-up + teardown: {p:.1} ms without the layer, {l:.1} ms with it (medians): \
         the layer adds {:.1} ms",
        l - p
    );
    println!(
        "agent phase before the agent starts (listener inside + gateway up + down): {:.2} ms (median)",
        median_ms(gateway_up)
    );
    Ok(())
}

type Times = (Vec<Duration>, Vec<Duration>, Vec<Duration>);

async fn bench(
    settings: &ImageSettings,
    scratch: &Path,
    layer: &Path,
    pack: &Path,
    repeat: usize,
) -> anyhow::Result<Times> {
    let pack = TaskPack::load(pack)?;
    let backend = super::bench_support::backend(settings.store.clone(), &scratch.join("state"))?;
    let (mut plain, mut layered, mut gateway_up) = (Vec::new(), Vec::new(), Vec::new());
    for task in &pack.tasks {
        let spec = environment_spec(task, 1.0, None);
        let image = backend.prepare(&spec).await?;
        let mut with_layer = image.clone();
        match &mut with_layer.root {
            ImageRoot::Layers(lower) => lower.push(layer.to_path_buf()),
            _ => anyhow::bail!("{}: not an image of layers", task.id),
        }
        for i in 0..repeat {
            for (stack, times) in [(&image, &mut plain), (&with_layer, &mut layered)] {
                let trial = scratch.join("trials").join(format!(
                    "{}-{i}-{}",
                    task.id.replace('/', "-"),
                    times.len()
                ));
                let t = Instant::now();
                let sandbox = backend.start_sandbox(&spec, stack, &trial).await?;
                if std::ptr::eq(stack, &with_layer) {
                    // Timed apart: the gateway's share, not the sandbox's.
                    let g = Instant::now();
                    gateway_round(&sandbox, &trial).await?;
                    let took = g.elapsed();
                    gateway_up.push(took);
                    Box::new(sandbox).teardown().await?;
                    times.push(t.elapsed() - took);
                } else {
                    Box::new(sandbox).teardown().await?;
                    times.push(t.elapsed());
                }
            }
        }
    }
    Ok((plain, layered, gateway_up))
}

/// What the agent phase does before the agent starts: a listener on the sandbox's loopback and
/// the trial's gateway on it, then the gateway finished.
async fn gateway_round(sandbox: &dyn Sandbox, trial: &Path) -> anyhow::Result<()> {
    let listener = sandbox.listen_inside(0).await?;
    let record: PathBuf = trial.with_extension("gateway.jsonl");
    let gw = gateway::start(GatewayConfig {
        model: Arc::new(NopModel),
        model_name: "nop".into(),
        budgets: Budgets::default(),
        record_file: record.clone(),
        listen: Listen {
            inside: Some(listener),
            ..Listen::default()
        },
        secrets: Vec::new(),
    })
    .await
    .context("starting the gateway")?;
    gw.finish().await.context("finishing the gateway")?;
    let _ = std::fs::remove_file(record);
    Ok(())
}
