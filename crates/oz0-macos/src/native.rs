//! The native layer (macOS only): the only system calls of this crate, and
//! its only `unsafe`.
//!
//! [`RunProcesses`] is the machine's process table as `crate::tree` needs
//! it: every pid (`proc_listallpids`), whether a pid is a live process of
//! the node's user (`proc_pidinfo(PROC_PIDTBSDINFO)`) inside one run's
//! sandbox (`sandbox_check`: the kernel's sandbox answers for that process
//! whether it may read the run's two marks), and SIGKILL.
//!
//! Type-checked for `aarch64-apple-darwin` and `x86_64-apple-darwin` in
//! CI; it has not run on a Mac.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, CString};
use std::io;

use crate::tree::{Membership, ProcessTable};

/// `SANDBOX_FILTER_PATH`: the check's argument is a path.
const SANDBOX_FILTER_PATH: c_int = 1;
/// `SANDBOX_CHECK_NO_REPORT`: a denial the check finds is not logged.
const SANDBOX_CHECK_NO_REPORT: c_int = 0x4000_0000;

extern "C" {
    /// libsandbox (part of libSystem): whether the sandbox of `pid` allows
    /// `operation` on the filter's argument: 0 allowed, 1 denied, -1 error.
    fn sandbox_check(pid: libc::pid_t, operation: *const c_char, filter: c_int, ...) -> c_int;
}

/// One run's processes on this Mac.
#[derive(Debug)]
pub struct RunProcesses {
    uid: libc::uid_t,
    denied: CString,
    allowed: CString,
}

impl RunProcesses {
    /// The processes of the node's user that carry the run's marks.
    pub fn new(m: &Membership) -> io::Result<RunProcesses> {
        let c = |s: &str| {
            CString::new(s).map_err(|_| io::Error::other("a run's mark path holds a NUL byte"))
        };
        Ok(RunProcesses {
            // SAFETY: getuid cannot fail and takes nothing.
            uid: unsafe { libc::getuid() },
            denied: c(&m.denied)?,
            allowed: c(&m.allowed)?,
        })
    }

    fn answer(pid: libc::pid_t, path: &CString) -> c_int {
        // SAFETY: both strings are NUL-terminated and live for the call; the
        // variadic argument is the one pointer SANDBOX_FILTER_PATH takes.
        unsafe {
            sandbox_check(
                pid,
                c"file-read-data".as_ptr(),
                SANDBOX_FILTER_PATH | SANDBOX_CHECK_NO_REPORT,
                path.as_ptr(),
            )
        }
    }
}

impl ProcessTable for RunProcesses {
    fn pids(&mut self) -> io::Result<Vec<i32>> {
        // SAFETY: a null buffer asks for the count only.
        let n = unsafe { libc::proc_listallpids(std::ptr::null_mut(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        // Room for processes started since the count.
        let cap = usize::try_from(n).unwrap_or(0) + 256;
        let mut buf: Vec<libc::pid_t> = vec![0; cap];
        let bytes = c_int::try_from(cap * std::mem::size_of::<libc::pid_t>())
            .map_err(|_| io::Error::other("too many processes"))?;
        // SAFETY: `buf` holds `bytes` bytes of writable pid_t slots.
        let got = unsafe { libc::proc_listallpids(buf.as_mut_ptr().cast(), bytes) };
        if got < 0 {
            return Err(io::Error::last_os_error());
        }
        buf.truncate(usize::try_from(got).unwrap_or(0).min(cap));
        Ok(buf)
    }

    fn is_member(&mut self, pid: i32) -> bool {
        // SAFETY: proc_bsdinfo is plain data; zero is a valid start.
        let mut info: libc::proc_bsdinfo = unsafe { std::mem::zeroed() };
        let size = c_int::try_from(std::mem::size_of::<libc::proc_bsdinfo>()).unwrap_or(0);
        // SAFETY: `info` is writable for `size` bytes.
        let got = unsafe {
            libc::proc_pidinfo(
                pid,
                libc::PROC_PIDTBSDINFO,
                0,
                std::ptr::from_mut(&mut info).cast(),
                size,
            )
        };
        if got != size || info.pbi_uid != self.uid || info.pbi_status == libc::SZOMB {
            return false;
        }
        Self::answer(pid, &self.denied) == 1 && Self::answer(pid, &self.allowed) == 0
    }

    fn kill(&mut self, pid: i32) -> io::Result<bool> {
        // SAFETY: kill takes plain integers.
        if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ESRCH) {
            Ok(false)
        } else {
            Err(e)
        }
    }
}
