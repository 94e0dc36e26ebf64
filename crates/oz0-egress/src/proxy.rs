//! The proxy: one tokio runtime for the node, one unix socket per run.

use std::convert::Infallible;
use std::fmt;
use std::future::Future as _;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{combinators::BoxBody, BodyExt as _, Empty, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, Uri, Version};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use oz0_policy::net::{self as policy, DenyReason, Egress, Host, Port, Verdict};

use crate::audit::{audit_target, AuditRecord, AuditSink, Decision, StderrSink};
use crate::resolve::{own_addresses, Resolver, SystemResolver};
use crate::service::{EgressService, Lease, RunEgress};
use crate::token::Token;
use crate::EgressError;

/// Errors inside bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ProxyBody = BoxBody<Bytes, BoxError>;

/// Largest request head (request line and headers) the proxy accepts with
/// a 400 beyond it. Heads larger than [`PARSE_BUFFER`] never reach the proxy's
/// code: the HTTP parser answers 431 itself.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// The HTTP parser's read buffer, an upper bound on any request head.
pub const PARSE_BUFFER: usize = 64 * 1024;
/// Most headers in a request.
pub const MAX_HEADERS: usize = 100;
/// Most addresses of a name tried when dialling.
pub const MAX_DIAL_ADDRS: usize = 4;
/// Copy buffer per tunnel direction.
const TUNNEL_BUFFER: usize = 64 * 1024;

/// Bounds and deadlines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyLimits {
    /// Connections open at once across all runs; more wait to be accepted.
    pub max_connections: usize,
    /// Connections open at once for one run.
    pub max_connections_per_run: usize,
    /// See [`MAX_HEAD_BYTES`].
    pub max_head_bytes: usize,
    /// Time a client has to send a whole request head (also closes idle
    /// keep-alive connections).
    pub header_timeout: Duration,
    /// Time to resolve a name.
    pub resolve_timeout: Duration,
    /// Time to connect to one address.
    pub connect_timeout: Duration,
    /// A tunnel or a streamed body with no bytes either way for this long
    /// is closed; also the wait for an upstream's response head.
    pub idle_timeout: Duration,
}

impl Default for ProxyLimits {
    fn default() -> Self {
        ProxyLimits {
            max_connections: 1024,
            max_connections_per_run: 256,
            max_head_bytes: MAX_HEAD_BYTES,
            header_timeout: Duration::from_secs(30),
            resolve_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
        }
    }
}

/// How the proxy is built. `Default` is what the node uses: the system
/// resolver, records on stderr, the node's interface addresses read per run.
pub struct ProxyConfig {
    /// Resolves allowed names.
    pub resolver: Arc<dyn Resolver>,
    /// Receives every decision.
    pub audit: Arc<dyn AuditSink>,
    /// The node's own addresses, refused as targets of names; `None` reads
    /// them from `/proc` when each run is added.
    pub own_addrs: Option<Vec<IpAddr>>,
    /// Bounds and deadlines.
    pub limits: ProxyLimits,
    /// Runtime worker threads.
    pub worker_threads: usize,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            resolver: Arc::new(SystemResolver),
            audit: Arc::new(StderrSink),
            own_addrs: None,
            limits: ProxyLimits::default(),
            worker_threads: 2,
        }
    }
}

impl fmt::Debug for ProxyConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyConfig")
            .field("own_addrs", &self.own_addrs)
            .field("limits", &self.limits)
            .field("worker_threads", &self.worker_threads)
            .finish_non_exhaustive()
    }
}

/// Starts the proxy.
#[derive(Debug)]
pub struct Proxy;

impl Proxy {
    /// Starts the proxy's runtime (its own threads; the caller stays
    /// synchronous). Runs are added with [`ProxyHandle::add_run`].
    pub fn start(config: ProxyConfig) -> Result<ProxyHandle, EgressError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.worker_threads.max(1))
            .max_blocking_threads(64)
            .thread_name("oz0-egress")
            .enable_all()
            .build()
            .map_err(EgressError::Runtime)?;
        let shared = Arc::new(Shared {
            global: Arc::new(Semaphore::new(config.limits.max_connections.max(1))),
            large_buffers: Semaphore::new(crate::pump::LARGE_BUDGET),
            resolver: config.resolver,
            audit: config.audit,
            own_addrs: config.own_addrs,
            limits: config.limits,
        });
        Ok(ProxyHandle {
            rt: Some(rt),
            shared,
        })
    }
}

