//! `sandbox run --json-status FILE` on Windows: the run's status document
//! (its outcome, its report and the look after it, or why nothing ran),
//! written where the caller names, never through a link.
//!
//! The file's folder is checked when the run is asked for, before it
//! starts: no part of its path may be a link or junction (any reparse
//! point). The folder is then held open without delete sharing for the
//! run's length, so that neither it nor a folder above it can be renamed
//! aside or removed meanwhile (a run may write where the caller put the
//! file), and what Windows resolves the held folder to must be its path
//! (a link swapped in above it between the look and the hold shows as
//! another path). The document is written to a new file of a name of its own in
//! that folder, created new without following a link, then renamed over
//! FILE: a link the run left at FILE is replaced, never written through.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::windows::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use oz0_windows::hold::{hold_folder, FILE_FLAG_OPEN_REPARSE_POINT};
use oz0_windows::look::is_link;

/// Where the status document goes: its folder, held.
#[derive(Debug)]
pub struct StatusFile {
    _held: File,
    folder: PathBuf,
    name: OsString,
    shown: PathBuf,
}

impl StatusFile {
    /// Checks and holds the folder of `path`.
    pub fn open(path: &Path) -> Result<StatusFile, String> {
        let shown = path.to_path_buf();
        let bad = |why: String| format!("--json-status {}: {why}", shown.display());
        let name = path
            .file_name()
            .filter(|n| *n != "." && *n != "..")
            .ok_or_else(|| bad("does not name a file".into()))?
            .to_os_string();
        let folder = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let folder = std::path::absolute(folder).map_err(|e| bad(e.to_string()))?;
        // Every part of the folder's path, from its root down.
        for part in folder.ancestors().collect::<Vec<_>>().into_iter().rev() {
            let m = std::fs::symlink_metadata(part)
                .map_err(|e| bad(format!("{}: {e}", part.display())))?;
            if is_link(&m) {
                return Err(bad(format!(
                    "{} is a symbolic link or junction, which the node never follows where a status goes: name the real folder",
                    part.display()
                )));
            }
        }
        let held = hold_folder(&folder).map_err(|e| bad(format!("cannot hold its folder: {e}")))?;
        let m = held.metadata().map_err(|e| bad(e.to_string()))?;
        if !m.is_dir() || is_link(&m) {
            return Err(bad(format!(
                "{} is not a folder (or was swapped for a link)",
                folder.display()
            )));
        }
        // What the held folder is: a link swapped in above it since the
        // look, a short name or another drive's letter for it, all show
        // as another path.
        let real = oz0_windows::native::final_path(&held).map_err(|e| bad(e.to_string()))?;
        if !same_path(&real, &folder) {
            return Err(bad(format!(
                "{} is {}: name the real folder, reached through no link",
                folder.display(),
                real.display()
            )));
        }
        Ok(StatusFile {
            _held: held,
            folder,
            name,
            shown,
        })
    }

    /// Writes `doc` at the file: a new file renamed over it. Whether it
    /// was written.
    pub fn write(&self, doc: &serde_json::Value) -> bool {
        let text = serde_json::to_string_pretty(doc).expect("a status document serialises") + "\n";
        match self.put(text.as_bytes()) {
            Ok(()) => true,
            Err(e) => {
                eprintln!(
                    "oz0-node: cannot write --json-status {}: {e}; a document there is not this run's (status 123)",
                    self.shown.display()
                );
                false
            }
        }
    }

    fn put(&self, bytes: &[u8]) -> std::io::Result<()> {
        let mut tmp = OsString::from(".");
        tmp.push(&self.name);
        tmp.push(format!(".oz0-{}", oz0_windows::tier0::new_run_id()));
        let tmp = self.folder.join(tmp);
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
            .open(&tmp)?;
        let written = f.write_all(bytes).and_then(|()| f.sync_all());
        drop(f);
        let done = written.and_then(|()| std::fs::rename(&tmp, self.folder.join(&self.name)));
        if done.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        done
    }
}

/// Whether Windows' final path `real` (`\\?\C:\…`, `\\?\UNC\…`) names
/// `path`, letter case aside.
fn same_path(real: &Path, path: &Path) -> bool {
    let real = real.to_string_lossy();
    let real = match real.strip_prefix("\\\\?\\UNC\\") {
        Some(share) => format!("\\\\{share}"),
        None => real.strip_prefix("\\\\?\\").unwrap_or(&real).to_string(),
    };
    let path = path.to_string_lossy();
    real.trim_end_matches('\\').to_lowercase() == path.trim_end_matches('\\').to_lowercase()
}
