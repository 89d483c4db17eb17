//! What the finished image carries besides its packages: the configuration of the official
//! slim images under their official names, the finish script that installs the packages
//! inside the root, and the release number read back from the unpacked files.

use super::apt::sources_deb822;
use super::root::{Root, io_err, write_file};
use super::{BootstrapError, DebianSuite, IMAGE_KEYRING, SLIM_EXCLUDES, SLIM_INCLUDES, WORK_DIR};
use crate::dockerfile::shell_quote;

/// The dpkg filter of the slim images (`/etc/dpkg/dpkg.cfg.d/docker`, the official name:
/// Dockerfiles that want manual pages back delete it by that name).
pub(super) fn dpkg_slim_config() -> String {
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
pub(super) fn image_config_files(suite: &DebianSuite) -> Vec<(&'static str, String, u32)> {
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

pub(super) async fn write_image_config(
    root: &Root,
    suite: &DebianSuite,
) -> Result<(), BootstrapError> {
    for (path, content, mode) in image_config_files(suite) {
        write_file(&root.host(path), content.as_bytes(), mode).await?;
    }
    Ok(())
}

/// The finish script: install what stage 1 unpacked, essential set first, each set in apt's
/// order, then clean up and remove itself.
pub(super) fn finish_script(essential: &[String], rest: &[String]) -> String {
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
pub(super) fn parse_os_release(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix("VERSION_ID=")?;
        let value = value.trim().trim_matches(['"', '\'']);
        (!value.is_empty()).then(|| value.to_string())
    })
}

pub(super) async fn read_version_id(root: &Root) -> Result<String, BootstrapError> {
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
