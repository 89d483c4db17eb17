//! A real Slurm cluster for the tests: Debian's `munged`, `slurmctld` and one `slurmd` per
//! node, each node in a network namespace of its own (a veth pair to the host, its own address)
//! and a UTS namespace with its own hostname, all configured by a `slurm.conf` written here.
//! Every daemon is a child of the test and the namespaces are named by the test, so `Drop`
//! stops and removes all of it, also when the test fails.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static CLUSTERS: AtomicU32 = AtomicU32::new(0);

/// One compute node: its namespace, address and daemon.
pub struct Node {
    pub name: String,
    pub netns: String,
    slurmd: Option<Child>,
}

pub struct Cluster {
    pub dir: tempfile::TempDir,
    munged: Child,
    slurmctld: Child,
    pub nodes: Vec<Node>,
}

fn sh(cmd: &str) {
    let ok = Command::new("sh").args(["-c", cmd]).status().unwrap();
    assert!(ok.success(), "{cmd}");
}

fn start(cmd: &mut Command, log: &Path) -> Child {
    let log = std::fs::File::create(log).unwrap();
    cmd.stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

impl Cluster {
    /// A cluster of `n` nodes with 2 CPUs each, every one idle before this returns.
    pub fn start(n: usize) -> Cluster {
        Cluster::start_with(n, "")
    }

    /// [`Cluster::start`] with Slurm's cgroup plugins, as most sites run it: each job step's
    /// processes in a cgroup of its own (`/slurm/uid_0/job_<id>/...` in every v1 hierarchy),
    /// its memory limited there to the job's `--mem`.
    pub fn start_in_cgroups(n: usize) -> Cluster {
        Cluster::start_with(
            n,
            "ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup\n",
        )
    }

    /// [`Cluster::start`] with `extra` lines at the end of `slurm.conf` (a site's own limits,
    /// `MaxArraySize=10`, a second partition).
    pub fn start_with(n: usize, extra: &str) -> Cluster {
        let id = std::process::id() % 200 * 4 + CLUSTERS.fetch_add(1, Ordering::SeqCst);
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("state")).unwrap();
        std::fs::write(d.join("munge.key"), rand_key()).unwrap();
        sh(&format!("chmod 600 {}/munge.key", d.display()));
        let munged = start(
            Command::new("munged")
                .arg("--foreground")
                .arg("--force")
                .arg(format!("--key-file={}/munge.key", d.display()))
                .arg(format!("--socket={}/munge.sock", d.display()))
                .arg(format!("--pid-file={}/munged.pid", d.display()))
                .arg(format!("--seed-file={}/munge.seed", d.display())),
            &d.join("munged.log"),
        );
        wait_for(|| d.join("munge.sock").exists(), "munged's socket");
        let mut nodes = Vec::new();
        let mut lines = String::new();
        for i in 0..n {
            let name = format!("n{}", i + 1);
            let netns = format!("gsl{id}-{}", i + 1);
            // A /30 per node: 10.(77+id/250).(id%250).(4i+1) on the host side, +1 in the node.
            let net = format!("10.{}.{}", 77 + id / 250, id % 250);
            let (host, addr) = (4 * i + 1, 4 * i + 2);
            sh(&format!(
                "ip netns add {netns} && ip link add h{netns} type veth peer name c{netns} netns {netns} \
                 && ip addr add {net}.{host}/30 dev h{netns} && ip link set h{netns} up \
                 && ip -n {netns} addr add {net}.{addr}/30 dev c{netns} \
                 && ip -n {netns} link set c{netns} up && ip -n {netns} link set lo up \
                 && ip -n {netns} route add default via {net}.{host}"
            ));
            lines.push_str(&format!(
                "NodeName={name} NodeAddr={net}.{addr} NodeHostname={name} CPUs=2 RealMemory=4000 State=UNKNOWN\n"
            ));
            nodes.push(Node {
                name,
                netns,
                slurmd: None,
            });
        }
        // slurmctld listens on every host address; the nodes reach it at the first veth's.
        let ctld_addr = format!("10.{}.{}.1", 77 + id / 250, id % 250);
        let port = 20000 + id * 2;
        let mut conf = conf(d, &ctld_addr, port, &lines);
        if extra.contains("ProctrackType=") {
            // The site's own process tracking replaces the default (one value per key).
            conf = conf.replace(TRACKING, "");
            std::fs::write(d.join("cgroup.conf"), CGROUP_CONF).unwrap();
        }
        let conf = conf + extra;
        std::fs::write(d.join("slurm.conf"), conf).unwrap();
        let slurmctld = start(
            Command::new("slurmctld")
                .args(["-D", "-i", "-f"])
                .arg(d.join("slurm.conf")),
            &d.join("slurmctld.out"),
        );
        let mut cluster = Cluster {
            dir,
            munged,
            slurmctld,
            nodes,
        };
        for i in 0..n {
            cluster.start_node(i);
        }
        cluster.wait_idle(n);
        cluster
    }

    pub fn conf_path(&self) -> PathBuf {
        self.dir.path().join("slurm.conf")
    }

    /// `cmd` talking to this cluster (`SLURM_CONF`).
    pub fn env(&self, cmd: &mut Command) {
        cmd.env("SLURM_CONF", self.conf_path());
    }

    fn start_node(&mut self, i: usize) {
        let d = self.dir.path().to_path_buf();
        let node = &mut self.nodes[i];
        std::fs::create_dir_all(d.join(format!("spool-{}", node.name))).unwrap();
        // nsenter, not `ip netns exec`, which remounts /sys and hides the cgroup tree slurmd
        // reads.
        let child = start(
            Command::new("nsenter")
                .arg(format!("--net=/run/netns/{}", node.netns))
                .args(["unshare", "--uts", "sh", "-c"])
                .arg(format!(
                    "hostname {n} && exec slurmd -D -f {c} -N {n}",
                    n = node.name,
                    c = d.join("slurm.conf").display()
                ))
                .env("SLURM_CONF", d.join("slurm.conf")),
            &d.join(format!("{}.out", node.name)),
        );
        node.slurmd = Some(child);
    }

    fn wait_idle(&self, n: usize) {
        wait_for(
            || {
                // One line per node and partition: a node in two partitions is one node.
                let out = Command::new("sinfo")
                    .args(["-h", "-N", "-o", "%N %T"])
                    .env("SLURM_CONF", self.conf_path())
                    .output()
                    .unwrap();
                let text = String::from_utf8_lossy(&out.stdout);
                let idle: std::collections::BTreeSet<&str> = text
                    .lines()
                    .filter_map(|l| l.trim().strip_suffix(" idle"))
                    .collect();
                idle.len() == n
            },
            "every node idle",
        );
    }

    /// The node dies: its slurmd and everything running in its namespace (the job steps and
    /// the workers) killed at once.
    pub fn kill_node(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        // Every process of the node at once, its trials' workers with slurmd: a worker left
        // running while slurmd goes down first can finish its trial and write the very result
        // the test means to lose (seen on a loaded machine).
        kill_netns_pids(&node.netns);
        if let Some(mut c) = node.slurmd.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// slurmctld stops answering for `how_long` (SIGSTOP, then SIGCONT), as a controller does
    /// in a long state save or a failover: clients time out, nodes keep their jobs.
    pub fn stall_controller(&self, how_long: Duration) {
        let pid = nix::unistd::Pid::from_raw(self.slurmctld.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
        std::thread::sleep(how_long);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    }

    /// `squeue -t all -o FORMAT` of these jobs (every array task its own line).
    pub fn squeue(&self, jobs: &[u64], format: &str) -> String {
        let ids: Vec<String> = jobs.iter().map(u64::to_string).collect();
        let out = Command::new("squeue")
            .args(["-h", "-r", "-t", "all", "-o", format, "-j", &ids.join(",")])
            .env("SLURM_CONF", self.conf_path())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The array tasks Slurm runs on node `i` now.
    pub fn running_on(&self, i: usize) -> usize {
        let out = Command::new("squeue")
            .args(["-h", "-t", "running", "-w", &self.nodes[i].name])
            .env("SLURM_CONF", self.conf_path())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).lines().count()
    }
}

/// Slurm's clients as a coordinator started with [`logged_path`]'s `PATH` runs them: each call
/// one line of `<dir>/calls.log` (`<epoch seconds> <program> <arguments>`), then the real
/// client.
pub fn logged_path(dir: &Path) -> std::ffi::OsString {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for program in ["sbatch", "squeue", "scancel", "scontrol", "sacct"] {
        let real = Command::new("sh")
            .args(["-c", &format!("command -v {program}")])
            .output()
            .unwrap();
        let real = String::from_utf8_lossy(&real.stdout).trim().to_string();
        let shim = bin.join(program);
        std::fs::write(
            &shim,
            format!(
                "#!/bin/sh\necho \"$(date +%s.%N) {program} $*\" >> '{}'\nexec '{real}' \"$@\"\n",
                dir.join("calls.log").display()
            ),
        )
        .unwrap();
        sh(&format!("chmod +x {}", shim.display()));
    }
    let mut path = std::ffi::OsString::from(bin);
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    path
}

/// The calls [`logged_path`] logged: (epoch seconds, program, arguments).
pub fn logged_calls(dir: &Path) -> Vec<(f64, String, String)> {
    std::fs::read_to_string(dir.join("calls.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ' ');
            let at = parts.next()?.parse().ok()?;
            let program = parts.next()?.to_string();
            Some((at, program, parts.next().unwrap_or_default().to_string()))
        })
        .collect()
}

fn kill_netns_pids(netns: &str) {
    let out = Command::new("ip")
        .args(["netns", "pids", netns])
        .output()
        .unwrap();
    // Signalled from here, not by a `kill` process per pid: the node dies in one go.
    for pid in String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
    {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut c) = node.slurmd.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
            kill_netns_pids(&node.netns);
            let _ = Command::new("ip")
                .args(["netns", "del", &node.netns])
                .status();
        }
        let _ = self.slurmctld.kill();
        let _ = self.slurmctld.wait();
        let _ = self.munged.kill();
        let _ = self.munged.wait();
    }
}

