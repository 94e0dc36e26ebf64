//! `sandbox check` on macOS: its lines, tier and kind of fix, as a pure
//! function of what the probes found ([`MacProbe`]).
//!
//! The probes ask; they never decide by version: Seatbelt counts only when
//! `sandbox-exec` ran a profile of the node's and that profile refused a
//! read it names while the same read without it worked. The machine's
//! processor, macOS version and Apple's `container` (its version, whether
//! its services answer) decide microVMs ([`crate::container::availability`]).
//! A tier found here is what the probes allow; the self-test proves it, and
//! until it has, the node's facts say tier 0.

use oz0_policy::facts::FixKind;
use serde::Serialize;

use crate::container::{availability, Arch, MacFacts, NotOffered};

/// What running a probe profile through `sandbox-exec` showed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "result")]
pub enum SeatbeltAnswer {
    /// `/usr/bin/sandbox-exec` is not there.
    Missing,
    /// The profile refused the read it names; the same read without it worked.
    Denies,
    /// The profile ran and the read it denies was allowed.
    DidNotDeny,
    /// No profile could be run, or the control read failed.
    Failed {
        /// What happened (one line).
        detail: String,
    },
}

/// Everything the probes found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MacProbe {
    /// The Seatbelt probe.
    pub seatbelt: SeatbeltAnswer,
    /// `sw_vers -productVersion` (`26.1`), when read.
    pub macos_version: Option<String>,
    /// `sw_vers -buildVersion` (`25B78`), when read.
    pub macos_build: Option<String>,
    /// The processor, macOS major and `container`.
    pub mac: MacFacts,
}

/// `sandbox check`'s result on macOS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    /// The tier the probes allow (1 only with Seatbelt denying).
    pub tier: u8,
    /// `Sandbox: tier N: …`.
    pub tier_line: String,
    /// The platform facts line.
    pub facts_line: String,
    /// `Fix: …`, when tier 1 is missing.
    pub fix_line: Option<String>,
    /// The kind of fix, for the facts.
    pub fix_kind: Option<FixKind>,
    /// Why microVMs are not offered, when they are not.
    pub microvm: Option<NotOffered>,
    /// `MicroVMs: …`.
    pub microvm_line: String,
}

impl Arch {
    /// As `uname -m` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Arch::Arm64 => "arm64",
            Arch::X86_64 => "x86_64",
        }
    }
}

/// Keeps a detail on one line.
fn one_line(s: &str) -> String {
    s.split(['\r', '\n'])
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// What the Seatbelt probe's answer means: the tier, the facts' word, the
/// tier line, the fix and its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeatbeltLines {
    /// 1 only when the profile refused the read.
    pub tier: u8,
    /// For the facts line.
    pub seatbelt: String,
    /// `Sandbox: tier N: …`.
    pub tier_line: String,
    /// `Fix: …`.
    pub fix_line: Option<String>,
    /// The kind of fix.
    pub fix_kind: Option<FixKind>,
}

/// The lines of one Seatbelt answer (also what `sandbox run` refuses with).
pub fn seatbelt_lines(answer: &SeatbeltAnswer) -> SeatbeltLines {
    let (tier, seatbelt, tier_line, fix_line, fix_kind) = match answer {
        SeatbeltAnswer::Denies => (
            1,
            "Seatbelt enforces profiles".to_string(),
            "Sandbox: tier 1: Seatbelt (sandbox-exec) refused the probe profile's read (probed; 'sandbox check --self-test' proves it)".to_string(),
            None,
            None,
        ),
        SeatbeltAnswer::Missing => (
            0,
            "no sandbox-exec".to_string(),
            "Sandbox: tier 0: /usr/bin/sandbox-exec, which macOS tier 1 runs in, is missing; runs get no sandbox here".to_string(),
            Some("Fix: sandbox-exec ships with macOS at /usr/bin/sandbox-exec: restore the system (a macOS update or reinstall puts it back); meanwhile run tier-1 work on Linux nodes".to_string()),
            Some(FixKind::SeatbeltMissing),
        ),
        SeatbeltAnswer::DidNotDeny => (
            0,
            "Seatbelt did not enforce the probe profile".to_string(),
            "Sandbox: tier 0: sandbox-exec ran the probe profile and the read it denies was allowed: Seatbelt does not enforce profiles here; runs get no sandbox".to_string(),
            Some("Fix: Seatbelt is not enforcing on this Mac (is the node itself inside another sandbox or a debugger?): run the node as a normal user process; meanwhile run tier-1 work on Linux nodes".to_string()),
            Some(FixKind::UnsupportedPlatform),
        ),
        SeatbeltAnswer::Failed { detail } => (
            0,
            "sandbox-exec failed".to_string(),
            format!(
                "Sandbox: tier 0: sandbox-exec could not run the probe profile ({}); runs get no sandbox here",
                one_line(detail)
            ),
            Some("Fix: run `sandbox-exec -p '(version 1)(allow default)' /usr/bin/true` as the node's user to see why Seatbelt refuses; meanwhile run tier-1 work on Linux nodes".to_string()),
            Some(FixKind::UnsupportedPlatform),
        ),
    };
    SeatbeltLines {
        tier,
        seatbelt,
        tier_line,
        fix_line,
        fix_kind,
    }
}

