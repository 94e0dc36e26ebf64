//! The HTTP API: node registration and signed reports, per-tier polling
//! under leases, job submission with refusals that name the reason, the
//! operator's node views and the Nodes page.
//!
//! Every route is added through [`Routes`], which records it; the
//! `openapi.json` next to this crate is checked against that list by a test.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::{Json, Router};
use base64::Engine;
use oz0_policy::facts::NodeFacts;

use crate::auth::{self, AuthError, TokenDigest};
use crate::routing::{is_tenant, JobRequest};
use crate::sanitize::{is_node_name, sanitize, Sanitized};
use crate::store::{NodeRow, Report, Store, StoreError};
use crate::time::{format_utc, now_ms};
use crate::wire::*;
use crate::{MAX_BODY_BYTES, MAX_PAYLOAD_BYTES, MAX_REPORT_BYTES};

/// Counter of fields dropped from reports, all nodes.
pub const DROPPED_COUNTER: &str = "facts_fields_dropped";
/// How often nonces past their window are swept.
const SWEEP_EVERY_MS: i64 = 30_000;

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
}

impl EdgeConfig {
    /// Defaults: 30 s leases, nodes live for 10 minutes after their last request.
    pub fn new(
        tenant_tokens: BTreeMap<String, TokenDigest>,
        operator_tokens: Vec<TokenDigest>,
    ) -> EdgeConfig {
        EdgeConfig {
            tenant_tokens,
            operator_tokens,
            lease_ms: 30_000,
            node_live_ms: 600_000,
        }
    }
}

/// The edge's state, shared by every request.
#[derive(Debug)]
pub struct Edge {
    store: Store,
    cfg: EdgeConfig,
    last_sweep: AtomicI64,
}

impl Edge {
    /// An edge over a store.
    pub fn new(store: Store, cfg: EdgeConfig) -> Arc<Edge> {
        Arc::new(Edge {
            store,
            cfg,
            last_sweep: AtomicI64::new(0),
        })
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }
}

impl ApiError {
    fn new(status: StatusCode, code: &str, reason: impl Into<String>) -> ApiError {
        ApiError {
            status: status.as_u16(),
            error: code.to_string(),
            reason: reason.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut r = (status, Json(&self)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"oz0-edge\""),
            );
        }
        r
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        eprintln!("oz0-edge: store error: {e}");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store",
            "the edge's store failed; retry later",
        )
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> ApiError {
        eprintln!("oz0-edge: refused: {e}");
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthenticated", e.to_string())
    }
}

type ApiResult<T> = Result<T, ApiError>;

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
        .add("POST", "/v1/node/jobs/{job}/renew", post(renew))
        .add("POST", "/v1/node/jobs/{job}/complete", post(complete))
        .add("POST", "/v1/tenants/{tenant}/jobs", post(submit_job))
        .add("GET", "/v1/tenants/{tenant}/jobs/{job}", get(job_status))
        .add("GET", "/v1/nodes", get(list_nodes))
        .add("GET", "/v1/nodes/{node}", get(show_node))
        .add("GET", "/nodes", get(nodes_page))
    }

    /// The recorded routes.
    pub fn specs(&self) -> &[RouteSpec] {
        &self.specs
    }

    /// The router, with its state and body limit.
    pub fn into_router(self, edge: Arc<Edge>) -> Router {
        self.router
            .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
            .with_state(edge)
    }
}

/// Serves the API on `listener` until the task is dropped.
pub async fn serve(listener: tokio::net::TcpListener, edge: Arc<Edge>) -> std::io::Result<()> {
    axum::serve(listener, Routes::build().into_router(edge)).await
}

// ---- authentication ---------------------------------------------------------

fn header_str<'a>(h: &'a HeaderMap, name: &'static str) -> Result<&'a str, AuthError> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .ok_or(AuthError::Header(name))
}

struct Signed<'a> {
    node: &'a str,
    ts: i64,
    nonce: &'a str,
    sig: &'a str,
}

