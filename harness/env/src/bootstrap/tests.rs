//! Tests of the Debian bootstrap: the pure parts everywhere, a real build of bookworm and
//! trixie only on demand (root, the network, a minute or more).

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::Path;
use std::time::Instant;

use tokio::process::Command;

use super::apt::*;
use super::image_files::*;
use super::root::*;
use super::selection::*;
use super::unpack::*;
use super::*;
use crate::dockerfile::shell_quote;

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

/// Run the finish script as the sandbox would: private mount and pid namespaces, /proc
/// and /dev, chroot.
fn run_finish_script(root: &Path, script: &str) -> std::process::ExitStatus {
    std::process::Command::new("unshare")
        .args(["--mount", "--pid", "--fork", "--propagation", "private"])
        .arg("sh")
        .arg("-c")
        .arg(
            "set -e; mount -t proc proc \"$1/proc\"; mount --rbind /dev \"$1/dev\"; \
             exec chroot \"$1\" /bin/sh \"$2\"",
        )
        .arg("sh")
        .arg(root)
        .arg(script)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .status()
        .unwrap()
}

/// What the official image has, the finished root has: the release, the packages, apt
/// working, merged /usr, the slim filter, no caches, the users.
fn check_finished_root(root: &Path, codename: &str, staged: &Staged) {
    let os_release = in_root(root, &["cat", "/etc/os-release"]);
    let os_release = String::from_utf8_lossy(&os_release.stdout).into_owned();
    assert!(
        os_release.contains(&format!("VERSION_CODENAME={codename}")),
        "{os_release}"
    );
    let listing = in_root(root, &["dpkg", "-l"]);
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
    let apt_version = in_root(root, &["apt-get", "--version"]);
    assert!(apt_version.status.success());
    let audit = in_root(root, &["dpkg", "--audit"]);
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

    let started = Instant::now();
    let finish = run_finish_script(&root, &staged.finish_script);
    let finish_took = started.elapsed();
    assert!(finish.success(), "finish script: {finish}");
    check_finished_root(&root, codename, &staged);

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
