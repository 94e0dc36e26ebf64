//! Work done in a forked child before it executes its program.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The lowest descriptor number used for staging sources, above every target
/// a caller may name, so that `dup2` onto a target never clobbers a source.
const STAGING_FLOOR: RawFd = 64;

/// What the child does between `fork` and `exec`, in this order:
/// 1. writes `"0"` into every `cgroup.procs` file in `join`, moving itself
///    into the run's job (if any write fails, the child reports the error and
///    never executes: **fail closed**);
/// 2. places each `(source, target)` descriptor at its target number, without
///    close-on-exec, so that the program inherits exactly those.
pub struct ChildSetup {
    join: Vec<File>,
    fds: Vec<(OwnedFd, RawFd)>,
}

impl ChildSetup {
    /// Starts an empty setup.
    pub fn new() -> Self {
        ChildSetup {
            join: Vec::new(),
            fds: Vec::new(),
        }
    }

    /// The child joins the cgroup whose `cgroup.procs` is `procs` (opened for
    /// writing by the caller).
    pub fn join_cgroup(&mut self, procs: File) -> &mut Self {
        self.join.push(procs);
        self
    }

    /// The child gets `fd` at number `target` (3 ≤ target < 64).
    pub fn pass_fd(&mut self, fd: OwnedFd, target: RawFd) -> io::Result<&mut Self> {
        if !(3..STAGING_FLOOR).contains(&target) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("descriptor target {target} is outside 3..{STAGING_FLOOR}"),
            ));
        }
        // Move the source above every possible target (close-on-exec), so that
        // the dup2 sequence in the child cannot overwrite a later source.
        // SAFETY: fcntl(F_DUPFD_CLOEXEC) on a descriptor we own; the result is a
        // fresh descriptor we immediately take ownership of.
        let raw = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, STAGING_FLOOR) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` was just returned by fcntl and is owned by nobody else.
        let staged = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
        drop(fd);
        self.fds.push((staged, target));
        Ok(self)
    }

    /// Installs the setup on `cmd`. The descriptors stay owned by `self`, which
    /// must outlive the spawn (drop it after `Command::spawn` returns).
    pub fn install(&self, cmd: &mut Command) {
        let join: Vec<RawFd> = self.join.iter().map(|f| f.as_raw_fd()).collect();
        let fds: Vec<(RawFd, RawFd)> = self.fds.iter().map(|(f, t)| (f.as_raw_fd(), *t)).collect();
        // SAFETY: the closure runs in the forked child before exec. It only
        // calls async-signal-safe functions (write, dup2) on descriptors that
        // are open in the parent at fork time (owned by `self`, which outlives
        // the spawn), allocates nothing, and takes no locks.
        unsafe {
            cmd.pre_exec(move || {
                for &fd in &join {
                    let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                    if n != 1 {
                        return Err(io::Error::last_os_error());
                    }
                }
                for &(src, target) in &fds {
                    if libc::dup2(src, target) < 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }
}

impl Default for ChildSetup {
    fn default() -> Self {
        Self::new()
    }
}

/// Takes ownership of descriptor `n`, inherited from the parent by protocol
/// (the launcher passes the in-sandbox stage its configuration, status and
/// stderr at fixed numbers). Fails if `n` is not open.
pub fn inherited_fd(n: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_GETFD only queries the descriptor's flags.
    if unsafe { libc::fcntl(n, libc::F_GETFD) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `n` is open (checked above) and, by the launcher's protocol, no
    // other owner exists in this process: the stage takes each fixed number
    // exactly once, before anything else could have wrapped it.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(n) })
}

/// Marks every descriptor from `first` upwards close-on-exec, so that the
/// program about to be executed inherits none of them.
pub fn cloexec_from(first: u32) -> io::Result<()> {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC closes nothing; it only
    // sets a flag on descriptors, which cannot invalidate any Rust owner.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
