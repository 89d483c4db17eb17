//! What a sandbox leaves behind (nothing: no mounts, layers, loop devices or cgroups), and
//! what setting one up and tearing it down costs.

use super::*;

/// Loop devices whose backing file is under `dir`.
fn loops_backed_by(dir: &Path) -> Vec<String> {
    let dir = dir.display().to_string();
    std::fs::read_dir("/sys/block")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let backing = std::fs::read_to_string(e.path().join("loop/backing_file")).ok()?;
            backing
                .starts_with(&dir)
                .then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect()
}

#[tokio::test]
async fn teardown_leaves_no_mounts_layers_or_groups() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let mut limited = spec(f.trials.path());
    limited.memory_mb = Some(128);
    let sb = f.start_with(&limited, "clean").await;
    let scratch = sb.scratch_dir().to_path_buf();
    let scratch_text = scratch.display().to_string();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(&scratch_text),
        "a sandbox mount leaked into the host's table"
    );
    sh(&sb, "echo x > /app/file; mkdir -p /var/lib/thing").await;
    // The writable layer is on the trial's own disk, attached to one loop device.
    assert!(!scratch.join("upper/app/file").exists());
    assert_eq!(loops_backed_by(&scratch).len(), 1);
    let name = scratch.file_name().unwrap().to_string_lossy().into_owned();
    let group = &name[name.len() - 12..];
    let cg = Path::new("/sys/fs/cgroup/memory/geode").join(group);
    let had_group = cg.exists();
    Box::new(sb).teardown().await.unwrap();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&scratch_text));
    assert!(!scratch.exists(), "the trial layer was not removed");
    let deadline = Instant::now() + Duration::from_secs(2);
    while !loops_backed_by(&scratch).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(loops_backed_by(&scratch), Vec::<String>::new());
    if had_group {
        assert!(!cg.exists(), "cgroup {} left behind", cg.display());
    }
}

/// Set-up plus teardown of a trivial sandbox, median of 20, without and with an image layer:
/// `cargo test -p geode-harness --test sandbox -- --ignored --nocapture overhead`.
#[tokio::test]
#[ignore = "measurement"]
async fn overhead() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let env_dir = environment(&f, "FROM python:3.11-slim\nWORKDIR /app\nRUN echo x > /x\n");
    let spec = spec(&env_dir);
    let layered = f.backend.prepare(&spec).await.unwrap();
    for (label, image) in [
        ("base image", base_image(&f.backend).await),
        ("built image", layered),
    ] {
        let mut times = Vec::new();
        for i in 0..20 {
            let trial = f.trials.path().join(format!("o{i}"));
            let started = Instant::now();
            let sb = f
                .backend
                .start_sandbox(&spec, &image, &trial)
                .await
                .unwrap();
            let up = started.elapsed();
            sh(&sb, "true").await;
            let ran = started.elapsed();
            Box::new(sb).teardown().await.unwrap();
            times.push((up, ran - up, started.elapsed() - ran));
        }
        let median = |mut v: Vec<Duration>| {
            v.sort();
            v[v.len() / 2]
        };
        eprintln!(
            "sandbox overhead ({label}), median of 20: start {:?}, exec(true) {:?}, teardown {:?}",
            median(times.iter().map(|t| t.0).collect()),
            median(times.iter().map(|t| t.1).collect()),
            median(times.iter().map(|t| t.2).collect()),
        );
    }
}