struct Shared {
    resolver: Arc<dyn Resolver>,
    audit: Arc<dyn AuditSink>,
    own_addrs: Option<Vec<IpAddr>>,
    limits: ProxyLimits,
    global: Arc<Semaphore>,
    /// Large tunnel buffers, shared by every tunnel (see `pump`).
    large_buffers: Semaphore,
}

/// The running proxy. Dropping it (or [`ProxyHandle::shutdown`]) stops
/// every run's socket and connection.
pub struct ProxyHandle {
    rt: Option<tokio::runtime::Runtime>,
    shared: Arc<Shared>,
}

impl fmt::Debug for ProxyHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyHandle").finish_non_exhaustive()
    }
}

impl ProxyHandle {
    /// Creates the run's socket and serves it until the returned guard is
    /// dropped. A request on it must carry `run.token`; it opens only
    /// `run.egress`.
    pub fn add_run(&self, run: RunEgress) -> Result<RunGuard, EgressError> {
        let rt = self.rt.as_ref().ok_or(EgressError::ShutDown)?;
        let path = run.socket_path.clone();
        let bind_err = |source| EgressError::Bind {
            path: path.clone(),
            source,
        };
        let std_listener = std::os::unix::net::UnixListener::bind(&path).map_err(bind_err)?;
        std_listener.set_nonblocking(true).map_err(bind_err)?;
        let ino = std::fs::metadata(&path).map(|m| (m.dev(), m.ino())).ok();
        let listener = {
            let _enter = rt.enter();
            UnixListener::from_std(std_listener).map_err(bind_err)?
        };
        let (close, closed) = watch::channel(false);
        let ctx = self.run_ctx(run.run_id.clone(), run.token, run.egress, closed);
        rt.spawn(accept_loop(listener, ctx, self.shared.clone()));
        Ok(RunGuard {
            run_id: run.run_id,
            path: Some(path),
            ino,
            close,
        })
    }

    /// Serves a run over a channel instead of a socket file: returns the
    /// run's guard and the other end of a connected unix socket pair, for
    /// the run's bridge. The bridge hands each connection it accepts over
    /// the channel (its TCP socket's descriptor, with one marker byte, see
    /// [`crate::bridge::serve_channel`]); nothing else is accepted on it. No
    /// file is made: nothing of the run names a path of the node's, and the
    /// bridge needs no unix socket of its own.
    pub fn add_run_channel(
        &self,
        run_id: String,
        token: Token,
        egress: Egress,
    ) -> Result<(RunGuard, std::os::fd::OwnedFd), EgressError> {
        let rt = self.rt.as_ref().ok_or(EgressError::ShutDown)?;
        let (ours, theirs) =
            std::os::unix::net::UnixStream::pair().map_err(EgressError::Channel)?;
        ours.set_nonblocking(true).map_err(EgressError::Channel)?;
        let stream = {
            let _enter = rt.enter();
            UnixStream::from_std(ours).map_err(EgressError::Channel)?
        };
        let (close, closed) = watch::channel(false);
        let ctx = self.run_ctx(run_id.clone(), token, egress, closed);
        rt.spawn(channel_loop(stream, ctx, self.shared.clone()));
        Ok((
            RunGuard {
                run_id,
                path: None,
                ino: None,
                close,
            },
            theirs.into(),
        ))
    }

    fn run_ctx(
        &self,
        run_id: String,
        token: Token,
        egress: Egress,
        closed: watch::Receiver<bool>,
    ) -> Arc<RunCtx> {
        Arc::new(RunCtx {
            run_id,
            token,
            egress,
            own: self.shared.own_addrs.clone().unwrap_or_else(own_addresses),
            closed,
            conns: Arc::new(Semaphore::new(
                self.shared.limits.max_connections_per_run.max(1),
            )),
        })
    }

