//! Trials on Slurm: a real cluster (`munged`, `slurmctld`, a `slurmd` per node in network
//! namespaces of their own) runs `geode run --executor slurm`, and the per-trial results, the
//! run store and the retries are those of the local executor.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use geode_harness::rollout::slurm::files::{Submission, WorkerResult, submissions};
use geode_harness::store::RunStore;

use super::slurm_cluster::Cluster;

fn core_pack() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tasks/geode-core")
}

/// (trial, outcome, reward, seed, task hash) of every stored trial of a run.
type Trials = BTreeMap<String, (String, Option<f64>, u64, String)>;

fn stored(jobs: &Path, run_dir: &Path) -> Trials {
    let store = RunStore::open(&jobs.join("geode.db")).unwrap();
    let run = run_dir.file_name().unwrap().to_string_lossy().into_owned();
    store
        .trials(&run)
        .unwrap()
        .into_iter()
        .map(|t| {
            (
                t.trial_name,
                (t.outcome.to_string(), t.reward, t.seed, t.task_hash),
            )
        })
        .collect()
}

/// Every worker result file of a run.
fn worker_results(run_dir: &Path) -> Vec<WorkerResult> {
    let dir = run_dir.join("slurm/results");
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| serde_json::from_str(&std::fs::read_to_string(e.path()).unwrap()).unwrap())
        .collect()
}

fn geode(dir: &Path, cluster: &Cluster) -> Command {
    let mut cmd = super::common::geode_in(dir);
    cluster.env(&mut cmd);
    cmd
}

#[test]
fn slurm_the_core_pack_on_two_nodes_gives_the_local_results() {
    let cluster = Cluster::start(2);
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs");
    let (local, local_dir) = super::common::run_oracle_with(
        super::common::geode_in(dir.path()),
        &core_pack(),
        &jobs,
        &["--seed", "11", "-n", "4"],
    );
    let (remote, remote_dir) = super::common::run_oracle_with(
        geode(dir.path(), &cluster),
        &core_pack(),
        &jobs,
        &["--seed", "11", "-n", "4", "--executor", "slurm"],
    );
    assert_eq!(local["summary"], remote["summary"]);
    let (l, r) = (stored(&jobs, &local_dir), stored(&jobs, &remote_dir));
    assert_eq!(l.len(), 28);
    assert_eq!(l, r);
    let nodes: BTreeSet<String> = worker_results(&remote_dir)
        .into_iter()
        .map(|w| w.node)
        .collect();
    assert_eq!(nodes, BTreeSet::from(["n1".to_string(), "n2".to_string()]));
}
