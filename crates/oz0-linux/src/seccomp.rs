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
mod tests {
    use super::*;
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };

    fn arch() -> Result<TargetArch, SeccompError> {
        TargetArch::try_from(std::env::consts::ARCH).map_err(|e| SeccompError(e.to_string()))
    }

    // The reference: seccompiler's programs of the same rules, one per
    // errno, as the filter was built before it became one search program.

    /// One program per errno, in errno order, each allowing what it does not
    /// refuse.
    fn compile_rules(rules: &[Rule], arch: TargetArch) -> Result<Vec<BpfProgram>, SeccompError> {
        let err = |e: seccompiler::BackendError| SeccompError(e.to_string());
        let mut by_errno: BTreeMap<i32, BTreeMap<i64, Vec<SeccompRule>>> = BTreeMap::new();
        for &rule in rules {
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
                    .map(|&v| {
                        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, v)
                    })
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
        let mut programs = Vec::new();
        for (errno, map) in by_errno {
            let filter = SeccompFilter::new(
                map,
                SeccompAction::Allow,
                SeccompAction::Errno(
                    u32::try_from(errno).map_err(|_| SeccompError(format!("errno {errno}")))?,
                ),
                arch,
            )
            .map_err(err)?;
            let prog: BpfProgram = filter.try_into().map_err(err)?;
            programs.push(prog);
        }
        Ok(programs)
    }

    /// On x86_64, system call numbers with bit 30 set are the x32 ABI, which has
    /// its own numbers for the calls above; refuse them all.
    fn x32_guard() -> BpfProgram {
        if cfg!(target_arch = "x86_64") {
            vec![
                // Load the architecture; only x86_64 has the x32 alias.
                stmt(0x20, 4),                                 // ld [4] (arch)
                jump(0x15, 0xC000_003E, 0, 3), // jeq AUDIT_ARCH_X86_64, next, skip 3
                stmt(0x20, 0),                 // ld [0] (nr)
                jump(0x35, X32_BIT, 0, 1),     // jge X32_BIT, ret, skip
                stmt(0x06, 0x0005_0000 | libc::ENOSYS as u32), // ret ERRNO(ENOSYS)
            ]
        } else {
            vec![]
        }
    }

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

    /// Runs a classic BPF program (the instructions seccompiler and the x32
    /// guard emit) on a `seccomp_data`: nr, arch, ip, args.
    fn run(p: &[sock_filter], nr: u32, arch: u32, args: [u64; 6]) -> u32 {
        run_counted(p, nr, arch, args).0
    }

    /// [`run`], and how many instructions it took.
    fn run_counted(p: &[sock_filter], nr: u32, arch: u32, args: [u64; 6]) -> (u32, usize) {
        let mut steps = 0;
        let word = |off: u32| -> u32 {
            match off {
                0 => nr,
                4 => arch,
                8 | 12 => 0,
                o => {
                    let a = args[((o - 16) / 8) as usize];
                    if (o - 16) % 8 == 0 {
                        (a & 0xffff_ffff) as u32
                    } else {
                        (a >> 32) as u32
                    }
                }
            }
        };
        let (mut acc, mut pc) = (0u32, 0usize);
        loop {
            let i = &p[pc];
            pc += 1;
            steps += 1;
            match i.code {
                0x20 => acc = word(i.k),
                0x54 => acc &= i.k,
                0x06 => return (i.k, steps),
                0x05 => pc += i.k as usize,
                0x15 | 0x25 | 0x35 | 0x45 => {
                    let hit = match i.code {
                        0x15 => acc == i.k,
                        0x25 => acc > i.k,
                        0x35 => acc >= i.k,
                        _ => acc & i.k != 0,
                    };
                    pc += if hit { i.jt } else { i.jf } as usize;
                }
                c => panic!("instruction {c:#x} not known to this test"),
            }
        }
    }

    /// The kernel's verdict over several filters: the one of lowest action
    /// value wins; among equal actions, the most recently installed.
    fn run_all(ps: &[BpfProgram], nr: u32, arch: u32, args: [u64; 6]) -> u32 {
        let mut best = u32::MAX;
        for p in ps.iter().rev() {
            let v = run(p, nr, arch, args);
            // The kernel compares actions as signed 32-bit values
            // (ACTION_ONLY): the wrap to i32 is the comparison it makes.
            #[allow(clippy::cast_possible_wrap)]
            if ((v & 0xffff_0000) as i32) < ((best & 0xffff_0000) as i32) || best == u32::MAX {
                best = v;
            }
        }
        best
    }

    /// The one search program answers every call (every number, x32
    /// numbers, another architecture, the arguments the rules look at)
    /// exactly as seccompiler's separate programs of the same rules,
    /// installed one after the other.
    #[test]
    fn the_search_program_gives_the_verdicts_of_seccompilers_programs() {
        for (profile, unix) in [
            (Profile::Default, false),
            (Profile::Default, true),
            (Profile::Vmm, false),
        ] {
            let one = compile(profile, unix).unwrap();
            assert_eq!(one.len(), 1);
            assert!(one[0].len() < 4096);
            // The separate programs, as before the chaining: one per errno,
            // the first installed headed by the x32 guard.
            let mut separate: Vec<BpfProgram> = Vec::new();
            let arch = arch().unwrap();
            let mut by_errno: BTreeMap<i32, Vec<&Rule>> = BTreeMap::new();
            let rs = rules(profile);
            for r in &rs {
                by_errno.entry(r.errno).or_default().push(r);
            }
            assert!(by_errno.len() >= 3, "EPERM, EAFNOSUPPORT, ENOSYS");
            for (errno, _) in by_errno {
                let only: Vec<Rule> = rs.iter().filter(|r| r.errno == errno).cloned().collect();
                let p = compile_rules(&only, arch).unwrap();
                assert_eq!(p.len(), 1);
                separate.push(p.into_iter().next().unwrap());
            }
            let mut g = x32_guard();
            g.append(&mut separate[0]);
            separate[0] = g;
            if unix {
                // Installed after the others.
                separate.push(
                    compile_rules(&[unix_socket_rule()], arch)
                        .unwrap()
                        .remove(0),
                );
            }
            let native = 0xC000_003E;
            // Every socket family number, every namespace flag alone and
            // with the high word set, the tty requests and their neighbours.
            let mut arg_sets: Vec<[u64; 6]> = vec![[0; 6], [u64::MAX; 6]];
            for fam in 0..48u64 {
                arg_sets.push([fam, 1, 0, 0, 0, 0]);
                arg_sets.push([fam | 0x1_0000_0000, 1, 0, 0, 0, 0]);
            }
            for &f in NS_FLAGS.iter().chain(&[libc::SIGCHLD as u64, 0x0100_0000]) {
                arg_sets.push([f, 0, 0, 0, 0, 0]);
                arg_sets.push([f | 0xffff_ffff_0000_0000, 0, 0, 0, 0, 0]);
            }
            for &req in TTY_INJECT.iter().chain(&[0x5413, 0x5401, 0]) {
                arg_sets.push([1, req, 0, 0, 0, 0]);
                arg_sets.push([1, req | 0x7_0000_0000, 0, 0, 0, 0]);
            }
            let mut checked = 0;
            for nr in (0..600).chain([0x4000_0000, 0x4000_0001, 0x4000_0200]) {
                for &args in &arg_sets {
                    for a in [native, 0x4000_0003] {
                        assert_eq!(
                            run(&one[0], nr, a, args),
                            run_all(&separate, nr, a, args),
                            "{profile:?}: nr {nr:#x}, arch {a:#x}, args {args:?}"
                        );
                        checked += 1;
                    }
                }
            }
            assert!(checked > 100_000, "{checked}");
        }
    }

    /// Every verdict takes a search, not a walk through every rule: the
    /// point of the program's shape (the kernel emulates it for about 900
    /// call numbers when it is installed, and runs it on the command's
    /// calls).
    #[test]
    fn every_verdict_takes_few_instructions() {
        for (profile, unix) in [(Profile::Default, true), (Profile::Vmm, false)] {
            let p = &compile(profile, unix).unwrap()[0];
            assert!(p.len() < 400, "{} instructions", p.len());
            let worst = (0..600u32)
                .map(|nr| run_counted(p, nr, 0xC000_003E, [1, 0x5412, 0, 0, 0, 0]).1)
                .max()
                .unwrap();
            assert!(
                worst <= 24,
                "{profile:?}: up to {worst} instructions per call"
            );
        }
    }

    /// The verdicts themselves, on a few calls the design names.
    #[test]
    fn the_search_program_refuses_what_the_design_names() {
        let p = &compile(Profile::Default, true).unwrap()[0];
        let native = 0xC000_003E;
        let errno = |e: i32| 0x0005_0000 | u32::try_from(e).unwrap();
        let nr = |name: &str| {
            let nr = rules(Profile::Default)
                .iter()
                .find(|r| r.name == name)
                .unwrap()
                .nr;
            u32::try_from(nr).unwrap()
        };
        assert_eq!(run(p, nr("ptrace"), native, [0; 6]), errno(libc::EPERM));
        assert_eq!(run(p, nr("clone3"), native, [0; 6]), errno(libc::ENOSYS));
        assert_eq!(
            run(p, nr("socket"), native, [16, 3, 0, 0, 0, 0]),
            errno(libc::EAFNOSUPPORT)
        );
        assert_eq!(
            run(p, nr("socket"), native, [2, 1, 0, 0, 0, 0]),
            0x7fff_0000
        );
        assert_eq!(run(p, 0, native, [0; 6]), 0x7fff_0000, "read is allowed");
        assert_eq!(
            run(p, 0x4000_0000, native, [0; 6]),
            errno(libc::ENOSYS),
            "x32"
        );
    }
}
