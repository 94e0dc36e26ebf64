//! The one place the node chooses its platform's walls, by target: the
//! tier-1 sandbox, the tier-0 sandbox and the wall (its check and
//! self-test), each the platform crate's (`oz0_linux`, `oz0_macos`,
//! `oz0_windows`). `sandbox run`, `sandbox check`, `sandbox vm`, `plugin`
//! and the daemon take them from here and run through the node core's door
//! (`oz0_core::Sandbox`, `oz0_core::Wall`); none of them names a
//! platform's runner. On Linux the tier-1 sandbox is the concrete `Tier1`,
//! which tool servers and microVM monitors also start in.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use oz0_core::Sandbox;

/// This platform's wall: what it has, and the self-test.
#[cfg(target_os = "linux")]
pub type PlatformWall = oz0_linux::LinuxWall;
/// This platform's wall: what it has, and the self-test.
#[cfg(target_os = "macos")]
pub type PlatformWall = oz0_macos::wall::MacWall;
/// This platform's wall: what it has, and the self-test.
#[cfg(windows)]
pub type PlatformWall = oz0_windows::wall::WindowsWall;

/// Why a wall cannot be made on this machine: each names what failed and,
/// where there is one, the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlatformError {
    /// Tier 1's host context cannot be made (Linux).
    #[cfg(target_os = "linux")]
    #[error(transparent)]
    Tier1(#[from] oz0_linux::SandboxError),
    /// The temporary folder or this binary cannot be named (macOS).
    #[cfg(target_os = "macos")]
    #[error(transparent)]
    Setup(#[from] oz0_macos::sandbox::SetupError),
    /// The PSEC probe could not ask Windows.
    #[cfg(windows)]
    #[error("the PSEC probe could not ask Windows: {0}")]
    Probe(oz0_windows::native::NativeError),
    /// The probes found no PSEC, and why.
    #[cfg(windows)]
    #[error("this machine has no PSEC ({0})")]
    NoPsec(oz0_windows::probe::NoPsec),
    /// PSEC cannot be set up for this node.
    #[cfg(windows)]
    #[error(transparent)]
    Psec(#[from] oz0_windows::psec::PsecError),
}

impl From<PlatformError> for String {
    fn from(e: PlatformError) -> String {
        e.to_string()
    }
}

/// What the walls are made with.
pub struct Settings {
    /// Where the host context's parts are (Linux).
    #[cfg(target_os = "linux")]
    pub host: crate::flags::HostArgs,
    /// Where runs' egress decisions go [default:
    /// <data-dir>/egress-audit.jsonl] (Linux).
    #[cfg(target_os = "linux")]
    pub audit_log: Option<PathBuf>,
    /// A fault in the self-test's own sandboxes (its tests only; Linux).
    #[cfg(target_os = "linux")]
    pub fault: Option<oz0_linux::Fault>,
    /// The node's data directory, when it has one (no run may see it; on
    /// macOS live runs are recorded in it).
    #[cfg(not(target_os = "linux"))]
    pub data_dir: Option<PathBuf>,
    /// The egress proxy runs with `--allow`/`--forward` reach (macOS).
    #[cfg(target_os = "macos")]
    pub egress: Arc<dyn oz0_egress::EgressService>,
    /// The node was told to use PSEC (`--sandbox psec`, `--psec`).
    #[cfg(windows)]
    pub psec: bool,
}

/// This node's walls.
pub struct Platform {
    s: Settings,
    /// The wall, probed once, when first asked for.
    wall: OnceLock<PlatformWall>,
}

/// The walls of this platform, made with `s`.
pub fn platform(s: Settings) -> Platform {
    Platform {
        s,
        wall: OnceLock::new(),
    }
}

#[cfg(target_os = "linux")]
impl Settings {
    /// The settings of `host`'s flags, with the default audit log and no
    /// fault.
    pub fn of(host: &crate::flags::HostArgs) -> Settings {
        Settings {
            host: host.clone(),
            audit_log: None,
            fault: None,
        }
    }
}

#[cfg(target_os = "linux")]
impl Platform {
    /// The platform's name, in refusals.
    pub const NAME: &'static str = "Linux";

    /// Linux's wall as the node has it: the host context's parts, and for
    /// the self-test's egress check a proxy of its own whose records go
    /// nowhere (the check's decisions are no one's), started only by that
    /// check.
    pub fn wall(&self) -> &PlatformWall {
        self.wall.get_or_init(|| {
            let quiet = oz0_egress::LazyProxy::new(Box::new(|| {
                Ok(oz0_egress::ProxyConfig {
                    audit: Arc::new(|_: &oz0_egress::AuditRecord| {}),
                    ..Default::default()
                })
            }));
            oz0_linux::LinuxWall {
                host: self.s.host.config(),
                egress: Arc::new(quiet),
                fault: self.s.fault,
            }
        })
    }

    /// The wall, owned (what keeps it for the node's life).
    pub fn into_wall(self) -> PlatformWall {
        self.wall();
        self.wall.into_inner().expect("made above")
    }

    /// Tier 1: the node's host context. Runs' egress decisions go to the
    /// audit log (never to the node's stderr, which the run shares and
    /// could forge records in or bury them under); the egress proxy starts
    /// with the first run that has egress, and the log is made then.
    pub fn tier1(&self) -> Result<oz0_linux::Tier1, PlatformError> {
        let host = oz0_linux::Tier1::open(self.s.host.config())?;
        let audit = self
            .s
            .audit_log
            .clone()
            .unwrap_or_else(|| host.data_dir().join(oz0_egress::AUDIT_LOG_NAME));
        let log = audit.clone();
        let proxy = oz0_egress::LazyProxy::with_audit_file(
            move || Ok(oz0_linux::hostfs::open_log("the egress audit log", &log)?),
            oz0_linux::hostfs::MAX_LOG,
        );
        Ok(host.with_egress(Arc::new(proxy), audit))
    }

    /// Tier 0: no wall (`--sandbox none`).
    pub fn tier0(&self) -> Result<Arc<dyn Sandbox>, PlatformError> {
        Ok(Arc::new(oz0_linux::plain::Plain))
    }
}

#[cfg(target_os = "macos")]
impl Platform {
    /// The platform's name, in refusals.
    pub const NAME: &'static str = "macOS";

    /// The wall: the Mac probed once (Seatbelt, the processor, macOS,
    /// Apple's container).
    pub fn wall(&self) -> &PlatformWall {
        self.wall.get_or_init(|| {
            oz0_macos::wall::MacWall::probe(self.s.data_dir.clone(), self.s.egress.clone())
        })
    }

    /// Tier 1: Seatbelt, its live runs recorded in the data directory.
    pub fn tier1(&self) -> Result<Box<dyn Sandbox>, PlatformError> {
        let records = self.s.data_dir.as_deref().map(oz0_macos::runs::records);
        Ok(Box::new(oz0_macos::sandbox::Seatbelt::new(
            self.s.egress.clone(),
            None,
            records,
        )?))
    }

    /// Tier 0: no wall, every process of a run still ended with it.
    pub fn tier0(&self) -> Result<Arc<dyn Sandbox>, PlatformError> {
        Ok(Arc::new(oz0_macos::sandbox::Plain {
            temp_root: oz0_macos::sandbox::temp_root()?,
            records: self.s.data_dir.as_deref().map(oz0_macos::runs::records),
        }))
    }
}

#[cfg(windows)]
impl Platform {
    /// The platform's name, in refusals.
    pub const NAME: &'static str = "Windows";

    /// The wall: PSEC probed once.
    pub fn wall(&self) -> &PlatformWall {
        self.wall.get_or_init(|| {
            oz0_windows::wall::WindowsWall::probe(self.s.psec, self.s.data_dir.clone())
        })
    }

    /// Tier 1: a PSEC container, where the probes find PSEC (else why not).
    pub fn tier1(&self) -> Result<Box<dyn Sandbox>, PlatformError> {
        let probe = self
            .wall()
            .probe
            .as_ref()
            .map_err(|e| PlatformError::Probe(e.clone()))?;
        let facts = probe.psec().map_err(PlatformError::NoPsec)?;
        Ok(Box::new(oz0_windows::psec::Psec::new(facts)?))
    }

    /// Tier 0: no wall, every process of a run in its job object.
    pub fn tier0(&self) -> Result<Arc<dyn Sandbox>, PlatformError> {
        let _ = &self.s.data_dir;
        Ok(Arc::new(oz0_windows::tier0::JobObject::new()))
    }
}
