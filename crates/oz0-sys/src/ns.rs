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

/// Forks a child that keeps only its standard streams and the descriptors
/// `keep`, placed at 3, 4, … in that order (without close-on-exec), runs
/// `f`, and exits with what `f` returns (101 if it panics). Returns the
/// child's pid; the caller reaps it. The child is a copy of the caller that
/// never executes a program: it keeps the caller's seccomp filter,
/// Landlock domain, credentials and dumpable flag (the in-sandbox stage
/// starts the egress bridge this way, so that the bridge is as undumpable
/// as the stage itself).
///
/// The caller must have one thread (as the stage has): the child has only
/// the calling thread, and a lock another thread held would never be let
/// go there.
pub fn fork_keeping(
    keep: &[std::os::fd::BorrowedFd<'_>],
    f: impl FnOnce() -> i32,
) -> io::Result<i32> {
    use std::os::fd::AsRawFd;
    // SAFETY: fork(2) without arguments, in a process with one thread (the
    // caller's contract). The child below only rearranges descriptors, runs
    // `f`, and ends with _exit, so no destructor of the parent's state runs
    // twice and no descriptor it closes is used by anything that runs later.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid > 0 {
        return Ok(pid);
    }
    fn fail() -> ! {
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(125) }
    }
    // Each kept descriptor is copied above every target first, so that
    // placing one never overwrites another still to be placed.
    let mut staged = Vec::new();
    for fd in keep {
        // SAFETY: F_DUPFD makes a new descriptor of an open one; nothing of
        // Rust's owns the copy.
        let n = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD, 64) };
        if n < 0 {
            fail();
        }
        staged.push(n);
    }
    // Targets 3, 4, ...: one per kept descriptor, and a process holds
    // fewer descriptors than an int counts (the kernel's nr_open), so no
    // target overflows.
    for (target, n) in (3..).zip(&staged) {
        // SAFETY: dup2 onto `target`, which the child owns from here on (the
        // parent's owner of that number, if any, never runs again here).
        if unsafe { libc::dup2(*n, target) } < 0 {
            fail();
        }
    }
    let Some(first) = u32::try_from(staged.len())
        .ok()
        .and_then(|n| n.checked_add(3))
    else {
        fail()
    };
    // SAFETY: closes every descriptor above the kept ones (their staged
    // copies included). Objects of the parent's that owned them are never
    // used again in the child, which ends with _exit below.
    if unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0) } < 0 {
        fail();
    }
    let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(101);
    // SAFETY: ends the child at once, as fork's contract asks.
    unsafe { libc::_exit(code) }
}

/// Makes the detached mount `tree` (from `open_tree(OPEN_TREE_CLONE)`)
/// read-only, nosuid and nodev, before it is attached anywhere
/// (`mount_setattr(2)`, Linux 5.12). The stage binds a protected path onto
/// itself this way, by descriptor.
pub fn make_mount_read_only(tree: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    /// `struct mount_attr` of <linux/mount.h>.
    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }
    const MOUNT_ATTR_RDONLY: u64 = 0x1;
    const MOUNT_ATTR_NOSUID: u64 = 0x2;
    const MOUNT_ATTR_NODEV: u64 = 0x4;
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: mount_setattr(2) on a descriptor the caller holds, with an
    // empty path (AT_EMPTY_PATH), a valid pointer to `attr` for the call's
    // duration and its size; it changes the mount's flags and nothing of
    // this process's memory.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
