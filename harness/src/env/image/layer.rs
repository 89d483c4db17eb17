//! Unpacks one layer tarball into an empty directory in the form overlayfs reads as a lower
//! layer: OCI whiteouts become what overlayfs understands (`.wh.NAME` a 0:0 character device,
//! `.wh..wh..opq` the `trusted.overlay.opaque` xattr), ownership, modes and mtimes are kept.
//!
//! A layer is untrusted input, and we unpack as root: no entry may write outside the target.
//! Paths with `..` or a leading `/` are refused, and every parent of an entry must be a real
//! directory of this layer — an entry under a symlink the layer made (`etc -> /`, then
//! `etc/passwd`) is refused rather than followed, and the final component of an entry is
//! replaced, never opened through. Hard links must name a file already in the layer.
//!
//! The compression (none, gzip, zstd) is read from the stream's first bytes, and both the
//! compressed stream and the tar inside it are hashed on the way, so the caller can check the
//! blob's digest and the config's diff id without reading the blob twice.

use std::fs::{self, OpenOptions};
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use nix::sys::stat::{Mode, SFlag};
use nix::sys::time::TimeVal;
use sha2::{Digest, Sha256};

use super::ImageError;

/// overlayfs marks a directory that hides the lower layers' contents with this xattr.
const OPAQUE_XATTR: &str = "trusted.overlay.opaque";
const WHITEOUT_PREFIX: &str = ".wh.";
const OPAQUE_MARKER: &str = ".wh..wh..opq";
/// Notes past this many are counted, not kept: a layer of a million device nodes should not
/// make a million-line record.
const MAX_NOTES: usize = 50;

/// What an unpack found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UnpackReport {
    /// `sha256:` of the stream as read (the blob digest of a compressed layer).
    pub compressed_digest: String,
    /// `sha256:` of the uncompressed tar: the layer's diff id.
    pub diff_id: String,
    /// Bytes of regular files written.
    pub size_bytes: u64,
    /// Entries of the tar, of every kind.
    pub entries: u64,
    /// What was skipped and why (device nodes, xattrs we do not set).
    pub notes: Vec<String>,
}

/// Unpacks the layer read from `reader` into `target`, which must be an empty directory;
/// `source` names the blob in error messages.
pub fn unpack_layer(
    reader: impl Read,
    target: &Path,
    source: &Path,
) -> Result<UnpackReport, ImageError> {
    let mut empty =
        fs::read_dir(target).map_err(|e| ImageError::io(target, "reading the unpack target", e))?;
    if empty.next().is_some() {
        return Err(ImageError::io(
            target,
            "unpack target",
            io::Error::other("not an empty directory"),
        ));
    }
    let bad = |what: String| ImageError::BadArchive {
        file: source.to_path_buf(),
        what,
    };
    let mut compressed_hash = Sha256::new();
    let mut diff_hash = Sha256::new();
    let mut unpacker = Unpacker {
        root: target,
        source,
        report: UnpackReport::default(),
        dirs: Vec::new(),
        skipped_notes: 0,
    };
    {
        let mut buffered = BufReader::with_capacity(
            1 << 17,
            HashingReader {
                inner: reader,
                hasher: &mut compressed_hash,
            },
        );
        let magic = buffered
            .fill_buf()
            .map_err(|e| ImageError::io(source, "reading the layer", e))?
            .to_vec();
        {
            let decompressed: Box<dyn Read + '_> = if magic.starts_with(&[0x1f, 0x8b]) {
                Box::new(flate2::bufread::MultiGzDecoder::new(&mut buffered))
            } else if magic.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
                Box::new(
                    zstd::stream::read::Decoder::with_buffer(&mut buffered)
                        .map_err(|e| bad(format!("zstd stream: {e}")))?,
                )
            } else {
                Box::new(&mut buffered)
            };
            let mut archive = tar::Archive::new(HashingReader {
                inner: decompressed,
                hasher: &mut diff_hash,
            });
            let entries = archive
                .entries()
                .map_err(|e| bad(format!("not a tar stream: {e}")))?;
            for entry in entries {
                let entry = entry.map_err(|e| bad(format!("tar entry: {e}")))?;
                unpacker.entry(entry)?;
            }
            // The tar ends at two zero blocks; the diff id covers whatever follows as well.
            let mut rest = archive.into_inner();
            io::copy(&mut rest, &mut io::sink())
                .map_err(|e| bad(format!("after the tar's end: {e}")))?;
        }
        io::copy(&mut buffered, &mut io::sink())
            .map_err(|e| ImageError::io(source, "reading the layer", e))?;
    }
    unpacker.finish_dirs()?;
    let mut report = unpacker.report;
    if unpacker.skipped_notes > 0 {
        report
            .notes
            .push(format!("... and {} more notes", unpacker.skipped_notes));
    }
    report.compressed_digest = format!("sha256:{}", hex::encode(compressed_hash.finalize()));
    report.diff_id = format!("sha256:{}", hex::encode(diff_hash.finalize()));
    Ok(report)
}

