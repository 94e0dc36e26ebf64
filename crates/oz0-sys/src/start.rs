//! What a binary that enters at its own C `main` (`#![no_main]`) needs of
//! std's start-up.

use std::ffi::{CStr, OsString};
use std::os::unix::ffi::OsStringExt;
use std::sync::OnceLock;

static ARGS: OnceLock<Vec<OsString>> = OnceLock::new();

/// Keeps the command line the C `main` was given, for [`args_os`]: std's
/// own copy is filled only by std's start-up on some C libraries (musl), not
/// by the C library itself. Call it once, first.
///
/// # Safety
///
/// `argv` must be the `argc` valid NUL-terminated strings `main` was given.
pub unsafe fn keep_args(argc: libc::c_int, argv: *const *const libc::c_char) {
    let n = usize::try_from(argc).unwrap_or(0);
    let args = (0..n)
        .map(|i| {
            // SAFETY: the caller passes main's own argc and argv: entries
            // 0..argc are valid NUL-terminated strings.
            let a = unsafe { CStr::from_ptr(*argv.add(i)) };
            OsString::from_vec(a.to_bytes().to_vec())
        })
        .collect();
    let _ = ARGS.set(args);
}

/// The process's command line: the one kept by [`keep_args`], or std's
/// where none was kept (tests, other binaries).
pub fn args_os() -> Vec<OsString> {
    match ARGS.get() {
        Some(a) => a.clone(),
        None => std::env::args_os().collect(),
    }
}

/// Opens `/dev/null` on each of the standard descriptors 0, 1 and 2 that
/// is closed (so that nothing opened later takes its number and receives
/// output meant for it), and ignores SIGPIPE (a write to a closed pipe then
/// fails with `EPIPE` instead of killing the process). Call it first, while
/// the process has one thread. Aborts if a closed descriptor cannot be
/// filled.
pub fn standard_setup() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // SAFETY: `poll` reads and writes exactly the three entries given.
    if unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) } >= 0 {
        for p in fds {
            if p.revents & libc::POLLNVAL != 0 {
                // SAFETY: a NUL-terminated path and plain flags. The lowest
                // free number is the closed one, since those below it are
                // open or were filled in this loop.
                let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
                if fd != p.fd {
                    std::process::abort();
                }
            }
        }
    }
    // SAFETY: changes only SIGPIPE's disposition, to a constant.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kept_command_line_is_the_one_given() {
        let given = [c"oz0-node", c"sandbox", c"r\xc3\xa9sum\xff"];
        let argv: Vec<*const libc::c_char> = given.iter().map(|a| a.as_ptr()).collect();
        let argc = libc::c_int::try_from(argv.len()).unwrap();
        // SAFETY: three valid NUL-terminated strings, alive for the call.
        unsafe { keep_args(argc, argv.as_ptr()) };
        let want: Vec<OsString> = given
            .iter()
            .map(|a| OsString::from_vec(a.to_bytes().to_vec()))
            .collect();
        assert_eq!(args_os(), want);
    }
}
