//! The image store on disk: content-addressed, so that an image's layers are downloaded and
//! unpacked once however many images and trials share them, and safe for several processes to
//! use at once.
//!
//! Layout under the root:
//!
//! ```text
//! blobs/sha256/<hex>       configs (kept; small) and layer blobs while they wait to be unpacked
//!                          (a layer blob is deleted once unpacked: the unpacked tree is what
//!                          trials use, and keeping both would double the disk an image takes)
//! layers/<id>/fs           one unpacked layer; <id> is the hex of its diff id (the digest of
//!                          the uncompressed tar), or the caller's id for an adopted layer
//! layers/<id>/done         written last, after `fs` is complete: without it the layer is absent
//! layers/<id>/lock         flock(2) held while the layer is made, so a second process waits
//!                          and then finds it done instead of unpacking it again
//! l/<12 hex> -> ../layers/<id>/fs
//!                          the short path trials mount: overlayfs' mount options must fit in
//!                          one page, and an image may stack 40 layers (docker's overlay2 does
//!                          the same). A symlink: overlayfs resolves lower dirs when mounting.
//! images/refs/<name>.json  an image record by canonical reference
//! images/digests/<hex>.json the same record by digest (the manifest's, and the index's when
//!                          the tag named an index), so a pinned `repo@sha256:...` finds it
//! tmp/                     staging: downloads, unpacks before their rename, `temp_dir()`
//! ```
//!
//! Layers are unpacked into `tmp/` and renamed into place, so a crash leaves no half layer
//! that looks finished. Records are written to a temp file and renamed.

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use futures::{StreamExt as _, TryStreamExt as _};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::layer::unpack_layer;
use super::manifest::{self, Descriptor, digest_hex};
use super::registry::{self, Client, Session};
use super::{ImageConfig, ImageError, ImageSource, PullOptions, Reference, StoredImage};

/// Layer downloads in flight at once, as docker's default.
const PARALLEL_LAYERS: usize = 3;
/// Staging entries older than this are left over from a crash; `prune` removes them.
const STALE_TEMP: Duration = Duration::from_secs(24 * 3600);
/// The short name of a layer: enough hex that a collision is not a practical concern, few
/// enough that 40 lower dirs fit in a mount's options.
const SHORT_ID: usize = 12;

/// The store of images and unpacked layers under one root directory.
#[derive(Debug, Clone)]
pub struct ImageStore {
    root: PathBuf,
}

/// A layer blob to unpack, and what it must hash to.
pub(crate) struct LayerBlob<'a> {
    pub path: &'a Path,
    /// How messages name it: a loaded blob by its place in the archive, not its staging copy.
    pub label: &'a Path,
    /// The compressed blob's digest, when known (a legacy `docker save` layer has only its
    /// diff id).
    pub digest: Option<&'a str>,
    pub diff_id: &'a str,
}

/// An image record as written to disk: the public view plus what `prune` and `remove` need.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    image: StoredImage,
    /// Ids (`layers/<id>`) of the store's layers the image uses.
    layer_ids: Vec<String>,
    /// Blobs kept for the image (its config).
    blobs: Vec<String>,
    /// Every digest the record is filed under in `images/digests/`.
    digests: Vec<String>,
}

/// `layers/<id>/done`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct LayerInfo {
    id: String,
    size_bytes: u64,
    origin: String,
    #[serde(default)]
    notes: Vec<String>,
}

