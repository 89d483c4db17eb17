//! Crucible campaigns on Slurm: `geode crucible run --executor slurm` over the real test
//! cluster decides as the same campaign run on this machine, pair for pair, and both arms of
//! each pair run in one array task on one node; `geode search run --executor slurm` keeps the
//! local lineage.

use std::collections::BTreeMap;
use std::path::Path;

use geode_harness::rollout::slurm::files::WorkerResult;
use serde_json::Value;

use super::crucible::Study;
use super::slurm_cluster::Cluster;

/// The study with a train pack of three tasks (the campaign stays short), frozen at two trials
/// per task.
fn small_study() -> Study {
    let s = Study::new();
    std::fs::rename(s.path("train"), s.path("train-all")).unwrap();
    std::fs::create_dir_all(s.path("train")).unwrap();
    for task in ["semver-sort", "largest-files", "wordfreq-cli"] {
        std::fs::rename(s.path("train-all").join(task), s.path("train").join(task)).unwrap();
    }
    s.freeze("c.json", &["--stage", "train", "--test", "test", "-k", "2"]);
    s
}

/// `geode crucible run c.json` into `jobs`, with `extra` arguments; the campaign folder.
fn campaign(
    s: &Study,
    cluster: Option<&Cluster>,
    jobs: &str,
    extra: &[&str],
) -> std::path::PathBuf {
    let mut cmd = s.command();
    if let Some(c) = cluster {
        c.env(&mut cmd);
    }
    let o = cmd
        // Three tasks cannot KEEP; what runs where is what is checked.
        .args([
            "crucible",
            "run",
            "c.json",
            "--pack",
            "train",
            "--allow-infeasible",
        ])
        .args([
            "--baseline-scaffold",
            "base.toml",
            "--candidate-scaffold",
            "cand.toml",
        ])
        .args(["-n", "2", "--jobs-dir", jobs])
        .args(extra)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("verdict "),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::read_dir(s.path(jobs).join("crucible"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path()
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The evidence's trials by (task, trial, arm): seed, reward, validity, integrity.
fn pairs(dir: &Path) -> BTreeMap<String, Value> {
    let evidence = json(&dir.join("evidence.json"));
    let trials = evidence["trials"].as_array().unwrap();
    trials
        .iter()
        .map(|t| {
            let key = format!("{}#{}#{}", t["task"], t["trial"], t["arm"]);
            (key, t.clone())
        })
        .collect()
}

#[test]
fn slurm_a_crucible_campaign_decides_as_locally_with_both_arms_of_a_pair_on_one_node() {
    let s = small_study();
    let local = campaign(&s, None, "jobs-local", &[]);
    let cluster = Cluster::start(2);
    let remote = campaign(&s, Some(&cluster), "jobs-slurm", &["--executor", "slurm"]);

    let (l, r) = (pairs(&local), pairs(&remote));
    assert_eq!(l.len(), 12, "{l:?}");
    assert_eq!(l, r, "per-pair outcomes differ");
    let (ld, rd) = (
        json(&local.join("decision.json")),
        json(&remote.join("decision.json")),
    );
    for key in [
        "verdict",
        "reasons",
        "counts",
        "statistics",
        "seeds",
        "coverage",
    ] {
        assert_eq!(ld[key], rd[key], "decision {key}");
    }

    // Every trial came back once, and both arms of each pair from the same node.
    let mut nodes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for entry in std::fs::read_dir(remote.join("slurm/results"))
        .unwrap()
        .flatten()
    {
        let w: WorkerResult =
            serde_json::from_str(&std::fs::read_to_string(entry.path()).unwrap()).unwrap();
        let pair = w.row.trial_name.rsplit_once("__").unwrap().0.to_string();
        nodes.entry(pair).or_default().push(w.node);
    }
    assert_eq!(nodes.len(), 6, "{nodes:?}");
    for (pair, on) in &nodes {
        assert_eq!(on.len(), 2, "{pair}: {on:?}");
        assert_eq!(on[0], on[1], "{pair}: arms on different nodes");
    }
    let journal = std::fs::read_to_string(remote.join("trials.jsonl")).unwrap();
    assert_eq!(journal.lines().count(), 12, "each trial ingested once");
}

/// A grid search of one candidate (repair budget 2 against 0) on the small train pack, its
/// output in `out`; three tasks cannot KEEP, so it runs by `allow_infeasible`.
fn search_config(s: &Study, out: &str) -> String {
    std::fs::write(
        s.path("space.toml"),
        "schema = \"geode.search-space.v1\"\n[[knob]]\npath = \"repair_budget\"\nvalues = [0, 2]\n",
    )
    .unwrap();
    let config = format!(
        "schema = \"geode.search.v1\"\nspace = \"space.toml\"\nbaseline = \"base.toml\"\n\
         policy = \"grid\"\nseed = 3\nmodel = \"flaky-oracle:0.5\"\ntrain = \"train\"\n\
         trials = 2\nconcurrency = 2\nout = \"{out}\"\nallow_infeasible = true\n[test]\npack = \"test\"\ntrials = 1\n\
         [budgets]\ncandidates = 1\n"
    );
    let file = format!("{out}.toml");
    std::fs::write(s.path(&file), config).unwrap();
    file
}

/// What a lineage entry decided (not what it spent).
fn decided(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("lineage.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let e: Value = serde_json::from_str(l).unwrap();
            let keys = [
                "id",
                "kind",
                "verdict",
                "reasons",
                "estimate",
                "lower_bound",
            ];
            keys.iter().map(|k| e[*k].clone()).collect()
        })
        .collect()
}

#[test]
fn slurm_a_search_keeps_the_local_lineage_with_both_arms_of_a_pair_on_one_node() {
    let s = small_study();
    let local = search_config(&s, "out-local");
    let o = s.geode(&["search", "run", &local]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let cluster = Cluster::start(2);
    let remote = search_config(&s, "out-slurm");
    let mut cmd = s.command();
    cluster.env(&mut cmd);
    let o = cmd
        .args(["search", "run", &remote, "--executor", "slurm"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (l, r) = (decided(&s.path("out-local")), decided(&s.path("out-slurm")));
    assert_eq!(l.len(), 2, "{l:?}");
    assert_eq!(l, r);
    let results = s.path("out-slurm/candidates/c0001/campaign/slurm/results");
    let mut nodes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for entry in std::fs::read_dir(&results).unwrap().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap();
        let w: WorkerResult = serde_json::from_str(&text).unwrap();
        let pair = w.row.trial_name.rsplit_once("__").unwrap().0.to_string();
        nodes.entry(pair).or_default().push(w.node);
    }
    assert_eq!(nodes.len(), 6, "{nodes:?}");
    assert!(
        nodes.values().all(|on| on.len() == 2 && on[0] == on[1]),
        "{nodes:?}"
    );
}
