//! Layers and images made on this machine: adopted layers, local tags, removal, pruning,
//! and one unpack however many processes ask for a layer at once.

use super::*;

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
