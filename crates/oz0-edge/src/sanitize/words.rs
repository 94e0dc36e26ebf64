//! The edge's own words for a node's sanitized facts: the tier, mechanism
//! and microVM lines, why it is routed lower than it claims, and the fix,
//! worded from the fix kind and never from the node's text.

use oz0_policy::facts::{FixKind, MicrovmBackend, MicrovmReason, Property};

use super::Sanitized;

/// Windows builds on which PSEC has been seen (the fix for a build without
/// it names one of the same release when there is one).
const PSEC_SEEN_BUILDS: &[&str] = &["26200.9457", "26300.9711"];

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
            FixKind::NoSeccomp => "The kernel refuses the node a seccomp filter: run it on a kernel built with CONFIG_SECCOMP_FILTER, and in a container allow seccomp(2).".to_string(),
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
            if self.microvm_backend == Some(MicrovmBackend::AppleContainer) {
                return "ready through Apple's container, at any tier: its VMs are started by Apple's services, not inside tier 1, so the guest's kernel is the boundary; egress through the node's proxy over a socket the VM publishes, for a tool with a command:".to_string();
            }
            if self.microvm_backend == Some(MicrovmBackend::QemuTcgTest) {
                return "ready through qemu-tcg (test): a test build's QEMU in software emulation, never a shipped node's microVMs".to_string();
            }
            return match self.microvm_pinned {
                Some(false) => {
                    "ready, with a VMM the operator named that is not a pinned release".to_string()
                }
                _ => "ready".to_string(),
            };
        }
        let why = match self.microvm_reason {
            None | Some(MicrovmReason::Unsupported) if self.os == "windows" => {
                oz0_policy::facts::WINDOWS_NO_MICROVMS
            }
            Some(r) => r.words(),
            None if self.tier_proven == 0 => "no tier 1 to run the VM monitor in",
            None => "not offered",
        };
        format!("none: {why}")
    }

    /// The `Containers` line (`runtime.oci`).
    pub fn containers_line(&self) -> String {
        if self.oci_ready {
            let r: Vec<&str> = self.oci_runtimes.iter().map(|r| r.as_str()).collect();
            return format!("ready (runtime.oci), in {}", r.join(", "));
        }
        let why = match self.oci_reason {
            Some(r) => r.words(),
            None if self.os != "linux" => "not supported on this platform yet",
            None if self.tier_proven == 0 => "no tier 1 to run containers in",
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
