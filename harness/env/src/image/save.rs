//! `geode image save`: an image of the store as a `docker save` tarball, the inverse of
//! [`ImageStore::load`](super::ImageStore::load), so an image (a bootstrapped base included)
//! can travel to an air-gapped machine, or into `docker load`.
//!
//! Layers are kept unpacked in overlayfs' form; saving turns them back into OCI layer tars:
//! a 0:0 character device is the whiteout `.wh.NAME`, a folder marked opaque gets
//! `.wh..wh..opq`. Nothing is followed: links are stored as links.

use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use sha2::{Digest, Sha256};

use super::{ImageError, StoredImage};

/// Write `dir` (an unpacked layer) to `out` as an OCI layer tar; returns its sha256 (the diff
/// id).
pub fn layer_tar(dir: &Path, out: impl Write) -> Result<String, ImageError> {
    let hashing = HashingWriter {
        inner: out,
        hash: Sha256::new(),
    };
    let mut tar = tar::Builder::new(hashing);
    tar.follow_symlinks(false);
    let mut paths = Vec::new();
    for entry in walkdir::WalkDir::new(dir).min_depth(1) {
        let entry = entry.map_err(|e| ImageError::Layer {
            id: dir.display().to_string(),
            what: format!("walk: {e}"),
        })?;
        paths.push(entry.into_path());
    }
    paths.sort();
    let io = |path: &Path, what: &str, e: std::io::Error| ImageError::io(path, what, e);
    for path in paths {
        let rel = path.strip_prefix(dir).unwrap_or(&path);
        let meta = path.symlink_metadata().map_err(|e| io(&path, "stat", e))?;
        if meta.file_type().is_char_device() && meta.rdev() == 0 {
            let name = rel.file_name().map(|n| n.to_string_lossy().into_owned());
            let wh = rel.with_file_name(format!(".wh.{}", name.unwrap_or_default()));
            append_marker(&mut tar, &wh).map_err(|e| io(&path, "write a whiteout", e))?;
            continue;
        }
        append_entry(&mut tar, &path, rel, &meta)
            .map_err(|e| io(&path, "add to the layer tar", e))?;
        if meta.is_dir()
            && xattr::get(&path, super::layer::opaque_xattr())
                .ok()
                .flatten()
                .is_some_and(|v| v == b"y")
        {
            append_marker(&mut tar, &rel.join(".wh..wh..opq"))
                .map_err(|e| io(&path, "write an opaque marker", e))?;
        }
    }
    let hashing = tar
        .into_inner()
        .map_err(|e| io(dir, "finish the layer tar", e))?;
    Ok(format!("sha256:{}", hex::encode(hashing.hash.finalize())))
}

/// One entry with the owners an image has: a layer a sandbox used holds host ids
/// ([`crate::ids`]), which the tar turns back into the image's own.
fn append_entry<W: Write>(
    tar: &mut tar::Builder<W>,
    path: &Path,
    rel: &Path,
    meta: &std::fs::Metadata,
) -> std::io::Result<()> {
    use crate::ids::to_container;
    let mut header = tar::Header::new_gnu();
    header.set_metadata_in_mode(meta, tar::HeaderMode::Complete);
    header.set_uid(u64::from(to_container(meta.uid())));
    header.set_gid(u64::from(to_container(meta.gid())));
    if meta.file_type().is_symlink() {
        header.set_size(0);
        tar.append_link(&mut header, rel, std::fs::read_link(path)?)
    } else if meta.is_file() {
        tar.append_data(&mut header, rel, std::fs::File::open(path)?)
    } else {
        header.set_size(0);
        tar.append_data(&mut header, rel, std::io::empty())
    }
}

fn append_marker<W: Write>(tar: &mut tar::Builder<W>, name: &Path) -> std::io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_size(0);
    header.set_mode(0o644);
    header.set_entry_type(tar::EntryType::Regular);
    tar.append_data(&mut header, name, std::io::empty())
}

