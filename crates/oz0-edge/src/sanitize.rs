//! The edge's view of a node's facts: strict patterns, closed sets, the
//! edge's own words.
//!
//! [`sanitize`] turns a parsed [`NodeFacts`] into [`Sanitized`]. Every string
//! the node sent is either matched against a strict pattern or a closed set
//! and kept, or dropped and *counted* (the count, and the names of the
//! fields, are what the edge logs and shows; never the dropped text). The
//! routed tier is recomputed here, so the routing rule does not depend on the
//! node telling the truth about it.

use oz0_policy::facts::{FixKind, MicrovmReason, NodeFacts, Os, Property, SelfTest, FACTS_SCHEMA};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Longest string field the edge looks at; longer ones are dropped unread.
pub const MAX_FIELD_CHARS: usize = 64;
/// Most PSEC features kept.
pub const MAX_PSEC_FEATURES: usize = 16;
/// Most labels looked at.
pub const MAX_LABELS: usize = 16;
/// Highest tier there is.
pub const MAX_TIER: u8 = 2;

/// Windows builds on which PSEC has been seen (the fix for a build without
/// it names one of the same release when there is one).
const PSEC_SEEN_BUILDS: &[&str] = &["26200.9457", "26300.9711"];

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
    /// Whether the node can run OCI containers (`runtime.oci=ready`).
    pub oci_ready: bool,
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

fn short(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_FIELD_CHARS
}

fn digits(s: &str, min: usize, max: usize) -> bool {
    (min..=max).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit())
}

/// `^\d{5}\.\d{1,5}$`: a Windows build such as `26200.9457`.
pub fn is_windows_build(s: &str) -> bool {
    matches!(s.split_once('.'), Some((a, b)) if digits(a, 5, 5) && digits(b, 1, 5))
}

/// `^\d{1,4}\.\d{1,4}(\.\d{1,4})?$`: a version such as `0.8.0` or `1.0`.
pub fn is_version(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    (2..=3).contains(&parts.len()) && parts.iter().all(|p| digits(p, 1, 4))
}

/// A Linux kernel release: `^\d{1,2}\.\d{1,3}(\.\d{1,4}){0,2}` then
/// optionally `-` or `+` and a local version of ASCII letters and digits separated
/// by single `.`, `_`, `+`, `~` or `-` (`6.1.0-28-amd64`,
/// `5.15.167.4-microsoft-standard-WSL2`), 64 characters at most.
pub fn is_kernel_release(s: &str) -> bool {
    if !short(s) {
        return false;
    }
    let (head, tail) = match s.find(['-', '+']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let parts: Vec<&str> = head.split('.').collect();
    if !(2..=4).contains(&parts.len())
        || !digits(parts[0], 1, 2)
        || !digits(parts[1], 1, 3)
        || !parts[2..].iter().all(|p| digits(p, 1, 4))
    {
        return false;
    }
    match tail {
        None => true,
        Some(t) => {
            let sep = |b: u8| matches!(b, b'.' | b'_' | b'+' | b'~' | b'-');
            let b = t.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter().all(|&c| c.is_ascii_alphanumeric() || sep(c))
                && !b.windows(2).any(|w| sep(w[0]) && sep(w[1]))
        }
    }
}

/// A macOS build (`24G84`, `25A5279m`) or version (`15.6`).
pub fn is_macos_build(s: &str) -> bool {
    if is_version(s) {
        return true;
    }
    let b = s.as_bytes();
    let lead = b.iter().take_while(|c| c.is_ascii_digit()).count();
    if !(1..=2).contains(&lead) || b.len() <= lead || !b[lead].is_ascii_uppercase() {
        return false;
    }
    let rest = &b[lead + 1..];
    let n = rest.iter().take_while(|c| c.is_ascii_digit()).count();
    (1..=5).contains(&n)
        && match &rest[n..] {
            [] => true,
            [c] => c.is_ascii_lowercase(),
            _ => false,
        }
}

/// `^\d{1,4}\.\d{1,4}\.\d{1,4}(-[a-z0-9]{1,16}(\.[a-z0-9]{1,16}){0,3})?$`.
pub fn is_node_version(s: &str) -> bool {
    let (core, pre) = match s.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (s, None),
    };
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|p| digits(p, 1, 4))
        && pre.is_none_or(|p| {
            let ids: Vec<&str> = p.split('.').collect();
            ids.len() <= 4
                && ids.iter().all(|i| {
                    (1..=16).contains(&i.len())
                        && i.bytes()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
                })
        })
}

