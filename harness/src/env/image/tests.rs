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

// ---- load ----

#[test]
fn loads_an_oci_layout_dir_and_tar_verifying_every_blob() {
    let (dir, store) = new_store();
    let image = TestImage::new("oci");
    let layout = dir.path().join("layout");
    oci_layout(&layout, &image, "registry.example/team/app:1.0");

    let loaded = store.load(&layout).unwrap();
    assert_eq!(loaded.len(), 1);
    let got = &loaded[0];
    assert_eq!(got.reference, "registry.example/team/app:1.0");
    assert_eq!(got.digest, image.manifest_digest());
    assert_eq!(
        got.source,
        ImageSource::Loaded {
            file: layout.clone()
        }
    );
    check_image(got, "oci");
    let reference = Reference::parse("registry.example/team/app:1.0").unwrap();
    assert_eq!(store.get(&reference).unwrap().as_ref(), Some(got));
    let pinned = Reference::parse(&format!("other/name@{}", image.manifest_digest())).unwrap();
    assert_eq!(
        store.get(&pinned).unwrap().map(|i| i.digest),
        Some(got.digest.clone())
    );
    // The layout's files were read, not moved.
    assert!(
        layout
            .join("blobs/sha256")
            .join(&sha256_digest(&image.blobs[0])[7..])
            .is_file()
    );

    // The same layout as a tar, under a bare tag: no repository, so recorded by digest.
    let layout2 = dir.path().join("layout2");
    oci_layout(&layout2, &image, "latest");
    let tar = dir.path().join("layout.tar");
    tar_dir(&layout2, &tar);
    let loaded = store.load(&tar).unwrap();
    assert_eq!(loaded.len(), 1);
    assert_eq!(loaded[0].reference, image.manifest_digest());
    assert_eq!(
        loaded[0].layers, got.layers,
        "layers are shared, unpacked once"
    );
    assert!(tmp_is_empty(&store));
    let listed: Vec<String> = store
        .list()
        .unwrap()
        .into_iter()
        .map(|i| i.reference)
        .collect();
    assert_eq!(
        listed,
        vec!["registry.example/team/app:1.0".to_string()],
        "the unnamed copy has the same digest"
    );
}

#[test]
fn loads_a_legacy_docker_save_tarball() {
    let (dir, store) = new_store();
    let image = TestImage::new("saved");
    let save = dir.path().join("save");
    docker_save(&save, &image, &["debian:bookworm", "example.com/x/y:2"]);
    let tar = dir.path().join("save.tar");
    tar_dir(&save, &tar);
    let gz = dir.path().join("save.tar.gz");
    fs::write(&gz, gzip(&fs::read(&tar).unwrap())).unwrap();

    let loaded = store.load(&gz).unwrap();
    let names: Vec<&str> = loaded.iter().map(|i| i.reference.as_str()).collect();
    assert_eq!(
        names,
        vec!["docker.io/library/debian:bookworm", "example.com/x/y:2"]
    );
    for got in &loaded {
        check_image(got, "saved");
        assert_eq!(
            got.digest,
            sha256_digest(&image.config),
            "legacy form: the image id"
        );
    }
    let hit = store
        .get(&Reference::parse("debian:bookworm").unwrap())
        .unwrap();
    assert_eq!(hit.as_ref(), Some(&loaded[0]));
    assert!(tmp_is_empty(&store));
}

