//! Namespaces: the in-sandbox stage's own user namespace, and a child
//! process of its own for tests of what changes a whole process.

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

/// Runs `f` in a child process of its own (`fork`), which exits with what
/// `f` returns (101 if it panics), and returns that exit status (128+N for
/// signal N). For tests of what changes a whole process, such as its user
/// namespace, which the kernel changes only for a process with one thread:
/// the child has one. `f` must not wait on a lock another thread of the
/// caller may hold (it would wait forever); the C library's allocator and
/// standard streams are fork-safe.
pub fn in_child(f: fn() -> i32) -> io::Result<i32> {
    // SAFETY: fork(2) without arguments. The child runs only `f` and ends
    // with _exit (no atexit handlers or destructors of the parent's state
    // run twice); the parent only waits for it below.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        let code = std::panic::catch_unwind(f).unwrap_or(101);
        // SAFETY: ends the child at once, as fork's contract asks.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    loop {
        // SAFETY: waits for the child just made; `status` is a valid
        // pointer to an int for the call's duration.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    })
}