fn signed_headers(h: &HeaderMap) -> Result<Signed<'_>, AuthError> {
    let node = header_str(h, auth::H_NODE)?;
    if !auth::is_node_id(node) {
        return Err(AuthError::Header(auth::H_NODE));
    }
    let ts = header_str(h, auth::H_TIMESTAMP)?
        .parse::<i64>()
        .map_err(|_| AuthError::Header(auth::H_TIMESTAMP))?;
    let nonce = header_str(h, auth::H_NONCE)?;
    if !auth::is_nonce(nonce) {
        return Err(AuthError::Header(auth::H_NONCE));
    }
    let sig = header_str(h, auth::H_SIGNATURE)?;
    if sig.len() != 86 {
        return Err(AuthError::Header(auth::H_SIGNATURE));
    }
    Ok(Signed {
        node,
        ts,
        nonce,
        sig,
    })
}

impl Edge {
    /// Checks the timestamp, the signature, then the nonce (so forged
    /// requests cannot use up nonces).
    async fn check_signed(
        &self,
        method: &Method,
        uri: &Uri,
        s: &Signed<'_>,
        key: &ed25519_dalek::VerifyingKey,
        body: &[u8],
    ) -> ApiResult<i64> {
        let now = now_ms();
        let skew = (now - s.ts).abs();
        if skew > auth::MAX_SKEW_MS {
            return Err(AuthError::Skew(skew).into());
        }
        let msg = auth::signed_message(method.as_str(), uri.path(), s.node, s.ts, s.nonce, body);
        auth::verify(key, s.node, &msg, s.sig)?;
        if !self
            .store
            .use_nonce(s.node, s.nonce, s.ts + 2 * auth::MAX_SKEW_MS)
            .await?
        {
            return Err(AuthError::Replay(s.node.to_string()).into());
        }
        self.sweep(now);
        Ok(now)
    }

    fn sweep(&self, now: i64) {
        let last = self.last_sweep.load(Ordering::Relaxed);
        if now - last > SWEEP_EVERY_MS
            && self
                .last_sweep
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let store = self.store.clone();
            tokio::spawn(async move {
                if let Err(e) = store.expire_nonces(now).await {
                    eprintln!("oz0-edge: sweeping nonces: {e}");
                }
            });
        }
    }

    /// Authenticates a request from a registered node.
    async fn node_request(
        &self,
        method: &Method,
        uri: &Uri,
        h: &HeaderMap,
        body: &[u8],
    ) -> ApiResult<(NodeRow, i64)> {
        let s = signed_headers(h)?;
        let node = self
            .store
            .node(s.node)
            .await?
            .filter(|n| n.id == s.node)
            .ok_or_else(|| AuthError::UnknownNode(s.node.to_string()))?;
        let key = auth::decode_key(&node.public_key)?;
        let now = self.check_signed(method, uri, &s, &key, body).await?;
        Ok((node, now))
    }

    fn operator(&self, h: &HeaderMap) -> ApiResult<()> {
        let presented = h
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                if let Some(t) = v.strip_prefix("Bearer ") {
                    Some(t.trim().to_string())
                } else if let Some(b) = v.strip_prefix("Basic ") {
                    let raw = base64::engine::general_purpose::STANDARD
                        .decode(b.trim())
                        .ok()?;
                    let s = String::from_utf8(raw).ok()?;
                    s.split_once(':').map(|(_, p)| p.to_string())
                } else {
                    None
                }
            });
        match presented {
            Some(t) if self.cfg.operator_tokens.iter().any(|d| d.matches(&t)) => Ok(()),
            _ => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                "this needs an operator token: send Authorization: Bearer <token>",
            )),
        }
    }
}

fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8], what: &str) -> ApiResult<T> {
    // The parser's message can quote the sender's text; only its position is returned.
    serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("the {what} does not parse (line {}, column {}): send the documented JSON, with no unknown fields", e.line(), e.column()),
        )
    })
}

// ---- handlers -----------------------------------------------------------------

async fn health(State(edge): State<Arc<Edge>>) -> Json<serde_json::Value> {
    Json(serde_json::json!({"ok": true, "store": edge.store.kind()}))
}

