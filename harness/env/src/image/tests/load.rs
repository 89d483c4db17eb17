//! Loading `docker save` tarballs and OCI layouts: every blob verified, tampering and
//! escaping archives refused.

use super::*;

#[test]
fn loads_an_oci_layout_dir_and_tar_verifying_every_blob() {
    let (dir, store) = new_store();
    let image = TestImage::new("oci");
    let layout = dir.path().join("layout");
    oci_layout(&layout, &image, "registry.example/team/app:1.0");

    let loaded = load_archive(&store, &layout).unwrap();
    assert_eq!(loaded.len(), 1);
    let got = &loaded[0];
    assert_eq!(got.reference, "registry.example/team/app:1.0");
    assert_eq!(got.digest, image.manifest_digest());
    assert_eq!(
        got.source,
        ImageSource::Loaded {
            file: layout.clone()
        }
    );
    check_image(got, "oci");
    let reference = Reference::parse("registry.example/team/app:1.0").unwrap();
    assert_eq!(store.get(&reference).unwrap().as_ref(), Some(got));
    let pinned = Reference::parse(&format!("other/name@{}", image.manifest_digest())).unwrap();
    assert_eq!(
        store.get(&pinned).unwrap().map(|i| i.digest),
        Some(got.digest.clone())
    );
    // The layout's files were read, not moved.
    assert!(
        layout
            .join("blobs/sha256")
            .join(&sha256_digest(&image.blobs[0])[7..])
            .is_file()
    );

    // The same layout as a tar, under a bare tag: no repository, so recorded by digest.
    let layout2 = dir.path().join("layout2");
    oci_layout(&layout2, &image, "latest");
    let tar = dir.path().join("layout.tar");
    tar_dir(&layout2, &tar);
    let loaded = load_archive(&store, &tar).unwrap();
    assert_eq!(loaded.len(), 1);
    assert_eq!(loaded[0].reference, image.manifest_digest());
    assert_eq!(
        loaded[0].layers, got.layers,
        "layers are shared, unpacked once"
    );
    assert!(tmp_is_empty(&store));
    let listed: Vec<String> = store
        .list()
        .unwrap()
        .into_iter()
        .map(|i| i.reference)
        .collect();
    assert_eq!(
        listed,
        vec!["registry.example/team/app:1.0".to_string()],
        "the unnamed copy has the same digest"
    );
}

#[test]
fn loads_a_legacy_docker_save_tarball() {
    let (dir, store) = new_store();
    let image = TestImage::new("saved");
    let save = dir.path().join("save");
    docker_save(&save, &image, &["debian:bookworm", "example.com/x/y:2"]);
    let tar = dir.path().join("save.tar");
    tar_dir(&save, &tar);
    let gz = dir.path().join("save.tar.gz");
    fs::write(&gz, gzip(&fs::read(&tar).unwrap())).unwrap();

    let loaded = load_archive(&store, &gz).unwrap();
    let names: Vec<&str> = loaded.iter().map(|i| i.reference.as_str()).collect();
    assert_eq!(
        names,
        vec!["docker.io/library/debian:bookworm", "example.com/x/y:2"]
    );
    for got in &loaded {
        check_image(got, "saved");
        assert_eq!(
            got.digest,
            sha256_digest(&image.config),
            "legacy form: the image id"
        );
    }
    let hit = store
        .get(&Reference::parse("debian:bookworm").unwrap())
        .unwrap();
    assert_eq!(hit.as_ref(), Some(&loaded[0]));
    assert!(tmp_is_empty(&store));
}

#[test]
fn tampered_blobs_are_refused_with_a_digest_error() {
    let image = TestImage::new("tampered");

    // A layer blob of an OCI layout with its gzip header's OS byte changed: it still
    // decompresses to the right tar, so only the blob digest can catch it.
    let (dir, store) = new_store();
    let layout = dir.path().join("layout");
    oci_layout(&layout, &image, "x/y:1");
    let blob = layout
        .join("blobs/sha256")
        .join(&sha256_digest(&image.blobs[0])[7..]);
    let mut bytes = fs::read(&blob).unwrap();
    bytes[9] ^= 0x01;
    fs::write(&blob, &bytes).unwrap();
    match load_archive(&store, &layout) {
        Err(ImageError::DigestMismatch {
            expected, actual, ..
        }) => {
            assert_eq!(expected, sha256_digest(&image.blobs[0]));
            assert_eq!(actual, sha256_digest(&bytes));
        }
        other => panic!("tampered layer accepted: {other:?}"),
    }
    assert!(
        store.layer(&image.diff_hex(0)).is_none(),
        "no layer from a bad blob"
    );
    assert!(store.list().unwrap().is_empty());
    assert!(tmp_is_empty(&store));

    // A config of an OCI layout.
    let (dir, store) = new_store();
    let layout = dir.path().join("layout");
    oci_layout(&layout, &image, "x/y:1");
    let config = layout
        .join("blobs/sha256")
        .join(&sha256_digest(&image.config)[7..]);
    fs::write(&config, image.config.to_ascii_uppercase()).unwrap();
    let err = load_archive(&store, &layout).unwrap_err();
    assert!(
        matches!(err, ImageError::DigestMismatch { ref expected, .. } if *expected == sha256_digest(&image.config)),
        "{err}"
    );

    // A legacy layer.tar whose content no longer matches the config's diff id.
    let (dir, store) = new_store();
    let save = dir.path().join("save");
    docker_save(&save, &image, &["a:1"]);
    let layer = save.join("one/layer.tar");
    let mut tar = fs::read(&layer).unwrap();
    let at = tar.windows(13).position(|w| w == b"ID=geode-test").unwrap();
    tar[at] = b'X';
    fs::write(&layer, &tar).unwrap();
    let err = load_archive(&store, &save).unwrap_err();
    match &err {
        ImageError::DigestMismatch { expected, what, .. } => {
            assert_eq!(*expected, sha256_digest(&image.tars[0]));
            assert!(what.contains("diff id"), "{what}");
        }
        other => panic!("expected a digest mismatch, got {other}"),
    }
    assert!(store.layer(&image.diff_hex(0)).is_none());
}

#[test]
fn archives_that_are_neither_form_or_escape_are_refused() {
    let (dir, store) = new_store();
    let empty = dir.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let err = load_archive(&store, &empty).unwrap_err();
    assert!(
        matches!(err, ImageError::BadArchive { ref file, .. } if file.ends_with("empty")),
        "{err}"
    );

    let save = dir.path().join("save");
    let image = TestImage::new("x");
    docker_save(&save, &image, &["a:1"]);
    let manifest =
        serde_json::json!([{"Config": "../../etc/passwd", "RepoTags": ["a:1"], "Layers": []}]);
    fs::write(save.join("manifest.json"), manifest.to_string()).unwrap();
    let err = load_archive(&store, &save).unwrap_err();
    assert!(err.to_string().contains("leaves the archive"), "{err}");

    // A layer of an unpacked save dir that is a symlink out of it.
    let save = dir.path().join("save2");
    docker_save(&save, &image, &["a:1"]);
    let outside = dir.path().join("outside.tar");
    fs::write(&outside, &image.tars[0]).unwrap();
    fs::remove_file(save.join("one/layer.tar")).unwrap();
    std::os::unix::fs::symlink(&outside, save.join("one/layer.tar")).unwrap();
    let err = load_archive(&store, &save).unwrap_err();
    assert!(err.to_string().contains("outside the archive"), "{err}");
    assert!(store.layer(&image.diff_hex(0)).is_none());
}