#[test]
fn tampered_blobs_are_refused_with_a_digest_error() {
    let image = TestImage::new("tampered");

    // A layer blob of an OCI layout with its gzip header's OS byte changed: it still
    // decompresses to the right tar, so only the blob digest can catch it.
    let (dir, store) = new_store();
    let layout = dir.path().join("layout");
    oci_layout(&layout, &image, "x/y:1");
    let blob = layout
        .join("blobs/sha256")
        .join(&sha256_digest(&image.blobs[0])[7..]);
    let mut bytes = fs::read(&blob).unwrap();
    bytes[9] ^= 0x01;
    fs::write(&blob, &bytes).unwrap();
    match store.load(&layout) {
        Err(ImageError::DigestMismatch {
            expected, actual, ..
        }) => {
            assert_eq!(expected, sha256_digest(&image.blobs[0]));
            assert_eq!(actual, sha256_digest(&bytes));
        }
        other => panic!("tampered layer accepted: {other:?}"),
    }
    assert!(
        store.layer(&image.diff_hex(0)).is_none(),
        "no layer from a bad blob"
    );
    assert!(store.list().unwrap().is_empty());
    assert!(tmp_is_empty(&store));

    // A config of an OCI layout.
    let (dir, store) = new_store();
    let layout = dir.path().join("layout");
    oci_layout(&layout, &image, "x/y:1");
    let config = layout
        .join("blobs/sha256")
        .join(&sha256_digest(&image.config)[7..]);
    fs::write(&config, image.config.to_ascii_uppercase()).unwrap();
    let err = store.load(&layout).unwrap_err();
    assert!(
        matches!(err, ImageError::DigestMismatch { ref expected, .. } if *expected == sha256_digest(&image.config)),
        "{err}"
    );

    // A legacy layer.tar whose content no longer matches the config's diff id.
    let (dir, store) = new_store();
    let save = dir.path().join("save");
    docker_save(&save, &image, &["a:1"]);
    let layer = save.join("one/layer.tar");
    let mut tar = fs::read(&layer).unwrap();
    let at = tar.windows(13).position(|w| w == b"ID=geode-test").unwrap();
    tar[at] = b'X';
    fs::write(&layer, &tar).unwrap();
    let err = store.load(&save).unwrap_err();
    match &err {
        ImageError::DigestMismatch { expected, what, .. } => {
            assert_eq!(*expected, sha256_digest(&image.tars[0]));
            assert!(what.contains("diff id"), "{what}");
        }
        other => panic!("expected a digest mismatch, got {other}"),
    }
    assert!(store.layer(&image.diff_hex(0)).is_none());
}

#[test]
fn archives_that_are_neither_form_or_escape_are_refused() {
    let (dir, store) = new_store();
    let empty = dir.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let err = store.load(&empty).unwrap_err();
    assert!(
        matches!(err, ImageError::BadArchive { ref file, .. } if file.ends_with("empty")),
        "{err}"
    );

    let save = dir.path().join("save");
    let image = TestImage::new("x");
    docker_save(&save, &image, &["a:1"]);
    let manifest =
        serde_json::json!([{"Config": "../../etc/passwd", "RepoTags": ["a:1"], "Layers": []}]);
    fs::write(save.join("manifest.json"), manifest.to_string()).unwrap();
    let err = store.load(&save).unwrap_err();
    assert!(err.to_string().contains("leaves the archive"), "{err}");

    // A layer of an unpacked save dir that is a symlink out of it.
    let save = dir.path().join("save2");
    docker_save(&save, &image, &["a:1"]);
    let outside = dir.path().join("outside.tar");
    fs::write(&outside, &image.tars[0]).unwrap();
    fs::remove_file(save.join("one/layer.tar")).unwrap();
    std::os::unix::fs::symlink(&outside, save.join("one/layer.tar")).unwrap();
    let err = store.load(&save).unwrap_err();
    assert!(err.to_string().contains("outside the archive"), "{err}");
    assert!(store.layer(&image.diff_hex(0)).is_none());
}

// ---- local layers and images ----

