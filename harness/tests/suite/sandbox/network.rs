//! A trial's network: none reaches the host, the public network goes out through the
//! trial's own namespace, an allowlist reaches its hosts by name and nothing else.

use super::*;

#[tokio::test]
async fn no_trial_reaches_the_host_and_network_on_goes_out_through_its_own_namespace() {
    if !privileged() {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            drop(conn);
        }
    });
    // The host's loopback, directly and through slirp's gateway address (the host loopback
    // that --disable-host-loopback closes).
    let connect = |host: &str| {
        format!(
            "python3 -c 'import socket; socket.create_connection((\"{host}\", {port}), timeout=3); print(\"connected\")'"
        )
    };
    let f = fixture();
    let off = f.start("net-off").await;
    let out = sh(&off, &connect("127.0.0.1")).await;
    assert_ne!(
        out.exit_code,
        Some(0),
        "reached the host with network off: {out:?}"
    );
    // lo is up inside: a server of the sandbox's own is reachable.
    let own = sh(
        &off,
        "python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen(); \
         c=socket.create_connection(s.getsockname()); print(\"loopback ok\")'",
    )
    .await;
    assert_eq!(
        own.stdout.trim(),
        "loopback ok",
        "{own:?} notes: {:?}",
        off.notes()
    );
    Box::new(off).teardown().await.unwrap();

    let mut with_net = spec(f.trials.path());
    with_net.network = NetworkPolicy::Public;
    let on = f.start_with(&with_net, "net-on").await;
    for host in ["127.0.0.1", "10.0.2.2"] {
        let out = sh(&on, &connect(host)).await;
        assert_ne!(
            out.stdout.trim(),
            "connected",
            "reached the host at {host}: {out:?}"
        );
    }
    // Out to the Debian archive (the one outside host every machine of this project reaches),
    // by name, through the namespace's own resolver.
    let out = sh(
        &on,
        "python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://deb.debian.org/debian/dists/bookworm/Release\", timeout=20).status)'",
    )
    .await;
    assert_eq!(out.stdout.trim(), "200", "{out:?}");
    let ns = |pid: u32| std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap();
    assert_ne!(
        ns(on.init_pid()),
        ns(std::process::id()),
        "the trial shares the host's network namespace"
    );
    Box::new(on).teardown().await.unwrap();
}

#[tokio::test]
async fn an_allowlist_reaches_its_hosts_by_name_and_nothing_else() {
    if !privileged() {
        return;
    }
    // A server on the host's own outward address, which slirp would carry a trial to (it
    // connects from the host): fenced off for a public trial, and for an allowlist without it.
    let host_ip = {
        let probe = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        probe.connect("192.0.2.1:9").unwrap();
        probe.local_addr().unwrap().ip()
    };
    let listener = std::net::TcpListener::bind((host_ip, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            drop(conn);
        }
    });
    let to_host = format!(
        "python3 -c 'import socket; socket.create_connection((\"{host_ip}\", {port}), timeout=5); print(\"connected\")'"
    );
    let f = fixture();
    let mut public = spec(f.trials.path());
    public.network = NetworkPolicy::Public;
    let open = f.start_with(&public, "allow-public").await;
    let out = sh(&open, &to_host).await;
    assert_ne!(out.stdout.trim(), "connected", "{out:?}");
    assert!(out.stderr.contains("No route to host"), "{out:?}");
    Box::new(open).teardown().await.unwrap();

    let mut listed = spec(f.trials.path());
    listed.network = NetworkPolicy::Allowlist(vec!["deb.debian.org".into(), "192.0.2.77".into()]);
    let sb = f.start_with(&listed, "allow-listed").await;
    assert_eq!(sb.network_attempts().await, 0);
    // The listed name, pinned in /etc/hosts, with no resolver to ask.
    let out = sh(
        &sb,
        "python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://deb.debian.org/debian/dists/bookworm/Release\", timeout=20).status)'",
    )
    .await;
    assert_eq!(out.stdout.trim(), "200", "{out:?} notes: {:?}", sb.notes());
    let started = Instant::now();
    let out = sh(&sb, &to_host).await;
    assert!(
        out.exit_code != Some(0) && out.stderr.contains("Network is unreachable"),
        "reached an address outside the allowlist: {out:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "refused, not timed out"
    );
    // No name leaves through slirp's resolver, and no raw socket can hand slirp a frame.
    let out = sh(
        &sb,
        "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"x\", (\"10.0.2.3\", 53))'; \
         getent hosts example.org || echo unresolved; \
         python3 -c 'import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)' 2>&1 | tail -1",
    )
    .await;
    assert!(out.stderr.contains("Network is unreachable"), "{out:?}");
    assert!(out.stdout.contains("unresolved"), "{out:?}");
    assert!(out.stdout.contains("PermissionError"), "{out:?}");
    // Routes: the listed addresses only, no default.
    let routes = sh(&sb, "tail -n +2 /proc/net/route").await.stdout;
    assert!(
        routes
            .lines()
            .all(|l| l.split_whitespace().nth(1) != Some("00000000")),
        "{routes}"
    );
    assert!(
        routes.contains("4D0200C0"),
        "192.0.2.77 has no route: {routes}"
    );
    assert!(sb.network_attempts().await >= 2);
    Box::new(sb).teardown().await.unwrap();
}