/// A closed set of CPU architectures.
pub fn is_arch(s: &str) -> bool {
    matches!(
        s,
        "x86_64" | "aarch64" | "riscv64" | "armv7" | "i686" | "ppc64le" | "s390x"
    )
}

/// `^[a-z][a-z0-9_]{0,31}$`: a PSEC feature name.
pub fn is_feature(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=32).contains(&b.len())
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_')
}

/// `^[a-z0-9][a-z0-9.-]{0,62}$`: a node's name (a host name).
pub fn is_node_name(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'.' || *c == b'-')
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

    let m = &f.mechanism;
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
        .and_then(|v| keep(v, is_version, "mechanism.bwrap_version", &mut dropped));
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
            &mut dropped,
        )
    });
    let psec_contract = m.psec_contract.as_deref().and_then(|c| {
        keep(
            c,
            |c| is_version(c) && c.split('.').count() == 2 && c.len() <= 7,
            "mechanism.psec_contract",
            &mut dropped,
        )
    });
    let mut psec_features = Vec::new();
    for (i, feat) in m.psec_features.iter().enumerate() {
        if i >= MAX_PSEC_FEATURES {
            dropped.push("mechanism.psec_features");
            break;
        }
        if let Some(v) = keep(feat, is_feature, "mechanism.psec_features", &mut dropped) {
            if !psec_features.contains(&v) {
                psec_features.push(v);
            }
        }
    }

    // The tier, as the edge accepts it: nothing without a passed self-test.
    let (self_test, failed_property) = match f.self_test {
        SelfTest::NotRun => ("not_run", None),
        SelfTest::Passed => ("passed", None),
        SelfTest::Failed(p) => ("failed", Some(p)),
    };
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
    // Tier 2 is proven by a test VM booted inside tier 1 (not on Windows yet).
    let microvm_ready = f.microvm.ready && os != Os::Windows && tier_proven >= 1;
    if f.microvm.ready && !microvm_ready {
        dropped.push("microvm.ready");
    }
    if tier_proven == 2 && !microvm_ready {
        dropped.push("tier_proven");
    }
    let tier_proven = if microvm_ready { 2 } else { tier_proven.min(1) };
    // Windows PSEC is a preview: routed at tier 0 whatever the node says.
    let base = if os == Os::Windows {
        0
    } else {
        tier_claimed_routed.min(tier_proven)
    };
    let tier_routed = if base >= 1 && microvm_ready {
        2
    } else {
        base.min(1)
    };

    // Labels: a closed set of keys; the edge derives the values it can.
    let mut oci_ready = false;
    for (i, (k, v)) in f.labels.iter().enumerate() {
        if i >= MAX_LABELS {
            dropped.push("labels");
            break;
        }
        match k.as_str() {
            "runtime.oci" if v == "ready" => oci_ready = true,
            "runtime.oci" if v == "unavailable" => {}
            "isolation.microvm" if v == "ready" && microvm_ready => {}
            "isolation.microvm" if v == "unavailable" || v == "ready" => {
                if v == "ready" {
                    dropped.push("labels.isolation.microvm");
                }
            }
            "sandbox.tier" if v.len() == 1 && v.as_bytes()[0].is_ascii_digit() => {}
            "arch" if Some(v) == arch.as_ref() => {}
            _ => dropped.push("labels"),
        }
    }
    let mut labels = BTreeMap::new();
    labels.insert("sandbox.tier".to_string(), tier_routed.to_string());
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
    if let Some(a) = &arch {
        labels.insert("arch".to_string(), a.clone());
    }

    Ok(Outcome {
        facts: Sanitized {
            os: os_name.to_string(),
            arch,
            build,
            node_version,
            tier_proven,
            tier_routed,
            tier_claimed_routed,
            mechanism: MechanismView {
                kind,
                bwrap_version,
                landlock_abi,
                seccomp: m.seccomp,
                cgroup_mode,
                psec_contract,
                psec_features,
            },
            self_test: self_test.to_string(),
            failed_property,
            fix_kind: f.fix,
            microvm_ready,
            microvm_reason: f.microvm.reason,
            microvm_pinned: f.microvm.pinned,
            oci_ready,
            labels,
        },
        dropped,
    })
}

