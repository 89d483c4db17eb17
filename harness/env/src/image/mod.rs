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
    Pulled {
        /// Base URL of the registry or mirror.
        registry_url: String,
    },
    /// Loaded from a `docker save` tarball or an OCI layout.
    Loaded {
        /// The tarball or layout directory loaded.
        file: PathBuf,
    },
    /// Made without a registry, e.g. "bootstrapped from the Debian archive (bookworm)".
    Bootstrapped {
        /// How it was made, in words.
        what: String,
    },
    /// Built from a Dockerfile.
    Built,
}

/// The runtime settings of an image: the `config` object of its OCI config.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ImageConfig {
    /// `Env`, split at the first `=`.
    pub env: Vec<(String, String)>,
    /// `WorkingDir`: the default working directory of processes.
    pub working_dir: Option<String>,
    /// `User`: default user (`name`, `uid` or `uid:gid`); root when `None`.
    pub user: Option<String>,
    /// `Entrypoint`: the argv prefix of the image's command.
    pub entrypoint: Option<Vec<String>>,
    /// `Cmd`: the default command, or arguments to the entrypoint.
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
    /// The image's runtime settings.
    pub config: ImageConfig,
    /// The unpacked layer dirs, bottom first, as short paths (`<root>/l/<12 hex>`).
    pub layers: Vec<PathBuf>,
    /// Bytes of the unpacked layers' regular files.
    pub size_bytes: u64,
    /// Where it came from.
    pub source: ImageSource,
    /// RFC 3339, when recorded.
    pub created: String,
}

/// Everything that can go wrong with images; each message names the reference, URL or file.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// A reference that does not parse.
    #[error("invalid image reference {reference:?}: {reason}")]
    BadReference {
        /// The reference as given.
        reference: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The registry has no such image, tag or blob.
    #[error("{reference}: not found at {url}")]
    NotFound {
        /// The image asked for.
        reference: String,
        /// The URL that answered 404.
        url: String,
    },
    /// The registry refused the credentials, or their lack.
    #[error("{reference}: unauthorized at {url}: {reason}")]
    Unauthorized {
        /// The image asked for.
        reference: String,
        /// The URL that refused.
        url: String,
        /// The registry's or the token service's explanation.
        reason: String,
    },
    /// Downloaded bytes whose sha256 is not the digest that named them.
    #[error("{reference}: digest mismatch for {what}: expected {expected}, got {actual}")]
    DigestMismatch {
        /// The image being pulled.
        reference: String,
        /// Which blob or manifest.
        what: String,
        /// The digest asked for.
        expected: String,
        /// The digest of what arrived.
        actual: String,
    },
    /// A manifest, config or layer of a media type the store cannot read.
    #[error("{reference}: unsupported media type {media_type:?} for {what}")]
    UnsupportedMediaType {
        /// The image being pulled.
        reference: String,
        /// The media type found.
        media_type: String,
        /// Which part carried it.
        what: String,
    },
    /// A multi-platform index without an image for this machine's platform.
    #[error("{reference}: no {platform} image in its index (it has: {available})")]
    UnsupportedPlatform {
        /// The image being pulled.
        reference: String,
        /// The platform wanted, such as `linux/amd64`.
        platform: String,
        /// The platforms the index lists, comma-separated.
        available: String,
    },
    /// A manifest or config that does not parse or lacks what it must have.
    #[error("{reference}: bad manifest or config from {location}: {what}")]
    BadManifest {
        /// The image concerned.
        reference: String,
        /// The URL or file it was read from.
        location: String,
        /// What is wrong.
        what: String,
    },
    /// The request did not get an answer (connection, TLS, timeout).
    #[error("network error at {url}: {message}")]
    Network {
        /// The URL requested.
        url: String,
        /// The transport's error.
        message: String,
    },
    /// The registry answered with an unexpected HTTP status.
    #[error("{url}: the registry answered {status}: {message}")]
    Registry {
        /// The URL requested.
        url: String,
        /// The HTTP status code.
        status: u16,
        /// The body or reason the registry gave.
        message: String,
    },
    /// A file system operation of the store failed.
    #[error("{}: {what}: {source}", path.display())]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// What was being done.
        what: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A `docker save` tarball or OCI layout that cannot be loaded.
    #[error("bad archive {}: {what}", file.display())]
    BadArchive {
        /// The archive file or layout directory.
        file: PathBuf,
        /// What is wrong with it.
        what: String,
    },
    /// A docker client config whose credentials cannot be read.
    #[error("docker config {}: {what}", path.display())]
    BadCredentials {
        /// The config file.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
    /// A write asked of a store opened read-only (a staged store shared by a cluster's nodes).
    #[error(
        "the image store {} is read-only: {what} is not done here; stage what the pack needs \
         first, where the network is: geode image stage PACK (with GEODE_IMAGES={})",
        root.display(),
        root.display()
    )]
    ReadOnly {
        /// The store's folder.
        root: PathBuf,
        /// What would have written to it.
        what: String,
    },
    /// A layer that cannot be unpacked or recorded.
    #[error("layer {id}: {what}")]
    Layer {
        /// The layer's id or digest.
        id: String,
        /// What went wrong.
        what: String,
    },
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
