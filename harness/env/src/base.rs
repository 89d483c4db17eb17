//! Base images: where the image a task names comes from.
//!
//! A reference is asked for under each of its names: the one written, then its registry
//! aliases ([`super::image::Aliases`]: ECR Public's `docker/library` is Docker Hub's official
//! images). In order: the image store (pulled, loaded or bootstrapped before), the mirrors, the
//! registries themselves, and, only for Debian-family references that no source can serve
//! here, an equivalent built from the Debian archive: `debian:SUITE[-slim]` by driving
//! the host's apt into a new root ([`super::bootstrap`]), `python:3.X[-slim]` as that base plus
//! Debian's Python where the suite's Python is 3.X. Such an image is recorded as bootstrapped
//! and every result that uses it says so. A reference pinned by digest is honoured exactly:
//! whichever source serves it is verified against the pin, and a stand-in (which is not the
//! pinned image) is used only under `[images] stand_in_pinned = true`, each result saying the
//! pin was not honoured. Anything else that cannot be had is [`EnvError::Unsupported`] naming
//! the reference and the command that would load it: never a silent stand-in.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::bootstrap::{self, DebianSuite};
use super::build::{self, Built, clean_layer, empty_layer, image_error};
use super::cgroup::Limits;
use super::dockerfile;
use super::image::{ImageConfig, ImageSource, ImageStore, PullOptions, Reference, StoredImage};
use super::protocol::Network;
use super::sandbox::{Launch, SandboxBackend};
use super::{
    BaseOrigin, DigestPin, EnvError, EnvironmentSpec, GroupNetwork, ImageRoot, NetworkPolicy,
};

/// How long the finishing run of a Debian bootstrap (dpkg configuring ~100 packages) may take.
const FINISH_TIMEOUT: Duration = Duration::from_secs(1200);

/// What results say of an image's origin.
pub fn describe(source: &ImageSource) -> String {
    match source {
        ImageSource::Pulled { registry_url } => format!("pulled from {registry_url}"),
        ImageSource::Loaded { file } => format!("loaded from {}", file.display()),
        ImageSource::Bootstrapped { what } => what.clone(),
        ImageSource::Built => "built locally".into(),
    }
}

/// The base images of one backend's builds.
pub(crate) struct Bases<'a> {
    backend: &'a SandboxBackend,
    store: ImageStore,
    /// The task whose image is prepared, for the messages of a read-only store.
    task: String,
}

impl<'a> Bases<'a> {
    pub(crate) fn open(backend: &'a SandboxBackend, task: &str) -> Result<Self, EnvError> {
        let config = backend.config();
        let store = match &config.parent_image_store {
            _ if config.read_only_store => ImageStore::open_read_only(config.image_store.clone()),
            Some(parent) => ImageStore::open_over(config.image_store.clone(), parent.clone()),
            None => ImageStore::open(config.image_store.clone()),
        }
        .map_err(image_error)?;
        Ok(Bases {
            backend,
            store,
            task: task.to_string(),
        })
    }

    /// On a read-only store, what is missing is an error at once, naming the task, what it
    /// lacks and the command that stages it: a node without network would otherwise spend
    /// minutes in pulls and apt's DNS failures before the same end.
    pub(crate) fn refuse_if_read_only(&self, step: &str, missing: &str) -> Result<(), EnvError> {
        if !self.store.is_read_only() {
            return Ok(());
        }
        Err(EnvError::SetupFailed {
            step: step.to_string(),
            message: format!(
                "task {}: {missing} is not in the read-only image store {}; nothing is pulled, \
                 bootstrapped or built on a read-only store: stage the pack into it first, \
                 where the network is: GEODE_IMAGES={} geode image stage PACK",
                self.task,
                self.store.root().display(),
                self.store.root().display()
            ),
        })
    }

    pub(crate) fn store(&self) -> &ImageStore {
        &self.store
    }

    fn progress(&self, line: &str) {
        (self.backend.config().progress.0)(line);
    }

