//! A real smolvm VM under KVM, its monitor read from `/proc` while it runs.
//!
//! Ignored in the suite: a machine whose KVM boots no guest (nested
//! virtualisation, no `/dev/kvm`) cannot show it, and a test that cannot
//! run must never pass. `scripts/e2e-oci-tools` runs it with `--ignored`
//! only after `sandbox vm --probe` saw a test VM boot inside tier 1, and
//! otherwise says loudly that it skipped (exit 77).
//!
//! The smolvm 1.24.0 files: `OZ0_SMOLVM_DIR` (the PyPI wheel's `smol/`
//! folder, as CI unpacks it) or `OZ0_MICROVM`. Run as root, the node runs
//! as `oz0test`, which must have `/dev/kvm`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

mod stage;
use stage::{start_node, vm_folders};

fn smolvm_dir() -> PathBuf {
    std::env::var_os("OZ0_MICROVM")
        .or_else(|| std::env::var_os("OZ0_SMOLVM_DIR"))
        .map(PathBuf::from)
        .expect("name smolvm's folder in OZ0_SMOLVM_DIR or OZ0_MICROVM")
}

/// The process of user `uid` (the node's) holding a KVM VM: the monitor.
fn monitor(uid: u32) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !e.metadata().is_ok_and(|m| m.uid() == uid) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(e.path().join("fd")) else {
            continue;
        };
        if fds.flatten().any(|f| {
            std::fs::read_link(f.path())
                .is_ok_and(|l| l.to_string_lossy().starts_with("anon_inode:kvm-vm"))
        }) {
            return Some(pid);
        }
    }
    None
}

#[test]
#[ignore = "needs a machine whose KVM boots guests: scripts/e2e-oci-tools runs it"]
fn a_smolvm_guest_runs_behind_both_walls() {
    let st = stage::stage("e2e-kvm", env!("CARGO_BIN_EXE_oz0-vm-testnode"));
    let mut args = st.vm_args();
    args.extend(
        ["--", "/bin/sh", "-c", "echo up > /work/up; sleep 60"]
            .iter()
            .map(|s| s.to_string()),
    );
    let mut child = start_node(
        &st,
        &args,
        &[("OZ0_MICROVM", smolvm_dir().display().to_string())],
    );
    let until = Instant::now() + Duration::from_secs(120);
    while !st.dir.join("work/up").exists() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "sandbox vm ended before its guest wrote /work/up"
        );
        assert!(Instant::now() < until, "the guest never wrote /work/up");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The guest wrote it as the node's user.
    let uid = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(st.dir.join("work/up")).unwrap().uid()
    };
    let pid = monitor(uid).expect("no process holds a KVM VM while the guest runs");
    let o = oz0_microvm::monitor::observe(pid).unwrap();
    eprintln!("the VM's monitor (pid {pid}), from /proc: {o:?}");
    assert!(o.no_capabilities(), "{o:?}");
    assert!(o.no_new_privs, "{o:?}");
    // Tier 1's `vmm` filter and smolvm's own (SMOLVM_SECCOMP=enforce).
    assert_eq!((o.seccomp, o.seccomp_filters), (2, 2), "{o:?}");
    assert_eq!(
        o.devices,
        ["full", "kvm", "null", "random", "tty", "urandom", "zero"],
        "{o:?}"
    );
    let node = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    rustix::process::kill_process(node, rustix::process::Signal::TERM).unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < until, "the VM outlived SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(monitor(uid).is_none(), "a KVM VM outlived its node");
    assert!(vm_folders(&st).is_empty(), "{:?}", vm_folders(&st));
}
