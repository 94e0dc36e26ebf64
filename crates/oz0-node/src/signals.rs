//! A run's cancel handle from the node's own signals (Linux and macOS).

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;

/// A pipe that becomes readable on SIGINT, SIGTERM or SIGHUP.
pub fn cancel_pipe() -> Option<OwnedFd> {
    let (r, w) = UnixStream::pair().ok()?;
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::low_level::pipe::register(sig, w.try_clone().ok()?).ok()?;
    }
    Some(OwnedFd::from(r))
}