    /// The image `raw` names, as a stage base: asked for under each of its names (the named
    /// one, then its registry aliases) in the store, then from the mirrors, then from the
    /// registries themselves; only then, for a Debian-family name, a bootstrap standing in.
    pub(crate) async fn resolve(&self, raw: &str) -> Result<Built, EnvError> {
        let reference = Reference::parse(raw).map_err(|e| EnvError::SetupFailed {
            step: format!("FROM {raw}"),
            message: e.to_string(),
        })?;
        let config = self.backend.config();
        let names: Vec<Reference> = std::iter::once(reference.clone())
            .chain(config.aliases.alternatives(&reference))
            .collect();
        let origin = |name: &Reference, image: &StoredImage| BaseOrigin {
            alias: (name != &reference).then(|| name.to_string()),
            mirror: mirror_of(&config.mirrors, name, &image.source),
            stand_in: matches!(image.source, ImageSource::Bootstrapped { .. }),
            pin: reference.digest().map(|digest| DigestPin {
                digest: digest.to_string(),
                honoured: true,
            }),
        };
        for name in &names {
            if let Some(image) = self.store.get(name).map_err(image_error)? {
                let origin = origin(name, &image);
                return Ok(Built::from_image(
                    raw,
                    &image,
                    stand_in_notes(&image),
                    origin,
                ));
            }
        }
        self.refuse_if_read_only(&format!("FROM {raw}"), &format!("the image {raw}"))?;
        let mut failures = Vec::new();
        // Every name's mirror before any registry: where Docker Hub is out of reach, its
        // mirror is what serves an alias of its names.
        for with_registry in [false, true] {
            for name in &names {
                if !with_registry && !config.mirrors.contains_key(name.registry()) {
                    continue;
                }
                let opts = PullOptions {
                    mirrors: if with_registry {
                        Default::default()
                    } else {
                        config.mirrors.clone()
                    },
                    docker_config: None,
                    progress: Some(Arc::clone(&config.progress.0)),
                };
                match self.store.pull_via(name, &opts, with_registry).await {
                    Ok(image) => {
                        let origin = origin(name, &image);
                        return Ok(Built::from_image(raw, &image, Vec::new(), origin));
                    }
                    // A source that served the wrong bytes is not "unavailable": never fall
                    // back.
                    Err(
                        e @ (super::image::ImageError::DigestMismatch { .. }
                        | super::image::ImageError::BadManifest { .. }),
                    ) => {
                        return Err(EnvError::SetupFailed {
                            step: format!("pull {name}"),
                            message: e.to_string(),
                        });
                    }
                    Err(e) => failures.push(e.to_string()),
                }
            }
        }
        let failures = failures.join("; ");
        let Some((name, kind)) = names
            .iter()
            .find_map(|name| stand_in(name).map(|kind| (name, kind)))
        else {
            return Err(EnvError::Unsupported(format!(
                "image {raw} cannot be had: {failures}{}. Load it with `geode image load FILE` \
                 (a `docker save` tarball or an OCI layout), or set a registry mirror in \
                 [images] mirrors",
                names
                    .iter()
                    .map(unbootstrappable_hint)
                    .find(|h| !h.is_empty())
                    .unwrap_or_default()
            )));
        };
        let pin = match reference.digest() {
            None => None,
            Some(digest) if config.stand_in_pinned => Some(DigestPin {
                digest: digest.to_string(),
                honoured: false,
            }),
            Some(digest) => {
                return Err(EnvError::Unsupported(format!(
                    "image {raw} is pinned by digest, and no source serves {digest} \
                     ({failures}). A bootstrap from the Debian archive could stand in for {}, \
                     but it is not the pinned image: set [images] stand_in_pinned = true to \
                     accept it (every result says so), or load the image with `geode image \
                     load FILE`",
                    name.without_digest()
                )));
            }
        };
        // A stand-in is filed under the name it stands in for, never under a digest it is not.
        let unpinned = name.without_digest();
        let image = match kind {
            StandIn::Debian(suite) => self.bootstrap_debian(&unpinned, &suite).await?,
            StandIn::Python {
                suite,
                version,
                extras,
                workdir,
            } => {
                self.bootstrap_python(&unpinned, &suite, &version, extras, workdir)
                    .await?
            }
        };
        let mut notes = stand_in_notes(&image);
        if let Some(pin) = &pin {
            notes.push(format!(
                "{raw}: the digest pin {} was not honoured: no source serves it, and \
                 [images] stand_in_pinned let a stand-in ({}) take its place",
                pin.digest,
                describe(&image.source)
            ));
        }
        let origin = BaseOrigin {
            alias: (name != &reference).then(|| unpinned.to_string()),
            mirror: None,
            stand_in: true,
            pin,
        };
        Ok(Built::from_image(raw, &image, notes, origin))
    }

