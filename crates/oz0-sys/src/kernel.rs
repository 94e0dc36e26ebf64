//! Raw calls that ask the kernel what it allows: the operations a tier-1
//! sandbox must refuse, which the in-sandbox witness (`sandbox probe`)
//! tries to show what the sandbox refuses, and what the kernel offers
//! (Landlock's ABI, seccomp filters, the capability bounding set).
//!
//! Each function that tries an operation returns `Ok(())` if the kernel
//! allowed it, or the errno it refused with. None of them has a lasting
//! effect when it succeeds outside a sandbox, beyond what is noted.

use std::io;

fn check(ret: libc::c_long) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn check_fd(ret: libc::c_long) -> io::Result<()> {
    check(ret)?;
    // A descriptor: the kernel returns an int, which syscall(2) widens to a
    // long, so narrowing it back loses nothing.
    #[allow(clippy::cast_possible_truncation)]
    let fd = ret as libc::c_int;
    // SAFETY: a non-negative return from a descriptor-creating call is a
    // descriptor this process owns and nothing else refers to.
    unsafe { libc::close(fd) };
    Ok(())
}

/// `ptrace(PTRACE_PEEKDATA, 1, 0)`: read the memory of pid 1. Refused by the
/// seccomp filter with EPERM; without it, ESRCH (not traced) or EPERM.
pub fn ptrace_peek_pid1() -> io::Result<()> {
    // SAFETY: PEEKDATA of an untraced process only returns an error; the
    // pointer arguments are null and not dereferenced by the kernel on error.
    check(unsafe {
        libc::syscall(
            libc::SYS_ptrace,
            libc::PTRACE_PEEKDATA,
            1 as libc::pid_t,
            0usize,
            0usize,
        )
    })
}

/// `process_vm_readv` of pid 1, zero-length.
pub fn process_vm_readv_pid1() -> io::Result<()> {
    // SAFETY: zero iovecs: nothing is read or written.
    check(unsafe {
        libc::syscall(
            libc::SYS_process_vm_readv,
            1 as libc::pid_t,
            std::ptr::null::<libc::iovec>(),
            0usize,
            std::ptr::null::<libc::iovec>(),
            0usize,
            0usize,
        )
    })
}

/// `mount("none", "/tmp", "tmpfs", 0, NULL)`.
pub fn mount_tmpfs() -> io::Result<()> {
    // SAFETY: static NUL-terminated strings; a null data pointer is allowed.
    let r = unsafe {
        libc::mount(
            c"none".as_ptr(),
            c"/tmp".as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if r == 0 {
        // Undo, so the probe leaves nothing behind where it was allowed.
        // SAFETY: static NUL-terminated string.
        unsafe { libc::umount2(c"/tmp".as_ptr(), libc::MNT_DETACH) };
    }
    check(libc::c_long::from(r))
}

/// `unshare(CLONE_NEWUSER)` — a nested user namespace. Run it in a child
/// process: when allowed it changes the caller's namespaces.
pub fn unshare_user() -> io::Result<()> {
    // SAFETY: plain syscall with an integer flag argument.
    check(libc::c_long::from(unsafe {
        libc::unshare(libc::CLONE_NEWUSER)
    }))
}

/// `io_uring_setup(1, &params)`.
pub fn io_uring_setup() -> io::Result<()> {
    let mut params = [0u8; 120];
    // SAFETY: `params` is a zeroed buffer at least as large as
    // `struct io_uring_params` (120 bytes) that outlives the call.
    check_fd(unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) })
}

/// `socket(family, type, protocol)`; the descriptor is closed when created.
pub fn socket(family: i32, ty: i32, protocol: i32) -> io::Result<()> {
    // SAFETY: plain syscall with integer arguments.
    check_fd(libc::c_long::from(unsafe {
        libc::socket(family, ty, protocol)
    }))
}

/// `ioctl(fd, TIOCSTI, "x")`: push a character into a terminal's input.
pub fn tiocsti(fd: i32) -> io::Result<()> {
    // SAFETY: TIOCSTI reads one byte from the pointer, which points at the
    // first byte of a static NUL-terminated string.
    check(libc::c_long::from(unsafe {
        libc::ioctl(fd, libc::TIOCSTI, c"x".as_ptr())
    }))
}

