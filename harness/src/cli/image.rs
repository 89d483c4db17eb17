//! `geode image`: the image store by hand: pull, load (air-gapped), list, remove, prune, and
//! `stage`: everything a pack needs, made into a store that nodes then only read.

use super::exit::Exit;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Subcommand;
use geode_harness::env::image::{ImageError, ImageStore, PullOptions, Reference, StoredImage};

use super::backends::ImageSettings;

#[derive(Debug, Subcommand)]
pub enum ImageCommand {
    /// Pull an image from its registry (through the configured mirrors first), else under a
    /// registry alias of its name (`[images] aliases`, ECR Public's `docker/library` for
    /// Docker Hub's official images).
    Pull {
        /// The image reference (`debian:bookworm-slim`, `REGISTRY/NAME@sha256:...`).
        reference: String,
    },
    /// Load a `docker save` tarball or an OCI image layout (directory or tar), offline.
    Load {
        /// A `docker save` tarball, or an OCI image layout (a folder or its tar).
        file: PathBuf,
    },
    /// Write an image as a `docker save` tarball (for `geode image load` or `docker load`
    /// elsewhere).
    Save {
        /// The stored image to write.
        reference: String,
        /// The tarball to write (never replaced).
        file: PathBuf,
    },
    /// List the images in the store.
    Ls {
        /// One JSON object per image.
        #[arg(long)]
        json: bool,
    },
    /// Forget an image (its layers go at the next prune).
    Rm {
        /// The image reference to forget.
        reference: String,
    },
    /// Delete layers and blobs that no recorded image uses (build-step layers included).
    Prune,
    /// Make everything a pack's tasks need into the store: base images pulled, loaded or
    /// bootstrapped, Dockerfiles built, compose sidecars and separate verifiers too, and
    /// every layer's first-use preparation done, so nodes can use the store read-only
    /// (`GEODE_IMAGES_READ_ONLY=1`) without network. Idempotent.
    Stage {
        /// The pack (a folder of tasks, or one task).
        pack: PathBuf,
        /// The store to fill (default: `GEODE_IMAGES`, else `[images] store`).
        #[arg(long)]
        store: Option<PathBuf>,
        /// One JSON object per environment staged, instead of a line.
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(cmd: ImageCommand) -> anyhow::Result<Exit> {
    let settings = ImageSettings::load()?;
    // A read-only store (`[images] read_only`) is opened so: listing and saving work, every
    // change is refused.
    let open = || {
        if settings.read_only {
            ImageStore::open_read_only(&settings.store)
        } else {
            ImageStore::open(&settings.store)
        }
        .with_context(|| format!("image store {}", settings.store.display()))
    };
    match cmd {
        ImageCommand::Stage { pack, store, json } => {
            let store = store.unwrap_or_else(|| settings.store.clone());
            return stage(&pack, &store, json).await;
        }
        ImageCommand::Pull { reference } => {
            let store = open()?;
            let reference = Reference::parse(&reference)?;
            let opts = PullOptions {
                mirrors: settings.mirrors.clone(),
                docker_config: None,
                progress: Some(Arc::new(|line: &str| say!("geode: {line}"))),
            };
            // The name asked for, then its registry aliases: the first that serves it wins;
            // each failure but the last is told as it happens, the last is the error.
            let names: Vec<Reference> = std::iter::once(reference.clone())
                .chain(settings.aliases.alternatives(&reference))
                .collect();
            for (i, name) in names.iter().enumerate() {
                match store.pull(name, &opts).await {
                    Ok(image) => {
                        println!("{}", line(&image));
                        return Ok(Exit::Success);
                    }
                    Err(e) if i + 1 < names.len() && !wrong_bytes(&e) => {
                        say!("geode: {name}: {e}; trying {}", names[i + 1]);
                    }
                    // Wrong bytes from a source are an answer, not an absence.
                    Err(e) => return Err(e.into()),
                }
            }
        }
        ImageCommand::Load { file } => {
            let store = open()?;
            let loaded = tokio::task::spawn_blocking(move || {
                geode_harness::env::image::load_archive(&store, &file)
            })
            .await??;
            for image in &loaded {
                println!("{}", line(image));
            }
        }
        ImageCommand::Save { reference, file } => {
            let store = open()?;
            let parsed = Reference::parse(&reference)?;
            let Some(image) = store.get(&parsed)? else {
                anyhow::bail!("no image {parsed} in the store (geode image ls lists them)");
            };
            let tag = parsed.to_string();
            let tag = tag.strip_prefix("docker.io/").unwrap_or(&tag).to_string();
            let shown = file.display().to_string();
            tokio::task::spawn_blocking(move || {
                geode_harness::env::image::save(&image, &tag, &file)
            })
            .await??;
            println!("saved {parsed} to {shown}");
        }
        ImageCommand::Ls { json } => {
            let store = open()?;
            for image in store.list()? {
                if json {
                    println!("{}", serde_json::to_string(&image)?);
                } else {
                    println!("{}", line(&image));
                }
            }
        }
        ImageCommand::Rm { reference } => {
            let store = open()?;
            let reference = Reference::parse(&reference)?;
            if !store.remove(&reference)? {
                say!("geode: no image {reference} in the store");
                return Ok(Exit::Failed);
            }
            println!("removed {reference}");
        }
        ImageCommand::Prune => {
            let store = open()?;
            let freed = tokio::task::spawn_blocking(move || store.prune(&[])).await??;
            println!("freed {:.1} MB", freed as f64 / 1e6);
        }
    }
    Ok(Exit::Success)
}

/// `geode image stage`: one line (or JSON object) per environment as it is staged, then the
/// totals on standard error; `Findings` when any environment could not be staged.
async fn stage(
    pack: &std::path::Path,
    store: &std::path::Path,
    json: bool,
) -> anyhow::Result<Exit> {
    use geode_harness::rollout::stage::{StagedImage, stage_tasks, summary};
    let loaded = geode_harness::pack::TaskPack::load(pack)
        .with_context(|| format!("loading the pack {}", pack.display()))?;
    for broken in &loaded.broken {
        say!("geode: broken task, not staged: {broken}");
    }
    std::fs::create_dir_all(store).with_context(|| format!("creating {}", store.display()))?;
    let backend = super::backends::stage_sandbox(store)?;
    say!(
        "geode: staging {} tasks of {} into {}",
        loaded.tasks.len(),
        pack.display(),
        store.display()
    );
    let told = move |s: &StagedImage| {
        if json {
            match serde_json::to_string(s) {
                Ok(line) => println!("{line}"),
                Err(e) => say!("geode: {}: {e}", s.task),
            }
        } else {
            match &s.error {
                None => println!(
                    "{}  {}  from {} ({})  {} layers, {} new, {} shifted  {:.1} s",
                    s.task, s.role, s.from, s.source, s.layers, s.new_layers, s.shifted, s.seconds
                ),
                Some(e) => println!("{}  {}  FAILED: {e}", s.task, s.role),
            }
        }
    };
    let staged = stage_tasks(&loaded.tasks, backend.as_ref(), &told).await;
    say!("geode: {}", summary(&staged));
    let failed = staged.iter().any(|s| s.error.is_some()) || !loaded.broken.is_empty();
    Ok(if failed {
        Exit::Findings
    } else {
        Exit::Success
    })
}

fn line(image: &StoredImage) -> String {
    format!(
        "{}  {}  {} layers  {:.1} MB  {}",
        image.reference,
        &image.digest,
        image.layers.len(),
        image.size_bytes as f64 / 1e6,
        geode_harness::env::describe_source(&image.source),
    )
}

/// A source that served bytes other than the digest promised: never a reason to try another.
fn wrong_bytes(e: &ImageError) -> bool {
    matches!(
        e,
        ImageError::DigestMismatch { .. } | ImageError::BadManifest { .. }
    )
}
