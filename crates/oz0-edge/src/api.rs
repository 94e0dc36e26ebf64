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

pub use operator::node_view;

use node::{complete, poll, register, release, renew, report_facts, rotate, whoami};
use operator::{
    cancel_job, change_node, job_logs, job_status, list_jobs, list_nodes, nodes_page, show_node,
    submit_job,
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
    /// Times a job may be handed out (its lease lapsing each time) before it
    /// fails with the reason.
    pub max_attempts: i64,
    /// Finished jobs are removed this long after they ended.
    pub keep_jobs_ms: i64,
    /// At most this many finished jobs are kept (the oldest go first).
    pub keep_jobs: i64,
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
            max_attempts: 3,
            keep_jobs_ms: 7 * 24 * 3600 * 1000,
            keep_jobs: 100_000,
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
}

impl Edge {
    /// An edge over a store.
    pub fn new(store: Store, cfg: EdgeConfig) -> Arc<Edge> {
        Arc::new(Edge {
            store,
            cfg,
            last_sweep: AtomicI64::new(0),
            last_lease_sweep: AtomicI64::new(0),
            last_retention: AtomicI64::new(0),
            requests: Default::default(),
        })
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
                Ok(s) if s.failed > 0 => crate::log::info(
                    &format!("{} job(s) failed: their attempts were used up", s.failed),
                    None,
                ),
                Ok(_) => {}
                Err(e) => crate::log::error(&format!("sweeping expired leases: {e}"), None),
            }
        }
        if due(&self.last_retention, 60_000) {
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
        .add("POST", "/v1/node/jobs/{job}/renew", post(renew))
        .add("POST", "/v1/node/jobs/{job}/release", post(release))
        .add(
            "POST",
            "/v1/node/jobs/{job}/complete",
            post(complete).layer(DefaultBodyLimit::max(MAX_LARGE_BODY_BYTES)),
        )
        .add(
            "POST",
            "/v1/tenants/{tenant}/jobs",
            post(submit_job).layer(DefaultBodyLimit::max(MAX_LARGE_BODY_BYTES)),
        )
        .add("GET", "/v1/tenants/{tenant}/jobs", get(list_jobs))
        .add("GET", "/v1/tenants/{tenant}/jobs/{job}", get(job_status))
        .add("GET", "/v1/tenants/{tenant}/jobs/{job}/logs", get(job_logs))
        .add(
            "POST",
            "/v1/tenants/{tenant}/jobs/{job}/cancel",
            post(cancel_job),
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
    crate::serve::serve(listener, Routes::build().into_router(edge), tls, limits).await
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
