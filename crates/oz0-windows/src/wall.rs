//! Windows' wall: the PSEC probe as [`oz0_core::Wall`] ([`WindowsWall`]),
//! and the node's facts from it ([`facts`]).
//!
//! The check is `crate::check::report` of what `crate::native::probe`
//! found: the lines, the tier and the kind of fix of the seed's table, pure
//! code tested on Linux. The self-test is the one every platform runs
//! (`oz0_core::selftest`): its eight checks in PSEC containers
//! (`crate::psec::Psec`), the node binary's `sandbox probe` the witness
//! inside each, a stand-in and the real data directory, stopping at the
//! first that fails. What this build's PSEC runs refuse (egress, see
//! `crate::psec::NO_EGRESS`) fails its check with that reason: the node
//! never reports a PSEC property it did not see hold. Where the probes
//! find no PSEC there is nothing to test, and the check says the probes'
//! reason and fix. Under Wine, with no wall, every check runs and fails
//! naming what it saw (`tests/selftest.rs`).

use oz0_core::{Check, Line, SelfTest, Wall};
use oz0_policy::facts::{self as pf, Os, Platform, Property};

use crate::check::{self as wcheck, CheckReport};
use crate::native::NativeError;
use crate::probe::{Feature, PsecProbe};

/// Windows' wall as this node has it.
pub struct WindowsWall {
    /// Started with `--sandbox psec` (or `sandbox check --psec`).
    pub psec: bool,
    /// What the probe found, or why it could not ask.
    pub probe: Result<PsecProbe, NativeError>,
    /// The node's data directory, which the self-test shows no run reaches.
    pub data_dir: Option<std::path::PathBuf>,
}

impl WindowsWall {
    /// Probes Windows once.
    pub fn probe(psec: bool, data_dir: Option<std::path::PathBuf>) -> WindowsWall {
        WindowsWall {
            psec,
            probe: crate::native::probe(),
            data_dir,
        }
    }

    /// The seed's report for these facts and this self-test.
    pub fn report(&self, self_test: Option<&SelfTest>) -> Option<CheckReport> {
        let probe = self.probe.as_ref().ok()?;
        let st = self_test.map(|t| match t.lines.iter().find(|l| !l.ok) {
            Some(l) => wcheck::SelfTest::Failed {
                property: l.property,
                how: l.detail.clone(),
            },
            None if t.tier() == 1 => wcheck::SelfTest::Passed,
            None => wcheck::SelfTest::Failed {
                property: Property::ALL[t.lines.len().min(Property::ALL.len() - 1)],
                how: "the self-test stopped before its end".into(),
            },
        });
        Some(wcheck::report(probe, self.psec, st.as_ref()))
    }
}

/// The platform facts: Windows, this architecture, the build read.
fn platform(probe: Option<&PsecProbe>) -> Platform {
    Platform {
        os: Os::Windows,
        arch: std::env::consts::ARCH.to_string(),
        build_raw: probe
            .and_then(|p| p.build.as_ref())
            .map_or_else(String::new, |b| b.to_string()),
    }
}

/// Whether this machine has PSEC, whatever the node was started with: the
/// line the node logs once per start (the edge's
/// `oz0_edge_psec_available` says the same per node).
pub fn availability_line(check: &Check) -> String {
    match (&check.mechanism.kind[..], &check.mechanism.psec_contract) {
        ("psec", Some(c)) => format!("psec.available=true contract={c}"),
        ("psec", None) => "psec.available=true".into(),
        _ => "psec.available=false".into(),
    }
}

/// A feature's wire name, as the edge keeps it.
fn feature_name(f: Feature) -> &'static str {
    match f {
        Feature::DenyPaths => "deny_paths",
        Feature::EnumeratePaths => "enumerate_paths",
        Feature::IngressTable => "ingress_table",
    }
}

/// The policy's kind of fix for the report's.
fn fix_kind(f: &wcheck::FixKind) -> Option<pf::FixKind> {
    match f {
        wcheck::FixKind::StartWithPsec => Some(pf::FixKind::PsecStartWithFlag),
        wcheck::FixKind::None => None,
        wcheck::FixKind::SelfTestFailed { .. } | wcheck::FixKind::SelfTestNotRun => {
            Some(pf::FixKind::SelfTestFailed)
        }
        wcheck::FixKind::NoPsec { .. } => Some(pf::FixKind::PsecMissing),
        wcheck::FixKind::WindowsServer => Some(pf::FixKind::WindowsServer),
    }
}

