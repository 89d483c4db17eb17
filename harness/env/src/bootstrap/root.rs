//! The new root as the bootstrap writes into it: a checked path (it goes into apt's
//! configuration and a shell hook unquoted), and folders and files made with explicit modes,
//! so the image does not depend on the umask of whoever runs GEODE.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::{ARCH, BootstrapError};

/// The root as a path on the host, and the same as text for apt's configuration and the
/// shell (checked to need no quoting in either).
pub(super) struct Root {
    pub(super) path: PathBuf,
    pub(super) text: String,
}

impl Root {
    pub(super) fn new(path: &Path) -> Result<Root, BootstrapError> {
        let bad = |message: &str| BootstrapError::BadRoot {
            path: path.to_path_buf(),
            message: message.to_string(),
        };
        if !path.is_absolute() {
            return Err(bad("must be an absolute path"));
        }
        let text = path
            .to_str()
            .ok_or_else(|| bad("must be valid UTF-8"))?
            .trim_end_matches('/')
            .to_string();
        if text.is_empty() {
            return Err(bad("must not be the host's /"));
        }
        // The path goes into apt's configuration (quoted strings), a deb822 `Signed-By`
        // (whitespace and commas separate values there) and a shell hook.
        if !text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+@~".contains(c))
        {
            return Err(bad(
                "may hold only letters, digits and / . _ - + @ ~ (it is written into apt's \
                 configuration)",
            ));
        }
        Ok(Root {
            path: PathBuf::from(&text),
            text,
        })
    }

    /// An absolute path inside the image, as seen from the host.
    pub(super) fn host(&self, inside: &str) -> PathBuf {
        self.path.join(inside.trim_start_matches('/'))
    }
}

pub(super) async fn preflight(rootfs: &Path) -> Result<(), BootstrapError> {
    if !nix::unistd::geteuid().is_root() {
        return Err(BootstrapError::Unsupported(
            "must run as root (unpacked files keep their owners; apt drops privileges)".into(),
        ));
    }
    if std::env::consts::ARCH != "x86_64" {
        return Err(BootstrapError::Unsupported(format!(
            "builds {ARCH} roots only, and this host is {}",
            std::env::consts::ARCH
        )));
    }
    let mut entries = tokio::fs::read_dir(rootfs)
        .await
        .map_err(io_err("read", rootfs))?;
    if entries
        .next_entry()
        .await
        .map_err(io_err("read", rootfs))?
        .is_some()
    {
        return Err(BootstrapError::BadRoot {
            path: rootfs.to_path_buf(),
            message: "must be an empty directory".into(),
        });
    }
    Ok(())
}

pub(super) fn io_err(
    action: &'static str,
    path: &Path,
) -> impl FnOnce(io::Error) -> BootstrapError {
    let path = path.to_path_buf();
    move |source| BootstrapError::Io {
        action,
        path,
        source,
    }
}

/// `mkdir -p` with explicit modes (0755 for the parents it creates): the image must not
/// depend on the umask of whoever runs GEODE.
pub(super) async fn make_dir(path: &Path, mode: u32) -> Result<(), BootstrapError> {
    let mut missing = Vec::new();
    let mut current = Some(path);
    while let Some(dir) = current {
        if tokio::fs::symlink_metadata(dir).await.is_ok() {
            break;
        }
        missing.push(dir);
        current = dir.parent();
    }
    for dir in missing.iter().rev() {
        match tokio::fs::create_dir(dir).await {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                return Err(io_err("create", dir)(e));
            }
            _ => {}
        }
        tokio::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
            .await
            .map_err(io_err("set the mode of", dir))?;
    }
    tokio::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .await
        .map_err(io_err("set the mode of", path))
}

pub(super) async fn write_file(
    path: &Path,
    content: &[u8],
    mode: u32,
) -> Result<(), BootstrapError> {
    if let Some(parent) = path.parent()
        && tokio::fs::symlink_metadata(parent).await.is_err()
    {
        make_dir(parent, 0o755).await?;
    }
    // A symlink there (none is expected) must not send the write out of the root.
    if let Ok(meta) = tokio::fs::symlink_metadata(path).await
        && meta.file_type().is_symlink()
    {
        tokio::fs::remove_file(path)
            .await
            .map_err(io_err("remove", path))?;
    }
    tokio::fs::write(path, content)
        .await
        .map_err(io_err("write", path))?;
    tokio::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .await
        .map_err(io_err("set the mode of", path))
}