impl ImageStore {
    /// Opens (creating when needed) the store at `root`.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, ImageError> {
        let root = root.into();
        for sub in [
            "blobs/sha256",
            "layers",
            "l",
            "images/refs",
            "images/digests",
            "tmp",
        ] {
            let dir = root.join(sub);
            fs::create_dir_all(&dir)
                .map_err(|e| ImageError::io(&dir, "creating the image store", e))?;
        }
        // Absolute and free of symlinks: layer paths go into mount options and must mean the
        // same thing from any working directory.
        let root = fs::canonicalize(&root)
            .map_err(|e| ImageError::io(&root, "resolving the image store", e))?;
        Ok(ImageStore { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The recorded image, without touching the network. A reference pinned by digest is looked
    /// up by digest (whatever repository recorded it). An image one of whose layers is gone
    /// (pruned, deleted by hand) reads as absent, so that it is pulled again.
    pub fn get(&self, reference: &Reference) -> Result<Option<StoredImage>, ImageError> {
        let path = match reference.digest() {
            Some(digest) => self.digest_record_path(digest)?,
            None => self.ref_record_path(&reference.to_string()),
        };
        Ok(self
            .read_record(&path)?
            .map(|r| r.image)
            .filter(|image| image.layers.iter().all(|l| l.is_dir())))
    }

    /// Pulls the image from its registry (mirrors first), unless it is pinned by digest and
    /// already here. Layers already in the store are not downloaded again.
    pub async fn pull(
        &self,
        reference: &Reference,
        opts: &PullOptions,
    ) -> Result<StoredImage, ImageError> {
        self.pull_via(reference, opts, true).await
    }

    /// `with_registry: false` tries the mirrors only (tests: a mirror of `docker.io` must not
    /// fall back to the real one).
    pub(crate) async fn pull_via(
        &self,
        reference: &Reference,
        opts: &PullOptions,
        with_registry: bool,
    ) -> Result<StoredImage, ImageError> {
        if reference.digest().is_some() {
            let pinned = reference.clone();
            if let Some(image) = self.blocking(move |store| store.get(&pinned)).await? {
                return Ok(image);
            }
        }
        let client_opts = opts.clone();
        let client = self.blocking(move |_| Client::new(&client_opts)).await?;
        let endpoints = registry::endpoints(reference.registry(), &opts.mirrors, with_registry);
        let mut last = None;
        for (i, endpoint) in endpoints.iter().enumerate() {
            match self.pull_from(&client, endpoint, reference).await {
                Ok(image) => return Ok(image),
                Err(e) => {
                    if let Some(next) = endpoints.get(i + 1) {
                        client.progress(&format!(
                            "{reference}: {} failed ({e}); trying {}",
                            endpoint.base, next.base
                        ));
                    }
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| ImageError::Network {
            url: reference.registry().to_string(),
            message: "no mirror configured and the registry itself excluded".into(),
        }))
    }

    async fn pull_from(
        &self,
        client: &Client,
        endpoint: &registry::Endpoint,
        reference: &Reference,
    ) -> Result<StoredImage, ImageError> {
        let session = client.session(endpoint, reference);
        let resolved = session.resolve(reference).await?;
        client.progress(&format!(
            "{reference}: manifest {} from {}",
            resolved.manifest_digest, endpoint.base
        ));
        let name = reference.to_string();
        let bad = |what: String| ImageError::BadManifest {
            reference: name.clone(),
            location: endpoint.base.clone(),
            what,
        };
        let config_desc = &resolved.manifest.config;
        if !manifest::config_media_type_ok(config_desc.media_type.as_deref()) {
            return Err(ImageError::UnsupportedMediaType {
                reference: name.clone(),
                media_type: config_desc.media_type.clone().unwrap_or_default(),
                what: "the image config".into(),
            });
        }
        digest_hex(&config_desc.digest).map_err(|e| bad(format!("config: {e}")))?;
        let config_digest = config_desc.digest.clone();
        let stored = self
            .blocking(move |store| store.read_blob(&config_digest))
            .await?;
        let config_bytes = match stored {
            Some(bytes) => bytes,
            None => {
                let bytes = session.blob_bytes(&config_desc.digest).await?;
                let (digest, copy) = (config_desc.digest.clone(), bytes.clone());
                self.blocking(move |store| store.put_blob(&digest, &copy))
                    .await?;
                bytes
            }
        };
        let (config, diff_ids) = manifest::parse_config(&config_bytes).map_err(bad)?;
        let layers = &resolved.manifest.layers;
        if diff_ids.len() != layers.len() {
            return Err(bad(format!(
                "the manifest has {} layers and the config {} diff ids",
                layers.len(),
                diff_ids.len()
            )));
        }
        for desc in layers {
            if !manifest::layer_media_type_ok(desc.media_type.as_deref()) {
                return Err(ImageError::UnsupportedMediaType {
                    reference: name.clone(),
                    media_type: desc.media_type.clone().unwrap_or_default(),
                    what: format!("layer {}", desc.digest),
                });
            }
            digest_hex(&desc.digest).map_err(|e| bad(format!("layer: {e}")))?;
        }
        // The futures are made up front (not in a stream's closure) so that the pull's future
        // stays `Send` for callers that spawn it.
        let total = layers.len();
        let pending: Vec<_> = layers
            .iter()
            .zip(&diff_ids)
            .enumerate()
            .map(|(i, (desc, diff_id))| {
                self.pull_layer(client, &session, &name, desc, diff_id, (i + 1, total))
            })
            .collect();
        let paths: Vec<PathBuf> = futures::stream::iter(pending)
            .buffered(PARALLEL_LAYERS)
            .try_collect()
            .await?;
        let layer_ids: Vec<String> = diff_ids.iter().map(|d| hex_of(d).to_string()).collect();
        let mut digests = vec![resolved.digest.clone()];
        if resolved.manifest_digest != resolved.digest {
            digests.push(resolved.manifest_digest.clone());
        }
        let (base, config_digest) = (endpoint.base.clone(), config_desc.digest.clone());
        let resolved_digest = resolved.digest.clone();
        self.blocking(move |store| {
            let image = StoredImage {
                reference: name,
                digest: resolved_digest,
                config,
                size_bytes: store.layers_size(&layer_ids),
                layers: paths,
                source: ImageSource::Pulled { registry_url: base },
                created: now(),
            };
            store.record(&image, layer_ids, vec![config_digest], digests, true)?;
            Ok(image)
        })
        .await
    }

    /// Runs store file work off the async threads.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&ImageStore) -> Result<T, ImageError> + Send + 'static,
    ) -> Result<T, ImageError> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || work(&store))
            .await
            .map_err(|e| {
                ImageError::io(&self.root, "a store task", io::Error::other(e.to_string()))
            })?
    }

