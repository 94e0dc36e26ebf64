//! How connections reach a run: one accept loop for every kind of run
//! listener (a run's socket file on unix, a loopback TCP listener
//! anywhere), the loop over a run's channel and the bridge's descriptor
//! hand-over (one marker byte and the run's own TCP socket; Linux), and
//! the per-run and global connection limits.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
#[cfg(unix)]
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::handle::{wait_closed, RunCtx, Shared};
use super::request::serve_conn;

/// A connection's places under the run's and the proxy's limits, held
/// until it closes.
pub(super) type Permits = (OwnedSemaphorePermit, OwnedSemaphorePermit);

/// What a run listens on: how it accepts a connection, and how a
/// connection accepted on it reaches [`serve_conn`]. Every listener goes
/// through the one [`accept_loop`], so the limits and the end of the run
/// are the same for all.
pub(super) trait RunListener: Send + Sync + 'static {
    /// An accepted connection.
    type Conn: Send + 'static;

    /// The next connection.
    fn accept(&self) -> impl Future<Output = io::Result<Self::Conn>> + Send;

    /// Serves one connection, holding `permits` until it closes.
    fn serve(
        conn: Self::Conn,
        ctx: Arc<RunCtx>,
        shared: Arc<Shared>,
        permits: Permits,
    ) -> impl Future<Output = ()> + Send + 'static;
}

/// A run's socket file: on Linux each connection is either the bridge
/// handing over the run's own TCP socket, or a client speaking HTTP on the
/// unix socket itself (see [`receive`]); elsewhere always the latter (no
/// descriptor is taken: a descriptor sent along is closed unread).
#[cfg(unix)]
impl RunListener for UnixListener {
    type Conn = UnixStream;

    async fn accept(&self) -> io::Result<UnixStream> {
        UnixListener::accept(self).await.map(|(s, _)| s)
    }

    #[cfg(target_os = "linux")]
    fn serve(
        conn: UnixStream,
        ctx: Arc<RunCtx>,
        shared: Arc<Shared>,
        permits: Permits,
    ) -> impl Future<Output = ()> + Send + 'static {
        receive(conn, ctx, shared, permits)
    }

    #[cfg(not(target_os = "linux"))]
    fn serve(
        conn: UnixStream,
        ctx: Arc<RunCtx>,
        shared: Arc<Shared>,
        permits: Permits,
    ) -> impl Future<Output = ()> + Send + 'static {
        serve_conn(conn, ctx, shared, permits)
    }
}

/// A run's loopback TCP listener: every connection speaks HTTP to the
/// proxy directly, and a `CONNECT` tunnel's client is a TCP socket as a
/// handed-over one is.
impl RunListener for TcpListener {
    type Conn = TcpStream;

    async fn accept(&self) -> io::Result<TcpStream> {
        TcpListener::accept(self).await.map(|(s, _)| s)
    }

    fn serve(
        conn: TcpStream,
        ctx: Arc<RunCtx>,
        shared: Arc<Shared>,
        permits: Permits,
    ) -> impl Future<Output = ()> + Send + 'static {
        let _ = conn.set_nodelay(true);
        serve_conn(conn, ctx, shared, permits)
    }
}

