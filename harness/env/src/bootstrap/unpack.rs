//! Unpacking the downloaded `.deb` files into the root on the host, with no maintainer
//! script run: merged `/usr` first, then `dpkg-deb --fsys-tarfile | tar` per package (the
//! slim filter's paths left out), after the staging caches are gone.

use std::ffi::OsString;
use std::io;
use std::path::Path;
use std::process::{Output, Stdio};

use tokio::process::{Child, Command};

use super::apt::{describe, render, stderr_tail};
use super::root::{Root, io_err, make_dir};
use super::{BootstrapError, HOST_PATH, SLIM_EXCLUDES};

pub(super) async fn clear_staging_caches(root: &Root) -> Result<(), BootstrapError> {
    let lists = root.host("/var/lib/apt/lists");
    let mut entries = tokio::fs::read_dir(&lists)
        .await
        .map_err(io_err("read", &lists))?;
    while let Some(entry) = entries.next_entry().await.map_err(io_err("read", &lists))? {
        let path = entry.path();
        let is_dir = entry
            .file_type()
            .await
            .map_err(io_err("inspect", &path))?
            .is_dir();
        if is_dir {
            tokio::fs::remove_dir_all(&path)
                .await
                .map_err(io_err("remove", &path))?;
        } else {
            tokio::fs::remove_file(&path)
                .await
                .map_err(io_err("remove", &path))?;
        }
    }
    make_dir(&root.host("/var/lib/apt/lists/partial"), 0o755).await?;
    for cache in [
        "/var/cache/apt/pkgcache.bin",
        "/var/cache/apt/srcpkgcache.bin",
    ] {
        let path = root.host(cache);
        match tokio::fs::remove_file(&path).await {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(io_err("remove", &path)(e));
            }
            _ => {}
        }
    }
    Ok(())
}

/// bookworm's images are merged-/usr: the top-level directories are symlinks into /usr, made
/// before anything is unpacked so that every package's `/bin/...` lands in `/usr/bin`.
pub(super) async fn merged_usr(root: &Root) -> Result<(), BootstrapError> {
    for dir in ["bin", "sbin", "lib", "lib64"] {
        make_dir(&root.host(&format!("/usr/{dir}")), 0o755).await?;
        let link = root.host(dir);
        tokio::fs::symlink(format!("usr/{dir}"), &link)
            .await
            .map_err(io_err("create the symlink", &link))?;
    }
    Ok(())
}

/// The paths dpkg will filter out in the image, as GNU tar exclusion patterns (unanchored,
/// so `usr/share/doc/*` matches the archive's `./usr/share/doc/...`). Unpacking them only for
/// dpkg to leave them behind as files nobody owns would defeat the filter; the exceptions
/// (copyright files) are written by dpkg in the finish script.
pub(super) fn tar_excludes() -> Vec<String> {
    SLIM_EXCLUDES
        .iter()
        .map(|p| format!("--exclude={}", p.trim_start_matches('/')))
        .collect()
}

/// Merged `/usr`, then every `.deb` (paths inside the image), the essential set first.
pub(super) async fn unpack_all(
    root: &Root,
    essential: &[String],
    rest: &[String],
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<(), BootstrapError> {
    let total = essential.len() + rest.len();
    progress(&format!("bootstrap: unpacking {total} packages"));
    merged_usr(root).await?;
    for (i, deb) in essential.iter().chain(rest).enumerate() {
        extract(root, deb).await?;
        let done = i + 1;
        if done < total && (done * 4 / total) != (i * 4 / total) {
            progress(&format!("bootstrap: unpacked {done}/{total} packages"));
        }
    }
    Ok(())
}

/// Unpack one `.deb` (path inside the image) into the root, keeping the merged-/usr symlinks.
pub(super) async fn extract(root: &Root, deb: &str) -> Result<(), BootstrapError> {
    let path = root.host(deb);
    let deb_label = format!("dpkg-deb --fsys-tarfile {}", path.display());
    let (unpack, pipe) = spawn_fsys_tarfile(&path, &deb_label)?;
    let tar_args = tar_args(root);
    let tar_label = render("tar", &tar_args);
    let mut tar = Command::new("tar");
    tar.env_clear()
        .env("PATH", HOST_PATH)
        .env("LC_ALL", "C")
        .args(&tar_args)
        .stdin(pipe)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let tar = tar.spawn().map_err(spawn_failed(&tar_label))?;
    let (unpacked, extracted) = tokio::join!(unpack.wait_with_output(), tar.wait_with_output());
    // tar first: when it fails, dpkg-deb's broken pipe is only a consequence.
    let extracted = extracted.map_err(spawn_failed(&tar_label))?;
    succeeded(&extracted, format!("{deb_label} | {tar_label}"))?;
    let unpacked = unpacked.map_err(spawn_failed(&deb_label))?;
    succeeded(&unpacked, deb_label)
}

/// `dpkg-deb --fsys-tarfile` of one package, and its output as the next command's input.
fn spawn_fsys_tarfile(path: &Path, label: &str) -> Result<(Child, Stdio), BootstrapError> {
    let mut unpack = Command::new("dpkg-deb");
    unpack
        .env_clear()
        .env("PATH", HOST_PATH)
        .env("LC_ALL", "C")
        .arg("--fsys-tarfile")
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut unpack = unpack.spawn().map_err(spawn_failed(label))?;
    let pipe: Stdio = match unpack.stdout.take() {
        Some(out) => out.try_into().map_err(spawn_failed(label))?,
        None => {
            return Err(BootstrapError::Spawn {
                command: label.to_string(),
                source: io::Error::other("no stdout pipe"),
            });
        }
    };
    Ok((unpack, pipe))
}

/// tar's arguments to extract a package's file system tree into the root.
fn tar_args(root: &Root) -> Vec<OsString> {
    let mut tar_args: Vec<OsString> = vec![
        "--extract".into(),
        "--file=-".into(),
        OsString::from("--directory"),
        root.path.clone().into_os_string(),
        // Existing directory symlinks (bin -> usr/bin) stay symlinks.
        "--keep-directory-symlink".into(),
        // Owners as numbers: the image's ids, not whatever the host's names map to.
        "--numeric-owner".into(),
        // In the rootless namespace the image's ids other than root are not mapped (only
        // container ids are): the files are the user's, and the finish script's dpkg, which
        // installs every package again inside a sandbox, gives them their owners.
        if crate::rootless::active() {
            "--no-same-owner".into()
        } else {
            "--same-owner".into()
        },
        "--same-permissions".into(),
        "--warning=no-timestamp".into(),
    ];
    tar_args.extend(tar_excludes().into_iter().map(OsString::from));
    tar_args
}

fn spawn_failed(label: &str) -> impl FnOnce(io::Error) -> BootstrapError {
    let command = label.to_string();
    move |source| BootstrapError::Spawn { command, source }
}

/// A finished command's failure, named by `command` with its stderr's tail.
fn succeeded(output: &Output, command: String) -> Result<(), BootstrapError> {
    if output.status.success() {
        return Ok(());
    }
    Err(BootstrapError::Failed {
        command,
        status: describe(output.status),
        stderr: stderr_tail(&String::from_utf8_lossy(&output.stderr)),
    })
}