    async fn pull_layer(
        &self,
        client: &Client,
        session: &Session<'_>,
        name: &str,
        desc: &Descriptor,
        diff_id: &str,
        (n, total): (usize, usize),
    ) -> Result<PathBuf, ImageError> {
        let id = hex_of(diff_id).to_string();
        let (known, blob_digest) = (id.clone(), desc.digest.clone());
        let (present, blob) = self
            .blocking(move |store| {
                let blob = store.blob_path(&blob_digest)?;
                Ok((store.layer(&known), blob))
            })
            .await?;
        if let Some(path) = present {
            client.progress(&format!("{name}: layer {n}/{total} already present"));
            return Ok(path);
        }
        if !tokio::fs::try_exists(&blob).await.unwrap_or(false) {
            let size = desc
                .size
                .map_or("? bytes".to_string(), |s| format!("{s} bytes"));
            client.progress(&format!(
                "{name}: downloading layer {} ({size})",
                short(&desc.digest)
            ));
            let part = self
                .root
                .join("tmp")
                .join(format!("{}.part", uuid::Uuid::new_v4()));
            session.blob_to_file(&desc.digest, desc.size, &part).await?;
            tokio::fs::rename(&part, &blob)
                .await
                .map_err(|e| ImageError::io(&blob, "storing a downloaded blob", e))?;
        }
        let (digest, diff_id, owned_name) =
            (desc.digest.clone(), diff_id.to_string(), name.to_string());
        let path = self
            .blocking(move |store| {
                let layer = LayerBlob {
                    path: &blob,
                    label: &blob,
                    digest: Some(&digest),
                    diff_id: &diff_id,
                };
                store.unpack_blob(&id, &layer, &owned_name, true)
            })
            .await?;
        client.progress(&format!("{name}: layer {n}/{total} unpacked"));
        Ok(path)
    }

    /// Makes layer `id` from a blob file (unless it is already done), checking the blob's
    /// digest (when given) and the uncompressed tar's diff id as it unpacks. A blob that fails
    /// either check is deleted when it is the store's own (`store_blob`).
    pub(crate) fn unpack_blob(
        &self,
        id: &str,
        blob: &LayerBlob<'_>,
        name: &str,
        store_blob: bool,
    ) -> Result<PathBuf, ImageError> {
        let origin = format!("{name} ({})", blob.diff_id);
        let result = self.ensure_layer(id, &origin, |target| {
            let file = File::open(blob.path)
                .map_err(|e| ImageError::io(blob.path, "opening a layer blob", e))?;
            let reader = BufReader::with_capacity(1 << 20, file);
            let report = unpack_layer(reader, target, blob.label)?;
            if let Some(expected) = blob.digest
                && report.compressed_digest != expected
            {
                return Err(ImageError::DigestMismatch {
                    reference: name.to_string(),
                    what: format!("the layer blob {}", blob.label.display()),
                    expected: expected.to_string(),
                    actual: report.compressed_digest,
                });
            }
            if report.diff_id != blob.diff_id {
                return Err(ImageError::DigestMismatch {
                    reference: name.to_string(),
                    what: format!(
                        "the uncompressed layer (diff id) of {}",
                        blob.label.display()
                    ),
                    expected: blob.diff_id.to_string(),
                    actual: report.diff_id,
                });
            }
            Ok((report.size_bytes, report.notes))
        });
        let mismatch = matches!(result, Err(ImageError::DigestMismatch { .. }));
        if store_blob && (result.is_ok() || mismatch) {
            remove_file_if_present(blob.path)?;
        }
        result
    }