    /// Stops every run and waits (briefly) for the proxy's threads.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(rt) = self.rt.take() {
            // Within another runtime (an async caller dropping the last
            // handle) a runtime may not wait for its threads: they are told
            // to stop and left to finish.
            if tokio::runtime::Handle::try_current().is_ok() {
                rt.shutdown_background();
            } else {
                rt.shutdown_timeout(Duration::from_secs(1));
            }
        }
    }
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

impl EgressService for ProxyHandle {
    fn open_channel(
        &self,
        run_id: String,
        token: Token,
        egress: Egress,
    ) -> Result<(Lease, std::os::fd::OwnedFd), EgressError> {
        let (guard, theirs) = self.add_run_channel(run_id, token, egress)?;
        Ok((Lease::new(guard), theirs))
    }

    fn open_socket(&self, run: RunEgress) -> Result<Lease, EgressError> {
        self.add_run(run).map(Lease::new)
    }
}

/// A run's socket. Dropping it closes the socket, ends the run's open
/// connections and tunnels, and removes the socket file.
#[derive(Debug)]
pub struct RunGuard {
    run_id: String,
    /// The run's socket file; none for a run served over a channel.
    path: Option<PathBuf>,
    ino: Option<(u64, u64)>,
    close: watch::Sender<bool>,
}

impl RunGuard {
    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The run's socket (bind-mount it into the run, and only that run);
    /// none for a run served over a channel.
    pub fn socket_path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        let _ = self.close.send(true);
        let Some(path) = &self.path else {
            return;
        };
        // Remove the file only if it is still ours.
        let same = std::fs::symlink_metadata(path)
            .map(|m| Some((m.dev(), m.ino())) == self.ino)
            .unwrap_or(false);
        if same {
            let _ = std::fs::remove_file(path);
        }
    }
}

struct RunCtx {
    run_id: String,
    token: Token,
    egress: Egress,
    own: Vec<IpAddr>,
    closed: watch::Receiver<bool>,
    conns: Arc<Semaphore>,
}

async fn wait_closed(rx: &mut watch::Receiver<bool>) {
    // An error means the guard is gone: closed too.
    let _ = rx.wait_for(|c| *c).await;
}