struct HashingReader<'h, R> {
    inner: R,
    hasher: &'h mut Sha256,
}

impl<R: Read> Read for HashingReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// A directory's metadata, applied once everything inside it exists: writing children changes
/// a directory's mtime.
struct DirMeta {
    path: PathBuf,
    mode: u32,
    mtime: u64,
}

struct Unpacker<'a> {
    root: &'a Path,
    source: &'a Path,
    report: UnpackReport,
    dirs: Vec<DirMeta>,
    skipped_notes: usize,
}

impl Unpacker<'_> {
    fn bad(&self, entry: &Path, what: impl std::fmt::Display) -> ImageError {
        ImageError::BadArchive {
            file: self.source.to_path_buf(),
            what: format!("entry {}: {what}", entry.display()),
        }
    }

    fn io(&self, path: &Path, what: &str, e: io::Error) -> ImageError {
        ImageError::io(path, what, e)
    }

    fn note(&mut self, note: String) {
        if self.report.notes.len() < MAX_NOTES {
            self.report.notes.push(note);
        } else {
            self.skipped_notes += 1;
        }
    }

    fn entry<R: Read>(&mut self, mut entry: tar::Entry<'_, R>) -> Result<(), ImageError> {
        self.report.entries += 1;
        let raw = entry
            .path()
            .map_err(|e| self.bad(Path::new("?"), format!("unreadable path: {e}")))?
            .into_owned();
        let rel = self.relative(&raw)?;
        let header = entry.header();
        let kind = header.entry_type();
        let mode = header.mode().unwrap_or(0o644) & 0o7777;
        let uid = header.uid().unwrap_or(0);
        let gid = header.gid().unwrap_or(0);
        let mtime = header.mtime().unwrap_or(0);
        let xattrs = self.pax_xattrs(&mut entry, &rel)?;

        let name = rel.file_name().map(|n| n.to_string_lossy().into_owned());
        if let Some(name) = &name
            && name.starts_with(WHITEOUT_PREFIX)
        {
            return self.whiteout(&rel, name);
        }

        let path = self.root.join(&rel);
        match kind {
            tar::EntryType::Directory => {
                self.make_parents(&rel)?;
                let is_dir = fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
                if !is_dir {
                    self.remove_existing(&rel)?;
                    fs::create_dir(&path).map_err(|e| self.io(&path, "creating a directory", e))?;
                }
                self.chown(&path, uid, gid)?;
                self.set_xattrs(&path, &xattrs)?;
                self.dirs.push(DirMeta { path, mode, mtime });
            }
            tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => {
                self.make_parents(&rel)?;
                self.remove_existing(&rel)?;
                let mut file = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(nix::libc::O_NOFOLLOW)
                    .open(&path)
                    .map_err(|e| self.io(&path, "creating a file", e))?;
                let written = io::copy(&mut entry, &mut file)
                    .map_err(|e| self.bad(&rel, format!("reading its data: {e}")))?;
                drop(file);
                self.report.size_bytes += written;
                self.chown(&path, uid, gid)?;
                self.chmod(&path, mode)?;
                self.set_xattrs(&path, &xattrs)?;
                self.set_mtime(&path, mtime)?;
            }
            tar::EntryType::Symlink => {
                let target = entry
                    .link_name()
                    .map_err(|e| self.bad(&rel, format!("unreadable link target: {e}")))?
                    .ok_or_else(|| self.bad(&rel, "symlink without a target"))?
                    .into_owned();
                self.make_parents(&rel)?;
                self.remove_existing(&rel)?;
                // The target is not checked: it is resolved inside the container, not here.
                std::os::unix::fs::symlink(&target, &path)
                    .map_err(|e| self.io(&path, "creating a symlink", e))?;
                self.chown(&path, uid, gid)?;
                self.set_mtime(&path, mtime)?;
            }
            tar::EntryType::Link => {
                let target = entry
                    .link_name()
                    .map_err(|e| self.bad(&rel, format!("unreadable link target: {e}")))?
                    .ok_or_else(|| self.bad(&rel, "hard link without a target"))?
                    .into_owned();
                let target_rel = self.relative(&target)?;
                if target_rel == rel {
                    return Ok(());
                }
                self.check_parents(&target_rel)?;
                let target_path = self.root.join(&target_rel);
                match fs::symlink_metadata(&target_path) {
                    Ok(m) if !m.is_dir() => {}
                    Ok(_) => return Err(self.bad(&rel, "hard link to a directory")),
                    Err(_) => {
                        return Err(self.bad(
                            &rel,
                            format!(
                                "hard link to {}, which is not in this layer",
                                target_rel.display()
                            ),
                        ));
                    }
                }
                self.make_parents(&rel)?;
                self.remove_existing(&rel)?;
                // link(2) does not follow a symlink source, so this links the layer's own inode.
                fs::hard_link(&target_path, &path)
                    .map_err(|e| self.io(&path, "creating a hard link", e))?;
            }
            tar::EntryType::Fifo => {
                self.make_parents(&rel)?;
                self.remove_existing(&rel)?;
                nix::unistd::mkfifo(&path, Mode::from_bits_truncate(0o600))
                    .map_err(|e| self.io(&path, "creating a FIFO", e.into()))?;
                self.chown(&path, uid, gid)?;
                self.chmod(&path, mode)?;
                self.set_mtime(&path, mtime)?;
            }
            tar::EntryType::Char | tar::EntryType::Block => {
                // A sandbox gets its devices from its own /dev; nodes from an image are not
                // made on the host.
                self.note(format!("skipped device node {}", rel.display()));
            }
            tar::EntryType::XGlobalHeader => {}
            other => {
                self.note(format!("skipped {} of tar type {:?}", rel.display(), other));
            }
        }
        Ok(())
    }

    /// The entry's path relative to the layer root; `..` and absolute paths are refused.
    fn relative(&self, raw: &Path) -> Result<PathBuf, ImageError> {
        let mut rel = PathBuf::new();
        for component in raw.components() {
            match component {
                Component::Normal(c) => rel.push(c),
                Component::CurDir => {}
                Component::ParentDir => {
                    return Err(self.bad(raw, "'..' in the path would leave the layer"));
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(self.bad(raw, "absolute path"));
                }
            }
        }
        Ok(rel)
    }

    /// Every proper ancestor of `rel` must be a real directory of the layer (never a symlink).
    fn check_parents(&self, rel: &Path) -> Result<(), ImageError> {
        self.walk_parents(rel, false)
    }

    /// As [`Self::check_parents`], creating missing ancestors (tars may omit them).
    fn make_parents(&mut self, rel: &Path) -> Result<(), ImageError> {
        self.walk_parents(rel, true)
    }

    fn walk_parents(&self, rel: &Path, create: bool) -> Result<(), ImageError> {
        let Some(parent) = rel.parent() else {
            return Ok(());
        };
        let mut dir = self.root.to_path_buf();
        let mut shown = PathBuf::new();
        for component in parent.components() {
            dir.push(component);
            shown.push(component);
            match fs::symlink_metadata(&dir) {
                Ok(m) if m.is_dir() => {}
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(self.bad(
                        rel,
                        format!(
                            "its parent {} is a symlink in this layer; refusing to write through it",
                            shown.display()
                        ),
                    ));
                }
                Ok(_) => {
                    return Err(self.bad(
                        rel,
                        format!("its parent {} is not a directory", shown.display()),
                    ));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
                    fs::create_dir(&dir)
                        .map_err(|e| self.io(&dir, "creating a parent directory", e))?;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Err(self.bad(
                        rel,
                        format!("its parent {} is not in this layer", shown.display()),
                    ));
                }
                Err(e) => return Err(self.io(&dir, "inspecting a parent directory", e)),
            }
        }
        Ok(())
    }

    /// A later entry replaces an earlier one at the same path, as tar does; the old one is
    /// removed, not written through (it may be a symlink).
    fn remove_existing(&self, rel: &Path) -> Result<(), ImageError> {
        if rel.as_os_str().is_empty() {
            return Err(self.bad(rel, "the layer root can only be a directory"));
        }
        let path = self.root.join(rel);
        let removed = match fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => fs::remove_dir_all(&path),
            Ok(_) => fs::remove_file(&path),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        };
        removed.map_err(|e| self.io(&path, "replacing an earlier entry", e))
    }

    fn whiteout(&mut self, rel: &Path, name: &str) -> Result<(), ImageError> {
        let parent_rel = rel.parent().unwrap_or(Path::new("")).to_path_buf();
        if name == OPAQUE_MARKER {
            // The marker's directory may come before or after it in the tar; make it now, and
            // its own entry (if any) will keep it and its xattr.
            let marker_child = parent_rel.join("x");
            self.make_parents(&marker_child)?;
            let dir = self.root.join(&parent_rel);
            xattr::set(&dir, OPAQUE_XATTR, b"y")
                .map_err(|e| self.io(&dir, "setting trusted.overlay.opaque", e))?;
            return Ok(());
        }
        if name.starts_with(".wh..wh.") {
            // aufs' own bookkeeping (`.wh..wh.plnk`, `.wh..wh.aufs`): nothing for overlayfs.
            return Ok(());
        }
        let hidden = &name[WHITEOUT_PREFIX.len()..];
        if hidden.is_empty() || hidden == "." || hidden == ".." {
            return Err(self.bad(rel, "whiteout without a name"));
        }
        let hidden_rel = parent_rel.join(hidden);
        self.make_parents(&hidden_rel)?;
        self.remove_existing(&hidden_rel)?;
        let path = self.root.join(&hidden_rel);
        nix::sys::stat::mknod(&path, SFlag::S_IFCHR, Mode::empty(), 0).map_err(|e| {
            self.io(
                &path,
                "creating a whiteout (character device 0:0)",
                e.into(),
            )
        })?;
        Ok(())
    }

    /// Extended attributes recorded as PAX `SCHILY.xattr.NAME`, of the namespaces we let a
    /// layer set: file capabilities and `user.*`. `trusted.overlay.*` from a tar would let a
    /// layer redirect overlayfs lookups; it is dropped with a note, as are other namespaces.
    fn pax_xattrs<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        rel: &Path,
    ) -> Result<Vec<(String, Vec<u8>)>, ImageError> {
        let mut out = Vec::new();
        let mut dropped = Vec::new();
        let extensions = entry
            .pax_extensions()
            .map_err(|e| self.bad(rel, format!("bad PAX header: {e}")))?;
        if let Some(extensions) = extensions {
            for ext in extensions {
                let ext = ext.map_err(|e| self.bad(rel, format!("bad PAX header: {e}")))?;
                let Ok(key) = ext.key() else { continue };
                let Some(name) = key.strip_prefix("SCHILY.xattr.") else {
                    continue;
                };
                if name == "security.capability" || name.starts_with("user.") {
                    out.push((name.to_string(), ext.value_bytes().to_vec()));
                } else {
                    dropped.push(name.to_string());
                }
            }
        }
        for name in dropped {
            self.note(format!("skipped xattr {name} of {}", rel.display()));
        }
        Ok(out)
    }

    fn set_xattrs(&self, path: &Path, xattrs: &[(String, Vec<u8>)]) -> Result<(), ImageError> {
        for (name, value) in xattrs {
            xattr::set(path, name, value)
                .map_err(|e| self.io(path, &format!("setting xattr {name}"), e))?;
        }
        Ok(())
    }

    fn chown(&self, path: &Path, uid: u64, gid: u64) -> Result<(), ImageError> {
        let to_id = |id: u64| {
            u32::try_from(id).map_err(|_| self.bad(path, format!("owner id {id} out of range")))
        };
        std::os::unix::fs::lchown(path, Some(to_id(uid)?), Some(to_id(gid)?))
            .map_err(|e| self.io(path, "setting the owner", e))
    }

    /// After chown, which clears set-id bits.
    fn chmod(&self, path: &Path, mode: u32) -> Result<(), ImageError> {
        fs::set_permissions(path, fs::Permissions::from_mode(mode))
            .map_err(|e| self.io(path, "setting the mode", e))
    }

    fn set_mtime(&self, path: &Path, mtime: u64) -> Result<(), ImageError> {
        let secs = i64::try_from(mtime).unwrap_or(i64::MAX);
        let t = TimeVal::new(secs, 0);
        nix::sys::stat::lutimes(path, &t, &t)
            .map_err(|e| self.io(path, "setting the mtime", e.into()))
    }

    /// Directory modes and mtimes, deepest first so that setting a child's does not change its
    /// parent's again.
    fn finish_dirs(&mut self) -> Result<(), ImageError> {
        let mut dirs = std::mem::take(&mut self.dirs);
        dirs.sort_by_key(|d| std::cmp::Reverse(d.path.components().count()));
        for d in dirs {
            // A later entry may have replaced the directory; only a directory gets its metadata.
            if fs::symlink_metadata(&d.path).is_ok_and(|m| m.is_dir()) {
                self.chmod(&d.path, d.mode)?;
                self.set_mtime(&d.path, d.mtime)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
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
}