    /// Loads a `docker save` tarball (legacy `manifest.json` form, or the newer one with an OCI
    /// layout inside) or an OCI image layout (directory or tar, gzip or zstd allowed). Every
    /// blob is verified. Returns the images it recorded: one per name (`RepoTags`, or the
    /// `io.containerd.image.name` / `org.opencontainers.image.ref.name` annotation when it is
    /// a full reference); an image without a name is recorded by digest alone.
    pub fn load(&self, archive: &Path) -> Result<Vec<StoredImage>, ImageError> {
        super::archive::load(self, archive)
    }

    /// Moves `dir` (on the store's filesystem: see [`Self::temp_dir`]) into the store as layer
    /// `id` (at least 12 lowercase hex digits, computed by the caller) and returns its short
    /// path. When the layer already exists, `dir` is deleted: the caller gave it up either way.
    pub fn adopt_layer(&self, id: &str, dir: &Path) -> Result<PathBuf, ImageError> {
        validate_id(id)?;
        let meta =
            fs::symlink_metadata(dir).map_err(|e| ImageError::io(dir, "adopting a layer", e))?;
        if !meta.is_dir() {
            return Err(ImageError::Layer {
                id: id.to_string(),
                what: format!("{} is not a directory", dir.display()),
            });
        }
        let (layer_dir, _lock) = self.locked_layer_dir(id)?;
        if layer_dir.join("done").is_file() {
            fs::remove_dir_all(dir)
                .map_err(|e| ImageError::io(dir, "discarding a duplicate layer", e))?;
            return self.link(id);
        }
        let fs_dir = layer_dir.join("fs");
        remove_dir_if_present(&fs_dir)?;
        let size_bytes = tree_file_bytes(dir);
        fs::rename(dir, &fs_dir).map_err(|e| {
            if e.raw_os_error() == Some(Errno::EXDEV as i32) {
                ImageError::Layer {
                    id: id.to_string(),
                    what: format!(
                        "{} is on another filesystem than the store {}; make it in ImageStore::temp_dir()",
                        dir.display(),
                        self.root.display()
                    ),
                }
            } else {
                ImageError::io(dir, "moving a layer into the store", e)
            }
        })?;
        self.write_done(
            &layer_dir,
            &LayerInfo {
                id: id.to_string(),
                size_bytes,
                origin: "adopted".into(),
                notes: Vec::new(),
            },
        )?;
        self.link(id)
    }

    /// The short path of a finished layer.
    pub fn layer(&self, id: &str) -> Option<PathBuf> {
        validate_id(id).ok()?;
        if !self.root.join("layers").join(id).join("done").is_file() {
            return None;
        }
        self.link(id).ok()
    }

    /// Records a bootstrapped or built image made of `layers` (bottom first; the store's short
    /// paths, or any directories) under `reference`.
    pub fn tag_local(
        &self,
        reference: &Reference,
        layers: Vec<PathBuf>,
        config: ImageConfig,
        source: ImageSource,
    ) -> Result<StoredImage, ImageError> {
        let mut layer_ids = Vec::new();
        let mut names = Vec::new();
        let mut size_bytes = 0;
        for path in &layers {
            if !path.is_dir() {
                return Err(ImageError::Layer {
                    id: path.display().to_string(),
                    what: "not a directory".into(),
                });
            }
            match self.layer_id_of(path) {
                Some(id) => {
                    size_bytes += self.layers_size(std::slice::from_ref(&id));
                    names.push(id.clone());
                    layer_ids.push(id);
                }
                None => {
                    size_bytes += tree_file_bytes(path);
                    names.push(path.display().to_string());
                }
            }
        }
        let identity = serde_json::json!({ "layers": names, "config": config });
        let digest = manifest::sha256_digest(identity.to_string().as_bytes());
        let image = StoredImage {
            reference: reference.to_string(),
            digest: digest.clone(),
            config,
            layers,
            size_bytes,
            source,
            created: now(),
        };
        self.record(&image, layer_ids, Vec::new(), vec![digest], true)?;
        Ok(image)
    }

