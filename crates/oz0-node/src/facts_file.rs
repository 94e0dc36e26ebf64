//! `<data dir>/facts.json`: what the node's start found, for `oz0-node
//! facts` and the operator; written whole or not at all, readable by the
//! node's user only.

use std::io::Write;
use std::path::{Path, PathBuf};

use oz0_policy::facts::NodeFacts;

/// The facts file could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {}: {source}", path.display())]
pub struct WriteError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub source: std::io::Error,
}

/// Writes `<dir>/facts.json` (a temporary file renamed over it, mode 0600
/// where modes exist). Returns its path.
pub fn write(dir: &Path, f: &NodeFacts) -> Result<PathBuf, WriteError> {
    let path = dir.join("facts.json");
    let tmp = dir.join(".facts.json.tmp");
    let text = serde_json::to_string_pretty(f).expect("facts serialise") + "\n";
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    opts.open(&tmp)
        .and_then(|mut h| h.write_all(text.as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|source| WriteError {
            path: path.clone(),
            source,
        })?;
    Ok(path)
}
