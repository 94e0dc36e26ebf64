//! The host tools the node runs outside any sandbox, for every run
//! (bubblewrap, gVisor's `runsc`), when it finds them on `PATH`: used only
//! when they are the system's. `PATH` may name folders a run can write (a
//! project's `.venv/bin`, `node_modules/.bin`, a `bin` that direnv adds):
//! a `bwrap` a run left there would start every later run with no wall at
//! all, and report the wall it did not build.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// `p` as the system installs it: its real path, when that file and every
/// folder above it belong to root and no one else may write them; or why
/// not. A tool elsewhere is used only when named outright (`--bwrap`).
pub fn system_owned(p: &Path) -> Result<PathBuf, String> {
    let real = std::fs::canonicalize(p).map_err(|e| format!("{}: {e}", p.display()))?;
    let mut at = Some(real.as_path());
    while let Some(q) = at {
        // A real path: no link on the way to follow.
        let m = std::fs::symlink_metadata(q).map_err(|e| format!("{}: {e}", q.display()))?;
        if m.uid() != 0 {
            return Err(format!(
                "{} belongs to uid {}, not root",
                q.display(),
                m.uid()
            ));
        }
        if m.mode() & 0o022 != 0 {
            return Err(format!(
                "{} may be written by users other than root (mode {:o})",
                q.display(),
                m.mode() & 0o7777
            ));
        }
        at = q.parent();
    }
    Ok(real)
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
        let why = system_owned(&tool).unwrap_err();
        assert!(
            why.contains("written by users other than root") || why.contains("not root"),
            "{why}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
