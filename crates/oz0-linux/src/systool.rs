//! The host tools the node runs outside any sandbox, for every run
//! (bubblewrap, gVisor's `runsc`), when it finds them on `PATH`: used only
//! when they are the system's. `PATH` may name folders a run can write (a
//! project's `.venv/bin`, `node_modules/.bin`, a `bin` that direnv adds):
//! a `bwrap` a run left there would start every later run with no wall at
//! all, and report the wall it did not build.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Why a tool is not the system's.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NotSystems {
    /// It, or a folder above it, cannot be looked at.
    #[error("{}: {source}", path.display())]
    Unseen {
        /// What.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Another user than root owns it (or, in a nested user namespace,
    /// than an owner outside it).
    #[error("{} belongs to uid {uid}, not root", path.display())]
    Owner {
        /// What.
        path: PathBuf,
        /// Whose.
        uid: u32,
    },
    /// Others than root may write it.
    #[error("{} may be written by users other than root (mode {mode:o})", path.display())]
    Writable {
        /// What.
        path: PathBuf,
        /// Its mode.
        mode: u32,
    },
}

/// `p` as the system installs it: its real path, when that file and every
/// folder above it belong to root and no one else may write them; or why
/// not. A tool elsewhere is used only when named outright (`--bwrap`).
pub fn system_owned(p: &Path) -> Result<PathBuf, NotSystems> {
    let unseen = |path: &Path| {
        let path = path.to_path_buf();
        move |source| NotSystems::Unseen { path, source }
    };
    let real = std::fs::canonicalize(p).map_err(unseen(p))?;
    // In a user namespace below the first (a container, a test's), root's
    // files outside it show as the overflow uid: that owner is taken for
    // root there, and only there.
    let nested = !in_first_user_namespace();
    let unmapped = overflow_uid();
    let mut at = Some(real.as_path());
    while let Some(q) = at {
        // A real path: no link on the way to follow.
        let m = std::fs::symlink_metadata(q).map_err(unseen(q))?;
        if m.uid() != 0 && !(m.uid() == unmapped && nested) {
            return Err(NotSystems::Owner {
                path: q.to_path_buf(),
                uid: m.uid(),
            });
        }
        if m.mode() & 0o022 != 0 {
            return Err(NotSystems::Writable {
                path: q.to_path_buf(),
                mode: m.mode() & 0o7777,
            });
        }
        at = q.parent();
    }
    Ok(real)
}

/// Whether this process is in the first user namespace (its uid map the
/// whole identity); what cannot be read counts as the first.
fn in_first_user_namespace() -> bool {
    std::fs::read_to_string("/proc/self/uid_map").map_or(true, |m| {
        m.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"]
    })
}

/// The uid files of unmapped owners show as (`kernel.overflowuid`).
fn overflow_uid() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/overflowuid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(65534)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_systems_own_tools_only() {
        assert!(system_owned(Path::new("/bin/sh")).is_ok());
        let dir = std::env::temp_dir().join(format!("oz0-systool-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tool = dir.join("bwrap");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        // The temp folder is writable by all (and, not as root, the file
        // is this user's).
        let why = system_owned(&tool).unwrap_err().to_string();
        assert!(
            why.contains("written by users other than root") || why.contains("not root"),
            "{why}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