    /// One bootstrap per suite at a time across processes; the loser of a race finds the
    /// winner's image.
    async fn exclusive(&self, name: &str) -> Result<nix::fcntl::Flock<std::fs::File>, EnvError> {
        let path = self.store.root().join(format!("{name}.lock"));
        tokio::task::spawn_blocking(move || {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .map_err(|e| EnvError::Io {
                    context: format!("open {}", path.display()),
                    source: e,
                })?;
            nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).map_err(
                |(_, errno)| EnvError::Io {
                    context: format!("lock {}", path.display()),
                    source: std::io::Error::from(errno),
                },
            )
        })
        .await
        .map_err(|e| EnvError::Lost(format!("lock task: {e}")))?
    }

    async fn bootstrap_debian(
        &self,
        reference: &Reference,
        suite: &DebianSuite,
    ) -> Result<StoredImage, EnvError> {
        let _lock = self
            .exclusive(&format!("bootstrap-{}", suite.suite))
            .await?;
        if let Some(image) = self.store.get(reference).map_err(image_error)? {
            return Ok(image);
        }
        let what = format!("bootstrapped from the Debian archive ({})", suite.suite);
        let id = build_id(&["debian-bootstrap", &suite.suite, &suite.mirror]);
        let layer = match self.store.layer(&id) {
            Some(layer) => layer,
            None => {
                self.progress(&format!(
                    "image {reference}: not in the store and no registry serves it; \
                     bootstrapping Debian {} from {} (first run only: a few minutes)",
                    suite.suite, suite.mirror
                ));
                self.bootstrap_layer(suite, &id).await?
            }
        };
        let config = ImageConfig {
            env: vec![("PATH".into(), super::sandbox::DEFAULT_PATH.into())],
            ..ImageConfig::default()
        };
        self.record_bootstrapped(reference, vec![layer], config, what)
    }

    /// Stage the packages on the host, then let dpkg configure them inside a sandbox whose
    /// writable layer is the new root itself (over an empty lower layer), so the result is one
    /// layer with nothing left of the set-up.
    async fn bootstrap_layer(&self, suite: &DebianSuite, id: &str) -> Result<PathBuf, EnvError> {
        let tmp = self.store.temp_dir().map_err(image_error)?;
        let result = async {
            let rootfs = tmp.join("upper");
            std::fs::create_dir_all(&rootfs).map_err(|e| EnvError::Io {
                context: format!("create {}", rootfs.display()),
                source: e,
            })?;
            let progress = Arc::clone(&self.backend.config().progress.0);
            let staged = bootstrap::stage(suite, &rootfs, &|line: &str| progress(line))
                .await
                .map_err(|e| EnvError::SetupFailed {
                    step: format!("bootstrap Debian {}", suite.suite),
                    message: e.to_string(),
                })?;
            self.progress(&format!(
                "bootstrap: configuring {} packages",
                staged.packages.len()
            ));
            let handle = self
                .backend
                .launch(Launch {
                    dir: tmp.clone(),
                    root: ImageRoot::Layers(vec![empty_layer(&self.store)?]),
                    workdir: "/".into(),
                    env: vec![("DEBIAN_FRONTEND".into(), "noninteractive".into())],
                    user: None,
                    network: Network::None,
                    allowed: Vec::new(),
                    limits: Limits::default(),
                    binds: Vec::new(),
                    verifier_logs: None,
                    disk_mb: None,
                    remove_dir: false,
                    group: GroupNetwork::default(),
                })
                .await?;
            let req = geode_runtime::tools::workspace::ExecRequest {
                command: staged.finish_script.clone(),
                cwd: Some(PathBuf::from("/")),
                timeout: FINISH_TIMEOUT,
                output_cap: 1 << 20,
                env: Vec::new(),
            };
            let finished = handle
                .exec_as(
                    req,
                    Some(vec!["/bin/sh".into()]),
                    Some("0".into()),
                    tokio_util::sync::CancellationToken::new(),
                )
                .await;
            let mut handle = handle;
            let shutdown = handle.shutdown().await;
            let finished = finished?;
            shutdown?;
            if finished.exit_code != Some(0) {
                let mut tail = format!("{}{}", finished.stdout, finished.stderr);
                if tail.len() > 3000 {
                    let cut = tail.len() - 3000;
                    let cut = (cut..tail.len())
                        .find(|&i| tail.is_char_boundary(i))
                        .unwrap_or(cut);
                    tail = tail.split_off(cut);
                }
                return Err(EnvError::SetupFailed {
                    step: format!("bootstrap Debian {}: finishing the install", suite.suite),
                    message: format!("exit {:?}: {tail}", finished.exit_code),
                });
            }
            clean_layer(&rootfs);
            self.store.adopt_layer(id, &rootfs).map_err(image_error)
        }
        .await;
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(tmp)).await;
        result
    }

    /// Debian's own Python over the bootstrapped base, made to behave like the official
    /// `python` images where tasks notice: `python` and `pip` on PATH, pip installing
    /// system-wide (no EXTERNALLY-MANAGED marker), `PYTHON_VERSION` and `LANG=C.UTF-8` set,
    /// and the working folder the original sets, if any.
    async fn bootstrap_python(
        &self,
        reference: &Reference,
        suite: &DebianSuite,
        version: &str,
        extras: &str,
        workdir: Option<&str>,
    ) -> Result<StoredImage, EnvError> {
        let debian = format!("debian:{}-slim", suite.suite);
        let base = Box::pin(self.resolve(&debian)).await?;
        let _lock = self
            .exclusive(&format!("bootstrap-python-{version}"))
            .await?;
        if let Some(image) = self.store.get(reference).map_err(image_error)? {
            return Ok(image);
        }
        self.progress(&format!(
            "image {reference}: bootstrapping Python {version} from the Debian archive ({}) \
             (first run only)",
            suite.suite
        ));
        let text = format!(
            "FROM base\n\
            RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
            python-is-python3 python3 python3-pip python3-venv {extras} && rm -rf \
            /var/lib/apt/lists/* && rm -f /usr/lib/python3*/EXTERNALLY-MANAGED{mkdir}\n\
            ENV LANG=C.UTF-8\n{workdir_line}",
            // WORKDIR makes no layer here, so the folder is made by the RUN step, as docker's
            // WORKDIR would make it.
            mkdir = workdir
                .map(|w| format!(" && mkdir -p {w}"))
                .unwrap_or_default(),
            workdir_line = workdir
                .map(|w| format!("WORKDIR {w}\n"))
                .unwrap_or_default()
        );
        let steps = dockerfile::parse(&text)?;
        let spec = EnvironmentSpec {
            task_name: reference.to_string(),
            environment_dir: self.store.root().to_path_buf(),
            build: None,
            network: NetworkPolicy::Public,
            cpus: None,
            memory_mb: None,
            pids_max: None,
            storage_mb: None,
            build_timeout: FINISH_TIMEOUT,
            time_limits: None,
            env: Vec::new(),
            docker_image: None,
            build_args: Vec::new(),
            build_log: None,
            group: Default::default(),
        };
        let deadline = std::time::Instant::now() + FINISH_TIMEOUT;
        let built = build::build_steps(
            self.backend,
            self,
            &spec,
            base,
            &steps[1..],
            &[],
            &[],
            deadline,
        )
        .await?;
        let full = python_version(&built.layers).unwrap_or_else(|| version.to_string());
        let mut env = built.state.final_env();
        env.push(("PYTHON_VERSION".into(), full.clone()));
        let config = ImageConfig {
            env,
            working_dir: workdir.map(str::to_string),
            ..ImageConfig::default()
        };
        let with = if extras.is_empty() {
            String::new()
        } else {
            format!(" with {extras}")
        };
        let what = format!(
            "bootstrapped from the Debian archive ({}, Debian's python3 {full}{with})",
            suite.suite
        );
        self.record_bootstrapped(reference, built.layers, config, what)
    }

    fn record_bootstrapped(
        &self,
        reference: &Reference,
        layers: Vec<PathBuf>,
        config: ImageConfig,
        what: String,
    ) -> Result<StoredImage, EnvError> {
        let image = self
            .store
            .tag_local(
                reference,
                layers,
                config,
                ImageSource::Bootstrapped { what },
            )
            .map_err(image_error)?;
        self.progress(&format!(
            "image {reference}: ready ({})",
            describe(&image.source)
        ));
        Ok(image)
    }
}

