//! The `kubernetes` backend: each trial's environment is a Pod of the task's image in a
//! cluster, reached only through the API server, and asking for no privilege (see `pod.rs`).
//! The agent loop, the model calls, the records and the run store stay on the machine that
//! runs `geode run` (the coordinator), as with the docker backend; the isolation is the
//! cluster runtime's (gVisor or Kata through a `runtimeClassName`, where the cluster has one).
//!
//! `prepare` builds the task's image with GEODE's own builder (the sandbox backend on this
//! machine: base pulled or bootstrapped, the Dockerfile's steps as cached layers) and pushes it
//! to the registry the cluster pulls from (`push/`), named by its manifest digest. `start`
//! creates the trial's Pod (`sleep infinity`, labelled with the run, the trial and this
//! process's session) and waits until it runs; commands, file tools and copies travel through
//! `pods/exec` (`api.rs`, `ws.rs`, `sandbox.rs`). The first Pod a process starts for a run
//! deletes that run's Pods of every other session: what a killed coordinator left behind,
//! which a resume would otherwise leave running until their `activeDeadlineSeconds`.
//!
//! How many Pods live at once is the run's `-n`: the trial scheduler starts no more trials than
//! that, and each trial has one Pod (two for a moment when a task's verifier runs in an
//! environment of its own). Bare Pods, not Jobs: a Pod ends only when the harness is done with
//! it, and teardown deletes it.

pub mod api;
pub mod pod;
pub mod push;
pub mod sandbox;
pub mod settings;
pub mod ws;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

pub use sandbox::KubernetesSandbox;
pub use settings::{ClusterAccess, KubernetesSettings, PodSecurity, RegistryTarget};

use crate::{Backend, EnvError, EnvironmentSpec, ImageRoot, NetworkPolicy, PreparedImage, Sandbox};
use api::Api;
use pod::{PodIdentity, labels};

/// Trials in Pods of a Kubernetes cluster.
pub struct KubernetesBackend {
    /// What builds (or pulls) task images on this machine: the sandbox backend.
    builder: Arc<dyn Backend>,
    api: Api,
    settings: KubernetesSettings,
    pusher: push::Pusher,
    /// This process's label value on every Pod it makes.
    session: String,
    /// Runs whose Pods of other sessions were already deleted.
    swept: tokio::sync::Mutex<HashSet<String>>,
}

impl std::fmt::Debug for KubernetesBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubernetesBackend")
            .field("api", &self.api)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

impl KubernetesBackend {
    /// The backend over `settings`, building images with `builder` and packing layers for the
    /// registry in `scratch`. Nothing is asked of the cluster yet.
    pub fn new(
        settings: KubernetesSettings,
        builder: Arc<dyn Backend>,
        scratch: PathBuf,
    ) -> Result<Self, EnvError> {
        let access = settings.access()?;
        let target = settings.registry_target()?;
        Ok(KubernetesBackend {
            builder,
            api: Api::new(&access)?,
            pusher: push::Pusher::new(target, scratch)?,
            settings,
            session: uuid::Uuid::new_v4().simple().to_string(),
            swept: tokio::sync::Mutex::new(HashSet::new()),
        })
    }

    /// Delete the Pods of `run` that another coordinator process made (once per run and
    /// process); how many there were.
    async fn sweep(&self, run: &str) -> Result<usize, EnvError> {
        let mut swept = self.swept.lock().await;
        if swept.contains(run) {
            return Ok(0);
        }
        let selector = format!(
            "{}={run},{}!={}",
            labels::RUN,
            labels::SESSION,
            self.session
        );
        let leftovers = self.api.list_pods(&selector).await?;
        for name in &leftovers {
            self.api.delete_pod(name).await?;
        }
        if !leftovers.is_empty() {
            tracing::info!(run, pods = ?leftovers, "deleted the Pods an earlier coordinator left");
        }
        swept.insert(run.to_string());
        Ok(leftovers.len())
    }
}

/// The run and trial a trial folder belongs to: the trial is the folder's name; the run is the
/// folder right below the jobs folder (the one holding `geode.db`), else the parent's name.
fn run_and_trial(trial_dir: &Path) -> (String, String) {
    let name = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let run = trial_dir
        .ancestors()
        .find(|a| {
            a.parent()
                .is_some_and(|jobs| jobs.join("geode.db").is_file())
        })
        .or(trial_dir.parent())
        .map(name)
        .unwrap_or_default();
    (run, name(trial_dir))
}

/// The numeric `uid[:gid]` of a named USER, from the topmost `/etc/passwd` among `layers`
/// (bottom first); `None` when none names it.
fn numeric_user(user: &str, layers: &[PathBuf]) -> Option<String> {
    let (name, _) = user.split_once(':').unwrap_or((user, ""));
    let passwd = layers
        .iter()
        .rev()
        .map(|layer| layer.join("etc/passwd"))
        .find(|file| file.is_file())?;
    let text = std::fs::read_to_string(passwd).ok()?;
    text.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() >= 4 && fields[0] == name).then(|| format!("{}:{}", fields[2], fields[3]))
    })
}

#[async_trait]
impl Backend for KubernetesBackend {
    fn kind(&self) -> crate::kind::BackendKind {
        crate::kind::BackendKind::Kubernetes
    }

