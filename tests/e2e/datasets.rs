//! `geode dataset`: defaults found beside the pack, split files checked against the pack.

use std::path::Path;

use super::common::geode_in as geode;

fn core_pack() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tasks/geode-core")
        .canonicalize()
        .unwrap()
}

/// Run from an unrelated folder, `scan` still finds the pack's waivers (`datasets/waivers/` at
/// the project root), so the built-in pack passes as it does from the root.
#[test]
fn scan_finds_the_waivers_beside_the_pack_from_any_folder() {
    let d = tempfile::tempdir().unwrap();
    let out = geode(d.path())
        .args(["dataset", "scan"])
        .arg(core_pack())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("datasets/waivers/geode-core.toml"),
        "{stderr}"
    );
    assert!(stdout.contains(", 0 open"), "{stdout}");
}

/// `split --out --packs` writes the file and the pack folders; `check-splits` re-reads the pack
/// (from another folder), and an edited file fails it.
#[test]
fn a_split_file_is_checked_against_its_pack() {
    let d = tempfile::tempdir().unwrap();
    let out = geode(d.path())
        .args(["dataset", "split", "--seed", "7", "--out", "splits.json"])
        .args(["--packs", "parts"])
        .arg(core_pack())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for part in ["train", "holdout", "test"] {
        assert!(d.path().join("parts").join(part).is_dir(), "{part}");
    }
    let elsewhere = d.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let check = |dir: &Path| {
        let out = geode(dir)
            .args(["dataset", "check-splits"])
            .arg(d.path().join("splits.json"))
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, stdout) = check(&elsewhere);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("28 tasks"), "{stdout}");

    let path = d.path().join("splits.json");
    let mut file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let first = &mut file["splits"]["train"][0];
    first["signature"] = serde_json::json!([]);
    first["hash"] = serde_json::json!("0".repeat(64));
    std::fs::write(&path, serde_json::to_string(&file).unwrap()).unwrap();
    let (code, stdout) = check(&elsewhere);
    assert_eq!(code, Some(10), "{stdout}");
    assert!(stdout.contains("MISMATCH hash: train/"), "{stdout}");
    assert!(stdout.contains("MISMATCH signature: train/"), "{stdout}");
}

/// A curation that fails (here: its config names a field it does not have) leaves no jobs
/// folder behind: the pilot's sandbox is made when the pilot phase first runs, not before.
#[test]
fn a_failing_curation_leaves_no_jobs_folder() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("curate.toml"),
        "schema = \"geode.curate.v1\"\nno_such_field = 1\n",
    )
    .unwrap();
    let o = geode(dir.path())
        .args(["curate", "curate.toml"])
        .output()
        .unwrap();
    assert!(!o.status.success(), "the bad config was accepted");
    assert!(
        !dir.path().join("jobs").exists(),
        "a failed curation made {}",
        dir.path().join("jobs").display()
    );
}
