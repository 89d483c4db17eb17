//! Harbor tasks as they are published (issue 37): a compose file that moves `main`'s build to
//! the task's root (`context: ${CONTEXT_DIR}/..`, a Dockerfile that copies `app/`), beside a
//! sidecar built from a Dockerfile of another name, under the sandbox and the docker backend; a hostile one whose context or Dockerfile leaves the task's
//! folder; and bases named by ECR Public's copies of Docker Hub's official images
//! (`public.ecr.aws/docker/library/...`, digest-pinned or not), served through a Docker Hub
//! mirror under the built-in alias, with what was used recorded in each trial's `image`.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::common::trial_result;
use super::registry::{Registry, image_blobs, stored_base};

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A task whose test passes when `/app/out.txt` holds what `/app/greet.sh` (from the image)
/// prints, and whose solution writes it.
fn task(pack: &Path, name: &str, dockerfile: &str) -> PathBuf {
    let dir = pack.join(name);
    write(
        &dir.join("task.toml"),
        &format!("[task]\nname = \"test/{name}\"\n[environment]\nnetwork_mode = \"no-network\"\n"),
    );
    write(
        &dir.join("instruction.md"),
        "Run /app/greet.sh into /app/out.txt.\n",
    );
    write(&dir.join("environment/Dockerfile"), dockerfile);
    write(
        &dir.join("solution/solve.sh"),
        "#!/bin/bash\nset -e\n/app/greet.sh > /app/out.txt\n",
    );
    write(
        &dir.join("tests/test.sh"),
        "#!/bin/bash\nif [ -s /app/out.txt ] && [ \"$(cat /app/out.txt)\" = \"$(/app/greet.sh)\" ]; \
         then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n",
    );
    dir
}

/// The pattern of issue 37: the Dockerfile sits in `environment/` and copies `app/` from the
/// task's root, which the compose file makes the build context.
pub(super) fn root_context_task(pack: &Path, name: &str) -> PathBuf {
    let dir = task(
        pack,
        name,
        "FROM debian:bookworm-slim\nWORKDIR /app\nCOPY app/ /app/\nRUN chmod +x /app/greet.sh\n",
    );
    // A sidecar built from a Dockerfile of another name, beside it.
    write(
        &dir.join("environment/docker-compose.yaml"),
        "services:\n  main:\n    build:\n      context: ${CONTEXT_DIR}/..\n      \
         dockerfile: ${CONTEXT_DIR}/Dockerfile\n  helper:\n    build:\n      context: .\n      \
         dockerfile: Dockerfile.helper\n",
    );
    write(
        &dir.join("environment/Dockerfile.helper"),
        "FROM debian:bookworm-slim\nCMD [\"sleep\", \"infinity\"]\n",
    );
    write(
        &dir.join("app/greet.sh"),
        "#!/bin/sh\necho hello from the task root\n",
    );
    dir
}

