//! Loads images from files instead of a registry: `docker save` tarballs (the legacy
//! `manifest.json` form and the newer one with an OCI layout inside) and OCI image layouts, as
//! a directory or a tar. Nothing in an archive is trusted: every blob is checked against its
//! digest (the legacy form names its config by digest and its layers by diff id), and paths
//! inside the archive may not leave it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

use super::manifest::{self, Document, Index, MAX_DOCUMENT_BYTES, Manifest, digest_hex};
use super::store::{ImageStore, LayerBlob};
use super::{ImageError, ImageSource, Reference, StoredImage};

/// Set by docker (25+), containerd and buildkit: the full name of the image.
const CONTAINERD_NAME: &str = "io.containerd.image.name";
/// OCI's name annotation: a full reference or (skopeo, oras) just a tag.
const OCI_REF_NAME: &str = "org.opencontainers.image.ref.name";

/// Loads a `docker save` tarball (legacy `manifest.json` form, or the newer one with an OCI
/// layout inside) or an OCI image layout (directory or tar, gzip or zstd allowed). Every
/// blob is verified. Returns the images it recorded in `store`: one per name (`RepoTags`, or the
/// `io.containerd.image.name` / `org.opencontainers.image.ref.name` annotation when it is
/// a full reference); an image without a name is recorded by digest alone.
pub fn load(store: &ImageStore, archive: &Path) -> Result<Vec<StoredImage>, ImageError> {
    let origin = std::path::absolute(archive).unwrap_or_else(|_| archive.to_path_buf());
    let meta = fs::metadata(archive)
        .map_err(|e| ImageError::io(archive, "opening an image archive", e))?;
    if meta.is_dir() {
        return Loader {
            store,
            dir: archive,
            origin: &origin,
        }
        .load();
    }
    let staging = store.temp_dir()?;
    let result = extract(archive, &staging).and_then(|()| {
        Loader {
            store,
            dir: &staging,
            origin: &origin,
        }
        .load()
    });
    let _ = fs::remove_dir_all(&staging);
    result
}

/// Unpacks an archive's regular files into `dest`, verbatim. Symlinks and hard links between
/// its files (legacy `docker save` links duplicate layers) become hard links, resolved inside
/// the archive; anything else is ignored.
fn extract(archive: &Path, dest: &Path) -> Result<(), ImageError> {
    let bad = |what: String| ImageError::BadArchive {
        file: archive.to_path_buf(),
        what,
    };
    let reader = decompressed(archive)?;
    let mut tar = tar::Archive::new(reader);
    let mut links: Vec<(PathBuf, PathBuf)> = Vec::new();
    let entries = tar
        .entries()
        .map_err(|e| bad(format!("not a tar archive: {e}")))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| bad(format!("tar entry: {e}")))?;
        let raw = entry
            .path()
            .map_err(|e| bad(format!("unreadable path: {e}")))?
            .into_owned();
        let rel = inner_path(&raw)
            .ok_or_else(|| bad(format!("entry {} leaves the archive", raw.display())))?;
        if rel.as_os_str().is_empty() {
            continue;
        }
        let path = dest.join(&rel);
        match entry.header().entry_type() {
            tar::EntryType::Directory => {
                fs::create_dir_all(&path).map_err(|e| ImageError::io(&path, "extracting", e))?;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                if let Some(parent) = path.parent() {
                    // Only real directories are ever made here, so nothing can redirect this.
                    fs::create_dir_all(parent)
                        .map_err(|e| ImageError::io(parent, "extracting", e))?;
                }
                let _ = fs::remove_file(&path);
                let mut out = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .map_err(|e| ImageError::io(&path, "extracting", e))?;
                io::copy(&mut entry, &mut out)
                    .map_err(|e| bad(format!("entry {}: {e}", rel.display())))?;
            }
            kind @ (tar::EntryType::Symlink | tar::EntryType::Link) => {
                let target = entry
                    .link_name()
                    .map_err(|e| bad(format!("entry {}: {e}", rel.display())))?
                    .ok_or_else(|| bad(format!("link {} without a target", rel.display())))?
                    .into_owned();
                // A symlink is relative to its directory, a hard link to the archive's root.
                let joined = match (kind, rel.parent()) {
                    (tar::EntryType::Symlink, Some(parent)) if !target.is_absolute() => {
                        parent.join(&target)
                    }
                    _ => target.clone(),
                };
                let resolved = inner_path(&joined).ok_or_else(|| {
                    bad(format!(
                        "link {} -> {} leaves the archive",
                        rel.display(),
                        target.display()
                    ))
                })?;
                links.push((rel, resolved));
            }
            _ => {}
        }
    }
    link_files(dest, links)
}