fn rand_key() -> Vec<u8> {
    let mut key = vec![0u8; 1024];
    let mut f = std::fs::File::open("/dev/urandom").unwrap();
    std::io::Read::read_exact(&mut f, &mut key).unwrap();
    key
}

fn wait_for(mut ready: impl FnMut() -> bool, what: &str) {
    let start = Instant::now();
    while !ready() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The test cluster's configuration: everything under the cluster's folder, root as the Slurm
/// user, no accounting daemon, a node declared dead 5 s after it stops answering, and no
/// requeue (the coordinator owns retries).
fn conf(d: &Path, ctld_addr: &str, port: u32, nodes: &str) -> String {
    let d = d.display();
    let host = nix_hostname();
    format!(
        "ClusterName=geode\nSlurmctldHost={host}({ctld_addr})\nSlurmctldPort={port}\n\
         SlurmdPort={}\nSlurmUser=root\nSlurmdUser=root\nAuthType=auth/munge\n\
         AuthInfo=socket={d}/munge.sock\nCredType=cred/munge\nStateSaveLocation={d}/state\n\
         SlurmdSpoolDir={d}/spool-%n\nSlurmctldPidFile={d}/slurmctld.pid\n\
         SlurmdPidFile={d}/%n.pid\nSlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/%n.log\n\
         {TRACKING}\
         JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n\
         JobCompType=jobcomp/filetxt\nJobCompLoc={d}/jobcomp.txt\nSelectType=select/cons_tres\n\
         SelectTypeParameters=CR_CPU_Memory\nReturnToService=2\nSlurmdTimeout=5\nJobRequeue=0\n\
         MpiDefault=none\n{nodes}PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
        port + 1
    )
}

/// How the test cluster tracks a job's processes unless a test asks for cgroups.
const TRACKING: &str = "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n";

/// `cgroup.conf` beside `slurm.conf` for [`Cluster::start_in_cgroups`]: the v1 hierarchies this
/// host mounts, memory constrained to the job's request.
const CGROUP_CONF: &str = "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n\
                           ConstrainRAMSpace=yes\nConstrainCores=no\nConstrainDevices=no\n";

fn nix_hostname() -> String {
    let out = Command::new("hostname").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
