//! What a trial can touch: container root is an unprivileged host uid, writes stay in the
//! trial's layer and within its disk, files and logs go where they should, and trials do not
//! see each other.

use super::*;

#[tokio::test]
async fn container_root_is_an_unprivileged_host_uid() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let sb = f.start("userns").await;
    let out = sh(
        &sb,
        "id -u; cat /proc/self/uid_map | tr -s ' ' | sed 's/^ //'; \
         mkdir -p /srv/made && stat -c '%u %U' /srv/made /etc/passwd /app; \
         python3 -m http.server 80 --bind 127.0.0.1 > /dev/null 2>&1 & \
         for i in $(seq 50); do python3 -c 'import urllib.request as u; \
           print(u.urlopen(\"http://127.0.0.1:80/\").status)' 2> /dev/null && break; sleep 0.1; done; \
         setsid sleep 30 > /dev/null 2>&1 < /dev/null & sleep 0.3; echo started",
    )
    .await;
    assert_eq!(
        out.stdout,
        "0\n0 100000 65536\n0 root\n0 root\n0 root\n200\nstarted\n",
        "{out:?} notes: {:?}",
        sb.notes()
    );
    // On the host, the agent's processes belong to an unprivileged uid.
    let uids: Vec<String> = processes_of(&sb)
        .iter()
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let name = status.lines().next()?.to_string();
            let uid = status.lines().find(|l| l.starts_with("Uid:"))?.to_string();
            Some(format!("{name} {uid}"))
        })
        .collect();
    let sleeper = uids.iter().find(|l| l.contains("sleep")).cloned();
    assert!(
        sleeper
            .as_deref()
            .is_some_and(|l| l.split_whitespace().nth(3) == Some("100000")),
        "{uids:?}"
    );
    Box::new(sb).teardown().await.unwrap();
}

#[tokio::test]
async fn writes_outside_the_workdir_never_reach_the_host() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let sb = f.start("scope").await;
    let ws: Arc<dyn Workspace> = sb.workspace();
    assert_eq!(ws.root(), Path::new("/app"));
    assert!(ws.resolve("/etc/geode-escape").is_err());
    assert!(ws.resolve("../etc/geode-escape").is_err());
    let inside = ws.resolve("notes/a.txt").unwrap();
    ws.write_file(&inside, b"hello").await.unwrap();
    assert_eq!(ws.read_file(&inside).await.unwrap(), b"hello");
    let listing = ws.list_dir(Path::new("/app/notes")).await.unwrap();
    assert_eq!(listing[0].name, "a.txt");

    // A symlink planted by a command does not lead the file tools out.
    let out = sh(
        &sb,
        "ln -s /etc /app/link && echo x > /etc/geode-escape-test && cat /etc/geode-escape-test",
    )
    .await;
    assert_eq!(out.stdout, "x\n", "{out:?}");
    let through = ws.resolve("link/passwd").unwrap();
    assert!(matches!(
        ws.read_file(&through).await,
        Err(WorkspaceError::Scope(_))
    ));
    assert!(matches!(
        ws.write_file(&through, b"x").await,
        Err(WorkspaceError::Scope(_))
    ));
    assert!(
        !Path::new("/etc/geode-escape-test").exists(),
        "the write reached the host"
    );
    // Root inside cannot mount, nor make a device node for the host's disk.
    let out = sh(
        &sb,
        "mount -t tmpfs none /mnt 2>&1; echo rc=$?; mknod /app/disk b 254 0 2>&1; echo rc=$?",
    )
    .await;
    assert_eq!(
        out.stdout.matches("rc=0").count(),
        0,
        "{out:?} notes {:?}",
        sb.notes()
    );
    let mounts = sh(&sb, "grep -c ' /mnt ' /proc/self/mountinfo").await;
    assert_eq!(mounts.stdout, "0\n");
    assert!(!Path::new("/app/notes").exists());

    // The workspace's exec runs in the root and refuses a cwd outside it.
    let mut r = req("pwd");
    r.cwd = Some(PathBuf::from("notes"));
    let out = ws.exec(r, CancellationToken::new()).await.unwrap();
    assert_eq!(out.stdout, "/app/notes\n");
    let mut r = req("pwd");
    r.cwd = Some(PathBuf::from("/etc"));
    assert!(ws.exec(r, CancellationToken::new()).await.is_err());
    Box::new(sb).teardown().await.unwrap();
}

#[tokio::test]
async fn concurrent_trials_cannot_see_each_other() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let (a, b) = tokio::join!(f.start("a"), f.start("b"));
    assert_eq!(
        sh(
            &a,
            "echo TOPSECRET-A > /app/secret.txt && echo TMPVAL-A > /tmp/t && echo ok"
        )
        .await
        .stdout,
        "ok\n"
    );
    let out = sh(&b, "cat /app/secret.txt /tmp/t 2>&1; echo; echo done").await;
    assert!(
        !out.stdout.contains("TOPSECRET") && !out.stdout.contains("TMPVAL"),
        "{out:?}"
    );
    // Nor through the host root that both see below: the scratch and cache are hidden.
    let scratch = f.backend.config().scratch_dir.display().to_string();
    let out = sh(
        &b,
        &format!("ls -A {scratch} | wc -l; grep -rs TOPSECRET {scratch} | wc -l"),
    )
    .await;
    assert_eq!(out.stdout, "0\n0\n", "{out:?}");
    Box::new(a).teardown().await.unwrap();
    Box::new(b).teardown().await.unwrap();
}

