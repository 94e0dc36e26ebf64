//! Unit tests of the sanitizer: the patterns, the routed tier, hostile
//! strings, and the wording of every fix kind.

use super::*;
use oz0_policy::facts::{Mechanism, Microvm, MicrovmBackend, MicrovmReason, Platform};

fn linux() -> NodeFacts {
    let mut f = NodeFacts {
        schema: FACTS_SCHEMA,
        node_version: "0.1.0".into(),
        platform: Platform {
            os: Os::Linux,
            arch: "x86_64".into(),
            build_raw: "6.1.0-28-amd64".into(),
        },
        tier_proven: 1,
        tier_routed: 1,
        mechanism: Mechanism {
            kind: "bubblewrap".into(),
            bwrap_version: Some("0.8.0".into()),
            landlock_abi: Some(7),
            seccomp: true,
            cgroup_mode: Some("cgroup_v2".into()),
            ..Default::default()
        },
        self_test: SelfTest::Passed,
        fix: None,
        microvm: Microvm {
            ready: false,
            reason: Some(MicrovmReason::NoKvmAccess),
            pinned: None,
            backend: None,
        },
        oci: Default::default(),
        labels: BTreeMap::new(),
    };
    f.oci = oz0_policy::facts::Oci {
        ready: true,
        runtimes: vec![oz0_policy::facts::OciRuntime::Tier1],
        reason: None,
    };
    f.derive_labels();
    f
}

#[test]
fn patterns() {
    assert!(is_windows_build("26200.9457"));
    assert!(is_windows_build("18362") && is_windows_build("7601"));
    for bad in [
        "26200.9457; rm -rf",
        "262.9457",
        "262000.1",
        "762",
        "26200.",
        "26200.123456",
        "２6200.1",
        "",
    ] {
        assert!(!is_windows_build(bad), "{bad}");
    }
    for ok in [
        "6.1.0-28-amd64",
        "6.18",
        "5.15.167.4-microsoft-standard-WSL2",
        "6.8.0-45-generic",
        "6.12.10+rpt-rpi-v8",
    ] {
        assert!(is_kernel_release(ok), "{ok}");
    }
    for bad in [
        "6",
        "6.1.0-",
        "6.1.0--x",
        "6.1<script>",
        "6.1.0-a b",
        "6.1.0-$(id)",
        "123.1",
        "6.1.0.1.2",
    ] {
        assert!(!is_kernel_release(bad), "{bad}");
    }
    assert!(is_version("0.8.0") && is_version("1.0") && !is_version("1") && !is_version("1.0.0.0"));
    assert!(is_macos_build("24G84") && is_macos_build("25A5279m") && is_macos_build("15.6"));
    assert!(!is_macos_build("24g84") && !is_macos_build("24G") && !is_macos_build("24G84ab"));
    assert!(
        is_node_version("0.1.0") && is_node_version("1.2.3-rc.1") && !is_node_version("0.1.0 <b>")
    );
    assert!(
        is_node_name("build-01.example")
            && !is_node_name("-x")
            && !is_node_name("A")
            && !is_node_name("a b")
    );
    assert!(
        is_usable_node_name("build-01")
            && is_node_name("n0123456789abcdef01234567")
            && !is_usable_node_name("n0123456789abcdef01234567")
            && !is_usable_node_name("Build_01")
    );
}

#[test]
fn a_passing_linux_node_is_kept_whole() {
    let o = sanitize(&linux()).unwrap();
    assert!(o.dropped.is_empty(), "{:?}", o.dropped);
    assert_eq!(o.facts.tier_routed, 1);
    assert_eq!(o.facts.build.as_deref(), Some("6.1.0-28-amd64"));
    assert_eq!(o.facts.labels["runtime.oci"], "ready");
    assert_eq!(
        o.facts.mechanism_line(),
        "bubblewrap 0.8.0, Landlock ABI 7, seccomp, cgroup v2"
    );
    assert_eq!(o.facts.fix_text(), None);
}

