//! Bringing up `lo` in a fresh network namespace without `ip`: one rtnetlink message.
//!
//! A new network namespace has only a loopback interface, and it starts down; services that a
//! task starts and tests on 127.0.0.1 need it up. `ip link set lo up` is not on every host,
//! and the ioctl route needs `unsafe`, so we speak netlink through nix's safe socket calls.

use std::os::fd::AsRawFd;

use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, recv, sendto, socket,
};

// From <linux/rtnetlink.h>, <linux/netlink.h> and <net/if.h>; stable kernel ABI.
const RTM_NEWLINK: u16 = 16;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLMSG_ERROR: u16 = 2;
const IFF_UP: u32 = 1;
/// The loopback device is always the first registered in a namespace.
const LOOPBACK_IFINDEX: i32 = 1;

/// An `RTM_NEWLINK` request that sets IFF_UP on interface 1: `nlmsghdr` then `ifinfomsg`.
fn link_up_message() -> Vec<u8> {
    let mut msg = Vec::with_capacity(32);
    msg.extend_from_slice(&32u32.to_ne_bytes()); // nlmsg_len
    msg.extend_from_slice(&RTM_NEWLINK.to_ne_bytes());
    msg.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes()); // nlmsg_seq
    msg.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid: the kernel fills it in
    msg.push(0); // ifi_family AF_UNSPEC
    msg.push(0); // padding
    msg.extend_from_slice(&0u16.to_ne_bytes()); // ifi_type
    msg.extend_from_slice(&LOOPBACK_IFINDEX.to_ne_bytes());
    msg.extend_from_slice(&IFF_UP.to_ne_bytes()); // ifi_flags
    msg.extend_from_slice(&IFF_UP.to_ne_bytes()); // ifi_change: only this bit
    msg
}

pub(crate) fn loopback_up() -> Result<(), String> {
    let sock = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )
    .map_err(|e| format!("netlink socket: {e}"))?;
    let fd = sock.as_raw_fd();
    sendto(
        fd,
        &link_up_message(),
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )
    .map_err(|e| format!("netlink send: {e}"))?;
    let mut buf = [0u8; 512];
    let n = recv(fd, &mut buf, MsgFlags::empty()).map_err(|e| format!("netlink recv: {e}"))?;
    // The ack is an NLMSG_ERROR whose error field (after the 16-byte header) is 0 on success.
    if n >= 20 && u16::from_ne_bytes([buf[4], buf[5]]) == NLMSG_ERROR {
        let errno = i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]);
        if errno != 0 {
            return Err(format!(
                "RTM_NEWLINK refused: {}",
                std::io::Error::from_raw_os_error(-errno)
            ));
        }
        return Ok(());
    }
    Err(format!("unexpected netlink answer ({n} bytes)"))
}

/// The resolver slirp4netns answers on inside the namespace.
pub(crate) const SLIRP_DNS: &str = "10.0.2.3";
/// How long slirp4netns may take to configure the namespace's interface.
const SLIRP_READY: std::time::Duration = std::time::Duration::from_secs(5);

/// Give the network namespace of `pid` outbound network through `slirp4netns`, a user-mode
/// TCP/IP stack on the host side: the namespace gets `tap0` with a default route and NAT, the
/// host's loopback stays out of reach (`--disable-host-loopback`), and nothing of another
/// trial's namespace is ever routable. It dies with the returned child (or with the namespace).
pub(crate) async fn start_slirp(
    pid: Option<u32>,
) -> Result<tokio::process::Child, super::EnvError> {
    use super::EnvError;
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
                message: format!("slirp4netns exited ({status}) before the network was up"),
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

#[cfg(test)]
mod tests {
    #[test]
    fn message_is_header_plus_ifinfomsg() {
        let msg = super::link_up_message();
        assert_eq!(msg.len(), 32);
        assert_eq!(u32::from_ne_bytes([msg[0], msg[1], msg[2], msg[3]]), 32);
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
