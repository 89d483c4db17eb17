//! A trial's network namespace: `lo` brought up, slirp4netns for outbound traffic, the routes
//! of an allowlist, and the count of packets that had nowhere to go.
//!
//! A new network namespace has only a loopback interface, and it starts down; services that a
//! task starts and tests on 127.0.0.1 need it up. `ip` is not on every host, and the ioctl
//! route needs `unsafe`, so we speak rtnetlink through nix's safe socket calls.
//!
//! An allowlist is enforced by routing, not by filtering: the namespace keeps a route to each
//! allowed address and none other, and the agent's commands have neither CAP_NET_ADMIN (to add
//! one) nor CAP_NET_RAW (to hand slirp4netns a frame of their own making).

use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, recv, sendto, socket,
};

// From <linux/rtnetlink.h>, <linux/netlink.h> and <net/if.h>; stable kernel ABI.
const RTM_NEWLINK: u16 = 16;
const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const NLMSG_ERROR: u16 = 2;
const IFF_UP: u32 = 1;
const AF_INET: u8 = 2;
const RT_TABLE_MAIN: u8 = 254;
const RTPROT_STATIC: u8 = 4;
const RT_SCOPE_UNIVERSE: u8 = 0;
/// In a delete: any scope.
const RT_SCOPE_NOWHERE: u8 = 255;
const RTN_UNICAST: u8 = 1;
const RTN_UNREACHABLE: u8 = 7;
const RTNH_F_ONLINK: u32 = 4;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
/// The loopback device is always the first registered in a namespace.
const LOOPBACK_IFINDEX: i32 = 1;

/// One netlink message: `nlmsghdr` (length, type, flags, sequence, port 0) then `body`.
fn message(kind: u16, flags: u16, body: &[u8]) -> Vec<u8> {
    let mut msg = Vec::with_capacity(16 + body.len());
    let len = u32::try_from(16 + body.len()).unwrap_or(u32::MAX);
    msg.extend_from_slice(&len.to_ne_bytes());
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK | flags).to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes()); // the kernel fills in our port
    msg.extend_from_slice(body);
    msg
}

/// An `RTM_NEWLINK` request that sets IFF_UP on interface 1: `nlmsghdr` then `ifinfomsg`.
fn link_up_message() -> Vec<u8> {
    let mut body = Vec::with_capacity(16);
    body.push(0); // ifi_family AF_UNSPEC
    body.push(0); // padding
    body.extend_from_slice(&0u16.to_ne_bytes()); // ifi_type
    body.extend_from_slice(&LOOPBACK_IFINDEX.to_ne_bytes());
    body.extend_from_slice(&IFF_UP.to_ne_bytes()); // ifi_flags
    body.extend_from_slice(&IFF_UP.to_ne_bytes()); // ifi_change: only this bit
    message(RTM_NEWLINK, 0, &body)
}

/// An IPv4 route message: `rtmsg` then attributes (each length, type, value, padded to 4).
fn route_message(
    kind: u16,
    flags: u16,
    rtmsg: [u8; 8],
    rt_flags: u32,
    attrs: &[(u16, &[u8])],
) -> Vec<u8> {
    let mut body = rtmsg.to_vec();
    body.extend_from_slice(&rt_flags.to_ne_bytes());
    for (kind, value) in attrs {
        let len = u16::try_from(4 + value.len()).unwrap_or(u16::MAX);
        body.extend_from_slice(&len.to_ne_bytes());
        body.extend_from_slice(&kind.to_ne_bytes());
        body.extend_from_slice(value);
        body.resize(body.len().next_multiple_of(4), 0);
    }
    message(kind, flags, &body)
}

/// Delete the main table's route to `dst/len`, whatever its scope and next hop.
fn delete_route(dst: Ipv4Addr, len: u8) -> Vec<u8> {
    let octets = dst.octets();
    let attrs: &[(u16, &[u8])] = if len == 0 { &[] } else { &[(RTA_DST, &octets)] };
    let rtmsg = [AF_INET, len, 0, 0, RT_TABLE_MAIN, 0, RT_SCOPE_NOWHERE, 0];
    route_message(RTM_DELROUTE, 0, rtmsg, 0, attrs)
}

