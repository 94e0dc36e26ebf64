//! The tier-1 seccomp filter, as data.
//!
//! One entry per refused system call, each with the reason it is refused.
//! The filter is a deny list over a default-allow policy (what programs need
//! keeps working), applied by the in-sandbox stage after Landlock and right
//! before the command executes. Arguments are inspected only where the kernel
//! lets a filter see them (integers, never pointers): namespace flags of
//! `clone`, the request of `ioctl`, the family of `socket`.
//!
//! Refused calls fail with `EPERM`; refused socket families with
//! `EAFNOSUPPORT` (what programs expect from a kernel without that family);
//! `clone3` with `ENOSYS`, so that the C library falls back to `clone`, whose
//! flags the filter can see. A call from another architecture's ABI (32-bit
//! x86 through `int 0x80`) kills the process; x32 system call numbers get
//! `ENOSYS`.

use std::collections::BTreeMap;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};
use serde::{Deserialize, Serialize};

/// Which filter to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// Every tier-1 run.
    Default,
    /// A VM monitor inside tier 1: the default plus `userfaultfd`.
    Vmm,
}

/// When a rule applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Always.
    Always,
    /// When any of these bits is set in argument `arg`.
    AnyBit {
        /// Argument index.
        arg: u8,
        /// Each bit is checked on its own.
        bits: &'static [u64],
    },
    /// When the low 32 bits of argument `arg` equal one of `values`.
    Dword {
        /// Argument index.
        arg: u8,
        /// Values that match.
        values: &'static [u64],
    },
    /// When argument `arg` (32 bits) is none of `values`.
    NotIn {
        /// Argument index.
        arg: u8,
        /// Values that are allowed.
        values: &'static [u64],
    },
}

/// One refused system call.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// Name, for reports.
    pub name: &'static str,
    /// Number on this architecture.
    pub nr: i64,
    /// When it is refused.
    pub when: When,
    /// The errno returned.
    pub errno: i32,
    /// Why.
    pub why: &'static str,
}

const NS_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
    0x80, // CLONE_NEWTIME
];
// The ioctl request type differs between C libraries and architectures.
#[allow(clippy::unnecessary_cast)]
const TTY_INJECT: &[u64] = &[libc::TIOCSTI as u64, libc::TIOCLINUX as u64];
const ALLOWED_FAMILIES: &[u64] = &[
    libc::AF_UNIX as u64,
    libc::AF_INET as u64,
    libc::AF_INET6 as u64,
];

const fn deny(name: &'static str, nr: i64, why: &'static str) -> Rule {
    Rule {
        name,
        nr,
        when: When::Always,
        errno: libc::EPERM,
        why,
    }
}