impl Wall for WindowsWall {
    fn check(&self) -> Check {
        let probe_json = match &self.probe {
            Ok(p) => serde_json::to_value(p).expect("the probe serialises"),
            Err(e) => serde_json::json!({ "error": e.to_string() }),
        };
        let Some(r) = self.report(None) else {
            let e = self.probe.as_ref().err().map(ToString::to_string);
            let why = e.unwrap_or_default();
            return Check {
                tier: 0,
                headline: format!("Sandbox: tier 0: the PSEC probe could not ask Windows: {why}"),
                facts_line: format!("Windows on {}: probe failed", std::env::consts::ARCH),
                fix_kind: Some(pf::FixKind::PsecMissing),
                fix: Some(format!(
                    "Fix: the probe failed ({why}); run `oz0-node sandbox check --json` as the node's user to see the step"
                )),
                platform: platform(None),
                mechanism: pf::Mechanism {
                    kind: "none".into(),
                    ..Default::default()
                },
                wall_name: "PSEC".into(),
                probe: probe_json,
            };
        };
        let probe = self.probe.as_ref().ok();
        let facts = probe.and_then(|p| p.psec().ok());
        let mechanism = pf::Mechanism {
            kind: if facts.is_some() { "psec" } else { "none" }.into(),
            psec_contract: facts.map(|f| f.contract.to_string()),
            psec_features: facts
                .map(|f| {
                    Feature::ALL
                        .into_iter()
                        .filter(|x| f.supports(*x))
                        .map(|x| feature_name(x).to_string())
                        .collect()
                })
                .unwrap_or_default(),
            ..Default::default()
        };
        // Tier 1 is possible only with PSEC here and the node told to use
        // it; the self-test proves it.
        let tier = u8::from(facts.is_some() && self.psec);
        Check {
            tier,
            headline: r.tier_line.clone(),
            facts_line: r.facts_line.clone(),
            fix_kind: if tier == 1 { None } else { fix_kind(&r.fix) },
            fix: Some(r.fix_line.clone()),
            platform: platform(probe),
            mechanism,
            wall_name: facts.map_or_else(
                || "PSEC".to_string(),
                |f| format!("PSEC contract {}", f.contract),
            ),
            probe: probe_json,
        }
    }

    fn self_test(&self, check: &Check, on_line: &mut dyn FnMut(&Line)) -> Option<SelfTest> {
        if check.tier == 0 {
            return None;
        }
        Some(self.psec_self_test(on_line))
    }
}

impl WindowsWall {
    /// The shared self-test in PSEC containers.
    #[cfg(windows)]
    fn psec_self_test(&self, on_line: &mut dyn FnMut(&Line)) -> SelfTest {
        use oz0_core::selftest::{self, Config};
        let psec = self
            .probe
            .as_ref()
            .map_err(ToString::to_string)
            .and_then(|p| p.psec().map_err(|e| e.to_string()))
            .and_then(|f| crate::psec::Psec::new(f).map_err(|e| e.to_string()));
        let psec = match psec {
            Ok(p) => p,
            Err(e) => {
                return selftest::failed_at_start(
                    format!("cannot set up PSEC for the self-test: {e}"),
                    on_line,
                    false,
                )
            }
        };
        let probe = psec.node_binary.display().to_string();
        let extra = DataDirList(self.data_dir.clone());
        let cfg = Config {
            data_dir: self.data_dir.clone(),
            extra: Some(&extra),
            ..self_test_config(&psec, probe, std::env::temp_dir())
        };
        selftest::run(&cfg, on_line)
    }

    /// No PSEC off Windows: a check of tier 1 needs Windows' own probe.
    #[cfg(not(windows))]
    fn psec_self_test(&self, on_line: &mut dyn FnMut(&Line)) -> SelfTest {
        oz0_core::selftest::failed_at_start("PSEC runs only on Windows".into(), on_line, false)
    }
}

impl WindowsWall {
    /// The egress route of this machine's PSEC runs, where the probes
    /// found PSEC (else None): `OZ0_SANDBOX_PSEC_ROUTE` when set (the test
    /// is then not run), else the self-dial test in a PSEC container.
    #[cfg(windows)]
    pub fn route(&self) -> Option<Result<crate::route::Route, crate::route::RouteError>> {
        let facts = self.probe.as_ref().ok()?.psec().ok()?;
        let var = std::env::var_os(crate::route::ROUTE_ENV);
        Some(crate::route::decide_route(var.as_deref(), || {
            self_dial_in_psec(facts)
        }))
    }
}

