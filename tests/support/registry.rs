//! Real image infrastructure for the tests: the machine-wide test image store (a Debian base
//! bootstrapped from the archive once per machine, outside the repository), Debian's
//! `docker-registry` (the CNCF distribution registry) on a free loopback port, and a push of
//! stored images into it through the OCI distribution API (layers packed by the library's own
//! `layer_tar`, the inverse of unpacking).

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use geode_harness::env::image::{ImageStore, Reference, StoredImage};
use geode_harness::env::{Backend, EnvironmentSpec, NetworkPolicy, SandboxBackend, SandboxConfig};
use sha2::{Digest, Sha256};

/// The test image store, shared by every test and every CI run on this machine, so the Debian
/// bootstrap (a few minutes) happens once. `GEODE_TEST_IMAGES` moves it.
pub fn shared_store() -> PathBuf {
    let dir = std::env::var_os("GEODE_TEST_IMAGES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/geode-test/images"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A `docker-registry` process serving a fresh storage folder on 127.0.0.1.
pub struct Registry {
    child: Child,
    pub addr: String,
    pub storage: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const REGISTRY_BIN: &str = "/usr/bin/docker-registry";

impl Registry {
    pub fn start() -> Registry {
        assert!(
            Path::new(REGISTRY_BIN).exists(),
            "{REGISTRY_BIN} is missing: `apt-get install docker-registry` (scripts/test installs it)"
        );
        let storage = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let config = storage.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n",
                storage.path().join("data").display()
            ),
        )
        .unwrap();
        let child = Command::new(REGISTRY_BIN)
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let registry = Registry {
            child,
            addr,
            storage,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(&registry.addr).is_err() {
            assert!(Instant::now() < deadline, "docker-registry did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        registry
    }

    /// The blob files of the registry's storage (to tamper with).
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.storage
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

/// An image as blobs: gzip layers, a config, a manifest.
pub struct ImageBlobs {
    /// (digest, gzip bytes, diff id) bottom first.
    pub layers: Vec<(String, Vec<u8>, String)>,
    pub config: Vec<u8>,
    pub config_digest: String,
}

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Blobs for `image` (its layers, its config).
pub fn image_blobs(image: &StoredImage) -> ImageBlobs {
    let layers = &image.layers;
    // Tests of one binary push the same base again and again: tar and compress each layer once.
    type Packed = (String, Vec<u8>, String);
    static PACKED: std::sync::Mutex<Vec<(PathBuf, Packed)>> = std::sync::Mutex::new(Vec::new());
    let mut out = Vec::new();
    for layer in layers {
        let known = PACKED
            .lock()
            .unwrap()
            .iter()
            .find(|(p, _)| p == layer)
            .map(|(_, packed)| packed.clone());
        let packed = known.unwrap_or_else(|| {
            let mut tar = Vec::new();
            let diff_id = geode_harness::env::image::layer_tar(layer, &mut tar).unwrap();
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(&tar).unwrap();
            let gz = gz.finish().unwrap();
            let packed = (digest(&gz), gz, diff_id);
            PACKED.lock().unwrap().push((layer.clone(), packed.clone()));
            packed
        });
        out.push(packed);
    }
    let diff_ids: Vec<String> = out.iter().map(|(_, _, d)| d.clone()).collect();
    let config = geode_harness::env::image::image_config(image, &diff_ids);
    let config = serde_json::to_vec(&config).unwrap();
    ImageBlobs {
        config_digest: digest(&config),
        config,
        layers: out,
    }
}

impl ImageBlobs {
    pub fn manifest(&self) -> Vec<u8> {
        let layers: Vec<_> = self
            .layers
            .iter()
            .map(|(d, bytes, _)| {
                serde_json::json!({
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": d,
                    "size": bytes.len(),
                })
            })
            .collect();
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": self.config_digest,
                "size": self.config.len(),
            },
            "layers": layers,
        }))
        .unwrap()
    }

    /// Push through the distribution API (monolithic blob uploads, then the manifest).
    pub async fn push(&self, registry: &str, repo: &str, tag: &str) -> String {
        let http = reqwest::Client::new();
        let mut blobs: Vec<(&str, &[u8])> = vec![(&self.config_digest, &self.config)];
        for (d, bytes, _) in &self.layers {
            blobs.push((d, bytes));
        }
        for (d, bytes) in blobs {
            let start = http
                .post(format!("http://{registry}/v2/{repo}/blobs/uploads/"))
                .send()
                .await
                .unwrap();
            assert_eq!(start.status().as_u16(), 202, "start upload of {d}");
            let location = start.headers()["location"].to_str().unwrap().to_string();
            let url = if location.starts_with("http") {
                location
            } else {
                format!("http://{registry}{location}")
            };
            let sep = if url.contains('?') { '&' } else { '?' };
            let put = http
                .put(format!("{url}{sep}digest={d}"))
                .header("content-type", "application/octet-stream")
                .body(bytes.to_vec())
                .send()
                .await
                .unwrap();
            assert_eq!(put.status().as_u16(), 201, "upload of {d}");
        }
        let manifest = self.manifest();
        let put = http
            .put(format!("http://{registry}/v2/{repo}/manifests/{tag}"))
            .header("content-type", "application/vnd.oci.image.manifest.v1+json")
            .body(manifest.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(put.status().as_u16(), 201, "manifest of {repo}:{tag}");
        digest(&manifest)
    }
}

/// `reference` from the machine-wide test store, bootstrapped there when absent.
pub async fn stored_base(reference: &str) -> StoredImage {
    let state = tempfile::tempdir().unwrap();
    let backend = SandboxBackend::new(SandboxConfig::new(
        env!("CARGO_BIN_EXE_geode"),
        state.path(),
        shared_store(),
    ))
    .unwrap();
    let spec = EnvironmentSpec {
        task_name: "test/base".into(),
        environment_dir: PathBuf::from("/nonexistent"),
        build: None,
        network: NetworkPolicy::Off,
        cpus: None,
        memory_mb: None,
        pids_max: None,
        storage_mb: None,
        build_timeout: Duration::from_secs(1200),
        time_limits: None,
        env: Vec::new(),
        docker_image: Some(reference.into()),
        build_args: Vec::new(),
        build_log: None,
        group: Default::default(),
    };
    backend.prepare(&spec).await.unwrap();
    ImageStore::open(shared_store())
        .unwrap()
        .get(&Reference::parse(reference).unwrap())
        .unwrap()
        .expect("the base is in the store")
}
