//! What the PSEC probe found, as data.
//!
//! The probe asks Windows the way Microsoft's MXC asks it, in this order, and
//! stops at the first answer that rules PSEC out: is the API set
//! [`API_SET`] implemented → does `processmodel.dll` (loaded from System32
//! only) export the create, support-query and close functions → which
//! contract does it support (a missing version export means 1.0 only) → which
//! optional features does it report → does a minimal environment create and
//! close. It never reads a build number to decide anything: the build only
//! appears in the text, and in the fix as a build PSEC was seen on.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The API set whose presence MXC checks first.
pub const API_SET: &str = "api-win-appmodel-processmodel~securityenvironment";
/// The DLL exporting the PSEC functions (loaded from System32 only).
pub const DLL: &str = "processmodel.dll";
/// Required export: creates an environment from a PSEC spec.
pub const EXPORT_CREATE: &str = "CreateProcessSecurityEnvironment";
/// Required export: reports optional features as bits.
pub const EXPORT_QUERY_SUPPORT: &str = "QueryProcessSecurityEnvironmentSupport";
/// Required export: closes an environment.
pub const EXPORT_CLOSE: &str = "CloseProcessSecurityEnvironment";
/// Optional export: which minor contract of a major one is supported. Missing means 1.0 only.
pub const EXPORT_VERSION: &str = "IsProcessSecurityEnvironmentVersionSupported";

/// The SDK release whose feature names we know; bits it does not name are
/// reported as such.
pub const REFERENCE_SDK: &str = "MXC v1.0.0";

/// Windows edition, as the registry's `InstallationType` says (or, where
/// it is absent, `ProductType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Edition {
    /// Windows 10/11 (`Client`).
    Client,
    /// Windows Server (`Server`, `Server Core`, `Nano Server`): MXC does not support it.
    Server,
}

impl Edition {
    /// The edition from the registry: `InstallationType` (`Client`,
    /// `Server`, `Server Core`, `Nano Server`) where Windows sets it, else
    /// `ProductType` (`WinNT` is a workstation; `ServerNT` and `LanmanNT`
    /// are servers), as Windows before 8.1 and Wine have it. Anything else,
    /// or neither, counts as a server: not a client PSEC is known on.
    pub fn from_registry(installation_type: Option<&str>, product_type: Option<&str>) -> Edition {
        match (installation_type, product_type) {
            (Some("Client"), _) => Edition::Client,
            (Some(_), _) => Edition::Server,
            (None, Some(p)) if p.eq_ignore_ascii_case("WinNT") => Edition::Client,
            _ => Edition::Server,
        }
    }
}

/// A Windows build as `CurrentBuildNumber.UBR`, e.g. `26200.9457`, or the
/// build number alone where the registry has no `UBR` (`18362`). Only
/// shown and matched against builds PSEC was seen on; never compared.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct WindowsBuild(String);

/// A build string that is not `DIGITS.DIGITS`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a Windows build of the form 26200.9457 (CurrentBuildNumber.UBR) or 26200")]
pub struct BuildError(String);

impl WindowsBuild {
    /// Parses `NNNNN.NNNN` or `NNNNN` strictly (the forms the edge keeps).
    pub fn parse(s: &str) -> Result<Self, BuildError> {
        let digits = |a: &str, n: std::ops::RangeInclusive<usize>| {
            n.contains(&a.len()) && a.bytes().all(|c| c.is_ascii_digit())
        };
        let ok = match s.split_once('.') {
            Some((a, b)) => digits(a, 4..=5) && digits(b, 1..=6),
            None => digits(s, 4..=5),
        };
        if ok {
            Ok(WindowsBuild(s.to_string()))
        } else {
            Err(BuildError(s.chars().take(40).collect()))
        }
    }

