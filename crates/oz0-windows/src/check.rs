//! `sandbox check` on Windows: the three lines and the kind of fix, as a pure
//! function of the probe facts, whether the node was started with
//! `--sandbox psec`, and the self-test's result.
//!
//! One row per machine of the table "The machine / What the node reports /
//! The fix" (seed `000_…`), plus the cases the table implies (started with
//! `--sandbox psec` before the self-test ran). A Windows node is **routed as
//! tier 0 always**, whatever it proved: [`CheckReport::routed_tier`] is 0 in
//! every row.

use serde::Serialize;

use crate::probe::{Edition, NoPsec, PsecProbe};

/// The eight self-test properties, in the order they run (one list, shared
/// with every platform).
pub use oz0_policy::facts::Property;

/// What the self-test showed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "result")]
pub enum SelfTest {
    /// All eight held.
    Passed,
    /// It stopped at this property.
    Failed {
        /// The property.
        property: Property,
        /// How it failed (one line).
        how: String,
    },
}

/// The kind of fix; the edge words it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum FixKind {
    /// PSEC is here and unused: start the node with `--sandbox psec`.
    StartWithPsec,
    /// Nothing to fix: tier 1 proven, routed as tier 0.
    None,
    /// The self-test failed at this property.
    SelfTestFailed {
        /// The property.
        property: Property,
    },
    /// Started with `--sandbox psec`, and the self-test has not run yet.
    SelfTestNotRun,
    /// This build has no PSEC; `seen_on` names a build of the same release that had it.
    NoPsec {
        /// A build PSEC was seen on, of this release.
        seen_on: Option<&'static str>,
    },
    /// Windows Server has no tier-1 sandbox.
    WindowsServer,
}

/// `sandbox check`'s result on Windows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    /// The tier this machine proved (1 only when the self-test passed).
    pub proven_tier: u8,
    /// The tier the edge routes it at: 0, always, on Windows.
    pub routed_tier: u8,
    /// PSEC's contract and features, when the probes found it.
    pub psec: Option<PsecMechanism>,
    /// Why the probes found no PSEC, when they did not.
    pub no_psec: Option<NoPsec>,
    /// The kind of fix.
    pub fix: FixKind,
    /// `Sandbox: tier N: …`.
    pub tier_line: String,
    /// The platform facts line.
    pub facts_line: String,
    /// `Fix: …`.
    pub fix_line: String,
}

/// PSEC's contract and features, as the report carries them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PsecMechanism {
    /// The contract, e.g. `1.0`.
    pub contract: String,
    /// Feature bits as reported.
    pub feature_bits: u64,
    /// Bits the reference SDK does not name.
    pub unnamed_bits: u64,
}

impl CheckReport {
    /// The three lines, in order.
    pub fn lines(&self) -> [&str; 3] {
        [&self.tier_line, &self.facts_line, &self.fix_line]
    }
}

const ELSEWHERE: &str = "meanwhile run tier-1 work on Linux or macOS nodes";