fn outcome(run_dir: &Path, trial: &str) -> String {
    trial_result(run_dir, trial)["outcome"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn main_s_build_moved_to_the_task_root_passes_with_the_oracle_and_fails_with_nop() {
    stored_base("debian:bookworm-slim").await;
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("pack");
    root_context_task(&pack, "root-context");
    for (model, expected) in [("oracle", "passed"), ("nop", "failed")] {
        let (_, run_dir) = super::common::run_model_with(
            super::common::geode_in(dir.path()),
            &pack,
            &dir.path().join(format!("jobs-{model}")),
            model,
            &[],
        );
        let result = trial_result(&run_dir, "test-root-context__0");
        assert_eq!(result["outcome"], expected, "{model}: {result}");
        let helper = run_dir.join("test-root-context__0/services/helper/agent/logs/service.log");
        assert!(helper.is_file(), "the sidecar did not run: {result}");
        let notes = result["notes"].to_string();
        assert!(!notes.contains("compose"), "{notes}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn main_s_build_moved_to_the_task_root_passes_under_docker_too() {
    let engine = super::dockerd::Engine::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("pack");
    root_context_task(&pack, "root-context");
    for (model, expected) in [("oracle", "passed"), ("nop", "failed")] {
        let mut geode = super::common::geode_in(dir.path());
        geode.env("DOCKER_HOST", engine.host());
        let (_, run_dir) = super::common::run_model_with(
            geode,
            &pack,
            &dir.path().join(format!("jobs-{model}")),
            model,
            &["--env", "docker"],
        );
        assert_eq!(
            outcome(&run_dir, "test-root-context__0"),
            expected,
            "{model}"
        );
    }
}

#[test]
fn a_build_that_leaves_the_task_folder_is_a_broken_task_naming_the_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("pack");
    let outside = dir.path().join("outside");
    write(
        &outside.join("Dockerfile"),
        "FROM debian:bookworm-slim\nCOPY . /loot\n",
    );
    let compose = |name: &str, text: &str| {
        let task_dir = root_context_task(&pack, name);
        write(&task_dir.join("environment/docker-compose.yaml"), text);
        task_dir
    };
    compose(
        "up-and-out",
        "services:\n  main:\n    build:\n      context: ${CONTEXT_DIR}/../../..\n",
    );
    let linked = compose(
        "linked-context",
        "services:\n  main:\n    build:\n      context: loot\n",
    );
    std::os::unix::fs::symlink(&outside, linked.join("environment/loot")).unwrap();
    let linked_file = compose(
        "linked-dockerfile",
        "services:\n  main:\n    build:\n      context: ..\n      dockerfile: app/Dockerfile\n",
    );
    std::os::unix::fs::symlink(
        outside.join("Dockerfile"),
        linked_file.join("app/Dockerfile"),
    )
    .unwrap();
    let out = super::common::geode_in(dir.path())
        .args(["tasks", "list"])
        .arg(&pack)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for (task, field) in [
        ("up-and-out", "services.main.build.context"),
        ("linked-context", "services.main.build.context"),
        ("linked-dockerfile", "services.main.build.dockerfile"),
    ] {
        let line = text
            .lines()
            .find(|l| l.contains(&format!("{task}/environment/docker-compose.yaml")))
            .unwrap_or_else(|| panic!("{task} not refused:\n{text}"));
        assert!(
            line.contains(field) && line.contains("outside the task's folder"),
            "{line}"
        );
    }
    assert!(!text.contains("panicked"), "{text}");
}

/// `geode run PACK --model oracle` with a home of its own (config.toml), the images in
/// `images`: the run's folder. The run may fail (an unsupported trial); the trials are read.
fn run_with_home(home: &Path, images: &Path, config: &str, pack: &Path) -> PathBuf {
    write(&home.join("home/config.toml"), config);
    let mut geode: Command = super::common::geode_in(home);
    geode.env("GEODE_IMAGES", images);
    let out = geode
        .arg("run")
        .arg(pack)
        .args(["--model", "oracle", "--json", "--jobs-dir"])
        .arg(home.join("jobs"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "geode run: {e}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    PathBuf::from(summary["run_dir"].as_str().unwrap())
}

const ECR_DEBIAN: &str = "public.ecr.aws/docker/library/debian:bookworm-slim";

fn greeting_task(pack: &Path, name: &str, from: &str) {
    let dir = task(
        pack,
        name,
        &format!("FROM {from}\nWORKDIR /app\nCOPY greet.sh /app/greet.sh\n"),
    );
    write(
        &dir.join("environment/greet.sh"),
        "#!/bin/sh\necho hello from ECR Public\n",
    );
    std::fs::set_permissions(
        dir.join("environment/greet.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
}

#[tokio::test]
async fn an_ecr_public_base_is_docker_hub_s_through_its_mirror_with_the_alias_recorded() {
    let base = stored_base("debian:bookworm-slim").await;
    let registry = Registry::start();
    let digest = image_blobs(&base)
        .push(&registry.addr, "library/debian", "bookworm-slim")
        .await;
    let home = tempfile::tempdir().unwrap();
    let pack = home.path().join("pack");
    greeting_task(&pack, "ecr", ECR_DEBIAN);
    greeting_task(&pack, "ecr-pinned", &format!("{ECR_DEBIAN}@{digest}"));
    let wrong = format!("sha256:{}", "0".repeat(64));
    greeting_task(&pack, "ecr-wrong-pin", &format!("{ECR_DEBIAN}@{wrong}"));
    // A store of the test's own, so the pull really happens, from the Docker Hub mirror only.
    let run_dir = run_with_home(
        home.path(),
        &home.path().join("images"),
        &format!(
            "[images]\nmirrors = {{ \"docker.io\" = \"http://{}\" }}\n",
            registry.addr
        ),
        &pack,
    );
    let mirror = format!("http://{}", registry.addr);

    let ecr = trial_result(&run_dir, "test-ecr__0");
    assert_eq!(ecr["outcome"], "passed", "{ecr}");
    let image = &ecr["image"];
    assert_eq!(image["from"], ECR_DEBIAN, "{image}");
    assert_eq!(
        image["alias"], "docker.io/library/debian:bookworm-slim",
        "{image}"
    );
    assert_eq!(image["mirror"], mirror.as_str(), "{image}");
    assert_eq!(image["stand_in"], false, "{image}");
    assert!(image["pin"].is_null(), "{image}");
    assert_eq!(image["digest"], digest.as_str(), "{image}");

    // The pin is honoured: the mirror's image is the pinned one.
    let pinned = trial_result(&run_dir, "test-ecr-pinned__0");
    assert_eq!(pinned["outcome"], "passed", "{pinned}");
    assert_eq!(pinned["image"]["digest"], digest.as_str(), "{pinned}");
    assert_eq!(
        pinned["image"]["pin"],
        serde_json::json!({"digest": digest, "honoured": true}),
        "{pinned}"
    );

    // `geode image pull` asks under the alias too, into a store of its own.
    let mut pull = super::common::geode_in(home.path());
    let out = pull
        .env("GEODE_IMAGES", home.path().join("pulled"))
        .args(["image", "pull", ECR_DEBIAN])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.starts_with("docker.io/library/debian:bookworm-slim"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // No source serves the wrong pin, and a stand-in for a pin takes an explicit setting.
    let refused = trial_result(&run_dir, "test-ecr-wrong-pin__0");
    let text = refused.to_string();
    assert!(text.contains("environment_unsupported"), "{text}");
    assert!(
        text.contains(&wrong) && text.contains("stand_in_pinned"),
        "{text}"
    );
}

#[tokio::test]
async fn a_pinned_base_no_source_serves_is_stood_in_for_only_when_the_setting_says_so_and_labelled()
{
    // The machine-wide store holds `debian:bookworm-slim` bootstrapped from the Debian archive.
    stored_base("debian:bookworm-slim").await;
    let home = tempfile::tempdir().unwrap();
    let pack = home.path().join("pack");
    let wrong = format!("sha256:{}", "0".repeat(64));
    greeting_task(&pack, "stand-in", &format!("{ECR_DEBIAN}@{wrong}"));
    let run_dir = run_with_home(
        home.path(),
        &super::registry::shared_store(),
        "[images]\nstand_in_pinned = true\n",
        &pack,
    );
    let result = trial_result(&run_dir, "test-stand-in__0");
    assert_eq!(result["outcome"], "passed", "{result}");
    let image = &result["image"];
    assert_eq!(image["stand_in"], true, "{image}");
    assert_eq!(
        image["alias"], "docker.io/library/debian:bookworm-slim",
        "{image}"
    );
    assert_eq!(
        image["pin"],
        serde_json::json!({"digest": wrong, "honoured": false}),
        "{image}"
    );
    let notes = result["notes"].to_string();
    assert!(
        notes.contains(&format!("the digest pin {wrong} was not honoured")),
        "{notes}"
    );
}
