//! Images built from Dockerfiles in sandboxes: cached steps and reported failures, an image
//! config's env, workdir, user and command, and multi-stage builds.

use super::*;

#[tokio::test]
async fn dockerfile_builds_caches_and_reports_failures() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let env_dir = f.trials.path().join("environment");
    std::fs::create_dir_all(&env_dir).unwrap();
    // The store outlives the test: a fresh ARG value makes this run's steps its own.
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    let dockerfile = |last: &str| {
        format!(
            "FROM python:3.11-slim\nARG NONCE={nonce}\nARG GREETING=built\nWORKDIR /app\nENV MODE=test \\\n    LEVEL=2\n\
             COPY data.txt /app/\nRUN echo $GREETING > /built.txt && sleep 1\n\
             RUN python3 -c 'import sqlite3; print(sqlite3.sqlite_version)' > /app/sqlite.txt\n\
             RUN echo tmpfile > /tmp/kept\nENV PATH=/opt/tool/bin:$PATH\nCMD [\"bash\"]\n{last}"
        )
    };
    std::fs::write(
        env_dir.join("Dockerfile"),
        dockerfile("RUN echo one > /last.txt\n"),
    )
    .unwrap();
    std::fs::write(env_dir.join("data.txt"), "payload\n").unwrap();
    let spec = spec(&env_dir);
    let base = layers(&base_image(&f.backend).await);
    let started = Instant::now();
    let image = f.backend.prepare(&spec).await.unwrap();
    let first = started.elapsed();
    assert!(!image.cache_hit);
    assert_eq!(image.workdir, "/app");
    assert!(
        image.env.contains(&("LEVEL".into(), "2".into())),
        "{:?}",
        image.env
    );
    // CMD is kept for what runs the image (a compose sidecar), not ignored.
    assert_eq!(image.cmd, ["bash"]);
    assert!(
        !image.notes.iter().any(|n| n.contains("CMD")),
        "{:?}",
        image.notes
    );
    // The base image's layers, then one per RUN and COPY.
    let built = layers(&image);
    assert_eq!(&built[..base.len()], &base[..]);
    assert_eq!(built.len(), base.len() + 5, "{built:?}");
    let started = Instant::now();
    let again = f.backend.prepare(&spec).await.unwrap();
    let cached = started.elapsed();
    assert!(again.cache_hit);
    assert_eq!(layers(&again), built);
    eprintln!("build: first {first:?}, cached {cached:?}");
    assert!(cached * 5 < first, "first {first:?} cached {cached:?}");

    // A changed last step rebuilds that step only.
    std::fs::write(
        env_dir.join("Dockerfile"),
        dockerfile("RUN echo two > /last.txt\n"),
    )
    .unwrap();
    let started = Instant::now();
    let changed = f.backend.prepare(&spec).await.unwrap();
    let rebuilt = started.elapsed();
    let changed_layers = layers(&changed);
    assert!(!changed.cache_hit);
    assert_eq!(changed_layers.len(), built.len());
    assert_eq!(changed_layers[..built.len() - 1], built[..built.len() - 1]);
    assert_ne!(changed_layers.last(), built.last());
    eprintln!("build: last step changed, rebuilt in {rebuilt:?}");
    // A changed COPY input rebuilds from the COPY on.
    std::fs::write(env_dir.join("data.txt"), "payload 2\n").unwrap();
    let recopied = layers(&f.backend.prepare(&spec).await.unwrap());
    assert_eq!(recopied[..base.len()], built[..base.len()]);
    assert_ne!(recopied[base.len()], built[base.len()]);
    std::fs::write(env_dir.join("data.txt"), "payload\n").unwrap();

    check_built_trial(&f, &spec, &changed, &built).await;
    check_build_failures(&f, &spec, &env_dir, &nonce).await;
}

/// A trial on the built image sees every step's work, and writes only into its own layer.
async fn check_built_trial(
    f: &Fixture,
    spec: &EnvironmentSpec,
    image: &PreparedImage,
    built: &[PathBuf],
) {
    let sb = f
        .backend
        .start_sandbox(spec, image, &f.trials.path().join("t"))
        .await
        .unwrap();
    let out = sh(&sb, "pwd; cat /built.txt /app/data.txt /tmp/kept /last.txt; echo $MODE $LEVEL; test -s /app/sqlite.txt && echo sqlite; echo $PATH").await;
    assert_eq!(
        out.stdout,
        "/app\nbuilt\npayload\ntmpfile\ntwo\ntest 2\nsqlite\n/opt/tool/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n",
        "{out:?}"
    );
    // The trial writes into its own layer, never into the cached image.
    sh(&sb, "echo changed > /built.txt").await;
    Box::new(sb).teardown().await.unwrap();
    let holder = built
        .iter()
        .find(|l| l.join("built.txt").exists())
        .expect("a layer holds /built.txt");
    assert_eq!(
        std::fs::read_to_string(holder.join("built.txt")).unwrap(),
        "built\n"
    );
}

