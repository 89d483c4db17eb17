//! What a command in a sandbox gets and keeps to: its workdir, environment, exit codes
//! and capabilities; limits; background processes (`&`, `nohup`, `disown`, `setsid`), which
//! live until `kill_all` or teardown, at the lowest priority once a verifier runs, and never
//! see the verifier.

use super::*;

#[tokio::test]
async fn exec_runs_in_the_workdir_with_env_exit_codes_and_caps() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let sb = f.start("exec").await;
    let out = sh(
        &sb,
        "pwd; echo $IMAGE_ENV $TASK_ENV; hostname; echo err >&2; exit 3",
    )
    .await;
    assert_eq!(out.exit_code, Some(3), "{out:?}");
    assert_eq!(out.stdout.lines().next(), Some("/app"));
    assert!(out.stdout.contains("from-image from-spec"), "{out:?}");
    assert!(out.stdout.contains("geode-"), "hostname: {out:?}");
    assert_eq!(out.stderr, "err\n");

    let mut r = req("echo $EXTRA; pwd");
    r.env = vec![("EXTRA".into(), "x1".into())];
    r.cwd = Some(PathBuf::from("/tmp"));
    let out = sb.exec(r, CancellationToken::new()).await.unwrap();
    assert_eq!(out.stdout, "x1\n/tmp\n");

    let mut r = req("head -c 100000 /dev/zero | tr '\\0' a");
    r.output_cap = 1000;
    let out = sb.exec(r, CancellationToken::new()).await.unwrap();
    assert!(out.truncated);
    assert!(
        out.stdout
            .contains("[... output truncated at 1000 bytes ...]"),
        "{}",
        out.stdout.len()
    );

    // The timeout kills the whole group, the background sleep included.
    let mut r = req("sleep 30 & echo started; sleep 30");
    r.timeout = Duration::from_millis(500);
    let started = Instant::now();
    let out = sb.exec(r, CancellationToken::new()).await.unwrap();
    assert!(out.timed_out && out.exit_code.is_none(), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(out.stdout, "started\n");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(processes_of(&sb).len(), BASELINE);

    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cancel.cancel();
    });
    let out = sb.exec(req("sleep 20"), token).await.unwrap();
    assert!(out.cancelled && out.exit_code.is_none(), "{out:?}");
    Box::new(sb).teardown().await.unwrap();
}

#[tokio::test]
async fn escaped_background_processes_die_with_kill_all_and_teardown() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let sb = f.start("bg").await;
    let ns = sb.pid_namespace().to_string();
    // The pause lets setsid leave the group before the call ends and the group is killed.
    let escape = "setsid nohup sleep 300 > /dev/null 2>&1 < /dev/null & sleep 0.3; echo ok";
    assert_eq!(sh(&sb, escape).await.stdout, "ok\n");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(processes_of(&sb).len(), BASELINE + 1, "the sleep lives on");
    assert_eq!(sb.kill_all_processes().await.unwrap(), 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(processes_of(&sb).len(), BASELINE);
    assert!(processes_of(&sb).contains(&sb.init_pid()));

    assert_eq!(sh(&sb, escape).await.stdout, "ok\n");
    let all = processes_of(&sb);
    let scratch = sb.scratch_dir().to_path_buf();
    let report = Box::new(sb).teardown().await.unwrap();
    assert_eq!(report.killed_processes, 1);
    let alive: Vec<u32> = all
        .into_iter()
        .filter(|pid| Path::new(&format!("/proc/{pid}")).exists())
        .collect();
    assert!(
        processes_in(&ns).is_empty() && alive.is_empty(),
        "left behind: {:?} {alive:?}",
        processes_in(&ns)
    );
    assert!(!scratch.exists());
}