    /// The build from the registry's `CurrentBuildNumber` and `UBR` (the
    /// update revision, absent on some systems): None when the number is not
    /// a build.
    pub fn from_registry(number: &str, ubr: Option<u32>) -> Option<WindowsBuild> {
        match ubr {
            Some(u) => WindowsBuild::parse(&format!("{number}.{u}")).ok(),
            None => WindowsBuild::parse(number).ok(),
        }
    }

    /// The release part (`26200` of `26200.9457`).
    pub fn release(&self) -> &str {
        self.0.split('.').next().expect("checked at parse")
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for WindowsBuild {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for WindowsBuild {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl TryFrom<String> for WindowsBuild {
    type Error = BuildError;
    fn try_from(s: String) -> Result<Self, BuildError> {
        Self::parse(&s)
    }
}

impl From<WindowsBuild> for String {
    fn from(b: WindowsBuild) -> String {
        b.0
    }
}

/// Builds PSEC has been seen on, by release. Used only to name one in the fix
/// for a machine of the same release whose probes find no PSEC.
pub const SEEN_WITH_PSEC: &[&str] = &["26200.9457", "26300.9711"];

/// Which exports `GetProcAddress` found in `processmodel.dll`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exports {
    /// [`EXPORT_CREATE`].
    pub create: bool,
    /// [`EXPORT_QUERY_SUPPORT`].
    pub query_support: bool,
    /// [`EXPORT_CLOSE`].
    pub close: bool,
    /// [`EXPORT_VERSION`] (optional).
    pub version: bool,
}

/// A PSEC contract version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Contract {
    /// Major (1).
    pub major: u16,
    /// Minor.
    pub minor: u16,
}

impl Contract {
    /// 1.0: the contract of a DLL without the version export.
    pub const V1_0: Contract = Contract { major: 1, minor: 0 };
    /// 1.1: adds enumerate paths and the ingress table.
    pub const V1_1: Contract = Contract { major: 1, minor: 1 };
}

impl fmt::Display for Contract {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The answer of the version export for major version 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "answer")]
pub enum VersionAnswer {
    /// Major 1 is available, up to this minor.
    Available {
        /// Highest minor supported.
        minor: u16,
    },
    /// Major 1 is not available.
    Unavailable,
    /// The call failed with this HRESULT.
    Failed {
        /// HRESULT.
        hresult: i32,
    },
}

/// The answer of the support-query export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "answer")]
pub enum SupportAnswer {
    /// The feature bits.
    Flags {
        /// Bits (see [`Feature`]).
        bits: u64,
    },
    /// The call failed with this HRESULT.
    Failed {
        /// HRESULT.
        hresult: i32,
    },
}

/// The create/close test of a minimal environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "result")]
pub enum CreateClose {
    /// Created and closed.
    Passed,
    /// Create failed with this HRESULT.
    Failed {
        /// HRESULT.
        hresult: i32,
    },
    /// Not run (an earlier step ruled PSEC out).
    NotRun,
}

/// Everything the probe found. Fields after the first `false`/failure are
/// whatever the probe recorded; [`PsecProbe::psec`] reads them in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PsecProbe {
    /// Client or Server.
    pub edition: Edition,
    /// `CurrentBuildNumber.UBR`, when readable.
    pub build: Option<WindowsBuild>,
    /// `IsApiSetImplemented(API_SET)`.
    pub api_set_implemented: bool,
    /// Exports found (all false when the DLL did not load from System32).
    pub exports: Exports,
    /// The version export's answer; `None` when the export is missing (⇒ 1.0).
    pub version: Option<VersionAnswer>,
    /// The support query's answer; `None` when not asked.
    pub support: Option<SupportAnswer>,
    /// The create/close test.
    pub create_close: CreateClose,
}

/// An optional PSEC feature, by its bit in the support query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Feature {
    /// Native filesystem deny paths (bit 0x1, contract 1.0).
    DenyPaths,
    /// Enumeration-only paths (bit 0x4, contract 1.1).
    EnumeratePaths,
    /// The ingress policy table (bit 0x8, contract 1.1).
    IngressTable,
}