/// A failing step is reported with its line and output, and a build past its timeout fails.
async fn check_build_failures(f: &Fixture, spec: &EnvironmentSpec, env_dir: &Path, nonce: &str) {
    std::fs::write(
        env_dir.join("Dockerfile"),
        format!(
            "FROM python:3.11-slim\nARG NONCE={nonce}\nRUN echo before\nRUN echo boom && exit 7\n"
        ),
    )
    .unwrap();
    match f.backend.prepare(spec).await {
        Err(EnvError::SetupFailed { step, message }) => {
            assert!(
                step.contains("line 4") && step.contains("RUN echo boom"),
                "{step}"
            );
            assert!(
                message.contains("exit code 7") && message.contains("boom"),
                "{message}"
            );
        }
        other => panic!("expected SetupFailed, got {other:?}"),
    }

    std::fs::write(
        env_dir.join("Dockerfile"),
        "FROM python:3.11-slim\nRUN sleep 30\n",
    )
    .unwrap();
    let mut quick = spec.clone();
    quick.build_timeout = Duration::from_secs(2);
    assert!(matches!(
        f.backend.prepare(&quick).await,
        Err(EnvError::SetupFailed { .. })
    ));
}

#[tokio::test]
async fn an_image_config_sets_env_workdir_and_user() {
    if !privileged() {
        return;
    }
    use geode_harness::env::image::{ImageSource, ImageStore, Reference};
    let f = fixture();
    base_image(&f.backend).await;
    let store = ImageStore::open(crate::suite::registry::shared_store()).unwrap();
    let base = store
        .get(&Reference::parse("python:3.11-slim").unwrap())
        .unwrap()
        .unwrap();
    let mut config = base.config.clone();
    config.env.push(("IMAGE_MARK".into(), "configured".into()));
    config.working_dir = Some("/srv/site".into());
    config.user = Some("nobody".into());
    let reference = Reference::parse("geode-test/config-probe:1").unwrap();
    store
        .tag_local(&reference, base.layers.clone(), config, ImageSource::Built)
        .unwrap();
    let mut spec = spec(Path::new("/nonexistent"));
    spec.docker_image = Some(reference.to_string());
    let image = f.backend.prepare(&spec).await.unwrap();
    let sb = f
        .backend
        .start_sandbox(&spec, &image, &f.trials.path().join("cfg"))
        .await
        .unwrap();
    let out = sh(&sb, "pwd; id -un; echo $IMAGE_MARK").await;
    assert_eq!(out.stdout, "/srv/site\nnobody\nconfigured\n", "{out:?}");
    Box::new(sb).teardown().await.unwrap();
}

/// What a compose sidecar runs: the image's ENTRYPOINT and CMD as the Dockerfile leaves them
/// (a stage's ENTRYPOINT drops only an inherited CMD), as its USER with that user's
/// supplementary groups (a database reading a key its group may read).
#[tokio::test]
async fn an_image_keeps_its_command_and_its_user_gets_supplementary_groups() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let env_dir = environment(
        &f,
        "FROM python:3.11-slim AS base\nCMD [\"inherited\"]\n\
         FROM base\nRUN groupadd -g 4242 keys && useradd -u 4343 -G keys worker \\\n\
         && install -d -m 0710 -g keys /srv/keys && echo secret > /srv/keys/k \\\n\
         && chgrp keys /srv/keys/k && chmod 0640 /srv/keys/k\n\
         CMD serve --port 1\nENTRYPOINT [\"/usr/bin/env\"]\nUSER worker\n",
    );
    let spec = spec(&env_dir);
    let image = f.backend.prepare(&spec).await.unwrap();
    assert_eq!(image.entrypoint, ["/usr/bin/env"]);
    assert_eq!(image.cmd, ["/bin/sh", "-c", "serve --port 1"]);
    let sb = f
        .backend
        .start_sandbox(&spec, &image, &f.trials.path().join("groups"))
        .await
        .unwrap();
    let out = sh(&sb, "id -un; id -G; cat /srv/keys/k").await;
    assert_eq!(out.stdout, "worker\n4343 4242\nsecret\n", "{out:?}");
    Box::new(sb).teardown().await.unwrap();

    std::fs::write(
        env_dir.join("Dockerfile"),
        "FROM python:3.11-slim AS base\nCMD [\"inherited\"]\nFROM base\nENTRYPOINT [\"/run\"]\n",
    )
    .unwrap();
    let image = f.backend.prepare(&spec).await.unwrap();
    assert_eq!(
        (image.entrypoint, image.cmd),
        (vec!["/run".to_string()], vec![])
    );
}

#[tokio::test]
async fn multi_stage_builds_copy_from_an_earlier_stage() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let env_dir = environment(
        &f,
        "ARG BASE=python:3.11-slim\nFROM $BASE AS build\nARG FLAVOUR=plain\n\
         RUN mkdir -p /out/bin && echo \"built $FLAVOUR\" > /out/bin/tool && echo junk > /junk\n\
         FROM debian:bookworm-slim AS unused\nRUN exit 1\n\
         FROM $BASE\nWORKDIR /app\nCOPY --from=build --chown=1000:1000 /out/bin/tool /app/tool\n\
         USER nobody\n",
    );
    let mut spec = spec(&env_dir);
    spec.build_args = vec![("FLAVOUR".into(), "special".into())];
    spec.build_log = Some(f.trials.path().join("build.log"));
    let image = f.backend.prepare(&spec).await.unwrap();
    let sb = f
        .backend
        .start_sandbox(&spec, &image, &f.trials.path().join("m"))
        .await
        .unwrap();
    let out = sh(
        &sb,
        "cat /app/tool; stat -c %u:%g /app/tool; test -e /junk || echo no-junk",
    )
    .await;
    assert_eq!(out.stdout, "built special\n1000:1000\nno-junk\n", "{out:?}");
    Box::new(sb).teardown().await.unwrap();
}
