//! The pin check against the real smolvm 1.24.0 files (from the PyPI wheel
//! `smolmachines==1.24.0`, unpacked; folder in `OZ0_SMOLVM_DIR`, default
//! `/tmp/smolwheel/x/smol`; the aarch64 wheel's in `OZ0_SMOLVM_ARM64_DIR`),
//! and each probe reason.
//!
//! Get the files: `pip download --no-deps smolmachines==1.24.0 -d D && unzip -q D/*.whl -d D/x`
//! (for aarch64 add `--only-binary=:all: --platform manylinux_2_34_aarch64`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use oz0_microvm::bootcheck::{probe, ProbeOptions};
use oz0_microvm::pin::{self, PinError, Selection};
use oz0_policy::facts::MicrovmReason;

fn smolvm_dir() -> Option<PathBuf> {
    wheel_dir("OZ0_SMOLVM_DIR", "/tmp/smolwheel/x/smol")
}

fn wheel_dir(var: &str, default: &str) -> Option<PathBuf> {
    let d = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default));
    if d.join("smol-vmm").is_file() {
        return Some(d);
    }
    if std::env::var("OZ0_MUST_WORK").as_deref() == Ok("1") {
        panic!(
            "OZ0_MUST_WORK=1 and no smolvm 1.24.0 files in {}",
            d.display()
        );
    }
    eprintln!(
        "SKIP: no smolvm 1.24.0 files in {} (see this file's header)",
        d.display()
    );
    None
}

/// Says why a part of a test cannot run here; under `OZ0_MUST_WORK=1` that
/// is a failure, never a silent pass.
fn skip(why: &str) {
    if std::env::var("OZ0_MUST_WORK").as_deref() == Ok("1") {
        panic!("OZ0_MUST_WORK=1 and {why}");
    }
    eprintln!("SKIP: {why}");
}

/// Where [`temp`] makes the folder `name`.
fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("oz0-pintest-{name}-{}", std::process::id()))
}

