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
    // No microVM runs outside tier 1.
    let microvm = if tier < 1 && microvm.ready {
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