/// The mirror (its base URL) `source` names, when it is one of `name`'s registry's mirrors.
fn mirror_of(
    mirrors: &BTreeMap<String, String>,
    name: &Reference,
    source: &ImageSource,
) -> Option<String> {
    let ImageSource::Pulled { registry_url } = source else {
        return None;
    };
    let mirror = mirrors.get(name.registry())?.trim_end_matches('/');
    (mirror == registry_url.trim_end_matches('/')).then(|| mirror.to_string())
}

fn build_id(parts: &[&str]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p.as_bytes());
    }
    hex::encode(h.finalize())
}

/// The version of Debian's `python3` package in the top layer that has a dpkg status file
/// (`3.11.2-1+b1` -> `3.11.2`).
fn python_version(layers: &[PathBuf]) -> Option<String> {
    let status = layers
        .iter()
        .rev()
        .map(|l| l.join("var/lib/dpkg/status"))
        .find(|p| p.is_file())?;
    let text = std::fs::read_to_string(status).ok()?;
    let block = text
        .split("\n\n")
        .find(|b| b.lines().any(|l| l == "Package: python3"))?;
    let version = block.lines().find_map(|l| l.strip_prefix("Version: "))?;
    let upstream = version.split(['-', '+', '~']).next()?;
    Some(upstream.to_string())
}