fn temp(name: &str) -> PathBuf {
    let d = temp_path(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn copy_vmm(from: &Path, to: &Path) {
    for n in [
        "smol-vmm",
        "libkrun.so.2",
        "libkrunfw.so.5",
        "agent-rootfs.tar",
    ] {
        std::fs::copy(from.join(n), to.join(n)).unwrap();
    }
}

/// A probe's options, its data directory under `temp(tag)` (emptied: each
/// test names its own, as tests run in parallel).
fn opts(tag: &str, selection: Selection, path: Option<&Path>) -> ProbeOptions {
    let base = temp(tag);
    ProbeOptions {
        test_backend: false,
        selection,
        path_var: path.map(|p| p.display().to_string()),
        tier1: true,
        host: oz0_linux::HostConfig {
            data_dir: Some(base.join("data")),
            bwrap: Some(PathBuf::from("/usr/bin/bwrap")),
            node_exe: Some(PathBuf::from(env!("CARGO_BIN_EXE_oz0-vm-testnode"))),
            ..Default::default()
        },
        data_dir: base.join("data"),
        tmp: std::env::temp_dir(),
        kvm: PathBuf::from("/dev/kvm"),
        timeout: Duration::from_secs(20),
        platform: ("linux", "x86_64"),
    }
}

#[test]
fn real_release_is_pinned_and_a_modified_byte_is_refused() {
    let Some(dir) = smolvm_dir() else { return };
    let v = pin::select(&Selection::Named(dir.clone()), None).unwrap();
    assert!(v.pinned && v.warning.is_none());
    assert_eq!(v.files.len(), 4);
    let v = pin::select(&Selection::Search, dir.to_str()).unwrap();
    assert!(v.pinned);
    assert!(pin::recheck(&v).is_ok());

    let m = temp("modified");
    copy_vmm(&dir, &m);
    let lib = m.join("libkrun.so.2");
    let mut bytes = std::fs::read(&lib).unwrap();
    bytes[4096] ^= 1;
    std::fs::write(&lib, bytes).unwrap();
    let e = pin::select(&Selection::Search, m.to_str()).unwrap_err();
    assert!(matches!(e, PinError::Unpinned { .. }), "{e:?}");
    assert!(
        e.to_string()
            .contains("smolvm is not a release this node pins"),
        "{e}"
    );
    assert!(e.to_string().contains("libkrun.so.2"), "{e}");
    // Named explicitly: runs, pinned false, with a warning.
    let v = pin::select(&Selection::Named(m.clone()), None).unwrap();
    assert!(!v.pinned);
    assert!(v.warning.as_deref().unwrap().contains("OZ0_MICROVM"));
    // A pinned VMM modified after selection is refused at its next use.
    let g = temp("late");
    copy_vmm(&dir, &g);
    let v = pin::select(&Selection::Search, g.to_str()).unwrap();
    std::fs::write(g.join("agent-rootfs.tar"), b"changed").unwrap();
    assert!(matches!(pin::recheck(&v), Err(PinError::Unpinned { .. })));
    for d in [m, g] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

/// The seed's install path, the release tarball unpacked with its `smolvm`
/// linked onto PATH. Its files are not pinned by this build (only the
/// tarball's own SHA-256 is published, and the tarball cannot be fetched
/// here): the stand-in is laid out as the tarball unpacks (smolvm's
/// `build-dist.sh`: the `smolvm` script, `smolvm-bin`, `lib/`) from the
/// wheel's files. Found on PATH it is refused, naming the layout and the
/// fix; named by `OZ0_MICROVM` it runs unpinned, its program `smolvm-bin`
/// (not the script) with its libraries from `lib/`.
#[test]
fn the_release_tarballs_layout_is_named_and_runs_only_unpinned() {
    let Some(wheel) = smolvm_dir() else { return };
    let base = temp("tarball");
    let dir = base.join("smolvm-1.24.0-linux-x86_64");
    std::fs::create_dir_all(dir.join("lib")).unwrap();
    std::fs::write(
        dir.join("smolvm"),
        "#!/bin/sh\nd=$(dirname \"$(readlink -f \"$0\")\")\nLD_LIBRARY_PATH=\"$d/lib\" exec \"$d/smolvm-bin\" \"$@\"\n",
    )
    .unwrap();
    std::fs::copy(wheel.join("smol-vmm"), dir.join("smolvm-bin")).unwrap();
    for n in ["libkrun.so.2", "libkrunfw.so.5"] {
        std::fs::copy(wheel.join(n), dir.join("lib").join(n)).unwrap();
    }
    std::fs::copy(wheel.join("agent-rootfs.tar"), dir.join("agent-rootfs.tar")).unwrap();
    let bin = base.join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(dir.join("smolvm"), bin.join("smolvm")).unwrap();

    let e = pin::select(&Selection::Search, bin.to_str()).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, PinError::Unpinned { .. }), "{e:?}");
    assert!(
        text.contains("laid out as smolvm's release tarball")
            && text.contains(&dir.display().to_string())
            && text.contains("pip install --require-hashes smolmachines==1.24.0"),
        "{text}"
    );

    let v = pin::select(&Selection::Named(dir.clone()), None).unwrap();
    assert!(!v.pinned, "{v:?}");
    assert!(
        v.warning.as_deref().unwrap().contains("release tarball"),
        "{v:?}"
    );
    assert_eq!(v.cli, dir.join("smolvm-bin"));
    assert_eq!(v.lib_dir, dir.join("lib"));
    let names: Vec<_> = v.files.iter().map(|(r, p)| (*r, p.clone())).collect();
    assert_eq!(
        names,
        [
            (pin::Role::Cli, dir.join("smolvm-bin")),
            (pin::Role::Libkrun, dir.join("lib/libkrun.so.2")),
            (pin::Role::Libkrunfw, dir.join("lib/libkrunfw.so.5")),
            (pin::Role::AgentRootfs, dir.join("agent-rootfs.tar")),
        ]
    );
    let env = oz0_microvm::backend::smolvm_env(&v, &base.join("vmm"));
    let lib = dir.join("lib").display().to_string();
    assert!(
        env.contains(&("SMOLVM_LIB_DIR".into(), lib.clone())),
        "{env:?}"
    );
    assert!(env.contains(&("LD_LIBRARY_PATH".into(), lib)), "{env:?}");
    // The program the node would run answers as smolvm 1.24.0.
    let out = std::process::Command::new(&v.cli)
        .arg("--version")
        .env_clear()
        .envs(env)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("smolvm 1.24.0"),
        "{out:?}"
    );
    std::fs::remove_dir_all(base).unwrap();
}

/// The arm64 pins are the aarch64 wheel's files, byte for byte; on a node
/// of another architecture that release is refused, and says why.
#[test]
fn the_arm64_release_is_pinned_for_aarch64_only() {
    let Some(dir) = wheel_dir("OZ0_SMOLVM_ARM64_DIR", "/tmp/smolwheel-arm64/x/smol") else {
        return;
    };
    let v = pin::check_layouts_for(&dir, "aarch64").unwrap().unwrap();
    assert!(v.pinned && v.files.len() == 4, "{v:?}");
    let e = pin::check_layouts_for(&dir, "x86_64").unwrap().unwrap_err();
    assert!(
        e.to_string()
            .contains("it is smolvm 1.24.0 for aarch64, and this node runs on x86_64"),
        "{e}"
    );
    if std::env::consts::ARCH == "x86_64" {
        let e = pin::select(&Selection::Search, dir.to_str()).unwrap_err();
        assert!(e.to_string().contains("for aarch64"), "{e}");
    }
    // And the other way round.
    if let Some(x86) = smolvm_dir() {
        let e = pin::check_layouts_for(&x86, "aarch64")
            .unwrap()
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("for x86_64, and this node runs on aarch64"),
            "{e}"
        );
    }
}