/// The report for these facts. Pure: the same facts give the same lines.
pub fn report(p: &MacProbe) -> CheckReport {
    let version = p.macos_version.as_deref().unwrap_or("(version unknown)");
    let build = p
        .macos_build
        .as_deref()
        .map_or_else(String::new, |b| format!(" ({b})"));
    let container = match p.mac.container_version {
        None => "no Apple container".to_string(),
        Some((a, b, c)) => format!(
            "Apple container {a}.{b}.{c}, services {}",
            if p.mac.services_answer {
                "answering"
            } else {
                "not answering"
            }
        ),
    };
    let SeatbeltLines {
        tier,
        seatbelt,
        tier_line,
        fix_line,
        fix_kind,
    } = seatbelt_lines(&p.seatbelt);
    let microvm = availability(&p.mac).err();
    let microvm_line = match microvm {
        None => {
            "MicroVMs: Apple's container can run tool servers here (tier 2 needs tier 1 proven too)"
                .to_string()
        }
        Some(n) => format!("MicroVMs: none: {}", n.reason()),
    };
    CheckReport {
        tier,
        tier_line,
        facts_line: format!(
            "macOS {version}{build} {}: {seatbelt}; {container}",
            p.mac.arch.as_str()
        ),
        fix_line,
        fix_kind,
        microvm,
        microvm_line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(arch: Arch, major: Option<u32>, v: Option<(u32, u32, u32)>, up: bool) -> MacFacts {
        MacFacts {
            arch,
            macos_major: major,
            container_version: v,
            services_answer: up,
        }
    }

    fn probe(seatbelt: SeatbeltAnswer, m: MacFacts) -> MacProbe {
        MacProbe {
            seatbelt,
            macos_version: Some("26.1".into()),
            macos_build: Some("25B78".into()),
            mac: m,
        }
    }

    /// Every probe outcome → tier, lines and the kind of fix.
    #[test]
    fn table_of_macs() {
        let ready = mac(Arch::Arm64, Some(26), Some((1, 5, 0)), true);
        let r = report(&probe(SeatbeltAnswer::Denies, ready.clone()));
        assert_eq!(r.tier, 1);
        assert_eq!(
            r.tier_line,
            "Sandbox: tier 1: Seatbelt (sandbox-exec) refused the probe profile's read (probed; 'sandbox check --self-test' proves it)"
        );
        assert_eq!(
            r.facts_line,
            "macOS 26.1 (25B78) arm64: Seatbelt enforces profiles; Apple container 1.5.0, services answering"
        );
        assert_eq!((r.fix_line, r.fix_kind, r.microvm), (None, None, None));

        let r = report(&probe(SeatbeltAnswer::Missing, ready.clone()));
        assert_eq!(r.tier, 0);
        assert!(r.tier_line.contains("/usr/bin/sandbox-exec"));
        assert!(r
            .fix_line
            .unwrap()
            .starts_with("Fix: sandbox-exec ships with macOS"));
        assert_eq!(r.fix_kind, Some(FixKind::SeatbeltMissing));

        let r = report(&probe(SeatbeltAnswer::DidNotDeny, ready.clone()));
        assert_eq!(r.tier, 0);
        assert!(r.tier_line.contains("the read it denies was allowed"));
        assert_eq!(r.fix_kind, Some(FixKind::UnsupportedPlatform));

        let r = report(&probe(
            SeatbeltAnswer::Failed {
                detail: "sandbox_apply: Operation not permitted\nexit 65".into(),
            },
            ready,
        ));
        assert_eq!(r.tier, 0);
        assert!(
            r.tier_line
                .contains("(sandbox_apply: Operation not permitted; exit 65)"),
            "{}",
            r.tier_line
        );
        assert!(r.fix_line.unwrap().contains("sandbox-exec -p"));
    }

    /// The microVM line for each Mac the seed names.
    #[test]
    fn microvms_by_mac() {
        let rows = [
            (
                mac(Arch::X86_64, Some(26), Some((1, 5, 0)), true),
                Some(NotOffered::IntelMac),
            ),
            (
                mac(Arch::Arm64, Some(15), Some((1, 5, 0)), true),
                Some(NotOffered::MacosTooOld),
            ),
            (
                mac(Arch::Arm64, None, None, false),
                Some(NotOffered::MacosTooOld),
            ),
            (
                mac(Arch::Arm64, Some(26), None, false),
                Some(NotOffered::NotInstalled),
            ),
            (
                mac(Arch::Arm64, Some(26), Some((1, 4, 9)), true),
                Some(NotOffered::ContainerTooOld),
            ),
            (
                mac(Arch::Arm64, Some(26), Some((1, 5, 0)), false),
                Some(NotOffered::ServicesDown),
            ),
            (mac(Arch::Arm64, Some(26), Some((1, 6, 1)), true), None),
        ];
        for (m, want) in rows {
            let r = report(&probe(SeatbeltAnswer::Denies, m.clone()));
            assert_eq!(r.microvm, want, "{m:?}");
            match want {
                Some(n) => assert_eq!(r.microvm_line, format!("MicroVMs: none: {}", n.reason())),
                None => assert!(r.microvm_line.contains("can run tool servers")),
            }
        }
        let mut p = probe(SeatbeltAnswer::Denies, mac(Arch::X86_64, None, None, false));
        p.macos_version = None;
        p.macos_build = None;
        assert_eq!(
            report(&p).facts_line,
            "macOS (version unknown) x86_64: Seatbelt enforces profiles; no Apple container"
        );
    }
}
