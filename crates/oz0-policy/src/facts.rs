//! What a node reports about itself: facts, never prose.
//!
//! The node sends these to the edge; the edge words every fix itself from
//! [`FixKind`], and keeps a build number, a contract version or a failed
//! property only when it matches a strict pattern or is one of the eight
//! [`Property`] values. Nothing here is free text meant for display, except
//! fields named `*_raw` that the edge must validate or drop.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Version of the facts document.
pub const FACTS_SCHEMA: u32 = 1;

/// The eight self-test properties, in the order they are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Property {
    /// A process starts, writes its work dir; its children end with it.
    Launch,
    /// Writes outside and reads of the data dir are refused.
    Files,
    /// Only the proxy, with the run's token and allowlist.
    Egress,
    /// Nothing outside reaches a listener inside.
    Ingress,
    /// Memory, processes, CPU, kill on close.
    JobLimits,
    /// A process that cannot be put in its job never runs.
    FailClosed,
    /// `.git/hooks`, `.git/config` read-only; `.git` unmovable.
    ProtectedPaths,
    /// The caller's variables, what is needed, the proxy's; no `OZ0_`.
    Environment,
}

impl Property {
    /// All eight, in order.
    pub const ALL: [Property; 8] = [
        Property::Launch,
        Property::Files,
        Property::Egress,
        Property::Ingress,
        Property::JobLimits,
        Property::FailClosed,
        Property::ProtectedPaths,
        Property::Environment,
    ];

    /// The name used in output and facts.
    pub fn as_str(self) -> &'static str {
        self.name()
    }

    /// Its name in output and facts (the same as [`Property::as_str`]).
    pub const fn name(self) -> &'static str {
        match self {
            Property::Launch => "launch",
            Property::Files => "files",
            Property::Egress => "egress",
            Property::Ingress => "ingress",
            Property::JobLimits => "job_limits",
            Property::FailClosed => "fail_closed",
            Property::ProtectedPaths => "protected_paths",
            Property::Environment => "environment",
        }
    }

    /// Parses one of the eight names; anything else is `None`.
    pub fn parse(s: &str) -> Option<Property> {
        Property::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

impl std::fmt::Display for Property {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The kind of fix a node needs; the edge words it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FixKind {
    /// bubblewrap missing or too old.
    InstallBubblewrap,
    /// Ubuntu's AppArmor blocks unprivileged user namespaces.
    UsernsAppArmor,
    /// `user.max_user_namespaces` is 0.
    UsernsMaxZero,
    /// Debian's `kernel.unprivileged_userns_clone` is 0.
    UsernsDebianClone,
    /// User namespaces fail for another reason (e.g. a container's seccomp).
    UsernsOther,
    /// No seccomp in the kernel.
    NoSeccomp,
    /// No cgroup this user can drive: delegate one (`oz0-node setup cgroups`).
    DelegateCgroups,
    /// The self-test failed at a property: `sandbox check --self-test` says how.
    SelfTestFailed,
    /// The node was started with `--sandbox none`.
    SandboxDisabled,
    /// Windows: PSEC present, node not started with `--sandbox psec`.
    PsecStartWithFlag,
    /// Windows: this build has no PSEC.
    PsecMissing,
    /// Windows Server has no tier 1.
    WindowsServer,
    /// macOS: `sandbox-exec` missing.
    SeatbeltMissing,
    /// Platform without tier 1 support in this build.
    UnsupportedPlatform,
}

/// Operating system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Os {
    /// Linux.
    Linux,
    /// macOS.
    Macos,
    /// Windows.
    Windows,
}

/// The machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Platform {
    /// OS.
    pub os: Os,
    /// CPU architecture (`x86_64`, `aarch64`).
    pub arch: String,
    /// Kernel release (Linux `uname -r`) or OS build (Windows `26200.9457`); validated by the edge.
    pub build_raw: String,
}

/// The sandbox mechanism and what it is made of.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mechanism {
    /// `bubblewrap`, `seatbelt`, `psec` or `none`.
    pub kind: String,
    /// bubblewrap's version (`0.8.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bwrap_version: Option<String>,
    /// Landlock ABI (0: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landlock_abi: Option<u32>,
    /// seccomp filters available.
    #[serde(default)]
    pub seccomp: bool,
    /// How job limits are enforced: `cgroup_v2`, `cgroup_v1` or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_mode: Option<String>,
    /// Windows: PSEC contract (`1.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psec_contract: Option<String>,
    /// Windows: PSEC features.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub psec_features: Vec<String>,
}

/// The self-test's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status", content = "property")]
pub enum SelfTest {
    /// Not run (no tier 1 to test, or `--sandbox none`).
    NotRun,
    /// All eight held.
    Passed,
    /// This property failed.
    Failed(Property),
}

