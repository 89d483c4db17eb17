//! Unpacking tests, and the tar and gzip builders the other image tests make layers with.

use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt};

use super::*;

/// A tar entry for tests, including the kinds `tar::Builder` refuses to write.
pub(crate) enum E<'a> {
    Dir(&'a str, u32),
    File(&'a str, &'a [u8], u32),
    Owned(&'a str, &'a [u8], u32, u64, u64, u64),
    Symlink(&'a str, &'a str),
    Hardlink(&'a str, &'a str),
    Fifo(&'a str),
    CharDev(&'a str),
    /// A regular file whose name is written raw (`../x`, `/abs`).
    RawName(&'a [u8], &'a [u8]),
}

pub(crate) fn tar_of(entries: &[E]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        h.set_mtime(1_600_000_000);
        h.set_uid(0);
        h.set_gid(0);
        match e {
            E::Dir(p, mode) => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(*mode);
                h.set_size(0);
                builder.append_data(&mut h, p, io::empty()).unwrap();
            }
            E::File(p, data, mode) => {
                h.set_mode(*mode);
                h.set_size(data.len() as u64);
                builder.append_data(&mut h, p, *data).unwrap();
            }
            E::Owned(p, data, mode, uid, gid, mtime) => {
                h.set_mode(*mode);
                h.set_uid(*uid);
                h.set_gid(*gid);
                h.set_mtime(*mtime);
                h.set_size(data.len() as u64);
                builder.append_data(&mut h, p, *data).unwrap();
            }
            E::Symlink(p, target) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                builder.append_link(&mut h, p, target).unwrap();
            }
            E::Hardlink(p, target) => {
                h.set_entry_type(tar::EntryType::Link);
                h.set_mode(0o644);
                h.set_size(0);
                builder.append_link(&mut h, p, target).unwrap();
            }
            E::Fifo(p) => {
                h.set_entry_type(tar::EntryType::Fifo);
                h.set_mode(0o640);
                h.set_size(0);
                builder.append_data(&mut h, p, io::empty()).unwrap();
            }
            E::CharDev(p) => {
                h.set_entry_type(tar::EntryType::Char);
                h.set_mode(0o666);
                h.set_device_major(1).unwrap();
                h.set_device_minor(3).unwrap();
                h.set_size(0);
                builder.append_data(&mut h, p, io::empty()).unwrap();
            }
            E::RawName(name, data) => {
                h.set_mode(0o644);
                h.set_size(data.len() as u64);
                h.as_old_mut().name[..name.len()].copy_from_slice(name);
                h.set_cksum();
                builder.append(&h, *data).unwrap();
            }
        }
    }
    builder.into_inner().unwrap()
}

pub(crate) fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

