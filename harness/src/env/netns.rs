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

#[cfg(test)]
mod tests {
    #[test]
    fn message_is_header_plus_ifinfomsg() {
        let msg = super::link_up_message();
        assert_eq!(msg.len(), 32);
        assert_eq!(u32::from_ne_bytes([msg[0], msg[1], msg[2], msg[3]]), 32);
    }
}