#[tokio::test]
async fn what_a_command_leaves_in_the_background_lives_until_kill_all_and_busy_ones_yield() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let sb = f.start("keep").await;
    // `&` with the command's pipes still held, `nohup`, a subshell's, `disown`, and a busy
    // loop.
    let started = Instant::now();
    let out = sh(
        &sb,
        "sleep 300 & nohup sleep 301 > /dev/null 2>&1 & (sleep 302 &); sleep 303 & disown; \
         sh -c 'while :; do :; done' > /dev/null 2>&1 & echo ok",
    )
    .await;
    assert_eq!(out.stdout, "ok\n", "{out:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the held pipes kept the call waiting: {:?}",
        started.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(processes_of(&sb).len(), BASELINE + 5);

    // The verifier's own leftovers end with it; the busy loop yields it the CPU, the idle
    // sleepers keep their priority.
    let tests = f.trials.path().join("keep-tests");
    std::fs::create_dir_all(&tests).unwrap();
    std::fs::write(tests.join("test.sh"), "true\n").unwrap();
    let out = sb
        .run_verifier(&tests, req("sleep 305 & echo verified"))
        .await
        .unwrap();
    assert_eq!(out.stdout, "verified\n", "{out:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut nice: Vec<String> = processes_of(&sb)
        .iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter(|stat| stat.contains("(sleep)") || stat.contains("(sh)"))
        .map(|stat| {
            let (name, rest) = stat.rsplit_once(')').unwrap();
            let name = name.rsplit_once('(').unwrap().1;
            format!("{name} {}", rest.split_whitespace().nth(16).unwrap())
        })
        .collect();
    nice.sort();
    assert_eq!(nice, ["sh 19", "sleep 0", "sleep 0", "sleep 0", "sleep 0"]);

    assert_eq!(sb.kill_all_processes().await.unwrap(), 5);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(processes_of(&sb).len(), BASELINE);
    Box::new(sb).teardown().await.unwrap();
}

#[tokio::test]
async fn memory_and_pids_limits_hold() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let mut limited = spec(f.trials.path());
    limited.memory_mb = Some(64);
    limited.pids_max = Some(16);
    let sb = f.start_with(&limited, "limits").await;
    let out = sh(&sb, "python3 -c 'a = bytearray(256 * 1024 * 1024); a[::4096] = b\"x\" * len(a[::4096]); print(\"allocated\")'").await;
    assert_ne!(
        out.exit_code,
        Some(0),
        "256 MB under a 64 MB limit: {out:?}"
    );
    assert!(!out.stdout.contains("allocated"));
    let fork = "python3 -c '
import os, time
n = 0
try:
    for i in range(64):
        if os.fork() == 0:
            time.sleep(3); os._exit(0)
        n += 1
    print(\"forked\", n)
except OSError as e:
    print(\"fork failed after\", n)
'";
    let out = sh(&sb, fork).await;
    assert!(
        out.stdout.contains("fork failed"),
        "{out:?} notes: {:?}",
        sb.notes()
    );
    Box::new(sb).teardown().await.unwrap();
    let name_dirs: Vec<_> = std::fs::read_dir("/sys/fs/cgroup/memory/geode")
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    for dir in name_dirs {
        // Other tests' groups may be alive; ours (this test's) must be gone: all our groups
        // are empty after their teardown, so none may hold a process of a dead namespace.
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines() {
            assert!(Path::new(&format!("/proc/{pid}")).exists());
        }
    }
}

#[tokio::test]
async fn services_outlive_the_agent_but_cannot_reach_the_verifier() {
    if !privileged() {
        return;
    }
    let f = fixture();
    let sb = f.start("views").await;
    // A service the agent leaves behind, which keeps trying to forge the reward: at
    // /logs/verifier, through every /proc/PID/root it can see, and in the inbox.
    let forger = "setsid bash -c 'while true; do echo 1 > /logs/verifier/reward.txt; \
        for p in /proc/[0-9]*; do echo 1 > $p/root/logs/verifier/reward.txt; \
        cp /bin/true $p/root/tests/test.sh; done; ls /.geode-inbox > /tmp/inbox-seen; \
        sleep 0.02; done' > /dev/null 2>&1 < /dev/null & sleep 0.3; echo started";
    assert_eq!(sh(&sb, forger).await.stdout, "started\n");
    let tests = f.trials.path().join("views-tests");
    std::fs::create_dir_all(&tests).unwrap();
    std::fs::write(
        tests.join("test.sh"),
        "grep -qs 'while [t]rue' /proc/[0-9]*/cmdline && echo service-alive\n\
         echo 0 > /logs/verifier/reward.txt\n\
         echo written > /tests/scratch\n\
         sleep 1\n\
         cat /logs/verifier/reward.txt /tests/scratch\n",
    )
    .unwrap();
    let out = sb
        .run_verifier(&tests, req("bash /tests/test.sh"))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "service-alive\n0\nwritten\n", "{out:?}");
    let trial = f.trials.path().join("views");
    assert_eq!(
        std::fs::read_to_string(trial.join("verifier/reward.txt")).unwrap(),
        "0\n"
    );
    // The service is still alive after the verifier, and it never saw the staged tests.
    let seen = sh(
        &sb,
        "grep -qs 'while [t]rue' /proc/[0-9]*/cmdline && echo alive; cat /tmp/inbox-seen",
    )
    .await;
    assert_eq!(seen.stdout, "alive\n", "{seen:?}");
    // `kill -9 -1` in the agent's view ends the agent's processes and nothing else. A killed
    // process dies when next scheduled, not when `kill` returns: on a loaded machine the next
    // command can still see it, so the check waits (up to 5 s) for it to go.
    sh(&sb, "kill -9 -1").await;
    assert_eq!(
        sh(
            &sb,
            "for _ in $(seq 50); do grep -qs 'while [t]rue' /proc/[0-9]*/cmdline \
             || { echo gone; break; }; sleep 0.1; done"
        )
        .await
        .stdout,
        "gone\n"
    );
    Box::new(sb).teardown().await.unwrap();
}