/// A route to `dst` alone, through `gateway` on interface `oif`, which need not be on a
/// routed subnet (`onlink`).
fn host_route(dst: Ipv4Addr, gateway: Ipv4Addr, oif: u32) -> Vec<u8> {
    let rtmsg = [
        AF_INET,
        32,
        0,
        0,
        RT_TABLE_MAIN,
        RTPROT_STATIC,
        RT_SCOPE_UNIVERSE,
        RTN_UNICAST,
    ];
    let (dst, gateway, oif) = (dst.octets(), gateway.octets(), oif.to_ne_bytes());
    route_message(
        RTM_NEWROUTE,
        NLM_F_CREATE | NLM_F_EXCL,
        rtmsg,
        RTNH_F_ONLINK,
        &[(RTA_DST, &dst), (RTA_GATEWAY, &gateway), (RTA_OIF, &oif)],
    )
}

/// A route that answers every packet to `dst/len` with "no route to host".
fn unreachable_route(dst: Ipv4Addr, len: u8) -> Vec<u8> {
    let rtmsg = [
        AF_INET,
        len,
        0,
        0,
        RT_TABLE_MAIN,
        RTPROT_STATIC,
        RT_SCOPE_UNIVERSE,
        RTN_UNREACHABLE,
    ];
    let dst = dst.octets();
    route_message(
        RTM_NEWROUTE,
        NLM_F_CREATE | NLM_F_EXCL,
        rtmsg,
        0,
        &[(RTA_DST, &dst)],
    )
}

/// What a trial with public network may not reach through slirp4netns, which connects from
/// the host and so would reach whatever the host reaches: the private ranges (RFC 1918),
/// shared address space, link-local (cloud metadata services live there), and each of the
/// host's own addresses. slirp's own subnet (its gateway and resolver) stays: a more specific
/// route than 10.0.0.0/8.
const FENCED: [(Ipv4Addr, u8); 6] = [
    (Ipv4Addr::new(0, 0, 0, 0), 8),
    (Ipv4Addr::new(10, 0, 0, 0), 8),
    (Ipv4Addr::new(100, 64, 0, 0), 10),
    (Ipv4Addr::new(169, 254, 0, 0), 16),
    (Ipv4Addr::new(172, 16, 0, 0), 12),
    (Ipv4Addr::new(192, 168, 0, 0), 16),
];

/// The host's own IPv4 addresses (every interface's), read where the harness runs.
pub(crate) fn host_addresses() -> Vec<Ipv4Addr> {
    let mut out: Vec<Ipv4Addr> = nix::ifaddrs::getifaddrs()
        .map(|addrs| {
            addrs
                .filter_map(|a| a.address?.as_sockaddr_in().map(|s| s.ip()))
                .filter(|ip| !ip.is_loopback())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out.dedup();
    out
}

/// Fence the network namespace of `pid` (a sandbox whose slirp4netns is up) off the host and
/// the private ranges: [`FENCED`] and `host` are unreachable from inside; the rest of the
/// world is not. Runs on a thread of its own, which alone enters the namespace.
pub(crate) fn fence(pid: u32, host: &[Ipv4Addr]) -> Result<(), String> {
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/net"))
        .map_err(|e| format!("open the sandbox's network namespace: {e}"))?;
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
                    .map_err(|e| format!("enter the sandbox's network namespace: {e}"))?;
                let sock = RouteSocket::open()?;
                let hosts = host.iter().map(|addr| (*addr, 32));
                for (dst, len) in FENCED.into_iter().chain(hosts) {
                    match sock.request(&unreachable_route(dst, len)) {
                        Ok(()) => {}
                        // A host address inside a fenced range is fenced already.
                        Err(e) if e.contains("File exists") => {}
                        Err(e) => return Err(format!("fence {dst}/{len}: {e}")),
                    }
                }
                Ok(())
            })
            .join()
            .unwrap_or_else(|_| Err("the routing thread panicked".into()))
    })
}