/// `ioctl(fd, TIOCSETD, &N_TTY)`: without a filter, ENOTTY on what is no
/// terminal.
pub fn tiocsetd(fd: i32) -> io::Result<()> {
    let n_tty: libc::c_int = 0;
    // SAFETY: TIOCSETD reads one int from the pointer, a live local.
    check(libc::c_long::from(unsafe {
        libc::ioctl(fd, libc::TIOCSETD, &n_tty)
    }))
}

/// `statmount(NULL, NULL, 0, 0)`: without a filter, EFAULT (Linux 6.8+).
pub fn statmount() -> io::Result<()> {
    // SAFETY: null pointers the kernel checks before any use.
    check(unsafe { libc::syscall(457, 0usize, 0usize, 0usize, 0u32) })
}

/// `listmount(NULL, NULL, 0, 0)`: without a filter, EFAULT (Linux 6.8+).
pub fn listmount() -> io::Result<()> {
    // SAFETY: null pointers the kernel checks before any use.
    check(unsafe { libc::syscall(458, 0usize, 0usize, 0usize, 0u32) })
}

/// `quotactl_fd(0, 0, 0, NULL)`: without a filter, an error of the
/// command's (EINVAL, ENOTBLK, ...).
pub fn quotactl_fd() -> io::Result<()> {
    // SAFETY: a null pointer the kernel does not reach for command 0.
    check(unsafe { libc::syscall(libc::SYS_quotactl_fd, 0u32, 0u32, 0u32, 0usize) })
}

/// `bpf(BPF_MAP_CREATE, zeroed attr)`.
pub fn bpf() -> io::Result<()> {
    let mut attr = [0u8; 128];
    // SAFETY: the attr buffer is valid for the given size for the call.
    check_fd(unsafe { libc::syscall(libc::SYS_bpf, 0, attr.as_mut_ptr(), attr.len()) })
}

/// `perf_event_open` of a software clock counter for this process.
pub fn perf_event_open() -> io::Result<()> {
    // struct perf_event_attr: type (u32) = PERF_TYPE_SOFTWARE (1), size (u32),
    // config (u64) = PERF_COUNT_SW_CPU_CLOCK (0); the rest zero.
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&1u32.to_ne_bytes());
    attr[4..8].copy_from_slice(&128u32.to_ne_bytes());
    // SAFETY: attr is a zero-initialised buffer of the size it declares.
    check_fd(unsafe { libc::syscall(libc::SYS_perf_event_open, attr.as_ptr(), 0, -1, -1, 0) })
}

/// `keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0)`.
pub fn keyctl() -> io::Result<()> {
    // SAFETY: integer arguments only.
    check(unsafe { libc::syscall(libc::SYS_keyctl, 0, -3, 0) })
}

/// `add_key("user", "oz0-probe", "x", 1, KEY_SPEC_PROCESS_KEYRING)`.
pub fn add_key() -> io::Result<()> {
    // SAFETY: static NUL-terminated strings and a 1-byte payload.
    check(unsafe {
        libc::syscall(
            libc::SYS_add_key,
            c"user".as_ptr(),
            c"oz0-probe".as_ptr(),
            c"x".as_ptr(),
            1usize,
            -2,
        )
    })
}

/// `userfaultfd(O_CLOEXEC)`.
pub fn userfaultfd() -> io::Result<()> {
    // SAFETY: integer flag argument.
    check_fd(unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC) })
}

/// `kexec_load(0, 0, NULL, 0)`.
pub fn kexec_load() -> io::Result<()> {
    // SAFETY: zero segments, null pointer not dereferenced.
    check(unsafe { libc::syscall(libc::SYS_kexec_load, 0usize, 0usize, 0usize, 0usize) })
}

/// `init_module(NULL, 0, "")`.
pub fn init_module() -> io::Result<()> {
    // SAFETY: zero-length image; the kernel reads nothing from the null pointer.
    check(unsafe { libc::syscall(libc::SYS_init_module, 0usize, 0usize, c"".as_ptr()) })
}

/// `setns(-1, 0)` is not useful; this is `unshare(CLONE_NEWNS)`. Run it in a
/// child process: when allowed it changes the caller's namespaces.
pub fn unshare_mount_ns() -> io::Result<()> {
    // SAFETY: integer flag argument.
    check(libc::c_long::from(unsafe {
        libc::unshare(libc::CLONE_NEWNS)
    }))
}