async fn register(
    State(edge): State<Arc<Edge>>,
    method: Method,
    uri: Uri,
    h: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<Registered>> {
    if body.len() > MAX_REPORT_BYTES {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("a registration is at most {MAX_REPORT_BYTES} bytes"),
        ));
    }
    let req: RegisterRequest = parse_json(&body, "registration")?;
    let token = h
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let ok = is_tenant(&req.tenant)
        && edge
            .cfg
            .tenant_tokens
            .get(&req.tenant)
            .is_some_and(|d| d.matches(token));
    if !ok {
        eprintln!("oz0-edge: refused a registration: wrong or missing enrolment token");
        return Err(ApiError::new(StatusCode::UNAUTHORIZED, "unauthenticated", "the tenant's enrolment token is missing or wrong, or the tenant does not exist: pass the token the edge was started with for that tenant"));
    }
    let key = auth::decode_key(&req.public_key)?;
    let id = auth::node_id(&key);
    let s = signed_headers(&h)?;
    if s.node != id {
        return Err(AuthError::Header(auth::H_NODE).into());
    }
    let now = edge.check_signed(&method, &uri, &s, &key, &body).await?;
    let name = match req.name.as_deref() {
        // A name that looks like a node id could pass for another node.
        Some(n) if is_node_name(n) && !auth::is_node_id(n) => Some(n),
        Some(_) => {
            edge.store.count(DROPPED_COUNTER, 1).await?;
            eprintln!(
                "oz0-edge: node {id}: dropped its name (does not match the host name pattern)"
            );
            None
        }
        None => None,
    };
    let tenant = edge
        .store
        .register_node(&id, &req.tenant, &req.public_key, name, now)
        .await?;
    if tenant != req.tenant {
        return Err(ApiError::new(StatusCode::CONFLICT, "other_tenant", format!("node {id} is registered with another tenant: a key belongs to one tenant; make a new key for this one")));
    }
    eprintln!("oz0-edge: node {id} registered with tenant {tenant}");
    Ok(Json(Registered {
        node_id: id,
        tenant,
    }))
}

/// Builds the operator's view of a stored node.
pub fn node_view(n: &NodeRow) -> NodeView {
    {
        let facts: Option<Sanitized> = n
            .facts
            .as_deref()
            .and_then(|f| serde_json::from_str(f).ok());
        let (tier_proven, tier_line, platform_line, mechanism_line, fix, microvm_line, routed_note) =
            match &facts {
                Some(s) => (
                    s.tier_proven,
                    s.tier_line(),
                    [Some(s.os.as_str()), s.arch.as_deref(), s.build.as_deref()]
                        .into_iter()
                        .flatten()
                        .collect::<Vec<_>>()
                        .join(" "),
                    s.mechanism_line(),
                    s.fix_text(),
                    s.microvm_line(),
                    s.routed_note(),
                ),
                None => (
                    0,
                    "no report yet: tier 0".to_string(),
                    "unknown".to_string(),
                    "unknown".to_string(),
                    None,
                    "none: no report yet".to_string(),
                    None,
                ),
            };
        NodeView {
            id: n.id.clone(),
            tenant: n.tenant.clone(),
            name: n.name.clone(),
            tier_proven,
            tier_routed: n.tier_routed,
            tier_line,
            platform_line,
            mechanism_line,
            fix,
            microvm_line,
            routed_note,
            last_report_ms: n.last_report_ms,
            last_report: n.last_report_ms.map(format_utc),
            last_seen_ms: n.last_seen_ms,
            dropped_last: n.dropped_last,
            dropped_total: n.dropped_total,
            facts,
        }
    }
}