/// A TCP listener on `127.0.0.1:port` (0: a free port) in the network namespace of `pid`,
/// made on a thread of its own that alone enters the namespace: a socket stays in the
/// namespace it was made in, so the host accepts connections from inside on it while the
/// sandbox's processes reach nothing of the host's network.
pub(crate) fn listen_in(pid: u32, port: u16) -> Result<std::net::TcpListener, String> {
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/net"))
        .map_err(|e| format!("open the sandbox's network namespace: {e}"))?;
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
                    .map_err(|e| format!("enter the sandbox's network namespace: {e}"))?;
                std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port))
                    .map_err(|e| format!("listen on 127.0.0.1:{port} inside the sandbox: {e}"))
            })
            .join()
            .unwrap_or_else(|_| Err("the listening thread panicked".into()))
    })
}

/// A route socket of the calling thread's network namespace.
struct RouteSocket(OwnedFd);

impl RouteSocket {
    fn open() -> Result<RouteSocket, String> {
        socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkRoute,
        )
        .map(RouteSocket)
        .map_err(|e| format!("netlink socket: {e}"))
    }

    /// Send one request and wait for its acknowledgement.
    fn request(&self, msg: &[u8]) -> Result<(), String> {
        let fd = self.0.as_raw_fd();
        sendto(fd, msg, &NetlinkAddr::new(0, 0), MsgFlags::empty())
            .map_err(|e| format!("netlink send: {e}"))?;
        let mut buf = [0u8; 512];
        let n = recv(fd, &mut buf, MsgFlags::empty()).map_err(|e| format!("netlink recv: {e}"))?;
        // The ack is an NLMSG_ERROR whose error field (after the 16-byte header) is 0 on success.
        if n >= 20 && u16::from_ne_bytes([buf[4], buf[5]]) == NLMSG_ERROR {
            let errno = i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]);
            if errno != 0 {
                return Err(std::io::Error::from_raw_os_error(-errno).to_string());
            }
            return Ok(());
        }
        Err(format!("unexpected netlink answer ({n} bytes)"))
    }
}

pub(crate) fn loopback_up() -> Result<(), String> {
    RouteSocket::open()?
        .request(&link_up_message())
        .map_err(|e| format!("RTM_NEWLINK refused: {e}"))
}

/// The resolver slirp4netns answers on inside the namespace.
pub(crate) const SLIRP_DNS: &str = "10.0.2.3";
/// slirp4netns's own address in the namespace, where it takes every packet to carry out.
const SLIRP_GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
/// The namespace's subnet, on which the gateway and the resolver sit.
const SLIRP_SUBNET: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 0, 2, 0), 24);
const SLIRP_DEVICE: &str = "tap0";
/// How long slirp4netns may take to configure the namespace's interface.
const SLIRP_READY: std::time::Duration = std::time::Duration::from_secs(5);

/// Give the network namespace of `pid` outbound network through `slirp4netns`, a user-mode
/// TCP/IP stack on the host side: the namespace gets `tap0` with a default route and NAT, the
/// host's loopback stays out of reach (`--disable-host-loopback`), and nothing of another
/// trial's namespace is ever routable. It dies with the returned child (or with the namespace).
/// Why slirp4netns may fail in the rootless sandbox: it opens `/dev/net/tun` as the user
/// (root of a user namespace has no say over the machine's device files), which udev's
/// default rule opens to everyone (0666) and a machine without udev may not.
fn tun_hint() -> &'static str {
    use std::os::unix::fs::PermissionsExt;
    let open_to_all =
        std::fs::metadata("/dev/net/tun").is_ok_and(|m| m.permissions().mode() & 0o006 == 0o006);
    if crate::rootless::active() && !open_to_all {
        " (the rootless sandbox's network needs /dev/net/tun open to every user, mode 0666, as \
         udev's default rule makes it)"
    } else {
        ""
    }
}

