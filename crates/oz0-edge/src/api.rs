//! The HTTP API: node registration and signed reports, per-tier polling
//! under leases, job submission with refusals that name the reason, the
//! operator's node views and the Nodes page.
//!
//! Every route is added through [`Routes`], which records it; the
//! `openapi.json` next to this crate is checked against that list by a test.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicI64;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::routing::{get, post, MethodRouter};
use axum::{Json, Router};

use crate::auth::TokenDigest;
use crate::store::Store;
use crate::{MAX_BODY_BYTES, MAX_LARGE_BODY_BYTES};

mod access;
mod error;
mod node;
mod operator;
mod release;

pub use operator::node_view;

use node::{complete, output, poll, register, release, renew, report_facts, rotate, whoami};
use operator::{
    cancel_job, change_node, job_logs, job_status, list_jobs, list_nodes, list_tenants, nodes_page,
    rerun_job, show_node, submit_job,
};

/// Counter of fields dropped from reports, all nodes.
pub const DROPPED_COUNTER: &str = "facts_fields_dropped";

/// What the edge is started with.
#[derive(Debug, Clone)]
pub struct EdgeConfig {
    /// Each tenant's enrolment token (digest).
    pub tenant_tokens: BTreeMap<String, TokenDigest>,
    /// Operator tokens (digests).
    pub operator_tokens: Vec<TokenDigest>,
    /// How long a lease lasts unless renewed.
    pub lease_ms: i64,
    /// A node counts as live this long after its last request.
    pub node_live_ms: i64,
    /// Tenants whose new nodes wait for an operator's approval before they
    /// take any work.
    pub approval_tenants: std::collections::BTreeSet<String>,
    /// Tenants whose container tools run only in gVisor (`--oci-gvisor`).
    pub gvisor_tenants: std::collections::BTreeSet<String>,
    /// Times a job may be handed out (its lease lapsing each time) before it
    /// fails with the reason.
    pub max_attempts: i64,
    /// Finished jobs are removed this long after they ended.
    pub keep_jobs_ms: i64,
    /// At most this many finished jobs are kept (the oldest go first).
    pub keep_jobs: i64,
    /// Nodes not heard from in this long are left out of the node list
    /// and the Nodes page (`all` shows them).
    pub forget_nodes_ms: i64,
    /// Where the signed releases nodes fetch are (`--release-dir`):
    /// `<dir>/<version>/release.json` and its files.
    pub release_dir: Option<std::path::PathBuf>,
}

impl EdgeConfig {
    /// Defaults: 30 s leases, nodes live for 30 s after their last request
    /// (a node polls every 2 s, renews a running job's lease every 10 s).
    pub fn new(
        tenant_tokens: BTreeMap<String, TokenDigest>,
        operator_tokens: Vec<TokenDigest>,
    ) -> EdgeConfig {
        EdgeConfig {
            tenant_tokens,
            operator_tokens,
            lease_ms: 30_000,
            node_live_ms: 30_000,
            approval_tenants: Default::default(),
            gvisor_tenants: Default::default(),
            max_attempts: 3,
            keep_jobs_ms: 7 * 24 * 3600 * 1000,
            keep_jobs: 100_000,
            forget_nodes_ms: 24 * 3600 * 1000,
            release_dir: None,
        }
    }
}

/// The edge's state, shared by every request.
#[derive(Debug)]
pub struct Edge {
    store: Store,
    cfg: EdgeConfig,
    last_sweep: AtomicI64,
    last_lease_sweep: AtomicI64,
    last_retention: AtomicI64,
    requests: crate::metrics::Requests,
    wakes: crate::wake::Wakes,
    presence: std::sync::Mutex<std::collections::HashMap<String, Presence>>,
}

/// What this replica knows of a node between its requests.
#[derive(Debug, Default, Clone, Copy)]
struct Presence {
    /// Its last request here began then.
    last_ms: i64,
    /// Its held requests open here now.
    open: usize,
}

/// A node whose held request (a long poll, a held renewal) broke, and
/// that sent nothing in this long, is taken for dead: its leases end at
/// once (its jobs go back to their queues), and it is shown down.
pub const GONE_AFTER_MS: i64 = 2_000;

impl Edge {
    /// An edge over a store. With PostgreSQL, it listens for the other
    /// replicas' wakes (a runtime must be running).
    pub fn new(store: Store, cfg: EdgeConfig) -> Arc<Edge> {
        let edge = Arc::new(Edge {
            store,
            cfg,
            last_sweep: AtomicI64::new(0),
            last_lease_sweep: AtomicI64::new(0),
            last_retention: AtomicI64::new(0),
            requests: Default::default(),
            wakes: Default::default(),
            presence: Default::default(),
        });
        if edge.store.kind() == "postgres" {
            edge.store.listen_for_wakes(Arc::downgrade(&edge));
        }
        edge
    }