/// The report for these facts. Pure: the same facts give the same lines.
pub fn report(
    probe: &PsecProbe,
    started_with_psec: bool,
    selftest: Option<&SelfTest>,
) -> CheckReport {
    let build = probe
        .build
        .as_ref()
        .map_or_else(|| "(build unknown)".to_string(), |b| b.to_string());
    if probe.edition == Edition::Server {
        return CheckReport {
            proven_tier: 0,
            routed_tier: 0,
            psec: None,
            no_psec: probe.psec().err(),
            fix: FixKind::WindowsServer,
            tier_line: format!(
                "Sandbox: tier 0: Windows Server {build} has no tier-1 sandbox (MXC does not support Windows Server)"
            ),
            facts_line: format!("Windows Server {build}: PSEC not used on Windows Server"),
            fix_line: format!("Fix: Windows Server has no tier-1 sandbox: {ELSEWHERE}"),
        };
    }
    let facts = match probe.psec() {
        Ok(f) => f,
        Err(why) => return no_psec(probe, &build, why),
    };
    let c = facts.contract;
    let features = facts.features_text();
    let facts_line = format!("Windows {build}: PSEC contract {c} ({features})");
    let mech = Some(PsecMechanism {
        contract: c.to_string(),
        feature_bits: facts.bits,
        unnamed_bits: facts.unnamed_bits(),
    });
    let base = |proven_tier, fix, tier_line, fix_line| CheckReport {
        proven_tier,
        routed_tier: 0,
        psec: mech.clone(),
        no_psec: None,
        fix,
        tier_line,
        facts_line: facts_line.clone(),
        fix_line,
    };
    if !started_with_psec {
        return base(
            0,
            FixKind::StartWithPsec,
            format!(
                "Sandbox: tier 0: Windows build {build} has PSEC contract {c} ({features}), but this node does not run work in it: --sandbox psec runs the node's self-test of it at start"
            ),
            format!(
                "Fix: Windows' process security environment (PSEC contract {c}) is here, and this node does not run work in it: started with --sandbox psec, it reports tier 1 when its self-test passes, routed as tier 0; {ELSEWHERE}"
            ),
        );
    }
    match selftest {
        Some(SelfTest::Passed) => base(
            1,
            FixKind::None,
            format!(
                "Sandbox: tier 1 (psec {c}), routed as tier 0: PSEC contract {c} on Windows {build} passed the node's self-test ({} checks); Windows nodes are routed as tier 0 until their work runs in PSEC",
                Property::ALL.len()
            ),
            format!("Fix: none: the Nodes page shows tier 1 (psec {c}, routed as tier 0)"),
        ),
        Some(SelfTest::Failed { property, how }) => base(
            0,
            FixKind::SelfTestFailed {
                property: *property,
            },
            format!(
                "Sandbox: tier 0: PSEC contract {c} on Windows {build} failed the node's self-test at {property}: {}",
                one_line(how)
            ),
            format!(
                "Fix: the self-test failed at {property}: sandbox check --psec on the node says which check and how"
            ),
        ),
        None => base(
            0,
            FixKind::SelfTestNotRun,
            format!(
                "Sandbox: tier 0: PSEC contract {c} on Windows {build} is here, and the node's self-test of it has not run yet"
            ),
            "Fix: the self-test has not run: sandbox check --psec on the node runs it and says which check fails, if one does".to_string(),
        ),
    }
}

fn no_psec(probe: &PsecProbe, build: &str, why: NoPsec) -> CheckReport {
    let seen_on = probe.seen_on_same_release();
    let fix_line = match seen_on {
        Some(seen) => format!(
            "Fix: this build has no PSEC, which Windows tier 1 runs in: PSEC has been seen on build {seen} of the same release, so update Windows; {ELSEWHERE}"
        ),
        None => format!(
            "Fix: this build has no PSEC, which Windows tier 1 runs in: no build of this release has been seen with it; {ELSEWHERE}"
        ),
    };
    CheckReport {
        proven_tier: 0,
        routed_tier: 0,
        psec: None,
        no_psec: Some(why),
        fix: FixKind::NoPsec { seen_on },
        tier_line: format!(
            "Sandbox: tier 0: Windows build {build} has no PSEC, which Windows tier 1 runs in ({why})"
        ),
        facts_line: format!("Windows {build}: no PSEC: {why}"),
        fix_line,
    }
}

