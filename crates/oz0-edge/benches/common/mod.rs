//! What the edge's benchmarks share: sizes from the environment, a node's
//! facts, percentiles.

use std::collections::BTreeMap;
use std::time::Duration;

use oz0_policy::facts::{Mechanism, Microvm, NodeFacts, Os, Platform, SelfTest, FACTS_SCHEMA};

pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The facts of a Linux node that proved tier 1.
pub fn facts() -> NodeFacts {
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
            reason: None,
            pinned: None,
            backend: None,
        },
        oci: Default::default(),
        labels: BTreeMap::new(),
    };
    f.derive_labels();
    f
}

/// The `per_mille` percentile of `v`, in milliseconds.
pub fn pct(v: &mut [Duration], per_mille: usize) -> f64 {
    v.sort();
    let i = (v.len().saturating_sub(1) * per_mille + 500) / 1000;
    v[i].as_secs_f64() * 1000.0
}
