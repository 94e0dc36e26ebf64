//! One client connection and each request on it: the token first, then
//! the request's size and shape, the policy, one lookup and the address
//! check, and then a `CONNECT` tunnel or a plain-HTTP forward (reusing the
//! connection's last upstream while it asks the same host).

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, Uri, Version};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpStream;

use oz0_policy::net::{DenyReason, Host, HostName, Port, Verdict};

use super::accept::Permits;
use super::body::{empty, text_response, Meter, Metered};
use super::handle::{wait_closed, RunCtx, Shared};
use super::message::{head_size, strip_hop_headers, target_of};
use super::tunnel::{dial, tunnel};
use super::{ProxyBody, MAX_HEADERS, PARSE_BUFFER};
use crate::audit::{audit_target, AuditRecord, Decision};
use crate::token::Token;

/// Per client connection: the upstream of the last plain-HTTP request,
/// reused while the client keeps asking the same host, and the
/// connection's places under the limits.
struct ConnState {
    upstream: Mutex<Option<Upstream>>,
    /// Held here while the connection is served, and taken by its tunnel
    /// if it becomes one: hyper's connection future ends as soon as it
    /// hands a `CONNECT` upgrade over, while the tunnel (and both its
    /// sockets) lives on in a task of its own. Dropped with the state
    /// otherwise, when the connection closes.
    permits: Mutex<Option<Permits>>,
}

struct Upstream {
    key: (String, u16),
    addr: SocketAddr,
    sender: hyper::client::conn::http1::SendRequest<Metered<Incoming>>,
}

pub(super) async fn serve_conn<S>(
    stream: S,
    ctx: Arc<RunCtx>,
    shared: Arc<Shared>,
    permits: Permits,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let state = Arc::new(ConnState {
        upstream: Mutex::new(None),
        permits: Mutex::new(Some(permits)),
    });
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
        // The run's end first: a connection handed over as the run ended
        // is never served.
        biased;
        _ = wait_closed(&mut closed) => {}
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
    }
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
    let call = Call {
        start: Instant::now(),
        method: req.method().clone(),
        target: audit_target(&req.uri().to_string()),
        ctx,
        shared,
    };

    // 1. The token, before anything else.
    let mut auth = req.headers().get_all(header::PROXY_AUTHORIZATION).iter();
    let authorized = match (auth.next(), auth.next()) {
        (Some(v), None) => call.ctx.token.authorizes(v.as_bytes()),
        _ => false,
    };
    if !authorized {
        return call.auth_required();
    }

    // 2. Size and shape.
    let head = head_size(&req);
    if head > call.shared.limits.max_head_bytes {
        return call.bad(format!(
            "the request head has {head} bytes, over the limit of {}",
            call.shared.limits.max_head_bytes
        ));
    }
    let (host, port) = match target_of(&req) {
        Ok(t) => t,
        Err(why) => return call.bad(why.to_string()),
    };
    let to = To {
        call: &call,
        host,
        port,
    };

    // 3. The policy, then (for names) one lookup and the address check.
    let verdict = call.ctx.egress.verdict(&to.host, to.port);
    if let Verdict::Deny(reason) = verdict {
        return to.deny(reason);
    }
    let key = (to.host.to_string(), to.port.get());
    let reused = if call.method == Method::CONNECT {
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
        None => match to.dial(verdict).await {
            Ok(pair) => Err(pair),
            Err(refused) => return refused,
        },
    };

    // 4. CONNECT: answer 200, then carry bytes both ways.
    if call.method == Method::CONNECT {
        let Err((tcp, addr)) = upstream_or_stream else {
            unreachable!("CONNECT never reuses")
        };
        return to.tunnel(req, tcp, addr, &state);
    }

    // 5. Plain HTTP: forward with hop-by-hop and Proxy-* headers removed.
    let upstream = match upstream_or_stream {
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
                Err(e) => return to.fail(StatusCode::BAD_GATEWAY, format!("{addr}: {e}")),
            }
        }
    };
    to.forward(req, upstream, &state).await
}

/// One request in progress: what its audit record and its answers need.
struct Call {
    ctx: Arc<RunCtx>,
    shared: Arc<Shared>,
    start: Instant,
    method: Method,
    /// The request's target as the audit log shows it.
    target: String,
}

impl Call {
    fn record(&self, decision: Decision, status: StatusCode) -> AuditRecord {
        let mut r = AuditRecord::new(
            &self.ctx.run_id,
            decision,
            status.as_u16(),
            self.method.as_str(),
        );
        r.target = Some(self.target.clone());
        r
    }

    fn emit(&self, record: AuditRecord) {
        emit(&self.shared, &self.ctx.token, record, self.start);
    }

    /// 407: no token, a wrong one, or two.
    fn auth_required(&self) -> Response<ProxyBody> {
        let status = StatusCode::PROXY_AUTHENTICATION_REQUIRED;
        let mut rec = self.record(Decision::Auth, status);
        rec.reason = Some("missing or wrong proxy token".into());
        self.emit(rec);
        let mut r = text_response(
            status,
            "proxy authentication required: use this run's proxy URL (HTTP_PROXY)".into(),
        );
        r.headers_mut().insert(
            header::PROXY_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"oz0\""),
        );
        r
    }

    /// 400, and the connection closes.
    fn bad(&self, why: String) -> Response<ProxyBody> {
        let status = StatusCode::BAD_REQUEST;
        let mut rec = self.record(Decision::Bad, status);
        rec.reason = Some(why.clone());
        self.emit(rec);
        let mut r = text_response(status, format!("bad request: {why}"));
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        r
    }
}

