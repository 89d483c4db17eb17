//! Pulling an image into the store: its manifest resolved through the mirrors, then the
//! registry, and its layers downloaded a few at a time, each verified and unpacked once.

use std::io::{self};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::{StreamExt as _, TryStreamExt as _};
use sha2::{Digest as _, Sha256};

use super::{ImageStore, LayerBlob, PARALLEL_LAYERS, hex_of, now, short};
use crate::image::manifest::{self, Descriptor, digest_hex};
use crate::image::registry::{self, Client, Session};
use crate::image::{ImageError, ImageSource, PullOptions, Reference, StoredImage};

impl ImageStore {
    /// Pulls the image from its registry (mirrors first), unless it is pinned by digest and
    /// already here. Layers already in the store are not downloaded again.
    pub async fn pull(
        &self,
        reference: &Reference,
        opts: &PullOptions,
    ) -> Result<StoredImage, ImageError> {
        self.pull_via(reference, opts, true).await
    }

    /// `with_registry: false` tries the mirrors only (tests: a mirror of `docker.io` must not
    /// fall back to the real one).
    pub(crate) async fn pull_via(
        &self,
        reference: &Reference,
        opts: &PullOptions,
        with_registry: bool,
    ) -> Result<StoredImage, ImageError> {
        if reference.digest().is_some() {
            let pinned = reference.clone();
            if let Some(image) = self.blocking(move |store| store.get(&pinned)).await? {
                return Ok(image);
            }
        }
        self.writable(&format!("pulling {reference}"))?;
        let client_opts = opts.clone();
        let client = self.blocking(move |_| Client::new(&client_opts)).await?;
        let endpoints = registry::endpoints(reference.registry(), &opts.mirrors, with_registry);
        let mut last = None;
        for (i, endpoint) in endpoints.iter().enumerate() {
            match self.pull_from(&client, endpoint, reference).await {
                Ok(image) => return Ok(image),
                Err(e) => {
                    if let Some(next) = endpoints.get(i + 1) {
                        client.progress(&format!(
                            "{reference}: {} failed ({e}); trying {}",
                            endpoint.base, next.base
                        ));
                    }
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| ImageError::Network {
            url: reference.registry().to_string(),
            message: "no mirror configured and the registry itself excluded".into(),
        }))
    }

    pub(super) async fn pull_from(
        &self,
        client: &Client,
        endpoint: &registry::Endpoint,
        reference: &Reference,
    ) -> Result<StoredImage, ImageError> {
        let session = client.session(endpoint, reference);
        let resolved = session.resolve(reference).await?;
        client.progress(&format!(
            "{reference}: manifest {} from {}",
            resolved.manifest_digest, endpoint.base
        ));
        let name = reference.to_string();
        let bad = |what: String| ImageError::BadManifest {
            reference: name.clone(),
            location: endpoint.base.clone(),
            what,
        };
        let config_desc = &resolved.manifest.config;
        if !manifest::config_media_type_ok(config_desc.media_type.as_deref()) {
            return Err(ImageError::UnsupportedMediaType {
                reference: name.clone(),
                media_type: config_desc.media_type.clone().unwrap_or_default(),
                what: "the image config".into(),
            });
        }
        digest_hex(&config_desc.digest).map_err(|e| bad(format!("config: {e}")))?;
        let config_digest = config_desc.digest.clone();
        let stored = self
            .blocking(move |store| store.read_blob(&config_digest))
            .await?;
        let config_bytes = match stored {
            Some(bytes) => bytes,
            None => {
                let bytes = session.blob_bytes(&config_desc.digest).await?;
                let (digest, copy) = (config_desc.digest.clone(), bytes.clone());
                self.blocking(move |store| store.put_blob(&digest, &copy))
                    .await?;
                bytes
            }
        };
        let (config, diff_ids) = manifest::parse_config(&config_bytes).map_err(bad)?;
        let layers = &resolved.manifest.layers;
        if diff_ids.len() != layers.len() {
            return Err(bad(format!(
                "the manifest has {} layers and the config {} diff ids",
                layers.len(),
                diff_ids.len()
            )));
        }
        for desc in layers {
            if !manifest::layer_media_type_ok(desc.media_type.as_deref()) {
                return Err(ImageError::UnsupportedMediaType {
                    reference: name.clone(),
                    media_type: desc.media_type.clone().unwrap_or_default(),
                    what: format!("layer {}", desc.digest),
                });
            }
            digest_hex(&desc.digest).map_err(|e| bad(format!("layer: {e}")))?;
        }
        // The futures are made up front (not in a stream's closure) so that the pull's future
        // stays `Send` for callers that spawn it.
        let total = layers.len();
        let pending: Vec<_> = layers
            .iter()
            .zip(&diff_ids)
            .enumerate()
            .map(|(i, (desc, diff_id))| {
                self.pull_layer(client, &session, &name, desc, diff_id, (i + 1, total))
            })
            .collect();
        let paths: Vec<PathBuf> = futures::stream::iter(pending)
            .buffered(PARALLEL_LAYERS)
            .try_collect()
            .await?;
        let layer_ids: Vec<String> = diff_ids.iter().map(|d| hex_of(d).to_string()).collect();
        let mut digests = vec![resolved.digest.clone()];
        if resolved.manifest_digest != resolved.digest {
            digests.push(resolved.manifest_digest.clone());
        }
        let (base, config_digest) = (endpoint.base.clone(), config_desc.digest.clone());
        let resolved_digest = resolved.digest.clone();
        self.blocking(move |store| {
            let image = StoredImage {
                reference: name,
                digest: resolved_digest,
                config,
                size_bytes: store.layers_size(&layer_ids),
                layers: paths,
                source: ImageSource::Pulled { registry_url: base },
                created: now(),
            };
            store.record(&image, layer_ids, vec![config_digest], digests, true)?;
            Ok(image)
        })
        .await
    }

    /// Runs store file work off the async threads.
    pub(super) async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&ImageStore) -> Result<T, ImageError> + Send + 'static,
    ) -> Result<T, ImageError> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || work(&store))
            .await
            .map_err(|e| ImageError::io(&self.root, "a store task", io::Error::other(e)))?
    }

    pub(super) async fn pull_layer(
        &self,
        client: &Client,
        session: &Session<'_>,
        name: &str,
        desc: &Descriptor,
        diff_id: &str,
        (n, total): (usize, usize),
    ) -> Result<PathBuf, ImageError> {
        let id = hex_of(diff_id).to_string();
        let (known, blob_digest) = (id.clone(), desc.digest.clone());
        let (present, blob) = self
            .blocking(move |store| {
                let blob = store.blob_path(&blob_digest)?;
                Ok((store.layer(&known), blob))
            })
            .await?;
        if let Some(path) = present {
            client.progress(&format!("{name}: layer {n}/{total} already present"));
            return Ok(path);
        }
        let (digest, diff_id, owned_name) =
            (desc.digest.clone(), diff_id.to_string(), name.to_string());
        // A blob already here (left by an older pull that stopped between its download and
        // its unpack) is unpacked from the file; every other layer streams.
        let path = if tokio::fs::try_exists(&blob).await.unwrap_or(false) {
            self.blocking(move |store| {
                let layer = LayerBlob {
                    path: &blob,
                    label: &blob,
                    digest: Some(&digest),
                    diff_id: &diff_id,
                };
                store.unpack_blob(&id, &layer, &owned_name, true)
            })
            .await?
        } else {
            let size = desc
                .size
                .map_or("? bytes".to_string(), |s| format!("{s} bytes"));
            client.progress(&format!(
                "{name}: downloading and unpacking layer {} ({size})",
                short(&desc.digest)
            ));
            self.stream_layer(session, id, desc, diff_id, owned_name)
                .await?
        };
        client.progress(&format!("{name}: layer {n}/{total} unpacked"));
        Ok(path)
    }
}