impl Feature {
    /// Every feature the reference SDK names.
    pub const ALL: [Feature; 3] = [
        Feature::DenyPaths,
        Feature::EnumeratePaths,
        Feature::IngressTable,
    ];

    /// Its bit.
    pub const fn bit(self) -> u64 {
        match self {
            Feature::DenyPaths => 0x1,
            Feature::EnumeratePaths => 0x4,
            Feature::IngressTable => 0x8,
        }
    }

    /// The contract that must be supported for the bit to count.
    pub const fn needs(self) -> Contract {
        match self {
            Feature::DenyPaths => Contract::V1_0,
            Feature::EnumeratePaths | Feature::IngressTable => Contract::V1_1,
        }
    }

    /// How the report names it.
    pub const fn label(self) -> &'static str {
        match self {
            Feature::DenyPaths => "deny paths",
            Feature::EnumeratePaths => "enumerate paths",
            Feature::IngressTable => "ingress table",
        }
    }
}

/// The bits every named feature uses.
pub const NAMED_BITS: u64 = 0x1 | 0x4 | 0x8;

/// PSEC as found: its contract and feature bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PsecFacts {
    /// The highest contract supported.
    pub contract: Contract,
    /// The raw feature bits.
    pub bits: u64,
}

impl PsecFacts {
    /// True when the feature's bit is set and the contract it needs is supported.
    pub fn supports(&self, f: Feature) -> bool {
        self.bits & f.bit() != 0 && self.contract >= f.needs()
    }

    /// Bits the reference SDK does not name.
    pub fn unnamed_bits(&self) -> u64 {
        self.bits & !NAMED_BITS
    }

    /// `deny paths, flags 0x2, which MXC v1.0.0 does not name`, or `no optional features`.
    pub fn features_text(&self) -> String {
        let mut parts: Vec<String> = Feature::ALL
            .iter()
            .filter(|f| self.bits & f.bit() != 0)
            .map(|f| f.label().to_string())
            .collect();
        if self.unnamed_bits() != 0 {
            parts.push(format!(
                "flags {:#x}, which {REFERENCE_SDK} does not name",
                self.unnamed_bits()
            ));
        }
        if parts.is_empty() {
            "no optional features".to_string()
        } else {
            parts.join(", ")
        }
    }
}

/// Why the probes found no PSEC: the first step that ruled it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "step")]
pub enum NoPsec {
    /// The API set is not implemented.
    ApiSetMissing,
    /// A required export is missing.
    ExportMissing {
        /// Which one.
        export: &'static str,
    },
    /// The version export says contract 1 is not available.
    ContractUnavailable,
    /// The version export failed.
    VersionQueryFailed {
        /// HRESULT.
        hresult: i32,
    },
    /// The support query failed or was not made.
    SupportQueryFailed {
        /// HRESULT (0 when not made).
        hresult: i32,
    },
    /// A minimal environment did not create.
    CreateFailed {
        /// HRESULT.
        hresult: i32,
    },
    /// The create/close test did not run.
    CreateNotRun,
}

impl fmt::Display for NoPsec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoPsec::ApiSetMissing => write!(f, "the API set {API_SET} is not implemented"),
            NoPsec::ExportMissing { export } => {
                write!(f, "{DLL} in System32 does not export {export}")
            }
            NoPsec::ContractUnavailable => write!(f, "{DLL} supports no PSEC contract 1.x"),
            NoPsec::VersionQueryFailed { hresult } => {
                // `x` of an i32 shows its two's-complement bits: an HRESULT
                // as Windows writes it (0x8007...).
                write!(f, "{EXPORT_VERSION} failed with HRESULT {hresult:#010x}")
            }
            NoPsec::SupportQueryFailed { hresult } => write!(
                f,
                "{EXPORT_QUERY_SUPPORT} failed with HRESULT {hresult:#010x}"
            ),
            NoPsec::CreateFailed { hresult } => write!(
                f,
                "a minimal environment failed to create (HRESULT {hresult:#010x})"
            ),
            NoPsec::CreateNotRun => write!(f, "the create/close test did not run"),
        }
    }
}

