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

use std::collections::{BTreeSet, HashSet};
use std::ffi::OsString;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Instant;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;

use super::dockerfile::shell_quote;

/// The only architecture built: the host's (its binaries run the maintainer scripts).
pub const ARCH: &str = "amd64";
/// Inside the root: where the finish script lives, with everything else stage 1 needs only
/// until then. The finish script removes the folder.
pub const WORK_DIR: &str = "/.geode-bootstrap";
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
    #[error("debian bootstrap: {0}")]
    Unsupported(String),
    #[error("debian bootstrap: root {}: {message}", .path.display())]
    BadRoot { path: PathBuf, message: String },
    #[error("debian bootstrap: cannot {action} {}: {source}", .path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("debian bootstrap: `{command}` could not be started: {source}")]
    Spawn {
        command: String,
        #[source]
        source: io::Error,
    },
    #[error("debian bootstrap: `{command}` failed ({status}): {stderr}")]
    Failed {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("debian bootstrap: {}: {message}", .path.display())]
    Invalid { path: PathBuf, message: String },
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

    let selection = scan_indexes(&root).await?;
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
    let mut packages = Vec::new();
    for deb in essential_debs.iter().chain(&rest_debs) {
        let file = deb.rsplit('/').next().unwrap_or(deb);
        let (name, version) = parse_deb_filename(file).ok_or_else(|| BootstrapError::Invalid {
            path: root.host(deb),
            message: "not a name_version_arch.deb file name".into(),
        })?;
        packages.push(format!("{name}={version}"));
    }
    packages.sort();
    // The indexes and apt's caches (over 100 MB) were for the host's apt only; the image
    // fetches its own with its first `apt-get update`.
    clear_staging_caches(&root).await?;

    let total = essential_debs.len() + rest_debs.len();
    progress(&format!("bootstrap: unpacking {total} packages"));
    merged_usr(&root).await?;
    for (i, deb) in essential_debs.iter().chain(&rest_debs).enumerate() {
        extract(&root, deb).await?;
        let done = i + 1;
        if done < total && (done * 4 / total) != (i * 4 / total) {
            progress(&format!("bootstrap: unpacked {done}/{total} packages"));
        }
    }

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

/// The root as a path on the host, and the same as text for apt's configuration and the
/// shell (checked to need no quoting in either).
struct Root {
    path: PathBuf,
    text: String,
}

