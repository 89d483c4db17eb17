//! Per-sandbox resource limits with cgroups: v1 (`memory`, `pids`, `cpu` hierarchies) or the
//! unified v2 hierarchy, whichever this host mounts at /sys/fs/cgroup. The sandbox server
//! joins the groups before it starts any process, so everything inside inherits them.
//!
//! When a limit cannot be applied (no writable cgroup), the memory limit falls back to
//! `RLIMIT_AS` per process and the gap is recorded in the sandbox's notes; no limit is ever
//! silently dropped.

use std::path::{Path, PathBuf};
use std::time::Duration;

const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Where this process makes its sandboxes' groups in each v1 hierarchy, relative to the
/// hierarchy's root: below its own group once [`nest_in_own_groups`] ran (a Slurm worker, so
/// the job's limits, `scontrol listpids` and accounting cover its trials), at the root else.
static NEST: std::sync::OnceLock<std::collections::BTreeMap<String, PathBuf>> =
    std::sync::OnceLock::new();

/// Makes every sandbox this process starts from now on a group below the process's own in
/// each cgroup v1 hierarchy where that group lies in `job` (a folder name such as `job_7`: a
/// Slurm job's), instead of below the hierarchy's root. Hierarchies where the process is not in
/// the job's group (a site that constrains memory but not pids) keep the root.
pub fn nest_in_own_groups(job: &str) -> std::io::Result<()> {
    let mut own = parse_own_groups(&std::fs::read_to_string("/proc/self/cgroup")?);
    own.retain(|_, path| path.components().any(|c| c.as_os_str() == job));
    if NEST.set(own).is_err() {
        tracing::debug!("sandbox cgroups were already nested");
    }
    Ok(())
}

/// Each v1 controller's group path (`4:memory:/slurm/uid_0/job_7/step_batch` gives `memory`
/// -> `slurm/uid_0/job_7/step_batch`); the v2 line (`0::/...`) and named hierarchies carry no
/// controller and are skipped.
fn parse_own_groups(text: &str) -> std::collections::BTreeMap<String, PathBuf> {
    let mut own = std::collections::BTreeMap::new();
    for line in text.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        for c in controllers
            .split(',')
            .filter(|c| !c.is_empty() && !c.contains('='))
        {
            own.insert(c.to_string(), PathBuf::from(path.trim_start_matches('/')));
        }
    }
    own
}

/// The folder of `controller`'s hierarchy under which this process's sandbox groups go.
fn controller_base(root: &Path, controller: &str) -> PathBuf {
    let base = root.join(controller);
    match NEST.get().and_then(|own| own.get(controller)) {
        Some(own) => base.join(own),
        None => base,
    }
}
/// CFS period for the cpu quota (the kernel's default).
const CPU_PERIOD_US: u64 = 100_000;

#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Limits {
    pub memory_bytes: Option<u64>,
    pub pids_max: Option<u64>,
    pub cpus: Option<f64>,
}

/// The groups of one sandbox; remove with [`Cgroups::remove`] once its processes are gone.
#[derive(Debug, Default)]
pub(crate) struct Cgroups {
    dirs: Vec<PathBuf>,
    /// `cgroup.procs` files for the server to join.
    pub procs: Vec<PathBuf>,
    /// `cgroup.procs` files of the groups below them that every process of the agent's view
    /// joins: their limits leave [`verifier_pids`] and [`verifier_memory`] to the verifier.
    pub tool_procs: Vec<PathBuf>,
    /// Set when the memory limit could not go into a cgroup.
    pub rlimit_as: Option<u64>,
    /// Set when the pids limit could not go into a cgroup: each command's `RLIMIT_NPROC`,
    /// which the kernel counts per user of the sandbox's own user namespace.
    pub rlimit_nproc: Option<u64>,
    pub notes: Vec<String>,
}

impl Cgroups {
    pub(crate) fn create(name: &str, limits: Limits) -> Cgroups {
        Self::create_under(Path::new(CGROUP_ROOT), name, limits)
    }

    pub(crate) fn create_under(root: &Path, name: &str, limits: Limits) -> Cgroups {
        let mut groups = Cgroups::default();
        if limits
            == (Limits {
                memory_bytes: None,
                pids_max: None,
                cpus: None,
            })
        {
            return groups;
        }
        if root.join("cgroup.controllers").exists() {
            groups.create_v2(root, name, limits);
        } else {
            groups.create_v1(root, name, limits);
        }
        groups
    }