#[test]
fn probe_reasons_without_a_boot() {
    let r = probe(&opts("reasons", Selection::Off, None));
    assert_eq!(r.microvm.reason, Some(MicrovmReason::Off));
    let mut o = opts(
        "reasons",
        Selection::Search,
        Some(Path::new("/nonexistent")),
    );
    o.platform = ("macos", "aarch64");
    assert_eq!(probe(&o).microvm.reason, Some(MicrovmReason::Unsupported));
    let mut o = opts(
        "reasons",
        Selection::Search,
        Some(Path::new("/nonexistent")),
    );
    o.tier1 = false;
    assert_eq!(probe(&o).microvm.reason, Some(MicrovmReason::NoTier1));
    let r = probe(&opts(
        "reasons",
        Selection::Search,
        Some(Path::new("/nonexistent")),
    ));
    assert_eq!(r.microvm.reason, Some(MicrovmReason::NoVmm));
    assert!(!r.microvm.ready);

    let fake = temp("fake");
    std::fs::write(
        fake.join("smolvm"),
        "#!/bin/sh\necho 'Error: KVM_CREATE_VM failed: Operation not permitted' >&2\nexit 1\n",
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(fake.join("smolvm"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
    let r = probe(&opts("reasons", Selection::Search, Some(&fake)));
    assert_eq!(r.microvm.reason, Some(MicrovmReason::Unpinned));
    assert_eq!(r.microvm.pinned, Some(false));

    let mut o = opts("reasons", Selection::Named(fake.clone()), None);
    o.kvm = PathBuf::from("/nonexistent/kvm");
    let r = probe(&o);
    assert_eq!(
        r.microvm.reason,
        Some(MicrovmReason::NoHardwareVirtualisation)
    );
    assert!(r.detail.contains("VT-x/AMD-V"), "{}", r.detail);
    // A /dev/kvm that exists and cannot be opened for reading and writing
    // (a folder stands in: not even root opens one so).
    let denied = fake.join("kvm");
    std::fs::create_dir(&denied).unwrap();
    let mut o = opts("reasons", Selection::Named(fake.clone()), None);
    o.kvm = denied.clone();
    let r = probe(&o);
    assert_eq!(r.microvm.reason, Some(MicrovmReason::NoKvmAccess));
    assert!(r.detail.contains("usermod -aG kvm"), "{}", r.detail);
    let mut o = opts("reasons", Selection::Named(fake.clone()), None);
    o.kvm = PathBuf::from("/nonexistent/kvm");
    let r = probe(&o);
    assert!(
        r.warning.is_some(),
        "an unpinned VMM named explicitly warns"
    );

    // A kernel that refuses to make a VM (as the fake smolvm reports it).
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok()
    {
        let r = probe(&opts("reasons", Selection::Named(fake.clone()), None));
        assert_eq!(
            r.microvm.reason,
            Some(MicrovmReason::KvmRefused),
            "{}",
            r.detail
        );
    } else {
        skip("/dev/kvm is not usable by this user, so a kernel that refuses VMs cannot be shown");
    }
    std::fs::remove_dir_all(fake).unwrap();
    std::fs::remove_dir_all(temp_path("reasons")).unwrap();
}

/// The honest answer on a machine whose /dev/kvm accepts VMs but fails
/// every guest: not ready, the test VM did not boot.
#[test]
fn probe_real_smolvm_inside_tier1() {
    let Some(dir) = smolvm_dir() else { return };
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_err()
    {
        skip("/dev/kvm is not usable by this user, so the real smolvm cannot be probed");
        return;
    }
    let r = probe(&opts("real", Selection::Search, Some(&dir)));
    eprintln!("probe: {}", serde_json::to_string(&r).unwrap());
    assert_eq!(r.microvm.pinned, Some(true));
    if r.microvm.ready {
        eprintln!("this machine boots smolvm inside tier 1");
    } else {
        assert!(
            matches!(
                r.microvm.reason,
                Some(MicrovmReason::TestVmDidNotBoot | MicrovmReason::KvmRefused)
            ),
            "{r:?}"
        );
    }
    std::fs::remove_dir_all(temp_path("real")).unwrap();
}