/// Keeps a self-test's detail on one line.
fn one_line(s: &str) -> String {
    s.split(['\r', '\n'])
        .filter(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::tests::found;
    use crate::probe::{CreateClose, WindowsBuild};

    fn no_psec_probe(build: &str) -> PsecProbe {
        let mut p = found(build, None, 0);
        p.api_set_implemented = false;
        p.exports = Default::default();
        p.support = None;
        p.create_close = CreateClose::NotRun;
        p
    }

    /// A machine: its name, what the probes found, whether the node was
    /// started with `--sandbox psec`, its self-test, then the tier, fix and
    /// lines the report must give.
    type Row<'a> = (
        &'a str,
        PsecProbe,
        bool,
        Option<&'a SelfTest>,
        u8,
        FixKind,
        [&'a str; 3],
    );

    /// The seed's table, row for row, plus the rows it implies.
    #[test]
    fn table_of_machines() {
        let failed = SelfTest::Failed {
            property: Property::Egress,
            how: "a direct connection to 127.0.0.1:50123 was accepted\nsecond line".into(),
        };
        let passed = SelfTest::Passed;
        for row in psec_rows(&passed, &failed)
            .into_iter()
            .chain(no_psec_rows(&passed))
        {
            check_row(row);
        }
    }

    /// Machines where the probes find PSEC.
    fn psec_rows<'a>(passed: &'a SelfTest, failed: &'a SelfTest) -> Vec<Row<'a>> {
        vec![
            (
                "PSEC found, not started with --sandbox psec",
                found("26200.9457", None, 0x3),
                false,
                None,
                0,
                FixKind::StartWithPsec,
                [
                    "Sandbox: tier 0: Windows build 26200.9457 has PSEC contract 1.0 (deny paths, flags 0x2, which MXC v1.0.0 does not name), but this node does not run work in it: --sandbox psec runs the node's self-test of it at start",
                    "Windows 26200.9457: PSEC contract 1.0 (deny paths, flags 0x2, which MXC v1.0.0 does not name)",
                    "Fix: Windows' process security environment (PSEC contract 1.0) is here, and this node does not run work in it: started with --sandbox psec, it reports tier 1 when its self-test passes, routed as tier 0; meanwhile run tier-1 work on Linux or macOS nodes",
                ],
            ),
            (
                "started with --sandbox psec, self-test passed",
                found("26300.9711", Some(1), 0xd),
                true,
                Some(passed),
                1,
                FixKind::None,
                [
                    "Sandbox: tier 1 (psec 1.1), routed as tier 0: PSEC contract 1.1 on Windows 26300.9711 passed the node's self-test (8 checks); Windows nodes are routed as tier 0 until their work runs in PSEC",
                    "Windows 26300.9711: PSEC contract 1.1 (deny paths, enumerate paths, ingress table)",
                    "Fix: none: the Nodes page shows tier 1 (psec 1.1, routed as tier 0)",
                ],
            ),
            (
                "started with --sandbox psec, self-test failed",
                found("26200.9457", None, 0x1),
                true,
                Some(failed),
                0,
                FixKind::SelfTestFailed { property: Property::Egress },
                [
                    "Sandbox: tier 0: PSEC contract 1.0 on Windows 26200.9457 failed the node's self-test at egress: a direct connection to 127.0.0.1:50123 was accepted; second line",
                    "Windows 26200.9457: PSEC contract 1.0 (deny paths)",
                    "Fix: the self-test failed at egress: sandbox check --psec on the node says which check and how",
                ],
            ),
            (
                "started with --sandbox psec, self-test not run yet",
                found("26200.9457", None, 0x1),
                true,
                None,
                0,
                FixKind::SelfTestNotRun,
                [
                    "Sandbox: tier 0: PSEC contract 1.0 on Windows 26200.9457 is here, and the node's self-test of it has not run yet",
                    "Windows 26200.9457: PSEC contract 1.0 (deny paths)",
                    "Fix: the self-test has not run: sandbox check --psec on the node runs it and says which check fails, if one does",
                ],
            ),
        ]
    }

    /// Machines without PSEC, or where it is not used.
    fn no_psec_rows(passed: &SelfTest) -> Vec<Row<'_>> {
        let mut server = found("26100.2894", Some(1), 0x1);
        server.edition = Edition::Server;
        vec![
            (
                "Windows 11 without PSEC, a build of its release was seen with it",
                no_psec_probe("26200.6584"),
                false,
                None,
                0,
                FixKind::NoPsec { seen_on: Some("26200.9457") },
                [
                    "Sandbox: tier 0: Windows build 26200.6584 has no PSEC, which Windows tier 1 runs in (the API set api-win-appmodel-processmodel~securityenvironment is not implemented)",
                    "Windows 26200.6584: no PSEC: the API set api-win-appmodel-processmodel~securityenvironment is not implemented",
                    "Fix: this build has no PSEC, which Windows tier 1 runs in: PSEC has been seen on build 26200.9457 of the same release, so update Windows; meanwhile run tier-1 work on Linux or macOS nodes",
                ],
            ),
            (
                "Windows 11 without PSEC, started with --sandbox psec (same as without)",
                no_psec_probe("26100.4349"),
                true,
                Some(passed),
                0,
                FixKind::NoPsec { seen_on: None },
                [
                    "Sandbox: tier 0: Windows build 26100.4349 has no PSEC, which Windows tier 1 runs in (the API set api-win-appmodel-processmodel~securityenvironment is not implemented)",
                    "Windows 26100.4349: no PSEC: the API set api-win-appmodel-processmodel~securityenvironment is not implemented",
                    "Fix: this build has no PSEC, which Windows tier 1 runs in: no build of this release has been seen with it; meanwhile run tier-1 work on Linux or macOS nodes",
                ],
            ),
            (
                "Windows Server, even where the probes find PSEC",
                server,
                true,
                Some(passed),
                0,
                FixKind::WindowsServer,
                [
                    "Sandbox: tier 0: Windows Server 26100.2894 has no tier-1 sandbox (MXC does not support Windows Server)",
                    "Windows Server 26100.2894: PSEC not used on Windows Server",
                    "Fix: Windows Server has no tier-1 sandbox: meanwhile run tier-1 work on Linux or macOS nodes",
                ],
            ),
        ]
    }

    /// The report of a machine is the row's.
    fn check_row((name, probe, started, st, tier, fix, lines): Row) {
        let r = report(&probe, started, st);
        assert_eq!(r.lines(), lines, "{name}");
        assert_eq!(r.proven_tier, tier, "{name}");
        assert_eq!(r.fix, fix, "{name}");
        assert_eq!(
            r.routed_tier, 0,
            "{name}: Windows is routed as tier 0 always"
        );
        assert!(r.tier_line.starts_with("Sandbox: tier "), "{name}");
        assert!(r.fix_line.starts_with("Fix: "), "{name}");
        assert!(!r.lines().iter().any(|l| l.contains('\n')), "{name}");
    }

    #[test]
    fn a_failed_create_is_no_psec_with_its_reason() {
        let mut p = found("26300.9711", Some(1), 0x1);
        // An HRESULT: the u32 bits Windows documents, read as its i32.
        #[allow(clippy::cast_possible_wrap)]
        let hresult = 0x8007_0005_u32 as i32;
        p.create_close = CreateClose::Failed { hresult };
        let r = report(&p, true, Some(&SelfTest::Passed));
        assert_eq!(r.proven_tier, 0);
        assert_eq!(
            r.facts_line,
            "Windows 26300.9711: no PSEC: a minimal environment failed to create (HRESULT 0x80070005)"
        );
    }

    #[test]
    fn unknown_build_is_said_so() {
        let mut p = found("26200.9457", None, 0x1);
        p.build = None;
        let r = report(&p, false, None);
        assert!(r
            .facts_line
            .starts_with("Windows (build unknown): PSEC contract 1.0"));
        let _ = WindowsBuild::parse("26200.9457").unwrap();
    }

    #[test]
    fn report_json_carries_kind_not_prose_only() {
        let r = report(
            &found("26200.9457", None, 0x3),
            true,
            Some(&SelfTest::Passed),
        );
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["routed_tier"], 0);
        assert_eq!(v["proven_tier"], 1);
        assert_eq!(v["fix"]["kind"], "none");
        assert_eq!(v["psec"]["contract"], "1.0");
        assert_eq!(v["psec"]["unnamed_bits"], 2);
        assert_eq!(
            Property::ALL.map(Property::name),
            [
                "launch",
                "files",
                "egress",
                "ingress",
                "job_limits",
                "fail_closed",
                "protected_paths",
                "environment"
            ]
        );
    }
}