#[test]
fn windows_is_routed_at_zero_whatever_it_claims() {
    let mut f = linux();
    f.platform = Platform {
        os: Os::Windows,
        arch: "x86_64".into(),
        build_raw: "26200.9457".into(),
    };
    f.mechanism = Mechanism {
        kind: "psec".into(),
        psec_contract: Some("1.0".into()),
        psec_features: vec!["deny_paths".into()],
        ..Default::default()
    };
    f.microvm.ready = true;
    f.tier_routed = 2;
    let o = sanitize(&f).unwrap();
    assert_eq!((o.facts.tier_proven, o.facts.tier_routed), (1, 0));
    assert!(!o.facts.microvm_ready);
    assert_eq!(o.facts.tier_line(), "tier 1 (psec 1.0, routed as tier 0)");
    assert!(o.facts.routed_note().is_some());
    // Why it has none says what smolvm would need there.
    for reason in [None, Some(MicrovmReason::Unsupported)] {
        f.microvm.ready = false;
        f.microvm.reason = reason;
        let o = sanitize(&f).unwrap();
        assert_eq!(
            o.facts.microvm_line(),
            "none: not yet on Windows: smolvm needs the Windows Hypervisor Platform, and Developer Mode or an administrator"
        );
    }
}

#[test]
fn a_mac_whose_self_test_fails_at_job_limits_is_routed_at_zero() {
    // What a Mac reports (oz0-node's src/mac, oz0_core::facts::assemble):
    // no mechanism named without a proven tier, microVMs off without tier 1.
    let mut f = linux();
    f.platform = Platform {
        os: Os::Macos,
        arch: "aarch64".into(),
        build_raw: "25B78".into(),
    };
    f.tier_proven = 0;
    f.tier_routed = 0;
    f.mechanism = Mechanism {
        kind: "none".into(),
        ..Default::default()
    };
    f.self_test = SelfTest::Failed(Property::JobLimits);
    f.fix = Some(FixKind::SelfTestFailed);
    f.microvm = Microvm {
        ready: false,
        reason: Some(MicrovmReason::NoTier1),
        pinned: None,
        backend: None,
    };
    f.oci = oz0_policy::facts::Oci::unavailable(oz0_policy::facts::OciReason::Unsupported);
    f.derive_labels();
    let o = sanitize(&f).unwrap();
    assert!(o.dropped.is_empty(), "{:?}", o.dropped);
    assert_eq!(o.facts.os, "macos");
    assert_eq!(o.facts.build.as_deref(), Some("25B78"));
    assert_eq!((o.facts.tier_proven, o.facts.tier_routed), (0, 0));
    assert_eq!(o.facts.tier_line(), "tier 0 proven, routed at 0");
    assert_eq!(
        o.facts.fix_text().unwrap(),
        "The self-test failed at job_limits: sandbox check --self-test on the node says which check and how."
    );
    // A Mac that claimed Seatbelt tier 1 and tier 2 without a passed
    // self-test keeps neither; its microVMs (Apple's container) are not
    // inside tier 1 on any Mac, so they are kept, at tier 0, and are not
    // tier 2 (level 1).
    f.tier_proven = 1;
    f.tier_routed = 2;
    f.mechanism.kind = "seatbelt".into();
    f.microvm = Microvm {
        ready: true,
        reason: None,
        pinned: None,
        backend: Some(MicrovmBackend::AppleContainer),
    };
    f.derive_labels();
    let o = sanitize(&f).unwrap();
    assert_eq!((o.facts.tier_proven, o.facts.tier_routed), (0, 0));
    assert!(o.facts.microvm_ready, "{:?}", o.dropped);
    assert_eq!(
        o.facts.microvm_backend,
        Some(MicrovmBackend::AppleContainer)
    );
    assert_eq!(o.facts.microvm_level(), 1);
    assert_eq!(o.facts.labels["isolation.microvm"], "ready");
    assert_eq!(o.facts.labels["sandbox.tier"], "0");
    assert!(
        o.facts.microvm_line().contains("Apple's container"),
        "{}",
        o.facts.microvm_line()
    );
    // Not on an Intel Mac, and not another backend named by a Mac.
    for (arch, backend) in [
        ("x86_64", MicrovmBackend::AppleContainer),
        ("aarch64", MicrovmBackend::Smolvm),
    ] {
        f.platform.arch = arch.into();
        f.microvm.backend = Some(backend);
        let o = sanitize(&f).unwrap();
        assert!(
            !o.facts.microvm_ready && o.facts.microvm_level() == 0,
            "{arch} {backend:?}"
        );
        assert!(o.dropped.contains(&"microvm.ready"), "{:?}", o.dropped);
    }
}

