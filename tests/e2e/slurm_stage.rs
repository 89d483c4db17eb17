//! A cluster's nodes on a staged, read-only image store without network: the pack is staged
//! on the "login node" (this machine, from a registry on loopback), the store is bind-mounted
//! read-only, each node's only route is the one to the controller, the registry is gone, and
//! `geode run --executor slurm` passes every trial with the oracle on both nodes while the
//! store stays exactly as staged.

use std::collections::BTreeSet;
use std::process::Command;

use super::slurm::geode;
use super::slurm_cluster::Cluster;
use super::stage::{
    ReadOnlyMount, STAGED_TASKS, mirror_of_the_base, stage, staged_pack, tree_state,
};

/// The controller's address from the cluster's `slurm.conf` (`SlurmctldHost=NAME(ADDR)`).
fn controller_addr(cluster: &Cluster) -> String {
    let conf = std::fs::read_to_string(cluster.conf_path()).unwrap();
    let line = conf
        .lines()
        .find_map(|l| l.strip_prefix("SlurmctldHost="))
        .unwrap();
    line.split_once('(')
        .unwrap()
        .1
        .trim_end_matches(')')
        .to_string()
}

fn ip(netns: &str, args: &str) -> std::process::Output {
    Command::new("sh")
        .args(["-c", &format!("ip -n {netns} {args}")])
        .output()
        .unwrap()
}

/// Each node keeps a route to the controller and nothing else: no default route, so no
/// registry, mirror or archive is reachable from a node.
fn cut_off_nodes(cluster: &Cluster) {
    let ctld = controller_addr(cluster);
    for node in &cluster.nodes {
        let out = ip(&node.netns, "route show default");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let via = text.split_whitespace().nth(2).unwrap().to_string();
        for args in [
            "route del default".to_string(),
            format!("route add {ctld}/32 via {via}"),
        ] {
            let out = ip(&node.netns, &args);
            assert!(out.status.success(), "{args}: {out:?}");
        }
        let out = ip(&node.netns, "route get 1.1.1.1");
        assert!(!out.status.success(), "{}: still routed", node.name);
    }
}

#[tokio::test]
async fn slurm_nodes_without_network_run_a_pack_from_a_staged_read_only_store() {
    let cluster = Cluster::start(2);
    let dir = tempfile::tempdir().unwrap();
    let registry = mirror_of_the_base(dir.path()).await;
    let pack = staged_pack(dir.path());
    let store = dir.path().join("staged");
    let (code, staged, err) = stage(dir.path(), &pack, &store);
    assert_eq!(code, 0, "{err}");
    assert_eq!(staged.len(), STAGED_TASKS.len(), "{staged:?}");
    drop(registry);
    let before = tree_state(&store);
    let ro = ReadOnlyMount::of(&store, &dir.path().join("ro"));
    cut_off_nodes(&cluster);

    let jobs = dir.path().join("jobs");
    let mut cmd = geode(dir.path(), &cluster);
    cmd.env("GEODE_IMAGES", &ro.0)
        .env("GEODE_IMAGES_READ_ONLY", "1");
    let (summary, run_dir) = super::common::run_oracle_with(
        cmd,
        &pack,
        &jobs,
        &["--seed", "5", "-n", "3", "--executor", "slurm"],
    );
    assert_eq!(
        summary["summary"]["outcomes"]["passed"],
        STAGED_TASKS.len(),
        "{summary}"
    );
    let nodes: BTreeSet<String> = std::fs::read_dir(run_dir.join("slurm/results"))
        .unwrap()
        .flatten()
        .map(|e| {
            let v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(e.path()).unwrap()).unwrap();
            v["node"].as_str().unwrap().to_string()
        })
        .collect();
    assert!(
        nodes.iter().all(|n| n == "n1" || n == "n2") && !nodes.is_empty(),
        "{nodes:?}"
    );
    // Every trial's image came whole from the store: nothing built on a node.
    let mut trials = 0;
    for entry in std::fs::read_dir(&run_dir).unwrap().flatten() {
        if !entry.path().join("result.json").is_file() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let image = super::common::trial_result(&run_dir, &name)["image"].clone();
        assert_eq!(image["cache_hit"], true, "{name}: {image}");
        trials += 1;
    }
    assert_eq!(trials, STAGED_TASKS.len());
    assert_eq!(tree_state(&store), before, "the nodes wrote to the store");
}