    fn create_v1(&mut self, root: &Path, name: &str, limits: Limits) {
        if let Some(bytes) = limits.memory_bytes {
            let applied = self.v1_group(
                root,
                "memory",
                name,
                &[("memory.limit_in_bytes", bytes.to_string())],
            );
            if applied {
                // Without swap accounting the file is missing; with it, swap must not extend
                // the limit.
                if let Some(dir) = self.dirs.last() {
                    let _ =
                        std::fs::write(dir.join("memory.memsw.limit_in_bytes"), bytes.to_string());
                }
                self.tool_group(
                    "memory.limit_in_bytes",
                    bytes.saturating_sub(verifier_memory(bytes)),
                );
            } else {
                self.rlimit_as = Some(bytes);
                self.notes.push(format!(
                    "memory limit applied as RLIMIT_AS={bytes} per process (no writable memory cgroup)"
                ));
            }
        }
        if let Some(max) = limits.pids_max {
            if self.v1_group(root, "pids", name, &[("pids.max", max.to_string())]) {
                self.tool_group("pids.max", max.saturating_sub(verifier_pids(max)));
            } else {
                self.pids_as_rlimit(max);
            }
        }
        if let Some(cpus) = limits.cpus {
            let quota = cpu_quota(cpus);
            let files = [
                ("cpu.cfs_period_us", CPU_PERIOD_US.to_string()),
                ("cpu.cfs_quota_us", quota.to_string()),
            ];
            if !self.v1_group(root, "cpu", name, &files) {
                self.notes.push(format!(
                    "cpu limit {cpus} not applied (no writable cpu cgroup)"
                ));
            }
        }
    }

    /// A pids limit no cgroup can hold: each command's `RLIMIT_NPROC` where commands run in
    /// a user namespace of their own (the kernel counts it per user of that namespace, so
    /// per sandbox); in the host's namespace it would count all of a uid's processes on the
    /// machine, so there the gap is only said.
    fn pids_as_rlimit(&mut self, max: u64) {
        if crate::rootless::active() {
            self.rlimit_nproc = Some(max);
            self.notes.push(format!(
                "pids limit {max} applied as RLIMIT_NPROC per user of the sandbox (no writable \
                 pids cgroup)"
            ));
        } else {
            self.notes.push(format!(
                "pids limit {max} not applied (no writable pids cgroup)"
            ));
        }
    }

    /// The agent's view's own group below the sandbox's (the last made), limited by `file` to
    /// `limit`: the rest of the sandbox's (see [`verifier_pids`], [`verifier_memory`]) is the
    /// verifier's whatever the agent leaves running. Without it (a group that cannot be made)
    /// the agent's view shares the sandbox's limit.
    fn tool_group(&mut self, file: &str, limit: u64) {
        let Some(parent) = self.dirs.last().cloned() else {
            return;
        };
        let dir = parent.join(TOOL_GROUP);
        if std::fs::create_dir(&dir).is_err()
            || std::fs::write(dir.join(file), limit.max(1).to_string()).is_err()
        {
            let _ = std::fs::remove_dir(&dir);
            self.notes.push(format!(
                "nothing of {} kept for the verifier: the agent's view shares the sandbox's limit",
                parent.display()
            ));
            return;
        }
        self.tool_procs.push(dir.join("cgroup.procs"));
        // Removed before its parent.
        let at = self.dirs.len() - 1;
        self.dirs.insert(at, dir);
    }

    /// Create `<root>/<controller>/geode/<name>` and write `files`; false (and nothing left
    /// behind) when any step fails.
    fn v1_group(
        &mut self,
        root: &Path,
        controller: &str,
        name: &str,
        files: &[(&str, String)],
    ) -> bool {
        let base = controller_base(root, controller);
        if !base.join("cgroup.procs").exists() {
            return false;
        }
        let dir = base.join("geode").join(name);
        if std::fs::create_dir_all(&dir).is_err() {
            return false;
        }
        for (file, value) in files {
            if std::fs::write(dir.join(file), value).is_err() {
                let _ = std::fs::remove_dir(&dir);
                return false;
            }
        }
        self.procs.push(dir.join("cgroup.procs"));
        self.dirs.push(dir);
        true
    }

