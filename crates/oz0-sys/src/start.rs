//! What a binary that enters at its own C `main` (`#![no_main]`) needs of
//! std's start-up.

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