/// The archive's bytes, gunzipped or un-zstd-ed as its first bytes say.
fn decompressed(archive: &Path) -> Result<Box<dyn Read>, ImageError> {
    let bad = |what: String| ImageError::BadArchive {
        file: archive.to_path_buf(),
        what,
    };
    let file =
        File::open(archive).map_err(|e| ImageError::io(archive, "opening an image archive", e))?;
    let mut buffered = BufReader::with_capacity(1 << 20, file);
    let magic = buffered
        .fill_buf()
        .map_err(|e| ImageError::io(archive, "reading an image archive", e))?
        .to_vec();
    let reader: Box<dyn Read> = if magic.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::bufread::MultiGzDecoder::new(buffered))
    } else if magic.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Box::new(
            zstd::stream::read::Decoder::with_buffer(buffered)
                .map_err(|e| bad(format!("zstd stream: {e}")))?,
        )
    } else {
        Box::new(buffered)
    };
    Ok(reader)
}

/// Make each `(link, target)` a hard link to its target's file, under `dest`.
fn link_files(dest: &Path, mut links: Vec<(PathBuf, PathBuf)>) -> Result<(), ImageError> {
    // Links may come before their targets, and point at other links: resolve until stuck.
    while !links.is_empty() {
        let before = links.len();
        let mut pending = Vec::new();
        for (link, target) in links {
            let from = dest.join(&target);
            if fs::symlink_metadata(&from).is_ok_and(|m| m.is_file()) {
                let to = dest.join(&link);
                if let Some(parent) = to.parent() {
                    fs::create_dir_all(parent)
                        .map_err(|e| ImageError::io(parent, "extracting", e))?;
                }
                let _ = fs::remove_file(&to);
                fs::hard_link(&from, &to)
                    .map_err(|e| ImageError::io(&to, "extracting a link", e))?;
            } else {
                pending.push((link, target));
            }
        }
        if pending.len() == before {
            // Links to nothing (or to directories) are not files the loader reads; if one of
            // them is needed, the loader reports it missing.
            break;
        }
        links = pending;
    }
    Ok(())
}

/// A path inside the archive, lexically: `..` may climb only within it, never past its root;
/// a leading `/` is refused.
fn inner_path(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(c) => out.push(c),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

#[derive(Debug, Deserialize)]
struct SaveEntry {
    #[serde(rename = "Config")]
    config: String,
    #[serde(rename = "RepoTags", default)]
    repo_tags: Option<Vec<String>>,
    #[serde(rename = "Layers", default)]
    layers: Vec<String>,
}

struct Loader<'a> {
    store: &'a ImageStore,
    /// The layout or save archive, as a directory (the extracted tar, or the caller's dir).
    dir: &'a Path,
    /// What the caller named, for messages and the images' source.
    origin: &'a Path,
}

/// One image to record: its digest(s), config and layers, and the names it goes by.
struct Found {
    digest: String,
    other_digests: Vec<String>,
    config_digest: String,
    config: Vec<u8>,
    layers: Vec<(PathBuf, Option<String>)>,
    names: BTreeSet<String>,
}

