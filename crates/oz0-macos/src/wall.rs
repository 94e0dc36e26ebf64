//! macOS' wall as the node core asks for it ([`oz0_core::Wall`], macOS
//! only): the check is `crate::check::report` of what the probes
//! (`crate::probe`) found; the self-test is `oz0_core::selftest` through
//! Seatbelt ([`crate::sandbox::Seatbelt`]),
//! with this binary's `sandbox probe` as the witness inside. The facts are
//! `oz0_core::facts::assemble`'s, as on every platform: a tier only when
//! the self-test showed it on this Mac.

use std::path::PathBuf;
use std::sync::Arc;

use oz0_core::selftest::{self, Config};
use oz0_core::{Check, Line, SelfTest, Wall};
use oz0_egress::EgressService;
use oz0_policy::facts::{self as pf, Microvm, MicrovmReason, Os, Platform};

use crate::check::{report, MacProbe};
use crate::container::{availability, Arch, NotOffered};
use crate::sandbox::{temp_root, Seatbelt};

/// The wall's name in the self-test's closing line.
pub const WALL_NAME: &str = "Seatbelt (sandbox-exec)";

/// This Mac's wall.
pub struct MacWall {
    /// What the probes found.
    pub probe: MacProbe,
    /// The node's data directory, when it has one (the self-test shows no
    /// run can list it or read its key).
    pub data_dir: Option<PathBuf>,
    /// The node's egress proxy (the self-test's egress check goes through it).
    pub egress: Arc<dyn EgressService>,
}

impl MacWall {
    /// Probes this Mac once.
    pub fn probe(data_dir: Option<PathBuf>, egress: Arc<dyn EgressService>) -> MacWall {
        MacWall {
            probe: crate::probe::probe(),
            data_dir,
            egress,
        }
    }

    /// MicroVMs as the facts report them: Apple's container when this Mac
    /// offers it (`oz0_macos::container::availability`), else why not.
    pub fn microvm(&self) -> Microvm {
        match availability(&self.probe.mac) {
            Ok(()) => Microvm {
                ready: true,
                reason: None,
                pinned: None,
                backend: Some(pf::MicrovmBackend::AppleContainer),
            },
            Err(n) => Microvm {
                ready: false,
                reason: Some(match n {
                    NotOffered::NotInstalled => MicrovmReason::NoVmm,
                    NotOffered::IntelMac
                    | NotOffered::MacosTooOld
                    | NotOffered::ContainerTooOld
                    | NotOffered::ServicesDown => MicrovmReason::Unsupported,
                }),
                pinned: None,
                backend: None,
            },
        }
    }
}

fn failed_launch(why: String) -> SelfTest {
    SelfTest {
        lines: vec![Line {
            property: pf::Property::Launch,
            ok: false,
            ms: 0,
            detail: why,
        }],
        failed: Some(pf::Property::Launch),
        fault_injected: false,
        total_ms: 0,
    }
}

impl Wall for MacWall {
    fn check(&self) -> Check {
        let r = report(&self.probe);
        Check {
            tier: r.tier,
            headline: r.tier_line,
            facts_line: r.facts_line,
            fix_kind: r.fix_kind,
            fix: r.fix_line,
            platform: Platform {
                os: Os::Macos,
                arch: match self.probe.mac.arch {
                    Arch::Arm64 => "aarch64",
                    Arch::X86_64 => "x86_64",
                }
                .into(),
                build_raw: self
                    .probe
                    .macos_build
                    .clone()
                    .or_else(|| self.probe.macos_version.clone())
                    .unwrap_or_default(),
            },
            mechanism: pf::Mechanism {
                kind: "seatbelt".into(),
                ..Default::default()
            },
            wall_name: WALL_NAME.into(),
            probe: serde_json::to_value(&self.probe).expect("the probe serialises"),
        }
    }

    fn self_test(&self, check: &Check, on_line: &mut dyn FnMut(&Line)) -> Option<SelfTest> {
        if check.tier == 0 {
            return None;
        }
        // Seatbelt itself: its fail_closed check asks it for a run it cannot
        // confine (a profile sandbox-exec cannot compile).
        let made = Seatbelt::new(self.egress.clone(), None, None)
            .and_then(|wall| Ok((wall, temp_root()?)));
        let (wall, base_root) = match made {
            Ok(m) => m,
            Err(e) => {
                let t = failed_launch(format!("cannot set up the self-test: {e}"));
                on_line(&t.lines[0]);
                return Some(t);
            }
        };
        let cfg = Config {
            data_dir: self.data_dir.clone(),
            // What macOS adds to a process it starts, besides what the wall
            // gives: the user's text encoding (CoreFoundation's).
            env_adds: &["__CF_USER_TEXT_ENCODING"],
            ..Config::new(&wall, wall.node_binary.as_str().to_string(), base_root)
        };
        Some(selftest::run(&cfg, |l| on_line(l)))
    }
}
