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

use seccompiler::{sock_filter, BpfProgram};
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
const TTY_INJECT: &[u64] = &[
    libc::TIOCSTI as u64,
    libc::TIOCLINUX as u64,
    libc::TIOCSETD as u64,
];
/// Calls newer than the C library's tables, numbered alike on every
/// architecture since Linux 5.1's common table.
const SYS_STATMOUNT: i64 = 457;
const SYS_LISTMOUNT: i64 = 458;
const SYS_OPEN_TREE_ATTR: i64 = 467;
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
        deny("open_tree_attr", SYS_OPEN_TREE_ATTR, "new mount API: clones mounts with other flags"),
        Rule {
            name: "statmount",
            nr: SYS_STATMOUNT,
            when: When::Always,
            errno: libc::ENOSYS,
            why: "mount API: reads mounts; ENOSYS makes tools read /proc/self/mountinfo, the run's own",
        },
        Rule {
            name: "listmount",
            nr: SYS_LISTMOUNT,
            when: When::Always,
            errno: libc::ENOSYS,
            why: "mount API: lists mounts; ENOSYS makes tools read /proc/self/mountinfo, the run's own",
        },
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
        deny("quotactl_fd", libc::SYS_quotactl_fd, "file system quotas are host-wide"),
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
            why: "TIOCSTI/TIOCLINUX push input into a terminal outside the sandbox; TIOCSETD changes its line discipline (kernel attack surface)",
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

/// No new unix-domain sockets by `socket(2)` (pairs from `socketpair(2)`
/// stay allowed), unless the caller lets the run have them. A command
/// therefore cannot connect to a host service's socket that happens to lie
/// in a folder it was given. The egress bridge needs none: it hands
/// connections to the proxy over a channel it was given.
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

/// The argument of `clone` that holds the flags.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const CLONE_FLAGS_ARG: u8 = 0;

/// Why the filter could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the seccomp filter: {0}")]
pub struct SeccompError(String);

/// Compiles `profile` into one BPF program (a `Vec` for [`install`]). With
/// `deny_unix`, the program also refuses new unix sockets
/// ([`unix_socket_rule`], checked before the `socket` rule of the profile).
///
/// The program, in order:
/// - another architecture's call (32-bit x86 through `int 0x80`): kill the
///   process;
/// - on x86_64, an x32 call number (bit 30): `ENOSYS`;
/// - a binary search over the numbers of the refused calls (`jge`), down to
///   groups of at most four numbers each compared with `jeq`; a number
///   found runs its rules' argument checks, in order, to a return;
/// - anything else: allow.
///
/// A call's verdict therefore takes a handful of instructions, not one
/// comparison per rule. That matters twice: the kernel runs the program on
/// every system call of the command that it has not found constant, and when
/// the filter is installed it emulates the program once per call number of
/// each architecture (about 900 times) to find the constant ones. A test
/// checks every verdict against seccompiler's programs of the same rules.
pub fn compile(profile: Profile, deny_unix: bool) -> Result<Vec<BpfProgram>, SeccompError> {
    let mut rs = rules(profile);
    if deny_unix {
        rs.insert(0, unix_socket_rule());
    }
    Ok(vec![program(&rs, AUDIT_ARCH)?])
}

/// The audit architecture of this build's system calls.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// At most this many call numbers are compared one by one at the end of a
/// search.
const LEAF: usize = 4;

const LD_W_ABS: u16 = 0x20;
const JA: u16 = 0x05;
const JEQ: u16 = 0x15;
const JGE: u16 = 0x35;
const JSET: u16 = 0x45;
const RET: u16 = 0x06;
const ALLOW: u32 = 0x7fff_0000;
const KILL_PROCESS: u32 = 0x8000_0000;
/// Call numbers with this bit set are the x32 ABI on x86_64.
const X32_BIT: u32 = 0x4000_0000;

