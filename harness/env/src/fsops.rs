//! File operations of the sandbox server, and the tree copy shared with the harness side.
//!
//! The server runs inside the sandbox's root, so `canonicalize` follows symlinks exactly as the
//! sandbox's processes would: the scope check (the workspace root) happens here, on every
//! operation, and a symlink planted by a command cannot lead a file tool out of the workdir.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::protocol::{self, DirEntry, ErrorKind, INBOX, Reply, ReplyError};

/// Set once by a server whose sandbox has a user namespace: what it creates belongs to
/// container root ([`super::ids`]), not to host root, which would show as `nobody` inside.
static GIVE_TO_ROOT: AtomicBool = AtomicBool::new(false);

pub(crate) fn give_created_entries_to_root() {
    GIVE_TO_ROOT.store(true, Ordering::Relaxed);
}

/// Hand a path this server just created to container root (a no-op without a user
/// namespace).
pub(crate) fn created(path: &Path) -> io::Result<()> {
    if GIVE_TO_ROOT.load(Ordering::Relaxed) {
        super::ids::give_to_root(path)?;
    }
    Ok(())
}

/// `create_dir_all`, each folder it makes handed to container root.
pub(crate) fn create_dirs(dir: &Path) -> io::Result<()> {
    if std::fs::symlink_metadata(dir).is_ok() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dirs(parent)?;
    }
    match std::fs::create_dir(dir) {
        Ok(()) => created(dir),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

fn io_fail(op: &str, path: &Path, e: &io::Error) -> ReplyError {
    ReplyError {
        kind: ErrorKind::of(e),
        message: format!("{op} {}: {e}", path.display()),
    }
}

fn scope_fail(path: &str, why: String) -> ReplyError {
    ReplyError {
        kind: ErrorKind::Scope,
        message: format!("path {path:?} is outside the workspace root: {why}"),
    }
}

/// Refuse `path` unless it stays under `scope` once every symlink of its longest existing
/// prefix is followed. A dangling symlink is refused: writing through it would create its
/// target wherever that points.
pub(crate) fn check_scope(path: &str, scope: &str) -> Result<PathBuf, ReplyError> {
    let given = Path::new(path);
    if !given.is_absolute() {
        return Err(scope_fail(path, "not an absolute path".into()));
    }
    let root =
        std::fs::canonicalize(scope).map_err(|e| io_fail("resolve", Path::new(scope), &e))?;
    let mut prefix = given.to_path_buf();
    let mut rest = Vec::new();
    while std::fs::symlink_metadata(&prefix).is_err() {
        let Some(name) = prefix.file_name() else {
            return Err(scope_fail(path, "no part of the path exists".into()));
        };
        rest.push(name.to_os_string());
        if !prefix.pop() {
            return Err(scope_fail(path, "no part of the path exists".into()));
        }
    }
    let mut resolved = std::fs::canonicalize(&prefix).map_err(|e| {
        scope_fail(
            path,
            format!(
                "{} cannot be resolved (a dangling or looping symlink?): {e}",
                prefix.display()
            ),
        )
    })?;
    if !resolved.starts_with(&root) {
        return Err(scope_fail(
            path,
            format!("{} resolves to {}", prefix.display(), resolved.display()),
        ));
    }
    for name in rest.iter().rev() {
        if name == ".." || name == "." {
            return Err(scope_fail(path, "`..` in the path".into()));
        }
        resolved.push(name);
    }
    Ok(resolved)
}

fn scoped(path: &str, scope: Option<&str>) -> Result<PathBuf, ReplyError> {
    match scope {
        Some(scope) => check_scope(path, scope),
        None => Ok(PathBuf::from(path)),
    }
}

/// The most one `read_file` answers with: the server holds a file whole to send it, and the
/// trial's memory limit is the server's too.
pub(crate) const READ_FILE_MAX: u64 = 64 << 20;

/// The most one `read_chunk` answers with.
pub(crate) const CHUNK_MAX: u64 = 8 << 20;

pub(crate) fn read_file(path: &str, scope: Option<&str>) -> Result<Reply, ReplyError> {
    let path = scoped(path, scope)?;
    // A fifo would block the server with no writer, a device has no end.
    let meta = std::fs::metadata(&path).map_err(|e| io_fail("stat", &path, &e))?;
    if !meta.is_file() && !meta.is_dir() {
        return Err(not_regular(&path));
    }
    if meta.len() > READ_FILE_MAX {
        return Err(ReplyError {
            kind: ErrorKind::InvalidInput,
            message: format!(
                "{} is {} MiB, over the {} MiB read whole; read it in parts (head, tail, sed -n)",
                path.display(),
                meta.len() >> 20,
                READ_FILE_MAX >> 20
            ),
        });
    }
    let bytes = std::fs::read(&path).map_err(|e| io_fail("read", &path, &e))?;
    Ok(Reply::File {
        data_b64: protocol::encode(&bytes),
    })
}

fn not_regular(path: &Path) -> ReplyError {
    ReplyError {
        kind: ErrorKind::InvalidInput,
        message: format!("{} is not a regular file", path.display()),
    }
}

/// Up to `len` (at most [`CHUNK_MAX`]) bytes of a regular file from `offset`. Opened without
/// blocking (a fifo put in its place between calls has no writer) and checked after opening,
/// so what is read is what was checked.
pub(crate) fn read_chunk(path: &str, offset: u64, len: u64) -> Result<Reply, ReplyError> {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::OpenOptionsExt;
    let path = Path::new(path);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| io_fail("open", path, &e))?;
    let meta = file.metadata().map_err(|e| io_fail("stat", path, &e))?;
    if !meta.is_file() {
        return Err(not_regular(path));
    }
    file.seek(SeekFrom::Start(offset))
        .map_err(|e| io_fail("seek", path, &e))?;
    let mut bytes = Vec::new();
    file.take(len.min(CHUNK_MAX))
        .read_to_end(&mut bytes)
        .map_err(|e| io_fail("read", path, &e))?;
    Ok(Reply::Chunk {
        data_b64: protocol::encode(&bytes),
        size: meta.len(),
    })
}

