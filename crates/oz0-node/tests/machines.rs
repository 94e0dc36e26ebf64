//! The node on machines unlike this one: each machine below is a real
//! kernel (Debian's, the test guest's) booted under QEMU in software
//! emulation with its own configuration — boot parameters, sysctls, cgroup
//! mounts — and the node's `sandbox check --self-test` runs in it as an
//! unprivileged user, the way a node runs. Its answer is asserted: the tier
//! and the fix it names. On the machine with cgroup v2 delegated as
//! systemd's `Delegate=yes` does, the black-box limit tests
//! (`tests/limits.rs`, the same binary as on this host) run there too, so
//! `--memory`, `--processes`, `--cpu-seconds` and `--timeout` are enforced
//! by a real cgroup v2 kernel.
//!
//! Each guest boots once and runs all its checks; the test prints one line
//! per machine (the configuration, the tier, the fix) and a table of the
//! node's lines, which must be the one in `docs/linux.md` under *The node
//! on machines unlike this one* (between `<!-- machines -->` markers;
//! `OZ0_MACHINES_WRITE=FILE` writes the table there for an update).
//! `OZ0_DOCS` names the folder holding a copy of `docs/` (`scripts/test`
//! stages one where the test's user can read it).
//!
//! Needs: `qemu-system-x86_64`, the machine guest (`OZ0_MACHINE_GUEST`, a
//! folder with the kernel and `initrd-machine.cpio`, from
//! `scripts/build-test-guest.sh` then `scripts/build-machine-guest.sh`),
//! the node built statically (`OZ0_NODE_BIN`, as `scripts/test` stages it),
//! and the limit tests' binary (`OZ0_TEST_BINS`, the folder where
//! `scripts/test` stages the test binaries). Missing any, it skips with the
//! reason, or fails under `OZ0_MUST_WORK=1`.

// The Linux node's black-box tests (the Windows node's are windows.rs).
#![cfg(target_os = "linux")]

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{node, skip, TempDir};

/// One machine: what is set up before the node runs, as root in the guest.
struct Machine {
    /// Its name in the table.
    name: &'static str,
    /// What it is, in words.
    config: &'static str,
    /// Kernel parameters beyond the console's.
    boot: &'static str,
    /// Shell run as root before the node (cgroups, sysctls).
    setup: String,
    /// The cgroup the node's processes start in (as systemd would put it).
    cgroup: &'static str,
    /// How the node is started: "" plainly, or a wrapper.
    wrap: &'static str,
    /// Also run the limit tests there.
    limits: bool,
    /// The tier `sandbox check --self-test` must report.
    tier: u8,
    /// Words its `Fix:` line (or its last `Sandbox:` line) must hold.
    says: &'static [&'static str],
}

/// cgroup v2 alone at /sys/fs/cgroup with memory, pids and cpu for the
/// service's slice, and, when `delegated`, the files systemd's
/// `Delegate=yes` hands the service's user.
fn v2(delegated: bool) -> String {
    let mut s = String::from(
        "mount -t cgroup2 none /sys/fs/cgroup\n\
         echo '+memory +pids +cpu' > /sys/fs/cgroup/cgroup.subtree_control\n\
         mkdir -p /sys/fs/cgroup/system.slice/oz0-node.service\n\
         echo '+memory +pids +cpu' > /sys/fs/cgroup/system.slice/cgroup.subtree_control\n",
    );
    if delegated {
        // One service for the check, one for the limit tests (a started
        // service gets a cgroup with no controllers enabled yet).
        s.push_str(&format!(
            "mkdir -p {TESTS}\n\
             for s in {SERVICE} {TESTS}; do\n\
             chown node:node $s $s/cgroup.procs $s/cgroup.subtree_control $s/cgroup.threads\n\
             done\n"
        ));
    }
    s
}

const SERVICE: &str = "/sys/fs/cgroup/system.slice/oz0-node.service";
/// Where the limit tests run, delegated the same way.
const TESTS: &str = "/sys/fs/cgroup/system.slice/oz0-tests.service";

