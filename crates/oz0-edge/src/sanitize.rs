//! The edge's view of a node's facts: strict patterns, closed sets, the
//! edge's own words.
//!
//! [`sanitize`] turns a parsed [`NodeFacts`] into [`Sanitized`]. Every string
//! the node sent is either matched against a strict pattern or a closed set
//! and kept, or dropped and *counted* (the count, and the names of the
//! fields, are what the edge logs and shows; never the dropped text). The
//! routed tier is recomputed here, so the routing rule does not depend on the
//! node telling the truth about it.

use oz0_policy::facts::{
    FixKind, Mechanism, MicrovmReason, NodeFacts, Os, Property, SelfTest, FACTS_SCHEMA,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod patterns;
mod words;

pub use patterns::{
    is_arch, is_feature, is_kernel_release, is_macos_build, is_node_name, is_node_version,
    is_usable_node_name, is_version, is_windows_build, NODE_NAME_FORM,
};

use patterns::short;

/// Longest string field the edge looks at; longer ones are dropped unread.
pub const MAX_FIELD_CHARS: usize = 64;
/// Most PSEC features kept.
pub const MAX_PSEC_FEATURES: usize = 16;
/// Most labels looked at.
pub const MAX_LABELS: usize = 16;
/// Highest tier there is.
pub const MAX_TIER: u8 = 2;

/// The sanitized facts of one node, as the edge stores and shows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sanitized {
    /// `linux`, `macos` or `windows`.
    pub os: String,
    /// CPU architecture, from a closed set; `None` when dropped.
    pub arch: Option<String>,
    /// Kernel release or OS build, when it matched its pattern.
    pub build: Option<String>,
    /// The node binary's version, when it matched.
    pub node_version: Option<String>,
    /// The tier the self-test proved, as the edge accepts it.
    pub tier_proven: u8,
    /// The tier the edge routes at (its own decision).
    pub tier_routed: u8,
    /// The tier the node said it is routed at.
    pub tier_claimed_routed: u8,
    /// Mechanism details that passed their patterns.
    pub mechanism: MechanismView,
    /// `passed`, `failed` or `not_run`.
    pub self_test: String,
    /// The property the self-test failed at (one of the eight).
    pub failed_property: Option<Property>,
    /// The kind of fix the node reported.
    pub fix_kind: Option<FixKind>,
    /// MicroVM state.
    pub microvm_ready: bool,
    /// Why no microVMs.
    pub microvm_reason: Option<MicrovmReason>,
    /// Whether the VMM is pinned.
    pub microvm_pinned: Option<bool>,
    /// What runs the node's microVMs (a closed set; `qemu-tcg (test)` is
    /// a test build's fixture).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub microvm_backend: Option<oz0_policy::facts::MicrovmBackend>,
    /// Whether the node can run OCI containers (`runtime.oci=ready`): only
    /// a Linux node with a proven tier 1, whose facts say so.
    pub oci_ready: bool,
    /// What runs its containers, when ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub oci_runtimes: Vec<oz0_policy::facts::OciRuntime>,
    /// Why no containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci_reason: Option<oz0_policy::facts::OciReason>,
    /// Scheduler labels, derived by the edge.
    pub labels: BTreeMap<String, String>,
}

/// The sandbox mechanism, sanitized.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MechanismView {
    /// `bubblewrap`, `seatbelt`, `psec` or `none`.
    pub kind: String,
    /// bubblewrap version.
    pub bwrap_version: Option<String>,
    /// Landlock ABI.
    pub landlock_abi: Option<u32>,
    /// seccomp present.
    pub seccomp: bool,
    /// `cgroup_v2`, `cgroup_v1` or `none`.
    pub cgroup_mode: Option<String>,
    /// PSEC contract version.
    pub psec_contract: Option<String>,
    /// PSEC features.
    pub psec_features: Vec<String>,
}

/// A report the edge refuses outright (as opposed to fields it drops).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum FactsError {
    /// Unknown schema version.
    #[error("facts schema {got} is not supported: this edge reads schema {FACTS_SCHEMA}; upgrade the edge or run a node of the same release")]
    Schema {
        /// The version sent.
        got: u32,
    },
}

/// The outcome of [`sanitize`]: the kept facts and the names of the fields
/// that were dropped (names are the edge's, never the node's).
#[derive(Debug, Clone)]
pub struct Outcome {
    /// What the edge keeps.
    pub facts: Sanitized,
    /// Dropped fields, by the edge's name for them.
    pub dropped: Vec<&'static str>,
}

fn keep(
    value: &str,
    ok: impl Fn(&str) -> bool,
    field: &'static str,
    dropped: &mut Vec<&'static str>,
) -> Option<String> {
    if short(value) && ok(value) {
        Some(value.to_string())
    } else {
        dropped.push(field);
        None
    }
}

