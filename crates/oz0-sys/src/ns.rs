//! Namespaces: the in-sandbox stage's own mount namespace.

use std::io;

/// `unshare(CLONE_NEWNS)`: moves the calling process into a new mount
/// namespace, a copy of its current one, owned by its user namespace. The
/// stage does this (with `CAP_SYS_ADMIN` in the run's innermost user
/// namespace) to mount the run's placeholders; mounts copied from the
/// outer namespace stay locked, so nothing bubblewrap set up can be undone.
///
/// Must be called while the process has one thread (`CLONE_NEWNS` unshares
/// the file-system context, which threads share): the kernel refuses with
/// `EINVAL` otherwise.
pub fn unshare_mount_namespace() -> io::Result<()> {
    // SAFETY: unshare(2) with CLONE_NEWNS only, no pointers. It changes the
    // calling process's mount namespace and nothing of Rust's memory; file
    // descriptors are not unshared (no CLONE_FILES), so no descriptor held
    // anywhere in the process becomes invalid.
    let r = unsafe { libc::unshare(libc::CLONE_NEWNS) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