struct HashingWriter<W> {
    inner: W,
    hash: Sha256,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The OCI config of `image`: its runtime settings and the diff ids of its layers.
pub fn image_config(image: &StoredImage, diff_ids: &[String]) -> serde_json::Value {
    let c = &image.config;
    let env: Vec<String> = c.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": env,
            "WorkingDir": c.working_dir.clone().unwrap_or_default(),
            "User": c.user.clone().unwrap_or_default(),
            "Entrypoint": c.entrypoint,
            "Cmd": c.cmd,
            "Shell": c.shell,
        },
        "rootfs": { "type": "layers", "diff_ids": diff_ids },
    })
}

/// Write `image` to `file` as a `docker save` tarball tagged `repo_tag`.
pub fn save(image: &StoredImage, repo_tag: &str, file: &Path) -> Result<(), ImageError> {
    let io = |what: &str, e: std::io::Error| ImageError::io(file, what, e);
    let scratch = file.with_extension(format!("parts-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&scratch).map_err(|e| io("make a scratch folder beside it", e))?;
    let saved = write_tarball(image, repo_tag, file, &scratch);
    let _ = std::fs::remove_dir_all(&scratch);
    saved
}

fn write_tarball(
    image: &StoredImage,
    repo_tag: &str,
    file: &Path,
    scratch: &Path,
) -> Result<(), ImageError> {
    let io = |what: &str, e: std::io::Error| ImageError::io(file, what, e);
    let mut layer_names = Vec::new();
    let mut diff_ids = Vec::new();
    for (i, layer) in image.layers.iter().enumerate() {
        let path = scratch.join(format!("layer-{i}.tar"));
        let out = std::fs::File::create(&path).map_err(|e| io("create a layer tar", e))?;
        let mut out = std::io::BufWriter::new(out);
        let diff_id = layer_tar(layer, &mut out)?;
        out.flush().map_err(|e| io("write a layer tar", e))?;
        layer_names.push((path, format!("{}/layer.tar", hex_of(&diff_id))));
        diff_ids.push(diff_id);
    }
    let config = serde_json::to_vec(&image_config(image, &diff_ids)).map_err(|e| {
        ImageError::BadArchive {
            file: file.to_path_buf(),
            what: format!("encode the config: {e}"),
        }
    })?;
    let config_name = format!("{}.json", hex::encode(Sha256::digest(&config)));
    let manifest = serde_json::json!([{
        "Config": config_name,
        "RepoTags": [repo_tag],
        "Layers": layer_names.iter().map(|(_, n)| n.clone()).collect::<Vec<_>>(),
    }]);
    let partial = file.with_extension("partial");
    let out = std::fs::File::create(&partial).map_err(|e| io("create", e))?;
    let mut tar = tar::Builder::new(std::io::BufWriter::new(out));
    let mut add = |name: &str, bytes: &mut dyn Read, len: u64| -> std::io::Result<()> {
        let mut header = tar::Header::new_gnu();
        header.set_size(len);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, name, bytes)
    };
    add(&config_name, &mut &config[..], config.len() as u64).map_err(|e| io("write", e))?;
    for (path, name) in &layer_names {
        let len = std::fs::metadata(path)
            .map_err(|e| io("stat a layer", e))?
            .len();
        let mut f = std::fs::File::open(path).map_err(|e| io("read a layer", e))?;
        add(name, &mut f, len).map_err(|e| io("write", e))?;
    }
    let manifest = manifest.to_string().into_bytes();
    add("manifest.json", &mut &manifest[..], manifest.len() as u64).map_err(|e| io("write", e))?;
    let mut out = tar.into_inner().map_err(|e| io("finish", e))?;
    out.flush().map_err(|e| io("finish", e))?;
    drop(out);
    std::fs::rename(&partial, file).map_err(|e| io("move into place", e))
}

fn hex_of(digest: &str) -> &str {
    digest.strip_prefix("sha256:").unwrap_or(digest)
}