#[test]
fn adopted_layers_local_images_remove_and_prune() {
    let (_dir, store) = new_store();
    let id = "abcdef0123456789".repeat(4);
    let build = store.temp_dir().unwrap();
    fs::write(build.join("hello"), b"world!").unwrap();
    let layer = store.adopt_layer(&id, &build).unwrap();
    assert_eq!(layer, store.root().join("l").join(&id[..12]));
    assert_eq!(fs::read(layer.join("hello")).unwrap(), b"world!");
    assert!(!build.exists(), "moved, not copied");
    assert_eq!(store.layer(&id), Some(layer.clone()));
    assert_eq!(store.layer(&"0".repeat(64)), None);

    // A second copy of the same layer is discarded.
    let again = store.temp_dir().unwrap();
    fs::write(again.join("other"), b"x").unwrap();
    assert_eq!(store.adopt_layer(&id, &again).unwrap(), layer);
    assert!(!again.exists());
    assert!(!layer.join("other").exists());
    assert!(
        store
            .adopt_layer("not-hex", &store.temp_dir().unwrap())
            .is_err()
    );

    let reference = Reference::parse("geode/local:dev").unwrap();
    let config = ImageConfig {
        working_dir: Some("/work".into()),
        ..ImageConfig::default()
    };
    let source = ImageSource::Bootstrapped {
        what: "bootstrapped from the Debian archive (bookworm)".into(),
    };
    let image = store
        .tag_local(
            &reference,
            vec![layer.clone()],
            config.clone(),
            source.clone(),
        )
        .unwrap();
    assert_eq!(image.reference, "docker.io/geode/local:dev");
    assert_eq!(image.size_bytes, 6);
    assert_eq!(store.get(&reference).unwrap(), Some(image.clone()));
    let same = store
        .tag_local(&reference, vec![layer.clone()], config, source.clone())
        .unwrap();
    assert_eq!(
        same.digest, image.digest,
        "the digest is a function of layers and config"
    );
    let other = store
        .tag_local(
            &reference,
            vec![layer.clone()],
            ImageConfig::default(),
            source,
        )
        .unwrap();
    assert_ne!(other.digest, image.digest);
    assert_eq!(store.list().unwrap().len(), 1);

    assert_eq!(
        store.prune(&[]).unwrap(),
        0,
        "a recorded image keeps its layer"
    );
    assert!(layer.is_dir());
    // The first record's digest is still filed, but its name moved on: dangling, pruned.
    let first = reference.with_digest(&image.digest).unwrap();
    assert!(store.get(&first).unwrap().is_none());
    assert_eq!(
        store
            .get(&reference.with_digest(&other.digest).unwrap())
            .unwrap(),
        Some(other.clone())
    );
    assert!(store.remove(&reference).unwrap());
    assert!(!store.remove(&reference).unwrap());
    assert_eq!(store.get(&reference).unwrap(), None);
    assert!(store.list().unwrap().is_empty());
    assert_eq!(
        store.prune(std::slice::from_ref(&layer)).unwrap(),
        0,
        "kept by the caller"
    );
    assert!(layer.is_dir());
    assert!(store.prune(&[]).unwrap() >= 6);
    assert_eq!(
        fs::read_dir(store.root().join("images/digests"))
            .unwrap()
            .count(),
        0
    );
    assert!(!layer.exists());
    assert_eq!(store.layer(&id), None);
    assert!(
        fs::symlink_metadata(&layer).is_err(),
        "the short link went too"
    );
}

#[test]
fn concurrent_unpacks_of_one_layer_make_it_once() {
    let (dir, store) = new_store();
    let image = TestImage::new("race");
    let blob = dir.path().join("blob.gz");
    fs::write(&blob, &image.blobs[0]).unwrap();
    let id = image.diff_hex(0);
    let diff_id = sha256_digest(&image.tars[0]);
    let blob_digest = sha256_digest(&image.blobs[0]);
    let paths: Vec<PathBuf> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let layer = LayerBlob {
                        path: &blob,
                        label: &blob,
                        digest: Some(&blob_digest),
                        diff_id: &diff_id,
                    };
                    store.unpack_loaded(&id, &layer, "race").unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(paths.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(
        fs::read(paths[0].join("etc/os-release")).unwrap(),
        b"ID=geode-test\n"
    );
    assert!(tmp_is_empty(&store));
    assert_eq!(
        fs::read_dir(store.root().join("layers")).unwrap().count(),
        1
    );
}

// ---- a registry on loopback ----

#[derive(Default)]
struct FakeRegistry {
    port: u16,
    /// `<repo>/<tag or digest>` -> (content type, body).
    manifests: HashMap<String, (String, Vec<u8>)>,
    blobs: HashMap<String, Vec<u8>>,
    /// Blob digests served with one byte changed.
    corrupt: Vec<String>,
    token: String,
    /// The one scope the token endpoint grants.
    scope: String,
    log: Mutex<Vec<String>>,
}

impl FakeRegistry {
    fn serving(image: &TestImage, repo: &str, tag: &str) -> FakeRegistry {
        let mut reg = FakeRegistry {
            token: "tok-geode".into(),
            scope: format!("repository:{repo}:pull"),
            ..FakeRegistry::default()
        };
        let index = image.index();
        reg.manifests
            .insert(format!("{repo}/{tag}"), (DOCKER_LIST.into(), index.clone()));
        reg.manifests.insert(
            format!("{repo}/{}", sha256_digest(&index)),
            (OCI_INDEX.into(), index),
        );
        reg.manifests.insert(
            format!("{repo}/{}", image.manifest_digest()),
            (OCI_MANIFEST.into(), image.manifest.clone()),
        );
        for blob in image.blobs.iter().chain([&image.config]) {
            reg.blobs.insert(sha256_digest(blob), blob.clone());
        }
        reg
    }

    fn logged(&self, what: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(what))
            .count()
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

async fn token(State(reg): State<Arc<FakeRegistry>>, uri: Uri) -> Response {
    let query: BTreeMap<String, String> = uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), percent_decode(v)))
        .collect();
    reg.log.lock().unwrap().push(format!("token {query:?}"));
    let scope_ok = query.get("scope") == Some(&reg.scope);
    if query.get("service").map(String::as_str) != Some("fake-registry") || !scope_ok {
        return Response::builder()
            .status(StatusCode::FORBIDDEN)
            .body(Body::from("bad scope"))
            .unwrap();
    }
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(
            serde_json::json!({"token": reg.token}).to_string(),
        ))
        .unwrap()
}