impl Sanitized {
    /// `tier 1 proven, routed at 1`, or for Windows `tier 1 (psec 1.0, routed as tier 0)`.
    pub fn tier_line(&self) -> String {
        if self.os == "windows" && self.tier_proven >= 1 {
            let c = self
                .mechanism
                .psec_contract
                .as_deref()
                .unwrap_or("contract unknown");
            return format!(
                "tier {} (psec {c}, routed as tier {})",
                self.tier_proven, self.tier_routed
            );
        }
        format!(
            "tier {} proven, routed at {}",
            self.tier_proven, self.tier_routed
        )
    }

    /// `bubblewrap 0.8.0, Landlock ABI 7, seccomp, cgroup v2`.
    pub fn mechanism_line(&self) -> String {
        let m = &self.mechanism;
        let mut parts = Vec::new();
        match m.kind.as_str() {
            "bubblewrap" => parts.push(match &m.bwrap_version {
                Some(v) => format!("bubblewrap {v}"),
                None => "bubblewrap".to_string(),
            }),
            "psec" => parts.push(match &m.psec_contract {
                Some(c) => format!("PSEC contract {c}"),
                None => "PSEC".to_string(),
            }),
            "seatbelt" => parts.push("Seatbelt".to_string()),
            _ => parts.push("none".to_string()),
        }
        if let Some(a) = m.landlock_abi {
            parts.push(if a == 0 {
                "no Landlock".to_string()
            } else {
                format!("Landlock ABI {a}")
            });
        }
        if m.kind == "bubblewrap" {
            parts.push(if m.seccomp { "seccomp" } else { "no seccomp" }.to_string());
        }
        if let Some(c) = &m.cgroup_mode {
            parts.push(match c.as_str() {
                "cgroup_v2" => "cgroup v2".to_string(),
                "cgroup_v1" => "cgroup v1".to_string(),
                _ => "no cgroup limits".to_string(),
            });
        }
        if !m.psec_features.is_empty() {
            parts.push(format!("features: {}", m.psec_features.join(" ")));
        }
        parts.join(", ")
    }

    /// The fix, in the edge's words, from the fix kind and kept facts.
    pub fn fix_text(&self) -> Option<String> {
        let prop = self.failed_property.map(Property::as_str);
        let windows = self.os == "windows";
        let text = match self.fix_kind? {
            FixKind::InstallBubblewrap => "Install bubblewrap 0.8 or later (Debian and Ubuntu: apt-get install bubblewrap), then restart the node.".to_string(),
            FixKind::UsernsAppArmor => "Ubuntu's AppArmor blocks unprivileged user namespaces: set the sysctl kernel.apparmor_restrict_unprivileged_userns=0, or install an AppArmor profile that lets bwrap create them, then restart the node.".to_string(),
            FixKind::UsernsMaxZero => "User namespaces are turned off: set the sysctl user.max_user_namespaces to a positive value (for example 15000), then restart the node.".to_string(),
            FixKind::UsernsDebianClone => "Unprivileged user namespaces are turned off: set the sysctl kernel.unprivileged_userns_clone=1, then restart the node.".to_string(),
            FixKind::UsernsOther => "User namespaces cannot be created here (a container's seccomp profile, for example, refuses them): run the node on the host or allow it to create user namespaces; oz0-node sandbox check on the node names the call that failed.".to_string(),
            FixKind::NoSeccomp => "The kernel has no seccomp filters: run the node on a kernel built with CONFIG_SECCOMP_FILTER.".to_string(),
            FixKind::DelegateCgroups => "No cgroup this user can drive: delegate one with oz0-node setup cgroups, then restart the node.".to_string(),
            FixKind::SelfTestFailed => {
                let cmd = if windows { "sandbox check --psec" } else { "sandbox check --self-test" };
                match prop {
                    Some(p) => format!("The self-test failed at {p}: {cmd} on the node says which check and how."),
                    None => format!("The self-test failed: {cmd} on the node says which check and how."),
                }
            }
            FixKind::SandboxDisabled => "The node was started with --sandbox none: restart it with --sandbox auto to run work in its sandbox.".to_string(),
            FixKind::PsecStartWithFlag => {
                let c = self.mechanism.psec_contract.as_ref().map(|c| format!(" (contract {c})")).unwrap_or_default();
                format!("PSEC is here{c}, and the node does not run work in it: start it with --sandbox psec; meanwhile run tier-1 work on Linux or macOS nodes.")
            }
            FixKind::PsecMissing => {
                let seen = self.build.as_deref().and_then(|b| {
                    let release = b.split('.').next()?;
                    PSEC_SEEN_BUILDS.iter().find(|s| s.starts_with(release) && s.as_bytes().get(release.len()) == Some(&b'.'))
                });
                let on = self.build.as_ref().map(|b| format!("Build {b} has")).unwrap_or_else(|| "This build has".to_string());
                match seen {
                    Some(s) => format!("{on} no PSEC, which Windows tier 1 runs in; it has been seen on build {s} of the same release: update Windows. Meanwhile run tier-1 work on Linux or macOS nodes."),
                    None => format!("{on} no PSEC, which Windows tier 1 runs in: run tier-1 work on Linux or macOS nodes."),
                }
            }
            FixKind::WindowsServer => "Windows Server has no tier-1 sandbox: run tier-1 work on Linux or macOS nodes.".to_string(),
            FixKind::SeatbeltMissing => "sandbox-exec, which macOS tier 1 runs in, is missing: it ships with macOS at /usr/bin/sandbox-exec; restore it.".to_string(),
            FixKind::UnsupportedPlatform => "This platform has no tier-1 sandbox in this node's release: run tier-1 work on Linux or macOS nodes.".to_string(),
        };
        Some(text)
    }