/// What a bootstrapped image differs in from the official one it stands in for.
/// What `geode tasks check` knows of where images come from: the store, its mirrors, its
/// registry aliases and whether a stand-in may replace a digest-pinned base.
pub struct SourceRules<'a> {
    /// The image store, when one exists yet; `None`: nothing is stored.
    pub store: Option<&'a ImageStore>,
    /// Registry name -> base URL of the mirror tried before it.
    pub mirrors: &'a std::collections::BTreeMap<String, String>,
    /// Other names the same images are published under.
    pub aliases: &'a super::image::Aliases,
    /// A bootstrap may stand in for a digest-pinned base (`[images] stand_in_pinned`).
    pub stand_in_pinned: bool,
}

/// Where `FROM raw` will come from, said before anything is fetched (`geode tasks check`), in
/// the order a build asks: the store's copy under any of its names, else the registries
/// (through a mirror), and what stands in when they cannot be reached, or that nothing can.
pub fn source_plan(raw: &str, rules: &SourceRules<'_>) -> String {
    let reference = match Reference::parse(raw) {
        Ok(reference) => reference,
        Err(e) => return format!("FROM {raw}: refused: {e}"),
    };
    let names: Vec<Reference> = std::iter::once(reference.clone())
        .chain(rules.aliases.alternatives(&reference))
        .collect();
    let also = |name: &Reference| {
        if name == &reference {
            String::new()
        } else {
            format!(" as {name}")
        }
    };
    for name in &names {
        if let Some(image) = rules.store.and_then(|s| s.get(name).ok().flatten()) {
            return format!(
                "{reference}: in the image store{} ({})",
                also(name),
                describe(&image.source)
            );
        }
    }
    let from: Vec<String> = names
        .iter()
        .map(|name| {
            let registry = name.registry();
            match rules.mirrors.get(registry) {
                Some(mirror) => format!("{registry} (mirror {mirror})"),
                None => registry.to_string(),
            }
        })
        .collect();
    let from = format!("pulled from {}", from.join(", then "));
    let Some((name, kind)) = names
        .iter()
        .find_map(|name| stand_in(name).map(|kind| (name, kind)))
    else {
        return format!(
            "{reference}: {from}; nothing stands in for it{}, so the task cannot run without \
             those registries: `geode image load FILE` or an [images] mirror",
            unbootstrappable_hint(&reference)
        );
    };
    let what = match kind {
        StandIn::Debian(suite) => {
            format!("a bootstrap from the Debian archive ({})", suite.suite)
        }
        StandIn::Python {
            suite,
            version,
            workdir,
            ..
        } => format!(
            "Debian {}'s python3 {version}{}",
            suite.suite,
            workdir
                .map(|w| format!(" (WORKDIR {w})"))
                .unwrap_or_default()
        ),
    };
    match reference.digest() {
        Some(digest) if !rules.stand_in_pinned => format!(
            "{reference}: {from}; pinned to {digest}, so {what} would stand in{} only with \
             [images] stand_in_pinned = true: otherwise the task cannot run without those \
             registries",
            also(name)
        ),
        _ => format!(
            "{reference}: {from}; if they cannot be reached, {what} stands in{}, not the \
             official image, and every result says so",
            also(name)
        ),
    }
}

