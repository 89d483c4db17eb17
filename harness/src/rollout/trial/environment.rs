//! The trial's environment as a backend takes it (the agent's, and a separate verifier's),
//! and its start: image, sandbox, the compose group's sidecars, the image's ENTRYPOINT and
//! the healthcheck. Commands a task.toml names run here too, with the timeouts the trial's
//! multiplier scales.

use std::path::PathBuf;

use geode_graders::TrialOutcome;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::phase::{PhaseEvent, TrialPhase};
use super::plan::{PhaseObserver, TrialPlan};
use super::record::{Ending, PhaseClock, Record, env_outcome};
use crate::env::{Backend, EnvError, EnvironmentSpec, NetworkPolicy, Sandbox};
use crate::pack::{EnvironmentSection, Task, TaskHash};
use crate::rollout::images::ImageCache;
use crate::rollout::services::{self, GroupStart};
use crate::rollout::task_command::{scaled, wait_healthy};

/// What `task` asks of its environment, as a backend takes it: with a compose file, what it
/// adds to `main` (environment, where the image is built from, the image when the task names
/// none) and the group's names.
pub fn environment_spec(
    task: &Task,
    timeout_multiplier: f64,
    build_log: Option<PathBuf>,
) -> EnvironmentSpec {
    let mut spec = section_spec(
        task,
        &task.config.environment,
        task.config.network_policy(),
        task.environment_dir(),
        timeout_multiplier,
        build_log,
    );
    main_build(task, &mut spec);
    if let Some(compose) = &task.compose {
        spec.env.extend(compose.main.env.iter().cloned());
        if spec.docker_image.is_none()
            && spec.build.is_none()
            && !task.environment_dir().join("Dockerfile").is_file()
        {
            spec.docker_image = compose.main.image.clone();
        }
        spec.group.names = services::group_names(compose);
    }
    spec
}

/// The compose file's `build:` for `main`, when the task's image is built rather than named:
/// its context and Dockerfile, and its args beneath task.toml's `build_args` (which win, as
/// the later of two values for one ARG).
fn main_build(task: &Task, spec: &mut EnvironmentSpec) {
    let Some(build) = task.compose.as_ref().and_then(|c| c.main.build.as_ref()) else {
        return;
    };
    if spec.docker_image.is_some() {
        return;
    }
    spec.build = Some(build.source());
    let mut args = build.args.clone();
    args.append(&mut spec.build_args);
    spec.build_args = args;
}

/// A separate verifier's environment, as Harbor resolves it, and the key its image is cached
/// under: `[verifier.environment]`'s image when it names one; else `tests/Dockerfile` when
/// there is one; else the task's own environment (the same image as the agent's).
pub(crate) fn verifier_environment_spec(
    task: &Task,
    timeout_multiplier: f64,
    build_log: Option<PathBuf>,
) -> (EnvironmentSpec, TaskHash) {
    let own = task.config.verifier.environment.as_ref();
    let section = own.unwrap_or(&task.config.environment);
    let policy = match own {
        Some(section) => section.network_policy(section.network_mode.as_deref()),
        None => task.config.network_policy(),
    };
    let tests_build = task.tests_dir().join("Dockerfile").is_file();
    let dir = if tests_build && section.docker_image.is_none() {
        task.tests_dir()
    } else {
        task.environment_dir()
    };
    let mut spec = section_spec(task, section, policy, dir, timeout_multiplier, build_log);
    if own.is_some() && spec.docker_image.is_none() && !tests_build {
        spec.docker_image = task.config.environment.docker_image.clone();
    }
    if spec.docker_image.is_none() && !tests_build {
        main_build(task, &mut spec);
    }
    if own.is_none() && !tests_build {
        return (spec, task.hash.clone());
    }
    (spec, TaskHash(format!("{}+verifier", task.hash)))
}

