//! Building a `debian:SUITE-slim` root file system without an image registry.
//!
//! Trials run on Debian-based images, but Docker Hub is out of reach from the machines GEODE
//! runs on, while the Debian archive is not. A fresh Debian host has `apt`, `dpkg`, `gpgv` and
//! the archive keyring, but neither `debootstrap` nor `mmdebstrap`, and GEODE must not install
//! anything on the host. So the image is rebuilt the way mmdebstrap does it: the host's own apt
//! is pointed at the new root and does the networking and all the checking, dpkg inside the new
//! root does the installing.
//!
//! Stage 1 ([`stage`], on the host, as root, with the network):
//!
//! 1. An apt tree inside the root (`etc/apt`, `var/lib/apt`, `var/cache/apt`, an empty dpkg
//!    database), the host's archive keyring copied to `usr/share/keyrings`, and a private apt
//!    configuration handed to apt through `APT_CONFIG`. It has to be `APT_CONFIG` and not
//!    `-o` options: apt reads `Dir::Etc::Parts` (`/etc/apt/apt.conf.d`) *before* it looks at its
//!    command line, so with `-o Dir=...` alone the host's snippets still apply, hooks
//!    included (on a typical host: appstream's `appstreamcli refresh` after every update,
//!    Docker-style `docker-clean`'s `rm -f /var/cache/apt/archives/*.deb` after dpkg runs,
//!    `Dir::Cache::pkgcache ""`). With `Dir` set in the `APT_CONFIG` file, every later relative
//!    path resolves inside the root, and the absolute ones (`Dir::State::Status`, the sources,
//!    the trusted keys, the logs) are pinned there too.
//! 2. `apt-get update`: apt checks the `InRelease` signature with `gpgv` against the copied
//!    keyring (the only one it may use: `Signed-By`). Then the package set of a minbase / slim
//!    image, read from the downloaded `Packages` indexes: every `Essential: yes` package, every
//!    `Priority: required` one, and `apt`. apt resolves dependencies and downloads; each `.deb`
//!    is checked against the SHA256 of the signed index. The downloading runs are
//!    `apt-get install` with `Debug::pkgDpkgPm` (apt prints the dpkg calls instead of making
//!    them) and a `DPkg::Pre-Install-Pkgs` hook that records the `.deb` files in apt's install
//!    order: once for the essential set alone, once for everything. That order is what the
//!    finish script installs in, as mmdebstrap does.
//! 3. Merged `/usr` (`bin -> usr/bin` and friends, as bookworm's official images have), then
//!    every `.deb` unpacked with `dpkg-deb --fsys-tarfile | tar --keep-directory-symlink`
//!    (`dpkg-deb -x` would replace the `bin` symlink with a directory: Debian bug #989602). No
//!    maintainer script runs on the host.
//! 4. The configuration the official images carry (deb822 sources, the slim dpkg path filter,
//!    `policy-rc.d`, the `docker-*` apt snippets), and the finish script.
//!
//! Stage 2 (the finish script, run by the caller inside the root as root, with `/proc` and
//! `/dev`, without network): `dpkg --install --force-depends` of the essential set, then of
//! the rest, a check that nothing was left unconfigured, `apt-get clean`, no lists, no
//! `.deb`, and it removes itself.
//!
//! The result is slim for `debian:SUITE` too: the non-slim image only adds documentation and
//! manual pages.
//!
//! The stages' parts live beside this module: [`root`] (the checked path and file making),
//! [`apt`] (the host's apt on the root), [`selection`] (which packages), [`unpack`] (the
//! `.deb` files into the root) and [`image_files`] (the image's own configuration and the
//! finish script).

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use self::apt::{Apt, lay_out};
use self::image_files::{finish_script, read_version_id, write_image_config};
use self::root::{Root, preflight, write_file};
use self::selection::{download_size, pinned_versions, scan_indexes};
use self::unpack::{clear_staging_caches, unpack_all};

mod apt;
mod image_files;
mod root;
mod selection;
#[cfg(test)]
mod tests;
mod unpack;

/// The only architecture built: the host's (its binaries run the maintainer scripts).
pub const ARCH: &str = "amd64";
/// Inside the root: where the finish script lives, with everything else stage 1 needs only
/// until then. The finish script removes the folder.
pub const WORK_DIR: &str = "/.geode-bootstrap";
/// Inside the root: the finish script that stage 2 runs (see [`Staged::finish_script`]).
pub const FINISH_SCRIPT: &str = "/.geode-bootstrap/finish.sh";