async fn report_facts(
    State(edge): State<Arc<Edge>>,
    method: Method,
    uri: Uri,
    h: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<NodeView>> {
    if body.len() > MAX_REPORT_BYTES {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("a facts report is at most {MAX_REPORT_BYTES} bytes"),
        ));
    }
    let (node, now) = edge.node_request(&method, &uri, &h, &body).await?;
    let facts: NodeFacts = parse_json(&body, "facts report")?;
    let out = sanitize(&facts)
        .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "schema", e.to_string()))?;
    let s = &out.facts;
    let dropped = i64::try_from(out.dropped.len()).unwrap_or(i64::MAX);
    edge.store
        .save_report(Report {
            node: &node.id,
            facts_json: serde_json::to_string(s).map_err(|e| {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
            })?,
            tier_routed: s.tier_routed,
            microvm_ready: s.microvm_ready,
            oci_ready: s.oci_ready,
            arch: s.arch.as_deref().unwrap_or(""),
            dropped,
            now_ms: now,
        })
        .await?;
    if dropped > 0 {
        edge.store.count(DROPPED_COUNTER, dropped).await?;
        let mut names = out.dropped.clone();
        names.dedup();
        eprintln!(
            "oz0-edge: node {}: report kept with {dropped} field(s) dropped: {}",
            node.id,
            names.join(", ")
        );
    }
    let stored = edge
        .store
        .node(&node.id)
        .await?
        .filter(|n| n.id == node.id)
        .ok_or_else(|| AuthError::UnknownNode(node.id.clone()))?;
    Ok(Json(node_view(&stored)))
}

async fn poll(
    State(edge): State<Arc<Edge>>,
    method: Method,
    uri: Uri,
    h: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<PollResponse>> {
    let (node, now) = edge.node_request(&method, &uri, &h, &body).await?;
    let req: PollRequest = parse_json(&body, "poll")?;
    if node.last_report_ms.is_none() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "no_facts",
            "report this node's facts before taking work",
        ));
    }
    if req.tier > node.tier_routed {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "tier_not_routed",
            format!(
                "node {} is routed at tier {}: it may not poll the tier-{} queue",
                node.id,
                node.tier_routed,
                req.tier.min(9)
            ),
        ));
    }
    let lease_id = auth::random_id();
    let leased = edge
        .store
        .lease(&node, req.tier, &lease_id, now + edge.cfg.lease_ms, now)
        .await?;
    edge.store.touch(&node.id, now).await?;
    let job = leased.map(|j| LeasedJobView {
        job_id: j.id,
        lease_id,
        lease_ms: edge.cfg.lease_ms,
        tier: j.tier,
        origin: j.origin,
        kind: j.kind,
        attempt: j.attempts,
        payload: serde_json::from_str(&j.payload).unwrap_or(serde_json::Value::Null),
    });
    Ok(Json(PollResponse { job }))
}

fn lease_lost(job: &str) -> ApiError {
    ApiError::new(StatusCode::CONFLICT, "lease_lost", format!("the lease on job {job} expired or is not this node's: stop the job now; it may run elsewhere"))
}

fn job_id_ok(job: &str) -> ApiResult<()> {
    if auth::is_nonce(job) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_job",
            "no such job",
        ))
    }
}

async fn renew(
    State(edge): State<Arc<Edge>>,
    Path(job): Path<String>,
    method: Method,
    uri: Uri,
    h: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<Renewed>> {
    let (node, now) = edge.node_request(&method, &uri, &h, &body).await?;
    job_id_ok(&job)?;
    let req: RenewRequest = parse_json(&body, "renewal")?;
    if !edge
        .store
        .renew(&job, &node.id, &req.lease_id, now + edge.cfg.lease_ms, now)
        .await?
    {
        return Err(lease_lost(&job));
    }
    edge.store.touch(&node.id, now).await?;
    Ok(Json(Renewed {
        lease_ms: edge.cfg.lease_ms,
    }))
}

async fn complete(
    State(edge): State<Arc<Edge>>,
    Path(job): Path<String>,
    method: Method,
    uri: Uri,
    h: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    let (node, now) = edge.node_request(&method, &uri, &h, &body).await?;
    job_id_ok(&job)?;
    let req: CompleteRequest = parse_json(&body, "completion")?;
    if !edge
        .store
        .complete(
            &job,
            &node.id,
            &req.lease_id,
            req.succeeded,
            req.exit_code.map(i64::from),
            now,
        )
        .await?
    {
        return Err(lease_lost(&job));
    }
    edge.store.touch(&node.id, now).await?;
    Ok(Json(serde_json::json!({"ok": true})))
}

fn known_tenant(edge: &Edge, tenant: &str) -> ApiResult<()> {
    if is_tenant(tenant) && edge.cfg.tenant_tokens.contains_key(tenant) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_tenant",
            "no such tenant: tenants are those the edge was started with",
        ))
    }
}