/// Why microVMs are not offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MicrovmReason {
    /// `OZ0_MICROVM=off`.
    Off,
    /// No tier 1 to run the monitor in.
    NoTier1,
    /// No VMM found.
    NoVmm,
    /// The VMM is not a pinned release and was not named explicitly.
    Unpinned,
    /// No `/dev/kvm` at all: no hardware virtualisation offered (or the
    /// kvm module is not loaded).
    NoHardwareVirtualisation,
    /// `/dev/kvm` exists and this user cannot open it.
    NoKvmAccess,
    /// The kernel refused to create a VM.
    KvmRefused,
    /// The test VM did not boot in time.
    TestVmDidNotBoot,
    /// The platform has no microVM support in this build.
    Unsupported,
    /// A Mac's node built without a release key fetches no guest binary
    /// for its VMs' bridge.
    NoReleaseKey,
    /// The guest binary for the VMs' bridge could not be had from the
    /// edge, signed by this build's release key.
    NoGuestBinary,
}

/// Why a Windows node has no microVMs (the seed's words: what smolvm would
/// need there).
pub const WINDOWS_NO_MICROVMS: &str = "not yet on Windows: smolvm needs the Windows Hypervisor Platform, and Developer Mode or an administrator";

impl MicrovmReason {
    /// Why there are no microVMs, in a few words with the fix where one
    /// exists (the node's log and refusals and the edge's `MicroVMs` line
    /// say the same).
    pub fn words(self) -> &'static str {
        match self {
            MicrovmReason::Off => "turned off (OZ0_MICROVM=off)",
            MicrovmReason::NoTier1 => "no tier 1 to run the VM monitor in",
            MicrovmReason::NoVmm => "no VMM found",
            MicrovmReason::Unpinned => {
                "the VMM is not a pinned release (name its folder in OZ0_MICROVM to use it anyway)"
            }
            MicrovmReason::NoHardwareVirtualisation => {
                "no hardware virtualisation (no /dev/kvm: enable VT-x/AMD-V or nested virtualisation)"
            }
            MicrovmReason::NoKvmAccess => {
                "no access to /dev/kvm (add the node's user to the kvm group)"
            }
            MicrovmReason::KvmRefused => "the kernel refused to create a VM",
            MicrovmReason::TestVmDidNotBoot => "the test VM did not boot",
            MicrovmReason::Unsupported => "not supported on this platform yet",
            MicrovmReason::NoReleaseKey => {
                "this node was built without a release key (OZ0_RELEASE_KEY), so it fetches no Linux node binary for its VMs' bridge"
            }
            MicrovmReason::NoGuestBinary => {
                "the Linux node binary its VMs' bridge runs could not be had from the edge, signed by this build's release key (the node's log says why)"
            }
        }
    }
}

/// MicroVM state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Microvm {
    /// True when this node runs microVMs: a test VM booted inside tier 1
    /// (Linux), or Apple's container offered (a Mac, whatever its tier:
    /// see [`MicrovmBackend::inside_tier1`]).
    pub ready: bool,
    /// Why not, when not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<MicrovmReason>,
    /// Whether the VMM is a pinned release (when one was found).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<bool>,
    /// What runs the VMs (when one was found).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<MicrovmBackend>,
}

/// What runs a node's microVMs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MicrovmBackend {
    /// smolvm (libkrun, KVM), inside tier 1.
    #[serde(rename = "smolvm")]
    Smolvm,
    /// QEMU in software emulation with the test guest: a test fixture,
    /// offered only by a node built with the `test-backends` feature.
    #[serde(rename = "qemu-tcg (test)")]
    QemuTcgTest,
    /// Apple's `container` (macOS 26, Apple silicon): its VMs are started
    /// by Apple's own services, outside the node's tier 1.
    #[serde(rename = "apple-container")]
    AppleContainer,
}

impl MicrovmBackend {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            MicrovmBackend::Smolvm => "smolvm",
            MicrovmBackend::QemuTcgTest => "qemu-tcg (test)",
            MicrovmBackend::AppleContainer => "apple-container",
        }
    }

    /// Whether its VMs' monitor runs inside the node's tier 1, so that
    /// they are offered only where tier 1 was proven (smolvm, and the test
    /// backend). Apple's container starts its VMs from Apple's own
    /// services, outside any wall of the node: the guest's kernel is the
    /// boundary, and they are offered whatever tier the Mac proved.
    pub fn inside_tier1(self) -> bool {
        match self {
            MicrovmBackend::Smolvm | MicrovmBackend::QemuTcgTest => true,
            MicrovmBackend::AppleContainer => false,
        }
    }
}

/// What runs a node's OCI containers (`runtime.oci`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[non_exhaustive]
pub enum OciRuntime {
    /// The image's root inside the node's tier-1 sandbox.
    #[serde(rename = "tier1")]
    Tier1,
    /// gVisor (`runsc`): its own user-space kernel.
    #[serde(rename = "gvisor")]
    Gvisor,
}