/// Accepts a run's connections, each within the run's and the proxy's
/// connection limits, until the run ends; the listener is closed then.
pub(super) async fn accept_loop<L: RunListener>(
    listener: L,
    ctx: Arc<RunCtx>,
    shared: Arc<Shared>,
) {
    let mut closed = ctx.closed.clone();
    loop {
        let permits = tokio::select! {
            // The run's end first: nothing of an ended run is served,
            // even what arrived in the same instant.
            biased;
            _ = wait_closed(&mut closed) => return,
            p = acquire(&ctx.conns, &shared.global) => p,
        };
        let conn = tokio::select! {
            // The run's end first: nothing of an ended run is served,
            // even what arrived in the same instant.
            biased;
            _ = wait_closed(&mut closed) => return,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(_) => {
                    // EMFILE and friends: back off rather than spin.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        tokio::spawn(L::serve(conn, ctx.clone(), shared.clone(), permits));
    }
}

/// Serves the connections a run's bridge hands over on its channel, until
/// the run ends or the bridge closes its end. A message without a TCP
/// socket, or with anything else, is refused and closed; a channel that
/// speaks anything but hand-overs is closed.
#[cfg(target_os = "linux")]
pub(super) async fn channel_loop(channel: UnixStream, ctx: Arc<RunCtx>, shared: Arc<Shared>) {
    let mut closed = ctx.closed.clone();
    loop {
        let permits = tokio::select! {
            // The run's end first: nothing of an ended run is served,
            // even what arrived in the same instant.
            biased;
            _ = wait_closed(&mut closed) => return,
            p = acquire(&ctx.conns, &shared.global) => p,
        };
        let got = tokio::select! {
            // The run's end first: nothing of an ended run is served,
            // even what arrived in the same instant.
            biased;
            _ = wait_closed(&mut closed) => return,
            r = channel.async_io(tokio::io::Interest::READABLE, || {
                recv_first(&channel).map_err(std::io::Error::from)
            }) => r,
        };
        match got {
            Ok(First::HandedOff(tcp)) => {
                let tcp = match tcp
                    .set_nonblocking(true)
                    .and_then(|_| TcpStream::from_std(tcp))
                {
                    Ok(t) => t,
                    Err(_) => continue,
                };
                tokio::spawn(serve_conn(tcp, ctx.clone(), shared.clone(), permits));
            }
            // A descriptor that is not a connected TCP socket was closed.
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => continue,
            // End of the channel, or bytes that are no hand-over.
            Ok(First::Byte(_)) | Err(_) => return,
        }
    }
}

/// How long a new connection on a run's socket may take to say what it is.
#[cfg(target_os = "linux")]
const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads a connection's first byte, with any descriptor sent along with it.
/// A connection from the run's bridge carries the run's own TCP socket (the
/// bridge hands it over, so that bytes flow between it and the proxy
/// directly); any other client speaks HTTP on the unix socket itself, and
/// the byte read is the first of its request.
#[cfg(target_os = "linux")]
async fn receive(stream: UnixStream, ctx: Arc<RunCtx>, shared: Arc<Shared>, permits: Permits) {
    let first = tokio::time::timeout(FIRST_BYTE_TIMEOUT, async {
        loop {
            if stream.readable().await.is_err() {
                return None;
            }
            match stream.try_io(tokio::io::Interest::READABLE, || {
                recv_first(&stream).map_err(std::io::Error::from)
            }) {
                Ok(r) => return Some(r),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => return None,
            }
        }
    })
    .await;
    match first {
        Ok(Some(First::HandedOff(tcp))) => {
            let tcp = match tcp
                .set_nonblocking(true)
                .and_then(|_| TcpStream::from_std(tcp))
            {
                Ok(t) => t,
                Err(_) => return,
            };
            serve_conn(tcp, ctx, shared, permits).await
        }
        Ok(Some(First::Byte(b))) => {
            serve_conn(Prefixed::new(b, stream), ctx, shared, permits).await
        }
        _ => {}
    }
}

#[cfg(target_os = "linux")]
enum First {
    /// The run's TCP socket, handed over by the bridge.
    HandedOff(std::net::TcpStream),
    /// The first byte of a request spoken on the unix socket itself.
    Byte(u8),
}

/// One `recvmsg` of one byte and at most one descriptor. A descriptor is
/// accepted only when it is a connected TCP stream socket and came with the
/// bridge's marker byte; anything else sent along is closed and the
/// connection dropped.
#[cfg(target_os = "linux")]
fn recv_first(stream: &UnixStream) -> rustix::io::Result<First> {
    use rustix::net::{
        recvmsg, sockopt, AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags,
        SocketType,
    };
    use std::mem::MaybeUninit;
    let mut byte = [0u8; 1];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut cmsg = RecvAncillaryBuffer::new(&mut space);
    let r = recvmsg(
        stream,
        &mut [std::io::IoSliceMut::new(&mut byte)],
        &mut cmsg,
        RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
    )?;
    let mut fds: Vec<std::os::fd::OwnedFd> = Vec::new();
    for m in cmsg.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = m {
            fds.extend(rights);
        }
    }
    if r.bytes == 0 {
        return Err(rustix::io::Errno::CONNRESET);
    }
    if fds.is_empty() {
        return Ok(First::Byte(byte[0]));
    }
    if fds.len() != 1 || byte[0] != crate::bridge::HANDOFF_MARKER {
        return Err(rustix::io::Errno::INVAL);
    }
    let fd = fds.pop().expect("one descriptor");
    let ok = sockopt::socket_type(&fd) == Ok(SocketType::STREAM)
        && matches!(
            sockopt::socket_domain(&fd),
            Ok(AddressFamily::INET) | Ok(AddressFamily::INET6)
        )
        && sockopt::socket_acceptconn(&fd) == Ok(false)
        && rustix::net::getpeername(&fd).is_ok();
    if !ok {
        return Err(rustix::io::Errno::INVAL);
    }
    Ok(First::HandedOff(std::net::TcpStream::from(fd)))
}

/// A stream whose first byte was already read.
#[cfg(target_os = "linux")]
struct Prefixed<S> {
    first: Option<u8>,
    inner: S,
}

#[cfg(target_os = "linux")]
impl<S> Prefixed<S> {
    fn new(first: u8, inner: S) -> Self {
        Prefixed {
            first: Some(first),
            inner,
        }
    }
}

#[cfg(target_os = "linux")]
impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if let Some(b) = self.first {
            if buf.remaining() > 0 {
                buf.put_slice(&[b]);
                self.first = None;
                return std::task::Poll::Ready(Ok(()));
            }
        }
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

#[cfg(target_os = "linux")]
impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

async fn acquire(run: &Arc<Semaphore>, global: &Arc<Semaphore>) -> Permits {
    let a = run.clone().acquire_owned().await.expect("never closed");
    let b = global.clone().acquire_owned().await.expect("never closed");
    (a, b)
}