const HOST_KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
/// Where the image keeps the keyring (the `debian-archive-keyring` package ships the same
/// file later; the copy is what the staging `apt-get update` trusts).
const IMAGE_KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
const ARCHIVES: &str = "/var/cache/apt/archives";
const HOST_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

/// What the slim images leave out (dpkg `path-exclude`), and the exceptions (`path-include`,
/// evaluated after the excludes): licences stay, and the few locale files that are data
/// rather than translations.
const SLIM_EXCLUDES: &[&str] = &[
    "/usr/share/doc/*",
    "/usr/share/groff/*",
    "/usr/share/info/*",
    "/usr/share/linda/*",
    "/usr/share/lintian/overrides/*",
    "/usr/share/locale/*",
    "/usr/share/man/*",
];
const SLIM_INCLUDES: &[&str] = &[
    "/usr/share/doc/*/copyright",
    "/usr/share/locale/all_languages",
    "/usr/share/locale/currency/*",
    "/usr/share/locale/l10n/*",
    "/usr/share/locale/languages",
    "/usr/share/locale/locale.alias",
];

/// A Debian release to build, and where from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebianSuite {
    /// The codename: `bookworm`, `trixie`.
    pub suite: String,
    /// The main archive, e.g. `http://deb.debian.org/debian`.
    pub mirror: String,
    /// The security archive, e.g. `http://deb.debian.org/debian-security`. `Some` marks a
    /// released suite: then `SUITE-updates` (from `mirror`) and `SUITE-security` (from here)
    /// are used for the build and listed in the image's sources, exactly as in the official
    /// image. That matters twice: the official image is built with those updates applied, so
    /// without them the versions (libc6, openssl, ...) would lag behind it; and a later
    /// `apt-get install` in a Dockerfile must see the same archive the official image sees,
    /// or it resolves against older versions than the ones installed. `None` for a suite
    /// without either (sid).
    pub security: Option<String>,
}

/// What stage 1 left in the root.
#[derive(Debug, Clone, PartialEq)]
pub struct Staged {
    /// The root folder on the host that stage 1 unpacked into.
    pub rootfs: PathBuf,
    /// Absolute path *inside* the root of a shell script that, run as root inside it (chroot,
    /// `/proc` and `/dev` mounted, no network needed), installs the packages, cleans up and
    /// removes itself: `/bin/sh /.geode-bootstrap/finish.sh`.
    pub finish_script: String,
    /// `name=version` of every package the finish script installs, sorted by name.
    pub packages: Vec<String>,
    /// `VERSION_ID` of the unpacked `os-release` (`12`).
    pub version_id: String,
}

/// Failures of stage 1. Each one names the command (with its stderr's tail) or the file.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// This host cannot bootstrap at all (not root, another architecture ...).
    #[error("debian bootstrap: {0}")]
    Unsupported(String),
    /// The root folder given is unfit (not an empty directory ...).
    #[error("debian bootstrap: root {}: {message}", .path.display())]
    BadRoot {
        /// The root folder.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A file system operation failed.
    #[error("debian bootstrap: cannot {action} {}: {source}", .path.display())]
    Io {
        /// What was being done (`read`, ...), as the message words it.
        action: &'static str,
        /// The file or folder concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A command could not be started.
    #[error("debian bootstrap: `{command}` could not be started: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// Why it did not start.
        #[source]
        source: io::Error,
    },
    /// A command ran and failed.
    #[error("debian bootstrap: `{command}` failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// How it ended (exit code or signal).
        status: String,
        /// The tail of its stderr.
        stderr: String,
    },
    /// A file the bootstrap reads (package lists, os-release ...) lacks what it needs.
    #[error("debian bootstrap: {}: {message}", .path.display())]
    Invalid {
        /// The file or folder concerned.
        path: PathBuf,
        /// What is missing or wrong.
        message: String,
    },
}

/// The suite behind an image reference GEODE can build itself: `debian:bookworm`,
/// `debian:bookworm-slim`, `debian:12`, `debian:12-slim`, and trixie / 13 likewise
/// (`library/debian` and `docker.io/library/debian` too). `None` for anything else: other
/// distributions cannot be bootstrapped from the Debian archive, and moving or dated tags
/// (`stable`, `bookworm-20240612`) would promise a particular build that this is not.
pub fn suite_for(reference_repo: &str, tag: &str) -> Option<DebianSuite> {
    let repo = reference_repo
        .trim_start_matches("docker.io/")
        .trim_start_matches("index.docker.io/")
        .trim_start_matches("registry-1.docker.io/")
        .trim_start_matches("library/");
    if repo != "debian" {
        return None;
    }
    let release = tag.strip_suffix("-slim").unwrap_or(tag);
    let codename = match release {
        "bookworm" | "12" => "bookworm",
        "trixie" | "13" => "trixie",
        _ => return None,
    };
    Some(DebianSuite {
        suite: codename.to_string(),
        mirror: "http://deb.debian.org/debian".to_string(),
        security: Some("http://deb.debian.org/debian-security".to_string()),
    })
}

