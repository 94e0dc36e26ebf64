//! Assembling what a node reports, from its wall's check and self-test:
//! the same rule on every platform.

use std::collections::BTreeMap;

use oz0_policy::facts::{
    FixKind, Microvm, MicrovmReason, NodeFacts, Oci, OciReason, SelfTest as Proven, FACTS_SCHEMA,
};

use crate::{Check, SelfTest};

/// How the node was told to sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxMode {
    /// The strongest the machine proves.
    Auto,
    /// None: tier 0, no self-test.
    None,
}

/// The facts: the tier is what the self-test proved (never what the check
/// only found), the mechanism is named only when it is proven.
pub fn assemble(
    check: &Check,
    self_test: Option<&SelfTest>,
    mode: SandboxMode,
    microvm: Microvm,
    oci: Oci,
    node_version: &str,
) -> NodeFacts {
    let (tier, proven, fix) = match (mode, self_test) {
        (SandboxMode::None, _) => (0, Proven::NotRun, Some(FixKind::SandboxDisabled)),
        (SandboxMode::Auto, _) if check.tier == 0 => (0, Proven::NotRun, check.fix_kind),
        (SandboxMode::Auto, None) => (0, Proven::NotRun, None),
        (SandboxMode::Auto, Some(o)) => match o.failed {
            None if o.tier() == 1 => (1, Proven::Passed, None),
            Some(p) => (0, Proven::Failed(p), Some(FixKind::SelfTestFailed)),
            None => (0, Proven::NotRun, Some(FixKind::SelfTestFailed)),
        },
    };
    let mut mechanism = check.mechanism.clone();
    if tier < 1 {
        mechanism.kind = "none".into();
    }
    // No microVM whose monitor runs inside tier 1 runs without it; Apple's
    // container's VMs are not inside it (their kernel is the boundary).
    let monitor_in_tier1 = microvm.backend.is_none_or(|b| b.inside_tier1());
    let microvm = if tier < 1 && microvm.ready && monitor_in_tier1 {
        Microvm {
            ready: false,
            reason: Some(MicrovmReason::NoTier1),
            pinned: microvm.pinned,
            backend: None,
        }
    } else {
        microvm
    };
    // No container runs outside tier 1.
    let oci = if tier < 1 && oci.ready {
        Oci::unavailable(OciReason::NoTier1)
    } else {
        oci
    };
    let mut f = NodeFacts {
        schema: FACTS_SCHEMA,
        node_version: node_version.to_string(),
        platform: check.platform.clone(),
        tier_proven: tier,
        tier_routed: tier,
        mechanism,
        self_test: proven,
        fix,
        microvm,
        oci,
        labels: BTreeMap::new(),
    };
    f.derive_labels();
    f
}

/// Labels as `key=value` lines (`prefix` before each key, e.g. for Kubernetes
/// Node Feature Discovery's local feature files).
pub fn label_lines(f: &NodeFacts, prefix: &str) -> String {
    f.labels
        .iter()
        .map(|(k, v)| format!("{prefix}{k}={v}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use oz0_policy::facts::{MicrovmBackend, Os, Platform};

    fn check(os: Os, tier: u8) -> Check {
        Check {
            tier,
            headline: String::new(),
            facts_line: String::new(),
            fix_kind: None,
            fix: None,
            platform: Platform {
                os,
                arch: "aarch64".into(),
                build_raw: String::new(),
            },
            mechanism: Default::default(),
            wall_name: String::new(),
            probe: serde_json::Value::Null,
        }
    }

    fn ready(backend: MicrovmBackend) -> Microvm {
        Microvm {
            ready: true,
            reason: None,
            pinned: None,
            backend: Some(backend),
        }
    }

    fn none_oci() -> Oci {
        Oci::unavailable(OciReason::Unsupported)
    }

    #[test]
    fn only_a_monitor_inside_tier_1_needs_tier_1() {
        // A Mac whose self-test did not pass keeps Apple's container: its
        // VMs are not inside tier 1 on any Mac.
        let c = check(Os::Macos, 0);
        let f = assemble(
            &c,
            None,
            SandboxMode::Auto,
            ready(MicrovmBackend::AppleContainer),
            none_oci(),
            "1",
        );
        assert_eq!(f.tier_proven, 0);
        assert!(f.microvm.ready, "{:?}", f.microvm);
        assert_eq!(f.microvm.backend, Some(MicrovmBackend::AppleContainer));
        // smolvm's monitor runs inside tier 1: without it, no microVMs.
        let c = check(Os::Linux, 0);
        for b in [MicrovmBackend::Smolvm, MicrovmBackend::QemuTcgTest] {
            let f = assemble(&c, None, SandboxMode::Auto, ready(b), none_oci(), "1");
            assert!(!f.microvm.ready, "{b:?}");
            assert_eq!(f.microvm.reason, Some(MicrovmReason::NoTier1));
            assert_eq!(f.microvm.backend, None);
        }
        // A ready state with no backend named is taken as needing tier 1.
        let mut m = ready(MicrovmBackend::Smolvm);
        m.backend = None;
        let f = assemble(&c, None, SandboxMode::Auto, m, none_oci(), "1");
        assert!(!f.microvm.ready);
    }
}
