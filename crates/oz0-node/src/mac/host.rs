//! What every macOS command shares: the data directory, where runs' TEMPs
//! go, the node binary's own path, the egress proxy and its audit log.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use oz0_core::Cancel;
use oz0_egress::{EgressService, LazyProxy};
use oz0_policy::AbsPath;

use super::seatbelt::{Fault, Seatbelt};

/// A log past this size is begun anew, the old one kept as `<name>.1`.
const MAX_LOG: u64 = 64 << 20;

pub use crate::daemon::DataDirArg;

/// Where runs' TEMPs are made: this user's temporary folder, by its real
/// path (`/private/var/folders/…`: Seatbelt matches real paths).
pub fn temp_root() -> Result<PathBuf, String> {
    let t = std::env::temp_dir();
    t.canonicalize()
        .map_err(|e| format!("the temporary folder {}: {e}", t.display()))
}

/// This binary's real path.
pub fn node_binary() -> Result<AbsPath, String> {
    let p = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| format!("cannot name the node binary: {e}"))?;
    p.to_str()
        .and_then(|s| AbsPath::new(s).ok())
        .ok_or_else(|| format!("the node binary's path {} is not plain UTF-8", p.display()))
}

/// Opens the log at `path` for appending: made 0600 when missing, never
/// through a link at its end, a regular file of this user's; one grown past
/// 64 MiB is renamed to `<name>.1` first.
pub fn open_private_log(what: &str, path: &Path) -> Result<File, String> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    if let Some(parent) = path.parent() {
        use std::os::unix::fs::DirBuilderExt;
        let _ = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent);
    }
    let open = || {
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| format!("{what} {}: {e}", path.display()))
    };
    let mut f = open()?;
    let m = f
        .metadata()
        .map_err(|e| format!("{what} {}: {e}", path.display()))?;
    if !m.is_file() || m.uid() != rustix::process::getuid().as_raw() {
        return Err(format!(
            "{what} {} is not a regular file of this user's: remove it",
            path.display()
        ));
    }
    if m.len() > MAX_LOG {
        let mut old = path.as_os_str().to_owned();
        old.push(".1");
        std::fs::rename(path, &old).map_err(|e| format!("{what} {}: {e}", path.display()))?;
        f = open()?;
    }
    Ok(f)
}

/// The node's egress proxy, started by the first run with egress; its
/// decisions go to `audit` (never to a run's stderr, which a run could
/// forge lines in).
pub fn egress(audit: PathBuf) -> LazyProxy {
    LazyProxy::with_audit_file(move || Ok(open_private_log("the egress audit log", &audit)?))
}

/// Tier 1 with this node's binary and temporary folder; its live runs are
/// recorded in `records` when given.
pub fn seatbelt(
    egress: Arc<dyn EgressService>,
    fault: Option<Fault>,
    records: Option<PathBuf>,
) -> Result<Seatbelt, String> {
    Ok(Seatbelt {
        node_binary: node_binary()?,
        temp_root: temp_root()?,
        egress,
        fault,
        records,
    })
}

/// `<data-dir>/runs`: the records of live runs.
pub fn records(data_dir: &Path) -> PathBuf {
    data_dir.join("runs")
}

/// Ends what runs of a killed node left, logging each.
pub fn sweep(data_dir: &Path) {
    for line in super::seatbelt::sweep_stale(&records(data_dir)) {
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
pub fn cancel_on_signals() -> Result<Cancel, String> {
    crate::signals::cancel_pipe()
        .map(Cancel)
        .ok_or_else(|| "cannot watch this process's signals".into())
}