fn stand_in_notes(image: &StoredImage) -> Vec<String> {
    match &image.source {
        ImageSource::Bootstrapped { what } => vec![format!(
            "{}: {what}, not the official image (the slim package set)",
            image.reference
        )],
        _ => Vec::new(),
    }
}

enum StandIn {
    Debian(DebianSuite),
    /// Debian's python3 of `suite`, with `extras` (more Debian packages, space-separated).
    Python {
        suite: DebianSuite,
        version: String,
        extras: &'static str,
        /// The original image's `WORKDIR`, which its tasks rely on without setting their own.
        workdir: Option<&'static str>,
    },
}

/// Terminal-Bench 1's Python base (`ghcr.io/laude-institute/t-bench/python-3-13`, which its
/// tasks name in `FROM`): Python 3.13 on Debian with the tmux and asciinema its harness drives.
/// Pulled from ghcr.io where that is reachable; stood in for otherwise.
const TB1_PYTHON_BASE: &str = "laude-institute/t-bench/python-3-13";

/// The Debian suite whose python3 is each Python version.
const PYTHON_SUITES: &[(&str, &str)] = &[("3.11", "bookworm"), ("3.13", "trixie")];

/// Which references may be bootstrapped here, honestly.
fn stand_in(reference: &Reference) -> Option<StandIn> {
    if reference.registry() == "ghcr.io" && reference.repository() == TB1_PYTHON_BASE {
        return Some(StandIn::Python {
            suite: bootstrap::suite_for("debian", "trixie")?,
            version: "3.13".into(),
            extras: "tmux asciinema",
            workdir: Some("/app"),
        });
    }
    if reference.registry() != "docker.io" {
        return None;
    }
    match reference.repository() {
        "library/debian" => bootstrap::suite_for("debian", reference.tag()?).map(StandIn::Debian),
        "library/python" => {
            let tag = reference.tag()?;
            let (version, rest) = tag.split_once('-').unwrap_or((tag, ""));
            let (_, suite) = PYTHON_SUITES.iter().find(|(v, _)| *v == version)?;
            // `3.11-slim-trixie` names a suite whose python3 is another version.
            let named_suite = rest.trim_start_matches("slim").trim_start_matches('-');
            if !named_suite.is_empty() && named_suite != *suite {
                return None;
            }
            let suite = bootstrap::suite_for("debian", suite)?;
            Some(StandIn::Python {
                suite,
                version: version.to_string(),
                extras: "",
                workdir: None,
            })
        }
        _ => None,
    }
}