fn section_spec(
    task: &Task,
    environment: &EnvironmentSection,
    network: NetworkPolicy,
    environment_dir: PathBuf,
    timeout_multiplier: f64,
    build_log: Option<PathBuf>,
) -> EnvironmentSpec {
    EnvironmentSpec {
        task_name: task.id.clone(),
        environment_dir,
        network,
        cpus: environment.cpus,
        memory_mb: environment.memory_mb,
        storage_mb: environment.storage_mb,
        pids_max: Some(512),
        build_timeout: scaled(task.config.build_timeout(), timeout_multiplier),
        time_limits: Some(time_limits(task, timeout_multiplier)),
        env: environment.env.clone().into_iter().collect(),
        docker_image: environment.docker_image.clone(),
        build: None,
        build_args: environment.build_args.clone().into_iter().collect(),
        build_log,
        group: Default::default(),
    }
}

/// The task's own limits on how long its trial runs: agent and verifier, once per step,
/// scaled as the trial scales them.
fn time_limits(task: &Task, timeout_multiplier: f64) -> std::time::Duration {
    let steps = task
        .config
        .steps
        .as_ref()
        .map_or(1, |steps| steps.len().max(1));
    let once = task.config.agent_timeout() + task.config.verifier_timeout();
    scaled(once, timeout_multiplier) * u32::try_from(steps).unwrap_or(u32::MAX)
}

/// What the trial agent cannot honour yet is a note; what no backend can run is the ending.
pub(super) fn check_supported(task: &Task, rec: &mut Record) -> Result<(), Ending> {
    let env = &task.config.environment;
    if !env.mcp_servers.is_empty() {
        rec.notes.push(format!(
            "environment.mcp_servers: {} server(s) not connected to GEODE's trial agent yet",
            env.mcp_servers.len()
        ));
    }
    match env.unsupported() {
        Some(why) => Err(Ending::infra(
            TrialOutcome::EnvironmentUnsupported,
            "EnvironmentUnsupportedError",
            why,
        )),
        None => Ok(()),
    }
}

/// The environment phase: the image, the sandbox and the compose group's sidecars, then the
/// healthcheck. A sandbox that started comes back with the healthcheck's verdict beside it,
/// as it still has to be torn down when the check failed.
pub(super) async fn start(
    plan: &TrialPlan,
    backend: &dyn Backend,
    images: &ImageCache,
    observer: &dyn PhaseObserver,
    cancel: &CancellationToken,
    rec: &mut Record,
) -> Result<(Box<dyn Sandbox>, Result<(), String>), Ending> {
    let task = &plan.task;
    let spec = environment_spec(
        task,
        plan.timeout_multiplier,
        Some(plan.trial_dir.join("build.log")),
    );

    observer.phase(
        &plan.trial_name,
        PhaseEvent::Phase(TrialPhase::EnvironmentSetup),
    );
    let t = PhaseClock::start();
    let started = async {
        let image = images.prepare(backend, &task.hash, &spec).await?;
        let image = with_agent_layer(image, plan.agent.layer())?;
        let mut sandbox = backend.start(&spec, &image, &plan.trial_dir).await?;
        if let Some(compose) = task.compose.as_ref().filter(|c| !c.sidecars.is_empty()) {
            let start = GroupStart {
                task,
                compose,
                main_spec: &spec,
                backend,
                images,
                trial_dir: &plan.trial_dir,
                timeout_multiplier: plan.timeout_multiplier,
                cancel,
            };
            sandbox = services::start_group(start, sandbox).await?;
        }
        // As docker runs `main` under Harbor's compose: ENTRYPOINT... sh -c "sleep infinity".
        let entry_notes = if image.entrypoint.is_empty() {
            Vec::new()
        } else {
            crate::env::entrypoint::start(sandbox.as_ref(), &image.entrypoint, cancel).await?
        };
        if let Some(size) = task.config.environment.display {
            sandbox.start_display(size.width, size.height).await?;
        }
        Ok::<_, EnvError>((image, sandbox, entry_notes))
    }
    .await;
    let (image, sandbox, entry_notes) = match started {
        Ok(s) => s,
        Err(e) => {
            rec.close_phase(TrialPhase::EnvironmentSetup, t);
            return Err(Ending::infra(
                env_outcome(&e),
                "EnvironmentError",
                e.to_string(),
            ));
        }
    };
    let healthy = match &task.config.environment.healthcheck {
        Some(check) => wait_healthy(sandbox.as_ref(), check, plan.timeout_multiplier, cancel).await,
        None => Ok(()),
    };
    rec.close_phase(TrialPhase::EnvironmentSetup, t);
    // The sandbox's notes, less the image's it repeats.
    rec.notes.extend(
        sandbox
            .notes()
            .into_iter()
            .filter(|note| !image.notes.contains(note)),
    );
    rec.notes.extend(image.notes.iter().cloned());
    rec.notes.extend(entry_notes);
    if let Some(compose) = &task.compose {
        rec.notes.extend(compose.notes.iter().cloned());
    }
    rec.image = Some(json!({
        "from": image.from,
        "source": image.source,
        "digest": image.digest,
        "alias": image.origin.alias,
        "mirror": image.origin.mirror,
        "stand_in": image.origin.stand_in,
        "pin": image.origin.pin,
        "workdir": image.workdir,
        "cache_hit": image.cache_hit,
        "build_seconds": image.build_duration.as_secs_f64(),
    }));
    Ok((sandbox, healthy))
}