/// The rules of `profile`, in the order they are reported.
pub fn rules(profile: Profile) -> Vec<Rule> {
    let mut r = vec![
        deny("ptrace", libc::SYS_ptrace, "reads and writes other processes' memory and registers"),
        deny("process_vm_readv", libc::SYS_process_vm_readv, "reads another process's memory"),
        deny("process_vm_writev", libc::SYS_process_vm_writev, "writes another process's memory"),
        deny("pidfd_getfd", libc::SYS_pidfd_getfd, "steals a descriptor from another process"),
        deny("kcmp", libc::SYS_kcmp, "compares kernel objects of other processes (an information leak)"),
        deny("mount", libc::SYS_mount, "changes the file system view the sandbox built"),
        deny("umount2", libc::SYS_umount2, "uncovers what the sandbox mounted over"),
        deny("pivot_root", libc::SYS_pivot_root, "changes the root of the mount namespace"),
        deny("chroot", libc::SYS_chroot, "changes the root directory"),
        deny("move_mount", libc::SYS_move_mount, "new mount API"),
        deny("open_tree", libc::SYS_open_tree, "new mount API: clones mounts"),
        deny("fsopen", libc::SYS_fsopen, "new mount API"),
        deny("fsconfig", libc::SYS_fsconfig, "new mount API"),
        deny("fsmount", libc::SYS_fsmount, "new mount API"),
        deny("fspick", libc::SYS_fspick, "new mount API: reconfigures mounts"),
        deny("mount_setattr", libc::SYS_mount_setattr, "changes mount flags such as read-only"),
        deny("unshare", libc::SYS_unshare, "new namespaces (kernel attack surface, escapes of the sandbox's own)"),
        deny("setns", libc::SYS_setns, "joins other namespaces"),
        deny("bpf", libc::SYS_bpf, "loads programs into the kernel"),
        deny("perf_event_open", libc::SYS_perf_event_open, "kernel attack surface and side channels"),
        deny("keyctl", libc::SYS_keyctl, "the kernel keyring is shared beyond the sandbox"),
        deny("add_key", libc::SYS_add_key, "the kernel keyring is shared beyond the sandbox"),
        deny("request_key", libc::SYS_request_key, "the kernel keyring is shared beyond the sandbox"),
        deny("io_uring_setup", libc::SYS_io_uring_setup, "io_uring bypasses seccomp for the operations it carries"),
        deny("io_uring_enter", libc::SYS_io_uring_enter, "io_uring bypasses seccomp for the operations it carries"),
        deny("io_uring_register", libc::SYS_io_uring_register, "io_uring bypasses seccomp for the operations it carries"),
        deny("kexec_load", libc::SYS_kexec_load, "replaces the running kernel"),
        deny("kexec_file_load", libc::SYS_kexec_file_load, "replaces the running kernel"),
        deny("init_module", libc::SYS_init_module, "loads kernel modules"),
        deny("finit_module", libc::SYS_finit_module, "loads kernel modules"),
        deny("delete_module", libc::SYS_delete_module, "unloads kernel modules"),
        deny("acct", libc::SYS_acct, "process accounting is host-wide"),
        deny("swapon", libc::SYS_swapon, "host-wide swap"),
        deny("swapoff", libc::SYS_swapoff, "host-wide swap"),
        deny("reboot", libc::SYS_reboot, "host-wide"),
        deny("syslog", libc::SYS_syslog, "reads the kernel log (addresses, other tenants' messages)"),
        deny("quotactl", libc::SYS_quotactl, "file system quotas are host-wide"),
        deny("open_by_handle_at", libc::SYS_open_by_handle_at, "opens files by handle, bypassing the mount view"),
        deny("name_to_handle_at", libc::SYS_name_to_handle_at, "file handles leak identities usable by open_by_handle_at"),
        deny("fanotify_init", libc::SYS_fanotify_init, "watches file systems beyond the sandbox"),
        deny("vhangup", libc::SYS_vhangup, "hangs up the terminal"),
        deny("lookup_dcookie", libc::SYS_lookup_dcookie, "kernel profiling interface"),
        Rule {
            name: "clone",
            nr: libc::SYS_clone,
            when: When::AnyBit { arg: CLONE_FLAGS_ARG, bits: NS_FLAGS },
            errno: libc::EPERM,
            why: "new namespaces through clone",
        },
        Rule {
            name: "clone3",
            nr: libc::SYS_clone3,
            when: When::Always,
            errno: libc::ENOSYS,
            why: "its flags live in memory the filter cannot read; ENOSYS makes the C library use clone",
        },
        Rule {
            name: "ioctl",
            nr: libc::SYS_ioctl,
            when: When::Dword { arg: 1, values: TTY_INJECT },
            errno: libc::EPERM,
            why: "TIOCSTI/TIOCLINUX push input into a terminal outside the sandbox",
        },
        Rule {
            name: "socket",
            nr: libc::SYS_socket,
            when: When::NotIn { arg: 0, values: ALLOWED_FAMILIES },
            errno: libc::EAFNOSUPPORT,
            why: "only AF_UNIX, AF_INET, AF_INET6: no netlink, vsock, packet, bluetooth, ...",
        },
        Rule {
            name: "socketpair",
            nr: libc::SYS_socketpair,
            when: When::NotIn { arg: 0, values: ALLOWED_FAMILIES },
            errno: libc::EAFNOSUPPORT,
            why: "only AF_UNIX, AF_INET, AF_INET6",
        },
    ];
    #[cfg(target_arch = "x86_64")]
    r.push(Rule {
        name: "uselib",
        nr: libc::SYS_uselib,
        when: When::Always,
        errno: libc::EPERM,
        why: "obsolete loader interface",
    });
    if profile == Profile::Default {
        r.push(deny(
            "userfaultfd",
            libc::SYS_userfaultfd,
            "stalls kernel code on page faults (exploit aid); only a VM monitor gets it",
        ));
    }
    r
}

