//! What one sandbox is started with (a trial, or an image build step): the data the launch
//! reads and the handle keeps for its teardown, below both.

use std::path::PathBuf;

use super::netns::Pin;
use super::protocol::{Bind, Network};
use crate::cgroup::Limits;
use crate::{GroupNetwork, ImageRoot};

/// What one sandbox is started with (trial or image build).
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    /// Scratch directory of this sandbox (created; its `upper/` is the writable layer).
    pub dir: PathBuf,
    pub root: ImageRoot,
    pub workdir: String,
    pub env: Vec<(String, String)>,
    pub user: Option<String>,
    pub network: Network,
    /// What a `Network::Allowlist` sandbox may reach (resolved on the host); empty otherwise.
    pub allowed: Vec<Pin>,
    pub limits: Limits,
    pub binds: Vec<Bind>,
    /// The trial's `/logs/verifier` on the host, shown to the verifier only; the agent's
    /// processes see a decoy (`<dir>/decoy`) at that path.
    pub verifier_logs: Option<PathBuf>,
    /// A disk of this many MB for the writable layer (trials on image layers); `None`: the
    /// layer lives on the host's file system (image builds, `--base host`).
    pub disk_mb: Option<u64>,
    /// Remove `dir` at teardown (trials); an image build keeps its upper layer.
    pub remove_dir: bool,
    /// The compose group's network this sandbox joins, and the names of its services.
    pub group: GroupNetwork,
}

impl Launch {
    pub(super) fn sub(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The built layer a `--base host` sandbox stacks over the host's root, if any.
    pub(super) fn host_layer(&self) -> Option<PathBuf> {
        match &self.root {
            ImageRoot::Host { layer } => layer.clone(),
            ImageRoot::Layers(_) | ImageRoot::Engine(_) | ImageRoot::Registry(_) => None,
        }
    }
}
