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
//!
//! A store opened with [`ImageStore::open_read_only`] (a cluster's shared store, staged by
//! `geode image stage`, often on a read-only mount) is never written: every operation that
//! would write (a pull, a load, a layer made or adopted, a record, a prune) is refused with
//! [`ImageError::ReadOnly`] before it touches anything, so a node never builds or downloads.
//!
//! This module is the store's layout and its image records; [`pull`] fills it from
//! registries, [`layers`] makes and finds the unpacked layers, and [`prune`] takes images
//! and unused layers away.

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::manifest::{self, digest_hex};
use super::{ImageConfig, ImageError, ImageSource, Reference, StoredImage};

mod layers;
mod prune;
mod pull;

pub(crate) use self::layers::LayerBlob;

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
    /// A store read where this one has no such image or layer, and never written: a sealed
    /// campaign builds into a store of its own in memory over the machine's (see
    /// [`ImageStore::open_over`]).
    parent: Option<Box<ImageStore>>,
    /// Never written: see [`ImageStore::open_read_only`].
    read_only: bool,
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
        // Only its owner reads the store (sandboxes reach their layers through mounts its
        // owner makes): a task's files are nobody else's on this machine. A store of someone
        // else's, shared read-only, is left as it is.
        if fs::metadata(&root).is_ok_and(|m| {
            std::os::unix::fs::MetadataExt::uid(&m) == nix::unistd::geteuid().as_raw()
        }) {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&root, fs::Permissions::from_mode(0o700))
                .map_err(|e| ImageError::io(&root, "closing the image store to others", e))?;
        }
        Ok(ImageStore {
            root,
            parent: None,
            read_only: false,
        })
    }

    /// Opens the store at `root` to read only: nothing is created, nothing changed, and every
    /// operation that would write is refused ([`ImageError::ReadOnly`]). The store must exist
    /// (made by [`ImageStore::open`], filled by `geode image stage`); it may sit on a
    /// read-only mount.
    pub fn open_read_only(root: impl Into<PathBuf>) -> Result<Self, ImageError> {
        let root = root.into();
        let layers = root.join("layers");
        if !layers.is_dir() {
            return Err(ImageError::io(
                &root,
                "opening the read-only image store",
                io::Error::new(
                    io::ErrorKind::NotFound,
                    "no image store here (no layers/ folder): stage one with `geode image stage`",
                ),
            ));
        }
        let root = fs::canonicalize(&root)
            .map_err(|e| ImageError::io(&root, "resolving the image store", e))?;
        Ok(ImageStore {
            root,
            parent: None,
            read_only: true,
        })
    }

    /// Whether the store refuses every write ([`ImageStore::open_read_only`]).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Refuses `what` on a read-only store.
    pub(crate) fn writable(&self, what: &str) -> Result<(), ImageError> {
        if self.read_only {
            return Err(ImageError::ReadOnly {
                root: self.root.clone(),
                what: what.to_string(),
            });
        }
        Ok(())
    }

    /// Opens the store at `root`, falling back to `parent` for images and layers it does not
    /// hold; what is made goes into `root` alone.
    pub fn open_over(
        root: impl Into<PathBuf>,
        parent: impl Into<PathBuf>,
    ) -> Result<Self, ImageError> {
        let mut store = Self::open(root)?;
        store.parent = Some(Box::new(Self::open(parent)?));
        Ok(store)
    }

    /// The store's own folder (absolute, symlinks resolved); never the parent's.
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
        let own = self
            .read_record(&path)?
            .map(|r| r.image)
            .filter(|image| image.layers.iter().all(|l| l.is_dir()));
        match (own, &self.parent) {
            (None, Some(parent)) => parent.get(reference),
            (own, _) => Ok(own),
        }
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
        self.writable(&format!("recording the image {reference}"))?;
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

    // ---- shared with archive.rs ----

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
        self.writable(&format!("recording the image {}", image.reference))?;
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
                // A damaged blob is dropped so it is fetched again; a read-only store keeps it
                // (and reads it as absent).
                if !self.read_only {
                    remove_file_if_present(&path)?;
                }
                Ok(None)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ImageError::io(&path, "reading a blob", e)),
        }
    }

    pub(crate) fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<(), ImageError> {
        self.writable(&format!("storing the blob {digest}"))?;
        write_atomic(&self.blob_path(digest)?, bytes)
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