/// Landlock's ABI version as the kernel reports it (0 when absent).
pub fn landlock_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with the VERSION flag the kernel ignores the (null, 0) attr.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if r < 0 {
        0
    } else {
        // A small positive version; one beyond a u32 is reported as the
        // largest there is rather than cut.
        u32::try_from(r).unwrap_or(u32::MAX)
    }
}

/// Whether this process may install a seccomp filter, as the kernel answers
/// `seccomp(SECCOMP_GET_ACTION_AVAIL, 0, &SECCOMP_RET_ERRNO)`: the call the
/// sandbox's filter is installed with, so an answer of "no" (a kernel
/// without `CONFIG_SECCOMP_FILTER`, or a container's profile that refuses
/// seccomp(2) to the node) is seen here, before any run. The error when
/// not.
pub fn seccomp_filters() -> io::Result<()> {
    const SECCOMP_GET_ACTION_AVAIL: libc::c_uint = 2;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    let action: u32 = SECCOMP_RET_ERRNO;
    // SAFETY: a valid pointer to a u32 the kernel only reads.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_GET_ACTION_AVAIL,
            0 as libc::c_uint,
            &action as *const u32,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `prctl(PR_CAPBSET_READ, cap)`: whether a capability is in the bounding set.
pub fn capbset_read(cap: i32) -> io::Result<bool> {
    // SAFETY: integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r == 1)
    }
}

/// Raw `syscall(nr)` with no arguments — used to test a number the filter
/// must refuse (e.g. an x32 alias) without linking a wrapper for it.
pub fn raw_syscall0(nr: libc::c_long) -> io::Result<()> {
    // SAFETY: the probe only passes numbers that take no pointer arguments
    // or that fail before reading any.
    check(unsafe { libc::syscall(nr) })
}

#[cfg(test)]
mod tests {
    /// The answer agrees with the kernel: a filter installs exactly when
    /// the probe says one may (in a child, which the filter then confines).
    #[test]
    fn seccomp_filters_agrees_with_the_kernel() {
        let said = super::seccomp_filters();
        // SAFETY: fork in a test; the child only makes system calls and
        // exits without returning into the test harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // One instruction: SECCOMP_RET_ALLOW.
            let insn = libc::sock_filter {
                code: 0x06,
                jt: 0,
                jf: 0,
                k: 0x7fff_0000,
            };
            let prog = libc::sock_fprog {
                len: 1,
                filter: &insn as *const libc::sock_filter as *mut libc::sock_filter,
            };
            // SAFETY: integer arguments, then a valid program the kernel reads.
            let ok = unsafe {
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
                    && libc::syscall(
                        libc::SYS_seccomp,
                        1 as libc::c_uint,
                        0 as libc::c_uint,
                        &prog as *const libc::sock_fprog,
                    ) == 0
            };
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(i32::from(!ok)) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just made.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        let installed = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
        assert_eq!(said.is_ok(), installed, "the probe said {said:?}");
    }

    /// The ABI the kernel reports agrees with what it does: with an ABI,
    /// a ruleset can be made; without, the kernel refuses to make one.
    #[test]
    fn landlock_abi_agrees_with_the_kernel() {
        let abi = super::landlock_abi();
        assert!(abi < 64, "an ABI version no kernel has: {abi}");
        /// `struct landlock_ruleset_attr` with only `handled_access_fs`.
        #[repr(C)]
        struct Attr {
            handled_access_fs: u64,
        }
        const LANDLOCK_ACCESS_FS_EXECUTE: u64 = 1;
        let attr = Attr {
            handled_access_fs: LANDLOCK_ACCESS_FS_EXECUTE,
        };
        // SAFETY: a valid pointer to `attr` and its size, no flags; the
        // descriptor made, if any, is closed below.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const Attr,
                std::mem::size_of::<Attr>(),
                0u32,
            )
        };
        if abi > 0 {
            assert!(fd >= 0, "ABI {abi} reported, yet no ruleset could be made");
            // A descriptor: an int the kernel returned, widened to a long.
            #[allow(clippy::cast_possible_truncation)]
            let fd = fd as libc::c_int;
            // SAFETY: closes the descriptor just made, owned by no one else.
            unsafe { libc::close(fd) };
        } else {
            assert!(fd < 0, "no ABI reported, yet a ruleset was made");
        }
    }

    #[test]
    fn socket_ok_for_unix() {
        super::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0).unwrap();
    }
}
