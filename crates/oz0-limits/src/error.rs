//! Errors: each names the path or value and, where there is one, the fix.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// Why a job could not be probed, created, placed, killed or removed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// A cgroup file operation failed.
    #[error("cannot {op} {}: {} — {fix}", path.display(), describe(err))]
    Io {
        /// What was attempted ("write", "create", "remove", …).
        op: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The system's answer.
        err: io::Error,
        /// What fixes it.
        fix: String,
    },
    /// No usable cgroup layout.
    #[error("job limits are not available here: {reason} — {fix}")]
    Unavailable {
        /// What is missing.
        reason: String,
        /// What fixes it (the exact one-time command where there is one).
        fix: String,
    },
    /// A limit was asked for that this layout cannot enforce.
    #[error("{limit} was asked for but cannot be enforced here: {reason} — {fix}")]
    Unenforceable {
        /// The command-line spelling of the limit.
        limit: &'static str,
        /// Why not.
        reason: String,
        /// What fixes it.
        fix: String,
    },
    /// The run id is not usable in a cgroup name.
    #[error("invalid run id {0:?}: use 1 to 64 characters from A-Z a-z 0-9 _ -")]
    BadRunId(String),
    /// The limits themselves are out of range.
    #[error(transparent)]
    Limits(#[from] oz0_policy::limits::LimitError),
    /// Processes were still in the job after killing it.
    #[error("job {} still has processes {waited:?} after it was killed — a process in uninterruptible sleep (D state) cannot die until its I/O ends; `oz0-node` removes it at its next start", path.display())]
    NotEmpty {
        /// The job's cgroup.
        path: PathBuf,
        /// How long we waited.
        waited: Duration,
    },
    /// `setup cgroups --remove` found processes in what it was to remove.
    #[error("processes are still inside {user}'s cgroups: {procs} — stop {user}'s node (and its runs), then run this again")]
    InUse {
        /// The user whose folders they are.
        user: String,
        /// The folders with their process ids.
        procs: String,
    },
    /// Setup was run without root.
    #[error(
        "`oz0-node setup cgroups` must run as root (effective uid is {0}) — run it once with sudo"
    )]
    NotRoot(u32),
    /// Setup was asked for a user that does not exist.
    #[error(
        "no user {0:?} in /etc/passwd — name the user the node runs as, e.g. `--user $(id -un)`"
    )]
    UnknownUser(String),
}

fn describe(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(c) if c == rustix::io::Errno::ACCESS.raw_os_error() => "permission denied".into(),
        Some(c) if c == rustix::io::Errno::PERM.raw_os_error() => "operation not permitted".into(),
        Some(c) if c == rustix::io::Errno::NOENT.raw_os_error() => "does not exist".into(),
        Some(c) if c == rustix::io::Errno::BUSY.raw_os_error() => "device or resource busy".into(),
        _ => e.to_string(),
    }
}

/// True for "you may not" errors.
pub(crate) fn is_denied(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(c) if c == rustix::io::Errno::ACCESS.raw_os_error()
            || c == rustix::io::Errno::PERM.raw_os_error()
            || c == rustix::io::Errno::ROFS.raw_os_error()
    ) || e.kind() == io::ErrorKind::PermissionDenied
}