    /// The `MicroVMs` line.
    pub fn microvm_line(&self) -> String {
        if self.microvm_ready {
            return match self.microvm_pinned {
                Some(false) => {
                    "ready, with a VMM the operator named that is not a pinned release".to_string()
                }
                _ => "ready".to_string(),
            };
        }
        let why = match self.microvm_reason {
            Some(MicrovmReason::Off) => "turned off (OZ0_MICROVM=off)",
            Some(MicrovmReason::NoTier1) => "no tier 1 to run the VM monitor in",
            Some(MicrovmReason::NoVmm) => "no VMM found",
            Some(MicrovmReason::Unpinned) => {
                "the VMM is not a pinned release (name its folder in OZ0_MICROVM to use it anyway)"
            }
            Some(MicrovmReason::NoHardwareVirtualisation) => {
                "no hardware virtualisation (no /dev/kvm: enable VT-x/AMD-V or nested virtualisation)"
            }
            Some(MicrovmReason::NoKvmAccess) => {
                "no access to /dev/kvm (add the node's user to the kvm group)"
            }
            Some(MicrovmReason::KvmRefused) => "the kernel refused to create a VM",
            Some(MicrovmReason::TestVmDidNotBoot) => "the test VM did not boot",
            Some(MicrovmReason::Unsupported) => "not supported on this platform yet",
            None if self.os == "windows" => "not supported on Windows yet",
            None if self.tier_proven == 0 => "no tier 1 to run the VM monitor in",
            None => "not offered",
        };
        format!("none: {why}")
    }

    /// Why the edge routes lower than the node claims, if it does.
    pub fn routed_note(&self) -> Option<String> {
        if self.os == "windows" && self.tier_proven >= 1 {
            return Some(
                "Windows PSEC is a preview: the edge routes this node at tier 0".to_string(),
            );
        }
        if self.tier_claimed_routed > self.tier_routed {
            return Some(format!(
                "the node claimed tier {}; the edge routes it at tier {} from its self-test and facts",
                self.tier_claimed_routed, self.tier_routed
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oz0_policy::facts::{Mechanism, Microvm, Platform};

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
            },
            labels: BTreeMap::new(),
        };
        f.derive_labels(true);
        f
    }

    #[test]
    fn patterns() {
        assert!(is_windows_build("26200.9457"));
        for bad in [
            "26200.9457; rm -rf",
            "2620.9457",
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
        assert!(
            is_version("0.8.0") && is_version("1.0") && !is_version("1") && !is_version("1.0.0.0")
        );
        assert!(is_macos_build("24G84") && is_macos_build("25A5279m") && is_macos_build("15.6"));
        assert!(!is_macos_build("24g84") && !is_macos_build("24G") && !is_macos_build("24G84ab"));
        assert!(
            is_node_version("0.1.0")
                && is_node_version("1.2.3-rc.1")
                && !is_node_version("0.1.0 <b>")
        );
        assert!(
            is_node_name("build-01.example")
                && !is_node_name("-x")
                && !is_node_name("A")
                && !is_node_name("a b")
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
        };
        f.tier_routed = 1;
        let o = sanitize(&f).unwrap();
        assert!(o.facts.microvm_ready);
        assert_eq!((o.facts.tier_proven, o.facts.tier_routed), (2, 2));
        assert_eq!(o.facts.labels["isolation.microvm"], "ready");
        f.tier_routed = 0;
        assert_eq!(sanitize(&f).unwrap().facts.tier_routed, 0);
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
}
