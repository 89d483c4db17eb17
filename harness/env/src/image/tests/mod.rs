//! Tests of the store through its public face: loads of archives built here from real layer
//! tars, and pulls from a registry served on loopback (with docker's bearer-token flow), so
//! every byte the store checks was made by the test and can be tampered with.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::Response;
use axum::routing::get;

use super::layer::tests::{E, gzip, tar_of};
use super::manifest::{DOCKER_LIST, OCI_INDEX, OCI_MANIFEST, sha256_digest};
use super::store::LayerBlob;
use super::*;

mod load;
mod local;
mod pull;

// ---- images made by the tests ----

struct TestImage {
    /// Uncompressed layer tars, bottom first.
    tars: Vec<Vec<u8>>,
    /// The blobs as a registry/layout holds them (gzip, then zstd).
    blobs: Vec<Vec<u8>>,
    config: Vec<u8>,
    manifest: Vec<u8>,
}

impl TestImage {
    fn new(marker: &str) -> TestImage {
        let base = tar_of(&[
            E::Dir("etc/", 0o755),
            E::File("etc/os-release", b"ID=geode-test\n", 0o644),
            E::File("bin/hello", b"#!/bin/sh\necho hello\n", 0o755),
            E::File("etc/old", b"old", 0o644),
        ]);
        let app = tar_of(&[
            E::Dir("app/", 0o755),
            E::File("app/marker", marker.as_bytes(), 0o644),
            E::File("etc/.wh.old", b"", 0o644),
        ]);
        let blobs = vec![gzip(&base), zstd::encode_all(&app[..], 3).unwrap()];
        let config = serde_json::json!({
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": ["PATH=/usr/bin:/bin", "MARKER=".to_string() + marker], "WorkingDir": "/app", "Cmd": ["/bin/hello"]},
            "rootfs": {"type": "layers", "diff_ids": [sha256_digest(&base), sha256_digest(&app)]},
        })
        .to_string()
        .into_bytes();
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha256_digest(&config), "size": config.len()},
            "layers": [
                {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": sha256_digest(&blobs[0]), "size": blobs[0].len()},
                {"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd", "digest": sha256_digest(&blobs[1]), "size": blobs[1].len()},
            ],
        })
        .to_string()
        .into_bytes();
        TestImage {
            tars: vec![base, app],
            blobs,
            config,
            manifest,
        }
    }

    fn diff_hex(&self, i: usize) -> String {
        sha256_digest(&self.tars[i])["sha256:".len()..].to_string()
    }

    fn manifest_digest(&self) -> String {
        sha256_digest(&self.manifest)
    }

    /// An index with an arm64 entry first (whose manifest does not exist), so picking the
    /// wrong platform fails the pull.
    fn index(&self) -> Vec<u8> {
        serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [
                {"mediaType": OCI_MANIFEST, "digest": format!("sha256:{}", "0".repeat(64)), "size": 10,
                 "platform": {"architecture": "arm64", "os": "linux", "variant": "v8"}},
                {"mediaType": OCI_MANIFEST, "digest": self.manifest_digest(), "size": self.manifest.len(),
                 "platform": {"architecture": "amd64", "os": "linux"}},
            ],
        })
        .to_string()
        .into_bytes()
    }
}

/// The checks every stored copy of [`TestImage`] must pass.
fn check_image(image: &StoredImage, marker: &str) {
    assert_eq!(image.layers.len(), 2);
    let (base, app) = (&image.layers[0], &image.layers[1]);
    assert_eq!(
        fs::read(base.join("etc/os-release")).unwrap(),
        b"ID=geode-test\n"
    );
    assert_eq!(fs::read(app.join("app/marker")).unwrap(), marker.as_bytes());
    use std::os::unix::fs::FileTypeExt;
    assert!(
        fs::symlink_metadata(app.join("etc/old"))
            .unwrap()
            .file_type()
            .is_char_device()
    );
    assert_eq!(
        image.config.env,
        vec![
            ("PATH".to_string(), "/usr/bin:/bin".to_string()),
            ("MARKER".to_string(), marker.to_string())
        ]
    );
    assert_eq!(image.config.working_dir.as_deref(), Some("/app"));
    assert_eq!(image.config.cmd, Some(vec!["/bin/hello".to_string()]));
    assert_eq!(image.size_bytes, (14 + 21 + 3 + marker.len()) as u64);
    for layer in &image.layers {
        // Short enough to stack 40 of them in one mount's options.
        let name = layer.file_name().unwrap().to_str().unwrap();
        assert_eq!(name.len(), 12, "{}", layer.display());
        assert_eq!(layer.parent().unwrap().file_name().unwrap(), "l");
    }
}

fn write_blob(layout: &Path, bytes: &[u8]) {
    let dir = layout.join("blobs/sha256");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(&sha256_digest(bytes)["sha256:".len()..]), bytes).unwrap();
}

fn oci_layout(dir: &Path, image: &TestImage, ref_name: &str) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    for blob in image.blobs.iter().chain([&image.config, &image.manifest]) {
        write_blob(dir, blob);
    }
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": OCI_MANIFEST, "digest": image.manifest_digest(), "size": image.manifest.len(),
                       "annotations": {"org.opencontainers.image.ref.name": ref_name}}],
    });
    fs::write(dir.join("index.json"), index.to_string()).unwrap();
}

/// The legacy `docker save` form: `<config hex>.json`, `<id>/layer.tar` (uncompressed), the
/// second layer reached through a symlink as docker writes duplicates.
fn docker_save(dir: &Path, image: &TestImage, tags: &[&str]) {
    fs::create_dir_all(dir.join("one")).unwrap();
    fs::create_dir_all(dir.join("real")).unwrap();
    fs::create_dir_all(dir.join("two")).unwrap();
    fs::write(dir.join("one/layer.tar"), &image.tars[0]).unwrap();
    fs::write(dir.join("real/layer.tar"), &image.tars[1]).unwrap();
    std::os::unix::fs::symlink("../real/layer.tar", dir.join("two/layer.tar")).unwrap();
    let config_name = format!("{}.json", &sha256_digest(&image.config)["sha256:".len()..]);
    fs::write(dir.join(&config_name), &image.config).unwrap();
    let manifest = serde_json::json!([{"Config": config_name, "RepoTags": tags, "Layers": ["one/layer.tar", "two/layer.tar"]}]);
    fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
}

/// A tar of a directory's contents (symlinks kept as symlinks).
fn tar_dir(dir: &Path, out: &Path) {
    let mut builder = tar::Builder::new(fs::File::create(out).unwrap());
    builder.follow_symlinks(false);
    builder.append_dir_all(".", dir).unwrap();
    builder.finish().unwrap();
}

fn new_store() -> (tempfile::TempDir, ImageStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = ImageStore::open(dir.path().join("store")).unwrap();
    (dir, store)
}

fn tmp_is_empty(store: &ImageStore) -> bool {
    fs::read_dir(store.root().join("tmp")).unwrap().count() == 0
}