fn sha(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

fn sample_layer() -> Vec<u8> {
    tar_of(&[
        E::Dir("./", 0o755),
        E::Dir("etc/", 0o755),
        E::Owned(
            "etc/conf",
            b"key=value\n",
            0o4750,
            1000,
            1001,
            1_234_567_890,
        ),
        E::File("usr/bin/tool", b"#!/bin/sh\necho hi\n", 0o755),
        E::Symlink("etc/link", "../usr/bin/tool"),
        E::Hardlink("usr/bin/tool2", "usr/bin/tool"),
        E::File("gone/.wh.x", b"", 0o644),
        E::Dir("opq/", 0o700),
        E::File("opq/.wh..wh..opq", b"", 0o644),
        E::File("opq/kept", b"k", 0o644),
        E::Fifo("run/pipe"),
        E::CharDev("dev/null"),
        E::File("etc/replaced", b"first", 0o644),
        E::File("etc/replaced", b"second", 0o600),
    ])
}

fn check_sample(root: &Path, report: &UnpackReport) {
    let conf = root.join("etc/conf");
    assert_eq!(fs::read(&conf).unwrap(), b"key=value\n");
    let m = fs::metadata(&conf).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o4750, "set-id bit kept after chown");
    assert_eq!((m.uid(), m.gid()), (1000, 1001));
    assert_eq!(m.mtime(), 1_234_567_890);
    assert_eq!(
        fs::read_link(root.join("etc/link")).unwrap(),
        Path::new("../usr/bin/tool")
    );
    let a = fs::metadata(root.join("usr/bin/tool")).unwrap();
    let b = fs::metadata(root.join("usr/bin/tool2")).unwrap();
    assert_eq!(a.ino(), b.ino(), "hard link shares the inode");
    assert_eq!(a.nlink(), 2);
    let wh = fs::symlink_metadata(root.join("gone/x")).unwrap();
    assert!(wh.file_type().is_char_device(), "whiteout is a char device");
    assert_eq!(wh.rdev(), 0, "whiteout is device 0:0");
    assert!(!root.join("gone/.wh.x").exists());
    assert_eq!(
        xattr::get(root.join("opq"), OPAQUE_XATTR).unwrap(),
        Some(b"y".to_vec())
    );
    assert_eq!(xattr::get(root.join("etc"), OPAQUE_XATTR).unwrap(), None);
    assert!(!root.join("opq/.wh..wh..opq").exists());
    assert_eq!(
        fs::metadata(root.join("opq")).unwrap().mode() & 0o7777,
        0o700
    );
    assert!(
        fs::symlink_metadata(root.join("run/pipe"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
    assert!(!root.join("dev/null").exists(), "device nodes are not made");
    assert!(
        report.notes.iter().any(|n| n.contains("dev/null")),
        "{:?}",
        report.notes
    );
    assert_eq!(fs::read(root.join("etc/replaced")).unwrap(), b"second");
    assert_eq!(
        fs::metadata(root.join("etc")).unwrap().mtime(),
        1_600_000_000,
        "dir mtime set last"
    );
    assert_eq!(report.entries, 14);
    assert_eq!(report.size_bytes, 10 + 18 + 1 + 5 + 6);
}

#[test]
fn unpacks_plain_gzip_and_zstd_layers_in_overlay_format() {
    let tar = sample_layer();
    let gz = gzip(&tar);
    let zst = zstd::encode_all(&tar[..], 3).unwrap();
    for (label, blob) in [("plain", &tar), ("gzip", &gz), ("zstd", &zst)] {
        let dir = tempfile::tempdir().unwrap();
        let report = unpack_layer(&blob[..], dir.path(), Path::new("blob"))
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        check_sample(dir.path(), &report);
        assert_eq!(
            report.diff_id,
            sha(&tar),
            "{label}: diff id is the tar's digest"
        );
        assert_eq!(report.compressed_digest, sha(blob), "{label}: blob digest");
    }
}

#[test]
fn refuses_a_non_empty_target_and_garbage() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("x"), b"").unwrap();
    assert!(unpack_layer(&sample_layer()[..], dir.path(), Path::new("b")).is_err());
    let empty = tempfile::tempdir().unwrap();
    let err = unpack_layer(
        &gzip(b"not a tar at all, just words")[..],
        empty.path(),
        Path::new("blob-x"),
    );
    assert!(
        matches!(err, Err(ImageError::BadArchive { ref file, .. }) if file == Path::new("blob-x")),
        "{err:?}"
    );
}

#[test]
fn entries_escaping_the_layer_are_refused_and_write_nothing_outside() {
    let base = tempfile::tempdir().unwrap();
    let outside = base.path().join("outside");
    fs::create_dir(&outside).unwrap();
    let outside_str = outside.to_str().unwrap().to_string();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("dotdot", tar_of(&[E::RawName(b"../escaped", b"x")]), "'..'"),
        (
            "nested dotdot",
            tar_of(&[E::RawName(b"a/../../escaped", b"x")]),
            "'..'",
        ),
        (
            "absolute",
            tar_of(&[E::RawName(format!("{outside_str}/abs").as_bytes(), b"x")]),
            "absolute",
        ),
        (
            "through a symlink",
            tar_of(&[
                E::Symlink("etc", &outside_str),
                E::File("etc/passwd", b"root::0:0", 0o644),
            ]),
            "symlink",
        ),
        (
            "dir through a symlink",
            tar_of(&[E::Symlink("etc", &outside_str), E::Dir("etc/sub/", 0o755)]),
            "symlink",
        ),
        (
            "whiteout through a symlink",
            tar_of(&[
                E::Symlink("etc", &outside_str),
                E::File("etc/.wh.victim", b"", 0o644),
            ]),
            "symlink",
        ),
        (
            "hard link through a symlink",
            tar_of(&[
                E::Symlink("etc", &outside_str),
                E::Hardlink("stolen", "etc/secret"),
            ]),
            "symlink",
        ),
        (
            "hard link outside the layer",
            tar_of(&[E::Hardlink("stolen", "nothere")]),
            "not in this layer",
        ),
    ];
    fs::write(outside.join("secret"), b"s").unwrap();
    fs::write(outside.join("victim"), b"v").unwrap();
    for (label, tar, why) in cases {
        let target = base
            .path()
            .join(format!("layer-{}", label.replace(' ', "-")));
        fs::create_dir(&target).unwrap();
        let err = unpack_layer(&tar[..], &target, Path::new("evil.tar")).expect_err(label);
        let msg = err.to_string();
        assert!(
            matches!(err, ImageError::BadArchive { .. }),
            "{label}: {msg}"
        );
        assert!(msg.contains(why), "{label}: {msg}");
        assert!(!base.path().join("escaped").exists(), "{label}");
        let mut names: Vec<String> = fs::read_dir(&outside)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            vec!["secret", "victim"],
            "{label}: outside untouched"
        );
        assert_eq!(fs::read(outside.join("victim")).unwrap(), b"v", "{label}");
        assert!(!target.join("stolen").exists(), "{label}");
    }
}