    fn create_v2(&mut self, root: &Path, name: &str, limits: Limits) {
        let parent = root.join("geode");
        let dir = parent.join(name);
        // Controllers must be enabled in every ancestor's subtree_control.
        let _ = std::fs::create_dir_all(&parent);
        let _ = std::fs::write(root.join("cgroup.subtree_control"), "+memory +pids +cpu");
        let _ = std::fs::write(parent.join("cgroup.subtree_control"), "+memory +pids +cpu");
        if std::fs::create_dir_all(&dir).is_err() {
            if let Some(bytes) = limits.memory_bytes {
                self.rlimit_as = Some(bytes);
            }
            self.notes
                .push("no writable cgroup v2 group: limits applied as RLIMIT_AS only".into());
            if let Some(max) = limits.pids_max {
                self.pids_as_rlimit(max);
            }
            return;
        }
        if let Some(bytes) = limits.memory_bytes {
            if std::fs::write(dir.join("memory.max"), bytes.to_string()).is_ok() {
                let _ = std::fs::write(dir.join("memory.swap.max"), "0");
            } else {
                self.rlimit_as = Some(bytes);
                self.notes.push(format!(
                    "memory limit applied as RLIMIT_AS={bytes} per process"
                ));
            }
        }
        if let Some(max) = limits.pids_max
            && std::fs::write(dir.join("pids.max"), max.to_string()).is_err()
        {
            self.pids_as_rlimit(max);
        }
        if let Some(cpus) = limits.cpus
            && std::fs::write(
                dir.join("cpu.max"),
                format!("{} {CPU_PERIOD_US}", cpu_quota(cpus)),
            )
            .is_err()
        {
            self.notes.push(format!("cpu limit {cpus} not applied"));
        }
        self.dirs.push(dir.clone());
        if !self.v2_split(&dir, limits) {
            self.procs.push(dir.join("cgroup.procs"));
        }
    }

    /// v2 keeps processes out of a group that hands controllers to its children, so the
    /// sandbox's group splits in two leaves: [`SERVER_GROUP`] (the server and the verifier,
    /// the sandbox's whole limit) and [`TOOL_GROUP`] (the agent's view, less the verifier's
    /// share). False, with a note and nothing left behind, when the split cannot be made; the
    /// sandbox's group is then joined whole.
    fn v2_split(&mut self, dir: &Path, limits: Limits) -> bool {
        let tool = dir.join(TOOL_GROUP);
        let server = dir.join(SERVER_GROUP);
        let mut files = Vec::new();
        if let Some(bytes) = limits.memory_bytes {
            let kept = bytes.saturating_sub(verifier_memory(bytes)).max(1);
            files.push(("memory", kept.to_string()));
        }
        if let Some(max) = limits.pids_max {
            let kept = max.saturating_sub(verifier_pids(max)).max(1);
            files.push(("pids", kept.to_string()));
        }
        if files.is_empty() {
            // No memory or pids limit: no share to keep back for the verifier.
            return false;
        }
        let controllers: Vec<String> = files.iter().map(|(c, _)| format!("+{c}")).collect();
        let made = std::fs::write(dir.join("cgroup.subtree_control"), controllers.join(" "))
            .is_ok()
            && std::fs::create_dir(&server).is_ok()
            && std::fs::create_dir(&tool).is_ok()
            && files
                .iter()
                .all(|(c, value)| std::fs::write(tool.join(format!("{c}.max")), value).is_ok());
        if !made {
            let _ = std::fs::remove_dir(&tool);
            let _ = std::fs::remove_dir(&server);
            self.notes.push(format!(
                "nothing of {} kept for the verifier: the agent's view shares the sandbox's limit",
                dir.display()
            ));
            return false;
        }
        self.procs.push(server.join("cgroup.procs"));
        self.tool_procs.push(tool.join("cgroup.procs"));
        // Leaves are removed before their parent.
        let at = self.dirs.len() - 1;
        self.dirs.insert(at, server);
        self.dirs.insert(at, tool);
        true
    }

    /// The groups a sandbox named `name` may have left behind (its process was killed before
    /// it could remove them), for [`Self::remove`].
    pub(crate) fn leftovers(name: &str) -> Cgroups {
        let root = Path::new(CGROUP_ROOT);
        let mut groups = Cgroups::default();
        let mut bases = vec![root.to_path_buf()];
        if let Ok(controllers) = std::fs::read_dir(root) {
            bases.extend(
                controllers
                    .flatten()
                    .map(|c| controller_base(root, &c.file_name().to_string_lossy())),
            );
        }
        let mut candidates = Vec::new();
        for base in bases {
            let group = base.join("geode").join(name);
            candidates.extend(LEAVES.iter().map(|leaf| group.join(leaf)));
            candidates.push(group);
        }
        groups.dirs = candidates.into_iter().filter(|d| d.is_dir()).collect();
        groups
    }

