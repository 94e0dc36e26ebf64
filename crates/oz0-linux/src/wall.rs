//! The Linux node's wall, as the node core asks for it
//! ([`oz0_core::Wall`]): the probes and their verdict ([`crate::check`]),
//! and the one self-test (`oz0_core::selftest`) through the node's tier 1
//! with Linux's proofs of each layer ([`crate::selftest`]).

use oz0_core::{Check, Line, SelfTest};
use oz0_policy::facts::{Mechanism, Os, Platform, Property};

use crate::check::{self, Probe};
use crate::selftest::{Layer, LinuxProofs};
use crate::{HostConfig, Tier1};

/// What `--inject-fault` names: one property's runs to weaken, or one
/// layer of the sandbox to take away from every run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Weaken this property's runs.
    Property(Property),
    /// Take this layer away.
    Layer(Layer),
}

impl std::str::FromStr for Fault {
    type Err = UnknownFault;

    fn from_str(s: &str) -> Result<Fault, UnknownFault> {
        Property::parse(s)
            .map(Fault::Property)
            .or_else(|| Layer::parse(s).map(Fault::Layer))
            .ok_or(UnknownFault)
    }
}

/// `--inject-fault` named nothing the self-test knows.
#[derive(Debug, thiserror::Error)]
#[error("--inject-fault takes one of: launch, files, egress, ingress, job_limits, fail_closed, protected_paths, environment, or a layer: mounts, landlock, seccomp")]
pub struct UnknownFault;

/// Tier 1 on Linux: bubblewrap, seccomp, Landlock and cgroup jobs.
pub struct LinuxWall {
    /// Where the host context's parts come from (the same as the node's
    /// runs use).
    pub host: HostConfig,
    /// The egress proxy for the self-test's egress check.
    pub egress: std::sync::Arc<dyn oz0_egress::EgressService>,
    /// A fault to inject into the self-test (its tests only).
    pub fault: Option<Fault>,
}

impl LinuxWall {
    /// The probes alone, with every detail (for the node's own use).
    pub fn probe(&self) -> Probe {
        check::probe(self.host.bwrap.as_deref(), self.host.cgroup_root.clone())
    }

    /// The node core's check from a probe.
    pub fn check_of(p: &Probe) -> Check {
        let r = check::report(p);
        let cgroup_mode = match p.jobs.mode {
            "cgroup-v2" => "cgroup_v2",
            "cgroup-v1" => "cgroup_v1",
            _ => "none",
        };
        let bwrap = p.bwrap.as_ref().ok();
        Check {
            tier: r.tier,
            headline: r.headline,
            facts_line: r.facts_line,
            fix_kind: r.fix_kind,
            fix: r.fix,
            platform: Platform {
                os: Os::Linux,
                arch: p.arch.clone(),
                build_raw: p.kernel.clone(),
            },
            mechanism: Mechanism {
                kind: if bwrap.is_some() {
                    "bubblewrap"
                } else {
                    "none"
                }
                .into(),
                bwrap_version: bwrap
                    .and_then(|b| b.version.strip_prefix("bubblewrap "))
                    .map(str::to_string),
                landlock_abi: Some(p.landlock_abi),
                seccomp: p.seccomp,
                cgroup_mode: Some(cgroup_mode.into()),
                ..Default::default()
            },
            wall_name: bwrap
                .map(|b| b.version.clone())
                .unwrap_or_else(|| "bubblewrap".into()),
            probe: check::probe_json(p),
        }
    }
}

impl LinuxWall {
    /// The tier-1 host the self-test's runs go through: the job mode
    /// probed once, for every run (with none, job_limits fails with the
    /// reason and the fix), and the self-test's own egress proxy.
    pub fn self_test_host(&self) -> Result<(Tier1, Option<&'static str>), crate::SandboxError> {
        let host = Tier1::open(self.host.clone())?;
        let (host, job_mode) = match host.job_mode() {
            Ok(m) => {
                let name = m.name();
                (host.with_job_mode(m), Some(name))
            }
            Err(_) => (host, None),
        };
        let audit = host.data_dir().join("egress-audit.jsonl");
        Ok((host.with_egress(self.egress.clone(), audit), job_mode))
    }
}

impl oz0_core::Wall for LinuxWall {
    fn check(&self) -> Check {
        LinuxWall::check_of(&self.probe())
    }

    fn self_test(&self, check: &Check, on_line: &mut dyn FnMut(&Line)) -> Option<SelfTest> {
        if check.tier < 1 {
            return None;
        }
        let (host, job_mode) = match self.self_test_host() {
            Ok(h) => h,
            Err(e) => {
                let line = Line {
                    property: Property::Launch,
                    ok: false,
                    ms: 0,
                    detail: format!("the node's host context could not be made: {e}"),
                };
                on_line(&line);
                return Some(SelfTest {
                    lines: vec![line],
                    failed: Some(Property::Launch),
                    fault_injected: self.fault.is_some(),
                    total_ms: 0,
                });
            }
        };
        let proofs = LinuxProofs { job_mode };
        let mut cfg =
            oz0_core::selftest::Config::new(&host, "/oz0/oz0-node".into(), std::env::temp_dir());
        cfg.data_dir = Some(host.data_dir().to_path_buf());
        cfg.extra = Some(&proofs);
        cfg.files_layer = "mount layer: ";
        let layer = match self.fault {
            Some(Fault::Layer(l)) => Some(move |standin: &std::path::Path| l.fault(standin)),
            _ => None,
        };
        cfg.every_run = layer
            .as_ref()
            .map(|f| f as &(dyn Fn(&std::path::Path) -> oz0_core::Fault + Sync));
        if let Some(Fault::Property(p)) = self.fault {
            cfg.fault = Some(p);
        }
        Some(oz0_core::selftest::run(&cfg, |l| on_line(l)))
    }
}
