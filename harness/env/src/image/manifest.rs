//! The JSON documents of an image — index (manifest list), manifest, config — as registries and
//! OCI layouts hold them, and the few decisions made on them (which media types we take, which
//! platform an index gives us), shared by pulls and loads so both read images the same way.

use std::collections::BTreeMap;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::ImageConfig;
use super::reference::parse_digest;

pub(crate) const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub(crate) const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub(crate) const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub(crate) const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";

/// The `Accept` header of a manifest request: every kind we can read, nothing else (so a
/// registry does not fall back to schema 1).
pub(crate) const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
     application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json, \
     application/vnd.docker.distribution.manifest.v2+json";

/// Manifests and configs are small; a registry (or archive) sending more is not one to trust.
pub(crate) const MAX_DOCUMENT_BYTES: u64 = 16 << 20;

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Descriptor {
    #[serde(default)]
    pub media_type: Option<String>,
    pub digest: String,
    #[serde(default)]
    pub size: Option<u64>,
    #[serde(default)]
    pub platform: Option<Platform>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Platform {
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Index {
    #[serde(default)]
    pub manifests: Vec<Descriptor>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Manifest {
    pub config: Descriptor,
    #[serde(default)]
    pub layers: Vec<Descriptor>,
}

/// A manifest endpoint's (or layout blob's) document.
#[derive(Debug)]
pub(crate) enum Document {
    Index(Index),
    Manifest(Manifest),
}

#[derive(Debug, PartialEq)]
pub(crate) enum Problem {
    /// A media type we do not read (schema 1, an artifact, an encrypted layer).
    Unsupported(String),
    /// Not the JSON its media type promises.
    Bad(String),
}

/// Reads an index or manifest. The body's own `mediaType` (covered by its digest) wins over the
/// `Content-Type` header; a body with neither is recognised by its fields, as OCI allows.
pub(crate) fn parse_document(content_type: Option<&str>, body: &[u8]) -> Result<Document, Problem> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| Problem::Bad(format!("not JSON: {e}")))?;
    if value.get("schemaVersion").and_then(|v| v.as_u64()) == Some(1) {
        return Err(Problem::Unsupported(
            "application/vnd.docker.distribution.manifest.v1+json (schema 1)".into(),
        ));
    }
    let header = content_type
        .map(|ct| ct.split(';').next().unwrap_or(ct).trim().to_string())
        .filter(|ct| ct.starts_with("application/vnd."));
    let media_type = value
        .get("mediaType")
        .and_then(|v| v.as_str())
        .map(str::to_string)
        .or(header);
    let kind = match media_type.as_deref() {
        Some(OCI_INDEX | DOCKER_LIST) => "index",
        Some(OCI_MANIFEST | DOCKER_MANIFEST) => "manifest",
        Some(other) => return Err(Problem::Unsupported(other.to_string())),
        None if value.get("manifests").is_some() => "index",
        None if value.get("config").is_some() => "manifest",
        None => return Err(Problem::Bad("neither an index nor a manifest".into())),
    };
    if kind == "index" {
        serde_json::from_value(value)
            .map(Document::Index)
            .map_err(|e| Problem::Bad(format!("bad index: {e}")))
    } else {
        serde_json::from_value(value)
            .map(Document::Manifest)
            .map_err(|e| Problem::Bad(format!("bad manifest: {e}")))
    }
}

/// The platform a sandbox on this host can run: `linux/amd64` here (variants ignored).
pub(crate) fn host_platform() -> (&'static str, &'static str) {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    };
    ("linux", arch)
}

pub(crate) fn platform_name() -> String {
    let (os, arch) = host_platform();
    format!("{os}/{arch}")
}

/// The index entry for the host's platform; `Err` lists what the index has instead.
pub(crate) fn pick_platform(index: &Index) -> Result<&Descriptor, String> {
    let (os, arch) = host_platform();
    index
        .manifests
        .iter()
        .find(|d| {
            d.platform
                .as_ref()
                .is_some_and(|p| p.os == os && p.architecture == arch)
        })
        .ok_or_else(|| {
            let have: Vec<String> = index
                .manifests
                .iter()
                .map(|d| match &d.platform {
                    Some(p) => format!("{}/{}", p.os, p.architecture),
                    None => "no platform".into(),
                })
                .collect();
            if have.is_empty() {
                "nothing".into()
            } else {
                have.join(", ")
            }
        })
}

/// Layer kinds we unpack. The compression is read from the blob's magic bytes, so this only
/// turns away what is not a filesystem tarball at all (encrypted layers, artifacts).
pub(crate) fn layer_media_type_ok(media_type: Option<&str>) -> bool {
    let Some(mt) = media_type else { return true };
    matches!(
        mt,
        "application/vnd.oci.image.layer.v1.tar"
            | "application/vnd.oci.image.layer.v1.tar+gzip"
            | "application/vnd.oci.image.layer.v1.tar+zstd"
            | "application/vnd.oci.image.layer.nondistributable.v1.tar"
            | "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"
            | "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd"
            | "application/vnd.docker.image.rootfs.diff.tar"
            | "application/vnd.docker.image.rootfs.diff.tar.gzip"
            | "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"
    )
}

