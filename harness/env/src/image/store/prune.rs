//! Taking things out of the store: an image's records (and the blobs only it used), and
//! `prune`, which reclaims the layers no record or live sandbox uses and stale staging.

use std::collections::BTreeSet;
use std::fs::{self};
use std::path::PathBuf;
use std::time::SystemTime;

use super::{ImageStore, STALE_TEMP, dir_names, lock, remove_file_if_present, tree_file_bytes};
use crate::image::manifest::digest_hex;
use crate::image::{ImageError, Reference};

impl ImageStore {
    /// Forgets the record of `reference` (its layers stay until [`Self::prune`]). A digest
    /// record goes with the last named record that used it. Returns whether anything went.
    pub fn remove(&self, reference: &Reference) -> Result<bool, ImageError> {
        self.writable(&format!("removing the image {reference}"))?;
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
        self.writable("pruning")?;
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
}
