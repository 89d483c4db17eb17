//! One image build per task per run, shared by its trials even when they start concurrently.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

use crate::env::{Backend, EnvError, EnvironmentSpec, PreparedImage};
use crate::pack::TaskHash;

/// A failed build, kept so the task's other trials fail the same way without rebuilding.
#[derive(Debug, Clone)]
enum Failure {
    SetupFailed { step: String, message: String },
    Unsupported(String),
    Lost(String),
}

impl From<&EnvError> for Failure {
    fn from(e: &EnvError) -> Self {
        match e {
            EnvError::SetupFailed { step, message } => Failure::SetupFailed {
                step: step.clone(),
                message: message.clone(),
            },
            EnvError::Unsupported(m) => Failure::Unsupported(m.clone()),
            other => Failure::Lost(other.to_string()),
        }
    }
}

impl From<Failure> for EnvError {
    fn from(f: Failure) -> Self {
        match f {
            Failure::SetupFailed { step, message } => EnvError::SetupFailed { step, message },
            Failure::Unsupported(m) => EnvError::Unsupported(m),
            Failure::Lost(m) => EnvError::Lost(m),
        }
    }
}

type Cell = Arc<OnceCell<Result<PreparedImage, Failure>>>;

/// The images of one run, one per task hash: concurrent trials of a task wait for one build.
/// A failed build is kept; an image whose layers left the store is prepared again.
#[derive(Default)]
pub struct ImageCache {
    cells: Mutex<HashMap<TaskHash, Cell>>,
}

impl ImageCache {
    /// An empty cache.
    pub fn new() -> Self {
        ImageCache::default()
    }

    /// The task's image, built through `backend` on first use and shared after; a failure is the
    /// first build's, for every trial of the task.
    pub async fn prepare(
        &self,
        backend: &dyn Backend,
        task: &TaskHash,
        spec: &EnvironmentSpec,
    ) -> Result<PreparedImage, EnvError> {
        let cell = {
            // Only inserts fresh cells; a poisoned map is still consistent.
            let mut cells = self.cells.lock().unwrap_or_else(|p| p.into_inner());
            // An image one of whose layers is gone from the store since it was prepared (the
            // store is shared with other processes) is prepared again: a retried trial must
            // not start on the same missing layer it was lost to.
            let stale = cells
                .get(task)
                .and_then(|cell| cell.get())
                .is_some_and(|prepared| matches!(prepared, Ok(image) if !layers_present(image)));
            if stale {
                cells.remove(task);
            }
            cells.entry(task.clone()).or_default().clone()
        };
        let result = cell
            .get_or_init(|| async { backend.prepare(spec).await.map_err(|e| Failure::from(&e)) })
            .await;
        result.clone().map_err(EnvError::from)
    }
}

/// Whether every layer of a prepared image still resolves (a layer's short path is a link).
fn layers_present(image: &PreparedImage) -> bool {
    match &image.root {
        crate::env::ImageRoot::Layers(layers) => layers.iter().all(|layer| layer.exists()),
        _ => true,
    }
}