    /// Remove sandbox groups that no scratch folder accounts for (a run killed after its
    /// folder went, or one whose folder was deleted by hand): every `geode/<name>` group
    /// with no process that is older than `min_age`. A live sandbox's group always holds its
    /// server, and a group too young may be one another run has just made and not joined
    /// yet. Returns the groups removed.
    pub(crate) fn sweep_orphans(min_age: Duration) -> Vec<PathBuf> {
        Self::sweep_orphans_under(Path::new(CGROUP_ROOT), min_age)
    }

    fn sweep_orphans_under(root: &Path, min_age: Duration) -> Vec<PathBuf> {
        let mut parents = vec![root.join("geode")];
        if let Ok(controllers) = std::fs::read_dir(root) {
            parents.extend(controllers.flatten().map(|c| c.path().join("geode")));
        }
        let mut removed = Vec::new();
        for parent in parents {
            let Ok(groups) = std::fs::read_dir(&parent) else {
                continue;
            };
            // Groups are the folders; the control files beside them are not.
            for group in groups.flatten().map(|g| g.path()).filter(|g| g.is_dir()) {
                // A missing leaf holds nothing; an unreadable group is not touched.
                let empty = std::fs::read_to_string(group.join("cgroup.procs"))
                    .is_ok_and(|procs| procs.trim().is_empty())
                    && LEAVES.iter().all(|leaf| {
                        std::fs::read_to_string(group.join(leaf).join("cgroup.procs"))
                            .map_or(true, |procs| procs.trim().is_empty())
                    });
                let old = std::fs::metadata(&group)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age >= min_age);
                // rmdir refuses a group that gained a process meanwhile (EBUSY), and one
                // whose agent's group is still there.
                if empty && old {
                    for leaf in LEAVES {
                        let _ = std::fs::remove_dir(group.join(leaf));
                    }
                }
                if empty && old && std::fs::remove_dir(&group).is_ok() {
                    removed.push(group);
                }
            }
        }
        removed
    }

    /// Remove the groups. A group is removable only once its last process is gone and
    /// released, which can trail the kill by a moment: retry for up to `patience`.
    pub(crate) fn remove(&mut self, patience: Duration) -> Vec<String> {
        let deadline = std::time::Instant::now() + patience;
        let mut failures = Vec::new();
        for dir in self.dirs.drain(..) {
            loop {
                match std::fs::remove_dir(&dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(e) if std::time::Instant::now() >= deadline => {
                        failures.push(format!("cgroup {} left behind: {e}", dir.display()));
                        break;
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(1)),
                }
            }
        }
        failures
    }
}

/// The group of the agent's view, below a sandbox's own.
const TOOL_GROUP: &str = "tool";
/// On v2, the group of the server and the verifier beside [`TOOL_GROUP`].
const SERVER_GROUP: &str = "server";
/// The groups below a sandbox's own, removed before it.
const LEAVES: [&str; 2] = [TOOL_GROUP, SERVER_GROUP];

/// Pids of a sandbox's `max` that the agent's view can never take: the verifier's.
pub(crate) fn verifier_pids(max: u64) -> u64 {
    (max / 4).min(64)
}

/// Bytes of a sandbox's memory limit that the agent's view can never take: the verifier's.
pub(crate) fn verifier_memory(bytes: u64) -> u64 {
    (bytes / 4).min(256 << 20)
}

