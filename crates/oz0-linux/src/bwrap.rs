//! Finding bubblewrap and asking it what it can do.
//!
//! bubblewrap comes from the distribution's package (`bubblewrap`); the node
//! never ships or downloads it. A run needs `--args`, `--json-status-fd`,
//! `--as-pid-1` and `--clearenv`; `sandbox check` reports the features the
//! installed binary has, read from its own `--help`, never guessed from a
//! version number.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;

/// Features a run relies on.
pub const REQUIRED_FEATURES: &[&str] = &["--args", "--json-status-fd", "--as-pid-1", "--clearenv"];

/// How to install bubblewrap, for error messages.
pub const INSTALL_FIX: &str = "install bubblewrap 0.8 or newer (Debian/Ubuntu: `apt-get install bubblewrap`; Fedora: `dnf install bubblewrap`) or name it with --bwrap PATH";

/// Why bubblewrap cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum BwrapError {
    /// Not found.
    #[error("bubblewrap (bwrap) was not found on PATH or in /usr/bin: {INSTALL_FIX}")]
    NotFound,
    /// Found on PATH only where others than root may have put it.
    #[error("bubblewrap was found only at {path}, which is not the system's ({why}): the node runs it outside any sandbox for every run, and a run may write folders on PATH; {INSTALL_FIX} (naming it uses it as it is)")]
    NotSystems {
        /// Where.
        path: PathBuf,
        /// Why it is not the system's.
        why: String,
    },
    /// The named path is not an executable file.
    #[error("{0} is not an executable file: {INSTALL_FIX}")]
    NotExecutable(PathBuf),
    /// It lacks a feature.
    #[error("{path} (version {version}) lacks {missing}: {INSTALL_FIX}")]
    MissingFeature {
        /// Where.
        path: PathBuf,
        /// What it says it is.
        version: String,
        /// The first missing option.
        missing: &'static str,
    },
    /// It could not be run.
    #[error("{path} could not be run: {reason}")]
    Broken {
        /// Where.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// What the installed bubblewrap is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BwrapInfo {
    /// Its path.
    pub path: PathBuf,
    /// `bubblewrap X.Y.Z`, as it prints it.
    pub version: String,
    /// Set-uid root (an older, privileged install).
    pub setuid: bool,
    /// The required features it has.
    pub features: Vec<&'static str>,
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Finds bubblewrap: `explicit` if given (used as it is), else the first
/// `bwrap` on `path_var`, then `/usr/bin/bwrap`, that is the system's (see
/// [`crate::systool::system_owned`]).
pub fn find(explicit: Option<&Path>, path_var: Option<&str>) -> Result<PathBuf, BwrapError> {
    if let Some(p) = explicit {
        return if is_executable(p) {
            Ok(p.to_path_buf())
        } else {
            Err(BwrapError::NotExecutable(p.to_path_buf()))
        };
    }
    let dirs = path_var
        .unwrap_or("")
        .split(':')
        .filter(|d| d.starts_with('/'))
        .chain(["/usr/bin"]);
    let mut passed = None;
    for d in dirs {
        let p = Path::new(d).join("bwrap");
        if !is_executable(&p) {
            continue;
        }
        match crate::systool::system_owned(&p) {
            Ok(_) => return Ok(p),
            Err(why) => {
                passed.get_or_insert(BwrapError::NotSystems {
                    path: p,
                    why: why.to_string(),
                });
            }
        }
    }
    Err(passed.unwrap_or(BwrapError::NotFound))
}

/// Asks `path` for its version and options.
pub fn inspect(path: &Path) -> Result<BwrapInfo, BwrapError> {
    use std::os::unix::fs::PermissionsExt;
    let broken = |reason: String| BwrapError::Broken {
        path: path.to_path_buf(),
        reason,
    };
    let run = |arg: &str| {
        Command::new(path)
            .arg(arg)
            .env_clear()
            .output()
            .map_err(|e| broken(e.to_string()))
    };
    let v = run("--version")?;
    let version = String::from_utf8_lossy(&v.stdout).trim().to_string();
    if !v.status.success() || version.is_empty() {
        return Err(broken(format!(
            "`--version` failed: {}",
            String::from_utf8_lossy(&v.stderr).trim()
        )));
    }
    let h = run("--help")?;
    let help = String::from_utf8_lossy(&h.stdout).to_string() + &String::from_utf8_lossy(&h.stderr);
    let features = parse_features(&help);
    let setuid = std::fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o4000 != 0)
        .unwrap_or(false);
    Ok(BwrapInfo {
        path: path.to_path_buf(),
        version,
        setuid,
        features,
    })
}