/// A third-party agent's installed layer on top of the task image's layers: one more lower
/// folder of the overlay, nothing copied. Only a sandbox rooted in image layers can stack it.
fn with_agent_layer(
    mut image: crate::env::PreparedImage,
    layer: Option<&std::path::Path>,
) -> Result<crate::env::PreparedImage, EnvError> {
    let Some(layer) = layer else {
        return Ok(image);
    };
    match &mut image.root {
        crate::env::ImageRoot::Layers(lower) => {
            lower.push(layer.to_path_buf());
            Ok(image)
        }
        _ => Err(EnvError::Unsupported(
            "a third-party agent needs the sandbox backend on the task's image (its layer is \
             stacked over the image's): not --env docker or --base host"
                .into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task whose compose file moves `main`'s build to the task's root, with `toml_extra` in
    /// its task.toml.
    fn task(toml_extra: &str) -> (tempfile::TempDir, Task) {
        let dir = tempfile::tempdir().unwrap();
        let write = |rel: &str, text: &str| {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write(
            "task.toml",
            &format!("[task]\nname = \"t/x\"\n{toml_extra}"),
        );
        write("instruction.md", "Do it.\n");
        write(
            "environment/Dockerfile",
            "FROM debian:bookworm-slim\nCOPY app/ /app/\n",
        );
        write("app/run.sh", "true\n");
        write(
            "environment/docker-compose.yaml",
            "services:\n  main:\n    build:\n      context: ${CONTEXT_DIR}/..\n      \
             dockerfile: ${CONTEXT_DIR}/Dockerfile\n      args: {A: compose, B: compose}\n",
        );
        let task = Task::load(dir.path()).unwrap();
        (dir, task)
    }

    #[test]
    fn main_s_compose_build_is_what_the_backends_build_from() {
        let (dir, task) = task("[environment.build_args]\nB = \"task\"\n");
        let root = std::fs::canonicalize(dir.path()).unwrap();
        for spec in [
            environment_spec(&task, 1.0, None),
            verifier_environment_spec(&task, 1.0, None).0,
        ] {
            assert_eq!(spec.context(), root);
            assert_eq!(spec.dockerfile(), root.join("environment/Dockerfile"));
            // The workspace the host backend copies stays the environment folder.
            assert_eq!(spec.environment_dir, task.environment_dir());
            // task.toml's value comes last, so it is the one an ARG takes.
            assert_eq!(
                spec.build_args,
                [("A", "compose"), ("B", "compose"), ("B", "task")]
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            );
        }
    }

    #[test]
    fn a_docker_image_in_task_toml_wins_over_main_s_compose_build_with_a_note() {
        let (_dir, task) = task("[environment]\ndocker_image = \"debian:bookworm-slim\"\n");
        let spec = environment_spec(&task, 1.0, None);
        assert_eq!(spec.build, None);
        assert_eq!(spec.docker_image.as_deref(), Some("debian:bookworm-slim"));
        let notes = &task.compose.as_ref().unwrap().notes;
        assert!(
            notes
                .iter()
                .any(|n| n.contains("services.main.build is not used")),
            "{notes:?}"
        );
    }
}