pub(crate) async fn start_slirp(
    pid: Option<u32>,
) -> Result<tokio::process::Child, crate::EnvError> {
    use crate::EnvError;
    let Some(pid) = pid else {
        return Err(EnvError::Lost("the sandbox server has no pid".into()));
    };
    let child = tokio::process::Command::new("slirp4netns")
        .args(["--configure", "--mtu=65520", "--disable-host-loopback"])
        .arg(pid.to_string())
        .arg("tap0")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(EnvError::Unsupported(
                "a task with network needs slirp4netns (apt-get install slirp4netns): each such \
                 trial gets a network namespace of its own, never the host's"
                    .into(),
            ));
        }
        Err(source) => {
            return Err(EnvError::Io {
                context: "start slirp4netns".into(),
                source,
            });
        }
    };
    // Configured once the namespace has a default route through tap0.
    let routes = format!("/proc/{pid}/net/route");
    let deadline = std::time::Instant::now() + SLIRP_READY;
    loop {
        let text = std::fs::read_to_string(&routes).unwrap_or_default();
        if text
            .lines()
            .any(|l| l.starts_with("tap0") && l.split_whitespace().nth(1) == Some("00000000"))
        {
            return Ok(child);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(EnvError::SetupFailed {
                step: "network".into(),
                message: format!(
                    "slirp4netns exited ({status}) before the network was up{}",
                    tun_hint()
                ),
            });
        }
        if std::time::Instant::now() >= deadline {
            return Err(EnvError::SetupFailed {
                step: "network".into(),
                message: format!("slirp4netns did not configure tap0 within {SLIRP_READY:?}"),
            });
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Leave the network namespace of `pid` (a sandbox whose slirp4netns is up) a route to
/// `allowed` only: no default route, and none to slirp's subnet (its resolver included, so
/// no name leaves through DNS either). Anything else fails at once with ENETUNREACH and counts
/// in `OutNoRoutes`. Runs on a thread of its own, which alone enters the namespace.
pub(crate) fn allow_only(pid: u32, allowed: &[Ipv4Addr]) -> Result<(), String> {
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/net"))
        .map_err(|e| format!("open the sandbox's network namespace: {e}"))?;
    let mut allowed = allowed.to_vec();
    allowed.sort();
    allowed.dedup();
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
                    .map_err(|e| format!("enter the sandbox's network namespace: {e}"))?;
                let oif = nix::net::if_::if_nametoindex(SLIRP_DEVICE)
                    .map_err(|e| format!("find {SLIRP_DEVICE}: {e}"))?;
                let sock = RouteSocket::open()?;
                for addr in &allowed {
                    sock.request(&host_route(*addr, SLIRP_GATEWAY, oif))
                        .map_err(|e| format!("route to {addr}: {e}"))?;
                }
                sock.request(&delete_route(Ipv4Addr::UNSPECIFIED, 0))
                    .map_err(|e| format!("remove the default route: {e}"))?;
                sock.request(&delete_route(SLIRP_SUBNET.0, SLIRP_SUBNET.1))
                    .map_err(|e| format!("remove the route to slirp's subnet: {e}"))
            })
            .join()
            .unwrap_or_else(|_| Err("the routing thread panicked".into()))
    })
}

/// An address an allowlisted trial may reach, and the name it was listed by (none for an
/// address listed as such).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pin {
    pub name: Option<String>,
    pub addr: Ipv4Addr,
}

