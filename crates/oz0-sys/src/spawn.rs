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

/// Where a directly spawned child's standard stream comes from.
#[derive(Debug, Clone, Copy)]
pub enum Stdio {
    /// This process's own.
    Inherit,
    /// `/dev/null`.
    Null,
    /// This descriptor (still owned by the caller).
    Fd(RawFd),
}

impl ChildSetup {
    /// Whether [`ChildSetup::spawn`] can start the child: nothing to do
    /// between fork and exec but placing descriptors (no cgroup to join).
    pub fn spawnable(&self) -> bool {
        self.join.is_empty()
    }

    /// Starts `program` with `argv` (its first element included) and an
    /// empty environment by `posix_spawn`, with the standard streams and the
    /// descriptors of [`ChildSetup::pass_fd`] in place, every signal unblocked
    /// and `SIGPIPE` at its default. Unlike [`Command`] with a pre-exec step,
    /// the C library starts the child without copying this process's memory
    /// (`CLONE_VM|CLONE_VFORK`). Returns the child's pid; the caller reaps it.
    /// A setup that joins a cgroup is refused (`InvalidInput`): use
    /// [`ChildSetup::install`].
    pub fn spawn(
        &self,
        program: &std::ffi::CStr,
        argv: &[std::ffi::CString],
        stdio: [Stdio; 3],
    ) -> io::Result<i32> {
        if !self.spawnable() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a child that joins a cgroup is started by fork",
            ));
        }
        let mut ptrs: Vec<*mut libc::c_char> = argv
            .iter()
            .map(|a| a.as_ptr() as *mut libc::c_char)
            .collect();
        ptrs.push(std::ptr::null_mut());
        let envp: [*mut libc::c_char; 1] = [std::ptr::null_mut()];
        let check = |r: libc::c_int| {
            if r == 0 {
                Ok(())
            } else {
                Err(io::Error::from_raw_os_error(r))
            }
        };
        // SAFETY: the file actions and attributes are initialised before use
        // and destroyed on every path (the guards below); every pointer passed
        // (program, argv, envp, "/dev/null") points at a NUL-terminated string
        // or NULL-terminated array that outlives the call; the descriptors are
        // open (owned by `self` or the caller) for the duration of the call.
        unsafe {
            /// Destroys what it points at (initialised by its init call) once.
            struct Destroy<T>(*mut T, unsafe extern "C" fn(*mut T) -> libc::c_int);
            impl<T> Drop for Destroy<T> {
                fn drop(&mut self) {
                    // SAFETY: made only right after a successful init of
                    // `self.0` with the matching destroy function.
                    unsafe { (self.1)(self.0) };
                }
            }
            let mut actions: libc::posix_spawn_file_actions_t = std::mem::zeroed();
            check(libc::posix_spawn_file_actions_init(&mut actions))?;
            let _actions = Destroy(&mut actions, libc::posix_spawn_file_actions_destroy);
            let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
            check(libc::posix_spawnattr_init(&mut attr))?;
            let _attr = Destroy(&mut attr, libc::posix_spawnattr_destroy);

            for (target, how) in (0..).zip(stdio.iter()) {
                match *how {
                    Stdio::Inherit => {}
                    Stdio::Null => check(libc::posix_spawn_file_actions_addopen(
                        &mut actions,
                        target,
                        c"/dev/null".as_ptr(),
                        libc::O_RDWR,
                        0,
                    ))?,
                    Stdio::Fd(fd) => check(libc::posix_spawn_file_actions_adddup2(
                        &mut actions,
                        fd,
                        target,
                    ))?,
                }
            }
            // Sources sit at 64 and above (close-on-exec), targets below.
            for (src, target) in &self.fds {
                check(libc::posix_spawn_file_actions_adddup2(
                    &mut actions,
                    src.as_raw_fd(),
                    *target,
                ))?;
            }
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            let mut pipe: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut pipe);
            libc::sigaddset(&mut pipe, libc::SIGPIPE);
            check(libc::posix_spawnattr_setsigmask(&mut attr, &none))?;
            check(libc::posix_spawnattr_setsigdefault(&mut attr, &pipe))?;
            // Two flag bits (4 and 8), which posix_spawnattr_setflags takes
            // as a short: nothing is cut.
            #[allow(clippy::cast_possible_truncation)]
            const FLAGS: libc::c_short =
                (libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF) as libc::c_short;
            check(libc::posix_spawnattr_setflags(&mut attr, FLAGS))?;
            let mut pid: libc::pid_t = 0;
            check(libc::posix_spawn(
                &mut pid,
                program.as_ptr(),
                &actions,
                &attr,
                ptrs.as_ptr(),
                envp.as_ptr(),
            ))?;
            Ok(pid)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::io::Read;

    /// A child started by `posix_spawn` gets exactly the passed descriptors
    /// at their numbers, the streams asked for, no environment, no blocked
    /// signal and SIGPIPE at its default; a cgroup join is refused.
    #[test]
    fn spawned_child_gets_its_descriptors_streams_and_clean_state() {
        let (r, w) = std::io::pipe().unwrap();
        let (out_r, out_w) = std::io::pipe().unwrap();
        let mut setup = ChildSetup::new();
        setup.pass_fd(OwnedFd::from(w), 9).unwrap();
        let script = "echo passed >&9; read x || echo stdin-null; env | wc -l; \
                      grep -E '^(SigBlk|SigIgn)' /proc/self/status";
        let argv: Vec<CString> = ["sh", "-c", script]
            .iter()
            .map(|a| CString::new(*a).unwrap())
            .collect();
        let out_fd = out_w.as_raw_fd();
        let pid = setup
            .spawn(
                c"/bin/sh",
                &argv,
                [Stdio::Null, Stdio::Fd(out_fd), Stdio::Inherit],
            )
            .unwrap();
        drop(setup);
        drop(out_w);
        let mut st = 0;
        // SAFETY: waits for the child just started.
        assert_eq!(unsafe { libc::waitpid(pid, &mut st, 0) }, pid);
        assert_eq!(st, 0);
        let mut passed = String::new();
        std::fs::File::from(OwnedFd::from(r))
            .read_to_string(&mut passed)
            .unwrap();
        assert_eq!(passed, "passed\n");
        let mut out = String::new();
        std::fs::File::from(OwnedFd::from(out_r))
            .read_to_string(&mut out)
            .unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "stdin-null", "{out}");
        // sh itself sets PWD (and may set a few more); nothing of ours.
        assert!(lines[1].trim().parse::<u32>().unwrap() <= 3, "{out}");
        assert_eq!(lines[2], "SigBlk:\t0000000000000000", "{out}");
        // SIGPIPE (bit 13) not ignored.
        let ign = u64::from_str_radix(lines[3].trim_start_matches("SigIgn:\t"), 16).unwrap();
        assert_eq!(ign & (1 << 12), 0, "{out}");

        let mut joining = ChildSetup::new();
        joining.join_cgroup(std::fs::File::open("/dev/null").unwrap());
        assert!(!joining.spawnable());
        assert_eq!(
            joining
                .spawn(c"/bin/true", &argv[..1], [Stdio::Inherit; 3])
                .unwrap_err()
                .kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