fn machines() -> Vec<Machine> {
    vec![
        Machine {
            name: "cgroup-v2-delegated",
            config: "cgroup v2 only (memory, pids, cpu); the node in a service cgroup delegated to its user as systemd's Delegate=yes does",
            boot: "",
            setup: v2(true),
            cgroup: SERVICE,
            wrap: "",
            limits: true,
            tier: 1,
            says: &["passed the node's self-test (8 checks)", "cgroup-v2"],
        },
        Machine {
            name: "cgroup-v2-not-delegated",
            config: "cgroup v2 only; the node in a service cgroup that stays root's (no Delegate=yes, no setup)",
            boot: "",
            setup: v2(false),
            cgroup: SERVICE,
            wrap: "",
            limits: false,
            tier: 0,
            says: &["Delegate=yes", "setup cgroups --user node"],
        },
        Machine {
            name: "no-landlock",
            config: "Landlock not enabled (lsm= without landlock); cgroup v2 delegated",
            boot: "lsm=lockdown,yama,integrity,apparmor",
            setup: v2(true),
            cgroup: SERVICE,
            wrap: "",
            limits: false,
            // Landlock is a second layer over the mounts, best effort: the
            // node says it is missing and proves the rest.
            tier: 1,
            says: &["no Landlock", "passed the node's self-test (8 checks)"],
        },
        Machine {
            name: "userns-off",
            config: "unprivileged user namespaces off (user.max_user_namespaces=0); cgroup v2 delegated",
            boot: "",
            setup: v2(true) + "echo 0 > /proc/sys/user/max_user_namespaces\n",
            cgroup: SERVICE,
            wrap: "",
            limits: false,
            tier: 0,
            says: &["user.max_user_namespaces=0"],
        },
        Machine {
            name: "seccomp-refused",
            config: "seccomp(2) refused to the node (ENOSYS, and EINVAL for prctl(PR_SET_SECCOMP), as a kernel without it answers): Debian's kernel builds seccomp in and no boot parameter turns it off, so the node starts under a filter that refuses it; cgroup v2 delegated",
            boot: "",
            setup: v2(true),
            cgroup: SERVICE,
            wrap: "/usr/bin/bwrap --dev-bind / / --seccomp 9 --",
            limits: false,
            tier: 0,
            says: &["refuses this process a seccomp filter", "CONFIG_SECCOMP_FILTER"],
        },
    ]
}

/// A seccomp filter (classic BPF, as bubblewrap's `--seccomp` takes it)
/// that makes seccomp(2) fail with ENOSYS and prctl(PR_SET_SECCOMP) with
/// EINVAL on x86_64, and allows everything else.
fn refuse_seccomp_filter() -> Vec<u8> {
    const LD_ABS: u16 = 0x20;
    const JEQ: u16 = 0x15;
    const RET: u16 = 0x06;
    const ALLOW: u32 = 0x7fff_0000;
    const ERRNO: u32 = 0x0005_0000;
    let prog: [(u16, u8, u8, u32); 11] = [
        (LD_ABS, 0, 0, 4),        // 0: arch
        (JEQ, 0, 7, 0xc000_003e), // 1: x86_64, else allow (9)
        (LD_ABS, 0, 0, 0),        // 2: nr
        (JEQ, 4, 0, 317),         // 3: seccomp -> ENOSYS (8)
        (JEQ, 0, 4, 157),         // 4: prctl, else allow (9)
        (LD_ABS, 0, 0, 16),       // 5: its first argument
        (JEQ, 3, 0, 22),          // 6: PR_SET_SECCOMP -> EINVAL (10)
        (RET, 0, 0, ALLOW),       // 7
        (RET, 0, 0, ERRNO | 38),  // 8: ENOSYS
        (RET, 0, 0, ALLOW),       // 9
        (RET, 0, 0, ERRNO | 22),  // 10: EINVAL
    ];
    let mut out = Vec::new();
    for (code, jt, jf, k) in prog {
        out.extend_from_slice(&code.to_le_bytes());
        out.push(jt);
        out.push(jf);
        out.extend_from_slice(&k.to_le_bytes());
    }
    out
}

struct Guest {
    qemu: PathBuf,
    kernel: PathBuf,
    initrd: PathBuf,
    limits: PathBuf,
}

fn ready() -> Option<Guest> {
    let qemu = [
        "/usr/bin/qemu-system-x86_64",
        "/usr/local/bin/qemu-system-x86_64",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists());
    let Some(qemu) = qemu else {
        skip("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)");
        return None;
    };
    let Some(dir) = std::env::var_os("OZ0_MACHINE_GUEST").map(PathBuf::from) else {
        skip("OZ0_MACHINE_GUEST names no machine guest (scripts/build-test-guest.sh DIR, then scripts/build-machine-guest.sh DIR)");
        return None;
    };
    let kernel = ["vmlinux", "vmlinuz"]
        .iter()
        .map(|k| dir.join(k))
        .find(|p| p.exists());
    let initrd = dir.join("initrd-machine.cpio");
    let (Some(kernel), true) = (kernel, initrd.exists()) else {
        skip(&format!(
            "{} has no kernel or no initrd-machine.cpio",
            dir.display()
        ));
        return None;
    };
    let Some(bins) = std::env::var_os("OZ0_TEST_BINS").map(PathBuf::from) else {
        skip("OZ0_TEST_BINS names no folder with the limit tests' binary (scripts/test stages it)");
        return None;
    };
    let limits = std::fs::read_dir(&bins)
        .ok()
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("limits-"))
        });
    let Some(limits) = limits else {
        skip(&format!("no limits-* test binary in {}", bins.display()));
        return None;
    };
    Some(Guest {
        qemu,
        kernel,
        initrd,
        limits,
    })
}