/// How long one allowed name may take to resolve on the host.
const RESOLVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Resolve `allowed_hosts` on the host, once, before the trial starts: what the trial may
/// reach is then fixed, whatever a name resolves to later. Hosts that give no IPv4 address
/// (slirp4netns carries IPv4 only) stay unreachable, each with a note.
pub(crate) async fn resolve_allowed(hosts: &[String]) -> (Vec<Pin>, Vec<String>) {
    let mut pins = Vec::new();
    let mut notes = Vec::new();
    for host in hosts {
        match host.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(addr)) => pins.push(Pin { name: None, addr }),
            Ok(std::net::IpAddr::V6(_)) => notes.push(format!(
                "allowed host {host}: unreachable, the trial's network carries IPv4 only"
            )),
            Err(_) => {
                let name = host.trim_end_matches('.');
                let found =
                    tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((name, 0))).await;
                let addrs: Vec<Ipv4Addr> = match found {
                    Ok(Ok(addrs)) => addrs
                        .filter_map(|a| match a.ip() {
                            std::net::IpAddr::V4(v4) => Some(v4),
                            std::net::IpAddr::V6(_) => None,
                        })
                        .collect(),
                    Ok(Err(e)) => {
                        notes.push(format!(
                            "allowed host {host}: unreachable, not resolved ({e})"
                        ));
                        continue;
                    }
                    Err(_) => {
                        notes.push(format!(
                            "allowed host {host}: unreachable, not resolved within {RESOLVE_TIMEOUT:?}"
                        ));
                        continue;
                    }
                };
                if addrs.is_empty() {
                    notes.push(format!("allowed host {host}: unreachable, no IPv4 address"));
                }
                pins.extend(addrs.into_iter().map(|addr| Pin {
                    name: Some(name.to_string()),
                    addr,
                }));
            }
        }
    }
    (pins, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_is_header_plus_ifinfomsg() {
        let msg = link_up_message();
        assert_eq!(msg.len(), 32);
        assert_eq!(u32::from_ne_bytes([msg[0], msg[1], msg[2], msg[3]]), 32);
    }

    #[test]
    fn a_host_route_carries_destination_gateway_and_device() {
        let msg = host_route(Ipv4Addr::new(1, 2, 3, 4), SLIRP_GATEWAY, 7);
        // header 16 + rtmsg 12 + three attributes of 8 bytes
        assert_eq!(msg.len(), 16 + 12 + 3 * 8);
        assert_eq!(
            u32::from_ne_bytes([msg[0], msg[1], msg[2], msg[3]]) as usize,
            msg.len()
        );
        assert_eq!(&msg[28..36], &[8, 0, 1, 0, 1, 2, 3, 4]);
        assert_eq!(&msg[40..44], &[10, 0, 2, 2]);
        assert_eq!(delete_route(Ipv4Addr::UNSPECIFIED, 0).len(), 16 + 12);
    }

    #[tokio::test]
    async fn addresses_pin_as_themselves_and_ipv6_is_noted() {
        let hosts = [
            "10.1.2.3".to_string(),
            "::1".to_string(),
            "localhost".to_string(),
        ];
        let (pins, notes) = resolve_allowed(&hosts).await;
        assert_eq!(
            pins[0],
            Pin {
                name: None,
                addr: Ipv4Addr::new(10, 1, 2, 3)
            }
        );
        assert!(
            pins.iter()
                .any(|p| p.name.as_deref() == Some("localhost") && p.addr == Ipv4Addr::LOCALHOST),
            "{pins:?}"
        );
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("::1"));
    }
}

/// `OutNoRoutes` of this process's network namespace, IPv4 and IPv6: every packet sent to a
/// host the namespace has no route to (in a sandbox without network, anything beyond `lo`).
pub(crate) fn unrouted_packets() -> u64 {
    let v4 = std::fs::read_to_string("/proc/self/net/snmp")
        .ok()
        .and_then(|text| snmp_field(&text, "Ip:", "OutNoRoutes"))
        .unwrap_or(0);
    let v6 = std::fs::read_to_string("/proc/self/net/snmp6")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                let mut words = l.split_whitespace();
                (words.next() == Some("Ip6OutNoRoutes"))
                    .then(|| words.next()?.parse().ok())
                    .flatten()
            })
        })
        .unwrap_or(0);
    v4.saturating_add(v6)
}

/// A counter of `/proc/net/snmp`, where each protocol has a line of names and a line of values.
fn snmp_field(text: &str, protocol: &str, field: &str) -> Option<u64> {
    let mut lines = text.lines().filter(|l| l.starts_with(protocol));
    let names = lines.next()?;
    let values = lines.next()?;
    let at = names.split_whitespace().position(|n| n == field)?;
    values.split_whitespace().nth(at)?.parse().ok()
}

#[cfg(test)]
mod snmp_tests {
    #[test]
    fn a_counter_is_read_by_its_name() {
        let text = "Ip: Forwarding DefaultTTL OutRequests OutNoRoutes\nIp: 2 64 17 3\n\
                    Icmp: InMsgs\nIcmp: 0\n";
        assert_eq!(super::snmp_field(text, "Ip:", "OutNoRoutes"), Some(3));
        assert_eq!(super::snmp_field(text, "Ip:", "Missing"), None);
    }
}
