//! Real image infrastructure for the tests: the machine-wide test image store (a Debian base
//! bootstrapped from the archive once per machine, outside the repository), Debian's
//! `docker-registry` (the CNCF distribution registry) on a free loopback port, and a push of
//! stored images into it through the OCI distribution API.

#![allow(dead_code)]

use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
            "{REGISTRY_BIN} is missing: `apt-get install docker-registry` (.ci/run installs it)"
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

/// Tar one unpacked layer (overlayfs form) back into the OCI form: a 0:0 character device is
/// the whiteout `.wh.NAME`, an opaque folder gets `.wh..wh..opq`.
pub fn layer_tar(dir: &Path) -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    tar.follow_symlinks(false);
    let mut entries: Vec<_> = walkdir::WalkDir::new(dir)
        .min_depth(1)
        .sort_by_file_name()
        .into_iter()
        .map(|e| e.unwrap())
        .collect();
    entries.sort_by(|a, b| a.path().cmp(b.path()));
    for entry in entries {
        let rel = entry.path().strip_prefix(dir).unwrap();
        let meta = entry.path().symlink_metadata().unwrap();
        if meta.file_type().is_char_device() && meta.rdev() == 0 {
            let name = rel.file_name().unwrap().to_string_lossy().into_owned();
            let wh = rel.with_file_name(format!(".wh.{name}"));
            let mut header = tar::Header::new_gnu();
            header.set_size(0);
            header.set_mode(0o644);
            header.set_entry_type(tar::EntryType::Regular);
            tar.append_data(&mut header, wh, std::io::empty()).unwrap();
            continue;
        }
        tar.append_path_with_name(entry.path(), rel).unwrap();
        if meta.is_dir()
            && xattr::get(entry.path(), "trusted.overlay.opaque")
                .ok()
                .flatten()
                .is_some_and(|v| v == b"y")
        {
            let mut header = tar::Header::new_gnu();
            header.set_size(0);
            header.set_mode(0o644);
            header.set_entry_type(tar::EntryType::Regular);
            tar.append_data(&mut header, rel.join(".wh..wh..opq"), std::io::empty())
                .unwrap();
        }
    }
    tar.into_inner().unwrap()
}

/// Blobs for `layers` (unpacked dirs, bottom first) with an image config of `env`,
/// `working_dir` and `user`.
pub fn image_blobs(
    layers: &[PathBuf],
    env: &[(String, String)],
    working_dir: Option<&str>,
    user: Option<&str>,
) -> ImageBlobs {
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
            let tar = layer_tar(layer);
            let diff_id = digest(&tar);
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(&tar).unwrap();
            let gz = gz.finish().unwrap();
            let packed = (digest(&gz), gz, diff_id);
            PACKED.lock().unwrap().push((layer.clone(), packed.clone()));
            packed
        });
        out.push(packed);
    }
    let env: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": env,
            "WorkingDir": working_dir.unwrap_or(""),
            "User": user.unwrap_or(""),
            "Cmd": ["bash"],
        },
        "rootfs": {
            "type": "layers",
            "diff_ids": out.iter().map(|(_, _, d)| d.clone()).collect::<Vec<_>>(),
        },
    });
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

    /// The same image as a `docker save` tarball (manifest.json, config, layer tars).
    pub fn docker_save(&self, file: &Path, repo_tag: &str) {
        let mut tar = tar::Builder::new(std::fs::File::create(file).unwrap());
        let mut add = |name: &str, bytes: &[u8]| {
            let mut header = tar::Header::new_gnu();
            header.set_size(bytes.len() as u64);
            header.set_mode(0o644);
            header.set_entry_type(tar::EntryType::Regular);
            tar.append_data(&mut header, name, bytes).unwrap();
        };
        let config_name = format!("{}.json", self.config_digest.trim_start_matches("sha256:"));
        add(&config_name, &self.config);
        let mut layer_names = Vec::new();
        for (_, gz, diff_id) in &self.layers {
            let mut raw = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut raw)
                .unwrap();
            let name = format!("{}/layer.tar", diff_id.trim_start_matches("sha256:"));
            add(&name, &raw);
            layer_names.push(name);
        }
        let manifest = serde_json::json!([{
            "Config": config_name,
            "RepoTags": [repo_tag],
            "Layers": layer_names,
        }]);
        add("manifest.json", &serde_json::to_vec(&manifest).unwrap());
        tar.finish().unwrap();
    }
}
