//! Pulls from a registry served on loopback with docker's bearer-token flow: indexes,
//! digest checks, mirrors before the registry.

use super::*;

#[derive(Default)]
struct FakeRegistry {
    port: u16,
    /// `<repo>/<tag or digest>` -> (content type, body).
    manifests: HashMap<String, (String, Vec<u8>)>,
    blobs: HashMap<String, Vec<u8>>,
    /// Blob digests served with one byte changed.
    corrupt: Vec<String>,
    /// A blob served in two halves, the second only once the notify fires.
    held: Option<(String, Arc<tokio::sync::Notify>)>,
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
    if let Some((_, release)) = reg.held.as_ref().filter(|(d, _)| d == key) {
        let second = bytes::Bytes::from(blob.split_off(blob.len() / 2));
        let release = release.clone();
        use futures::StreamExt as _;
        let halves =
            futures::stream::once(async move { Ok::<_, std::io::Error>(bytes::Bytes::from(blob)) })
                .chain(futures::stream::once(async move {
                    release.notified().await;
                    Ok(second)
                }));
        return Response::builder().body(Body::from_stream(halves)).unwrap();
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

/// Every path under `root` with its size and modification time: what a read-only store must
/// leave exactly as it was.
fn tree_state(root: &Path) -> Vec<(PathBuf, u64, std::time::SystemTime)> {
    walkdir::WalkDir::new(root)
        .sort_by_file_name()
        .into_iter()
        .map(|e| {
            let e = e.unwrap();
            let m = e.path().symlink_metadata().unwrap();
            (e.path().to_path_buf(), m.len(), m.modified().unwrap())
        })
        .collect()
}

#[tokio::test]
async fn a_read_only_store_serves_what_was_staged_and_refuses_every_write() {
    let image = TestImage::new("staged");
    let reg = serve(|_| FakeRegistry::serving(&image, "library/app", "1")).await;
    let (dir, store) = new_store();
    let reference = Reference::parse(&format!("127.0.0.1:{}/library/app:1", reg.port)).unwrap();
    let opts = PullOptions {
        docker_config: Some(PathBuf::from("/nonexistent/docker-config.json")),
        ..PullOptions::default()
    };
    let pulled = store.pull(&reference, &opts).await.unwrap();
    let before = tree_state(store.root());
    let requests = reg.logged("");

    let ro = ImageStore::open_read_only(store.root()).unwrap();
    assert!(ro.is_read_only() && !store.is_read_only());
    assert_eq!(ro.get(&reference).unwrap(), Some(pulled.clone()));
    assert_eq!(ro.list().unwrap(), vec![pulled.clone()]);
    let id = pulled.layers[0]
        .canonicalize()
        .unwrap()
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert_eq!(ro.layer(&id), Some(pulled.layers[0].clone()));

    let read_only = |e: ImageError| {
        assert!(matches!(e, ImageError::ReadOnly { .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("read-only") && text.contains("geode image stage"),
            "{text}"
        );
    };
    let other = Reference::parse(&format!("127.0.0.1:{}/library/app:2", reg.port)).unwrap();
    read_only(ro.pull(&other, &opts).await.unwrap_err());
    read_only(ro.pull(&reference, &opts).await.unwrap_err());
    read_only(ro.temp_dir().unwrap_err());
    read_only(ro.prune(&[]).unwrap_err());
    read_only(ro.remove(&reference).unwrap_err());
    read_only(
        ro.tag_local(
            &other,
            pulled.layers.clone(),
            ImageConfig::default(),
            ImageSource::Built,
        )
        .unwrap_err(),
    );
    let outside = dir.path().join("layer");
    fs::create_dir(&outside).unwrap();
    read_only(ro.adopt_layer(&"ab".repeat(32), &outside).unwrap_err());
    assert!(outside.is_dir(), "a refused adoption leaves the folder");
    // Refused before any request: a node without network does not wait on one.
    assert_eq!(reg.logged(""), requests);
    assert_eq!(tree_state(store.root()), before, "the store was written");

    // Only a store that exists opens read-only; nothing is created.
    let absent = dir.path().join("absent");
    let err = ImageStore::open_read_only(&absent).unwrap_err();
    assert!(err.to_string().contains("geode image stage"), "{err}");
    assert!(!absent.exists());
}

/// A layer's files are on disk while its download is still under way: the bytes go from the
/// response to the unpacker as they arrive (with the blob downloaded first, nothing of the
/// layer exists until its last byte is in).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_is_unpacked_while_it_downloads() {
    let (first, second) = (vec![b'a'; 256 * 1024], vec![b'b'; 256 * 1024]);
    let tar = tar_of(&[
        E::File("first", &first, 0o644),
        E::File("second", &second, 0o644),
    ]);
    let config = serde_json::json!({
        "architecture": "amd64", "os": "linux", "config": {},
        "rootfs": {"type": "layers", "diff_ids": [sha256_digest(&tar)]},
    })
    .to_string()
    .into_bytes();
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha256_digest(&config), "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": sha256_digest(&tar), "size": tar.len()}],
    })
    .to_string()
    .into_bytes();
    let release = Arc::new(tokio::sync::Notify::new());
    let held = release.clone();
    let reg = serve(move |_| {
        let mut reg = FakeRegistry {
            token: "tok-geode".into(),
            scope: "repository:library/big:pull".into(),
            ..FakeRegistry::default()
        };
        reg.manifests
            .insert("library/big/1".into(), (OCI_MANIFEST.into(), manifest));
        reg.blobs.insert(sha256_digest(&config), config);
        reg.blobs.insert(sha256_digest(&tar), tar.clone());
        reg.held = Some((sha256_digest(&tar), held));
        reg
    })
    .await;
    let (_dir, store) = new_store();
    let reference = Reference::parse(&format!("127.0.0.1:{}/library/big:1", reg.port)).unwrap();
    let pulling = store.clone();
    let pull = tokio::spawn(async move {
        let opts = PullOptions {
            docker_config: Some(PathBuf::from("/nonexistent/docker-config.json")),
            ..PullOptions::default()
        };
        pulling.pull(&reference, &opts).await
    });
    // The first file, whole, in the layer's staging folder, while the second half is held.
    let unpacked_first = || {
        fs::read_dir(store.root().join("tmp"))
            .unwrap()
            .flatten()
            .any(|e| fs::metadata(e.path().join("fs/first")).is_ok_and(|m| m.len() == 256 * 1024))
    };
    let started = std::time::Instant::now();
    while !unpacked_first() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "nothing of the layer was unpacked while its download was held"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(!pull.is_finished(), "the download was held");
    release.notify_one();
    let image = pull.await.unwrap().unwrap();
    assert_eq!(fs::read(image.layers[0].join("second")).unwrap(), second);
    assert!(tmp_is_empty(&store));
}