impl Root {
    fn new(path: &Path) -> Result<Root, BootstrapError> {
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
    fn host(&self, inside: &str) -> PathBuf {
        self.path.join(inside.trim_start_matches('/'))
    }
}

async fn preflight(rootfs: &Path) -> Result<(), BootstrapError> {
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

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> BootstrapError {
    let path = path.to_path_buf();
    move |source| BootstrapError::Io {
        action,
        path,
        source,
    }
}

/// `mkdir -p` with explicit modes (0755 for the parents it creates): the image must not
/// depend on the umask of whoever runs GEODE.
async fn make_dir(path: &Path, mode: u32) -> Result<(), BootstrapError> {
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

async fn write_file(path: &Path, content: &[u8], mode: u32) -> Result<(), BootstrapError> {
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

/// The apt tree, an empty dpkg database, the keyring, and the sources the host's apt uses.
async fn lay_out(root: &Root, suite: &DebianSuite) -> Result<(), BootstrapError> {
    // The caller's directory may come from mkdtemp (0700); the image's / is 0755.
    make_dir(&root.path, 0o755).await?;
    for dir in [
        "/etc/apt/apt.conf.d",
        "/etc/apt/preferences.d",
        "/etc/apt/sources.list.d",
        "/etc/apt/trusted.gpg.d",
        "/etc/dpkg/dpkg.cfg.d",
        "/var/lib/apt/lists/partial",
        "/var/cache/apt/archives/partial",
        "/var/lib/dpkg/info",
        "/var/lib/dpkg/updates",
        "/var/lib/dpkg/triggers",
        "/var/lib/dpkg/alternatives",
        "/var/log/apt",
        "/usr/share/keyrings",
        // Mount points for the finish script's /proc and /dev (base-files ships them too).
        "/dev",
        "/proc",
        "/sys",
        "/run",
        // Staging only: apt's configuration parts, preferences, sources and logs, kept out of
        // the image's /etc and /var/log.
        "/.geode-bootstrap/apt.conf.d",
        "/.geode-bootstrap/preferences.d",
        "/.geode-bootstrap/sources.list.d",
        "/.geode-bootstrap/log",
    ] {
        make_dir(&root.host(dir), 0o755).await?;
    }
    // Also the host apt's TMPDIR (gpgv's split signatures), which the `_apt` user writes.
    make_dir(&root.host("/tmp"), 0o1777).await?;
    for file in ["/var/lib/dpkg/status", "/var/lib/dpkg/available"] {
        write_file(&root.host(file), b"", 0o644).await?;
    }
    write_file(
        &root.host("/var/lib/dpkg/arch"),
        format!("{ARCH}\n").as_bytes(),
        0o644,
    )
    .await?;
    let keyring = root.host(IMAGE_KEYRING);
    tokio::fs::copy(HOST_KEYRING, &keyring)
        .await
        .map_err(io_err(
            "copy the archive keyring from",
            Path::new(HOST_KEYRING),
        ))?;
    let staging_keyring = format!("{}{IMAGE_KEYRING}", root.text);
    write_file(
        &root.host("/.geode-bootstrap/sources.list.d/debian.sources"),
        sources_deb822(suite, &staging_keyring).as_bytes(),
        0o644,
    )
    .await
}

/// The deb822 sources, `Signed-By` the given keyring (the staging copy on the host, the
/// image's own file in the image).
fn sources_deb822(suite: &DebianSuite, keyring: &str) -> String {
    let mut suites = suite.suite.clone();
    if suite.security.is_some() {
        suites.push_str(&format!(" {}-updates", suite.suite));
    }
    let mut text = format!(
        "Types: deb\nURIs: {}\nSuites: {suites}\nComponents: main\nSigned-By: {keyring}\n",
        suite.mirror
    );
    if let Some(security) = &suite.security {
        text.push_str(&format!(
            "\nTypes: deb\nURIs: {security}\nSuites: {}-security\nComponents: main\n\
             Signed-By: {keyring}\n",
            suite.suite
        ));
    }
    text
}

/// The host apt's whole configuration (given as `APT_CONFIG`, read before anything else).
/// Every path apt reads or writes is inside the root; `sandbox_as_root` when the `_apt`
/// user cannot reach the root (a folder under a 0700 home or temp directory).
fn apt_config(root: &str, sandbox_as_root: bool) -> String {
    let work = format!("{root}{WORK_DIR}");
    let mut lines = vec![
        "// GEODE debian bootstrap: the host's apt working on a new root. Staging only."
            .to_string(),
        format!("Dir \"{root}/\";"),
        format!("Dir::Etc \"{root}/etc/apt/\";"),
        // Read at start-up, right after this file: nothing of the host's /etc/apt, and not
        // the image's snippets either (their hooks are meant for apt inside the image).
        format!("Dir::Etc::Main \"{work}/apt.conf\";"),
        format!("Dir::Etc::Parts \"{work}/apt.conf.d/\";"),
        format!("Dir::Etc::Preferences \"{work}/preferences\";"),
        format!("Dir::Etc::PreferencesParts \"{work}/preferences.d/\";"),
        format!("Dir::Etc::SourceList \"{work}/sources.list\";"),
        format!("Dir::Etc::SourceParts \"{work}/sources.list.d/\";"),
        format!("Dir::Etc::Trusted \"{root}/etc/apt/trusted.gpg\";"),
        format!("Dir::Etc::TrustedParts \"{root}/etc/apt/trusted.gpg.d/\";"),
        format!("Dir::State \"{root}/var/lib/apt/\";"),
        // Absolute by default (/var/lib/dpkg/status), so not covered by `Dir`.
        format!("Dir::State::Status \"{root}/var/lib/dpkg/status\";"),
        format!("Dir::Cache \"{root}/var/cache/apt/\";"),
        format!("Dir::Log \"{work}/log/\";"),
        format!("APT::Architecture \"{ARCH}\";"),
        // Or apt asks the host's dpkg for its foreign architectures.
        format!("APT::Architectures {{ \"{ARCH}\"; }};"),
        "APT::Install-Recommends \"false\";".to_string(),
        "APT::Install-Suggests \"false\";".to_string(),
        "APT::Get::AllowUnauthenticated \"false\";".to_string(),
        "Acquire::AllowInsecureRepositories \"false\";".to_string(),
        "Acquire::AllowDowngradeToInsecureRepositories \"false\";".to_string(),
        "Acquire::Languages \"none\";".to_string(),
        // Plain `Packages` files, which stage 1 reads itself.
        "Acquire::GzipIndexes \"false\";".to_string(),
        "Acquire::Retries \"3\";".to_string(),
        "Dpkg::Use-Pty \"false\";".to_string(),
    ];
    if sandbox_as_root {
        lines.push("APT::Sandbox::User \"root\";".to_string());
    }
    lines.join("\n") + "\n"
}

/// The host's `apt-get`, on the root, with a pinned environment.
struct Apt {
    root: String,
    config: PathBuf,
}

impl Apt {
    async fn new(root: &Root) -> Result<Apt, BootstrapError> {
        let config = root.host("/.geode-bootstrap/apt.conf.staging");
        let apt = Apt {
            root: root.text.clone(),
            config,
        };
        write_file(&apt.config, apt_config(&root.text, false).as_bytes(), 0o644).await?;
        // apt downloads as `_apt` and refuses (with a warning, an error under
        // --error-on=any) when that user cannot reach the root: check first, as apt would.
        let partial = root.host("/var/lib/apt/lists/partial");
        let mut probe = apt.command("/usr/lib/apt/apt-helper");
        probe
            .arg("drop-privs")
            .arg("--")
            .arg("test")
            .arg("-r")
            .arg(&partial);
        probe.stdout(Stdio::null()).stderr(Stdio::null());
        let sandboxed = matches!(probe.status().await, Ok(status) if status.success());
        if !sandboxed {
            write_file(&apt.config, apt_config(&root.text, true).as_bytes(), 0o644).await?;
        }
        Ok(apt)
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.env_clear()
            .env("PATH", HOST_PATH)
            .env("LC_ALL", "C")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .env("APT_CONFIG", &self.config)
            .env("TMPDIR", format!("{}/tmp", self.root))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        // The one thing kept from the caller's environment: a proxy it needs to reach the
        // archive.
        for var in [
            "http_proxy",
            "https_proxy",
            "no_proxy",
            "HTTP_PROXY",
            "HTTPS_PROXY",
        ] {
            if let Some(value) = std::env::var_os(var) {
                cmd.env(var, value);
            }
        }
        cmd
    }

    async fn run(
        &self,
        args: &[&str],
        on_line: &mut (dyn FnMut(&str) + Send),
    ) -> Result<String, BootstrapError> {
        self.run_args(args, &[], on_line).await
    }

    async fn run_args(
        &self,
        args: &[&str],
        packages: &[String],
        on_line: &mut (dyn FnMut(&str) + Send),
    ) -> Result<String, BootstrapError> {
        let mut cmd = self.command("apt-get");
        cmd.args(args).args(packages);
        let mut label_args: Vec<OsString> = args.iter().map(OsString::from).collect();
        label_args.extend(packages.iter().map(OsString::from));
        run(cmd, render("apt-get", &label_args), on_line).await
    }

    /// Download `packages` and their dependencies; returns the `.deb` files (paths inside
    /// the image) in the order apt would install them.
    async fn download_in_order(
        &self,
        packages: &[String],
        order_name: &str,
        on_line: &mut (dyn FnMut(&str) + Send),
    ) -> Result<Vec<String>, BootstrapError> {
        let order = format!("{}{WORK_DIR}/{order_name}", self.root);
        let hook = format!("-oDPkg::Pre-Install-Pkgs::=cat > '{order}'");
        self.run_args(
            &[
                "install",
                "-y",
                "-q",
                "--no-install-recommends",
                // Print the dpkg calls instead of making them: everything else (resolving,
                // downloading, checking, ordering, the hook) happens as for a real install.
                "-oDebug::pkgDpkgPm=1",
                &hook,
            ],
            packages,
            on_line,
        )
        .await?;
        let path = PathBuf::from(&order);
        let text = tokio::fs::read_to_string(&path)
            .await
            .map_err(io_err("read apt's install order from", &path))?;
        let prefix = format!("{}{ARCHIVES}/", self.root);
        let mut debs = Vec::new();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            match line.strip_prefix(&prefix) {
                Some(file) if !file.contains('/') && file.ends_with(".deb") => {
                    debs.push(format!("{ARCHIVES}/{file}"));
                }
                _ => {
                    return Err(BootstrapError::Invalid {
                        path,
                        message: format!("unexpected entry {line:?} (not a .deb in {prefix})"),
                    });
                }
            }
        }
        if debs.is_empty() {
            return Err(BootstrapError::Invalid {
                path,
                message: "apt installed nothing".into(),
            });
        }
        Ok(debs)
    }
}

/// `program args...` for messages, shortened (package lists are long).
fn render(program: &str, args: &[OsString]) -> String {
    let mut text = program.to_string();
    for arg in args {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    if text.chars().count() > 200 {
        text = text.chars().take(200).collect::<String>() + " …";
    }
    text
}

/// What a failed command printed last, for the error message: apt's `E:` lines when there
/// are any (the debug runs print a lot before them), else the last lines.
fn stderr_tail(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let errors: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("E:") || l.starts_with("W:") || l.starts_with("Err:"))
        .collect();
    let chosen = if errors.is_empty() { &lines } else { &errors };
    let start = chosen.len().saturating_sub(12);
    let tail = chosen[start..].join("\n");
    if tail.is_empty() {
        "no output on stderr".to_string()
    } else {
        tail
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => status.to_string(),
    }
}

/// Run a command, handing each stdout line to `on_line` as it comes; returns stdout.
async fn run(
    mut cmd: Command,
    label: String,
    on_line: &mut (dyn FnMut(&str) + Send),
) -> Result<String, BootstrapError> {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|source| BootstrapError::Spawn {
        command: label.clone(),
        source,
    })?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let read_out = async {
        let mut collected = String::new();
        if let Some(stdout) = stdout {
            let mut reader = BufReader::new(stdout);
            let mut buf = Vec::new();
            // Bytes, not `lines()`: one bad byte must not stop the reading (the child would
            // then block on a full pipe).
            while matches!(reader.read_until(b'\n', &mut buf).await, Ok(n) if n > 0) {
                let line = String::from_utf8_lossy(&buf);
                let line = line.trim_end_matches(['\n', '\r']);
                on_line(line);
                collected.push_str(line);
                collected.push('\n');
                buf.clear();
            }
        }
        collected
    };
    let read_err = async {
        let mut buf = Vec::new();
        if let Some(mut stderr) = stderr {
            let _ = stderr.read_to_end(&mut buf).await;
        }
        String::from_utf8_lossy(&buf).into_owned()
    };
    let (out, err) = tokio::join!(read_out, read_err);
    let status = child.wait().await.map_err(|source| BootstrapError::Spawn {
        command: label.clone(),
        source,
    })?;
    if !status.success() {
        return Err(BootstrapError::Failed {
            command: label,
            status: describe(status),
            stderr: stderr_tail(&err),
        });
    }
    Ok(out)
}

/// The package names a slim image starts from, read from `Packages` indexes.
#[derive(Debug, Default, PartialEq)]
struct Selection {
    essential: BTreeSet<String>,
    required: BTreeSet<String>,
    /// Every package name of the architecture (to know whether `usr-is-merged` exists).
    known: BTreeSet<String>,
}

impl Selection {
    /// Feed one `Packages` index (a sequence of deb822 stanzas).
    fn scan(&mut self, index: &str) {
        let mut stanza = Stanza::default();
        for line in index.lines() {
            if line.trim().is_empty() {
                self.take(std::mem::take(&mut stanza));
            } else {
                stanza.line(line);
            }
        }
        self.take(stanza);
    }

    fn take(&mut self, stanza: Stanza) {
        let Some(name) = stanza.package else { return };
        // A Packages file of binary-amd64 lists `all` packages too; anything else does not
        // run here.
        if !matches!(stanza.architecture.as_deref(), Some(ARCH) | Some("all")) {
            return;
        }
        if stanza.essential {
            self.essential.insert(name.clone());
        }
        if stanza.required {
            self.required.insert(name.clone());
        }
        self.known.insert(name);
    }

    /// The two requests: the essential set, and everything (essential, required, apt).
    ///
    /// `usr-is-merged` joins the essential set when the archive has it: init-system-helpers
    /// depends on `usrmerge | usr-is-merged`, and apt, with nothing installed, picks the
    /// first, which drags in perl to convert a system that is already merged.
    fn requests(&self) -> Result<(Vec<String>, Vec<String>), BootstrapError> {
        let missing = |what: &str| BootstrapError::Invalid {
            path: PathBuf::from("/var/lib/apt/lists"),
            message: format!("the Packages indexes have {what}"),
        };
        if self.essential.is_empty() {
            return Err(missing("no Essential: yes package"));
        }
        if !self.known.contains("apt") {
            return Err(missing("no apt package"));
        }
        let mut essential = self.essential.clone();
        if self.known.contains("usr-is-merged") {
            essential.insert("usr-is-merged".to_string());
        }
        let mut all = essential.clone();
        all.extend(self.required.iter().cloned());
        all.insert("apt".to_string());
        Ok((essential.into_iter().collect(), all.into_iter().collect()))
    }
}

/// The fields of one index stanza that matter here.
#[derive(Debug, Default)]
struct Stanza {
    package: Option<String>,
    architecture: Option<String>,
    essential: bool,
    required: bool,
}

impl Stanza {
    fn line(&mut self, line: &str) {
        // Continuation lines (descriptions, long Depends) start with white space.
        if line.starts_with([' ', '\t']) {
            return;
        }
        let Some((field, value)) = line.split_once(':') else {
            return;
        };
        let value = value.trim();
        // deb822 field names are case-insensitive.
        match field.to_ascii_lowercase().as_str() {
            "package" => self.package = Some(value.to_string()),
            "architecture" => self.architecture = Some(value.to_string()),
            "essential" => self.essential = value.eq_ignore_ascii_case("yes"),
            "priority" => self.required = value.eq_ignore_ascii_case("required"),
            _ => {}
        }
    }
}

async fn scan_indexes(root: &Root) -> Result<Selection, BootstrapError> {
    let lists = root.host("/var/lib/apt/lists");
    let mut entries = tokio::fs::read_dir(&lists)
        .await
        .map_err(io_err("read", &lists))?;
    let mut selection = Selection::default();
    let mut indexes = 0;
    while let Some(entry) = entries.next_entry().await.map_err(io_err("read", &lists))? {
        let name = entry.file_name();
        if !name.to_string_lossy().ends_with("_Packages") {
            continue;
        }
        let path = entry.path();
        let text = tokio::fs::read(&path)
            .await
            .map_err(io_err("read", &path))?;
        selection.scan(&String::from_utf8_lossy(&text));
        indexes += 1;
    }
    if indexes == 0 {
        return Err(BootstrapError::Invalid {
            path: lists,
            message: "apt-get update left no Packages index".into(),
        });
    }
    Ok(selection)
}

/// How many files `apt-get install --print-uris` would fetch, and their total size.
fn download_size(print_uris: &str) -> (usize, u64) {
    let mut count = 0;
    let mut bytes = 0;
    for line in print_uris.lines().filter(|l| l.starts_with('\'')) {
        // 'URI' file size hash
        let mut fields = line.split_whitespace();
        count += 1;
        bytes += fields
            .nth(2)
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0);
    }
    (count, bytes)
}

/// `name_version_arch.deb` as apt names its downloads (an epoch's `:` as `%3a`) to
/// `(name, version)`.
fn parse_deb_filename(file: &str) -> Option<(String, String)> {
    let stem = file.strip_suffix(".deb")?;
    let mut parts = stem.split('_');
    let (name, version, arch) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || name.is_empty() || version.is_empty() || arch.is_empty() {
        return None;
    }
    Some((name.to_string(), percent_decode(version)?))
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

async fn clear_staging_caches(root: &Root) -> Result<(), BootstrapError> {
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
async fn merged_usr(root: &Root) -> Result<(), BootstrapError> {
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
fn tar_excludes() -> Vec<String> {
    SLIM_EXCLUDES
        .iter()
        .map(|p| format!("--exclude={}", p.trim_start_matches('/')))
        .collect()
}

/// Unpack one `.deb` (path inside the image) into the root, keeping the merged-/usr symlinks.
async fn extract(root: &Root, deb: &str) -> Result<(), BootstrapError> {
    let path = root.host(deb);
    let deb_label = format!("dpkg-deb --fsys-tarfile {}", path.display());
    let mut unpack = Command::new("dpkg-deb");
    unpack
        .env_clear()
        .env("PATH", HOST_PATH)
        .env("LC_ALL", "C")
        .arg("--fsys-tarfile")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut unpack = unpack.spawn().map_err(|source| BootstrapError::Spawn {
        command: deb_label.clone(),
        source,
    })?;
    let pipe: Stdio = match unpack.stdout.take() {
        Some(out) => out.try_into().map_err(|source| BootstrapError::Spawn {
            command: deb_label.clone(),
            source,
        })?,
        None => {
            return Err(BootstrapError::Spawn {
                command: deb_label,
                source: io::Error::other("no stdout pipe"),
            });
        }
    };
    let mut tar_args: Vec<OsString> = vec![
        "--extract".into(),
        "--file=-".into(),
        OsString::from("--directory"),
        root.path.clone().into_os_string(),
        // Existing directory symlinks (bin -> usr/bin) stay symlinks.
        "--keep-directory-symlink".into(),
        // Owners as numbers: the image's ids, not whatever the host's names map to.
        "--numeric-owner".into(),
        "--same-owner".into(),
        "--same-permissions".into(),
        "--warning=no-timestamp".into(),
    ];
    tar_args.extend(tar_excludes().into_iter().map(OsString::from));
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
    let tar = tar.spawn().map_err(|source| BootstrapError::Spawn {
        command: tar_label.clone(),
        source,
    })?;
    let (unpacked, extracted) = tokio::join!(unpack.wait_with_output(), tar.wait_with_output());
    // tar first: when it fails, dpkg-deb's broken pipe is only a consequence.
    let extracted = extracted.map_err(|source| BootstrapError::Spawn {
        command: tar_label.clone(),
        source,
    })?;
    if !extracted.status.success() {
        return Err(BootstrapError::Failed {
            command: format!("{deb_label} | {tar_label}"),
            status: describe(extracted.status),
            stderr: stderr_tail(&String::from_utf8_lossy(&extracted.stderr)),
        });
    }
    let unpacked = unpacked.map_err(|source| BootstrapError::Spawn {
        command: deb_label.clone(),
        source,
    })?;
    if !unpacked.status.success() {
        return Err(BootstrapError::Failed {
            command: deb_label,
            status: describe(unpacked.status),
            stderr: stderr_tail(&String::from_utf8_lossy(&unpacked.stderr)),
        });
    }
    Ok(())
}

/// The dpkg filter of the slim images (`/etc/dpkg/dpkg.cfg.d/docker`, the official name:
/// Dockerfiles that want manual pages back delete it by that name).
fn dpkg_slim_config() -> String {
    let mut text = String::from(
        "# The \"slim\" variant of the Debian base image (built by GEODE): files containers\n\
         # rarely need are not unpacked. Remove this file to get them with the next install.\n\n",
    );
    for pattern in SLIM_EXCLUDES {
        text.push_str(&format!("path-exclude {pattern}\n"));
    }
    text.push('\n');
    for pattern in SLIM_INCLUDES {
        text.push_str(&format!("path-include {pattern}\n"));
    }
    text
}

/// The configuration the official images carry, under the official names, so that a
/// Dockerfile's `apt-get install` behaves as it does on them.
fn image_config_files(suite: &DebianSuite) -> Vec<(&'static str, String, u32)> {
    let clean = "\"rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb \
                 /var/cache/apt/*.bin || true\";";
    vec![
        (
            "/etc/apt/sources.list.d/debian.sources",
            sources_deb822(suite, IMAGE_KEYRING),
            0o644,
        ),
        ("/etc/dpkg/dpkg.cfg.d/docker", dpkg_slim_config(), 0o644),
        (
            "/etc/dpkg/dpkg.cfg.d/docker-apt-speedup",
            "# Image builds do not survive a power loss anyway: skip dpkg's fsyncs.\n\
             force-unsafe-io\n"
                .to_string(),
            0o644,
        ),
        (
            "/etc/apt/apt.conf.d/docker-clean",
            format!(
                "// No package cache in image layers: every install cleans up after itself.\n\
                 DPkg::Post-Invoke {{ {clean} }};\n\
                 APT::Update::Post-Invoke {{ {clean} }};\n\
                 Dir::Cache::pkgcache \"\";\n\
                 Dir::Cache::srcpkgcache \"\";\n"
            ),
            0o644,
        ),
        (
            "/etc/apt/apt.conf.d/docker-gzip-indexes",
            "// Keep downloaded indexes compressed on disk.\nAcquire::GzipIndexes \"true\";\n"
                .to_string(),
            0o644,
        ),
        (
            "/etc/apt/apt.conf.d/docker-no-languages",
            "// No translated descriptions.\nAcquire::Languages \"none\";\n".to_string(),
            0o644,
        ),
        (
            "/etc/apt/apt.conf.d/docker-autoremove-suggests",
            "// `apt-get purge --auto-remove` also removes what was only suggested.\n\
             Apt::AutoRemove::SuggestsImportant \"false\";\n"
                .to_string(),
            0o644,
        ),
        (
            // invoke-rc.d asks this before starting a service: never, during installs in a
            // container (nothing would supervise the daemon; its start would fail the install).
            "/usr/sbin/policy-rc.d",
            "#!/bin/sh\n# Services do not start during package installs in this image.\nexit 101\n"
                .to_string(),
            0o755,
        ),
    ]
}

async fn write_image_config(root: &Root, suite: &DebianSuite) -> Result<(), BootstrapError> {
    for (path, content, mode) in image_config_files(suite) {
        write_file(&root.host(path), content.as_bytes(), mode).await?;
    }
    Ok(())
}

/// The finish script: install what stage 1 unpacked, essential set first, each set in apt's
/// order, then clean up and remove itself.
fn finish_script(essential: &[String], rest: &[String]) -> String {
    let mut s = String::from(
        "#!/bin/sh\n\
         # GEODE debian bootstrap, stage 2: run as root inside the new root (chrooted, /proc\n\
         # and /dev mounted; no network needed). Installs the packages stage 1 downloaded\n\
         # and unpacked, cleans up, and removes itself.\n\
         set -eu\n\
         export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n\
         export LC_ALL=C DEBIAN_FRONTEND=noninteractive DEBCONF_NONINTERACTIVE_SEEN=true\n\
         unset APT_CONFIG TMPDIR\n\
         cd /\n\n\
         # --force-depends: dpkg orders neither by Pre-Depends nor across its arguments the\n\
         # way apt does; every file is already in place, so maintainer scripts find what they\n\
         # need whatever the order.\n",
    );
    let mut install = |what: &str, debs: &[String]| {
        if debs.is_empty() {
            return;
        }
        s.push_str(&format!(
            "echo \"bootstrap: installing {} {what}\"\ndpkg --install --force-depends",
            debs.len()
        ));
        for deb in debs {
            s.push_str(" \\\n  ");
            s.push_str(&shell_quote(deb));
        }
        s.push_str("\n\n");
    };
    install("essential packages", essential);
    install("more packages (required, apt)", rest);
    s.push_str(
        "# A half-configured base would only fail later, inside somebody's Dockerfile.\n\
         if [ -n \"$(dpkg --audit)\" ]; then\n\
         \x20 echo 'bootstrap: packages left unconfigured:' >&2\n\
         \x20 dpkg --audit >&2\n\
         \x20 exit 1\n\
         fi\n\n\
         apt-get clean\n\
         rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/partial\n\
         mkdir -p /var/lib/apt/lists/partial /var/cache/apt/archives/partial\n\
         rm -f /var/cache/apt/*.bin /var/cache/apt/archives/*.deb\n\
         # Logs of the bootstrap itself, as the official images have none.\n\
         rm -f /var/log/dpkg.log /var/log/alternatives.log /var/log/apt/*.log \\\n\
         \x20 /var/log/apt/eipp.log.xz /var/cache/ldconfig/aux-cache\n\
         echo \"bootstrap: $(dpkg-query --show | wc -l) packages installed\"\n",
    );
    s.push_str(&format!("rm -rf {}\n", shell_quote(WORK_DIR)));
    s
}

/// `VERSION_ID` from os-release, else the major number of /etc/debian_version.
fn parse_os_release(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix("VERSION_ID=")?;
        let value = value.trim().trim_matches(['"', '\'']);
        (!value.is_empty()).then(|| value.to_string())
    })
}

async fn read_version_id(root: &Root) -> Result<String, BootstrapError> {
    for file in ["/usr/lib/os-release", "/etc/os-release"] {
        if let Ok(text) = tokio::fs::read_to_string(root.host(file)).await
            && let Some(version) = parse_os_release(&text)
        {
            return Ok(version);
        }
    }
    let path = root.host("/etc/debian_version");
    let text = tokio::fs::read_to_string(&path)
        .await
        .map_err(io_err("read", &path))?;
    let version = text
        .trim()
        .split('.')
        .next()
        .unwrap_or_default()
        .to_string();
    if version.is_empty() {
        return Err(BootstrapError::Invalid {
            path,
            message: "no release number (and no VERSION_ID in os-release)".into(),
        });
    }
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suites_of_image_references() {
        for (repo, tag, suite) in [
            ("debian", "bookworm", "bookworm"),
            ("debian", "bookworm-slim", "bookworm"),
            ("debian", "12", "bookworm"),
            ("debian", "12-slim", "bookworm"),
            ("debian", "trixie", "trixie"),
            ("debian", "trixie-slim", "trixie"),
            ("debian", "13", "trixie"),
            ("debian", "13-slim", "trixie"),
            ("library/debian", "12-slim", "bookworm"),
            ("docker.io/library/debian", "bookworm", "bookworm"),
        ] {
            let got = suite_for(repo, tag).unwrap_or_else(|| panic!("{repo}:{tag}"));
            assert_eq!(got.suite, suite, "{repo}:{tag}");
            assert_eq!(got.mirror, "http://deb.debian.org/debian");
            assert_eq!(
                got.security.as_deref(),
                Some("http://deb.debian.org/debian-security")
            );
        }
        for (repo, tag) in [
            ("ubuntu", "22.04"),
            ("ubuntu", "jammy"),
            ("python", "3.11-slim"),
            ("python", "3.11-slim-bookworm"),
            ("debian", "bullseye"),
            ("debian", "11-slim"),
            ("debian", "stable"),
            ("debian", "latest"),
            ("debian", "bookworm-20240612-slim"),
            ("debian", "12.5"),
            ("debian", "slim"),
            ("debian", ""),
            ("mydebian", "bookworm"),
            ("ghcr.io/x/debian", "bookworm"),
        ] {
            assert_eq!(suite_for(repo, tag), None, "{repo}:{tag}");
        }
    }

    const INDEX: &str = "\
Package: base-files
Essential: yes
Priority: required
Architecture: amd64
Version: 12.4+deb12u5
Description: Debian base system miscellaneous files
 This package contains the basic filesystem hierarchy.
 Priority: required

Package: libc6
Priority: optional
Architecture: amd64
Depends: libgcc-s1

package: dash
essential: Yes
priority: required
architecture: amd64

Package: tzdata
Priority: required
Architecture: all

Package: apt
Priority: important
Architecture: amd64

Package: usr-is-merged
Priority: optional
Architecture: all

Package: foreign-tool
Essential: yes
Priority: required
Architecture: arm64

Package: mawk
Priority: required
Architecture: amd64";

    #[test]
    fn selection_reads_essential_and_required() {
        let mut selection = Selection::default();
        selection.scan(INDEX);
        let names = |set: &BTreeSet<String>| set.iter().cloned().collect::<Vec<_>>();
        assert_eq!(names(&selection.essential), ["base-files", "dash"]);
        assert_eq!(
            names(&selection.required),
            ["base-files", "dash", "mawk", "tzdata"]
        );
        assert!(selection.known.contains("libc6"));
        assert!(!selection.known.contains("foreign-tool"));

        let (essential, all) = selection.requests().unwrap();
        assert_eq!(essential, ["base-files", "dash", "usr-is-merged"]);
        assert_eq!(
            all,
            [
                "apt",
                "base-files",
                "dash",
                "mawk",
                "tzdata",
                "usr-is-merged"
            ]
        );
    }

    #[test]
    fn selection_across_indexes_and_failures() {
        // The updates suite repeats packages; a second scan must not change the result.
        let mut selection = Selection::default();
        selection.scan(INDEX);
        selection.scan("Package: dash\nEssential: yes\nArchitecture: amd64\n\n");
        assert_eq!(selection.essential.len(), 2);

        let mut no_apt = Selection::default();
        no_apt.scan("Package: dash\nEssential: yes\nArchitecture: amd64\n");
        let err = no_apt.requests().unwrap_err().to_string();
        assert!(err.contains("no apt package"), "{err}");
        // Without usr-is-merged in the archive, nothing is invented.
        no_apt.scan("Package: apt\nArchitecture: amd64\n");
        let (essential, _) = no_apt.requests().unwrap();
        assert_eq!(essential, ["dash"]);

        let empty = Selection::default();
        assert!(empty.requests().is_err());
    }

    #[test]
    fn apt_configuration_keeps_everything_in_the_root() {
        let conf = apt_config("/srv/geode/rootfs", false);
        for line in [
            "Dir \"/srv/geode/rootfs/\";",
            "Dir::Etc::Parts \"/srv/geode/rootfs/.geode-bootstrap/apt.conf.d/\";",
            "Dir::Etc::Main \"/srv/geode/rootfs/.geode-bootstrap/apt.conf\";",
            "Dir::Etc::SourceParts \"/srv/geode/rootfs/.geode-bootstrap/sources.list.d/\";",
            "Dir::Etc::TrustedParts \"/srv/geode/rootfs/etc/apt/trusted.gpg.d/\";",
            "Dir::State::Status \"/srv/geode/rootfs/var/lib/dpkg/status\";",
            "Dir::Cache \"/srv/geode/rootfs/var/cache/apt/\";",
            "Dir::Log \"/srv/geode/rootfs/.geode-bootstrap/log/\";",
            "APT::Architecture \"amd64\";",
            "APT::Architectures { \"amd64\"; };",
            "APT::Install-Recommends \"false\";",
            "Acquire::GzipIndexes \"false\";",
        ] {
            assert!(conf.lines().any(|l| l == line), "missing {line}:\n{conf}");
        }
        // Every Dir option names a path inside the root.
        for line in conf.lines().filter(|l| l.starts_with("Dir")) {
            assert!(line.contains("\"/srv/geode/rootfs/"), "{line}");
        }
        assert!(!conf.contains("Sandbox"));
        assert!(apt_config("/srv/geode/rootfs", true).contains("APT::Sandbox::User \"root\";"));
    }

    #[test]
    fn roots_that_cannot_be_written_into_configuration_are_refused() {
        assert!(Root::new(Path::new("relative/root")).is_err());
        assert!(Root::new(Path::new("/tmp/with space")).is_err());
        assert!(Root::new(Path::new("/tmp/quote\"d")).is_err());
        assert!(Root::new(Path::new("/tmp/a,b")).is_err());
        assert!(Root::new(Path::new("/")).is_err());
        let root = Root::new(Path::new("/tmp/geode-bootstrap-x1/rootfs/")).unwrap();
        assert_eq!(root.text, "/tmp/geode-bootstrap-x1/rootfs");
        assert_eq!(
            root.host("/var/lib/dpkg/status"),
            Path::new("/tmp/geode-bootstrap-x1/rootfs/var/lib/dpkg/status")
        );
    }

    #[test]
    fn sources_list_the_update_suites_of_a_release() {
        let suite = suite_for("debian", "bookworm-slim").unwrap();
        let text = sources_deb822(&suite, IMAGE_KEYRING);
        assert_eq!(
            text,
            "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n\
             Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
             Types: deb\nURIs: http://deb.debian.org/debian-security\n\
             Suites: bookworm-security\nComponents: main\n\
             Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        );
        let sid = DebianSuite {
            suite: "sid".into(),
            mirror: "http://deb.debian.org/debian".into(),
            security: None,
        };
        let text = sources_deb822(&sid, "/k.gpg");
        assert_eq!(
            text,
            "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: sid\nComponents: main\n\
             Signed-By: /k.gpg\n"
        );
    }

    #[test]
    fn deb_file_names() {
        assert_eq!(
            parse_deb_filename("libcap2_1%3a2.66-4+deb12u3+b1_amd64.deb"),
            Some(("libcap2".into(), "1:2.66-4+deb12u3+b1".into()))
        );
        assert_eq!(
            parse_deb_filename("tzdata_2025b-0+deb12u1_all.deb"),
            Some(("tzdata".into(), "2025b-0+deb12u1".into()))
        );
        assert_eq!(parse_deb_filename("broken.deb"), None);
        assert_eq!(parse_deb_filename("a_b_c_d.deb"), None);
        assert_eq!(parse_deb_filename("a_1%zz_amd64.deb"), None);
        assert_eq!(parse_deb_filename("a_1_amd64.udeb"), None);
    }

    #[test]
    fn download_size_from_print_uris() {
        let out = "'http://deb.debian.org/debian/pool/main/g/gcc-12/gcc-12-base_12.2.0-14%2bdeb12u1_amd64.deb' gcc-12-base_12.2.0-14+deb12u1_amd64.deb 37596 SHA256:ab\n\
                   'http://deb.debian.org/debian/pool/main/g/glibc/libc6_2.36-9%2bdeb12u14_amd64.deb' libc6_2.36-9+deb12u14_amd64.deb 2759320 SHA256:cd\n";
        assert_eq!(download_size(out), (2, 37596 + 2759320));
        assert_eq!(download_size(""), (0, 0));
    }

    #[test]
    fn finish_script_installs_essential_first_and_removes_itself() {
        let essential = vec![
            "/var/cache/apt/archives/base-passwd_3.6.1_amd64.deb".to_string(),
            "/var/cache/apt/archives/libcap2_1%3a2.66-4_amd64.deb".to_string(),
        ];
        let rest = vec!["/var/cache/apt/archives/apt_2.6.1_amd64.deb".to_string()];
        let script = finish_script(&essential, &rest);
        assert!(script.starts_with("#!/bin/sh\n"));
        assert!(script.contains("set -eu\n"));
        let first = script
            .find("'/var/cache/apt/archives/base-passwd_3.6.1_amd64.deb'")
            .unwrap();
        let second = script
            .find("'/var/cache/apt/archives/libcap2_1%3a2.66-4_amd64.deb'")
            .unwrap();
        let third = script
            .find("'/var/cache/apt/archives/apt_2.6.1_amd64.deb'")
            .unwrap();
        assert!(first < second && second < third);
        assert_eq!(script.matches("dpkg --install --force-depends").count(), 2);
        assert!(script.contains("apt-get clean\n"));
        assert!(script.contains("rm -rf /var/lib/apt/lists/*"));
        assert!(script.trim_end().ends_with("rm -rf '/.geode-bootstrap'"));
        // Nothing to install a second time: one dpkg call.
        let only = finish_script(&essential, &[]);
        assert_eq!(only.matches("dpkg --install").count(), 1);
    }

    #[test]
    fn shell_quoting() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }

    #[test]
    fn slim_filter_and_tar_excludes_agree() {
        let cfg = dpkg_slim_config();
        let excludes: Vec<&str> = cfg
            .lines()
            .filter_map(|l| l.strip_prefix("path-exclude "))
            .collect();
        assert_eq!(excludes, SLIM_EXCLUDES);
        // Includes come after the excludes: dpkg lets the last matching pattern win.
        let last_exclude = cfg.rfind("path-exclude").unwrap();
        let first_include = cfg.find("path-include").unwrap();
        assert!(first_include > last_exclude);
        assert!(cfg.contains("path-include /usr/share/doc/*/copyright\n"));
        let tar: Vec<String> = tar_excludes();
        assert!(tar.contains(&"--exclude=usr/share/doc/*".to_string()));
        assert_eq!(tar.len(), SLIM_EXCLUDES.len());
    }

    #[test]
    fn image_configuration_uses_the_official_names() {
        let suite = suite_for("debian", "12").unwrap();
        let files = image_config_files(&suite);
        let names: Vec<&str> = files.iter().map(|(p, _, _)| *p).collect();
        for name in [
            "/etc/apt/sources.list.d/debian.sources",
            "/etc/dpkg/dpkg.cfg.d/docker",
            "/etc/apt/apt.conf.d/docker-clean",
            "/usr/sbin/policy-rc.d",
        ] {
            assert!(names.contains(&name), "{name}");
        }
        let (_, sources, _) = &files[0];
        assert!(sources.contains("Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"));
        let policy = files
            .iter()
            .find(|(p, _, _)| *p == "/usr/sbin/policy-rc.d")
            .unwrap();
        assert_eq!(policy.2, 0o755);
        assert!(policy.1.contains("exit 101"));
    }

    #[test]
    fn os_release_and_messages() {
        assert_eq!(
            parse_os_release("PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nVERSION_ID=\"12\"\n"),
            Some("12".into())
        );
        assert_eq!(parse_os_release("ID=debian\n"), None);
        let tail = stderr_tail("Reading package lists...\nE: Unable to locate package nope\n");
        assert_eq!(tail, "E: Unable to locate package nope");
        assert_eq!(stderr_tail("one\ntwo\n"), "one\ntwo");
        assert_eq!(stderr_tail(""), "no output on stderr");
        let long: Vec<OsString> = (0..100)
            .map(|i| OsString::from(format!("pkg{i}")))
            .collect();
        let label = render("apt-get", &long);
        assert!(label.starts_with("apt-get pkg0 pkg1"));
        assert!(label.ends_with(" …"));
        assert_eq!(
            render("apt-get", &[OsString::from("update")]),
            "apt-get update"
        );
    }

    #[tokio::test]
    async fn failures_name_the_command_and_its_stderr() {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("echo out; echo 'E: broken index' >&2; exit 3");
        let mut lines = Vec::new();
        let err = run(cmd, "sh -c test".into(), &mut |l: &str| {
            lines.push(l.to_string())
        })
        .await
        .unwrap_err()
        .to_string();
        assert_eq!(lines, ["out"]);
        assert_eq!(
            err,
            "debian bootstrap: `sh -c test` failed (exit code 3): E: broken index"
        );
        let err = run(
            Command::new("/nonexistent/apt-get"),
            "apt-get update".into(),
            &mut |_: &str| {},
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("debian bootstrap: `apt-get update` could not be started"));
    }

    #[tokio::test]
    async fn a_root_that_is_not_empty_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("leftover"), b"x").unwrap();
        let suite = suite_for("debian", "bookworm").unwrap();
        let err = stage(&suite, dir.path(), &|_: &str| {}).await.unwrap_err();
        if nix::unistd::geteuid().is_root() {
            assert!(
                err.to_string().contains("must be an empty directory"),
                "{err}"
            );
        } else {
            assert!(err.to_string().contains("must run as root"), "{err}");
        }
    }

    /// Files and mtimes of the host's apt state, to show the bootstrap leaves it alone.
    fn host_apt_state() -> Vec<String> {
        let mut out = Vec::new();
        for dir in [
            "/var/lib/apt/lists",
            "/var/lib/apt/lists/partial",
            "/var/cache/apt",
            "/var/cache/apt/archives",
            "/var/cache/apt/archives/partial",
            "/var/lib/dpkg",
        ] {
            let Ok(meta) = std::fs::metadata(dir) else {
                continue;
            };
            out.push(format!("{dir} {:?}", meta.modified().ok()));
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let meta = entry.metadata().ok();
                out.push(format!(
                    "{} {:?} {:?}",
                    entry.path().display(),
                    meta.as_ref().map(|m| m.len()),
                    meta.and_then(|m| m.modified().ok())
                ));
            }
        }
        out.sort();
        out
    }

    fn in_root(root: &Path, args: &[&str]) -> std::process::Output {
        std::process::Command::new("chroot")
            .arg(root)
            .args(args)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("LC_ALL", "C")
            .output()
            .unwrap()
    }

    async fn bootstrap_for_real(reference: (&str, &str), codename: &str, version: &str) {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let suite = suite_for(reference.0, reference.1).unwrap();
        let dir = tempfile::Builder::new()
            .prefix("geode-bootstrap-")
            .tempdir()
            .unwrap();
        let root = dir.path().join("rootfs");
        std::fs::create_dir(&root).unwrap();
        let host_before = host_apt_state();

        let started = Instant::now();
        let staged = stage(&suite, &root, &|line: &str| println!("{line}"))
            .await
            .unwrap();
        let stage_took = started.elapsed();
        assert_eq!(staged.version_id, version);
        assert_eq!(staged.finish_script, FINISH_SCRIPT);
        assert!(staged.packages.iter().any(|p| p.starts_with("apt=")));
        assert!(staged.packages.iter().any(|p| p.starts_with("bash=")));
        assert!(!staged.packages.iter().any(|p| p.starts_with("usrmerge=")));
        assert_eq!(
            host_apt_state(),
            host_before,
            "the host's apt state changed"
        );
        let link = std::fs::read_link(root.join("bin")).unwrap();
        assert_eq!(link, Path::new("usr/bin"));

        // The sandbox's stand-in: private mount and pid namespaces, /proc and /dev, chroot.
        let started = Instant::now();
        let finish = std::process::Command::new("unshare")
            .args(["--mount", "--pid", "--fork", "--propagation", "private"])
            .arg("sh")
            .arg("-c")
            .arg(
                "set -e; mount -t proc proc \"$1/proc\"; mount --rbind /dev \"$1/dev\"; \
                 exec chroot \"$1\" /bin/sh \"$2\"",
            )
            .arg("sh")
            .arg(&root)
            .arg(&staged.finish_script)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .status()
            .unwrap();
        let finish_took = started.elapsed();
        assert!(finish.success(), "finish script: {finish}");

        let os_release = in_root(&root, &["cat", "/etc/os-release"]);
        let os_release = String::from_utf8_lossy(&os_release.stdout).into_owned();
        assert!(
            os_release.contains(&format!("VERSION_CODENAME={codename}")),
            "{os_release}"
        );
        let listing = in_root(&root, &["dpkg", "-l"]);
        assert!(listing.status.success());
        let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
        let installed_names: Vec<&str> = listing
            .lines()
            .filter(|l| l.starts_with("ii "))
            .filter_map(|l| l.split_whitespace().nth(1))
            .map(|name| name.trim_end_matches(":amd64"))
            .collect();
        for package in ["apt", "bash", "base-files", "tzdata"] {
            assert!(
                installed_names.contains(&package),
                "{package} not installed:\n{listing}"
            );
        }
        assert_eq!(installed_names.len(), staged.packages.len(), "{listing}");
        let apt_version = in_root(&root, &["apt-get", "--version"]);
        assert!(apt_version.status.success());
        let audit = in_root(&root, &["dpkg", "--audit"]);
        assert!(
            audit.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&audit.stdout)
        );
        assert_eq!(
            std::fs::read_link(root.join("bin")).unwrap(),
            Path::new("usr/bin")
        );
        assert_eq!(
            std::fs::read_link(root.join("lib64")).unwrap(),
            Path::new("usr/lib64")
        );
        assert!(!root.join(".geode-bootstrap").exists());
        assert!(root.join("etc/apt/sources.list.d/debian.sources").is_file());
        assert!(
            root.join("usr/share/keyrings/debian-archive-keyring.gpg")
                .is_file()
        );
        assert!(root.join("usr/share/doc/bash/copyright").is_file());
        assert!(!root.join("usr/share/man/man1/bash.1.gz").exists());
        let lists: Vec<_> = std::fs::read_dir(root.join("var/lib/apt/lists"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(lists, [OsString::from("partial")]);
        let debs = std::fs::read_dir(root.join("var/cache/apt/archives"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".deb"))
            .count();
        assert_eq!(debs, 0);
        // The root user and group exist, as the maintainer scripts made them.
        let passwd = std::fs::read_to_string(root.join("etc/passwd")).unwrap();
        assert!(passwd.starts_with("root:x:0:0:"), "{passwd}");
        assert!(passwd.contains("\n_apt:"), "{passwd}");

        let du = std::process::Command::new("du")
            .args(["-sh", "--one-file-system"])
            .arg(&root)
            .output()
            .unwrap();
        println!(
            "stage {:.1}s, finish {:.1}s, {} packages, du -sh {}",
            stage_took.as_secs_f64(),
            finish_took.as_secs_f64(),
            staged.packages.len(),
            String::from_utf8_lossy(&du.stdout).trim()
        );
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
        assert!(
            !mounts.contains(&root.to_string_lossy().into_owned()),
            "mounts left behind:\n{mounts}"
        );
    }

    #[tokio::test]
    #[ignore = "downloads ~30 MB from deb.debian.org, needs root, takes a minute or more"]
    async fn bootstrap_bookworm_for_real() {
        bootstrap_for_real(("debian", "bookworm-slim"), "bookworm", "12").await;
    }

    #[tokio::test]
    #[ignore = "downloads ~30 MB from deb.debian.org, needs root, takes a minute or more"]
    async fn bootstrap_trixie_for_real() {
        bootstrap_for_real(("debian", "13-slim"), "trixie", "13").await;
    }
}
