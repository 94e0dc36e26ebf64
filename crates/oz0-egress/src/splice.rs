//! Socket-to-socket byte moving for the proxy's CONNECT tunnels, by
//! `splice(2)` through a pipe, driven by tokio's readiness: the bytes of a
//! tunnel never enter the proxy's memory.
//!
//! A tunnel between the run's own TCP socket (handed over by the bridge) and
//! the upstream socket is the bulk of a run's traffic (every HTTPS request);
//! copying it through a userspace buffer cost half or more of loopback
//! throughput.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::pipe::{fcntl_setpipe_size, pipe_with, splice, PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Pipe capacity asked for; the kernel's default (64 KiB) is used when the
/// request is refused (above `/proc/sys/fs/pipe-max-size`).
const PIPE_SIZE: usize = crate::bridge::PIPE_SIZE;

/// Moves bytes both ways between `a` and `b` until both directions reached
/// EOF or one failed. Counts bytes read from `a` in `up` and from `b` in
/// `down` as they move. A direction that reaches EOF half-closes its
/// destination, as `copy_bidirectional` does.
pub(crate) async fn both_ways(
    a: &TcpStream,
    b: &TcpStream,
    up: &AtomicU64,
    down: &AtomicU64,
) -> io::Result<()> {
    tokio::try_join!(one_way(a, b, up), one_way(b, a, down)).map(|_| ())
}

/// Moves bytes `from` → `to` until EOF, then shuts down writing on `to`.
async fn one_way(from: &TcpStream, to: &TcpStream, count: &AtomicU64) -> io::Result<()> {
    let (pipe_r, pipe_w) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
    let size = fcntl_setpipe_size(&pipe_w, PIPE_SIZE).unwrap_or(64 * 1024);
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    loop {
        // Fill: the pipe is empty here, so only the socket can block.
        let n = from
            .async_io(Interest::READABLE, || {
                Ok(splice(from, None, &pipe_w, None, size, flags)?)
            })
            .await?;
        if n == 0 {
            shut_write(to);
            return Ok(());
        }
        count.fetch_add(n as u64, Ordering::Relaxed);
        drain(&pipe_r, to, n, flags).await?;
    }
}

/// Writes the `n` bytes held in the pipe to `to`.
async fn drain(
    pipe_r: &OwnedFd,
    to: &TcpStream,
    mut n: usize,
    flags: SpliceFlags,
) -> io::Result<()> {
    while n > 0 {
        let k = to
            .async_io(Interest::WRITABLE, || {
                Ok(splice(pipe_r, None, to, None, n, flags)?)
            })
            .await?;
        if k == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        n -= k;
    }
    Ok(())
}

fn shut_write(s: &TcpStream) {
    // The peer may be gone already; nothing to do about it then.
    let _ = rustix::net::shutdown(s.as_fd(), rustix::net::Shutdown::Write);
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpListener;

    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (c, s) = tokio::join!(TcpStream::connect(addr), l.accept());
        (c.unwrap(), s.unwrap().0)
    }

    /// Bytes cross both ways intact, EOF is passed on as a half-close, and
    /// the counters agree with what was sent.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn moves_both_ways_and_passes_eof() {
        let (mut client, proxy_a) = pair().await;
        let (proxy_b, mut server) = pair().await;
        let up = AtomicU64::new(0);
        let down = AtomicU64::new(0);
        let payload: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let reply = b"pong".repeat(10_000);
        let p2 = payload.clone();
        let r2 = reply.clone();
        let server_side = async move {
            let mut got = Vec::new();
            server.read_to_end(&mut got).await.unwrap();
            server.write_all(&r2).await.unwrap();
            server.shutdown().await.unwrap();
            got
        };
        let client_side = async move {
            client.write_all(&p2).await.unwrap();
            client.shutdown().await.unwrap();
            let mut got = Vec::new();
            client.read_to_end(&mut got).await.unwrap();
            got
        };
        let (t, got_server, got_client) = tokio::join!(
            both_ways(&proxy_a, &proxy_b, &up, &down),
            server_side,
            client_side
        );
        t.unwrap();
        assert_eq!(got_server, payload);
        assert_eq!(got_client, reply);
        assert_eq!(up.load(Ordering::Relaxed), payload.len() as u64);
        assert_eq!(down.load(Ordering::Relaxed), reply.len() as u64);
    }
}