impl ImageStore {
    /// Downloads a layer and unpacks it as it arrives: the bytes go from the response to the
    /// unpacker (on a blocking thread) through a bounded channel, never to a blob file, and
    /// the unpacker hashes them on the way (the blob's digest, the tar's diff id), so a
    /// layer is verified, unpacked and on disk when its last byte is in. Nothing is kept of a
    /// layer that fails either check or whose download breaks off.
    async fn stream_layer(
        &self,
        session: &Session<'_>,
        id: String,
        desc: &Descriptor,
        diff_id: String,
        name: String,
    ) -> Result<PathBuf, ImageError> {
        let (stream, url) = session.blob_stream(&desc.digest).await?;
        let (tx, rx) = tokio::sync::mpsc::channel(CHUNKS_IN_FLIGHT);
        let digest = desc.digest.clone();
        let label = PathBuf::from(&url);
        // Whether the unpacker began: if it never did, another process had made the layer.
        let began = Arc::new(AtomicBool::new(false));
        let beginning = Arc::clone(&began);
        let unpacked = self.blocking(move |store| {
            let layer = LayerBlob {
                path: &label,
                label: &label,
                digest: Some(&digest),
                diff_id: &diff_id,
            };
            store.unpack_reader(&id, &layer, &name, || {
                beginning.store(true, Ordering::SeqCst);
                Ok(ChannelReader::new(rx))
            })
        });
        let feed = async move {
            let mut stream = std::pin::pin!(stream);
            // The whole blob is hashed here too, so that a layer the unpacker gave up on
            // (a tar it cannot read) is still told apart from bytes that are not the blob.
            let mut hasher = Sha256::new();
            let mut received: u64 = 0;
            let mut unpacking = true;
            while let Some(chunk) = stream.next().await {
                let chunk = match chunk {
                    Ok(chunk) => chunk,
                    Err(e) => {
                        let _ = tx
                            .send(Err(io::Error::other("the download broke off")))
                            .await;
                        return Err(e);
                    }
                };
                received += chunk.len() as u64;
                if let Some(size) = desc.size
                    && received > size
                {
                    let _ = tx
                        .send(Err(io::Error::other("more bytes than the blob's")))
                        .await;
                    return Err(session.mismatch(
                        &url,
                        &desc.digest,
                        format!("(not hashed: more than the {size} bytes its descriptor gives)"),
                    ));
                }
                hasher.update(&chunk);
                if unpacking && tx.send(Ok(chunk)).await.is_err() {
                    if !began.load(Ordering::SeqCst) {
                        return Ok(());
                    }
                    unpacking = false;
                }
            }
            let actual = format!("sha256:{}", hex::encode(hasher.finalize()));
            if actual != desc.digest {
                return Err(session.mismatch(&url, &desc.digest, actual));
            }
            Ok(())
        };
        let (fed, unpacked) = tokio::join!(feed, unpacked);
        // Bytes that are not the blob, or a download broken off, explain any unpack error.
        fed?;
        unpacked
    }
}

/// Chunks of one layer download queued for its unpacker: enough to keep both sides busy,
/// few enough (reqwest's chunks are a few KiB to a few hundred) that memory stays small.
const CHUNKS_IN_FLIGHT: usize = 256;

/// The unpacker's end of a streamed download: a blocking `Read` over the chunks the async
/// side sends; the end of the channel is the end of the blob.
struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<io::Result<bytes::Bytes>>,
    current: bytes::Bytes,
}

impl ChannelReader {
    fn new(rx: tokio::sync::mpsc::Receiver<io::Result<bytes::Bytes>>) -> Self {
        ChannelReader {
            rx,
            current: bytes::Bytes::new(),
        }
    }
}

impl io::Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current = self.current.slice(n..);
        Ok(n)
    }
}