fn cpu_quota(cpus: f64) -> u64 {
    // At least 1 ms per period: the kernel's minimum quota.
    ((cpus * CPU_PERIOD_US as f64) as u64).max(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slurm_steps_own_groups_are_read_per_controller() {
        let own = parse_own_groups(
            "12:pids:/slurm/uid_0/job_7/step_batch\n4:memory:/slurm/uid_0/job_7/step_batch/task_0\n\
             3:cpu,cpuacct:/slurm/uid_0/job_7\n1:name=systemd:/\n0::/\n",
        );
        assert_eq!(
            own.get("memory"),
            Some(&PathBuf::from("slurm/uid_0/job_7/step_batch/task_0"))
        );
        assert_eq!(
            own.get("cpuacct"),
            Some(&PathBuf::from("slurm/uid_0/job_7"))
        );
        assert_eq!(own.len(), 4, "{own:?}");
    }

    #[test]
    fn no_limits_no_groups() {
        let dir = tempfile::tempdir().unwrap();
        let g = Cgroups::create_under(
            dir.path(),
            "t",
            Limits {
                memory_bytes: None,
                pids_max: None,
                cpus: None,
            },
        );
        assert!(g.procs.is_empty() && g.notes.is_empty());
    }

    #[test]
    fn unwritable_memory_falls_back_to_rlimit() {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits {
            memory_bytes: Some(64 << 20),
            pids_max: None,
            cpus: None,
        };
        let g = Cgroups::create_under(dir.path(), "t", limits);
        assert_eq!(g.rlimit_as, Some(64 << 20));
        assert_eq!(g.notes.len(), 1);
    }

    /// A limit makes the agent's view a group of its own below the sandbox's, holding all but
    /// the verifier's share, and removed first.
    #[test]
    fn the_agent_s_view_leaves_pids_to_the_verifier() {
        let dir = tempfile::tempdir().unwrap();
        // A v1 layout: a pids controller folder with its procs file.
        std::fs::create_dir_all(dir.path().join("pids")).unwrap();
        std::fs::write(dir.path().join("pids/cgroup.procs"), "").unwrap();
        let limits = Limits {
            memory_bytes: None,
            pids_max: Some(512),
            cpus: None,
        };
        let g = Cgroups::create_under(dir.path(), "t", limits);
        let group = dir.path().join("pids/geode/t");
        assert_eq!(g.procs, vec![group.join("cgroup.procs")]);
        assert_eq!(g.tool_procs, vec![group.join("tool/cgroup.procs")]);
        assert_eq!(
            std::fs::read_to_string(group.join("tool/pids.max")).unwrap(),
            "448"
        );
        assert_eq!(g.dirs, vec![group.join("tool"), group]);
        assert_eq!(verifier_pids(8), 2);
        assert_eq!(verifier_memory(2 << 30), 256 << 20);
        assert_eq!(verifier_memory(512 << 20), 128 << 20);
    }

    /// v2 holds no process in a group whose controllers pass to its children: the server
    /// and the verifier join one leaf, the agent's view the other with less.
    #[test]
    fn on_v2_the_sandbox_splits_into_two_leaves() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cgroup.controllers"), "memory pids cpu").unwrap();
        let limits = Limits {
            memory_bytes: Some(1 << 30),
            pids_max: Some(100),
            cpus: None,
        };
        let g = Cgroups::create_under(dir.path(), "t", limits);
        let group = dir.path().join("geode/t");
        assert_eq!(g.procs, vec![group.join("server/cgroup.procs")]);
        assert_eq!(g.tool_procs, vec![group.join("tool/cgroup.procs")]);
        let read = |f: &str| std::fs::read_to_string(group.join(f)).unwrap();
        assert_eq!(read("pids.max"), "100");
        assert_eq!(read("tool/pids.max"), "75");
        assert_eq!(
            read("tool/memory.max"),
            ((1u64 << 30) - (256 << 20)).to_string()
        );
        assert_eq!(read("cgroup.subtree_control"), "+memory +pids");
        assert_eq!(
            g.dirs,
            vec![group.join("tool"), group.join("server"), group.clone()]
        );
        assert!(g.notes.is_empty(), "{:?}", g.notes);
    }

    /// On the host's real cgroup file system (root only): an empty group goes, one with a
    /// process stays.
    #[test]
    fn orphan_groups_are_swept_and_live_ones_kept() {
        let root = Path::new(CGROUP_ROOT);
        let Some(controller) = ["pids", "memory", ""]
            .iter()
            .map(|c| root.join(c))
            .find(|c| c.join("cgroup.procs").exists())
        else {
            return;
        };
        let parent = controller.join("geode");
        if !nix::unistd::geteuid().is_root() || std::fs::create_dir_all(&parent).is_err() {
            return;
        }
        let orphan = parent.join(format!("test-orphan-{}", std::process::id()));
        let live = parent.join(format!("test-live-{}", std::process::id()));
        std::fs::create_dir(&orphan).unwrap();
        std::fs::create_dir(&live).unwrap();
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        std::fs::write(live.join("cgroup.procs"), sleeper.id().to_string()).unwrap();
        // Too young to be an orphan yet.
        let none = Cgroups::sweep_orphans_under(root, Duration::from_secs(3600));
        assert!(!none.contains(&orphan), "{none:?}");
        let removed = Cgroups::sweep_orphans_under(root, Duration::ZERO);
        assert!(removed.contains(&orphan), "{removed:?}");
        assert!(!orphan.exists());
        assert!(live.exists(), "a group with a process was removed");
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
        let mut held = Cgroups {
            dirs: vec![live.clone()],
            ..Cgroups::default()
        };
        assert!(held.remove(Duration::from_secs(2)).is_empty());
    }

    #[test]
    fn quota_has_a_floor() {
        assert_eq!(cpu_quota(0.5), 50_000);
        assert_eq!(cpu_quota(0.0), 1000);
    }
}