/// Config kinds we read: an image config, not an artifact's.
pub(crate) fn config_media_type_ok(media_type: Option<&str>) -> bool {
    matches!(
        media_type,
        None | Some(
            "application/vnd.oci.image.config.v1+json"
                | "application/vnd.docker.container.image.v1+json"
        )
    )
}

#[derive(Debug, Deserialize)]
struct OciConfig {
    #[serde(default)]
    config: Option<ContainerConfig>,
    rootfs: RootFs,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ContainerConfig {
    #[serde(default)]
    env: Option<Vec<String>>,
    #[serde(default)]
    working_dir: Option<String>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    entrypoint: Option<Vec<String>>,
    #[serde(default)]
    cmd: Option<Vec<String>>,
    #[serde(default)]
    shell: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
struct RootFs {
    #[serde(default)]
    diff_ids: Vec<String>,
}

/// An OCI/docker image config: its runtime settings and its layers' diff ids (the digests of
/// the uncompressed layer tars, bottom first).
pub(crate) fn parse_config(bytes: &[u8]) -> Result<(ImageConfig, Vec<String>), String> {
    let parsed: OciConfig =
        serde_json::from_slice(bytes).map_err(|e| format!("bad image config: {e}"))?;
    let c = parsed.config.unwrap_or_default();
    let env = c
        .env
        .unwrap_or_default()
        .into_iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (kv, String::new()),
        })
        .collect();
    let non_empty = |s: Option<String>| s.filter(|s| !s.is_empty());
    let config = ImageConfig {
        env,
        working_dir: non_empty(c.working_dir),
        user: non_empty(c.user),
        entrypoint: c.entrypoint,
        cmd: c.cmd,
        shell: c.shell,
    };
    for id in &parsed.rootfs.diff_ids {
        parse_digest(id).map_err(|e| format!("rootfs.diff_ids: {e}"))?;
    }
    Ok((config, parsed.rootfs.diff_ids))
}

pub(crate) fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The hex of a validated `sha256:` digest.
pub(crate) fn digest_hex(digest: &str) -> Result<&str, String> {
    parse_digest(digest)?;
    Ok(&digest["sha256:".len()..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_classified_by_body_then_header_then_fields() {
        let index = br#"{"schemaVersion":2,"manifests":[]}"#;
        assert!(matches!(
            parse_document(Some(DOCKER_LIST), index),
            Ok(Document::Index(_))
        ));
        assert!(matches!(
            parse_document(None, index),
            Ok(Document::Index(_))
        ));
        let manifest =
            br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
            "config":{"digest":"sha256:00","size":2},"layers":[]}"#;
        // The body's mediaType wins over a wrong header.
        assert!(matches!(
            parse_document(Some(OCI_INDEX), manifest),
            Ok(Document::Manifest(_))
        ));
        let schema1 = br#"{"schemaVersion":1,"name":"x"}"#;
        assert!(matches!(
            parse_document(None, schema1),
            Err(Problem::Unsupported(_))
        ));
        let artifact =
            br#"{"mediaType":"application/vnd.cncf.helm.chart","config":{"digest":"x"}}"#;
        assert_eq!(
            parse_document(None, artifact).unwrap_err(),
            Problem::Unsupported("application/vnd.cncf.helm.chart".into())
        );
        assert!(matches!(parse_document(None, b"{}"), Err(Problem::Bad(_))));
    }

    #[test]
    fn config_gives_runtime_settings_and_diff_ids() {
        let id = format!("sha256:{}", "a".repeat(64));
        let json = format!(
            r#"{{"architecture":"amd64","os":"linux","config":{{"Env":["PATH=/usr/bin","EMPTY=","A=b=c"],
            "WorkingDir":"/app","User":"","Cmd":["bash"],"Entrypoint":null}},"rootfs":{{"type":"layers","diff_ids":["{id}"]}}}}"#
        );
        let (config, ids) = parse_config(json.as_bytes()).unwrap();
        assert_eq!(
            config.env,
            vec![
                ("PATH".to_string(), "/usr/bin".to_string()),
                ("EMPTY".to_string(), String::new()),
                ("A".to_string(), "b=c".to_string())
            ]
        );
        assert_eq!(config.working_dir.as_deref(), Some("/app"));
        assert_eq!(config.user, None);
        assert_eq!(config.cmd, Some(vec!["bash".to_string()]));
        assert_eq!(config.entrypoint, None);
        assert_eq!(ids, vec![id]);
        assert!(parse_config(br#"{"rootfs":{"diff_ids":["sha256:zz"]}}"#).is_err());
    }
}