/// A request whose target is known.
struct To<'a> {
    call: &'a Call,
    host: Host,
    port: Port,
}

impl To<'_> {
    fn record(&self, decision: Decision, status: StatusCode) -> AuditRecord {
        let mut r = self.call.record(decision, status);
        r.host = Some(self.host.to_string());
        r.port = Some(self.port.get());
        r
    }

    /// 403: the policy or the address check refused the target.
    fn deny(&self, reason: DenyReason) -> Response<ProxyBody> {
        let status = StatusCode::FORBIDDEN;
        let mut rec = self.record(Decision::Deny, status);
        rec.reason = Some(reason.to_string());
        self.call.emit(rec);
        let (host, port) = (&self.host, self.port);
        text_response(status, format!("{host}:{port} refused: {reason}"))
    }

    /// An allowed target that could not be reached.
    fn fail(&self, status: StatusCode, why: String) -> Response<ProxyBody> {
        let mut rec = self.record(Decision::Allow, status);
        rec.reason = Some(why.clone());
        self.call.emit(rec);
        let (host, port) = (&self.host, self.port);
        text_response(status, format!("{host}:{port}: {why}"))
    }

    /// A new connection to the target the policy allowed: for a name, one
    /// lookup whose addresses each pass the address check.
    async fn dial(&self, verdict: Verdict) -> Result<(TcpStream, SocketAddr), Response<ProxyBody>> {
        let addrs = match verdict {
            Verdict::Deny(reason) => return Err(self.deny(reason)),
            Verdict::Forward(p) => vec![SocketAddr::new(Ipv4Addr::LOCALHOST.into(), p.get())],
            Verdict::Literal(ip, p) => vec![SocketAddr::new(ip, p.get())],
            Verdict::Resolve(name, p) => self.resolve(name, p).await?,
        };
        dial(&addrs, self.call.shared.limits.connect_timeout)
            .await
            .map_err(|(status, why)| self.fail(status, why))
    }

    /// The addresses of `name` the address check accepts.
    async fn resolve(
        &self,
        name: HostName,
        p: Port,
    ) -> Result<Vec<SocketAddr>, Response<ProxyBody>> {
        let (ctx, shared) = (&self.call.ctx, &self.call.shared);
        let resolver = shared.resolver.clone();
        let n = name.clone();
        let lookup = tokio::task::spawn_blocking(move || resolver.resolve(&n, p.get()));
        let ips = match tokio::time::timeout(shared.limits.resolve_timeout, lookup).await {
            Ok(Ok(Ok(ips))) => ips,
            Ok(Ok(Err(e))) => {
                return Err(self.fail(
                    StatusCode::BAD_GATEWAY,
                    format!("could not resolve {name}: {e}"),
                ))
            }
            Ok(Err(e)) => {
                return Err(self.fail(
                    StatusCode::BAD_GATEWAY,
                    format!("lookup of {name} failed: {e}"),
                ))
            }
            Err(_) => {
                return Err(self.fail(
                    StatusCode::GATEWAY_TIMEOUT,
                    format!("lookup of {name} timed out"),
                ))
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
            return Err(
                self.deny(refused.map_or(DenyReason::NoAddress, DenyReason::RestrictedAddress))
            );
        }
        ok.dedup();
        Ok(ok)
    }

    /// `CONNECT`: answers 200 now; the tunnel carries bytes both ways once
    /// the client upgrades, and its record is written when it ends. The
    /// tunnel holds the connection's places under the limits until it
    /// ends, the upgrade fails or the run ends.
    fn tunnel(
        &self,
        req: Request<Incoming>,
        tcp: TcpStream,
        addr: SocketAddr,
        state: &ConnState,
    ) -> Response<ProxyBody> {
        let mut rec = self.record(Decision::Allow, StatusCode::OK);
        rec.addr = Some(addr.to_string());
        let shared = self.call.shared.clone();
        let ctx = self.call.ctx.clone();
        let start = self.call.start;
        let mut closed = ctx.closed.clone();
        let permits = state
            .permits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        tokio::spawn(async move {
            // Given back when this task ends, whichever way it ends.
            let _permits = permits;
            match hyper::upgrade::on(req).await {
                Ok(upgraded) => {
                    let (up, down, why) = tunnel(
                        upgraded,
                        tcp,
                        shared.limits.idle_timeout,
                        &shared.large_buffers,
                        &mut closed,
                    )
                    .await;
                    rec.bytes_up = up;
                    rec.bytes_down = down;
                    rec.reason = why;
                }
                Err(e) => rec.reason = Some(format!("the client left before the tunnel: {e}")),
            }
            emit(&shared, &ctx.token, rec, start);
        });
        Response::new(empty())
    }

    /// Plain HTTP: sends the request on `upstream` (kept for the
    /// connection's next request) and meters both bodies into its record.
    async fn forward(
        &self,
        req: Request<Incoming>,
        mut upstream: Upstream,
        state: &ConnState,
    ) -> Response<ProxyBody> {
        let (host, port) = (&self.host, self.port);
        let (ctx, shared) = (&self.call.ctx, &self.call.shared);
        let mut rec = self.record(Decision::Allow, StatusCode::OK);
        rec.addr = Some(upstream.addr.to_string());
        if upstream.sender.ready().await.is_err() {
            return self.fail(
                StatusCode::BAD_GATEWAY,
                format!("{}: connection closed", upstream.addr),
            );
        }
        let meter = Arc::new(Meter {
            record: Mutex::new(rec),
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
            start: self.call.start,
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
}