/// The self-dial test in a PSEC container, in a folder of its own under
/// TEMP (removed after) with a stand-in data directory beside its work.
#[cfg(windows)]
fn self_dial_in_psec(facts: crate::probe::PsecFacts) -> crate::route::SelfDial {
    use crate::route::SelfDial;
    let psec = match crate::psec::Psec::new(facts) {
        Ok(p) => p,
        Err(e) => return SelfDial::NoAnswer(e.to_string()),
    };
    let base = std::env::temp_dir().join(format!(
        "oz0-self-dial-{}-{}",
        std::process::id(),
        crate::tier0::new_run_id()
    ));
    let (work, standin) = (base.join("work"), base.join("standin-data"));
    let made = std::fs::create_dir_all(&work).and_then(|()| std::fs::create_dir_all(&standin));
    let answer = match (
        made,
        crate::tier0::carry(&work),
        crate::tier0::carry(&standin),
    ) {
        (Err(e), _, _) => SelfDial::NoAnswer(format!("cannot make {}: {e}", base.display())),
        (_, Err(e), _) | (_, _, Err(e)) => SelfDial::NoAnswer(e.to_string()),
        (Ok(()), Ok(w), Ok(d)) => crate::route::self_dial_through(
            &psec,
            &psec.node_binary.display().to_string(),
            &work,
            w,
            d,
        ),
    };
    let _ = std::fs::remove_dir_all(&base);
    answer
}

/// The line `sandbox check --psec` and the daemon print of the route.
pub fn route_line(
    route: &Result<crate::route::Route, crate::route::RouteError>,
    named: bool,
) -> String {
    use crate::route::Route;
    match (route, named) {
        (Ok(r), true) => format!(
            "Egress route: {r} (named by {})",
            crate::route::ROUTE_ENV
        ),
        (Ok(Route::Bridge), false) => "Egress route: bridge: a PSEC container reached its own loopback, so the bridge inside it serves its egress".into(),
        (Ok(Route::Relay), false) => "Egress route: relay: this build refuses a PSEC container its own loopback, so the relay outside serves its egress".into(),
        (Err(e), _) => format!("Egress route: undecided: {e}"),
    }
}

/// The shared self-test through `runs` as Windows runs it: `probe` (the
/// node binary) the witness inside, its folder under `base_root`, runs
/// cancelled by an event, paths carried as `/C:/…`, and `SystemRoot` what
/// Windows adds to a process it starts besides what the wall gives.
#[cfg(windows)]
pub fn self_test_config(
    runs: &dyn oz0_core::Sandbox,
    probe: String,
    base_root: std::path::PathBuf,
) -> oz0_core::selftest::Config<'_> {
    oz0_core::selftest::Config {
        env_adds: &["SystemRoot"],
        cancels: crate::native::event_cancel,
        spec_path: |p| crate::tier0::carry(p).map_err(|e| e.to_string().into()),
        ..oz0_core::selftest::Config::new(runs, probe, base_root)
    }
}

/// What `sandbox check --psec` says of the relay route: Windows
/// Firewall's check (on for every profile, blocking inbound by default,
/// read through `INetFwPolicy2`), then the one scoped rule that lets the
/// relay through, with the relay profile's SID, and its removal.
#[cfg(windows)]
pub fn relay_lines(node_binary: &std::path::Path) -> Vec<String> {
    use crate::relay::{check_firewall, firewall_rule, PackageSid, RELAY_PROFILE};
    let mut out = vec![match crate::native::firewall_profiles() {
        Ok(f) => match check_firewall(&f) {
            Ok(()) => "Firewall: on for the domain, private and public profiles, each blocking inbound connections no rule allows".to_string(),
            Err(e) => format!("Firewall: {e}"),
        },
        Err(e) => format!(
            "Firewall: cannot read Windows Firewall's settings ({e}), so nothing shows that other machines cannot reach a relay"
        ),
    }];
    let program = node_binary
        .to_str()
        .ok_or_else(|| "the node binary's path is not Unicode".to_string())
        .and_then(|p| crate::winpath::WinPath::parse(p).map_err(|e| e.to_string()));
    let sid = crate::native::appcontainer_sid(RELAY_PROFILE).map_err(|e| e.to_string());
    match (program, sid) {
        (Ok(program), Ok(Some(sid))) => match PackageSid::parse(&sid) {
            Ok(sid) => {
                let r = firewall_rule(&program, &sid);
                out.extend([r.comment, r.add, format!("# To undo it: {}", r.remove)]);
            }
            Err(e) => out.push(format!("Firewall rule: the relay profile's SID: {e}")),
        },
        (Ok(_), Ok(None)) => out.push(
            "Firewall rule: this Windows cannot name the relay profile's SID (no DeriveAppContainerSidFromAppContainerName in userenv.dll)".into(),
        ),
        (Err(e), _) | (_, Err(e)) => out.push(format!("Firewall rule: {e}")),
    }
    out
}

