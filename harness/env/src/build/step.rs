//! One build step in a sandbox of its own: the image so far as its lower layers, the step's
//! layer as its upper, with the host's CA bundle for downloads; and the export of another
//! stage's files for a `COPY --from`.
//!
//! What the sandbox itself leaves in the upper layer (mount points, bound-over files) is
//! removed before the layer is kept, so a step's layer holds only what the step did.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{empty_layer, image_error, io, log};
use crate::cgroup::Limits;
use crate::dockerfile::{self, Instruction, Step};
use crate::image::ImageStore;
use crate::protocol::{Bind, Network};
use crate::sandbox::{Launch, SandboxBackend};
use crate::steps::{Builder, step_name};
use crate::{EnvError, EnvironmentSpec, GroupNetwork, ImageRoot};

/// Run one RUN or COPY step in a sandbox over `lower` and keep its upper as layer `id`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn run_step(
    spec: &EnvironmentSpec,
    backend: &SandboxBackend,
    store: &ImageStore,
    lower: &[PathBuf],
    builder: &mut Builder<'_>,
    step: &Step,
    from_layers: Option<&[PathBuf]>,
    id: &str,
) -> Result<PathBuf, EnvError> {
    let tmp = store.temp_dir().map_err(image_error)?;
    let result = async {
        let exported = match (from_layers, &step.instruction) {
            (Some(layers), Instruction::Copy(copy)) => {
                let sources: Vec<String> = copy.sources.iter().map(|s| builder.expand(s)).collect();
                Some(export(backend, layers, &sources, &tmp.join("export"), step).await?)
            }
            _ => None,
        };
        let dir = tmp.join("step");
        let handle = backend
            .launch(Launch {
                dir: dir.clone(),
                root: ImageRoot::Layers(nonempty(store, lower)?),
                workdir: builder.state.workdir.clone(),
                env: build_env(),
                user: None,
                // A namespace of its own with outbound NAT, fenced off the host as a trial's
                // is: a task author's RUN step used to share the host's network namespace
                // (its loopback services and abstract unix sockets).
                network: Network::Private,
                allowed: Vec::new(),
                limits: Limits::default(),
                binds: build_binds(),
                verifier_logs: None,
                disk_mb: None,
                remove_dir: false,
                group: GroupNetwork::default(),
            })
            .await?;
        let outcome = builder.execute(&handle, step, exported.as_deref()).await;
        let mut handle = handle;
        let shutdown = handle.shutdown().await;
        match &outcome {
            Ok(output) => log(spec, output),
            Err(e) => log(spec, &format!("FAILED: {e}\n")),
        }
        outcome?;
        shutdown?;
        let upper = dir.join("upper");
        clean_layer(&upper);
        store.adopt_layer(id, &upper).map_err(image_error)
    }
    .await;
    let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(tmp)).await;
    result
}

fn nonempty(store: &ImageStore, lower: &[PathBuf]) -> Result<Vec<PathBuf>, EnvError> {
    if lower.is_empty() {
        Ok(vec![empty_layer(store)?])
    } else {
        Ok(lower.to_vec())
    }
}

/// Copy `sources` (absolute paths of the other stage or image) out of a sandbox of `layers`
/// into `out` on the host, keeping their paths: `COPY --from` then copies from there.
async fn export(
    backend: &SandboxBackend,
    layers: &[PathBuf],
    sources: &[String],
    out: &Path,
    step: &Step,
) -> Result<PathBuf, EnvError> {
    const AT: &str = "/.geode-export";
    std::fs::create_dir_all(out).map_err(io(format!("create {}", out.display())))?;
    let handle = backend
        .launch(Launch {
            dir: out.with_extension("sandbox"),
            root: ImageRoot::Layers(layers.to_vec()),
            workdir: "/".into(),
            env: Vec::new(),
            user: None,
            network: Network::None,
            allowed: Vec::new(),
            limits: Limits::default(),
            binds: vec![Bind {
                host: out.to_path_buf(),
                inside: AT.into(),
                read_only: false,
                on_disk: false,
            }],
            verifier_logs: None,
            disk_mb: None,
            remove_dir: true,
            group: GroupNetwork::default(),
        })
        .await?;
    // Patterns stay unquoted so the shell expands them, as docker matches them.
    let words: Vec<String> = sources
        .iter()
        .map(|s| {
            let rel = format!("./{}", s.trim_start_matches('/'));
            if rel.contains(['*', '?', '[']) {
                rel
            } else {
                dockerfile::shell_quote(&rel)
            }
        })
        .collect();
    let command = format!("cd / && cp -a --parents -- {} {AT}/", words.join(" "));
    let req = geode_runtime::tools::workspace::ExecRequest {
        command: command.clone(),
        cwd: Some(PathBuf::from("/")),
        timeout: Duration::from_secs(600),
        output_cap: 64 << 10,
        env: Vec::new(),
    };
    let result = handle
        .exec_as(
            req,
            Some(vec!["/bin/sh".into(), "-c".into()]),
            Some("0".into()),
            tokio_util::sync::CancellationToken::new(),
        )
        .await;
    let mut handle = handle;
    let _ = handle.shutdown().await;
    let result = result?;
    if result.exit_code != Some(0) {
        return Err(EnvError::SetupFailed {
            step: step_name(step),
            message: format!(
                "copying {} out of the other stage failed: {}{}",
                sources.join(" "),
                result.stdout,
                result.stderr
            ),
        });
    }
    Ok(out.to_path_buf())
}

/// The host's CA bundle, for a build step's downloads. A machine whose egress re-signs TLS (a
/// proxy with its own CA, as here) would otherwise fail every `pip install` and `curl https://`
/// of a build, as `docker build` on it would. The bundle is bound at a path of its own (the
/// image's `/etc/ssl` stays the image's, so `apt-get install ca-certificates` still works) and
/// named by the variables the usual clients read; no layer keeps it.
const HOST_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
const BUILD_CA_AT: &str = "/.geode-host-ca.crt";

fn build_binds() -> Vec<Bind> {
    if Path::new(HOST_CA_BUNDLE).is_file() {
        vec![Bind {
            host: PathBuf::from(HOST_CA_BUNDLE),
            inside: BUILD_CA_AT.into(),
            read_only: true,
            on_disk: false,
        }]
    } else {
        Vec::new()
    }
}

fn build_env() -> Vec<(String, String)> {
    if !Path::new(HOST_CA_BUNDLE).is_file() {
        return Vec::new();
    }
    ca_variables(BUILD_CA_AT)
}

/// The variables through which the usual clients (OpenSSL, pip, requests, curl, git, node, uv)
/// take a CA bundle, each naming `bundle`.
pub(crate) fn ca_variables(bundle: &str) -> Vec<(String, String)> {
    [
        "SSL_CERT_FILE",
        "PIP_CERT",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
        "NODE_EXTRA_CA_CERTS",
    ]
    .iter()
    .map(|k| (k.to_string(), bundle.to_string()))
    .collect()
}

/// Remove what the sandbox itself put into a step's upper layer: the inbox's mount point and
/// the empty files that `/etc/hosts`, `/etc/resolv.conf` and the CA bundle were bound over.
pub(crate) fn clean_layer(upper: &Path) {
    let _ = std::fs::remove_dir(upper.join(crate::protocol::INBOX.trim_start_matches('/')));
    for file in [
        "etc/hosts",
        "etc/resolv.conf",
        BUILD_CA_AT.trim_start_matches('/'),
    ] {
        let path = upper.join(file);
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file() && m.len() == 0) {
            let _ = std::fs::remove_file(path);
        }
    }
}
