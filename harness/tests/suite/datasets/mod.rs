//! Data governance: privacy review, near-duplicates, split isolation, allowlist, releases.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use geode_harness::datasets::allowlist::Allowlist;
use geode_harness::datasets::minhash::{
    MinHashParams, MinHasher, lsh_candidates, near_duplicate_pairs,
};
use geode_harness::datasets::privacy::{Disposition, Scanner, Waiver, Waivers, review};
use geode_harness::datasets::release::{ReleaseError, ReleaseRequest, release, verify};
use geode_harness::datasets::split::{
    Ratios, SplitItem, SplitsFile, assign, check_against_pack, check_splits, load_splits,
    split_pack, write_split_packs,
};
use geode_harness::datasets::write_new_json;
use geode_harness::pack::TaskHash;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

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

#[test]
fn privacy_scan_opens_archives_and_names_what_it_cannot_read() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let dir = write_task(tmp.path(), "archives", "Do the thing.\n", "exit 0\n");
    let secret = "SecretAccessKey: \"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\"\n";
    let gzip = |bytes: &[u8]| {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(bytes).unwrap();
        enc.finish().unwrap()
    };
    std::fs::write(
        dir.join("environment/creds.txt.gz"),
        gzip(secret.as_bytes()),
    )
    .unwrap();
    let mut tar = tar::Builder::new(Vec::new());
    let body = b"token = ghp_abcdefghijklmnopqrstuvwxyz0123456789\n";
    let mut header = tar::Header::new_gnu();
    header.set_size(body.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    tar.append_data(&mut header, "inner/config.ini", &body[..])
        .unwrap();
    let tarball = tar.into_inner().unwrap();
    std::fs::write(dir.join("environment/data.tar.gz"), gzip(&tarball)).unwrap();
    std::fs::write(
        dir.join("environment/blob.bin"),
        b"\x7fELF\0\0AKIAIOSFODNN7EXAMPLQ",
    )
    .unwrap();

    let r = review(
        &Scanner::new().unwrap(),
        &[("archives".into(), dir.as_path())],
        &Waivers::default(),
    )
    .unwrap();
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

    // A corrupt gzip stream is named, not passed over; a text file called .gz is read as text;
    // a tar cut short (as one past the decompression bound is) is read up to the cut, and the
    // rest is named.
    let mut broken = gzip(secret.as_bytes());
    broken.truncate(12);
    std::fs::write(dir.join("environment/broken.gz"), broken).unwrap();
    let mut two = tar::Builder::new(Vec::new());
    for name in ["first.ini", "second.ini"] {
        let mut header = tar::Header::new_gnu();
        header.set_size(body.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        two.append_data(&mut header, name, &body[..]).unwrap();
    }
    let mut cut = two.into_inner().unwrap();
    cut.truncate(1024 + 300);
    std::fs::write(dir.join("environment/cut.tar"), cut).unwrap();
    std::fs::write(dir.join("environment/notes.tar.gz"), secret).unwrap();
    let r = review(
        &Scanner::new().unwrap(),
        &[("archives".into(), dir.as_path())],
        &Waivers::default(),
    )
    .unwrap();
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

/// Seeded documents of random words, near-duplicates that change 2-5% of the words (the truth),
/// and distractors that change 30%.
fn corpus(seed: u64) -> (Vec<String>, Vec<(usize, usize)>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let vocab: Vec<String> = (0..2000).map(|i| format!("w{i}")).collect();
    let mut docs: Vec<Vec<String>> = (0..60)
        .map(|_| {
            (0..150)
                .map(|_| vocab[rng.random_range(0..vocab.len())].clone())
                .collect()
        })
        .collect();
    let mut truth = Vec::new();
    for base in 0..20 {
        let mut copy = docs[base].clone();
        let edits = rng.random_range(3..=8);
        for _ in 0..edits {
            let at = rng.random_range(0..copy.len());
            copy[at] = vocab[rng.random_range(0..vocab.len())].clone();
        }
        docs.push(copy);
        truth.push((base, docs.len() - 1));
    }
    // Distractors: related but not near-duplicates (30% of the words changed, Jaccard ~0.2).
    for base in 20..30 {
        let mut copy = docs[base].clone();
        for _ in 0..45 {
            let at = rng.random_range(0..copy.len());
            copy[at] = vocab[rng.random_range(0..vocab.len())].clone();
        }
        docs.push(copy);
    }
    (docs.into_iter().map(|d| d.join(" ")).collect(), truth)
}

#[test]
fn dedup_finds_planted_near_duplicates() {
    let (docs, truth) = corpus(11);
    let params = MinHashParams::default();
    let h = MinHasher::new(params);
    let sigs: Vec<Vec<u64>> = docs.iter().map(|d| h.signature(d)).collect();
    let found: Vec<(usize, usize)> = near_duplicate_pairs(&sigs, &params)
        .into_iter()
        .map(|(i, j, _)| (i, j))
        .collect();
    let tp = found.iter().filter(|p| truth.contains(p)).count() as f64;
    let precision = tp / found.len().max(1) as f64;
    let recall = tp / truth.len() as f64;
    println!(
        "dedup: {} planted, {} found, precision {precision:.3}, recall {recall:.3}",
        truth.len(),
        found.len()
    );
    assert!(precision >= 0.95 && recall >= 0.95);
    // The LSH path (used above EXHAUSTIVE_MAX texts) proposes every planted pair too.
    let lsh = lsh_candidates(&sigs, params.bands);
    let lsh_recall = truth.iter().filter(|p| lsh.contains(p)).count() as f64 / truth.len() as f64;
    println!("lsh: {} candidate pairs, recall {lsh_recall:.3}", lsh.len());
    assert!(lsh_recall >= 0.95);
}

fn items_from(docs: &[String]) -> Vec<SplitItem> {
    docs.iter()
        .enumerate()
        .map(|(i, d)| SplitItem {
            id: format!("t{i:03}"),
            hash: TaskHash(format!("{i:064x}")),
            text: d.clone(),
        })
        .collect()
}

#[test]
fn splits_isolate_near_duplicates_and_check_catches_planted_leaks() {
    let (docs, truth) = corpus(5);
    let items = items_from(&docs);
    let ratios = Ratios {
        train: 0.6,
        holdout: 0.2,
        test: 0.2,
    };
    let params = MinHashParams::default();
    let splits = assign(&items, ratios, 42, params).unwrap();
    assert_eq!(
        splits,
        assign(&items, ratios, 42, params).unwrap(),
        "seeded"
    );
    let where_is = |id: &str| {
        splits
            .iter()
            .find(|(_, l)| l.iter().any(|e| e.id == id))
            .map(|(n, _)| n.clone())
            .unwrap()
    };
    for (a, b) in &truth {
        assert_eq!(where_is(&items[*a].id), where_is(&items[*b].id));
    }
    let sizes: Vec<usize> = ["train", "holdout", "test"]
        .iter()
        .map(|s| splits[*s].len())
        .collect();
    assert_eq!(sizes.iter().sum::<usize>(), 90);
    assert!(
        sizes[0].abs_diff(54) <= 3 && sizes[1].abs_diff(18) <= 3,
        "{sizes:?}"
    );
    let file = SplitsFile {
        schema: "geode.splits.v1".into(),
        pack: "synthetic".into(),
        pack_hash: String::new(),
        seed: 42,
        ratios,
        minhash: params,
        splits: splits.clone(),
    };
    assert!(check_splits(&file).is_empty());

    // Plant leaks: a near-duplicate moved across, an id and a hash copied across.
    let (a, b) = truth[0];
    let (sa, sb) = (where_is(&items[a].id), where_is(&items[b].id));
    let other = ["train", "holdout", "test"]
        .into_iter()
        .find(|s| *s != sa)
        .unwrap()
        .to_string();
    let mut leaky = file.clone();
    let list = leaky.splits.get_mut(&sb).unwrap();
    let pos = list.iter().position(|e| e.id == items[b].id).unwrap();
    let moved = list.remove(pos);
    leaky.splits.get_mut(&other).unwrap().push(moved);
    let copied = leaky.splits["train"][0].clone();
    leaky.splits.get_mut("test").unwrap().push(copied);
    let mut same_hash = leaky.splits["holdout"][0].clone();
    same_hash.id = "renamed".into();
    leaky.splits.get_mut("train").unwrap().push(same_hash);
    let kinds: Vec<&str> = check_splits(&leaky).iter().map(|l| l.kind).collect();
    for kind in ["near_duplicate", "same_id", "same_hash"] {
        assert!(kinds.contains(&kind), "{kind} missed: {kinds:?}");
    }

    // Through the file format.
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("splits.json");
    write_new_json(&path, &leaky).unwrap();
    assert_eq!(
        check_splits(&load_splits(&path).unwrap()).len(),
        kinds.len()
    );
    assert!(write_new_json(&path, &leaky).is_err(), "never replaced");
}

#[test]
fn builtin_pack_splits_without_leaks() {
    let ratios = Ratios {
        train: 0.6,
        holdout: 0.2,
        test: 0.2,
    };
    let file = split_pack(&builtin_pack(), ratios, 7, MinHashParams::default()).unwrap();
    assert_eq!(file.schema, "geode.splits.v1");
    let n: usize = file.splits.values().map(Vec::len).sum();
    assert_eq!(n, 28);
    assert!(check_splits(&file).is_empty());
}

/// A pack of six distinct tasks plus a near-duplicate of the first.
fn pack_with_near_duplicate(root: &Path) -> PathBuf {
    let pack = root.join("pack");
    let words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"];
    for (i, w) in words.iter().enumerate() {
        let text = format!(
            "Task {w}: read the file {w}.csv, compute the {w} checksum of column {i}, and write \
             the result to /app/{w}.out with a trailing newline; leave every other file alone."
        );
        write_task(
            &pack,
            w,
            &text,
            &format!("test -f /app/{w}.out # {w} {i}\n"),
        );
    }
    let dup = "Task alpha: read the file alpha.csv, compute the alpha checksum of column 0, and \
               write the result to /app/alpha.out with a trailing newline; leave every other \
               file alone, please.";
    write_task(
        &pack,
        "alpha-again",
        dup,
        "test -f /app/alpha.out # alpha 0\n",
    );
    pack
}

/// That pack and its split (seed 3, half / quarter / quarter).
fn split_near_duplicate_pack(root: &Path) -> (PathBuf, SplitsFile) {
    let pack = pack_with_near_duplicate(root);
    let ratios = Ratios {
        train: 0.5,
        holdout: 0.25,
        test: 0.25,
    };
    let file = split_pack(&pack, ratios, 3, MinHashParams::default()).unwrap();
    (pack, file)
}

#[test]
fn check_splits_rederives_from_the_pack_and_catches_an_edited_file() {
    let tmp = tempfile::tempdir().unwrap();
    let (pack, file) = split_near_duplicate_pack(tmp.path());
    let path = tmp.path().join("splits.json");
    let clean = check_against_pack(&path, &file, &pack).unwrap();
    assert!(clean.is_clean(), "{clean:?}");
    assert_eq!(clean.tasks, 7);

    // The near-duplicates went to one split; move one across and blank every signature, so the
    // file alone shows nothing.
    let home = |f: &SplitsFile, id: &str| {
        f.splits
            .iter()
            .find(|(_, l)| l.iter().any(|e| e.id == id))
            .map(|(n, _)| n.clone())
            .unwrap()
    };
    assert_eq!(home(&file, "alpha"), home(&file, "alpha-again"));
    let mut edited = file.clone();
    let from = home(&file, "alpha-again");
    let to = if from == "train" { "test" } else { "train" };
    let list = edited.splits.get_mut(&from).unwrap();
    let pos = list.iter().position(|e| e.id == "alpha-again").unwrap();
    let moved = list.remove(pos);
    edited.splits.get_mut(to).unwrap().push(moved);
    for e in edited.splits.values_mut().flatten() {
        e.signature.clear();
    }
    edited.pack_hash = "0".repeat(64);
    assert!(check_splits(&edited).is_empty(), "the file alone hides it");
    let check = check_against_pack(&path, &edited, &pack).unwrap();
    let leaks: Vec<&str> = check.leaks.iter().map(|l| l.kind).collect();
    assert_eq!(leaks, ["near_duplicate"], "{check:?}");
    let kinds: BTreeSet<&str> = check.mismatches.iter().map(|m| m.kind).collect();
    assert_eq!(
        kinds,
        BTreeSet::from(["pack_hash", "signature"]),
        "{:?}",
        check.mismatches
    );

    // A task changed after the split, one dropped from the file, a parameter that disables the
    // comparison.
    let mut stale = file.clone();
    let dropped = stale.splits.get_mut("train").unwrap().remove(0);
    let changed = stale.splits["test"][0].id.clone();
    std::fs::write(pack.join(&changed).join("tests/test.sh"), "exit 0\n").unwrap();
    let check = check_against_pack(&path, &stale, &pack).unwrap();
    let found: Vec<(String, String)> = check
        .mismatches
        .iter()
        .map(|m| (m.kind.to_string(), m.subject.clone()))
        .collect();
    assert!(
        found.contains(&("unassigned".into(), dropped.id.clone())),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|(k, s)| k == "hash" && *s == format!("test/{changed}")),
        "{found:?}"
    );
    stale.minhash.num_perm = 0;
    let err = check_against_pack(&path, &stale, &pack).unwrap_err();
    assert!(err.to_string().contains("num_perm"), "{err}");
}

#[test]
fn a_split_becomes_pack_folders() {
    let tmp = tempfile::tempdir().unwrap();
    let (pack, file) = split_near_duplicate_pack(tmp.path());
    let out = tmp.path().join("split");
    let written = write_split_packs(&file, &pack, &out).unwrap();
    assert_eq!(written.len(), 3);
    let source = geode_harness::pack::TaskPack::load(&pack).unwrap();
    let mut seen = BTreeSet::new();
    for (name, list) in &file.splits {
        let part = geode_harness::pack::TaskPack::load(&out.join(name)).unwrap();
        let ids: Vec<&str> = part.tasks.iter().map(|t| t.id.as_str()).collect();
        let want: Vec<&str> = list.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, want, "{name}");
        for t in &part.tasks {
            let original = source.tasks.iter().find(|s| s.id == t.id).unwrap();
            assert_eq!(t.hash, original.hash, "{} copied whole", t.id);
            seen.insert(t.id.clone());
        }
    }
    assert_eq!(seen.len(), source.tasks.len());
    assert!(
        write_split_packs(&file, &pack, &out).is_err(),
        "never replaced"
    );

    // A task changed since the split: nothing is written.
    std::fs::write(pack.join("delta/instruction.md"), "changed\n").unwrap();
    let again = tmp.path().join("split2");
    let err = write_split_packs(&file, &pack, &again).unwrap_err();
    assert!(err.to_string().contains("delta"), "{err}");
    assert!(!again.exists());
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("staging"))
        .collect();
    assert!(leftovers.is_empty());
}