impl PsecProbe {
    /// Reads the facts in MXC's order: PSEC and what it supports, or the
    /// first step that ruled it out. Fails closed: anything not positively
    /// answered counts as absent.
    pub fn psec(&self) -> Result<PsecFacts, NoPsec> {
        if !self.api_set_implemented {
            return Err(NoPsec::ApiSetMissing);
        }
        for (found, export) in [
            (self.exports.create, EXPORT_CREATE),
            (self.exports.query_support, EXPORT_QUERY_SUPPORT),
            (self.exports.close, EXPORT_CLOSE),
        ] {
            if !found {
                return Err(NoPsec::ExportMissing { export });
            }
        }
        let contract = match (self.exports.version, self.version) {
            (false, _) => Contract::V1_0,
            (true, Some(VersionAnswer::Available { minor })) => Contract { major: 1, minor },
            (true, Some(VersionAnswer::Unavailable)) => return Err(NoPsec::ContractUnavailable),
            (true, Some(VersionAnswer::Failed { hresult })) => {
                return Err(NoPsec::VersionQueryFailed { hresult })
            }
            (true, None) => return Err(NoPsec::VersionQueryFailed { hresult: 0 }),
        };
        let bits = match self.support {
            Some(SupportAnswer::Flags { bits }) => bits,
            Some(SupportAnswer::Failed { hresult }) => {
                return Err(NoPsec::SupportQueryFailed { hresult })
            }
            None => return Err(NoPsec::SupportQueryFailed { hresult: 0 }),
        };
        match self.create_close {
            CreateClose::Passed => Ok(PsecFacts { contract, bits }),
            CreateClose::Failed { hresult } => Err(NoPsec::CreateFailed { hresult }),
            CreateClose::NotRun => Err(NoPsec::CreateNotRun),
        }
    }

    /// A build PSEC was seen on, of this machine's release, if any.
    pub fn seen_on_same_release(&self) -> Option<&'static str> {
        let release = self.build.as_ref()?.release();
        SEEN_WITH_PSEC
            .iter()
            .copied()
            .find(|b| b.split('.').next() == Some(release))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A probe of a machine where everything answered.
    pub(crate) fn found(build: &str, version: Option<u16>, bits: u64) -> PsecProbe {
        PsecProbe {
            edition: Edition::Client,
            build: Some(WindowsBuild::parse(build).unwrap()),
            api_set_implemented: true,
            exports: Exports {
                create: true,
                query_support: true,
                close: true,
                version: version.is_some(),
            },
            version: version.map(|minor| VersionAnswer::Available { minor }),
            support: Some(SupportAnswer::Flags { bits }),
            create_close: CreateClose::Passed,
        }
    }

    #[test]
    fn missing_version_export_means_1_0() {
        let p = found("26200.9457", None, 0x3).psec().unwrap();
        assert_eq!(p.contract, Contract::V1_0);
        assert_eq!(p.contract.to_string(), "1.0");
        let p = found("26300.9711", Some(1), 0xb).psec().unwrap();
        assert_eq!(p.contract, Contract::V1_1);
    }

    #[test]
    fn features_need_their_contract_and_unnamed_bits_are_named_as_such() {
        let p = found("26200.9457", None, 0x3).psec().unwrap();
        assert!(p.supports(Feature::DenyPaths));
        assert_eq!(
            p.features_text(),
            "deny paths, flags 0x2, which MXC v1.0.0 does not name"
        );
        // The ingress bit on a 1.0 contract does not count.
        let p = found("26200.9457", None, 0x8).psec().unwrap();
        assert!(!p.supports(Feature::IngressTable));
        let p = found("26300.9711", Some(1), 0x8).psec().unwrap();
        assert!(p.supports(Feature::IngressTable));
        let p = found("26300.9711", Some(1), 0).psec().unwrap();
        assert_eq!(p.features_text(), "no optional features");
    }