impl OciRuntime {
    /// Its name (`tier1`).
    pub fn as_str(self) -> &'static str {
        match self {
            OciRuntime::Tier1 => "tier1",
            OciRuntime::Gvisor => "gvisor",
        }
    }
}

/// Why OCI containers are not offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OciReason {
    /// The node names no registry to pull images from.
    NoRegistry,
    /// No tier 1 to run containers in.
    NoTier1,
    /// The node's image cache cannot be used.
    Cache,
    /// The check of runs in an image's root failed.
    ImageCheckFailed,
    /// The platform has no container runtime in this build.
    Unsupported,
}

impl OciReason {
    /// Why, in a few words with the fix.
    pub fn words(self) -> &'static str {
        match self {
            OciReason::NoRegistry => {
                "no registry to pull images from (start the node with --oci-registry HOST)"
            }
            OciReason::NoTier1 => "no tier 1 to run containers in",
            OciReason::Cache => {
                "the image cache in the data directory cannot be used (the node's log says why)"
            }
            OciReason::ImageCheckFailed => {
                "the self-test of runs in an image's root failed (the node's log says how)"
            }
            OciReason::Unsupported => "not supported on this platform yet",
        }
    }
}

/// OCI container state (`runtime.oci`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Oci {
    /// True when the node runs container tools.
    pub ready: bool,
    /// What runs them, when ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtimes: Vec<OciRuntime>,
    /// Why not, when not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<OciReason>,
}

impl Oci {
    /// Not offered, for `why`.
    pub fn unavailable(why: OciReason) -> Oci {
        Oci {
            ready: false,
            runtimes: Vec::new(),
            reason: Some(why),
        }
    }
}

/// Everything a node reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeFacts {
    /// [`FACTS_SCHEMA`].
    pub schema: u32,
    /// The node binary's version.
    pub node_version: String,
    /// The machine.
    pub platform: Platform,
    /// The tier the self-test proved.
    pub tier_proven: u8,
    /// The tier work is routed at (Windows PSEC: always 0).
    pub tier_routed: u8,
    /// The mechanism.
    pub mechanism: Mechanism,
    /// The self-test.
    pub self_test: SelfTest,
    /// What to fix, if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<FixKind>,
    /// MicroVMs.
    pub microvm: Microvm,
    /// OCI containers (absent from nodes before it: not offered).
    #[serde(default)]
    pub oci: Oci,
    /// Scheduler labels (`sandbox.tier`, `isolation.microvm`, `runtime.oci`, `arch`).
    pub labels: BTreeMap<String, String>,
}

impl NodeFacts {
    /// The labels that follow from the other facts.
    pub fn derive_labels(&mut self) {
        let oci_ready = self.oci.ready;
        let mut l = BTreeMap::new();
        l.insert("sandbox.tier".to_string(), self.tier_routed.to_string());
        l.insert(
            "isolation.microvm".to_string(),
            if self.microvm.ready {
                "ready"
            } else {
                "unavailable"
            }
            .to_string(),
        );
        l.insert(
            "runtime.oci".to_string(),
            if oci_ready { "ready" } else { "unavailable" }.to_string(),
        );
        l.insert("arch".to_string(), self.platform.arch.clone());
        self.labels = l;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn property_names_round_trip() {
        for p in Property::ALL {
            assert_eq!(Property::parse(p.as_str()), Some(p));
            assert_eq!(serde_json::to_value(p).unwrap(), p.as_str());
        }
        assert_eq!(Property::parse("files; rm -rf"), None);
    }

    #[test]
    fn facts_reject_unknown_fields() {
        let f = NodeFacts {
            schema: FACTS_SCHEMA,
            node_version: "0.1.0".into(),
            platform: Platform {
                os: Os::Linux,
                arch: "x86_64".into(),
                build_raw: "6.18".into(),
            },
            tier_proven: 1,
            tier_routed: 1,
            mechanism: Mechanism {
                kind: "bubblewrap".into(),
                ..Default::default()
            },
            self_test: SelfTest::Failed(Property::Egress),
            fix: Some(FixKind::SelfTestFailed),
            microvm: Microvm {
                ready: false,
                reason: Some(MicrovmReason::TestVmDidNotBoot),
                pinned: None,
                backend: None,
            },
            oci: Default::default(),
            labels: BTreeMap::new(),
        };
        let mut v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["self_test"]["status"], "failed");
        assert_eq!(v["self_test"]["property"], "egress");
        let back: NodeFacts = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(back, f);
        v["extra"] = serde_json::json!("<script>");
        assert!(serde_json::from_value::<NodeFacts>(v).is_err());
    }
}