/// Windows' own proof of `files`, after the shared check held: the node's
/// data directory's access list lets no container read it.
#[cfg(windows)]
struct DataDirList(Option<std::path::PathBuf>);

#[cfg(windows)]
impl oz0_core::selftest::Extra for DataDirList {
    fn prove(
        &self,
        p: Property,
        _s: &mut oz0_core::selftest::Session<'_>,
    ) -> Result<Option<String>, oz0_core::selftest::Failed> {
        match (p, self.0.as_deref().filter(|d| d.exists())) {
            (Property::Files, Some(d)) => data_dir_closed(d).map(Some).map_err(Into::into),
            _ => Ok(None),
        }
    }
}

/// Whether the access list of the data directory `d` keeps every container
/// out (what it shows), or which it lets read it, with the fix.
#[cfg(windows)]
pub fn data_dir_closed(d: &std::path::Path) -> Result<String, String> {
    let shown = d.display().to_string();
    let list = crate::native::access_list(d)
        .map_err(|e| format!("cannot read the access list of the data directory {shown}: {e}"))?;
    let readers = crate::acl::container_readers(list.as_deref());
    if readers.is_empty() {
        return Ok("its access list grants no container".into());
    }
    Err(format!(
        "the access list of the data directory {shown} lets {} read it, which PSEC containers match: run `{}`",
        readers.join(", "),
        crate::acl::icacls_fix(&shown)
    ))
}

/// The node's facts from the check and the self-test: the same assembly
/// as every platform's, then routed at tier 0 (a Windows node always is).
pub fn facts(
    check: &Check,
    self_test: Option<&SelfTest>,
    none: bool,
) -> oz0_policy::facts::NodeFacts {
    let mode = if none {
        oz0_core::facts::SandboxMode::None
    } else {
        oz0_core::facts::SandboxMode::Auto
    };
    let microvm = pf::Microvm {
        ready: false,
        reason: Some(pf::MicrovmReason::Unsupported),
        pinned: None,
        backend: None,
    };
    let oci = pf::Oci::unavailable(pf::OciReason::Unsupported);
    let mut f = oz0_core::facts::assemble(
        check,
        self_test,
        mode,
        microvm,
        oci,
        env!("CARGO_PKG_VERSION"),
    );
    f.tier_routed = 0;
    f.derive_labels();
    f
}

// Off Windows the probe answers NotWindows; on Windows (and Wine) it asks.
#[cfg(all(test, not(windows)))]
mod tests {
    use super::*;

    #[test]
    fn where_the_probe_cannot_ask_the_check_is_tier_0_with_the_step_to_see() {
        // Off Windows the probe answers NotWindows: the path of a probe
        // that failed.
        let w = WindowsWall::probe(true, None);
        let c = w.check();
        assert_eq!(c.tier, 0);
        assert!(
            c.headline
                .starts_with("Sandbox: tier 0: the PSEC probe could not ask Windows"),
            "{}",
            c.headline
        );
        assert_eq!(c.fix_kind, Some(pf::FixKind::PsecMissing));
        assert!(w.self_test(&c, &mut |_| {}).is_none());
        let f = facts(&c, None, false);
        assert_eq!((f.tier_proven, f.tier_routed), (0, 0));
        assert_eq!(availability_line(&c), "psec.available=false");
    }

    #[test]
    fn the_availability_line_names_the_contract_found() {
        let mut c = WindowsWall::probe(false, None).check();
        c.mechanism.kind = "psec".into();
        c.mechanism.psec_contract = Some("1.0".into());
        assert_eq!(availability_line(&c), "psec.available=true contract=1.0");
        c.mechanism.psec_contract = None;
        assert_eq!(availability_line(&c), "psec.available=true");
    }
}
