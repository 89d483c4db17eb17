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

/// overlayfs marks a directory that hides the lower layers' contents with this xattr (as root
/// of the machine; [`opaque_xattr`] says which one this process writes).
#[cfg(test)]
const OPAQUE_XATTR: &str = "trusted.overlay.opaque";

/// The opaque mark overlayfs reads here: `trusted.overlay.opaque`, or `user.overlay.opaque`
/// in the rootless sandbox's namespace.
pub(crate) fn opaque_xattr() -> String {
    format!("{}opaque", crate::rootless::overlay_xattr_prefix())
}
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

/// An entry's owner, mode and mtime, as its tar header gives them.
struct EntryMeta {
    mode: u32,
    uid: u64,
    gid: u64,
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
        let meta = EntryMeta {
            mode: header.mode().unwrap_or(0o644) & 0o7777,
            uid: header.uid().unwrap_or(0),
            gid: header.gid().unwrap_or(0),
            mtime: header.mtime().unwrap_or(0),
        };
        let xattrs = self.pax_xattrs(&mut entry, &rel)?;

        let name = rel.file_name().map(|n| n.to_string_lossy().into_owned());
        if let Some(name) = &name
            && name.starts_with(WHITEOUT_PREFIX)
        {
            return self.whiteout(&rel, name);
        }

        let path = self.root.join(&rel);
        match kind {
            tar::EntryType::Directory => self.directory(&rel, path, &meta, &xattrs)?,
            tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => {
                self.regular_file(&mut entry, &rel, &path, &meta, &xattrs)?;
            }
            tar::EntryType::Symlink => self.symlink(&entry, &rel, &path, &meta)?,
            tar::EntryType::Link => self.hard_link(&entry, &rel, &path)?,
            tar::EntryType::Fifo => {
                self.make_parents(&rel)?;
                self.remove_existing(&rel)?;
                nix::unistd::mkfifo(&path, Mode::from_bits_truncate(0o600))
                    .map_err(|e| self.io(&path, "creating a FIFO", e.into()))?;
                self.chown(&path, meta.uid, meta.gid)?;
                self.chmod(&path, meta.mode)?;
                self.set_mtime(&path, meta.mtime)?;
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

    fn directory(
        &mut self,
        rel: &Path,
        path: PathBuf,
        meta: &EntryMeta,
        xattrs: &[(String, Vec<u8>)],
    ) -> Result<(), ImageError> {
        self.make_parents(rel)?;
        let is_dir = fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
        if !is_dir {
            self.remove_existing(rel)?;
            fs::create_dir(&path).map_err(|e| self.io(&path, "creating a directory", e))?;
        }
        self.chown(&path, meta.uid, meta.gid)?;
        self.set_xattrs(&path, xattrs)?;
        self.dirs.push(DirMeta {
            path,
            mode: meta.mode,
            mtime: meta.mtime,
        });
        Ok(())
    }

    fn regular_file<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        rel: &Path,
        path: &Path,
        meta: &EntryMeta,
        xattrs: &[(String, Vec<u8>)],
    ) -> Result<(), ImageError> {
        self.make_parents(rel)?;
        self.remove_existing(rel)?;
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| self.io(path, "creating a file", e))?;
        let written = io::copy(entry, &mut file)
            .map_err(|e| self.bad(rel, format!("reading its data: {e}")))?;
        drop(file);
        self.report.size_bytes += written;
        self.chown(path, meta.uid, meta.gid)?;
        self.chmod(path, meta.mode)?;
        self.set_xattrs(path, xattrs)?;
        self.set_mtime(path, meta.mtime)
    }

    fn symlink<R: Read>(
        &mut self,
        entry: &tar::Entry<'_, R>,
        rel: &Path,
        path: &Path,
        meta: &EntryMeta,
    ) -> Result<(), ImageError> {
        let target = entry
            .link_name()
            .map_err(|e| self.bad(rel, format!("unreadable link target: {e}")))?
            .ok_or_else(|| self.bad(rel, "symlink without a target"))?
            .into_owned();
        self.make_parents(rel)?;
        self.remove_existing(rel)?;
        // The target is not checked: it is resolved inside the container, not here.
        std::os::unix::fs::symlink(&target, path)
            .map_err(|e| self.io(path, "creating a symlink", e))?;
        self.chown(path, meta.uid, meta.gid)?;
        self.set_mtime(path, meta.mtime)
    }

    fn hard_link<R: Read>(
        &mut self,
        entry: &tar::Entry<'_, R>,
        rel: &Path,
        path: &Path,
    ) -> Result<(), ImageError> {
        let target = entry
            .link_name()
            .map_err(|e| self.bad(rel, format!("unreadable link target: {e}")))?
            .ok_or_else(|| self.bad(rel, "hard link without a target"))?
            .into_owned();
        let target_rel = self.relative(&target)?;
        if target_rel == rel {
            return Ok(());
        }
        self.check_parents(&target_rel)?;
        let target_path = self.root.join(&target_rel);
        match fs::symlink_metadata(&target_path) {
            Ok(m) if !m.is_dir() => {}
            Ok(_) => return Err(self.bad(rel, "hard link to a directory")),
            Err(_) => {
                return Err(self.bad(
                    rel,
                    format!(
                        "hard link to {}, which is not in this layer",
                        target_rel.display()
                    ),
                ));
            }
        }
        self.make_parents(rel)?;
        self.remove_existing(rel)?;
        // link(2) does not follow a symlink source, so this links the layer's own inode.
        fs::hard_link(&target_path, path).map_err(|e| self.io(path, "creating a hard link", e))
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
            let name = opaque_xattr();
            xattr::set(&dir, &name, b"y")
                .map_err(|e| self.io(&dir, &format!("setting {name}"), e))?;
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
                // `user.overlay.*` is overlayfs' own in a user namespace (the rootless
                // sandbox): a layer may not redirect lookups there either.
                if name == "security.capability"
                    || (name.starts_with("user.") && !name.starts_with("user.overlay."))
                {
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
        let (mut uid, mut gid) = (to_id(uid)?, to_id(gid)?);
        // In the rootless namespace only container ids (at `HOST_BASE`) and the user (0) are
        // mapped: a layer's owners are written as the sandbox will see them, once, here.
        if crate::rootless::active() {
            (uid, gid) = (crate::ids::to_host(uid), crate::ids::to_host(gid));
        }
        std::os::unix::fs::lchown(path, Some(uid), Some(gid))
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
pub(crate) mod tests;