#[tokio::test]
async fn copy_in_and_logs_reach_the_right_places() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let sb = f.start("copy").await;
    let src = f.trials.path().join("tests-src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("test.sh"), "#!/bin/bash\necho from-test\n").unwrap();
    std::fs::write(src.join("sub/a.txt"), "A").unwrap();
    sb.copy_in(&src, "/tests").await.unwrap();
    sh(&sb, "chmod +x /tests/test.sh").await;
    let out = sh(&sb, "/tests/test.sh; cat /tests/sub/a.txt").await;
    assert_eq!(out.stdout, "from-test\nA");
    // Replacing: a second copy_in leaves no stale files.
    std::fs::remove_file(src.join("sub/a.txt")).unwrap();
    sb.copy_in(&src, "/tests").await.unwrap();
    assert_eq!(sh(&sb, "ls /tests/sub | wc -l").await.stdout, "0\n");
    sb.copy_in(&src.join("test.sh"), "/solution/solve.sh")
        .await
        .unwrap();
    assert_eq!(
        sh(&sb, "bash /solution/solve.sh").await.stdout,
        "from-test\n"
    );

    sh(
        &sb,
        "echo 1 > /logs/verifier/reward.txt; echo a > /logs/agent/x; echo b > /logs/artifacts/y",
    )
    .await;
    let trial = f.trials.path().join("copy");
    // /logs/agent and /logs/artifacts live on the trial's disk until they are brought back to
    // the trial's agent/logs/ (below the host's own records of the agent) and artifacts/.
    assert!(!trial.join("agent/logs/x").exists() && !trial.join("artifacts/y").exists());
    assert_eq!(sb.sync_logs().await, Vec::<String>::new());
    assert!(trial.join("agent/logs/x").exists() && trial.join("artifacts/y").exists());
    assert!(!trial.join("agent/x").exists());
    // What the agent writes at /logs/verifier lands in a decoy, never in the trial's folder.
    assert!(!trial.join("verifier/reward.txt").exists());
    let decoy = sb.verifier_decoy().unwrap();
    assert_eq!(
        std::fs::read_to_string(decoy.join("reward.txt")).unwrap(),
        "1\n"
    );
    Box::new(sb).teardown().await.unwrap();
}

#[tokio::test]
async fn the_trial_disk_is_a_hard_quota() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let mut small = spec(f.trials.path());
    small.storage_mb = Some(64);
    let sb = f.start_with(&small, "disk").await;
    let out = sh(
        &sb,
        "fallocate -l 20G /app/huge 2>&1; echo rc=$?; rm -f /app/huge; \
         dd if=/dev/zero of=/app/fill bs=1M count=200 2>&1 | grep -v records; \
         df -m /app | tail -1 | awk '{print $2}'",
    )
    .await;
    assert_eq!(
        out.stdout.matches("No space left on device").count(),
        2,
        "{out:?}"
    );
    assert!(out.stdout.contains("rc=1"), "{out:?}");
    let size: u64 = out.stdout.lines().last().unwrap().trim().parse().unwrap();
    assert!((40..=64).contains(&size), "df shows {size} MB: {out:?}");
    // On the host the trial's disk is one file that cannot grow past the quota.
    use std::os::unix::fs::MetadataExt;
    let disk = std::fs::metadata(sb.scratch_dir().join("disk.img")).unwrap();
    assert!(
        disk.blocks() * 512 <= 64 << 20,
        "{} bytes",
        disk.blocks() * 512
    );
    // Evidence still reads the layer on that disk.
    sh(
        &sb,
        "echo 'import os' > /usr/lib/python3/dist-packages/zz.pth",
    )
    .await;
    let changed = sb.changed_verifier_inputs("/app", Judgment::HandOver).await;
    assert!(
        changed.present.iter().any(|p| p.ends_with("zz.pth")),
        "{changed:?}"
    );
    // Between the hand-over and the end, the watch sees what came and went: a wrapper planted
    // and removed is gone, one written under a temporary name and renamed in place stayed.
    sh(
        &sb,
        "echo x > /usr/local/bin/planted && rm /usr/local/bin/planted; \
         echo y > /usr/local/bin/.kept.new && mv /usr/local/bin/.kept.new /usr/local/bin/kept",
    )
    .await;
    let after = sb
        .changed_verifier_inputs("/app", Judgment::AfterVerifier)
        .await;
    assert_eq!(after.vanished, vec!["/usr/local/bin/planted"], "{after:?}");
    assert!(
        after.present.contains(&"/usr/local/bin/kept".to_string()),
        "{after:?}"
    );
    Box::new(sb).teardown().await.unwrap();
}