/// Sanitizes one report. The only error is a schema the edge cannot read;
/// everything else that does not fit is dropped and listed in
/// [`Outcome::dropped`].
pub fn sanitize(f: &NodeFacts) -> Result<Outcome, FactsError> {
    if f.schema != FACTS_SCHEMA {
        return Err(FactsError::Schema { got: f.schema });
    }
    let mut dropped = Vec::new();
    let os = f.platform.os;
    let os_name = match os {
        Os::Linux => "linux",
        Os::Macos => "macos",
        Os::Windows => "windows",
    };
    let arch = keep(&f.platform.arch, is_arch, "platform.arch", &mut dropped);
    let build_ok: fn(&str) -> bool = match os {
        Os::Linux => is_kernel_release,
        Os::Macos => is_macos_build,
        Os::Windows => is_windows_build,
    };
    let build = keep(
        &f.platform.build_raw,
        build_ok,
        "platform.build_raw",
        &mut dropped,
    );
    let node_version = keep(
        &f.node_version,
        is_node_version,
        "node_version",
        &mut dropped,
    );
    let mechanism = mechanism(&f.mechanism, os, &mut dropped);
    let (self_test, failed_property) = match f.self_test {
        SelfTest::NotRun => ("not_run", None),
        SelfTest::Passed => ("passed", None),
        SelfTest::Failed(p) => ("failed", Some(p)),
    };
    let t = tiers(f, &mechanism.kind, &mut dropped);
    let (labels, oci_ready) = labels(f, arch.as_ref(), &t, &mut dropped);
    Ok(Outcome {
        facts: Sanitized {
            os: os_name.to_string(),
            arch,
            build,
            node_version,
            tier_proven: t.proven,
            tier_routed: t.routed,
            tier_claimed_routed: t.claimed_routed,
            mechanism,
            self_test: self_test.to_string(),
            failed_property,
            fix_kind: f.fix,
            microvm_ready: t.microvm_ready,
            microvm_reason: f.microvm.reason,
            microvm_pinned: f.microvm.pinned,
            microvm_backend: f.microvm.backend.filter(|_| t.microvm_ready),
            oci_ready,
            oci_runtimes: if oci_ready {
                let mut r = f.oci.runtimes.clone();
                r.sort();
                r.dedup();
                r.truncate(4);
                r
            } else {
                Vec::new()
            },
            oci_reason: f.oci.reason.filter(|_| !oci_ready),
            labels,
        },
        dropped,
    })
}

impl Sanitized {
    /// The microVM work it takes, as the store keeps it: 0 none, 1 a
    /// Mac's (Apple's container, at any tier; it runs an image's own
    /// entrypoint without `runtime.oci`, and carries egress only for a tool
    /// with a `command:`), 2 a Linux node's (inside tier 1, routed at tier
    /// 2). A microVM tool with egress and no command needs 2
    /// ([`crate::routing::Needs::microvm_level`]).
    pub fn microvm_level(&self) -> i64 {
        match self.microvm_backend {
            _ if !self.microvm_ready => 0,
            Some(b) if !b.inside_tier1() => 1,
            _ if self.tier_routed >= 2 => 2,
            _ => 0,
        }
    }

    /// `runtime.oci` as the store keeps it: 0 none, 1 ready, 2 ready with
    /// gVisor.
    pub fn oci_level(&self) -> i64 {
        crate::routing::level(
            self.oci_ready,
            self.oci_runtimes
                .contains(&oz0_policy::facts::OciRuntime::Gvisor),
        )
    }
}

/// The sandbox mechanism: a kind from the platform's closed set, each
/// detail kept only when it matches its pattern.
fn mechanism(m: &Mechanism, os: Os, dropped: &mut Vec<&'static str>) -> MechanismView {
    let kind_ok = match os {
        Os::Linux => ["bubblewrap", "none"].contains(&m.kind.as_str()),
        Os::Macos => ["seatbelt", "none"].contains(&m.kind.as_str()),
        Os::Windows => ["psec", "none"].contains(&m.kind.as_str()),
    };
    let kind = if kind_ok {
        m.kind.clone()
    } else {
        dropped.push("mechanism.kind");
        "none".to_string()
    };
    let bwrap_version = m
        .bwrap_version
        .as_deref()
        .and_then(|v| keep(v, is_version, "mechanism.bwrap_version", dropped));
    let landlock_abi = m.landlock_abi.and_then(|a| {
        if a <= 64 {
            Some(a)
        } else {
            dropped.push("mechanism.landlock_abi");
            None
        }
    });
    let cgroup_mode = m.cgroup_mode.as_deref().and_then(|c| {
        keep(
            c,
            |c| matches!(c, "cgroup_v2" | "cgroup_v1" | "none"),
            "mechanism.cgroup_mode",
            dropped,
        )
    });
    let psec_contract = m.psec_contract.as_deref().and_then(|c| {
        keep(
            c,
            |c| is_version(c) && c.split('.').count() == 2 && c.len() <= 7,
            "mechanism.psec_contract",
            dropped,
        )
    });
    let mut psec_features = Vec::new();
    for (i, feat) in m.psec_features.iter().enumerate() {
        if i >= MAX_PSEC_FEATURES {
            dropped.push("mechanism.psec_features");
            break;
        }
        if let Some(v) = keep(feat, is_feature, "mechanism.psec_features", dropped) {
            if !psec_features.contains(&v) {
                psec_features.push(v);
            }
        }
    }
    MechanismView {
        kind,
        bwrap_version,
        landlock_abi,
        seccomp: m.seccomp,
        cgroup_mode,
        psec_contract,
        psec_features,
    }
}