    /// Every recorded image: those with names, and those loaded without one.
    pub fn list(&self) -> Result<Vec<StoredImage>, ImageError> {
        let named = self.records_in("images/refs")?;
        let named_digests: BTreeSet<String> = named
            .iter()
            .flat_map(|r| r.digests.iter().cloned())
            .collect();
        let mut images: Vec<StoredImage> = named.into_iter().map(|r| r.image).collect();
        let mut seen = BTreeSet::new();
        for r in self.records_in("images/digests")? {
            let unnamed = r.image.reference == r.image.digest;
            if unnamed
                && !named_digests.contains(&r.image.digest)
                && seen.insert(r.image.digest.clone())
            {
                images.push(r.image);
            }
        }
        images.sort_by(|a, b| a.reference.cmp(&b.reference));
        Ok(images)
    }

    /// Forgets the record of `reference` (its layers stay until [`Self::prune`]). A digest
    /// record goes with the last named record that used it. Returns whether anything went.
    pub fn remove(&self, reference: &Reference) -> Result<bool, ImageError> {
        let mut removed = false;
        let mut digests: BTreeSet<String> =
            reference.digest().map(str::to_string).into_iter().collect();
        let ref_path = self.ref_record_path(&reference.to_string());
        if let Some(record) = self.read_record(&ref_path)? {
            digests.extend(record.digests);
            remove_file_if_present(&ref_path)?;
            removed = true;
        }
        if let Some(d) = reference.digest()
            && let Some(record) = self.read_record(&self.digest_record_path(d)?)?
        {
            digests.extend(record.digests);
        }
        let still_named: BTreeSet<String> = self
            .records_in("images/refs")?
            .into_iter()
            .flat_map(|r| r.digests)
            .collect();
        for d in digests.difference(&still_named) {
            let path = self.digest_record_path(d)?;
            if path.is_file() {
                remove_file_if_present(&path)?;
                removed = true;
            }
        }
        Ok(removed)
    }

    /// Deletes the layers and blobs no recorded image uses (nor `keep`, layer dirs still in use
    /// elsewhere, e.g. a build cache's), records of images whose name has moved on to another
    /// digest, and staging left over from crashes. A layer another
    /// process is making right now (its lock held) is left alone. Returns the bytes freed.
    ///
    /// A layer pulled by a concurrent `pull` in another process but not yet recorded may be
    /// deleted; that image then reads as absent (`get` gives `None`) and is pulled again.
    pub fn prune(&self, keep: &[PathBuf]) -> Result<u64, ImageError> {
        let mut records = self.records_in("images/refs")?;
        let named_digests: BTreeSet<String> = records
            .iter()
            .flat_map(|r| r.digests.iter().cloned())
            .collect();
        // A digest record of a named image whose name now points elsewhere (re-pulled, re-tagged)
        // is dangling, as docker calls it: it goes, and its layers with it. Images loaded without
        // a name have only their digest record and stay.
        let digests_dir = self.root.join("images/digests");
        for name in dir_names(&digests_dir)? {
            let path = digests_dir.join(&name);
            let Some(hex) = name.strip_suffix(".json") else {
                continue;
            };
            let record = match self.read_record(&path) {
                Ok(Some(record)) => record,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!("skipping an image record: {e}");
                    continue;
                }
            };
            let named = record.image.reference != record.image.digest;
            if named && !named_digests.contains(&format!("sha256:{hex}")) {
                remove_file_if_present(&path)?;
            } else {
                records.push(record);
            }
        }
        let mut used: BTreeSet<String> = records
            .iter()
            .flat_map(|r| r.layer_ids.iter().cloned())
            .collect();
        used.extend(keep.iter().filter_map(|p| self.layer_id_of(p)));
        let used_blobs: BTreeSet<String> = records
            .iter()
            .flat_map(|r| {
                r.blobs
                    .iter()
                    .filter_map(|b| digest_hex(b).ok().map(str::to_string))
            })
            .collect();
        let mut freed = 0;

