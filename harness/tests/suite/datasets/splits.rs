//! Near-duplicates (MinHash) and split isolation: planted duplicates found, leaks across
//! splits caught, a split re-derived from its pack.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use geode_harness::datasets::minhash::{
    MinHashParams, MinHasher, lsh_candidates, near_duplicate_pairs,
};
use geode_harness::datasets::split::{
    Ratios, SplitItem, SplitsFile, assign, check_against_pack, check_splits, load_splits,
    split_pack, write_split_packs,
};
use geode_harness::datasets::write_new_json;
use geode_harness::pack::TaskHash;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{builtin_pack, write_task};

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
        pack_hash: geode_harness::pack::PackHash::of_bytes(b"synthetic"),
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
    edited.pack_hash = geode_harness::pack::PackHash::parse(&"0".repeat(64)).unwrap();
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
