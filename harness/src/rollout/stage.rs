//! `geode image stage PACK`: everything a pack's trials need of the image store, made now,
//! where the network is, so that nodes sharing the store read-only never build or download.
//!
//! For each task: its own environment, a separate verifier's, and its compose sidecars, each
//! prepared through the backend exactly as a trial prepares it (base pulled, loaded or
//! bootstrapped, Dockerfile steps built, one store layer per step), then every first-use
//! preparation a sandbox would make of those layers (the one-time shift of their owners into
//! the sandbox's id range, [`crate::env::ids::shift_layer`]) done here, because a read-only
//! store cannot take it later. Staging again finds everything in place and changes nothing.

use std::path::PathBuf;
use std::time::{Instant, SystemTime};

use serde::Serialize;

use super::services::sidecar_spec;
use super::trial::{environment_spec, verifier_environment_spec};
use crate::env::{Backend, EnvError, EnvironmentSpec, ImageRoot, PreparedImage};
use crate::pack::Task;

/// Which of a task's environments an image is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "name")]
pub enum StagedRole {
    /// The task's own environment (the agent's, and the verifier's unless it has its own).
    Main,
    /// A separate verifier's environment (`[verifier.environment]` or `tests/Dockerfile`).
    Verifier,
    /// A compose sidecar, by service name.
    Sidecar(String),
}

impl std::fmt::Display for StagedRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StagedRole::Main => f.write_str("main"),
            StagedRole::Verifier => f.write_str("verifier"),
            StagedRole::Sidecar(name) => write!(f, "service {name}"),
        }
    }
}

/// One environment staged, or why it could not be.
#[derive(Debug, Clone, Serialize)]
pub struct StagedImage {
    /// The task's id.
    pub task: String,
    /// Which of its environments.
    pub role: StagedRole,
    /// What its image is built on, as named (`python:3.11-slim-bookworm`).
    pub from: String,
    /// Where that base came from, in words.
    pub source: String,
    /// Layers the image stacks (base and build steps).
    pub layers: usize,
    /// Layers made in the store by this staging (pulled, bootstrapped or built now); 0 when
    /// everything was there already.
    pub new_layers: usize,
    /// Layers whose owners were shifted now (none on a store staged before).
    pub shifted: usize,
    /// Seconds spent on it.
    pub seconds: f64,
    /// The error, when it could not be staged (the other fields are then empty).
    pub error: Option<String>,
}

/// Stages every environment of every task, one after another (tasks share bases and step
/// layers, which the first prepares for all); a failure is recorded and the rest go on.
pub async fn stage_tasks(
    tasks: &[Task],
    backend: &dyn Backend,
    told: &(dyn Fn(&StagedImage) + Sync),
) -> Vec<StagedImage> {
    let mut out = Vec::new();
    for task in tasks {
        for (role, spec) in environments(task) {
            let started = Instant::now();
            let since = SystemTime::now();
            let staged = match stage_one(backend, &spec, since).await {
                Ok((image, new_layers, shifted)) => StagedImage {
                    task: task.id.clone(),
                    role,
                    from: image.from.clone(),
                    source: image.source.clone(),
                    layers: layers(&image).len(),
                    new_layers,
                    shifted,
                    seconds: started.elapsed().as_secs_f64(),
                    error: None,
                },
                Err(e) => StagedImage {
                    task: task.id.clone(),
                    role,
                    from: String::new(),
                    source: String::new(),
                    layers: 0,
                    new_layers: 0,
                    shifted: 0,
                    seconds: started.elapsed().as_secs_f64(),
                    error: Some(e.to_string()),
                },
            };
            told(&staged);
            out.push(staged);
        }
    }
    out
}

/// The task's environments as its trials prepare them: main, a separate verifier's when it
/// has one, and each compose sidecar.
fn environments(task: &Task) -> Vec<(StagedRole, EnvironmentSpec)> {
    let main = environment_spec(task, 1.0, None);
    let mut out = Vec::new();
    let (verifier, key) = verifier_environment_spec(task, 1.0, None);
    let separate = key != task.hash;
    if let Some(compose) = &task.compose {
        for service in &compose.sidecars {
            out.push((
                StagedRole::Sidecar(service.name.clone()),
                sidecar_spec(task, &main, service, None),
            ));
        }
    }
    out.insert(0, (StagedRole::Main, main));
    if separate {
        out.push((StagedRole::Verifier, verifier));
    }
    out
}

/// Prepares one environment, then shifts the owners of any of its layers not shifted yet;
/// returns the image, how many of its layers entered the store since `since`, and how many
/// were shifted now.
async fn stage_one(
    backend: &dyn Backend,
    spec: &EnvironmentSpec,
    since: SystemTime,
) -> Result<(PreparedImage, usize, usize), EnvError> {
    let image = backend.prepare(spec).await?;
    let layers: Vec<PathBuf> = layers(&image).to_vec();
    let (new_layers, shifted) = tokio::task::spawn_blocking(move || {
        let new_layers = layers.iter().filter(|l| made_since(l, since)).count();
        let mut shifted = 0;
        for layer in &layers {
            if !crate::env::ids::is_shifted(layer) {
                crate::env::ids::shift_layer(layer).map_err(|source| EnvError::Io {
                    context: format!("shift the owners of {}", layer.display()),
                    source,
                })?;
                shifted += 1;
            }
        }
        Ok::<_, EnvError>((new_layers, shifted))
    })
    .await
    .map_err(|e| EnvError::Lost(format!("staging task: {e}")))??;
    Ok((image, new_layers, shifted))
}

/// Whether a store layer (`l/<short>` -> `layers/<id>/fs`) was finished after `since`: its
/// `done` marker is the last thing the store writes of it.
fn made_since(layer: &std::path::Path, since: SystemTime) -> bool {
    std::fs::canonicalize(layer)
        .ok()
        .and_then(|fs| std::fs::metadata(fs.with_file_name("done")).ok())
        .and_then(|m| m.modified().ok())
        .is_some_and(|at| at >= since)
}

fn layers(image: &PreparedImage) -> &[PathBuf] {
    match &image.root {
        ImageRoot::Layers(layers) => layers,
        ImageRoot::Host { .. } | ImageRoot::Engine(_) | ImageRoot::Registry(_) => &[],
    }
}

/// The totals of a staging, for its last line.
pub fn summary(staged: &[StagedImage]) -> String {
    let failed = staged.iter().filter(|s| s.error.is_some()).count();
    let made: usize = staged.iter().map(|s| s.new_layers).sum();
    let shifted: usize = staged.iter().map(|s| s.shifted).sum();
    let seconds: f64 = staged.iter().map(|s| s.seconds).sum();
    format!(
        "{} environments staged, {} failed; {made} layers made now, {shifted} layers' owners \
         shifted now; {seconds:.1} s",
        staged.len() - failed,
        failed,
    )
}
