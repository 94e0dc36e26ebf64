//! What `oz0-node run --edge` needs, checked before the node starts: the
//! edges, the tenant, the enrolment token, the folders, and the refusals
//! that name the flag and the fix.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use oz0_edge::client::{ClientError, NodeClient, NodeKey};

use super::retention;
use crate::flags::NodeArgs;

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
    pub(super) sandbox_none: bool,
    pub(super) host: crate::flags::HostArgs,
    /// The variables of this node's environment tool jobs may be given.
    pub(super) tool_env: std::collections::BTreeSet<String>,
    /// What the edge's certificate is verified against.
    pub(super) trust: oz0_edge::client::Trust,
    /// Jobs run at once.
    pub(super) jobs: usize,
    /// How long job records are kept.
    pub(super) keep: retention::Retention,
    /// Where container tools' images come from.
    pub(super) oci: crate::flags::OciArgs,
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
    #[error(transparent)]
    Token(#[from] crate::private::PrivateError),
    /// The work root and the data directory overlap.
    #[error("--work-root {} overlaps the data directory {}, which no job may see: name a folder outside it", work_root.display(), data_dir.display())]
    Overlap {
        /// --work-root.
        work_root: PathBuf,
        /// The data directory.
        data_dir: PathBuf,
    },
    /// A --tool-env name a run may not be given.
    #[error("--tool-env {name:?}: {source}")]
    ToolEnv {
        /// The name.
        name: String,
        /// Why.
        source: oz0_policy::env::EnvError,
    },
}

impl Settings {
    /// Checks the flags and reads the enrolment token.
    pub fn from_args(
        urls: &[String],
        a: &NodeArgs,
        data_dir: &Path,
    ) -> Result<Settings, SettingsError> {
        let trust = match &a.link.edge_ca {
            Some(f) => oz0_edge::client::Trust::CaFile(absolute(f, "--edge-ca")?),
            None => oz0_edge::client::Trust::System,
        };
        // Parsing the URL (and the CA file) now says a wrong one before the
        // self-test runs.
        for url in urls {
            NodeClient::with_trust(url, "probe", NodeKey::generate(), &trust)
                .map_err(SettingsError::Edge)?;
        }
        let tenant = a.link.tenant.clone().unwrap_or_default();
        if !oz0_edge::routing::is_tenant(&tenant) {
            return Err(SettingsError::Tenant(tenant));
        }
        let token_file = a
            .link
            .enrolment_token_file
            .as_deref()
            .ok_or(SettingsError::NoTokenFile)?;
        let token = crate::private::read_token(token_file)?;
        let work_root = match &a.work_root {
            Some(w) => absolute(w, "--work-root")?,
            None => std::env::temp_dir().join(format!(
                "oz0-node-work-{}",
                rustix::process::getuid().as_raw()
            )),
        };
        let data_abs = absolute(data_dir, "--data-dir")?;
        if work_root.starts_with(&data_abs) || data_abs.starts_with(&work_root) {
            return Err(SettingsError::Overlap {
                work_root,
                data_dir: data_abs,
            });
        }
        let name = match &a.name {
            Some(n) => Some(n.clone()),
            // A host name the edge would refuse is not sent: the node
            // registers without one (shown by its id).
            None => fs::read_to_string("/proc/sys/kernel/hostname")
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
            poll: Duration::from_millis(a.poll_ms.clamp(50, 60_000)),
            recheck: Duration::from_secs(a.recheck_secs.max(1)),
            sandbox_none: a.sandbox == crate::flags::Sandbox::None,
            host: a.host.clone(),
            tool_env: a
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
        })
    }
}

fn absolute(p: &Path, flag: &'static str) -> Result<PathBuf, SettingsError> {
    std::path::absolute(p).map_err(|source| SettingsError::Path {
        flag,
        path: p.to_path_buf(),
        source,
    })
}
