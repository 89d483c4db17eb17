//! `geode bench pull REF`: how long a first pull of an image takes (manifest, layers fetched
//! concurrently and unpacked as they stream, every digest checked, the layers' owners shifted,
//! the record written), into a new empty store each time; with `--docker`, each run is paired
//! with a `docker pull` of the same reference from the same registry after `docker rmi`, so
//! the two are timed alternately on the same machine and the ratio is taken per pair.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use geode_harness::env::image::{ImageStore, PullOptions, Reference};

use super::backends::ImageSettings;
use super::bench_support::{median, tempfile_dir};
use super::exit::Exit;

/// `geode bench pull`'s arguments.
#[derive(Debug, clap::Args)]
pub struct BenchPullArgs {
    /// The image to pull (through the configured mirrors, as `geode image pull`).
    reference: String,
    /// Counted pulls (after one that is not counted).
    #[arg(short = 'r', long, default_value_t = 5)]
    repeat: usize,
    /// Pair each pull with `docker pull` of the same reference (a docker engine answering
    /// `docker info`; its image removed before each pull).
    #[arg(long)]
    docker: bool,
}

pub async fn run(args: BenchPullArgs) -> anyhow::Result<Exit> {
    let settings = ImageSettings::load()?;
    let reference = Reference::parse(&args.reference)?;
    if args.docker && !docker(&["info"]).is_ok_and(|o| o.status.success()) {
        bail!("--docker: no docker engine answers `docker info`");
    }
    let scratch = tempfile_dir(&settings.store)?;
    let opts = PullOptions {
        mirrors: settings.mirrors.clone(),
        docker_config: None,
        progress: None,
    };
    let (mut ours, mut theirs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let mut described = false;
    // Run 0 warms the page cache of the registry's files and both clients; it is not counted.
    for run in 0..=args.repeat {
        let store_dir = scratch.join(format!("store-{run}"));
        let store = ImageStore::open(&store_dir)?;
        let t = Instant::now();
        let image = store.pull(&reference, &opts).await?;
        let geode = t.elapsed();
        if !described {
            say!(
                "geode: {reference}: {} layers, {:.0} MB unpacked",
                image.layers.len(),
                image.size_bytes as f64 / 1e6
            );
            described = true;
        }
        tokio::task::spawn_blocking(move || std::fs::remove_dir_all(store_dir)).await??;
        let docker_pull = if args.docker {
            let _ = docker(&["rmi", "-f", &args.reference]);
            let t = Instant::now();
            let out = docker(&["pull", "-q", &args.reference])?;
            if !out.status.success() {
                bail!(
                    "docker pull {}: {}",
                    args.reference,
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            Some(t.elapsed())
        } else {
            None
        };
        let counted = run > 0;
        println!(
            "{} {run}: geode {:.2} s{}",
            if counted { "run" } else { "warm-up" },
            geode.as_secs_f64(),
            docker_pull.map_or(String::new(), |d| format!(
                ", docker {:.2} s",
                d.as_secs_f64()
            ))
        );
        if counted {
            ours.push(geode);
            if let Some(d) = docker_pull {
                theirs.push(d);
                ratios.push(geode.as_secs_f64() / d.as_secs_f64());
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let secs = |d: Duration| format!("{:.2} s", d.as_secs_f64());
    println!(
        "geode first pull: median {} (min {}, max {}) of {}",
        secs(median(ours.clone())),
        secs(ours.iter().min().copied().unwrap_or_default()),
        secs(ours.iter().max().copied().unwrap_or_default()),
        ours.len()
    );
    if !theirs.is_empty() {
        ratios.sort_by(f64::total_cmp);
        println!(
            "docker pull: median {} (min {}, max {}); geode / docker per pair: median {:.2}",
            secs(median(theirs.clone())),
            secs(theirs.iter().min().copied().unwrap_or_default()),
            secs(theirs.iter().max().copied().unwrap_or_default()),
            ratios[ratios.len() / 2]
        );
    }
    Ok(Exit::Success)
}

fn docker(args: &[&str]) -> anyhow::Result<std::process::Output> {
    std::process::Command::new("docker")
        .args(args)
        .output()
        .with_context(|| format!("docker {}", args.join(" ")))
}
