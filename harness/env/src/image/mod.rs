//! Container images without a container engine: pull them from an OCI registry, load them from a
//! `docker save` tarball or an OCI image layout, and keep each layer unpacked once, in overlayfs'
//! format, so that a sandbox can stack an image's layers as the lower dirs of one overlay mount.
//!
//! - [`Reference`] names an image the way docker does (`debian:bookworm-slim` is
//!   `docker.io/library/debian:bookworm-slim`).
//! - [`ImageStore`] is the content-addressed store on disk (its layout is in `store.rs`).
//! - Pulls verify every manifest and blob against its sha256 digest; loads verify every blob.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

mod alias;
mod archive;
mod layer;
mod manifest;
mod reference;
mod registry;
mod save;
mod store;
#[cfg(test)]
mod tests;

pub use alias::Aliases;
pub use archive::load as load_archive;
pub use reference::Reference;
pub use save::{image_config, layer_tar, save};
pub use store::ImageStore;

/// Told one line per step of a pull.
pub type Progress = Arc<dyn Fn(&str) + Send + Sync>;

/// How to reach registries for a pull.
#[derive(Clone, Default)]
pub struct PullOptions {
    /// Registry name (`docker.io`, `ghcr.io`) -> base URL of a mirror (`http://127.0.0.1:5000`),
    /// tried before the registry itself, as docker's `registry-mirrors`.
    pub mirrors: BTreeMap<String, String>,
    /// The docker client config with registry credentials: a `config.json` file or the folder
    /// holding one. `None`: `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`.
    pub docker_config: Option<PathBuf>,
    /// Told one line per step of a pull (manifest resolved, layer downloaded, unpacked).
    pub progress: Option<Progress>,
}

impl fmt::Debug for PullOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PullOptions")
            .field("mirrors", &self.mirrors)
            .field("docker_config", &self.docker_config)
            .field("progress", &self.progress.as_ref().map(|_| "Fn(&str)"))
            .finish()
    }
}

/// Where a stored image came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ImageSource {
    /// Pulled; the base URL that served it (a mirror's, or the registry's).
    Pulled { registry_url: String },
    /// Loaded from a `docker save` tarball or an OCI layout.
    Loaded { file: PathBuf },
    /// Made without a registry, e.g. "bootstrapped from the Debian archive (bookworm)".
    Bootstrapped { what: String },
    /// Built from a Dockerfile.
    Built,
}

/// The runtime settings of an image: the `config` object of its OCI config.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ImageConfig {
    /// `Env`, split at the first `=`.
    pub env: Vec<(String, String)>,
    pub working_dir: Option<String>,
    pub user: Option<String>,
    pub entrypoint: Option<Vec<String>>,
    pub cmd: Option<Vec<String>>,
    /// Docker's `Shell` (for `RUN` in shell form), when the image sets one.
    pub shell: Option<Vec<String>>,
}

/// An image recorded in the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredImage {
    /// Canonical reference (`docker.io/library/debian:bookworm-slim`); for an image loaded
    /// without any name, its digest.
    pub reference: String,
    /// `sha256:...`: the manifest's digest when the image has a manifest (pulled, OCI layout,
    /// newer `docker save`); the config's digest (docker's image id) for a legacy `docker save`;
    /// for local images a sha256 over the layer ids and the config.
    pub digest: String,
    pub config: ImageConfig,
    /// The unpacked layer dirs, bottom first, as short paths (`<root>/l/<12 hex>`).
    pub layers: Vec<PathBuf>,
    /// Bytes of the unpacked layers' regular files.
    pub size_bytes: u64,
    pub source: ImageSource,
    /// RFC 3339, when recorded.
    pub created: String,
}

/// Everything that can go wrong with images; each message names the reference, URL or file.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("invalid image reference {reference:?}: {reason}")]
    BadReference { reference: String, reason: String },
    #[error("{reference}: not found at {url}")]
    NotFound { reference: String, url: String },
    #[error("{reference}: unauthorized at {url}: {reason}")]
    Unauthorized {
        reference: String,
        url: String,
        reason: String,
    },
    #[error("{reference}: digest mismatch for {what}: expected {expected}, got {actual}")]
    DigestMismatch {
        reference: String,
        what: String,
        expected: String,
        actual: String,
    },
    #[error("{reference}: unsupported media type {media_type:?} for {what}")]
    UnsupportedMediaType {
        reference: String,
        media_type: String,
        what: String,
    },
    #[error("{reference}: no {platform} image in its index (it has: {available})")]
    UnsupportedPlatform {
        reference: String,
        platform: String,
        available: String,
    },
    #[error("{reference}: bad manifest or config from {location}: {what}")]
    BadManifest {
        reference: String,
        location: String,
        what: String,
    },
    #[error("network error at {url}: {message}")]
    Network { url: String, message: String },
    #[error("{url}: the registry answered {status}: {message}")]
    Registry {
        url: String,
        status: u16,
        message: String,
    },
    #[error("{}: {what}: {source}", path.display())]
    Io {
        path: PathBuf,
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("bad archive {}: {what}", file.display())]
    BadArchive { file: PathBuf, what: String },
    #[error("docker config {}: {what}", path.display())]
    BadCredentials { path: PathBuf, what: String },
    #[error("layer {id}: {what}")]
    Layer { id: String, what: String },
}

impl ImageError {
    pub(crate) fn io(
        path: impl Into<PathBuf>,
        what: impl Into<String>,
        source: std::io::Error,
    ) -> Self {
        ImageError::Io {
            path: path.into(),
            what: what.into(),
            source,
        }
    }
}
