//! Data governance: privacy review, near-duplicates, split isolation, allowlist, releases.
use std::path::{Path, PathBuf};

use geode_harness::datasets::privacy::{Disposition, PrivacyReview, Scanner, Waivers, review};

mod release;
mod splits;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn builtin_pack() -> PathBuf {
    workspace().join("tasks/geode-core")
}

fn builtin_waivers() -> Waivers {
    Waivers::load(&workspace().join("datasets/waivers/geode-core.toml")).unwrap()
}

/// A minimal Harbor task folder.
fn write_task(root: &Path, name: &str, instruction: &str, test: &str) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("environment")).unwrap();
    std::fs::create_dir_all(dir.join("tests")).unwrap();
    std::fs::write(
        dir.join("task.toml"),
        "version = \"1.0\"\n[metadata]\ncategory = \"x\"\n",
    )
    .unwrap();
    std::fs::write(dir.join("instruction.md"), instruction).unwrap();
    std::fs::write(dir.join("environment/Dockerfile"), "FROM scratch\n").unwrap();
    std::fs::write(dir.join("tests/test.sh"), test).unwrap();
    dir
}

const PLANTED: &str = "\
aws = AKIAIOSFODNN7EXAMPLQ
aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY
openai = sk-proj-abcdefghijklmnopqrstuvwx
github = ghp_abcdefghijklmnopqrstuvwxyz0123456789
slack = xoxb-123456789012-abcdefghijkl
curl -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig'
-----BEGIN RSA PRIVATE KEY-----
mail alice.smith@gmail.com and bob@example.com
cd /home/alice/project && ls /Users/bob
ping 8.8.8.8 and 127.0.0.1 and 203.0.113.9
";

#[test]
fn privacy_scanner_catches_planted_secrets() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = write_task(tmp.path(), "leaky", "Do the thing.\n", PLANTED);
    let r = review(
        &Scanner::new().unwrap(),
        &[("leaky".into(), dir.as_path())],
        &Waivers::default(),
    )
    .unwrap();
    let open: Vec<&str> = r.open().iter().map(|f| f.finding.rule.as_str()).collect();
    for rule in [
        "aws_access_key",
        "aws_secret_key",
        "api_key_sk",
        "github_token",
        "slack_token",
        "bearer_token",
        "private_key",
        "email",
        "home_path",
        "ipv4",
    ] {
        assert!(open.contains(&rule), "{rule} not caught: {open:?}");
    }
    // Policy: RFC 2606 mail, loopback and RFC 5737 addresses are allowed and recorded.
    let policy: Vec<&str> = r
        .findings
        .iter()
        .filter(|f| matches!(f.disposition, Disposition::Policy(_)))
        .map(|f| f.finding.excerpt.as_str())
        .collect();
    assert_eq!(policy.len(), 3, "{policy:?}");
    assert_eq!(open.iter().filter(|r| **r == "email").count(), 1);
    assert_eq!(open.iter().filter(|r| **r == "ipv4").count(), 1);
    assert_eq!(open.iter().filter(|r| **r == "home_path").count(), 2);
    // Reports never repeat the secret.
    assert!(
        r.findings
            .iter()
            .all(|f| !f.finding.excerpt.contains("abcdefghijklmnop"))
    );
}

const ARCHIVED_SECRET: &str = "SecretAccessKey: \"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\"\n";
const ARCHIVED_TOKEN: &[u8] = b"token = ghp_abcdefghijklmnopqrstuvwxyz0123456789\n";

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

/// A tar archive with one file per name, each holding the archived token.
fn tar_of(names: &[&str]) -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    for name in names {
        let mut header = tar::Header::new_gnu();
        header.set_size(ARCHIVED_TOKEN.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append_data(&mut header, name, ARCHIVED_TOKEN).unwrap();
    }
    tar.into_inner().unwrap()
}

fn review_archives(dir: &Path) -> PrivacyReview {
    review(
        &Scanner::new().unwrap(),
        &[("archives".into(), dir)],
        &Waivers::default(),
    )
    .unwrap()
}

#[test]
fn privacy_scan_opens_archives_and_names_what_it_cannot_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = write_task(tmp.path(), "archives", "Do the thing.\n", "exit 0\n");
    std::fs::write(
        dir.join("environment/creds.txt.gz"),
        gzip(ARCHIVED_SECRET.as_bytes()),
    )
    .unwrap();
    std::fs::write(
        dir.join("environment/data.tar.gz"),
        gzip(&tar_of(&["inner/config.ini"])),
    )
    .unwrap();
    std::fs::write(
        dir.join("environment/blob.bin"),
        b"\x7fELF\0\0AKIAIOSFODNN7EXAMPLQ",
    )
    .unwrap();

    let r = review_archives(&dir);
    let open: Vec<(String, String)> = r
        .open()
        .iter()
        .map(|f| (f.finding.rule.clone(), f.finding.file.clone()))
        .collect();
    assert!(
        open.contains(&("aws_secret_key".into(), "environment/creds.txt.gz".into())),
        "{open:?}"
    );
    assert!(
        open.contains(&(
            "github_token".into(),
            "environment/data.tar.gz!inner/config.ini".into()
        )),
        "{open:?}"
    );
    assert_eq!(r.skipped, ["archives:environment/blob.bin"]);
    broken_archives_are_named_not_passed_over(&dir);
}

/// A corrupt gzip stream is named, not passed over; a text file called .gz is read as text;
/// a tar cut short (as one past the decompression bound is) is read up to the cut, and the
/// rest is named.
fn broken_archives_are_named_not_passed_over(dir: &Path) {
    let mut broken = gzip(ARCHIVED_SECRET.as_bytes());
    broken.truncate(12);
    std::fs::write(dir.join("environment/broken.gz"), broken).unwrap();
    let mut cut = tar_of(&["first.ini", "second.ini"]);
    cut.truncate(1024 + 300);
    std::fs::write(dir.join("environment/cut.tar"), cut).unwrap();
    std::fs::write(dir.join("environment/notes.tar.gz"), ARCHIVED_SECRET).unwrap();
    let r = review_archives(dir);
    assert!(
        r.skipped
            .contains(&"archives:environment/broken.gz".to_string())
    );
    assert!(
        r.open()
            .iter()
            .any(|f| f.finding.file == "environment/notes.tar.gz"),
        "{:?}",
        r.open()
    );
    assert!(
        r.open()
            .iter()
            .any(|f| f.finding.file == "environment/cut.tar!first.ini"),
        "{:?}",
        r.open()
    );
    assert!(
        r.skipped
            .contains(&"archives:environment/cut.tar!(the rest of the archive)".to_string()),
        "{:?}",
        r.skipped
    );
}

#[test]
fn builtin_pack_passes_privacy_review() {
    let pack = geode_harness::pack::TaskPack::load(&builtin_pack()).unwrap();
    let scopes: Vec<(String, &Path)> = pack
        .tasks
        .iter()
        .map(|t| (t.id.clone(), t.dir.as_path()))
        .collect();
    let r = review(&Scanner::new().unwrap(), &scopes, &builtin_waivers()).unwrap();
    assert!(r.open().is_empty(), "{:#?}", r.open());
    assert!(r.unused_waivers.is_empty(), "stale: {:?}", r.unused_waivers);
    assert!(r.files_scanned > 100);
}