impl Loader<'_> {
    fn bad(&self, what: impl Into<String>) -> ImageError {
        ImageError::BadArchive {
            file: self.origin.to_path_buf(),
            what: what.into(),
        }
    }

    fn name(&self) -> String {
        self.origin.display().to_string()
    }

    fn load(&self) -> Result<Vec<StoredImage>, ImageError> {
        let saved = self.save_manifest()?;
        let oci = self.dir.join("oci-layout").is_file() && self.dir.join("index.json").is_file();
        let found = if oci {
            self.read_layout(saved.as_deref().unwrap_or(&[]))?
        } else if let Some(saved) = saved {
            self.read_save(&saved)?
        } else {
            return Err(self.bad(
                "neither an OCI image layout (oci-layout, index.json) nor a docker save archive (manifest.json)",
            ));
        };
        let mut images = Vec::new();
        for f in found {
            images.extend(self.import(f)?);
        }
        Ok(images)
    }

    fn save_manifest(&self) -> Result<Option<Vec<SaveEntry>>, ImageError> {
        let path = self.dir.join("manifest.json");
        if !path.is_file() {
            return Ok(None);
        }
        let bytes = self.read_small(&path)?;
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| self.bad(format!("manifest.json: {e}")))
    }

    /// A path the archive names, which must stay inside it and exist. A directory the caller
    /// unpacked may hold symlinks (legacy `docker save` links duplicate layers): they may
    /// point anywhere inside it, not out of it.
    fn inside(&self, name: &str) -> Result<PathBuf, ImageError> {
        let rel = inner_path(Path::new(name))
            .ok_or_else(|| self.bad(format!("path {name:?} leaves the archive")))?;
        let path = self.dir.join(rel);
        if !path.is_file() {
            return Err(self.bad(format!("{name} is missing")));
        }
        let resolved = fs::canonicalize(&path)
            .map_err(|e| ImageError::io(&path, "resolving an archive path", e))?;
        let root = fs::canonicalize(self.dir)
            .map_err(|e| ImageError::io(self.dir, "resolving an archive path", e))?;
        if !resolved.starts_with(&root) {
            return Err(self.bad(format!(
                "{name} resolves to {}, outside the archive",
                resolved.display()
            )));
        }
        Ok(path)
    }

    fn read_small(&self, path: &Path) -> Result<Vec<u8>, ImageError> {
        let file =
            File::open(path).map_err(|e| ImageError::io(path, "reading an image archive", e))?;
        let mut bytes = Vec::new();
        file.take(MAX_DOCUMENT_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| ImageError::io(path, "reading an image archive", e))?;
        if bytes.len() as u64 > MAX_DOCUMENT_BYTES {
            return Err(self.bad(format!(
                "{} is larger than {MAX_DOCUMENT_BYTES} bytes",
                path.display()
            )));
        }
        Ok(bytes)
    }

    fn blob_path(&self, digest: &str) -> Result<PathBuf, ImageError> {
        let hex = digest_hex(digest).map_err(|e| self.bad(e))?;
        self.inside(&format!("blobs/sha256/{hex}"))
    }

    /// A small blob of the layout (index, manifest, config), checked against its digest.
    fn verified_blob(&self, digest: &str) -> Result<Vec<u8>, ImageError> {
        let path = self.blob_path(digest)?;
        let bytes = self.read_small(&path)?;
        let actual = manifest::sha256_digest(&bytes);
        if actual != digest {
            return Err(ImageError::DigestMismatch {
                reference: self.name(),
                what: format!("blobs/sha256/{}", digest_hex(digest).unwrap_or(digest)),
                expected: digest.to_string(),
                actual,
            });
        }
        Ok(bytes)
    }

    fn document(&self, digest: &str, media_type: Option<&str>) -> Result<Document, ImageError> {
        let bytes = self.verified_blob(digest)?;
        manifest::parse_document(media_type, &bytes).map_err(|p| match p {
            manifest::Problem::Unsupported(media_type) => ImageError::UnsupportedMediaType {
                reference: self.name(),
                media_type,
                what: format!("blob {digest}"),
            },
            manifest::Problem::Bad(what) => self.bad(format!("blob {digest}: {what}")),
        })
    }

    fn read_layout(&self, saved: &[SaveEntry]) -> Result<Vec<Found>, ImageError> {
        let index_bytes = self.read_small(&self.dir.join("index.json"))?;
        let index: Index = serde_json::from_slice(&index_bytes)
            .map_err(|e| self.bad(format!("index.json: {e}")))?;
        // A newer `docker save` also lists the tags in manifest.json, keyed by config blob.
        let mut tags_by_config: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for entry in saved {
            if let Some(hex) = entry.config.strip_prefix("blobs/sha256/") {
                tags_by_config
                    .entry(format!("sha256:{hex}"))
                    .or_default()
                    .extend(entry.repo_tags.clone().unwrap_or_default());
            }
        }
        let mut found = Vec::new();
        for desc in &index.manifests {
            let (manifest, manifest_digest) = match self
                .document(&desc.digest, desc.media_type.as_deref())?
            {
                Document::Manifest(m) => (m, desc.digest.clone()),
                Document::Index(nested) => {
                    let entry = manifest::pick_platform(&nested).map_err(|available| {
                        ImageError::UnsupportedPlatform {
                            reference: self.name(),
                            platform: manifest::platform_name(),
                            available,
                        }
                    })?;
                    match self.document(&entry.digest, entry.media_type.as_deref())? {
                        Document::Manifest(m) => (m, entry.digest.clone()),
                        Document::Index(_) => {
                            return Err(
                                self.bad(format!("index {} points to another index", entry.digest))
                            );
                        }
                    }
                }
            };
            let mut names = BTreeSet::new();
            for key in [CONTAINERD_NAME, OCI_REF_NAME] {
                if let Some(name) = desc.annotations.get(key)
                    && let Some(reference) = full_reference(name)
                {
                    names.insert(reference.to_string());
                }
            }
            for tag in tags_by_config
                .get(&manifest.config.digest)
                .into_iter()
                .flatten()
            {
                names.insert(self.parse_name(tag)?);
            }
            found.push(self.image_of_manifest(
                desc.digest.clone(),
                manifest_digest,
                manifest,
                names,
            )?);
        }
        Ok(found)
    }

    fn image_of_manifest(
        &self,
        digest: String,
        manifest_digest: String,
        manifest: Manifest,
        names: BTreeSet<String>,
    ) -> Result<Found, ImageError> {
        let config = self.verified_blob(&manifest.config.digest)?;
        let mut layers = Vec::new();
        for desc in &manifest.layers {
            if !manifest::layer_media_type_ok(desc.media_type.as_deref()) {
                return Err(ImageError::UnsupportedMediaType {
                    reference: self.name(),
                    media_type: desc.media_type.clone().unwrap_or_default(),
                    what: format!("layer {}", desc.digest),
                });
            }
            layers.push((self.blob_path(&desc.digest)?, Some(desc.digest.clone())));
        }
        let other_digests = if manifest_digest != digest {
            vec![manifest_digest]
        } else {
            Vec::new()
        };
        Ok(Found {
            digest,
            other_digests,
            config_digest: manifest.config.digest.clone(),
            config,
            layers,
            names,
        })
    }

    /// The legacy form: configs named `<hex>.json` (their digest) and layers `<id>/layer.tar`
    /// (checked against the config's diff ids as they unpack).
    fn read_save(&self, saved: &[SaveEntry]) -> Result<Vec<Found>, ImageError> {
        let mut found = Vec::new();
        for entry in saved {
            let path = self.inside(&entry.config)?;
            let stem = Path::new(&entry.config)
                .file_name()
                .and_then(|n| n.to_str())
                .map(|n| n.trim_end_matches(".json"))
                .unwrap_or("");
            let config_digest = format!("sha256:{stem}");
            if digest_hex(&config_digest).is_err() {
                return Err(self.bad(format!(
                    "config {} is not named by its digest, so it cannot be verified",
                    entry.config
                )));
            }
            let config = self.read_small(&path)?;
            let actual = manifest::sha256_digest(&config);
            if actual != config_digest {
                return Err(ImageError::DigestMismatch {
                    reference: self.name(),
                    what: format!("config {}", entry.config),
                    expected: config_digest,
                    actual,
                });
            }
            let mut layers = Vec::new();
            for layer in &entry.layers {
                let path = self.inside(layer)?;
                let blob_digest = layer
                    .strip_prefix("blobs/sha256/")
                    .map(|hex| format!("sha256:{hex}"));
                layers.push((path, blob_digest));
            }
            let mut names = BTreeSet::new();
            for tag in entry.repo_tags.iter().flatten() {
                names.insert(self.parse_name(tag)?);
            }
            found.push(Found {
                digest: config_digest.clone(),
                other_digests: Vec::new(),
                config_digest,
                config,
                layers,
                names,
            });
        }
        Ok(found)
    }

    fn parse_name(&self, tag: &str) -> Result<String, ImageError> {
        Reference::parse(tag)
            .map(|r| r.to_string())
            .map_err(|e| self.bad(format!("RepoTags: {e}")))
    }

    /// Unpacks the image's layers (each verified) and records it under each name.
    fn import(&self, f: Found) -> Result<Vec<StoredImage>, ImageError> {
        let (config, diff_ids) = manifest::parse_config(&f.config)
            .map_err(|e| self.bad(format!("config {}: {e}", f.config_digest)))?;
        if diff_ids.len() != f.layers.len() {
            return Err(self.bad(format!(
                "image {} has {} layers and its config {} diff ids",
                f.digest,
                f.layers.len(),
                diff_ids.len()
            )));
        }
        let name = self.name();
        let mut paths = Vec::new();
        let mut ids = Vec::new();
        for ((blob, blob_digest), diff_id) in f.layers.iter().zip(&diff_ids) {
            let id = digest_hex(diff_id).map_err(|e| self.bad(e))?.to_string();
            let path = match self.store.layer(&id) {
                Some(path) => path,
                None => {
                    let label = self
                        .origin
                        .join(blob.strip_prefix(self.dir).unwrap_or(blob));
                    let layer = LayerBlob {
                        path: blob,
                        label: &label,
                        digest: blob_digest.as_deref(),
                        diff_id,
                    };
                    self.store.unpack_loaded(&id, &layer, &name)?
                }
            };
            paths.push(path);
            ids.push(id);
        }
        self.store.put_blob(&f.config_digest, &f.config)?;
        let size_bytes = self.store.layers_size(&ids);
        let mut digests = vec![f.digest.clone()];
        digests.extend(f.other_digests.iter().cloned());
        let names: Vec<String> = if f.names.is_empty() {
            vec![f.digest.clone()]
        } else {
            f.names.into_iter().collect()
        };
        let created = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let mut images = Vec::new();
        for reference in names {
            let image = StoredImage {
                reference,
                digest: f.digest.clone(),
                config: config.clone(),
                layers: paths.clone(),
                size_bytes,
                source: ImageSource::Loaded {
                    file: self.origin.to_path_buf(),
                },
                created: created.clone(),
            };
            self.store
                .record_loaded(&image, ids.clone(), &f.config_digest, digests.clone())?;
            images.push(image);
        }
        Ok(images)
    }
}

/// An annotation that names a whole image (`docker.io/library/debian:12`, `debian:12`); a bare
/// word is only a tag in OCI layouts, which names no repository.
fn full_reference(name: &str) -> Option<Reference> {
    if !name.contains(['/', ':', '@']) {
        return None;
    }
    Reference::parse(name).ok()
}