/// The root script of a machine: set up, then run the node as `node`.
fn script(m: &Machine) -> String {
    let as_node = |user_script: &str, cg: &str| {
        format!("sh -c 'echo $$ > {cg}/cgroup.procs; exec su node -s /bin/sh /m/{user_script}'")
    };
    let mut s = String::from(
        "set -u\n\
         echo 'node:x:1000:1000::/home/node:/bin/sh' >> /etc/passwd\n\
         echo 'node:x:1000:' >> /etc/group\n\
         mkdir -p /home/node && chown node:node /home/node\n",
    );
    s.push_str(&m.setup);
    s.push_str("cd /home/node\necho 'oz0-machine: check-begin'\n");
    s.push_str(&as_node("check.sh", m.cgroup));
    s.push_str(" 2>&1\necho \"oz0-machine: check-end $?\"\n");
    if m.limits {
        s.push_str("echo 'oz0-machine: limits-begin'\n");
        s.push_str(&as_node("limits.sh", TESTS));
        s.push_str(" 2>&1\necho \"oz0-machine: limits-end $?\"\n");
    }
    s
}

const ENV: &str = "env -i PATH=/usr/bin:/bin HOME=/home/node LANG=C.UTF-8";

/// Boots `m`; its console output.
fn boot(g: &Guest, m: &Machine, dir: &Path, timeout: Duration) -> String {
    std::fs::write(dir.join("machine.sh"), script(m)).unwrap();
    let fd = if m.wrap.contains("--seccomp 9") {
        " 9< /m/filter.bpf"
    } else {
        ""
    };
    std::fs::write(
        dir.join("check.sh"),
        format!(
            "exec {} {ENV} /m/oz0-node sandbox check --self-test{fd}\n",
            m.wrap
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("limits.sh"),
        format!(
            "mkdir -p /tmp/t && exec {ENV} OZ0_NODE_BIN=/m/oz0-node OZ0_TEST_TMP=/tmp/t OZ0_TEST_TIME_SCALE=6 OZ0_MUST_WORK=1 /m/limits --test-threads=1\n"
        ),
    )
    .unwrap();
    let append = format!(
        "console=ttyS0 panic=-1 loglevel=3 rdinit=/init tsc=reliable no_timer_check {}",
        m.boot
    );
    let mut child = Command::new(&g.qemu)
        .args(["-nodefaults", "-no-user-config", "-no-reboot"])
        .args(["-machine", "pc,accel=tcg", "-cpu", "max"])
        .args(["-display", "none", "-vga", "none", "-monitor", "none"])
        .args(["-nic", "none", "-m", "1536", "-smp", "2"])
        .arg("-kernel")
        .arg(&g.kernel)
        .arg("-initrd")
        .arg(&g.initrd)
        .args(["-append", &append, "-serial", "stdio"])
        .arg("-fsdev")
        .arg(format!(
            "local,id=m,path={},security_model=none,readonly=on",
            dir.display()
        ))
        .args(["-device", "virtio-9p-pci,fsdev=m,mount_tag=m"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let until = Instant::now() + timeout;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let text = reader.join().unwrap();
    assert!(
        status.is_some(),
        "machine {} did not power off within {timeout:?}:\n{text}",
        m.name
    );
    assert!(
        text.contains("oz0-machine: done"),
        "machine {} did not finish its script:\n{text}",
        m.name
    );
    text
}

/// The lines between two markers.
fn between<'a>(text: &'a str, begin: &str, end: &str) -> Vec<&'a str> {
    text.lines()
        .skip_while(|l| !l.contains(begin))
        .skip(1)
        .take_while(|l| !l.contains(end))
        .map(|l| l.trim_end_matches('\r'))
        .collect()
}

/// A line without what changes from run to run: ", NNNms)" becomes ")".
fn steady(l: &str) -> String {
    let mut out = l.to_string();
    while let Some(at) = out.find("ms)") {
        let head = &out[..at];
        let digits = head.len() - head.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let start = at - digits;
        if digits > 0 && out[..start].ends_with(", ") {
            out.replace_range(start - 2..at + 2, "");
        } else {
            break;
        }
    }
    out
}

#[test]
fn the_node_reports_each_real_kernel_honestly() {
    if !common::sandbox_ready() {
        return;
    }
    let Some(g) = ready() else { return };
    let dir = TempDir::new("machines");
    std::fs::copy(node(), dir.join("oz0-node")).unwrap();
    std::fs::copy(&g.limits, dir.join("limits")).unwrap();
    std::fs::write(dir.join("filter.bpf"), refuse_seccomp_filter()).unwrap();
    let mut table = String::from(
        "| machine | configuration | `oz0-node sandbox check --self-test` there |\n|---|---|---|\n",
    );
    let mut failures = Vec::new();
    for m in machines() {
        let t0 = Instant::now();
        let secs = if m.limits { 900 } else { 240 };
        let text = boot(&g, &m, &dir.0, Duration::from_secs(secs));
        let lines = between(&text, "oz0-machine: check-begin", "oz0-machine: check-end");
        let sandbox: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|l| l.starts_with("Sandbox: ") || l.starts_with("Fix: "))
            .collect();
        let last = sandbox
            .iter()
            .rev()
            .find(|l| l.starts_with("Sandbox: "))
            .copied()
            .unwrap_or("(no Sandbox: line)");
        let fix = sandbox
            .iter()
            .find(|l| l.starts_with("Fix: "))
            .copied()
            .unwrap_or("");
        let tier = last
            .strip_prefix("Sandbox: tier ")
            .and_then(|r| r.chars().next())
            .and_then(|c| c.to_digit(10));
        println!(
            "machine {}: tier {} — {} ({:.0?})",
            m.name,
            tier.map_or("?".into(), |t| t.to_string()),
            if fix.is_empty() { last } else { fix },
            t0.elapsed()
        );
        let said: String = sandbox.iter().map(|l| steady(l) + "\n").collect();
        if tier != Some(u32::from(m.tier)) || !m.says.iter().all(|w| said.contains(w)) {
            failures.push(format!(
                "{}: expected tier {} saying {:?}; the node said:\n{}",
                m.name,
                m.tier,
                m.says,
                lines.join("\n")
            ));
        }
        if m.limits {
            let out = between(
                &text,
                "oz0-machine: limits-begin",
                "oz0-machine: limits-end",
            );
            let summary = out
                .iter()
                .find(|l| l.starts_with("test result:"))
                .copied()
                .unwrap_or("(no test result)");
            println!(
                "machine {}: the limit tests on this kernel: {summary}",
                m.name
            );
            let ended = text
                .lines()
                .find_map(|l| l.trim_end().strip_prefix("oz0-machine: limits-end "))
                .unwrap_or("?");
            if ended != "0" || !summary.contains(" 0 failed") || summary.contains(" 0 passed") {
                failures.push(format!(
                    "{}: the limit tests failed on the real kernel:\n{}",
                    m.name,
                    out.join("\n")
                ));
            }
        }
        let cell: Vec<String> = sandbox.iter().map(|l| steady(l)).collect();
        table.push_str(&format!(
            "| {} | {} | {} |\n",
            m.name,
            m.config,
            cell.iter()
                .map(|l| format!("`{}`", l.replace('|', "\\|").replace('`', "'")))
                .collect::<Vec<_>>()
                .join("<br>")
        ));
    }
    println!("\n{table}");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    if let Some(f) = std::env::var_os("OZ0_MACHINES_WRITE").filter(|f| !f.is_empty()) {
        std::fs::write(f, &table).unwrap();
    }
    // docs/linux.md's table is this one.
    match std::env::var_os("OZ0_DOCS")
        .filter(|r| !r.is_empty())
        .map(PathBuf::from)
    {
        Some(docs) => {
            let page = docs.join("linux.md");
            let text = std::fs::read_to_string(&page)
                .unwrap_or_else(|e| panic!("{}: {e}", page.display()));
            let inside: String = text
                .split("<!-- machines -->")
                .nth(1)
                .unwrap_or_default()
                .trim()
                .to_string();
            assert_eq!(
                inside,
                table.trim(),
                "docs/linux.md's table of machines is not what the node says on them: update it (OZ0_MACHINES_WRITE=FILE writes this run's)"
            );
        }
        None => {
            skip("OZ0_DOCS names no copy of docs/ to compare the table with (scripts/test stages it)");
        }
    }
}

#[test]
fn durations_leave_the_table_steady() {
    assert_eq!(
        steady("Sandbox: tier 1: bubblewrap 0.8.0 passed the node's self-test (8 checks, 9792ms)"),
        "Sandbox: tier 1: bubblewrap 0.8.0 passed the node's self-test (8 checks)"
    );
    assert_eq!(steady("a, b (c)"), "a, b (c)");
}
