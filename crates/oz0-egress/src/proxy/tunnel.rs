//! Reaching an upstream and carrying a tunnel: dialling the checked
//! addresses with a deadline, and moving a `CONNECT` tunnel's bytes both
//! ways (counted, with an idle deadline, until the run ends).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::StatusCode;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{watch, Semaphore};

use super::handle::wait_closed;
use super::MAX_DIAL_ADDRS;

/// Copy buffer per tunnel direction.
const TUNNEL_BUFFER: usize = 64 * 1024;

pub(super) async fn dial(
    addrs: &[SocketAddr],
    deadline: Duration,
) -> Result<(TcpStream, SocketAddr), (StatusCode, String)> {
    let mut why = String::from("no address to dial");
    let mut all_timed_out = true;
    for &addr in addrs.iter().take(MAX_DIAL_ADDRS) {
        match tokio::time::timeout(deadline, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok((s, addr));
            }
            Ok(Err(e)) => {
                all_timed_out = false;
                why = format!("could not connect to {addr}: {e}");
            }
            Err(_) => why = format!("connecting to {addr} timed out"),
        }
    }
    let status = if all_timed_out && !addrs.is_empty() {
        StatusCode::GATEWAY_TIMEOUT
    } else {
        StatusCode::BAD_GATEWAY
    };
    Err((status, why))
}

/// Carries bytes both ways until both ends close, nothing moves for
/// `idle`, or the run ends. Returns (bytes up, bytes down, why it ended
/// early).
///
/// When the client is a TCP socket (the run's own, handed over by the
/// bridge, or a connection to the run's loopback listener) the bytes move
/// through buffers that grow for bulk transfers (`pump`); otherwise
/// through tokio's copy.
pub(super) async fn tunnel(
    client: hyper::upgrade::Upgraded,
    mut server: TcpStream,
    idle: Duration,
    large_buffers: &Semaphore,
    closed: &mut watch::Receiver<bool>,
) -> (u64, u64, Option<String>) {
    let up = Arc::new(AtomicU64::new(0));
    let down = Arc::new(AtomicU64::new(0));
    let why = match client.downcast::<TokioIo<TcpStream>>() {
        Ok(parts) => {
            let client = parts.io.into_inner();
            let moved = async {
                // Bytes the client sent right behind its CONNECT head.
                tokio::io::AsyncWriteExt::write_all(&mut server, &parts.read_buf).await?;
                up.fetch_add(parts.read_buf.len() as u64, Ordering::Relaxed);
                crate::pump::both_ways(&client, &server, &up, &down, large_buffers)
                    .await
                    .map(drop)
            };
            guard(moved, &up, &down, idle, closed).await
        }
        Err(client) => {
            let mut a = Counted {
                inner: TokioIo::new(client),
                n: up.clone(),
            };
            let mut b = Counted {
                inner: server,
                n: down.clone(),
            };
            let moved = async {
                tokio::io::copy_bidirectional_with_sizes(
                    &mut a,
                    &mut b,
                    TUNNEL_BUFFER,
                    TUNNEL_BUFFER,
                )
                .await
                .map(|_| ())
            };
            guard(moved, &up, &down, idle, closed).await
        }
    };
    (
        up.load(Ordering::Relaxed),
        down.load(Ordering::Relaxed),
        why,
    )
}

/// Runs `moved` until it ends, no byte moved for `idle` (judged by the
/// counters), or the run ends; says why when it ended early.
async fn guard(
    moved: impl std::future::Future<Output = io::Result<()>>,
    up: &AtomicU64,
    down: &AtomicU64,
    idle: Duration,
    closed: &mut watch::Receiver<bool>,
) -> Option<String> {
    let watchdog = async {
        let mut last = u64::MAX;
        loop {
            tokio::time::sleep(idle).await;
            let now = up.load(Ordering::Relaxed) + down.load(Ordering::Relaxed);
            if now == last {
                return;
            }
            last = now;
        }
    };
    tokio::select! {
        // The run's end first: no byte moves for an ended run.
        biased;
        _ = wait_closed(closed) => Some("the run ended".into()),
        r = moved => r.err().map(|e| e.to_string()),
        _ = watchdog => Some(format!("idle for {}s", idle.as_secs())),
    }
}

/// A stream that counts the bytes read from it.
struct Counted<S> {
    inner: S,
    n: Arc<AtomicU64>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let got = buf.filled().len() - before;
        self.n.fetch_add(got as u64, Ordering::Relaxed);
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