#[test]
fn apple_containers_are_no_linux_microvms_and_no_windows_ones() {
    // A Linux node naming Apple's container, or any without tier 1, keeps
    // no microVMs; Windows none at all.
    let mut f = linux();
    f.microvm = Microvm {
        ready: true,
        reason: None,
        pinned: None,
        backend: Some(MicrovmBackend::AppleContainer),
    };
    f.tier_routed = 2;
    let o = sanitize(&f).unwrap();
    assert!(!o.facts.microvm_ready);
    assert_eq!((o.facts.tier_proven, o.facts.tier_routed), (1, 1));
    f.microvm.backend = Some(MicrovmBackend::Smolvm);
    let o = sanitize(&f).unwrap();
    assert!(o.facts.microvm_ready);
    assert_eq!(o.facts.microvm_level(), 2);
    assert_eq!((o.facts.tier_proven, o.facts.tier_routed), (2, 2));
    f.platform.os = Os::Windows;
    f.platform.build_raw = "26200.9457".into();
    let o = sanitize(&f).unwrap();
    assert!(!o.facts.microvm_ready && o.facts.microvm_level() == 0);
}

#[test]
fn a_tier_without_a_passed_self_test_is_not_kept() {
    let mut f = linux();
    f.self_test = SelfTest::Failed(Property::Egress);
    f.fix = Some(FixKind::SelfTestFailed);
    let o = sanitize(&f).unwrap();
    assert_eq!((o.facts.tier_proven, o.facts.tier_routed), (0, 0));
    assert!(o.dropped.contains(&"tier_proven"));
    assert_eq!(
        o.facts.fix_text().unwrap(),
        "The self-test failed at egress: sandbox check --self-test on the node says which check and how."
    );
}

#[test]
fn hostile_strings_are_dropped_and_counted() {
    let mut f = linux();
    f.platform.os = Os::Windows;
    f.platform.build_raw = "26200.9457; rm -rf /".into();
    f.node_version = "<script>alert(1)</script>".into();
    f.mechanism.kind = "psec".into();
    f.mechanism.bwrap_version = Some("0.8.0<img src=x>".into());
    f.mechanism.psec_contract = Some("1.0\u{202e}".into());
    f.mechanism.psec_features = vec!["deny_paths".into(), "x".repeat(10_000)];
    f.labels.insert("evil".into(), "<b>".into());
    f.labels.insert("arch".into(), "aarch64".into());
    let o = sanitize(&f).unwrap();
    for field in [
        "platform.build_raw",
        "node_version",
        "mechanism.bwrap_version",
        "mechanism.psec_contract",
        "mechanism.psec_features",
        "labels",
    ] {
        assert!(o.dropped.contains(&field), "{field} in {:?}", o.dropped);
    }
    let json = serde_json::to_string(&o.facts).unwrap();
    assert!(
        !json.contains('<') && !json.contains("rm -rf") && !json.contains("xxxx"),
        "{json}"
    );
    assert_eq!(o.facts.mechanism.psec_features, vec!["deny_paths"]);
}

