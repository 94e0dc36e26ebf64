//! Assembling what a Linux node reports.

use std::collections::BTreeMap;

use oz0_policy::facts::{
    FixKind, Mechanism, Microvm, MicrovmReason, NodeFacts, Os, Platform, SelfTest, FACTS_SCHEMA,
};

use crate::check::{Probe, Report};
use crate::selftest::Outcome;

/// How the node was told to sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxMode {
    /// The strongest the machine proves.
    Auto,
    /// None: tier 0, no self-test.
    None,
}

/// The facts, from the probe, its report and the self-test (if run).
pub fn assemble(
    probe: &Probe,
    report: &Report,
    selftest: Option<&Outcome>,
    mode: SandboxMode,
    microvm: Microvm,
) -> NodeFacts {
    let (tier, self_test, fix) = match (mode, selftest) {
        (SandboxMode::None, _) => (0, SelfTest::NotRun, Some(FixKind::SandboxDisabled)),
        (SandboxMode::Auto, _) if report.tier == 0 => (0, SelfTest::NotRun, report.fix_kind),
        (SandboxMode::Auto, None) => (0, SelfTest::NotRun, None),
        (SandboxMode::Auto, Some(o)) => match o.failed {
            None if o.tier() == 1 => (1, SelfTest::Passed, None),
            Some(p) => (0, SelfTest::Failed(p), Some(FixKind::SelfTestFailed)),
            None => (0, SelfTest::NotRun, Some(FixKind::SelfTestFailed)),
        },
    };
    let mechanism = match &probe.bwrap {
        Ok(b) => Mechanism {
            kind: if tier == 1 { "bubblewrap" } else { "none" }.into(),
            bwrap_version: b.version.strip_prefix("bubblewrap ").map(str::to_string),
            landlock_abi: Some(probe.landlock_abi),
            seccomp: probe.seccomp,
            cgroup_mode: Some(cgroup_mode(probe)),
            ..Default::default()
        },
        Err(_) => Mechanism {
            kind: "none".into(),
            landlock_abi: Some(probe.landlock_abi),
            seccomp: probe.seccomp,
            cgroup_mode: Some(cgroup_mode(probe)),
            ..Default::default()
        },
    };
    // No microVM runs outside tier 1.
    let microvm = if tier < 1 && microvm.ready {
        Microvm {
            ready: false,
            reason: Some(MicrovmReason::NoTier1),
            pinned: microvm.pinned,
        }
    } else {
        microvm
    };
    let mut f = NodeFacts {
        schema: FACTS_SCHEMA,
        node_version: env!("CARGO_PKG_VERSION").to_string(),
        platform: Platform {
            os: Os::Linux,
            arch: probe.arch.clone(),
            build_raw: probe.kernel.clone(),
        },
        tier_proven: tier,
        tier_routed: tier,
        mechanism,
        self_test,
        fix,
        microvm,
        labels: BTreeMap::new(),
    };
    f.derive_labels(false);
    f
}

/// The facts' spelling of the job mode: `cgroup_v2`, `cgroup_v1` or `none`.
fn cgroup_mode(probe: &Probe) -> String {
    match probe.jobs.mode {
        "cgroup-v2" => "cgroup_v2",
        "cgroup-v1" => "cgroup_v1",
        _ => "none",
    }
    .to_string()
}

/// Labels as `key=value` lines (`prefix` before each key, e.g. for Kubernetes
/// Node Feature Discovery's local feature files).
pub fn label_lines(f: &NodeFacts, prefix: &str) -> String {
    f.labels
        .iter()
        .map(|(k, v)| format!("{prefix}{k}={v}\n"))
        .collect()
}
