//! `geode image`: the image store by hand: pull, load (air-gapped), list, remove, prune.

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
}

pub async fn run(cmd: ImageCommand) -> anyhow::Result<Exit> {
    let settings = ImageSettings::load()?;
    let store = ImageStore::open(&settings.store)
        .with_context(|| format!("image store {}", settings.store.display()))?;
    match cmd {
        ImageCommand::Pull { reference } => {
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
            let loaded = tokio::task::spawn_blocking(move || {
                geode_harness::env::image::load_archive(&store, &file)
            })
            .await??;
            for image in &loaded {
                println!("{}", line(image));
            }
        }
        ImageCommand::Save { reference, file } => {
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
            for image in store.list()? {
                if json {
                    println!("{}", serde_json::to_string(&image)?);
                } else {
                    println!("{}", line(&image));
                }
            }
        }
        ImageCommand::Rm { reference } => {
            let reference = Reference::parse(&reference)?;
            if !store.remove(&reference)? {
                say!("geode: no image {reference} in the store");
                return Ok(Exit::Failed);
            }
            println!("removed {reference}");
        }
        ImageCommand::Prune => {
            let freed = tokio::task::spawn_blocking(move || store.prune(&[])).await??;
            println!("freed {:.1} MB", freed as f64 / 1e6);
        }
    }
    Ok(Exit::Success)
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