fn program(rules: &[Rule], audit_arch: u32) -> Result<BpfProgram, SeccompError> {
    let mut by_nr: BTreeMap<u32, Vec<Rule>> = BTreeMap::new();
    for r in rules {
        let nr = u32::try_from(r.nr)
            .ok()
            .filter(|n| n & X32_BIT == 0)
            .ok_or_else(|| SeccompError(format!("{}: bad call number {}", r.name, r.nr)))?;
        by_nr.entry(nr).or_default().push(*r);
    }
    let groups: Vec<(u32, Vec<Rule>)> = by_nr.into_iter().collect();
    let mut p = vec![
        stmt(LD_W_ABS, 4), // arch
        jump(JEQ, audit_arch, 1, 0),
        stmt(RET, KILL_PROCESS),
        stmt(LD_W_ABS, 0), // nr
    ];
    if cfg!(target_arch = "x86_64") {
        p.push(jump(JGE, X32_BIT, 0, 1));
        p.push(ret_errno(libc::ENOSYS));
    }
    search(&groups, &mut p)?;
    if p.len() > 4096 {
        return Err(SeccompError(format!("{} instructions", p.len())));
    }
    Ok(p)
}

/// Emits the verdict for the call numbers of `groups` (sorted, the number in
/// the accumulator).
fn search(groups: &[(u32, Vec<Rule>)], p: &mut BpfProgram) -> Result<(), SeccompError> {
    if groups.len() <= LEAF {
        for (nr, rs) in groups {
            let b = block(rs)?;
            let skip = u8::try_from(b.len())
                .map_err(|_| SeccompError(format!("call {nr}: {} instructions", b.len())))?;
            p.push(jump(JEQ, *nr, 0, skip));
            p.extend(b);
        }
        p.push(stmt(RET, ALLOW));
        return Ok(());
    }
    let mid = groups.len() / 2;
    // Numbers from the middle one up: after the lower half (`ja` takes a
    // 32-bit offset, conditional jumps only 8 bits).
    p.push(jump(JGE, groups[mid].0, 0, 1));
    let ja = p.len();
    p.push(stmt(JA, 0));
    search(&groups[..mid], p)?;
    p[ja].k = u32::try_from(p.len() - ja - 1)
        .map_err(|_| SeccompError(format!("a jump over {} instructions", p.len() - ja - 1)))?;
    search(&groups[mid..], p)
}

/// One call's rules, in order, ending in a return. A rule that does not
/// refuse the call goes on to the next; after the last, the call is allowed.
fn block(rs: &[Rule]) -> Result<BpfProgram, SeccompError> {
    let bad = |r: &Rule, what: &str| SeccompError(format!("{}: {what}", r.name));
    let mut b = Vec::new();
    for r in rs {
        let refuse = ret_errno(r.errno);
        // Low 32 bits of the argument (little-endian `seccomp_data`).
        let load = |arg: u8| stmt(LD_W_ABS, 16 + 8 * u32::from(arg));
        match r.when {
            When::Always => {
                b.push(refuse);
                return Ok(b);
            }
            // Refused when any bit is set (each a single bit of the low word).
            When::AnyBit { arg, bits } | When::Dword { arg, values: bits } => {
                let (code, what) = match r.when {
                    When::AnyBit { .. } => (JSET, "bits must be single bits of the low word"),
                    _ => (JEQ, "values must fit 32 bits"),
                };
                b.push(load(arg));
                let m = bits.len();
                for (i, &v) in bits.iter().enumerate() {
                    let single = code != JSET || v.is_power_of_two();
                    let k = u32::try_from(v)
                        .ok()
                        .filter(|_| single)
                        .ok_or_else(|| bad(r, what))?;
                    // Match: past the other checks and the `ja`, to refuse.
                    let jt = u8::try_from(m - i).map_err(|_| bad(r, "too many values"))?;
                    b.push(jump(code, k, jt, 0));
                }
                b.push(stmt(JA, 1));
                b.push(refuse);
            }
            // Refused unless the argument is one of `values`.
            When::NotIn { arg, values } => {
                b.push(load(arg));
                let m = values.len();
                for (i, &v) in values.iter().enumerate() {
                    let k = u32::try_from(v).map_err(|_| bad(r, "values must fit 32 bits"))?;
                    // Match: past the other checks and the refusal.
                    let jt = u8::try_from(m - i).map_err(|_| bad(r, "too many values"))?;
                    b.push(jump(JEQ, k, jt, 0));
                }
                b.push(refuse);
            }
        }
    }
    b.push(stmt(RET, ALLOW));
    Ok(b)
}

// The rules' errnos are libc's E* constants (positive, below 4096), and
// SECCOMP_RET_DATA holds the low 16 bits of whatever is given: the mask
// keeps exactly those, so the cast loses nothing the filter could return.
#[allow(clippy::cast_sign_loss)]
fn ret_errno(errno: i32) -> sock_filter {
    stmt(RET, 0x0005_0000 | (errno as u32 & 0xffff))
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
mod tests;