#[test]
fn a_symlink_replaced_by_a_directory_is_written_into_safely() {
    let base = tempfile::tempdir().unwrap();
    let outside = base.path().join("outside");
    fs::create_dir(&outside).unwrap();
    let target = base.path().join("layer");
    fs::create_dir(&target).unwrap();
    let tar = tar_of(&[
        E::Symlink("etc", outside.to_str().unwrap()),
        E::Dir("etc/", 0o755),
        E::File("etc/passwd", b"ok", 0o644),
        E::Symlink("file", outside.to_str().unwrap()),
        E::File("file", b"replaced, not written through", 0o644),
    ]);
    unpack_layer(&tar[..], &target, Path::new("t.tar")).unwrap();
    assert_eq!(fs::read(target.join("etc/passwd")).unwrap(), b"ok");
    assert!(fs::symlink_metadata(target.join("file")).unwrap().is_file());
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
}

/// A layer may carry `user.*` xattrs, but not overlayfs' own marks in that namespace: the
/// rootless sandbox's overlay (`userxattr`) reads `user.overlay.*`, where a redirect or an
/// opaque mark from a tar would change what the merged root shows.
#[test]
fn a_layer_s_user_overlay_xattrs_are_dropped_and_other_user_xattrs_kept() {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, key) in [
        ("kept", "SCHILY.xattr.user.note"),
        ("redirected", "SCHILY.xattr.user.overlay.redirect"),
    ] {
        builder
            .append_pax_extensions([(key, b"/etc".as_slice())])
            .unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        h.set_mtime(1_600_000_000);
        builder.append_data(&mut h, path, io::empty()).unwrap();
    }
    let tar = builder.into_inner().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let report = unpack_layer(&tar[..], dir.path(), Path::new("blob")).unwrap();
    assert_eq!(
        xattr::get(dir.path().join("kept"), "user.note").unwrap(),
        Some(b"/etc".to_vec())
    );
    assert_eq!(
        xattr::get(dir.path().join("redirected"), "user.overlay.redirect").unwrap(),
        None
    );
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("user.overlay.redirect")),
        "{:?}",
        report.notes
    );
}
