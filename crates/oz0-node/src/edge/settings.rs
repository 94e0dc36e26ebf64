//! What `oz0-node run --edge` needs, checked before the node starts: the
//! edges, the tenant, the enrolment token, the folders, and the refusals
//! that name the flag and the fix.

use std::path::{Path, PathBuf};
use std::time::Duration;

use oz0_edge::client::{ClientError, NodeClient, NodeKey};

use super::retention;

/// What `--edge` needs, checked before the node starts.
#[derive(Debug)]
pub struct Settings {
    /// The edges, in the order they are tried (replicas on one store).
    pub(super) urls: Vec<String>,
    pub(super) tenant: String,
    pub(super) token: String,
    pub(super) name: Option<String>,
    pub(super) work_root: PathBuf,
    pub(super) data_dir: PathBuf,
    pub(super) poll: Duration,
    pub(super) recheck: Duration,
    /// The node's platform, named in refusals (`Linux`, `Windows`, `macOS`).
    pub(super) platform: &'static str,
    #[cfg(target_os = "linux")]
    pub(super) sandbox_none: bool,
    #[cfg(target_os = "linux")]
    pub(super) host: crate::flags::HostArgs,
    /// The variables of this node's environment tool jobs may be given.
    #[cfg(unix)]
    pub(super) tool_env: std::collections::BTreeSet<String>,
    /// What the edge's certificate is verified against.
    pub(super) trust: oz0_edge::client::Trust,
    /// Jobs run at once.
    pub(super) jobs: usize,
    /// How long job records are kept.
    pub(super) keep: retention::Retention,
    /// Where container tools' images come from.
    #[cfg(target_os = "linux")]
    pub(super) oci: crate::flags::OciArgs,
    /// A Mac's microVMs' guest binary, fetched from the edge at start.
    pub(super) guest: Option<GuestFetch>,
}

/// What a node fetches from its edge at start, before it reports its
/// facts: the Linux node binary its microVMs' bridge runs (a Mac with
/// Apple's container), of its own version, signed by the release key it
/// was built with. Where it fails, the facts say no microVMs and why.
#[derive(Debug, Clone)]
pub struct GuestFetch {
    /// `<data dir>/microvm/guest`: other versions' copies there are removed.
    pub dir: PathBuf,
    /// The release key this build trusts.
    pub key: oz0_edge::release::VerifyingKey,
    /// The OS and architecture of the binary (`linux`, `aarch64`).
    pub target: (&'static str, &'static str),
}

#[cfg(target_os = "macos")]
impl Settings {
    /// With the guest binary fetched at start.
    pub fn with_guest(mut self, g: GuestFetch) -> Settings {
        self.guest = Some(g);
        self
    }

    /// With the variables tool jobs may be given (`--tool-env`, each name
    /// checked by its parser).
    pub fn with_tool_env(mut self, names: &[String]) -> Settings {
        self.tool_env = names.iter().cloned().collect();
        self
    }
}

/// Why the flags of `run --edge` are refused: each names the flag, the
/// value and the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SettingsError {
    /// A path that cannot be made absolute.
    #[error("{flag} {}: {source}", path.display())]
    Path {
        /// The flag.
        flag: &'static str,
        /// Its value.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// An edge URL (or the CA file) the client refuses.
    #[error("--edge: {0}")]
    Edge(ClientError),
    /// Not a tenant name.
    #[error(
        "--tenant {0:?} is not a tenant name: lower-case letters, digits, - and _ (at most 63)"
    )]
    Tenant(String),
    /// No enrolment token file.
    #[error("--edge needs --enrolment-token-file FILE (mode 0600)")]
    NoTokenFile,
    /// The enrolment token file.
    #[cfg(unix)]
    #[error(transparent)]
    Token(#[from] crate::private::PrivateError),
    /// The enrolment token file, as the platform read it.
    #[cfg(windows)]
    #[error("{0}")]
    TokenFile(String),
    /// The work root and the data directory overlap.
    #[error("--work-root {} overlaps the data directory {}, which no job may see: name a folder outside it", work_root.display(), data_dir.display())]
    Overlap {
        /// --work-root.
        work_root: PathBuf,
        /// The data directory.
        data_dir: PathBuf,
    },
    /// A --tool-env name a run may not be given.
    #[cfg(target_os = "linux")]
    #[error("--tool-env {name:?}: {source}")]
    ToolEnv {
        /// The name.
        name: String,
        /// Why.
        source: oz0_policy::env::EnvError,
    },
}

/// What every platform's `run --edge` shares, checked: the trust, the
/// edges' URLs, the tenant, and the token file (read by `read`).
struct Link {
    trust: oz0_edge::client::Trust,
    tenant: String,
    token: String,
}

impl Link {
    fn check(
        urls: &[String],
        link: &crate::flags::EdgeFlags,
        read: impl FnOnce(&Path) -> Result<String, SettingsError>,
    ) -> Result<Link, SettingsError> {
        let trust = match &link.edge_ca {
            Some(f) => oz0_edge::client::Trust::CaFile(absolute(f, "--edge-ca")?),
            None => oz0_edge::client::Trust::System,
        };
        // Parsing the URL (and the CA file) now says a wrong one before the
        // self-test runs.
        for url in urls {
            NodeClient::with_trust(url, "probe", NodeKey::generate(), &trust)
                .map_err(SettingsError::Edge)?;
        }
        let tenant = link.tenant.clone().unwrap_or_default();
        if !oz0_edge::routing::is_tenant(&tenant) {
            return Err(SettingsError::Tenant(tenant));
        }
        let token_file = link
            .enrolment_token_file
            .as_deref()
            .ok_or(SettingsError::NoTokenFile)?;
        Ok(Link {
            trust,
            tenant,
            token: read(token_file)?,
        })
    }
}

