//! The store's unpacked layers: made once under a lock (unpacked from a verified blob, or
//! adopted from a build step), marked `done` last, and found by their short `l/` path.

use std::fs::{self, File};
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::Flock;
use serde::{Deserialize, Serialize};

use super::{
    ImageStore, SHORT_ID, lock, remove_dir_if_present, remove_file_if_present, tree_file_bytes,
    validate_id, write_atomic,
};
use crate::image::ImageError;
use crate::image::layer::unpack_layer;

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

/// `layers/<id>/done`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct LayerInfo {
    pub(super) id: String,
    pub(super) size_bytes: u64,
    pub(super) origin: String,
    #[serde(default)]
    pub(super) notes: Vec<String>,
}

impl ImageStore {
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
        let result = self.unpack_reader(id, blob, name, || {
            File::open(blob.path).map_err(|e| ImageError::io(blob.path, "opening a layer blob", e))
        });
        let mismatch = matches!(result, Err(ImageError::DigestMismatch { .. }));
        if store_blob && (result.is_ok() || mismatch) {
            remove_file_if_present(blob.path)?;
        }
        result
    }

    /// Makes layer `id` from the bytes `open` gives (a blob file, or a download as it
    /// streams), unless it is already done (then `open` is never called). The compressed
    /// stream's digest (when `blob.digest` names one) and the tar's diff id are checked as
    /// the bytes pass; a layer that fails either is not kept.
    pub(crate) fn unpack_reader<R: Read>(
        &self,
        id: &str,
        blob: &LayerBlob<'_>,
        name: &str,
        open: impl FnOnce() -> Result<R, ImageError>,
    ) -> Result<PathBuf, ImageError> {
        let origin = format!("{name} ({})", blob.diff_id);
        self.ensure_layer(id, &origin, |target| {
            let reader = BufReader::with_capacity(1 << 20, open()?);
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
        })
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
        if finished(&layer_dir) {
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
        shift(&fs_dir)?;
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
        if !finished(&self.root.join("layers").join(id)) {
            return self.parent.as_ref().and_then(|p| p.layer(id));
        }
        self.link(id).ok()
    }

    /// A new empty directory on the store's filesystem, for building a layer to adopt.
    pub fn temp_dir(&self) -> Result<PathBuf, ImageError> {
        self.writable("making a staging folder")?;
        let dir = self.root.join("tmp").join(uuid::Uuid::new_v4().to_string());
        fs::create_dir(&dir).map_err(|e| ImageError::io(&dir, "creating a temp dir", e))?;
        Ok(dir)
    }

    /// Makes layer `id` by `fill`ing an empty staging dir, once: under the layer's lock, a
    /// layer already done is returned as it is.
    /// `layers/<id>`, created, with its lock held (waiting for another process's unpack).
    pub(super) fn locked_layer_dir(
        &self,
        id: &str,
    ) -> Result<(PathBuf, Option<Flock<File>>), ImageError> {
        self.writable(&format!("making the layer {id}"))?;
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

    pub(super) fn ensure_layer(
        &self,
        id: &str,
        origin: &str,
        fill: impl FnOnce(&Path) -> Result<(u64, Vec<String>), ImageError>,
    ) -> Result<PathBuf, ImageError> {
        validate_id(id)?;
        let (layer_dir, _lock) = self.locked_layer_dir(id)?;
        if finished(&layer_dir) {
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
        shift(&fs_dir)?;
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

    pub(super) fn write_done(&self, layer_dir: &Path, info: &LayerInfo) -> Result<(), ImageError> {
        let json = serde_json::to_vec_pretty(info).map_err(|e| {
            ImageError::io(layer_dir, "encoding a layer marker", io::Error::other(e))
        })?;
        write_atomic(&layer_dir.join("done"), &json)
    }

    /// `l/<12 hex>` -> `../layers/<id>/fs`, made atomically (a symlink renamed into place).
    pub(super) fn link(&self, id: &str) -> Result<PathBuf, ImageError> {
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
        self.writable(&format!("linking the layer {id}"))?;
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
    pub(super) fn layer_id_of(&self, path: &Path) -> Option<String> {
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
}

/// A layer marked done whose files are there: one whose `fs` went missing (removed by hand,
/// or by what this store has not accounted for) is made again rather than handed out.
fn finished(layer_dir: &Path) -> bool {
    layer_dir.join("done").is_file() && layer_dir.join("fs").is_dir()
}

/// A layer enters the store with its owners already the sandbox's (container id `n` as host id
/// `HOST_BASE + n`): never a set-id file of host root, and no file capability that host root
/// would honour (the kernel drops `security.capability` on the change of owner), not even
/// between a load and a first sandbox.
fn shift(fs_dir: &Path) -> Result<(), ImageError> {
    crate::ids::shift_layer(fs_dir)
        .map_err(|e| ImageError::io(fs_dir, "giving a layer's files to the sandbox's ids", e))
}