    pub(crate) fn wakes(&self) -> &crate::wake::Wakes {
        &self.wakes
    }

    /// Held requests waiting now on this replica.
    pub fn held_requests(&self) -> usize {
        self.wakes.waiting()
    }

    fn presence(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Presence>> {
        self.presence.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A request of `node` began here at `now`.
    pub(crate) fn seen_here(&self, node: &str, now: i64) {
        let mut p = self.presence();
        match p.get_mut(node) {
            Some(e) => e.last_ms = e.last_ms.max(now),
            None => {
                p.insert(
                    node.to_string(),
                    Presence {
                        last_ms: now,
                        open: 0,
                    },
                );
            }
        }
    }

    /// A held request of `node` begins: until [`Held::answered`], its
    /// end by a broken connection may mean the node died.
    pub(crate) fn hold(self: &Arc<Self>, node: &str) -> Held {
        self.presence().entry(node.to_string()).or_default().open += 1;
        Held {
            edge: self.clone(),
            node: node.to_string(),
            answered: false,
        }
    }

    /// A held request of `node` broke at `at`: when nothing else comes
    /// from it within [`GONE_AFTER_MS`], it is dead and its leases end.
    fn broken(self: &Arc<Self>, node: String, at: i64) {
        let edge = self.clone();
        tokio::spawn(async move {
            let seen = match edge.store.node_by_id(&node).await {
                Ok(Some(n)) => n.last_seen_ms,
                _ => return,
            };
            tokio::time::sleep(std::time::Duration::from_millis(GONE_AFTER_MS as u64)).await;
            let here = edge.presence().get(&node).copied().unwrap_or_default();
            if here.open > 0 || here.last_ms > at {
                return;
            }
            match edge.store.gone(&node, seen, at).await {
                Ok(true) => {}
                Ok(false) => return,
                Err(e) => {
                    crate::log::error(&format!("node {node}: marking it gone: {e}"), None);
                    return;
                }
            }
            match edge.store.release_dead(&node, crate::time::now_ms()).await {
                Ok(s) => {
                    for (tenant, tier) in &s.queues {
                        edge.wakes.queued(tenant, *tier);
                    }
                    crate::log::info(
                        &format!(
                            "node {node}: its connection broke and it sent nothing for {} s: taken for dead; {} job(s) back in their queue, {} failed (attempts used up)",
                            GONE_AFTER_MS / 1000,
                            s.requeued,
                            s.failed
                        ),
                        None,
                    );
                }
                Err(e) => crate::log::error(&format!("node {node}: ending its leases: {e}"), None),
            }
        });
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Records that `node` was heard from: at most once a second a node
    /// (its liveness is judged in seconds), so a busy node's polls cost one
    /// statement less.
    pub(crate) async fn heard_from(
        &self,
        node: &crate::store::NodeRow,
        now: i64,
    ) -> Result<(), crate::store::StoreError> {
        if now - node.last_seen_ms >= 1_000 {
            self.store.touch(&node.id, now).await?;
        }
        Ok(())
    }

    /// At most once a second, puts jobs whose lease lapsed back in their
    /// queue (or fails them past their attempts); at most once a minute,
    /// removes finished jobs past the retention (a batch at a time).
    pub async fn sweep_jobs(&self, now: i64) {
        use std::sync::atomic::Ordering::Relaxed;
        let due = |at: &AtomicI64, every: i64| {
            let last = at.load(Relaxed);
            now - last >= every && at.compare_exchange(last, now, Relaxed, Relaxed).is_ok()
        };
        if due(&self.last_lease_sweep, 1_000) {
            match self.store.sweep_leases(now).await {
                Ok(s) => {
                    if s.failed > 0 {
                        crate::log::info(
                            &format!("{} job(s) failed: their attempts were used up", s.failed),
                            None,
                        );
                    }
                    for (tenant, tier) in &s.queues {
                        self.wakes.queued(tenant, *tier);
                    }
                }
                Err(e) => crate::log::error(&format!("sweeping expired leases: {e}"), None),
            }
            match self.store.sweep_drains(now).await {
                Ok(moved) => {
                    for (job, node, tenant, tier) in &moved {
                        self.wakes.queued(tenant, *tier);
                        self.wakes.key(&crate::wake::cancel_key(job));
                        self.wakes.key(&crate::wake::stops_key(node));
                        crate::log::info(
                            &format!("node {node}: its drain deadline passed; job {job} goes back to its queue"),
                            None,
                        );
                    }
                }
                Err(e) => {
                    crate::log::error(&format!("ending drains past their deadline: {e}"), None)
                }
            }
        }
        if due(&self.last_retention, 60_000) {
            // What this replica knows of nodes quiet for a minute goes.
            self.presence()
                .retain(|_, p| p.open > 0 || now - p.last_ms < 60_000);
            let store = self.store.clone();
            let (older, keep) = (now - self.cfg.keep_jobs_ms, self.cfg.keep_jobs);
            tokio::spawn(async move {
                if let Err(e) = store.sweep_finished(older, keep, 10_000).await {
                    crate::log::error(&format!("removing finished jobs: {e}"), None);
                }
            });
        }
    }
}

/// A held request of a node; dropped unanswered (its connection broke),
/// it starts the check of whether the node died.
pub(crate) struct Held {
    edge: Arc<Edge>,
    node: String,
    answered: bool,
}

impl Held {
    /// The request is answered (not broken).
    pub(crate) fn answered(mut self) {
        self.answered = true;
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let now = crate::time::now_ms();
        let last = {
            let mut p = self.edge.presence();
            let e = p.entry(self.node.clone()).or_default();
            e.open = e.open.saturating_sub(1);
            e.open == 0
        };
        if !self.answered && last {
            self.edge.broken(std::mem::take(&mut self.node), now);
        }
    }
}

/// A route as the router has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RouteSpec {
    /// `GET`, `POST`.
    pub method: &'static str,
    /// The path, with `{param}` segments.
    pub path: &'static str,
}

/// Builds the router and records each route.
pub struct Routes {
    router: Router<Arc<Edge>>,
    specs: Vec<RouteSpec>,
}

impl Routes {
    fn add(
        mut self,
        method: &'static str,
        path: &'static str,
        handler: MethodRouter<Arc<Edge>>,
    ) -> Routes {
        self.router = self.router.route(path, handler);
        self.specs.push(RouteSpec { method, path });
        self
    }

    /// Every route of the API.
    pub fn build() -> Routes {
        Routes {
            router: Router::new(),
            specs: Vec::new(),
        }
        .add("GET", "/v1/health", get(health))
        .add("POST", "/v1/nodes/register", post(register))
        .add("POST", "/v1/node/facts", post(report_facts))
        .add("POST", "/v1/node/poll", post(poll))
        .add("POST", "/v1/node/rotate", post(rotate))
        .add("POST", "/v1/node/whoami", post(whoami))
        .add("POST", "/v1/node/release", post(release::manifest))
        .add("POST", "/v1/node/release/piece", post(release::piece))
        .add("POST", "/v1/node/jobs/{job}/renew", post(renew))
        .add("POST", "/v1/node/jobs/{job}/release", post(release))
        .add(
            "POST",
            OUTPUT_ROUTE,
            // A piece of 64 KiB, control characters escaped in its JSON.
            post(output).layer(DefaultBodyLimit::max(MAX_LARGE_BODY_BYTES)),
        )
        .add(
            "POST",
            COMPLETE_ROUTE,
            post(complete).layer(DefaultBodyLimit::max(MAX_LARGE_BODY_BYTES)),
        )
        .add(
            "POST",
            SUBMIT_ROUTE,
            post(submit_job).layer(DefaultBodyLimit::max(MAX_LARGE_BODY_BYTES)),
        )
        .add("GET", "/v1/tenants", get(list_tenants))
        .add("GET", "/v1/tenants/{tenant}/jobs", get(list_jobs))
        .add("GET", "/v1/tenants/{tenant}/jobs/{job}", get(job_status))
        .add("GET", "/v1/tenants/{tenant}/jobs/{job}/logs", get(job_logs))
        .add(
            "POST",
            "/v1/tenants/{tenant}/jobs/{job}/cancel",
            post(cancel_job),
        )
        .add(
            "POST",
            "/v1/tenants/{tenant}/jobs/{job}/rerun",
            post(rerun_job),
        )
        .add("GET", "/v1/nodes", get(list_nodes))
        .add("GET", "/v1/nodes/{node}", get(show_node))
        .add("POST", "/v1/nodes/{node}/{action}", post(change_node))
        .add("GET", "/nodes", get(nodes_page))
        .add("GET", "/metrics", get(metrics))
    }

    /// The recorded routes.
    pub fn specs(&self) -> &[RouteSpec] {
        &self.specs
    }

    /// The router, with its state and body limit.
    pub fn into_router(self, edge: Arc<Edge>) -> Router {
        self.router
            .route_layer(axum::middleware::from_fn_with_state(
                edge.clone(),
                known_sender,
            ))
            .route_layer(axum::middleware::from_fn_with_state(edge.clone(), timed))
            .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
            .with_state(edge)
    }
}

/// Serves the API on `listener` until the task is dropped: plain HTTP
/// (for loopback), with the default connection limits.
pub async fn serve(listener: tokio::net::TcpListener, edge: Arc<Edge>) -> std::io::Result<()> {
    serve_with(listener, edge, None, crate::serve::Limits::default()).await
}

/// Serves the API on `listener`, over TLS when `tls` is given, with
/// `limits` on every connection.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    edge: Arc<Edge>,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: crate::serve::Limits,
) -> std::io::Result<()> {
    serve_until(listener, edge, tls, limits, std::future::pending()).await
}

/// [`serve_with`] until `stop` ends, then stops: held requests (long
/// polls, held renewals, followed logs) are answered with what they have,
/// no new connection is taken, and the open ones answer what they were
/// asked and close, for at most [`crate::serve::DRAIN`].
pub async fn serve_until(
    listener: tokio::net::TcpListener,
    edge: Arc<Edge>,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: crate::serve::Limits,
    stop: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    // Leases that lapsed and drains past their deadline are swept each
    // second even while no node polls.
    let ticking = Arc::downgrade(&edge);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        loop {
            tick.tick().await;
            match ticking.upgrade() {
                Some(e) => e.sweep_jobs(crate::time::now_ms()).await,
                None => return,
            }
        }
    });
    let held = edge.clone();
    let stop = async move {
        stop.await;
        held.wakes().stop();
    };
    crate::serve::serve(
        listener,
        Routes::build().into_router(edge),
        tls,
        limits,
        stop,
    )
    .await
}