        let layers = self.root.join("layers");
        for id in dir_names(&layers)? {
            if used.contains(&id) {
                continue;
            }
            let dir = layers.join(&id);
            let Some(_lock) = lock(&dir.join("lock"), false)? else {
                continue;
            };
            freed += tree_file_bytes(&dir);
            fs::remove_dir_all(&dir).map_err(|e| ImageError::io(&dir, "pruning a layer", e))?;
        }
        let links = self.root.join("l");
        for name in dir_names(&links)? {
            let link = links.join(&name);
            // A link whose layer is gone (`exists` follows the link).
            if fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink())
                && !link.exists()
            {
                remove_file_if_present(&link)?;
            }
        }
        let blobs = self.root.join("blobs/sha256");
        for hex in dir_names(&blobs)? {
            if used_blobs.contains(&hex) {
                continue;
            }
            let path = blobs.join(&hex);
            freed += fs::symlink_metadata(&path).map(|m| m.len()).unwrap_or(0);
            remove_file_if_present(&path)?;
        }
        let tmp = self.root.join("tmp");
        let now = SystemTime::now();
        for name in dir_names(&tmp)? {
            let path = tmp.join(&name);
            let stale = fs::symlink_metadata(&path)
                .and_then(|m| m.modified())
                .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > STALE_TEMP));
            if stale {
                freed += tree_file_bytes(&path);
                let gone = if path.is_dir() {
                    fs::remove_dir_all(&path)
                } else {
                    fs::remove_file(&path)
                };
                gone.map_err(|e| ImageError::io(&path, "pruning staging", e))?;
            }
        }
        Ok(freed)
    }

    /// A new empty directory on the store's filesystem, for building a layer to adopt.
    pub fn temp_dir(&self) -> Result<PathBuf, ImageError> {
        let dir = self.root.join("tmp").join(uuid::Uuid::new_v4().to_string());
        fs::create_dir(&dir).map_err(|e| ImageError::io(&dir, "creating a temp dir", e))?;
        Ok(dir)
    }

    // ---- shared with archive.rs ----

    /// Makes layer `id` by `fill`ing an empty staging dir, once: under the layer's lock, a
    /// layer already done is returned as it is.
    /// `layers/<id>`, created, with its lock held (waiting for another process's unpack).
    fn locked_layer_dir(&self, id: &str) -> Result<(PathBuf, Option<Flock<File>>), ImageError> {
        let layer_dir = self.root.join("layers").join(id);
        let create = || {
            fs::create_dir_all(&layer_dir)
                .map_err(|e| ImageError::io(&layer_dir, "creating a layer", e))
        };
        create()?;
        let held = lock(&layer_dir.join("lock"), true)?;
        // A prune in another process may have removed the directory while we waited.
        create()?;
        Ok((layer_dir, held))
    }

    fn ensure_layer(
        &self,
        id: &str,
        origin: &str,
        fill: impl FnOnce(&Path) -> Result<(u64, Vec<String>), ImageError>,
    ) -> Result<PathBuf, ImageError> {
        validate_id(id)?;
        let (layer_dir, _lock) = self.locked_layer_dir(id)?;
        if layer_dir.join("done").is_file() {
            return self.link(id);
        }
        let staging = self.temp_dir()?;
        let staged = staging.join("fs");
        let filled = fs::create_dir(&staged)
            .map_err(|e| ImageError::io(&staged, "creating a staging dir", e))
            .and_then(|()| fill(&staged));
        let (size_bytes, notes) = match filled {
            Ok(done) => done,
            Err(e) => {
                let _ = fs::remove_dir_all(&staging);
                return Err(e);
            }
        };
        let fs_dir = layer_dir.join("fs");
        remove_dir_if_present(&fs_dir)?;
        fs::rename(&staged, &fs_dir)
            .map_err(|e| ImageError::io(&fs_dir, "moving an unpacked layer into place", e))?;
        let _ = fs::remove_dir(&staging);
        self.write_done(
            &layer_dir,
            &LayerInfo {
                id: id.to_string(),
                size_bytes,
                origin: origin.to_string(),
                notes,
            },
        )?;
        self.link(id)
    }

    /// Files `image` under its reference (unless it has none: `reference == digest`, or
    /// `named` is false) and under each of `digests`.
    fn record(
        &self,
        image: &StoredImage,
        layer_ids: Vec<String>,
        blobs: Vec<String>,
        digests: Vec<String>,
        named: bool,
    ) -> Result<(), ImageError> {
        let record = Record {
            image: image.clone(),
            layer_ids,
            blobs,
            digests: digests.clone(),
        };
        let json = serde_json::to_vec_pretty(&record).map_err(|e| {
            ImageError::io(&self.root, "encoding an image record", io::Error::other(e))
        })?;
        if named && image.reference != image.digest {
            write_atomic(&self.ref_record_path(&image.reference), &json)?;
        }
        for digest in &digests {
            write_atomic(&self.digest_record_path(digest)?, &json)?;
        }
        Ok(())
    }

    pub(crate) fn record_loaded(
        &self,
        image: &StoredImage,
        layer_ids: Vec<String>,
        config_digest: &str,
        digests: Vec<String>,
    ) -> Result<(), ImageError> {
        self.record(
            image,
            layer_ids,
            vec![config_digest.to_string()],
            digests,
            true,
        )
    }

    /// A layer of a loaded archive: the blob is the archive's, so it is left where it is.
    pub(crate) fn unpack_loaded(
        &self,
        id: &str,
        blob: &LayerBlob<'_>,
        name: &str,
    ) -> Result<PathBuf, ImageError> {
        self.unpack_blob(id, blob, name, false)
    }

    pub(crate) fn layers_size(&self, ids: &[String]) -> u64 {
        ids.iter()
            .filter_map(|id| {
                let done = self.root.join("layers").join(id).join("done");
                let text = fs::read(done).ok()?;
                serde_json::from_slice::<LayerInfo>(&text)
                    .ok()
                    .map(|i| i.size_bytes)
            })
            .sum()
    }

    fn blob_path(&self, digest: &str) -> Result<PathBuf, ImageError> {
        let hex = digest_hex(digest).map_err(|reason| ImageError::BadReference {
            reference: digest.to_string(),
            reason,
        })?;
        Ok(self.root.join("blobs/sha256").join(hex))
    }

    /// A stored blob, re-verified (it is small, and a damaged store should not go unnoticed).
    fn read_blob(&self, digest: &str) -> Result<Option<Vec<u8>>, ImageError> {
        let path = self.blob_path(digest)?;
        match fs::read(&path) {
            Ok(bytes) if manifest::sha256_digest(&bytes) == digest => Ok(Some(bytes)),
            Ok(_) => {
                remove_file_if_present(&path)?;
                Ok(None)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ImageError::io(&path, "reading a blob", e)),
        }
    }

    pub(crate) fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<(), ImageError> {
        write_atomic(&self.blob_path(digest)?, bytes)
    }

    fn write_done(&self, layer_dir: &Path, info: &LayerInfo) -> Result<(), ImageError> {
        let json = serde_json::to_vec_pretty(info).map_err(|e| {
            ImageError::io(layer_dir, "encoding a layer marker", io::Error::other(e))
        })?;
        write_atomic(&layer_dir.join("done"), &json)
    }

    /// `l/<12 hex>` -> `../layers/<id>/fs`, made atomically (a symlink renamed into place).
    fn link(&self, id: &str) -> Result<PathBuf, ImageError> {
        let short = self.root.join("l").join(&id[..SHORT_ID]);
        let target = PathBuf::from(format!("../layers/{id}/fs"));
        match fs::read_link(&short) {
            Ok(existing) if existing == target => return Ok(short),
            Ok(existing) => {
                return Err(ImageError::Layer {
                    id: id.to_string(),
                    what: format!(
                        "its short name {} already names {}",
                        short.display(),
                        existing.display()
                    ),
                });
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(ImageError::io(&short, "reading a layer link", e)),
        }
        let staged =
            self.root
                .join("l")
                .join(format!(".{}.{}", &id[..SHORT_ID], uuid::Uuid::new_v4()));
        std::os::unix::fs::symlink(&target, &staged)
            .map_err(|e| ImageError::io(&staged, "creating a layer link", e))?;
        fs::rename(&staged, &short)
            .map_err(|e| ImageError::io(&short, "creating a layer link", e))?;
        Ok(short)
    }

    /// The store's id of a layer path: a short path, or `layers/<id>/fs`.
    fn layer_id_of(&self, path: &Path) -> Option<String> {
        let (dir, file) = (path.parent()?, path.file_name()?.to_str()?);
        let id = if dir == self.root.join("l") {
            let target = fs::read_link(path).ok()?;
            target.parent()?.file_name()?.to_str()?.to_string()
        } else if file == "fs" && dir.parent()? == self.root.join("layers") {
            dir.file_name()?.to_str()?.to_string()
        } else {
            return None;
        };
        validate_id(&id).ok().map(|()| id)
    }

    fn ref_record_path(&self, reference: &str) -> PathBuf {
        let escaped: String = reference
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' => {
                    (b as char).to_string()
                }
                other => format!("%{other:02X}"),
            })
            .collect();
        // A file name has 255 bytes; the longest references do not fit escaped.
        let name = if escaped.len() <= 200 {
            escaped
        } else {
            format!(
                "sha256-{}",
                hex::encode(Sha256::digest(reference.as_bytes()))
            )
        };
        self.root.join("images/refs").join(format!("{name}.json"))
    }

    fn digest_record_path(&self, digest: &str) -> Result<PathBuf, ImageError> {
        let hex = digest_hex(digest).map_err(|reason| ImageError::BadReference {
            reference: digest.to_string(),
            reason,
        })?;
        Ok(self.root.join("images/digests").join(format!("{hex}.json")))
    }

    fn read_record(&self, path: &Path) -> Result<Option<Record>, ImageError> {
        match fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                ImageError::io(
                    path,
                    "reading an image record",
                    io::Error::new(io::ErrorKind::InvalidData, e),
                )
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ImageError::io(path, "reading an image record", e)),
        }
    }

    /// The records in one of the `images/` folders; a damaged one is skipped with a warning
    /// rather than hiding every other image.
    fn records_in(&self, sub: &str) -> Result<Vec<Record>, ImageError> {
        let dir = self.root.join(sub);
        let mut out = Vec::new();
        for name in dir_names(&dir)? {
            if !name.ends_with(".json") {
                continue;
            }
            match self.read_record(&dir.join(&name)) {
                Ok(Some(record)) => out.push(record),
                Ok(None) => {}
                Err(e) => tracing::warn!("skipping an image record: {e}"),
            }
        }
        Ok(out)
    }
}