/// Run stage 1 into `rootfs` (an empty directory the caller created). Needs root, an amd64
/// host and the network; for bookworm, about 30 MB of downloads and a minute at most on a
/// good connection (the finish script then takes about as long again).
pub async fn stage(
    suite: &DebianSuite,
    rootfs: &Path,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<Staged, BootstrapError> {
    let started = Instant::now();
    let root = Root::new(rootfs)?;
    preflight(&root.path).await?;
    let extra = match &suite.security {
        Some(_) => format!(", with {0}-updates and {0}-security", suite.suite),
        None => String::new(),
    };
    progress(&format!(
        "bootstrap: building debian {} ({ARCH}) from {}{extra}; this takes a minute or two",
        suite.suite, suite.mirror
    ));

    lay_out(&root, suite).await?;
    let apt = Apt::new(&root).await?;

    progress("bootstrap: fetching package indexes (signatures checked by gpgv)");
    apt.run(&["update", "--error-on=any"], &mut |_| {}).await?;

    let (essential_debs, rest_debs) = download(&root, &apt, progress).await?;
    let packages = pinned_versions(&root, essential_debs.iter().chain(&rest_debs))?;
    // The indexes and apt's caches (over 100 MB) were for the host's apt only; the image
    // fetches its own with its first `apt-get update`.
    clear_staging_caches(&root).await?;

    let total = essential_debs.len() + rest_debs.len();
    unpack_all(&root, &essential_debs, &rest_debs, progress).await?;

    write_image_config(&root, suite).await?;
    write_file(
        &root.host(FINISH_SCRIPT),
        finish_script(&essential_debs, &rest_debs).as_bytes(),
        0o755,
    )
    .await?;
    let version_id = read_version_id(&root).await?;
    progress(&format!(
        "bootstrap: staged debian {version_id} ({total} packages) in {:.0}s; installing them \
         runs inside the sandbox",
        started.elapsed().as_secs_f64()
    ));
    Ok(Staged {
        rootfs: root.path.clone(),
        finish_script: FINISH_SCRIPT.to_string(),
        packages,
        version_id,
    })
}

/// Choose the packages and download them: the `.deb` files (paths inside the image) of the
/// essential set, then of the rest, each in apt's install order.
async fn download(
    root: &Root,
    apt: &Apt,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<(Vec<String>, Vec<String>), BootstrapError> {
    let selection = scan_indexes(root).await?;
    let (essential_request, all_request) = selection.requests()?;
    progress(&format!(
        "bootstrap: {} essential and {} required packages, plus apt; resolving dependencies",
        selection.essential.len(),
        selection.required.difference(&selection.essential).count()
    ));

    let plan = apt
        .run_args(
            &[
                "install",
                "--print-uris",
                "-qq",
                "-y",
                "--no-install-recommends",
            ],
            &all_request,
            &mut |_| {},
        )
        .await?;
    let (count, bytes) = download_size(&plan);
    progress(&format!(
        "bootstrap: downloading {count} packages ({} MB)",
        (bytes + 500_000) / 1_000_000
    ));
    let mut fetched = 0usize;
    let mut next_report = 1usize;
    let mut on_line = |line: &str| {
        if line.starts_with("Get:") {
            fetched += 1;
            if count > 0 && fetched * 4 >= next_report * count && next_report < 4 {
                progress(&format!("bootstrap: downloaded {fetched}/{count} packages"));
                next_report += 1;
            }
        }
    };
    let essential_debs = apt
        .download_in_order(&essential_request, "essential.order", &mut on_line)
        .await?;
    let all_debs = apt
        .download_in_order(&all_request, "all.order", &mut on_line)
        .await?;
    let in_essential: HashSet<&String> = essential_debs.iter().collect();
    let rest_debs: Vec<String> = all_debs
        .iter()
        .filter(|deb| !in_essential.contains(deb))
        .cloned()
        .collect();
    Ok((essential_debs, rest_debs))
}