pub(crate) fn write_file(
    path: &str,
    data_b64: &str,
    scope: Option<&str>,
) -> Result<Reply, ReplyError> {
    let path = scoped(path, scope)?;
    let bytes = protocol::decode(data_b64).map_err(|message| ReplyError {
        kind: ErrorKind::InvalidInput,
        message,
    })?;
    if let Some(parent) = path.parent() {
        create_dirs(parent).map_err(|e| io_fail("create directory", parent, &e))?;
    }
    let existed = std::fs::symlink_metadata(&path).is_ok();
    std::fs::write(&path, bytes).map_err(|e| io_fail("write", &path, &e))?;
    if !existed {
        created(&path).map_err(|e| io_fail("hand to root", &path, &e))?;
    }
    Ok(Reply::Done)
}

pub(crate) fn list_dir(path: &str, scope: Option<&str>) -> Result<Reply, ReplyError> {
    let path = scoped(path, scope)?;
    let dir = std::fs::read_dir(&path).map_err(|e| io_fail("list", &path, &e))?;
    let mut entries = Vec::new();
    for entry in dir {
        let entry = entry.map_err(|e| io_fail("list", &path, &e))?;
        let entry_path = entry.path();
        let link_meta =
            std::fs::symlink_metadata(&entry_path).map_err(|e| io_fail("stat", &entry_path, &e))?;
        let is_symlink = link_meta.file_type().is_symlink();
        // A symlink reports what it points at; a dangling one reports itself.
        let meta = if is_symlink {
            std::fs::metadata(&entry_path).unwrap_or(link_meta)
        } else {
            link_meta
        };
        entries.push(DirEntry {
            name: entry.file_name().to_string_lossy().into_owned(),
            is_dir: meta.is_dir(),
            is_symlink,
            is_file: meta.is_file(),
            len: meta.len(),
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Reply::Dir { entries })
}

/// Copy a staged inbox item into place.
pub(crate) fn install(from: &str, to: &str, merge: bool) -> Result<Reply, ReplyError> {
    if from.contains('/') || from.starts_with('.') {
        return Err(ReplyError {
            kind: ErrorKind::InvalidInput,
            message: format!("bad inbox item {from:?}"),
        });
    }
    let src = Path::new(INBOX).join(from);
    let dst = Path::new(to);
    if !dst.is_absolute() {
        return Err(ReplyError {
            kind: ErrorKind::InvalidInput,
            message: format!("destination {to:?} is not absolute"),
        });
    }
    let src_meta = std::fs::symlink_metadata(&src).map_err(|e| io_fail("stat", &src, &e))?;
    if !merge || !src_meta.is_dir() {
        remove_any(dst).map_err(|e| io_fail("replace", dst, &e))?;
    }
    if let Some(parent) = dst.parent() {
        create_dirs(parent).map_err(|e| io_fail("create directory", parent, &e))?;
    }
    copy_tree(&src, dst).map_err(|e| io_fail("copy into", dst, &e))?;
    // What was copied (a merge leaves the rest of the folder's owners alone).
    if GIVE_TO_ROOT.load(Ordering::Relaxed) {
        for entry in walkdir::WalkDir::new(&src).follow_links(false) {
            let entry = entry.map_err(|e| io_fail("walk", &src, &io::Error::other(e)))?;
            // `dst.join("")` would end in `/`, which follows a link.
            let at = match entry.path().strip_prefix(&src) {
                Ok(rel) if !rel.as_os_str().is_empty() => dst.join(rel),
                _ => dst.to_path_buf(),
            };
            created(&at).map_err(|e| io_fail("hand to root", &at, &e))?;
        }
    }
    Ok(Reply::Done)
}

fn remove_any(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
    }
}

/// Copy a file, symlink or directory tree (modes and symlinks kept; a directory merges into
/// an existing one). Files are hard-linked when `link` allows it and the filesystems agree.
pub(crate) fn copy_tree_with(src: &Path, dst: &Path, link: bool) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(src)?;
    let kind = meta.file_type();
    if kind.is_symlink() {
        remove_any(dst)?;
        std::os::unix::fs::symlink(std::fs::read_link(src)?, dst)
    } else if kind.is_dir() {
        match std::fs::symlink_metadata(dst) {
            Ok(existing) if existing.is_dir() => {}
            Ok(_) => {
                std::fs::remove_file(dst)?;
                std::fs::create_dir(dst)?;
            }
            Err(_) => std::fs::create_dir(dst)?,
        }
        std::fs::set_permissions(
            dst,
            std::fs::Permissions::from_mode(meta.permissions().mode()),
        )?;
        let mut names: Vec<_> = std::fs::read_dir(src)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<io::Result<_>>()?;
        names.sort();
        for name in names {
            copy_tree_with(&src.join(&name), &dst.join(&name), link)?;
        }
        Ok(())
    } else {
        remove_any(dst)?;
        if link && std::fs::hard_link(src, dst).is_ok() {
            return Ok(());
        }
        std::fs::copy(src, dst)?;
        Ok(())
    }
}

/// Copy a file, symlink or directory tree from `src` to `dst`, keeping modes and symlinks; a
/// directory merges into an existing one. Never hard-links.
pub fn copy_tree(src: &Path, dst: &Path) -> io::Result<()> {
    copy_tree_with(src, dst, false)
}

/// Empty a folder in place (it may be bind-mounted somewhere); links inside are removed, never
/// followed.
pub fn clear_dir(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() && !path.is_symlink() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_refuses_symlink_escapes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("out")).unwrap();
        let scope = root.to_str().unwrap();
        assert!(check_scope(&format!("{scope}/a/b"), scope).is_ok());
        let err = check_scope(&format!("{scope}/out/passwd"), scope).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Scope);
    }

    #[test]
    fn copy_tree_merges_and_keeps_modes() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::fs::write(src.join("sub/run.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(
            src.join("sub/run.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let dst = dir.path().join("dst");
        std::fs::create_dir_all(&dst).unwrap();
        std::fs::write(dst.join("keep"), "k").unwrap();
        copy_tree(&src, &dst).unwrap();
        assert!(dst.join("keep").exists());
        let mode = std::fs::metadata(dst.join("sub/run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
    }
}