/// Whether this replica can serve: its store answers.
async fn health(
    State(edge): State<Arc<Edge>>,
) -> (axum::http::StatusCode, Json<serde_json::Value>) {
    match edge.store.ping().await {
        Ok(()) => (
            axum::http::StatusCode::OK,
            Json(serde_json::json!({"ok": true, "store": edge.store.kind()})),
        ),
        Err(e) => {
            crate::log::error(&format!("health: the store does not answer: {e}"), None);
            (
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                Json(
                    serde_json::json!({"ok": false, "store": edge.store.kind(), "reason": "the store does not answer"}),
                ),
            )
        }
    }
}

/// `GET /metrics`, behind the operator token.
async fn metrics(
    State(edge): State<Arc<Edge>>,
    h: axum::http::HeaderMap,
) -> Result<axum::response::Response, crate::wire::ApiError> {
    use axum::response::IntoResponse;
    edge.operator(&h)?;
    let f = edge
        .store
        .figures(crate::time::now_ms() - edge.cfg.node_live_ms)
        .await?;
    let text = crate::metrics::render(&f, &edge.requests);
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

/// The routes whose body may be up to [`MAX_LARGE_BODY_BYTES`].
const OUTPUT_ROUTE: &str = "/v1/node/jobs/{job}/output";
const COMPLETE_ROUTE: &str = "/v1/node/jobs/{job}/complete";
const SUBMIT_ROUTE: &str = "/v1/tenants/{tenant}/jobs";

/// Before a body larger than any route's [`MAX_BODY_BYTES`] is read (or
/// one of no stated length), who sends it: a registered node named in its
/// headers (its signature is checked over the body once read) for output
/// and completions, an operator's token for a job. Anyone else is refused
/// on the headers alone, so an anonymous client cannot make the edge hold
/// 2 MiB a connection until the request times out.
async fn known_sender(
    State(edge): State<Arc<Edge>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let small = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
        .is_some_and(|n| n <= MAX_BODY_BYTES);
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|p| p.as_str());
    let check = match route {
        _ if small || req.method() != axum::http::Method::POST => Ok(()),
        Some(OUTPUT_ROUTE | COMPLETE_ROUTE) => edge.known_node(req.headers()).await,
        Some(SUBMIT_ROUTE) => edge.operator(req.headers()),
        _ => Ok(()),
    };
    match check {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// Times every request, by its route's pattern.
async fn timed(
    State(edge): State<Arc<Edge>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let t = std::time::Instant::now();
    let r = next.run(req).await;
    edge.requests
        .record(&route, r.status().as_u16(), t.elapsed());
    r
}

impl Edge {
    /// Whether the headers name a registered node that is not removed (its
    /// signature is not checked here: that needs the body).
    async fn known_node(&self, h: &axum::http::HeaderMap) -> error::ApiResult<()> {
        let s = access::signed_headers(h)?;
        match self.store.node(s.node).await? {
            Some(n) if n.id == s.node && n.removed_ms.is_none() => Ok(()),
            Some(n) if n.id == s.node => Err(node::removed(&n.id)),
            _ => Err(crate::auth::AuthError::UnknownNode(s.node.to_string()).into()),
        }
    }
}
