//! What the macOS commands share besides `oz0_macos`' walls: the data
//! directory, the egress proxy and its audit log, whether a self-test has
//! passed here, and a cancel on this process's signals.

use std::fs::File;
use std::path::{Path, PathBuf};

use oz0_core::Cancel;
use oz0_egress::LazyProxy;

/// A log past this size is begun anew, the old one kept as `<name>.1`.
const MAX_LOG: u64 = 64 << 20;

pub use crate::flags::DataDirArg;

/// Why a private log or the signals cannot be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// The log could not be opened, looked at or rotated.
    #[error("{what} {}: {source}", path.display())]
    Log {
        /// What the log is.
        what: String,
        /// Its path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The log is something else than a file of this user's.
    #[error("{what} {} is not a regular file of this user's: remove it", path.display())]
    NotOwnFile {
        /// What the log is.
        what: String,
        /// Its path.
        path: PathBuf,
    },
    /// No signal handler could be set up.
    #[error("cannot watch this process's signals")]
    Signals,
}

/// Opens the log at `path` for appending: made 0600 when missing, never
/// through a link at its end, a regular file of this user's; one grown past
/// 64 MiB is renamed to `<name>.1` first.
pub fn open_private_log(what: &str, path: &Path) -> Result<File, HostError> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    if let Some(parent) = path.parent() {
        use std::os::unix::fs::DirBuilderExt;
        let _ = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent);
    }
    let failed = |source| HostError::Log {
        what: what.to_string(),
        path: path.to_path_buf(),
        source,
    };
    let open = || {
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(failed)
    };
    let mut f = open()?;
    let m = f.metadata().map_err(failed)?;
    if !m.is_file() || m.uid() != rustix::process::getuid().as_raw() {
        return Err(HostError::NotOwnFile {
            what: what.to_string(),
            path: path.to_path_buf(),
        });
    }
    if m.len() > MAX_LOG {
        let mut old = path.as_os_str().to_owned();
        old.push(".1");
        std::fs::rename(path, &old).map_err(failed)?;
        f = open()?;
    }
    Ok(f)
}

/// The node's egress proxy, started by the first run with egress; its
/// decisions go to `audit` (never to a run's stderr, which a run could
/// forge lines in).
pub fn egress(audit: PathBuf) -> LazyProxy {
    LazyProxy::with_audit_file(
        move || Ok(open_private_log("the egress audit log", &audit)?),
        MAX_LOG,
    )
}

/// Ends what runs of a killed node left, logging each.
pub fn sweep(data_dir: &Path) {
    for line in oz0_macos::sandbox::sweep(data_dir) {
        eprintln!("oz0-node: {line}");
    }
}

/// Whether the node's last start proved tier 1 here (its `facts.json`).
pub fn proven(data_dir: &Path) -> bool {
    std::fs::read_to_string(data_dir.join("facts.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<oz0_policy::facts::NodeFacts>(&t).ok())
        .is_some_and(|f| f.tier_proven >= 1)
}

/// A cancel handle that fires on SIGINT, SIGTERM or SIGHUP.
pub fn cancel_on_signals() -> Result<Cancel, HostError> {
    crate::signals::cancel_pipe()
        .map(Cancel)
        .ok_or(HostError::Signals)
}
