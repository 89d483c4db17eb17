//! The system calls no process of a sandbox may make, in the spirit of docker's default
//! profile: a deny list (everything else is allowed, so the images and tools tasks use keep
//! working), answered with `EPERM` (`ENOSYS` for `clone3`, so the C library falls back to
//! `clone`, whose namespace flags the filter can see).
//!
//! Most of these already fail for want of a capability (the bounding set has no
//! CAP_SYS_ADMIN, CAP_SYS_MODULE ...); the filter holds where a capability is not needed at
//! all: new user namespaces, `bpf`, `perf_event_open`, `userfaultfd`, the key ring, the new
//! mount API, `io_uring`, and `ioctl`s that type into a terminal. It is installed, with `no_new_privs`, in every command the sandbox's agent
//! starts, between `fork` and `exec` ([`super::views`]).

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Refused outright.
const DENIED: &[i64] = &[
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_keyctl,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_setns,
    libc::SYS_unshare,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_lookup_dcookie,
    libc::SYS_iopl,
    libc::SYS_ioperm,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_syslog,
    libc::SYS_vhangup,
    // A second way to do I/O that seccomp cannot see into, with a long record of kernel
    // escapes; docker's default profile refuses it too.
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
];

/// `ioctl` requests refused: typing into a terminal's input (`TIOCSTI`) and the console's
/// selection paste (`TIOCLINUX`), the two ways a process writes to what a person's shell reads.
const DENIED_IOCTLS: &[u64] = &[libc::TIOCSTI, libc::TIOCLINUX];

/// `clone` flags that make namespaces (a user namespace needs no capability).
const NAMESPACE_FLAGS: u64 = (libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWCGROUP) as u64;

/// The deny list, and the `clone3` answer (a second filter: the kernel runs both and the
/// strictest answer wins).
pub(crate) fn programs() -> Result<[BpfProgram; 2], String> {
    let err = |e: &dyn std::fmt::Display| format!("build the seccomp filter: {e}");
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|&nr| (nr, Vec::new())).collect();
    let mut clone_rules = Vec::new();
    for bit in 0..64 {
        let flag = 1u64 << bit;
        if NAMESPACE_FLAGS & flag == 0 {
            continue;
        }
        let condition = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(flag),
            flag,
        )
        .map_err(|e| err(&e))?;
        clone_rules.push(SeccompRule::new(vec![condition]).map_err(|e| err(&e))?);
    }
    rules.insert(libc::SYS_clone, clone_rules);
    let mut ioctl_rules = Vec::new();
    for &request in DENIED_IOCTLS {
        // The request is an `unsigned int`: compare its 32 bits only.
        let condition =
            SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, request)
                .map_err(|e| err(&e))?;
        ioctl_rules.push(SeccompRule::new(vec![condition]).map_err(|e| err(&e))?);
    }
    rules.insert(libc::SYS_ioctl, ioctl_rules);
    let deny = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        TargetArch::x86_64,
    )
    .map_err(|e| err(&e))?;
    // clone3 passes its flags in memory the filter cannot read: ENOSYS, and the C library
    // retries with clone.
    let clone3 = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        TargetArch::x86_64,
    )
    .map_err(|e| err(&e))?;
    Ok([
        deny.try_into()
            .map_err(|e: seccompiler::BackendError| err(&e))?,
        clone3
            .try_into()
            .map_err(|e: seccompiler::BackendError| err(&e))?,
    ])
}
