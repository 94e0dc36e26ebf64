//! Namespaces: the in-sandbox stage's own user namespace.

use std::io;

/// `unshare(CLONE_NEWUSER)`: moves the calling process into a new user
/// namespace, a child of its current one, where it has every capability
/// (and a full bounding set) and no uid or gid until its maps are written.
/// The stage does this once its mounts are made, so that the command runs
/// in a user namespace that owns none of the run's other namespaces.
///
/// Must be called while the process has one thread: the kernel refuses with
/// `EINVAL` otherwise.
pub fn unshare_user_namespace() -> io::Result<()> {
    // SAFETY: unshare(2) with CLONE_NEWUSER only, no pointers. It changes the
    // calling process's credentials and nothing of Rust's memory; file
    // descriptors are not unshared (no CLONE_FILES), so no descriptor held
    // anywhere in the process becomes invalid.
    let r = unsafe { libc::unshare(libc::CLONE_NEWUSER) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