    #[test]
    fn each_step_rules_out_in_order() {
        type Edit = fn(&mut PsecProbe);
        let cases: &[(Edit, NoPsec)] = &[
            (|p| p.api_set_implemented = false, NoPsec::ApiSetMissing),
            (
                |p| p.exports.create = false,
                NoPsec::ExportMissing {
                    export: EXPORT_CREATE,
                },
            ),
            (
                |p| p.exports.query_support = false,
                NoPsec::ExportMissing {
                    export: EXPORT_QUERY_SUPPORT,
                },
            ),
            (
                |p| p.exports.close = false,
                NoPsec::ExportMissing {
                    export: EXPORT_CLOSE,
                },
            ),
            (
                |p| p.version = Some(VersionAnswer::Unavailable),
                NoPsec::ContractUnavailable,
            ),
            (
                |p| p.version = Some(VersionAnswer::Failed { hresult: -1 }),
                NoPsec::VersionQueryFailed { hresult: -1 },
            ),
            (
                |p| p.support = Some(SupportAnswer::Failed { hresult: 5 }),
                NoPsec::SupportQueryFailed { hresult: 5 },
            ),
            (
                |p| p.support = None,
                NoPsec::SupportQueryFailed { hresult: 0 },
            ),
            (
                |p| p.create_close = CreateClose::Failed { hresult: 7 },
                NoPsec::CreateFailed { hresult: 7 },
            ),
            (
                |p| p.create_close = CreateClose::NotRun,
                NoPsec::CreateNotRun,
            ),
        ];
        for (edit, want) in cases {
            let mut p = found("26300.9711", Some(1), 0x1);
            edit(&mut p);
            assert_eq!(p.psec(), Err(*want));
        }
    }

    #[test]
    fn builds_are_strict_and_only_matched_by_release() {
        assert!(WindowsBuild::parse("26200.9457").is_ok());
        // A registry without UBR (Wine's, older Windows): the number alone.
        assert_eq!(WindowsBuild::parse("18362").unwrap().release(), "18362");
        for bad in [
            "x.1",
            "26200.",
            "262000000.1",
            "26200.9457 ",
            "",
            "262",
            "1.2.3",
        ] {
            assert!(WindowsBuild::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            WindowsBuild::from_registry("26200", Some(9457))
                .unwrap()
                .as_str(),
            "26200.9457"
        );
        assert_eq!(
            WindowsBuild::from_registry("18362", None).unwrap().as_str(),
            "18362"
        );
        assert_eq!(WindowsBuild::from_registry("Vista", None), None);
        let mut p = found("26200.7000", None, 0);
        assert_eq!(p.seen_on_same_release(), Some("26200.9457"));
        p.build = Some(WindowsBuild::parse("26100.4000").unwrap());
        assert_eq!(p.seen_on_same_release(), None);
        p.build = None;
        assert_eq!(p.seen_on_same_release(), None);
    }

    #[test]
    fn edition_from_the_registry() {
        use Edition::{Client, Server};
        for (it, pt, want) in [
            (Some("Client"), None, Client),
            (Some("Client"), Some("ServerNT"), Client),
            (Some("Server"), Some("WinNT"), Server),
            (Some("Server Core"), None, Server),
            (Some("Nano Server"), None, Server),
            (None, Some("WinNT"), Client),
            (None, Some("ServerNT"), Server),
            (None, Some("LanmanNT"), Server),
            (None, None, Server),
        ] {
            assert_eq!(Edition::from_registry(it, pt), want, "{it:?} {pt:?}");
        }
    }

    #[test]
    fn probe_json_rejects_unknown_fields() {
        let p = found("26200.9457", None, 0x3);
        let mut v = serde_json::to_value(&p).unwrap();
        assert_eq!(serde_json::from_value::<PsecProbe>(v.clone()).unwrap(), p);
        v["surprise"] = serde_json::json!(1);
        assert!(serde_json::from_value::<PsecProbe>(v).is_err());
    }
}