#[test]
fn microvm_needs_tier_one_and_makes_tier_two() {
    let mut f = linux();
    f.microvm = Microvm {
        ready: true,
        reason: None,
        pinned: Some(true),
        backend: None,
    };
    f.tier_routed = 1;
    let o = sanitize(&f).unwrap();
    assert!(o.facts.microvm_ready);
    assert_eq!((o.facts.tier_proven, o.facts.tier_routed), (2, 2));
    assert_eq!(o.facts.labels["isolation.microvm"], "ready");
    assert_eq!(o.facts.microvm_level(), 2);
    // Routed at 0 by its own word, it takes no microVM work.
    f.tier_routed = 0;
    let o = sanitize(&f).unwrap();
    assert_eq!((o.facts.tier_routed, o.facts.microvm_level()), (0, 0));
    f.tier_routed = 1;
    f.self_test = SelfTest::NotRun;
    f.tier_proven = 0;
    let o = sanitize(&f).unwrap();
    assert!(!o.facts.microvm_ready);
    assert_eq!(o.facts.tier_routed, 0);
}

#[test]
fn every_fix_kind_is_worded_without_node_text() {
    let mut s = sanitize(&linux()).unwrap().facts;
    for k in [
        FixKind::InstallBubblewrap,
        FixKind::UsernsAppArmor,
        FixKind::UsernsMaxZero,
        FixKind::UsernsDebianClone,
        FixKind::UsernsOther,
        FixKind::NoSeccomp,
        FixKind::DelegateCgroups,
        FixKind::SelfTestFailed,
        FixKind::SandboxDisabled,
        FixKind::PsecStartWithFlag,
        FixKind::PsecMissing,
        FixKind::WindowsServer,
        FixKind::SeatbeltMissing,
        FixKind::UnsupportedPlatform,
    ] {
        s.fix_kind = Some(k);
        assert!(s.fix_text().unwrap().len() > 20);
    }
    s.os = "windows".into();
    s.build = Some("26200.1234".into());
    s.fix_kind = Some(FixKind::PsecMissing);
    assert!(s.fix_text().unwrap().contains("26200.9457"));
}

/// Containers run in an image's root inside tier 1: the edge takes
/// `runtime.oci=ready` only from a Linux node with tier 1 proven and routed,
/// whose facts name the tier-1 runtime; any other claim is dropped, and
/// the node is said to offer none, with its reason.
#[test]
fn runtime_oci_is_taken_only_from_a_linux_node_with_tier_1() {
    let f = linux();
    let o = sanitize(&f).unwrap();
    assert!(o.facts.oci_ready, "{:?}", o.dropped);
    assert_eq!(o.facts.labels["runtime.oci"], "ready");
    assert_eq!(o.facts.containers_line(), "ready (runtime.oci), in tier1");

    // Tier 0 (no self-test passed) claiming containers.
    let mut f = linux();
    f.tier_proven = 0;
    f.tier_routed = 0;
    f.self_test = SelfTest::NotRun;
    let o = sanitize(&f).unwrap();
    assert!(!o.facts.oci_ready);
    assert_eq!(o.facts.labels["runtime.oci"], "unavailable");
    assert!(o.dropped.contains(&"oci.ready"), "{:?}", o.dropped);
    assert!(o.dropped.contains(&"labels.runtime.oci"), "{:?}", o.dropped);

    // Ready with no runtime named.
    let mut f = linux();
    f.oci.runtimes.clear();
    let o = sanitize(&f).unwrap();
    assert!(!o.facts.oci_ready && o.dropped.contains(&"oci.ready"));

    // Not offered, with the reason the node gave.
    let mut f = linux();
    f.oci = oz0_policy::facts::Oci::unavailable(oz0_policy::facts::OciReason::NoRegistry);
    f.derive_labels();
    let o = sanitize(&f).unwrap();
    assert!(
        !o.facts.oci_ready && o.dropped.is_empty(),
        "{:?}",
        o.dropped
    );
    assert!(
        o.facts.containers_line().contains("--oci-registry"),
        "{}",
        o.facts.containers_line()
    );
}