/// The rule installed last, after the egress bridge has started and right
/// before the command executes: no new unix-domain sockets by `socket(2)`
/// (pairs from `socketpair(2)` stay allowed). A command therefore cannot
/// connect to a host service's socket that happens to lie in a folder it was
/// given; the bridge, started before, keeps reaching the run's proxy socket.
pub fn unix_socket_rule() -> Rule {
    Rule {
        name: "socket(AF_UNIX)",
        nr: libc::SYS_socket,
        when: When::Dword {
            arg: 0,
            values: &[libc::AF_UNIX as u64],
        },
        errno: libc::EPERM,
        why: "new unix sockets could reach host services' sockets in the run's folders",
    }
}

/// Compiles [`unix_socket_rule`] on its own.
pub fn compile_unix_deny() -> Result<BpfProgram, SeccompError> {
    let err = |e: seccompiler::BackendError| SeccompError(e.to_string());
    let r = unix_socket_rule();
    let When::Dword { arg, values } = r.when else {
        unreachable!("the unix rule matches a dword")
    };
    let rules = values
        .iter()
        .map(|&v| {
            SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, v)
                .and_then(|c| SeccompRule::new(vec![c]))
                .map_err(err)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut map = BTreeMap::new();
    map.insert(r.nr, rules);
    let filter = SeccompFilter::new(
        map,
        SeccompAction::Allow,
        SeccompAction::Errno(r.errno as u32),
        arch()?,
    )
    .map_err(err)?;
    filter.try_into().map_err(err)
}

/// The argument of `clone` that holds the flags.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const CLONE_FLAGS_ARG: u8 = 0;

/// Why the filter could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the seccomp filter: {0}")]
pub struct SeccompError(String);

fn arch() -> Result<TargetArch, SeccompError> {
    TargetArch::try_from(std::env::consts::ARCH).map_err(|e| SeccompError(e.to_string()))
}

/// Compiles `profile` into BPF programs, one per errno, to be installed in
/// order. The first carries the x32 guard on x86_64.
pub fn compile(profile: Profile) -> Result<Vec<BpfProgram>, SeccompError> {
    let err = |e: seccompiler::BackendError| SeccompError(e.to_string());
    let mut by_errno: BTreeMap<i32, BTreeMap<i64, Vec<SeccompRule>>> = BTreeMap::new();
    for rule in rules(profile) {
        let conds: Vec<Vec<SeccompCondition>> = match rule.when {
            When::Always => vec![],
            When::AnyBit { arg, bits } => bits
                .iter()
                .map(|&b| {
                    SeccompCondition::new(
                        arg,
                        SeccompCmpArgLen::Qword,
                        SeccompCmpOp::MaskedEq(b),
                        b,
                    )
                    .map(|c| vec![c])
                })
                .collect::<Result<_, _>>()
                .map_err(err)?,
            When::Dword { arg, values } => values
                .iter()
                .map(|&v| {
                    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, v)
                        .map(|c| vec![c])
                })
                .collect::<Result<_, _>>()
                .map_err(err)?,
            When::NotIn { arg, values } => vec![values
                .iter()
                .map(|&v| SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, v))
                .collect::<Result<_, _>>()
                .map_err(err)?],
        };
        let rules = conds
            .into_iter()
            .map(|c| SeccompRule::new(c).map_err(err))
            .collect::<Result<Vec<_>, _>>()?;
        by_errno
            .entry(rule.errno)
            .or_default()
            .insert(rule.nr, rules);
    }
    let arch = arch()?;
    let mut programs = Vec::new();
    for (errno, map) in by_errno {
        let filter = SeccompFilter::new(
            map,
            SeccompAction::Allow,
            SeccompAction::Errno(errno as u32),
            arch,
        )
        .map_err(err)?;
        let prog: BpfProgram = filter.try_into().map_err(err)?;
        programs.push(prog);
    }
    if let Some(first) = programs.first_mut() {
        let mut guarded = x32_guard();
        guarded.append(first);
        *first = guarded;
    }
    Ok(programs)
}