fn validate_id(id: &str) -> Result<(), ImageError> {
    let ok = (SHORT_ID..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if ok {
        Ok(())
    } else {
        Err(ImageError::Layer {
            id: id.to_string(),
            what: format!("a layer id is {SHORT_ID} to 128 lowercase hex digits"),
        })
    }
}

/// `sha256:<hex>` -> `<hex>` (digests reaching here were validated by `parse_config`).
fn hex_of(digest: &str) -> &str {
    digest.strip_prefix("sha256:").unwrap_or(digest)
}

fn short(digest: &str) -> &str {
    let hex = hex_of(digest);
    &hex[..hex.len().min(SHORT_ID)]
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Takes the exclusive lock at `path`; `wait: false` gives `None` when another holds it.
fn lock(path: &Path, wait: bool) -> Result<Option<Flock<File>>, ImageError> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| ImageError::io(path, "opening a lock file", e))?;
    let arg = if wait {
        FlockArg::LockExclusive
    } else {
        FlockArg::LockExclusiveNonblock
    };
    match Flock::lock(file, arg) {
        Ok(lock) => Ok(Some(lock)),
        Err((_, Errno::EWOULDBLOCK)) if !wait => Ok(None),
        Err((_, errno)) => Err(ImageError::io(path, "locking", errno.into())),
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ImageError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let staged = dir.join(format!(".{name}.{}", uuid::Uuid::new_v4()));
    fs::write(&staged, bytes).map_err(|e| ImageError::io(&staged, "writing", e))?;
    fs::rename(&staged, path).map_err(|e| {
        let _ = fs::remove_file(&staged);
        ImageError::io(path, "writing", e)
    })
}

fn remove_file_if_present(path: &Path) -> Result<(), ImageError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(ImageError::io(path, "removing", e)),
        _ => Ok(()),
    }
}

fn remove_dir_if_present(path: &Path) -> Result<(), ImageError> {
    match fs::remove_dir_all(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(ImageError::io(path, "removing", e)),
        _ => Ok(()),
    }
}

/// Names in a directory (sorted, for stable behaviour).
fn dir_names(dir: &Path) -> Result<Vec<String>, ImageError> {
    let entries = fs::read_dir(dir).map_err(|e| ImageError::io(dir, "listing", e))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| ImageError::io(dir, "listing", e))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

/// Bytes of the regular files under `path` (not following symlinks).
fn tree_file_bytes(path: &Path) -> u64 {
    walkdir::WalkDir::new(path)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .filter_map(|e| e.metadata().ok().map(|m| m.len()))
        .sum()
}
