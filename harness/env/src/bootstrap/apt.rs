//! The host's `apt-get` pointed at the new root: the staging apt tree and its private
//! configuration (`APT_CONFIG`), the runs that update, resolve and download, and the command
//! runner that names a failed command with its stderr's tail.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;

use super::root::{Root, io_err, make_dir, write_file};
use super::{
    ARCH, ARCHIVES, BootstrapError, DebianSuite, HOST_KEYRING, HOST_PATH, IMAGE_KEYRING, WORK_DIR,
};

/// The apt tree, an empty dpkg database, the keyring, and the sources the host's apt uses.
pub(super) async fn lay_out(root: &Root, suite: &DebianSuite) -> Result<(), BootstrapError> {
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
pub(super) fn sources_deb822(suite: &DebianSuite, keyring: &str) -> String {
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
pub(super) fn apt_config(root: &str, sandbox_as_root: bool) -> String {
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
pub(super) struct Apt {
    root: String,
    config: PathBuf,
}

impl Apt {
    pub(super) async fn new(root: &Root) -> Result<Apt, BootstrapError> {
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

    pub(super) fn command(&self, program: &str) -> Command {
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

    pub(super) async fn run(
        &self,
        args: &[&str],
        on_line: &mut (dyn FnMut(&str) + Send),
    ) -> Result<String, BootstrapError> {
        self.run_args(args, &[], on_line).await
    }

    pub(super) async fn run_args(
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
    pub(super) async fn download_in_order(
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
pub(super) fn render(program: &str, args: &[OsString]) -> String {
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
pub(super) fn stderr_tail(stderr: &str) -> String {
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

pub(super) fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => status.to_string(),
    }
}

/// Run a command, handing each stdout line to `on_line` as it comes; returns stdout.
pub(super) async fn run(
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