    async fn prepare(&self, spec: &EnvironmentSpec) -> Result<PreparedImage, EnvError> {
        if let NetworkPolicy::Allowlist(hosts) = &spec.network {
            return Err(EnvError::Unsupported(format!(
                "allowed_hosts ({}) needs the sandbox backend: a Pod gets the namespace's \
                 network policy, public or none",
                hosts.join(", ")
            )));
        }
        let mut image = self.builder.prepare(spec).await?;
        let ImageRoot::Layers(layers) = &image.root else {
            return Err(EnvError::Unsupported(
                "the kubernetes backend runs images of GEODE's store (not --base host)".into(),
            ));
        };
        if let Some(user) = image.user.clone()
            && pod::ImageUser::of(Some(&user)) == pod::ImageUser::Named
            && let Some(numeric) = numeric_user(&user, layers)
        {
            image.user = Some(numeric);
        }
        let repo = format!(
            "geode-task/{}",
            pod::label_value(&spec.task_name).to_ascii_lowercase()
        );
        let reference = self.pusher.push(&repo, layers, &image).await?;
        image.notes.extend([
            format!("kubernetes: pushed as {reference}"),
            "kubernetes backend: the agent's processes are killed before the verifier starts \
             (a Pod has no view that keeps them from the reward)"
                .into(),
            "kubernetes backend: changes the agent made to the verifier's programs are not \
             read (the harness has no view of the container's writable layer)"
                .into(),
        ]);
        image.digest = reference.split_once('@').map(|(_, d)| d.to_string());
        image.root = ImageRoot::Registry(reference.clone());
        // What the Pods of this image will ask for, said once in every trial's notes.
        let probe = PodIdentity {
            name: String::new(),
            run: String::new(),
            trial: String::new(),
            session: String::new(),
            trial_dir: String::new(),
        };
        let (_, pod_notes) = pod::pod_spec(&probe, &reference, spec, &image, &self.settings);
        image.notes.extend(pod_notes);
        Ok(image)
    }

    async fn start(
        &self,
        spec: &EnvironmentSpec,
        image: &PreparedImage,
        trial_dir: &Path,
    ) -> Result<Box<dyn Sandbox>, EnvError> {
        let ImageRoot::Registry(reference) = &image.root else {
            return Err(EnvError::Unsupported(
                "the kubernetes backend runs images it pushed to the cluster's registry".into(),
            ));
        };
        if spec.group.join.is_some() {
            return Err(EnvError::Unsupported(
                "compose sidecars are not run on kubernetes yet (they would be containers of \
                 the trial's Pod)"
                    .into(),
            ));
        }
        let trial_dir = std::path::absolute(trial_dir).map_err(|e| EnvError::Io {
            context: format!("resolve {}", trial_dir.display()),
            source: e,
        })?;
        let (run, trial) = run_and_trial(&trial_dir);
        let run = pod::label_value(&run);
        self.sweep(&run).await?;
        for folder in [
            crate::agent_logs(&trial_dir),
            trial_dir.join("verifier"),
            trial_dir.join("artifacts"),
        ] {
            std::fs::create_dir_all(&folder).map_err(|e| EnvError::Io {
                context: format!("create {}", folder.display()),
                source: e,
            })?;
        }
        let id = PodIdentity {
            name: pod::pod_name(&trial),
            run,
            trial: pod::label_value(&trial),
            session: self.session.clone(),
            trial_dir: trial_dir.display().to_string(),
        };
        // Its notes are the image's, made in `prepare`.
        let (manifest, _) = pod::pod_spec(&id, reference, spec, image, &self.settings);
        self.api
            .create_pod(&manifest)
            .await
            .map_err(|e| EnvError::SetupFailed {
                step: "kubernetes pod".into(),
                message: e.to_string(),
            })?;
        let limit = Duration::from_secs(self.settings.start_timeout_sec.unwrap_or(300));
        let pod = sandbox::Pod {
            api: self.api.clone(),
            name: id.name.clone(),
        };
        let ready = async {
            sandbox::wait_running(&self.api, &id.name, limit).await?;
            pod.must(
                "make /logs",
                "mkdir -p -m 777 /logs/agent /logs/verifier /logs/artifacts",
                &[],
            )
            .await
        };
        if let Err(e) = ready.await {
            // A Pod that never ran is deleted at once; a failed delete is the cluster's
            // to clean up by the run's label.
            let _ = self.api.delete_pod(&id.name).await;
            return Err(e);
        }
        let root = PathBuf::from(&image.workdir);
        Ok(Box::new(KubernetesSandbox::new(pod, root, &trial_dir)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trial_folder_names_its_run_below_the_jobs_folder() {
        let jobs = tempfile::tempdir().unwrap();
        std::fs::write(jobs.path().join("geode.db"), "").unwrap();
        let trial = jobs.path().join("run-1").join("hello__0");
        assert_eq!(run_and_trial(&trial), ("run-1".into(), "hello__0".into()));
        // A separate verifier's environment, one folder further down, is still of the run.
        let verifier = trial.join("verifier-env");
        assert_eq!(run_and_trial(&verifier).0, "run-1");
        assert_eq!(
            run_and_trial(Path::new("/elsewhere/r/t")),
            ("r".into(), "t".into())
        );
    }

    #[test]
    fn a_named_user_is_made_numeric_from_the_topmost_passwd() {
        let dir = tempfile::tempdir().unwrap();
        let (low, high) = (dir.path().join("low"), dir.path().join("high"));
        for (layer, uid) in [(&low, 1000), (&high, 1001)] {
            std::fs::create_dir_all(layer.join("etc")).unwrap();
            std::fs::write(
                layer.join("etc/passwd"),
                format!("root:x:0:0::/root:/bin/sh\napp:x:{uid}:{uid}::/home/app:/bin/sh\n"),
            )
            .unwrap();
        }
        let layers = vec![low, high, dir.path().join("empty")];
        assert_eq!(numeric_user("app", &layers).as_deref(), Some("1001:1001"));
        assert_eq!(numeric_user("nobody", &layers), None);
    }
}
