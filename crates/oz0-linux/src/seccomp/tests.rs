//! The filters, run instruction by instruction against what the design names, and against seccompiler's programs of the same rules.

use super::*;
use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch,
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
            jump(0x15, 0xC000_003E, 0, 3),                 // jeq AUDIT_ARCH_X86_64, next, skip 3
            stmt(0x20, 0),                                 // ld [0] (nr)
            jump(0x35, X32_BIT, 0, 1),                     // jge X32_BIT, ret, skip
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
        "open_tree_attr",
        "statmount",
        "listmount",
        "quotactl_fd",
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