async fn submit_job(
    State(edge): State<Arc<Edge>>,
    Path(tenant): Path<String>,
    h: HeaderMap,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<Accepted>)> {
    edge.operator(&h)?;
    known_tenant(&edge, &tenant)?;
    let req: JobRequest = parse_json(&body, "job")?;
    let needs = req
        .needs()
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_job", e.to_string()))?;
    let payload = serde_json::to_string(&req.payload).unwrap_or_else(|_| "null".into());
    if payload.len() > MAX_PAYLOAD_BYTES {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("a job's payload is at most {MAX_PAYLOAD_BYTES} bytes of JSON"),
        ));
    }
    let now = now_ms();
    let live_since = now - edge.cfg.node_live_ms;
    let eligible = edge
        .store
        .eligible_nodes(&tenant, &needs, live_since)
        .await?;
    if eligible == 0 {
        let offers = edge.store.live_offers(&tenant, live_since).await?;
        let reason = needs.refusal(&tenant, req.origin, &offers);
        eprintln!(
            "oz0-edge: refused a {} job for tenant {tenant}: {reason}",
            req.origin.as_str()
        );
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "no_eligible_node",
            reason,
        ));
    }
    let id = auth::random_id();
    edge.store
        .insert_job(
            &id,
            &tenant,
            req.origin.as_str(),
            req.kind.as_str(),
            &needs,
            &payload,
            now,
        )
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(Accepted {
            job_id: id,
            tier: needs.tier,
            eligible_nodes: eligible,
        }),
    ))
}

async fn job_status(
    State(edge): State<Arc<Edge>>,
    Path((tenant, job)): Path<(String, String)>,
    h: HeaderMap,
) -> ApiResult<Json<JobView>> {
    edge.operator(&h)?;
    known_tenant(&edge, &tenant)?;
    job_id_ok(&job)?;
    let j = edge
        .store
        .job(&tenant, &job)
        .await?
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "no_job", "no such job"))?;
    Ok(Json(JobView {
        job_id: j.id,
        state: j.state,
        tier: j.tier,
        node_id: j.node_id,
        attempts: j.attempts,
        exit_code: j.exit_code,
    }))
}

async fn nodes_of(edge: &Edge, q: &NodesQuery) -> ApiResult<Vec<NodeView>> {
    if let Some(t) = &q.tenant {
        if !is_tenant(t) {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_tenant",
                "a tenant is lower-case letters, digits, - and _",
            ));
        }
    }
    Ok(edge
        .store
        .nodes(q.tenant.as_deref())
        .await?
        .iter()
        .map(node_view)
        .collect())
}

async fn list_nodes(
    State(edge): State<Arc<Edge>>,
    Query(q): Query<NodesQuery>,
    h: HeaderMap,
) -> ApiResult<Json<Vec<NodeView>>> {
    edge.operator(&h)?;
    Ok(Json(nodes_of(&edge, &q).await?))
}

async fn show_node(
    State(edge): State<Arc<Edge>>,
    Path(node): Path<String>,
    h: HeaderMap,
) -> ApiResult<Json<NodeView>> {
    edge.operator(&h)?;
    let found = if auth::is_node_id(&node) || is_node_name(&node) {
        edge.store.node(&node).await?
    } else {
        None
    };
    found.map(|n| Json(node_view(&n))).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "no_node",
            "no node has that id or name (oz0 node list shows them)",
        )
    })
}

async fn nodes_page(
    State(edge): State<Arc<Edge>>,
    Query(q): Query<NodesQuery>,
    h: HeaderMap,
) -> Response {
    if let Err(e) = edge.operator(&h) {
        return e.into_response();
    }
    match nodes_of(&edge, &q).await {
        Ok(nodes) => {
            let mut r =
                crate::page::render_nodes(&nodes, q.tenant.as_deref(), now_ms()).into_response();
            let hs = r.headers_mut();
            hs.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            hs.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"));
            hs.insert(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            );
            hs.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            r
        }
        Err(e) => e.into_response(),
    }
}