/// The required features that `help` (bubblewrap's `--help`) lists.
pub fn parse_features(help: &str) -> Vec<&'static str> {
    REQUIRED_FEATURES
        .iter()
        .copied()
        .filter(|f| help.split_whitespace().any(|w| w == *f))
        .collect()
}

impl BwrapInfo {
    /// Ok when every required feature is there.
    pub fn check(&self) -> Result<(), BwrapError> {
        match REQUIRED_FEATURES
            .iter()
            .find(|f| !self.features.contains(f))
        {
            None => Ok(()),
            Some(missing) => Err(BwrapError::MissingFeature {
                path: self.path.clone(),
                version: self.version.clone(),
                missing,
            }),
        }
    }
}

/// The fix when a new /proc is refused inside the user namespace.
pub const PROC_FIX: &str = "the kernel refuses a new /proc while parts of this one are mounted over or read-only: under systemd drop ProtectKernelTunables=, ProtectKernelLogs=, ProtectProc= and ProcSubset= from the node's unit; in a container, give it an unmasked /proc (e.g. Docker's --security-opt systempaths=unconfined)";

/// Turns bubblewrap's own error output into a one-line reason with the fix.
pub fn explain_failure(stderr: &str) -> String {
    let line = stderr
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("bubblewrap exited before starting the sandbox, saying nothing")
        .to_string();
    let l = line.to_ascii_lowercase();
    let fix = if l.contains("unknown option") || l.contains("unrecognized option") {
        Some(INSTALL_FIX.to_string())
    } else if l.contains("can't mount proc") {
        // The user namespace was made; the kernel refuses a fresh procfs
        // while parts of this one are covered (mount_too_revealing).
        Some(PROC_FIX.to_string())
    } else if l.contains("no permissions to create")
        || l.contains("new namespace")
        || l.contains("uid map")
        || l.contains("setting up uid")
        || l.contains("operation not permitted")
    {
        Some(crate::userns::FIX_SUMMARY.to_string())
    } else {
        None
    };
    match fix {
        Some(f) => format!("{line} — {f}"),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_from_help() {
        let help =
            "    --args FD   Parse\n    --as-pid-1   Do not\n    --disable-userns   Disable\n";
        assert_eq!(parse_features(help), vec!["--args", "--as-pid-1"]);
    }

    #[test]
    fn explains_userns_and_old_versions() {
        let e = explain_failure("bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged user namespaces.\n");
        assert!(e.contains("apparmor_restrict_unprivileged_userns"), "{e}");
        let e =
            explain_failure("bwrap: Can't mount proc on /newroot/proc: Operation not permitted\n");
        assert!(e.contains("ProtectKernelTunables"), "{e}");
        assert!(!e.contains("apparmor"), "{e}");
        let e = explain_failure("bwrap: Unknown option --as-pid-1\n");
        assert!(e.contains("apt-get install bubblewrap"), "{e}");
        let e = explain_failure("");
        assert!(e.contains("saying nothing"));
    }

    #[test]
    fn explicit_path_must_be_executable() {
        assert!(matches!(
            find(Some(Path::new("/nonexistent/bwrap")), None),
            Err(BwrapError::NotExecutable(_))
        ));
        assert!(matches!(
            find(None, Some("")),
            Ok(_) | Err(BwrapError::NotFound)
        ));
    }
}