async fn accept_loop(listener: UnixListener, ctx: Arc<RunCtx>, shared: Arc<Shared>) {
    let mut closed = ctx.closed.clone();
    loop {
        let permits = tokio::select! {
            _ = wait_closed(&mut closed) => return,
            p = acquire(&ctx.conns, &shared.global) => p,
        };
        let stream = tokio::select! {
            _ = wait_closed(&mut closed) => return,
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(_) => {
                    // EMFILE and friends: back off rather than spin.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        tokio::spawn(receive(stream, ctx.clone(), shared.clone(), permits));
    }
}

/// Serves the connections a run's bridge hands over on its channel, until
/// the run ends or the bridge closes its end. A message without a TCP
/// socket, or with anything else, is refused and closed; a channel that
/// speaks anything but hand-overs is closed.
async fn channel_loop(channel: UnixStream, ctx: Arc<RunCtx>, shared: Arc<Shared>) {
    let mut closed = ctx.closed.clone();
    loop {
        let permits = tokio::select! {
            _ = wait_closed(&mut closed) => return,
            p = acquire(&ctx.conns, &shared.global) => p,
        };
        let got = tokio::select! {
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
const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads a connection's first byte, with any descriptor sent along with it.
/// A connection from the run's bridge carries the run's own TCP socket (the
/// bridge hands it over, so that bytes flow between it and the proxy
/// directly); any other client speaks HTTP on the unix socket itself, and
/// the byte read is the first of its request.
async fn receive(
    stream: UnixStream,
    ctx: Arc<RunCtx>,
    shared: Arc<Shared>,
    permits: (OwnedSemaphorePermit, OwnedSemaphorePermit),
) {
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
struct Prefixed<S> {
    first: Option<u8>,
    inner: S,
}

impl<S> Prefixed<S> {
    fn new(first: u8, inner: S) -> Self {
        Prefixed {
            first: Some(first),
            inner,
        }
    }
}

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

async fn acquire(
    run: &Arc<Semaphore>,
    global: &Arc<Semaphore>,
) -> (OwnedSemaphorePermit, OwnedSemaphorePermit) {
    let a = run.clone().acquire_owned().await.expect("never closed");
    let b = global.clone().acquire_owned().await.expect("never closed");
    (a, b)
}

/// Per client connection: the upstream of the last plain-HTTP request,
/// reused while the client keeps asking the same host.
#[derive(Default)]
struct ConnState {
    upstream: Mutex<Option<Upstream>>,
}

struct Upstream {
    key: (String, u16),
    addr: SocketAddr,
    sender: hyper::client::conn::http1::SendRequest<Metered<Incoming>>,
}

async fn serve_conn<S>(
    stream: S,
    ctx: Arc<RunCtx>,
    shared: Arc<Shared>,
    _permits: (OwnedSemaphorePermit, OwnedSemaphorePermit),
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let state = Arc::new(ConnState::default());
    let (c, s) = (ctx.clone(), shared.clone());
    let svc = service_fn(move |req| {
        let (ctx, shared, state) = (c.clone(), s.clone(), state.clone());
        async move { Ok::<_, Infallible>(handle(req, ctx, shared, state).await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(shared.limits.header_timeout)
        .max_buf_size(PARSE_BUFFER)
        .max_headers(MAX_HEADERS)
        .keep_alive(true);
    let conn = builder
        .serve_connection(TokioIo::new(stream), svc)
        .with_upgrades();
    let mut closed = ctx.closed.clone();
    tokio::select! {
        r = conn => {
            if let Err(e) = r {
                if e.is_parse() || e.is_parse_too_large() {
                    let status = if e.is_parse_too_large() { 431 } else { 400 };
                    let mut rec = AuditRecord::new(&ctx.run_id, Decision::Bad, status, "");
                    rec.reason = Some(format!("malformed request: {e}"));
                    shared.audit.record(&rec);
                }
            }
        }
        _ = wait_closed(&mut closed) => {}
    }
}

fn full(text: impl Into<Bytes>) -> ProxyBody {
    Full::new(text.into()).map_err(|n| match n {}).boxed()
}

fn empty() -> ProxyBody {
    Empty::new().map_err(|n| match n {}).boxed()
}

fn text_response(status: StatusCode, body: String) -> Response<ProxyBody> {
    let mut r = Response::new(full(format!("{body}\n")));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Sends `record` with `duration_ms` filled in and the token redacted.
fn emit(shared: &Shared, token: &Token, mut record: AuditRecord, start: Instant) {
    record.duration_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    record.redact(token.expose());
    shared.audit.record(&record);
}

async fn handle(
    req: Request<Incoming>,
    ctx: Arc<RunCtx>,
    shared: Arc<Shared>,
    state: Arc<ConnState>,
) -> Response<ProxyBody> {
    let start = Instant::now();
    let method = req.method().clone();
    let target = audit_target(&req.uri().to_string());
    let record = |decision, status: StatusCode| {
        let mut r = AuditRecord::new(&ctx.run_id, decision, status.as_u16(), method.as_str());
        r.target = Some(target.clone());
        r
    };

    // 1. The token, before anything else.
    let mut auth = req.headers().get_all(header::PROXY_AUTHORIZATION).iter();
    let authorized = match (auth.next(), auth.next()) {
        (Some(v), None) => ctx.token.authorizes(v.as_bytes()),
        _ => false,
    };
    if !authorized {
        let status = StatusCode::PROXY_AUTHENTICATION_REQUIRED;
        let mut rec = record(Decision::Auth, status);
        rec.reason = Some("missing or wrong proxy token".into());
        emit(&shared, &ctx.token, rec, start);
        let mut r = text_response(
            status,
            "proxy authentication required: use this run's proxy URL (HTTP_PROXY)".into(),
        );
        r.headers_mut().insert(
            header::PROXY_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"oz0\""),
        );
        return r;
    }

    let bad = |why: String| {
        let status = StatusCode::BAD_REQUEST;
        let mut rec = record(Decision::Bad, status);
        rec.reason = Some(why.clone());
        emit(&shared, &ctx.token, rec, start);
        let mut r = text_response(status, format!("bad request: {why}"));
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        r
    };

    // 2. Size and shape.
    let head = head_size(&req);
    if head > shared.limits.max_head_bytes {
        return bad(format!(
            "the request head has {head} bytes, over the limit of {}",
            shared.limits.max_head_bytes
        ));
    }
    let (host, port) = match target_of(&req) {
        Ok(t) => t,
        Err(why) => return bad(why),
    };
    let with_target = |decision, status| {
        let mut r = record(decision, status);
        r.host = Some(host.to_string());
        r.port = Some(port.get());
        r
    };
    let deny = |reason: DenyReason| {
        let status = StatusCode::FORBIDDEN;
        let mut rec = with_target(Decision::Deny, status);
        rec.reason = Some(reason.to_string());
        emit(&shared, &ctx.token, rec, start);
        text_response(status, format!("{host}:{port} refused: {reason}"))
    };
    let fail = |status: StatusCode, why: String| {
        let mut rec = with_target(Decision::Allow, status);
        rec.reason = Some(why.clone());
        emit(&shared, &ctx.token, rec, start);
        text_response(status, format!("{host}:{port}: {why}"))
    };

    // 3. The policy, then (for names) one lookup and the address check.
    let verdict = ctx.egress.verdict(&host, port);
    if let Verdict::Deny(reason) = verdict {
        return deny(reason);
    }
    let key = (host.to_string(), port.get());
    let reused = if method == Method::CONNECT {
        None
    } else {
        let mut slot = state.upstream.lock().unwrap_or_else(|e| e.into_inner());
        match slot.take() {
            Some(u) if u.key == key && !u.sender.is_closed() => Some(u),
            _ => None,
        }
    };
    let upstream_or_stream = match reused {
        Some(u) => Ok(u),
        None => {
            let addrs = match verdict {
                Verdict::Deny(_) => unreachable!("handled above"),
                Verdict::Forward(p) => vec![SocketAddr::new(Ipv4Addr::LOCALHOST.into(), p.get())],
                Verdict::Literal(ip, p) => vec![SocketAddr::new(ip, p.get())],
                Verdict::Resolve(name, p) => {
                    let resolver = shared.resolver.clone();
                    let n = name.clone();
                    let lookup = tokio::task::spawn_blocking(move || resolver.resolve(&n, p.get()));
                    let ips =
                        match tokio::time::timeout(shared.limits.resolve_timeout, lookup).await {
                            Ok(Ok(Ok(ips))) => ips,
                            Ok(Ok(Err(e))) => {
                                return fail(
                                    StatusCode::BAD_GATEWAY,
                                    format!("could not resolve {name}: {e}"),
                                )
                            }
                            Ok(Err(e)) => {
                                return fail(
                                    StatusCode::BAD_GATEWAY,
                                    format!("lookup of {name} failed: {e}"),
                                )
                            }
                            Err(_) => {
                                return fail(
                                    StatusCode::GATEWAY_TIMEOUT,
                                    format!("lookup of {name} timed out"),
                                )
                            }
                        };
                    let mut ok = Vec::new();
                    let mut refused = None;
                    for ip in ips {
                        match ctx.egress.address_ok(ip, p, &ctx.own) {
                            Ok(()) => ok.push(SocketAddr::new(ip.to_canonical(), p.get())),
                            Err(class) => {
                                refused.get_or_insert(class);
                            }
                        }
                    }
                    if ok.is_empty() {
                        return deny(
                            refused.map_or(DenyReason::NoAddress, DenyReason::RestrictedAddress),
                        );
                    }
                    ok.dedup();
                    ok
                }
            };
            match dial(&addrs, shared.limits.connect_timeout).await {
                Ok(pair) => Err(pair),
                Err((status, why)) => return fail(status, why),
            }
        }
    };

    // 4. CONNECT: answer 200, then carry bytes both ways.
    if method == Method::CONNECT {
        let Err((tcp, addr)) = upstream_or_stream else {
            unreachable!("CONNECT never reuses")
        };
        let mut rec = with_target(Decision::Allow, StatusCode::OK);
        rec.addr = Some(addr.to_string());
        let shared2 = shared.clone();
        let ctx2 = ctx.clone();
        let mut closed = ctx.closed.clone();
        tokio::spawn(async move {
            match hyper::upgrade::on(req).await {
                Ok(upgraded) => {
                    let (up, down, why) = tunnel(
                        upgraded,
                        tcp,
                        shared2.limits.idle_timeout,
                        &shared2.large_buffers,
                        &mut closed,
                    )
                    .await;
                    rec.bytes_up = up;
                    rec.bytes_down = down;
                    rec.reason = why;
                }
                Err(e) => rec.reason = Some(format!("the client left before the tunnel: {e}")),
            }
            emit(&shared2, &ctx2.token, rec, start);
        });
        return Response::new(empty());
    }

    // 5. Plain HTTP: forward with hop-by-hop and Proxy-* headers removed.
    let mut upstream = match upstream_or_stream {
        Ok(u) => u,
        Err((tcp, addr)) => {
            let io = TokioIo::new(tcp);
            match hyper::client::conn::http1::Builder::new()
                .handshake::<_, Metered<Incoming>>(io)
                .await
            {
                Ok((sender, conn)) => {
                    tokio::spawn(conn);
                    Upstream { key, addr, sender }
                }
                Err(e) => return fail(StatusCode::BAD_GATEWAY, format!("{addr}: {e}")),
            }
        }
    };
    let mut rec = with_target(Decision::Allow, StatusCode::OK);
    rec.addr = Some(upstream.addr.to_string());
    if upstream.sender.ready().await.is_err() {
        return fail(
            StatusCode::BAD_GATEWAY,
            format!("{}: connection closed", upstream.addr),
        );
    }
    let meter = Arc::new(Meter {
        record: Mutex::new(rec),
        up: AtomicU64::new(0),
        down: AtomicU64::new(0),
        start,
        sink: shared.audit.clone(),
        token: ctx.token.clone(),
    });
    let (mut parts, body) = req.into_parts();
    strip_hop_headers(&mut parts.headers);
    let host_header = if port.get() == 80 {
        host.to_string()
    } else {
        format!("{host}:{port}")
    };
    if let Ok(v) = HeaderValue::from_str(&host_header) {
        parts.headers.insert(header::HOST, v);
    }
    let origin = parts
        .uri
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .to_string();
    parts.uri = origin
        .parse::<Uri>()
        .unwrap_or_else(|_| Uri::from_static("/"));
    parts.version = Version::HTTP_11;
    let idle = shared.limits.idle_timeout;
    let body = Metered::new(body, meter.clone(), true, idle);
    let sent = tokio::time::timeout(
        idle,
        upstream
            .sender
            .send_request(Request::from_parts(parts, body)),
    )
    .await;
    let addr = upstream.addr;
    {
        let mut slot = state.upstream.lock().unwrap_or_else(|e| e.into_inner());
        *slot = Some(upstream);
    }
    let set_fail = |status: StatusCode, why: String| {
        let mut r = meter.record.lock().unwrap_or_else(|e| e.into_inner());
        r.status = status.as_u16();
        r.reason = Some(why.clone());
        text_response(status, format!("{host}:{port}: {why}"))
    };
    match sent {
        Ok(Ok(resp)) => {
            let (mut parts, body) = resp.into_parts();
            strip_hop_headers(&mut parts.headers);
            meter
                .record
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .status = parts.status.as_u16();
            Response::from_parts(parts, Metered::new(body, meter, false, idle).boxed())
        }
        Ok(Err(e)) => set_fail(StatusCode::BAD_GATEWAY, format!("{addr}: {e}")),
        Err(_) => set_fail(
            StatusCode::GATEWAY_TIMEOUT,
            format!("{addr}: no response within {}s", idle.as_secs()),
        ),
    }
}

fn head_size(req: &Request<Incoming>) -> usize {
    let line = req.method().as_str().len() + req.uri().to_string().len() + 12;
    req.headers()
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 4)
        .sum::<usize>()
        + line
}

/// The canonical target of a request, or why it is malformed.
fn target_of(req: &Request<Incoming>) -> Result<(Host, Port), String> {
    let uri = req.uri();
    if req.method() == Method::CONNECT {
        let shape = "a CONNECT target is host:port, e.g. CONNECT example.com:443";
        let pq = uri.path_and_query().map_or("", |pq| pq.as_str());
        if uri.scheme().is_some() || !(pq.is_empty() || pq == "/") {
            return Err(shape.into());
        }
        let auth = uri.authority().ok_or(shape)?;
        if auth.as_str().contains('@') {
            return Err(shape.into());
        }
        return policy::parse_target(auth.as_str()).map_err(|e| format!("CONNECT target: {e}"));
    }
    match uri.scheme_str() {
        Some("http") => {}
        Some(s) if s.eq_ignore_ascii_case("https") => {
            return Err("https:// URLs go through CONNECT (set HTTPS_PROXY)".into())
        }
        Some(s) => {
            return Err(format!(
                "only http:// URLs and CONNECT are proxied, not {s}://"
            ))
        }
        None => {
            return Err(
                "this is a proxy: send an absolute URL (GET http://host/path) or CONNECT host:port"
                    .into(),
            )
        }
    }
    let auth = uri.authority().ok_or("the URL has no host")?;
    if auth.as_str().contains('@') {
        return Err("user information in a proxied URL is not forwarded: remove it".into());
    }
    let hp = auth.as_str();
    let with_port = if auth.port().is_some() {
        hp.to_string()
    } else {
        format!("{hp}:80")
    };
    policy::parse_target(&with_port).map_err(|e| format!("URL host: {e}"))
}

/// Headers that describe one hop, never forwarded (RFC 9110 §7.6.1), plus
/// every `Proxy-*` header (the token travels in one).
fn strip_hop_headers(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    let chunked = headers.contains_key(header::TRANSFER_ENCODING);
    for name in [
        header::CONNECTION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
    headers.remove("keep-alive");
    // A message framed by Transfer-Encoding ignores Content-Length; do not
    // let the next hop read a length the body never had.
    if chunked {
        headers.remove(header::CONTENT_LENGTH);
    }
    let proxy: Vec<HeaderName> = headers
        .keys()
        .filter(|k| k.as_str().starts_with("proxy-"))
        .cloned()
        .collect();
    for name in proxy {
        headers.remove(name);
    }
}

async fn dial(
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
/// bridge) the bytes move through buffers that grow for bulk transfers
/// (`pump`); otherwise through tokio's copy.
async fn tunnel(
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
        r = moved => r.err().map(|e| e.to_string()),
        _ = watchdog => Some(format!("idle for {}s", idle.as_secs())),
        _ = wait_closed(closed) => Some("the run ended".into()),
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

/// The audit record of one plain-HTTP exchange, sent when both its bodies
/// are done (dropped).
struct Meter {
    record: Mutex<AuditRecord>,
    up: AtomicU64,
    down: AtomicU64,
    start: Instant,
    sink: Arc<dyn AuditSink>,
    token: Token,
}

impl Drop for Meter {
    fn drop(&mut self) {
        let mut r = self
            .record
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        r.bytes_up = self.up.load(Ordering::Relaxed);
        r.bytes_down = self.down.load(Ordering::Relaxed);
        r.duration_ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        r.redact(self.token.expose());
        self.sink.record(&r);
    }
}

/// A body that counts its data bytes into a [`Meter`] and fails when no
/// frame arrives for `idle`.
struct Metered<B> {
    inner: B,
    meter: Arc<Meter>,
    up: bool,
    idle: Duration,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<B> Metered<B> {
    fn new(inner: B, meter: Arc<Meter>, up: bool, idle: Duration) -> Self {
        Metered {
            inner,
            meter,
            up,
            idle,
            timer: None,
        }
    }
}

impl<B> Body for Metered<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    let n = if this.up {
                        &this.meter.up
                    } else {
                        &this.meter.down
                    };
                    n.fetch_add(d.len() as u64, Ordering::Relaxed);
                }
                this.timer = None;
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let idle = this.idle;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        Poll::Ready(Some(Err(
                            format!("no body data for {}s", idle.as_secs()).into()
                        )))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_headers_go() {
        let mut h = HeaderMap::new();
        for (n, v) in [
            ("connection", "keep-alive, x-secret-hop"),
            ("x-secret-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-authorization", "Basic abc"),
            ("proxy-connection", "keep-alive"),
            ("proxy-foo", "bar"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("content-length", "5"),
            ("upgrade", "websocket"),
            ("accept", "*/*"),
            ("user-agent", "t"),
        ] {
            h.append(HeaderName::from_static(n), HeaderValue::from_static(v));
        }
        strip_hop_headers(&mut h);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort();
        assert_eq!(left, ["accept", "user-agent"]);
    }
}