/// The work root (`flag`, or `default`), refused where it overlaps the
/// data directory (`overlap` compares as the system does); the data
/// directory, absolute.
fn folders(
    flag: Option<&Path>,
    default: PathBuf,
    data_dir: &Path,
    overlap: impl Fn(&Path, &Path) -> bool,
) -> Result<(PathBuf, PathBuf), SettingsError> {
    let work_root = match flag {
        Some(w) => absolute(w, "--work-root")?,
        None => default,
    };
    let data_abs = absolute(data_dir, "--data-dir")?;
    if overlap(&work_root, &data_abs) {
        return Err(SettingsError::Overlap {
            work_root,
            data_dir: data_abs,
        });
    }
    Ok((work_root, data_abs))
}

impl Settings {
    /// Checks Linux's flags and reads the enrolment token.
    #[cfg(target_os = "linux")]
    pub fn from_args(
        urls: &[String],
        a: &crate::flags::NodeArgs,
        data_dir: &Path,
    ) -> Result<Settings, SettingsError> {
        let Link {
            trust,
            tenant,
            token,
        } = Link::check(urls, &a.daemon.link, |f| Ok(crate::private::read_token(f)?))?;
        let (work_root, data_abs) = folders(
            a.daemon.work_root.as_deref(),
            std::env::temp_dir().join(format!(
                "oz0-node-work-{}",
                rustix::process::getuid().as_raw()
            )),
            data_dir,
            |a, b| a.starts_with(b) || b.starts_with(a),
        )?;
        let name = match &a.daemon.name {
            Some(n) => Some(n.clone()),
            // A host name the edge would refuse is not sent: the node
            // registers without one (shown by its id).
            None => std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_ascii_lowercase())
                .filter(|h| oz0_edge::sanitize::is_usable_node_name(h)),
        };
        Ok(Settings {
            urls: urls.to_vec(),
            tenant,
            token,
            name,
            work_root,
            data_dir: data_abs,
            poll: a.daemon.poll_every(),
            recheck: Duration::from_secs(a.recheck_secs.max(1)),
            platform: crate::platform::Platform::NAME,
            sandbox_none: a.sandbox == crate::flags::Sandbox::None,
            host: a.host.clone(),
            tool_env: a
                .tools
                .tool_env
                .iter()
                .map(|n| {
                    oz0_policy::env::EnvName::new(n)
                        .map(|_| n.clone())
                        .map_err(|source| SettingsError::ToolEnv {
                            name: n.clone(),
                            source,
                        })
                })
                .collect::<Result<_, _>>()?,
            trust,
            oci: a.oci.clone(),
            // --jobs is at least 1 (its parser).
            jobs: a
                .jobs
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
            keep: retention::Retention::new(a.keep_jobs_days, a.keep_jobs_mib),
            guest: None,
        })
    }
}

/// What a Windows or macOS node gives [`Settings::from_daemon`].
#[cfg(not(target_os = "linux"))]
pub struct PlatformLink<'a> {
    /// Reads the enrolment token from a file only the node's user can read.
    pub read_token: &'a dyn Fn(&Path) -> Result<String, SettingsError>,
    /// This machine's name.
    pub name: Option<String>,
    /// The temporary folder jobs' work folders go under by default.
    pub temp: PathBuf,
    /// Whether two paths overlap as this system compares them.
    pub overlap: &'a dyn Fn(&Path, &Path) -> bool,
    /// The node's platform, for refusals (`Windows`, `macOS`).
    pub platform: &'static str,
}

#[cfg(not(target_os = "linux"))]
impl Settings {
    /// Checks the daemon's flags of Windows and macOS (None without
    /// --edge) and reads the enrolment token.
    pub fn from_daemon(
        f: &crate::flags::DaemonFlags,
        data_dir: &Path,
        p: PlatformLink,
    ) -> Result<Option<Settings>, SettingsError> {
        let urls = &f.link.edge;
        if urls.is_empty() {
            return Ok(None);
        }
        let Link {
            trust,
            tenant,
            token,
        } = Link::check(urls, &f.link, p.read_token)?;
        let (work_root, data_abs) = folders(
            f.work_root.as_deref(),
            p.temp.join("oz0-node-work"),
            data_dir,
            p.overlap,
        )?;
        Ok(Some(Settings {
            urls: urls.clone(),
            tenant,
            token,
            // A machine name the edge would refuse is not sent: the node
            // registers without one (shown by its id).
            name: f.name.clone().or(p
                .name
                .filter(|n| oz0_edge::sanitize::is_usable_node_name(n))),
            work_root,
            data_dir: data_abs,
            poll: f.poll_every(),
            // Its facts are probed once, at start.
            recheck: Duration::from_secs(u64::from(u32::MAX)),
            platform: p.platform,
            trust,
            // One job at a time: a tier-0 job has the node's own rights.
            jobs: 1,
            keep: retention::Retention::new(
                crate::flags::DEFAULT_KEEP_DAYS,
                crate::flags::DEFAULT_KEEP_MIB,
            ),
            guest: None,
            #[cfg(unix)]
            tool_env: Default::default(),
        }))
    }
}

fn absolute(p: &Path, flag: &'static str) -> Result<PathBuf, SettingsError> {
    std::path::absolute(p).map_err(|source| SettingsError::Path {
        flag,
        path: p.to_path_buf(),
        source,
    })
}