/// On x86_64, system call numbers with bit 30 set are the x32 ABI, which has
/// its own numbers for the calls above; refuse them all.
fn x32_guard() -> BpfProgram {
    if cfg!(target_arch = "x86_64") {
        const X32_BIT: u32 = 0x4000_0000;
        vec![
            // Load the architecture; only x86_64 has the x32 alias.
            stmt(0x20, 4),                                 // ld [4] (arch)
            jump(0x15, 0xC000_003E, 0, 3),                 // jeq AUDIT_ARCH_X86_64, next, skip 3
            stmt(0x20, 0),                                 // ld [0] (nr)
            jump(0x35, X32_BIT, 0, 1),                     // jge X32_BIT, ret, skip
            stmt(0x06, 0x0005_0000 | libc::ENOSYS as u32), // ret ERRNO(ENOSYS)
        ]
    } else {
        vec![]
    }
}

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// Installs compiled programs on the calling thread (no_new_privs must be set).
pub fn install(programs: &[BpfProgram]) -> Result<(), SeccompError> {
    for p in programs {
        seccompiler::apply_filter(p).map_err(|e| SeccompError(e.to_string()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covers_the_design_list() {
        let names: Vec<_> = rules(Profile::Default).iter().map(|r| r.name).collect();
        for must in [
            "ptrace",
            "process_vm_readv",
            "process_vm_writev",
            "mount",
            "unshare",
            "setns",
            "bpf",
            "perf_event_open",
            "keyctl",
            "add_key",
            "io_uring_setup",
            "userfaultfd",
            "kexec_load",
            "init_module",
            "finit_module",
            "ioctl",
            "socket",
            "clone",
            "clone3",
        ] {
            assert!(names.contains(&must), "{must} missing");
        }
    }

    #[test]
    fn vmm_profile_allows_only_userfaultfd_more() {
        let d: Vec<_> = rules(Profile::Default).iter().map(|r| r.name).collect();
        let v: Vec<_> = rules(Profile::Vmm).iter().map(|r| r.name).collect();
        assert!(!v.contains(&"userfaultfd"));
        assert_eq!(d.len(), v.len() + 1);
    }

    #[test]
    fn every_rule_says_why_and_no_number_twice() {
        let rs = rules(Profile::Default);
        let mut nrs: Vec<_> = rs.iter().map(|r| r.nr).collect();
        nrs.sort();
        nrs.dedup();
        assert_eq!(nrs.len(), rs.len());
        assert!(rs.iter().all(|r| !r.why.is_empty()));
    }

    #[test]
    fn unix_rule_compiles() {
        assert!(!compile_unix_deny().unwrap().is_empty());
    }

    #[test]
    fn compiles_one_program_per_errno() {
        let p = compile(Profile::Default).unwrap();
        assert_eq!(p.len(), 3, "EPERM, EAFNOSUPPORT, ENOSYS");
        assert!(p.iter().all(|p| !p.is_empty() && p.len() < 4096));
    }
}