async fn v2(State(reg): State<Arc<FakeRegistry>>, uri: Uri, headers: HeaderMap) -> Response {
    let path = uri.path().to_string();
    let authorized = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == format!("Bearer {}", reg.token));
    let Some(rest) = path.strip_prefix("/v2/") else {
        return Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Body::empty())
            .unwrap();
    };
    let (repo, kind, key) = if let Some((repo, key)) = rest.rsplit_once("/manifests/") {
        (repo, "manifest", key)
    } else if let Some((repo, key)) = rest.rsplit_once("/blobs/") {
        (repo, "blob", key)
    } else {
        return Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Body::empty())
            .unwrap();
    };
    if !authorized {
        reg.log.lock().unwrap().push(format!("401 {path}"));
        let challenge = format!(
            r#"Bearer realm="http://127.0.0.1:{}/token",service="fake-registry",scope="repository:{repo}:pull""#,
            reg.port
        );
        return Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .header(header::WWW_AUTHENTICATE, challenge)
            .body(Body::from(r#"{"errors":[{"code":"UNAUTHORIZED"}]}"#))
            .unwrap();
    }
    reg.log.lock().unwrap().push(format!("{kind} {path}"));
    let not_found = || {
        Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Body::from(r#"{"errors":[{"code":"MANIFEST_UNKNOWN"}]}"#))
            .unwrap()
    };
    if kind == "manifest" {
        let Some((content_type, body)) = reg.manifests.get(&format!("{repo}/{key}")) else {
            return not_found();
        };
        return Response::builder()
            .header(header::CONTENT_TYPE, content_type.as_str())
            .header("Docker-Content-Digest", sha256_digest(body))
            .body(Body::from(body.clone()))
            .unwrap();
    }
    let Some(blob) = reg.blobs.get(key) else {
        return not_found();
    };
    let mut blob = blob.clone();
    if reg.corrupt.iter().any(|d| d == key) {
        let mid = blob.len() / 2;
        blob[mid] ^= 0xff;
    }
    Response::builder().body(Body::from(blob)).unwrap()
}

/// Serves `make(port)` on 127.0.0.1 until the test's runtime ends.
async fn serve(make: impl FnOnce(u16) -> FakeRegistry) -> Arc<FakeRegistry> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut reg = make(port);
    reg.port = port;
    let reg = Arc::new(reg);
    let app = Router::new()
        .route("/token", get(token))
        .fallback(v2)
        .with_state(reg.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    reg
}

/// A loopback port nothing listens on.
async fn dead_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn pulls_through_an_index_with_a_bearer_token() {
    let image = TestImage::new("pulled");
    let reg = serve(|_| FakeRegistry::serving(&image, "library/app", "1")).await;
    let (_dir, store) = new_store();
    let reference = Reference::parse(&format!("127.0.0.1:{}/library/app:1", reg.port)).unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    let opts = PullOptions {
        progress: Some(Arc::new(move |l: &str| {
            sink.lock().unwrap().push(l.to_string())
        })),
        docker_config: Some(PathBuf::from("/nonexistent/docker-config.json")),
        ..PullOptions::default()
    };

    let pulled = store.pull(&reference, &opts).await.unwrap();
    check_image(&pulled, "pulled");
    assert_eq!(pulled.reference, reference.to_string());
    assert_eq!(
        pulled.digest,
        sha256_digest(&image.index()),
        "the digest the tag names"
    );
    assert_eq!(
        pulled.source,
        ImageSource::Pulled {
            registry_url: format!("http://127.0.0.1:{}", reg.port)
        }
    );
    assert!(reg.logged("401 ") >= 1, "the registry challenged");
    assert!(reg.logged("token ") >= 1, "a token was fetched");
    assert_eq!(
        reg.logged("manifest /v2/library/app/manifests/sha256:0000"),
        0,
        "arm64 not chosen"
    );
    assert!(!lines.lock().unwrap().is_empty());
    assert_eq!(store.get(&reference).unwrap().as_ref(), Some(&pulled));
    let by_manifest = reference.with_digest(&image.manifest_digest()).unwrap();
    assert_eq!(
        store.get(&by_manifest).unwrap().map(|i| i.layers),
        Some(pulled.layers.clone())
    );
    // Layer blobs go once unpacked; the config stays.
    let blobs = store.root().join("blobs/sha256");
    assert!(!blobs.join(&sha256_digest(&image.blobs[0])[7..]).exists());
    assert!(blobs.join(&sha256_digest(&image.config)[7..]).is_file());
    assert!(tmp_is_empty(&store));

    // Again: the manifest is asked for, the layers are not downloaded again.
    let blob_gets = reg.logged("blob /v2/");
    let again = store.pull(&reference, &opts).await.unwrap();
    assert_eq!(again.layers, pulled.layers);
    assert_eq!(reg.logged("blob /v2/"), blob_gets);

    let missing = Reference::parse(&format!("127.0.0.1:{}/library/app:nope", reg.port)).unwrap();
    let err = store.pull(&missing, &opts).await.unwrap_err();
    assert!(
        matches!(err, ImageError::NotFound { ref url, .. } if url.ends_with("/manifests/nope")),
        "{err}"
    );
}

#[tokio::test]
async fn a_wrong_blob_fails_the_pull_with_a_digest_mismatch() {
    let image = TestImage::new("corrupt");
    let layer_digest = sha256_digest(&image.blobs[1]);
    let reg = serve(|_| {
        let mut reg = FakeRegistry::serving(&image, "library/app", "1");
        reg.corrupt.push(layer_digest.clone());
        reg
    })
    .await;
    let (_dir, store) = new_store();
    let reference = Reference::parse(&format!("127.0.0.1:{}/library/app:1", reg.port)).unwrap();
    let err = store
        .pull(&reference, &PullOptions::default())
        .await
        .unwrap_err();
    match &err {
        ImageError::DigestMismatch {
            reference: named,
            expected,
            actual,
            ..
        } => {
            assert_eq!(named, &reference.to_string());
            assert_eq!(expected, &layer_digest);
            assert_ne!(actual, &layer_digest);
            assert!(actual.starts_with("sha256:"));
        }
        other => panic!("expected a digest mismatch, got {other}"),
    }
    assert!(store.layer(&image.diff_hex(1)).is_none());
    assert!(
        !store
            .root()
            .join("blobs/sha256")
            .join(&layer_digest[7..])
            .exists()
    );
    assert!(tmp_is_empty(&store), "the bad download is removed");
    assert_eq!(store.get(&reference).unwrap(), None);
}

#[tokio::test]
async fn a_mirror_is_tried_first_and_the_registry_is_the_fallback() {
    let image = TestImage::new("mirrored");
    let reg = serve(|_| FakeRegistry::serving(&image, "library/debian", "bookworm")).await;
    let (_dir, store) = new_store();
    let mirror = format!("http://127.0.0.1:{}", reg.port);

    // The fake stands in for Docker Hub; the real one is never tried.
    let hub = Reference::parse("debian:bookworm").unwrap();
    let opts = PullOptions {
        mirrors: BTreeMap::from([("docker.io".to_string(), mirror.clone())]),
        ..PullOptions::default()
    };
    let pulled = store.pull_via(&hub, &opts, false).await.unwrap();
    check_image(&pulled, "mirrored");
    assert_eq!(pulled.reference, "docker.io/library/debian:bookworm");
    assert_eq!(
        pulled.source,
        ImageSource::Pulled {
            registry_url: mirror.clone()
        }
    );
    let mirror_only = PullOptions {
        mirrors: BTreeMap::new(),
        ..PullOptions::default()
    };
    assert!(
        store.pull_via(&hub, &mirror_only, false).await.is_err(),
        "no endpoint at all"
    );

    // A dead mirror of a loopback registry: the pull falls back to the registry itself.
    let local =
        Reference::parse(&format!("127.0.0.1:{}/library/debian:bookworm", reg.port)).unwrap();
    let dead = format!("http://127.0.0.1:{}", dead_port().await);
    let opts = PullOptions {
        mirrors: BTreeMap::from([(local.registry().to_string(), dead)]),
        ..PullOptions::default()
    };
    let pulled = store.pull(&local, &opts).await.unwrap();
    assert_eq!(
        pulled.source,
        ImageSource::Pulled {
            registry_url: mirror
        }
    );
}

#[test]
fn pull_futures_are_send() {
    fn is_send<T: Send>(_: &T) {}
    let (_dir, store) = new_store();
    let reference = Reference::parse("x:1").unwrap();
    let opts = PullOptions::default();
    let future = store.pull(&reference, &opts);
    is_send(&future);
}