/// The tiers as the edge accepts them.
struct Tiers {
    proven: u8,
    routed: u8,
    claimed_routed: u8,
    microvm_ready: bool,
    oci_ready: bool,
}

/// The tier, as the edge accepts it: nothing without a passed self-test
/// and a mechanism; tier 2 only with a microVM booted inside tier 1.
fn tiers(f: &NodeFacts, kind: &str, dropped: &mut Vec<&'static str>) -> Tiers {
    let os = f.platform.os;
    let mut tier_proven = f.tier_proven;
    if tier_proven > MAX_TIER {
        dropped.push("tier_proven");
        tier_proven = 0;
    }
    if tier_proven > 0 && f.self_test != SelfTest::Passed {
        dropped.push("tier_proven");
        tier_proven = 0;
    }
    if tier_proven > 0 && kind == "none" {
        dropped.push("tier_proven");
        tier_proven = 0;
    }
    let tier_claimed_routed = f.tier_routed.min(MAX_TIER);
    // Tier 2 is a Linux node's test VM booted inside tier 1. A Mac's
    // microVMs (Apple's container) are not inside tier 1 on any Mac: their
    // kernel is the boundary, so they are offered whatever tier it proved,
    // and are not tier 2. Windows has none yet.
    let backend = f.microvm.backend;
    let microvm_ready = f.microvm.ready
        && match os {
            Os::Linux => tier_proven >= 1 && backend.is_none_or(|b| b.inside_tier1()),
            // Apple silicon only: neither runtime runs on an Intel Mac.
            Os::Macos => {
                backend == Some(oz0_policy::facts::MicrovmBackend::AppleContainer)
                    && f.platform.arch == "aarch64"
            }
            _ => false,
        };
    if f.microvm.ready && !microvm_ready {
        dropped.push("microvm.ready");
    }
    let tier2 = microvm_ready && os == Os::Linux;
    if tier_proven == 2 && !tier2 {
        dropped.push("tier_proven");
    }
    let tier_proven = if tier2 { 2 } else { tier_proven.min(1) };
    // Windows PSEC is a preview: routed at tier 0 whatever the node says.
    let base = if os == Os::Windows {
        0
    } else {
        tier_claimed_routed.min(tier_proven)
    };
    let tier_routed = if base >= 1 && tier2 { 2 } else { base.min(1) };
    // Containers run in tier 1 on Linux, with a runtime named.
    let oci_ready = f.oci.ready
        && os == Os::Linux
        && tier_routed >= 1
        && f.oci
            .runtimes
            .contains(&oz0_policy::facts::OciRuntime::Tier1);
    if f.oci.ready && !oci_ready {
        dropped.push("oci.ready");
    }
    Tiers {
        proven: tier_proven,
        routed: tier_routed,
        claimed_routed: tier_claimed_routed,
        microvm_ready,
        oci_ready,
    }
}

/// Labels: a closed set of keys; the edge derives the values it can.
/// Returns them and whether the node runs OCI containers.
fn labels(
    f: &NodeFacts,
    arch: Option<&String>,
    t: &Tiers,
    dropped: &mut Vec<&'static str>,
) -> (BTreeMap<String, String>, bool) {
    let microvm_ready = t.microvm_ready;
    let oci_ready = t.oci_ready;
    for (i, (k, v)) in f.labels.iter().enumerate() {
        if i >= MAX_LABELS {
            dropped.push("labels");
            break;
        }
        match k.as_str() {
            "runtime.oci" if v == "ready" && oci_ready => {}
            "runtime.oci" if v == "unavailable" || v == "ready" => {
                if v == "ready" {
                    dropped.push("labels.runtime.oci");
                }
            }
            "isolation.microvm" if v == "ready" && microvm_ready => {}
            "isolation.microvm" if v == "unavailable" || v == "ready" => {
                if v == "ready" {
                    dropped.push("labels.isolation.microvm");
                }
            }
            "sandbox.tier" if v.len() == 1 && v.as_bytes()[0].is_ascii_digit() => {}
            "arch" if Some(v) == arch => {}
            _ => dropped.push("labels"),
        }
    }
    let mut labels = BTreeMap::new();
    labels.insert("sandbox.tier".to_string(), t.routed.to_string());
    labels.insert(
        "isolation.microvm".to_string(),
        if microvm_ready {
            "ready"
        } else {
            "unavailable"
        }
        .to_string(),
    );
    labels.insert(
        "runtime.oci".to_string(),
        if oci_ready { "ready" } else { "unavailable" }.to_string(),
    );
    if let Some(a) = arch {
        labels.insert("arch".to_string(), a.clone());
    }
    (labels, oci_ready)
}

#[cfg(test)]
mod tests;
