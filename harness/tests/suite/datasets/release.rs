//! Releases (immutable, content-addressed, with lineage) and the allowlist they pass.

use std::path::Path;

use geode_harness::datasets::allowlist::Allowlist;
use geode_harness::datasets::privacy::{Disposition, Waiver, Waivers};
use geode_harness::datasets::release::{ReleaseError, ReleaseRequest, release, verify};

use super::{builtin_pack, builtin_waivers, write_task};

fn request<'a>(pack: &'a Path, out: &'a Path, waivers: Waivers) -> ReleaseRequest<'a> {
    ReleaseRequest {
        pack,
        name: "core",
        version: "1.0.0",
        out,
        license: "Apache-2.0",
        origin: None,
        allowlist: Allowlist::default(),
        waivers,
        trajectories: Vec::new(),
        parents: Vec::new(),
        transformations: Vec::new(),
        created: "2026-01-01T00:00:00Z".into(),
    }
}

#[test]
fn release_is_immutable_and_a_changed_byte_fails_verify() {
    let out = tempfile::tempdir().unwrap();
    let pack = builtin_pack();
    let (dir, manifest) = release(&request(&pack, out.path(), builtin_waivers())).unwrap();
    assert_eq!(manifest.schema, "geode.release.v1");
    assert_eq!(manifest.tasks.len(), 28);
    assert_eq!(manifest.source.origin, "builtin:geode-core");
    assert!(manifest.tasks.iter().all(|t| t.hash == t.source_digest));
    assert!(!manifest.privacy.findings.is_empty());
    assert!(manifest.privacy.open().is_empty());
    let (_, problems) = verify(&dir).unwrap();
    assert!(problems.is_empty(), "{problems:?}");

    // Never overwritten.
    let again = release(&request(&pack, out.path(), builtin_waivers()));
    assert!(
        matches!(again, Err(ReleaseError::Exists { .. })),
        "{again:?}"
    );

    // One changed byte fails, naming task and file.
    let victim = dir.join("tasks/geode/cron-next/tests/test.sh");
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes[0] ^= 1;
    std::fs::write(&victim, bytes).unwrap();
    let (_, problems) = verify(&dir).unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("geode/cron-next") && p.contains("tests/test.sh")),
        "{problems:?}"
    );

    // A lineage child names its parent; an edited manifest fails.
    let mut child = request(&pack, out.path(), builtin_waivers());
    child.version = "1.0.1";
    let parent = out.path().join("core-1.0.0");
    child.parents = vec![parent];
    assert!(release(&child).is_err(), "a corrupt parent is refused");
}

#[test]
fn release_records_lineage_and_detects_manifest_edits() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = tmp.path().join("tasks/mini");
    write_task(&pack, "a", "Sort the file.\n", "#!/bin/sh\nexit 0\n");
    let out = tmp.path().join("releases");
    let (first, m1) = release(&request(&pack, &out, Waivers::default())).unwrap();
    let mut child = request(&pack, &out, Waivers::default());
    child.version = "1.1.0";
    child.parents = vec![first.clone()];
    child.transformations = vec!["dedup threshold 0.6".into()];
    let (second, m2) = release(&child).unwrap();
    assert_eq!(m2.lineage.parents[0].release_id, m1.release_id);
    assert_eq!(m2.lineage.transformations, ["dedup threshold 0.6"]);
    let path = second.join("release.json");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("Apache-2.0", "MIT")).unwrap();
    let (_, problems) = verify(&second).unwrap();
    assert!(
        problems.iter().any(|p| p.contains("release_id")),
        "{problems:?}"
    );
}

#[test]
fn release_refuses_open_findings_until_waived() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = tmp.path().join("tasks/leaky");
    write_task(
        &pack,
        "a",
        "Use key sk-abcdefghijklmnopqrstuvwxyz1234.\n",
        "exit 0\n",
    );
    let out = tmp.path().join("releases");
    let err = release(&request(&pack, &out, Waivers::default())).unwrap_err();
    let ReleaseError::Privacy(open) = &err else {
        panic!("{err}")
    };
    assert_eq!(open.len(), 1);
    assert!(!out.join("core-1.0.0").exists());
    let fingerprint = open[0]
        .rsplit("fingerprint ")
        .next()
        .unwrap()
        .trim_end_matches(']')
        .to_string();
    let waivers = Waivers {
        schema: "geode.waivers.v1".into(),
        waivers: vec![Waiver {
            fingerprint,
            reason: "fake key".into(),
            rule: None,
        }],
    };
    let (_, m) = release(&request(&pack, &out, waivers)).unwrap();
    assert!(
        m.privacy
            .findings
            .iter()
            .any(|f| f.disposition == Disposition::Waived("fake key".into()))
    );
}

#[test]
fn allowlist_refuses_other_sources_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = tmp.path().join("elsewhere");
    write_task(&pack, "a", "Do it.\n", "exit 0\n");
    let out = tmp.path().join("releases");
    let err = release(&request(&pack, &out, Waivers::default())).unwrap_err();
    let ReleaseError::Refused(why) = &err else {
        panic!("{err}")
    };
    assert!(
        why[0].contains("path:") && why[0].contains("builtin:*"),
        "{why:?}"
    );
    let mut req = request(&pack, &out, Waivers::default());
    req.allowlist = Allowlist {
        path_prefixes: vec![tmp.path().display().to_string()],
        ..Allowlist::default()
    };
    release(&req).unwrap();
}
