//! The call's plumbing on Unix: its files placed by descriptor, and the
//! server's stdio, stop and end over socket pairs watched with `poll`.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oz0_core::{RunIo, Stdio};
use oz0_plugin::job::FILES_DIR;
use oz0_plugin::mcp::{Client, McpError, EOF_GRACE};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::fs::{Mode, OFlags};

use super::ToolError;

/// Places the call's files in `work/.oz0-files/`: the folder made new,
/// each file created new, nothing followed.
pub(super) fn place_files(work: &Path, files: &[(String, Vec<u8>)]) -> Result<(), ToolError> {
    if files.is_empty() {
        return Ok(());
    }
    let err = |what: &str, source: rustix::io::Errno| ToolError::Files {
        what: what.to_string(),
        source: source.into(),
    };
    let dir = rustix::fs::open(
        work,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| err("the work folder", e))?;
    rustix::fs::mkdirat(&dir, FILES_DIR, Mode::from_raw_mode(0o700))
        .map_err(|e| err(FILES_DIR, e))?;
    let files_dir = rustix::fs::openat(
        &dir,
        FILES_DIR,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| err(FILES_DIR, e))?;
    for (name, bytes) in files {
        let fd = rustix::fs::openat(
            &files_dir,
            name.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| err(name, e))?;
        File::from(fd)
            .write_all(bytes)
            .map_err(|source| ToolError::File {
                name: name.clone(),
                source,
            })?;
    }
    Ok(())
}

/// Starts the server with `start` (its stdio and its stop descriptor) on a
/// thread of its own, makes the call over its stdio, then ends it: the end
/// of its input, and its stop after [`EOF_GRACE`] (at once when the
/// call failed). Returns the call and what `start` returned.
pub(super) fn call_over<R: Send + 'static, T>(
    talk: impl FnOnce(Client<'_, UnixStream>) -> Result<T, McpError>,
    deadline: Instant,
    cancel: &OwnedFd,
    errors: File,
    start: impl FnOnce(RunIo, OwnedFd) -> R + Send,
) -> Result<(Result<T, McpError>, R), ToolError> {
    fn pipe(what: &'static str) -> impl Fn(std::io::Error) -> ToolError {
        move |source| ToolError::Channel { what, source }
    }
    let (to_server, server_in) = UnixStream::pair().map_err(pipe("the server's input"))?;
    let (server_out, from_server) = UnixStream::pair().map_err(pipe("the server's output"))?;
    let (stop_r, stop_w) = UnixStream::pair().map_err(pipe("the server's stop"))?;
    let (done_r, done_w) = UnixStream::pair().map_err(pipe("the server's end"))?;
    let job_cancel = cancel
        .as_fd()
        .try_clone_to_owned()
        .map_err(pipe("the cancel descriptor"))?;
    let stop = either(job_cancel, stop_r).map_err(pipe("the server's stop"))?;
    let io = RunIo {
        stdin: Stdio::File(File::from(OwnedFd::from(server_in))),
        stdout: Stdio::File(File::from(OwnedFd::from(server_out))),
        stderr: Stdio::File(errors),
    };
    // The job's cancel also ends the client's waits at once.
    let stopped = Arc::new(AtomicBool::new(false));
    let watcher = {
        let c = cancel
            .as_fd()
            .try_clone_to_owned()
            .map_err(pipe("the cancel descriptor"))?;
        let d = done_r.try_clone().map_err(pipe("the server's end"))?;
        let stopped = stopped.clone();
        std::thread::spawn(move || {
            if wait_readable(&[c.as_fd(), d.as_fd()], None) == Some(0) {
                stopped.store(true, Ordering::SeqCst);
            }
        })
    };
    std::thread::scope(|s| {
        let server = s.spawn(move || {
            let out = start(io, stop);
            drop(done_w);
            out
        });
        // The client's end of the server's input goes when the call returns.
        let r = talk(Client::new(to_server, from_server, deadline, &stopped));
        // A server that ended well exits at the end of its input; one that
        // did not, or any other end of the call, is stopped.
        let stop_now = match &r {
            Ok(_) => wait_readable(&[done_r.as_fd()], Some(EOF_GRACE)).is_none(),
            Err(_) => true,
        };
        if stop_now {
            let _ = (&stop_w).write_all(b"x");
        }
        let out = server.join().map_err(|_| ToolError::ServerThread)?;
        let _ = watcher.join();
        Ok((r, out))
    })
}

/// Waits until one of `fds` is readable or hung up (its index), or
/// `timeout` passed (None).
fn wait_readable(fds: &[std::os::fd::BorrowedFd<'_>], timeout: Option<Duration>) -> Option<usize> {
    let mut p: Vec<PollFd<'_>> = fds.iter().map(|f| PollFd::new(f, PollFlags::IN)).collect();
    let until = timeout.map(|t| Instant::now() + t);
    loop {
        let left = until.map(|u| u.saturating_duration_since(Instant::now()));
        let ts = left.map(|l| Timespec {
            tv_sec: i64::try_from(l.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(l.subsec_nanos()),
        });
        match poll(&mut p, ts.as_ref()) {
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return None,
            Ok(0) => return None,
            Ok(_) => return p.iter().position(|f| !f.revents().is_empty()),
        }
    }
}

/// One descriptor that fires when either does: the job's cancel or the
/// call's own stop. Its thread ends when the run lets go of it.
fn either(a: OwnedFd, b: UnixStream) -> std::io::Result<OwnedFd> {
    let (r, w) = UnixStream::pair()?;
    std::thread::spawn(move || {
        if matches!(
            wait_readable(&[a.as_fd(), b.as_fd(), w.as_fd()], None),
            Some(0 | 1)
        ) {
            let _ = (&w).write_all(b"x");
        }
    });
    Ok(OwnedFd::from(r))
}