fn unbootstrappable_hint(reference: &Reference) -> String {
    match reference.repository() {
        "library/python" => {
            " (a python image is bootstrapped only where a Debian suite's python3 is that \
             version: 3.11 is bookworm's, 3.13 trixie's; other versions have no honest Debian \
             equivalent)"
                .into()
        }
        "library/ubuntu" | "laude-institute/t-bench/ubuntu-24-04" => {
            " (an Ubuntu image: the Ubuntu archive is not reachable from here)".into()
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(raw: &str) -> Option<String> {
        stand_in(&Reference::parse(raw).unwrap()).map(|s| match s {
            StandIn::Debian(suite) => format!("debian {}", suite.suite),
            StandIn::Python {
                suite,
                version,
                extras,
                workdir,
            } => format!(
                "python {version} {} {extras}{}",
                suite.suite,
                workdir.map(|w| format!(" in {w}")).unwrap_or_default()
            )
            .trim_end()
            .to_string(),
        })
    }

    #[test]
    fn only_honest_stand_ins_are_bootstrapped() {
        assert_eq!(
            kind("debian:bookworm-slim").as_deref(),
            Some("debian bookworm")
        );
        assert_eq!(
            kind("python:3.11-slim").as_deref(),
            Some("python 3.11 bookworm")
        );
        assert_eq!(
            kind("python:3.11-slim-bookworm").as_deref(),
            Some("python 3.11 bookworm")
        );
        assert_eq!(kind("python:3.13").as_deref(), Some("python 3.13 trixie"));
        assert_eq!(kind("python:3.12-slim"), None);
        assert_eq!(kind("python:3.11-slim-trixie"), None);
        assert_eq!(kind("ubuntu:24.04"), None);
        assert_eq!(kind("ghcr.io/x/debian:bookworm"), None);
        assert_eq!(
            kind("ghcr.io/laude-institute/t-bench/python-3-13:20250620").as_deref(),
            Some("python 3.13 trixie tmux asciinema in /app")
        );
        assert_eq!(
            kind("ghcr.io/laude-institute/t-bench/ubuntu-24-04:latest"),
            None
        );
    }

    #[test]
    fn a_pull_s_mirror_is_named_only_when_it_is_the_name_s_registry_s_mirror() {
        let mirrors = BTreeMap::from([("docker.io".to_string(), "http://m:5000/".to_string())]);
        let hub = Reference::parse("debian:bookworm-slim").unwrap();
        let ecr = Reference::parse("public.ecr.aws/docker/library/debian:bookworm-slim").unwrap();
        let pulled = |url: &str| ImageSource::Pulled {
            registry_url: url.into(),
        };
        assert_eq!(
            mirror_of(&mirrors, &hub, &pulled("http://m:5000")).as_deref(),
            Some("http://m:5000")
        );
        assert_eq!(
            mirror_of(&mirrors, &hub, &pulled("https://registry-1.docker.io")),
            None
        );
        assert_eq!(mirror_of(&mirrors, &ecr, &pulled("http://m:5000")), None);
        assert_eq!(mirror_of(&mirrors, &hub, &ImageSource::Built), None);
    }

    #[test]
    fn stand_ins_are_found_under_an_alias_of_docker_hub_s_names() {
        let aliases = crate::image::Aliases::default();
        let ecr = Reference::parse("public.ecr.aws/docker/library/debian:bookworm-slim").unwrap();
        assert!(stand_in(&ecr).is_none());
        let names = aliases.alternatives(&ecr);
        assert_eq!(
            kind(&names[0].to_string()).as_deref(),
            Some("debian bookworm")
        );
    }

    #[test]
    fn python_version_comes_from_the_dpkg_status_file() {
        let dir = tempfile::tempdir().unwrap();
        let status = dir.path().join("var/lib/dpkg");
        std::fs::create_dir_all(&status).unwrap();
        std::fs::write(
            status.join("status"),
            "Package: python3-pip\nVersion: 23.0\n\nPackage: python3\nStatus: install ok installed\nVersion: 3.11.2-1+b1\n",
        )
        .unwrap();
        assert_eq!(
            python_version(&[dir.path().to_path_buf()]).as_deref(),
            Some("3.11.2")
        );
    }
}
