//! The operator's routes, behind an operator token: job submission (refused
//! with the reason when no live node can take the job), a job's state, the
//! node views behind `oz0 node show` and `oz0 node list`, and the Nodes page.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::net::SocketAddr;

use super::error::{parse_json, ApiResult};
use super::node::job_id_ok;
use super::Edge;
use crate::auth;
use crate::routing::{is_tenant, JobKind, JobPayload, JobRequest, RawJobRequest};
use crate::sanitize::{is_node_name, Sanitized};
use crate::store::{NewJob, NodeChange, NodeRow, Queued};
use crate::time::{format_utc, now_ms};
use crate::wire::*;
use crate::MAX_PAYLOAD_BYTES;
use oz0_plugin::job::MAX_TOOL_JOB_BYTES;

/// Builds the operator's view of a stored node; it is up when it was heard
/// from since `live_since_ms`.
pub fn node_view(n: &NodeRow, live_since_ms: i64) -> NodeView {
    {
        let facts: Option<Sanitized> = n
            .facts
            .as_deref()
            .and_then(|f| serde_json::from_str(f).ok());
        let containers_line = facts.as_ref().map_or_else(
            || "none: no report yet".to_string(),
            Sanitized::containers_line,
        );
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
        let up = n.last_seen_ms >= live_since_ms && n.removed_ms.is_none() && n.gone_ms.is_none();
        let state = if n.removed_ms.is_some() {
            "removed"
        } else if !n.approved {
            "pending approval"
        } else if n.drained {
            "draining"
        } else if up {
            "up"
        } else {
            "down"
        };
        let tier_line = if !n.approved && facts.is_some() {
            format!("tier {tier_proven} proven; takes no work until an operator approves it")
        } else if !up && n.removed_ms.is_none() && facts.is_some() {
            format!("down: takes no work (tier {tier_proven} proven when last seen)")
        } else {
            tier_line
        };
        let routed_note = if n.approved {
            routed_note
        } else {
            Some(format!(
                "waits for an operator's approval (oz0 node approve {}): takes no work until then",
                n.id
            ))
        };
        NodeView {
            id: n.id.clone(),
            tenant: n.tenant.clone(),
            name: n.name.clone(),
            tier_proven,
            tier_routed: n.tier_taken(),
            tier_line,
            platform_line,
            mechanism_line,
            fix,
            microvm_line,
            containers_line,
            routed_note,
            state: state.to_string(),
            up,
            approved: n.approved,
            drained: n.drained,
            last_seen: format_utc(n.last_seen_ms),
            last_report_ms: n.last_report_ms,
            last_report: n.last_report_ms.map(format_utc),
            last_seen_ms: n.last_seen_ms,
            dropped_last: n.dropped_last,
            dropped_total: n.dropped_total,
            facts,
        }
    }
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

pub(super) async fn submit_job(
    State(edge): State<Arc<Edge>>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    Path(tenant): Path<String>,
    h: HeaderMap,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<Accepted>)> {
    edge.operator(&h)?;
    known_tenant(&edge, &tenant)?;
    let raw: RawJobRequest = parse_json(&body, "job")?;
    let hash = request_hash(&raw);
    let req = check_job(raw)?;
    let payload = serde_json::to_string(&req.job.payload()).unwrap_or_else(|_| "null".into());
    let mut needs = req.needs().map_err(|e| bad_job(e.to_string()))?;
    // A tenant's --oci gvisor: its container tools run only in gVisor (a
    // microVM tool runs in its VM all the same).
    needs.oci_gvisor = needs.oci && edge.cfg.gvisor_tenants.contains(&tenant);
    let now = now_ms();
    let live_since = now - edge.cfg.node_live_ms;
    let eligible = edge
        .store
        .eligible_nodes(&tenant, &needs, live_since)
        .await?;
    // A retry of a request already taken is answered with that job, even
    // when no node could take a new one now.
    if let Some(k) = &req.idempotency_key {
        if let Some(j) = edge.store.job_by_key(&tenant, k).await? {
            return existing(j, &hash, needs.tier, eligible);
        }
    }
    if eligible == 0 {
        let held = edge.store.held_back(&tenant, &needs, live_since).await?;
        let reason = if held.is_empty() {
            let offers = edge.store.live_offers(&tenant, live_since).await?;
            needs.refusal(&tenant, req.origin, &offers)
        } else {
            needs.held_back(&tenant, &held)
        };
        crate::log::info(
            &format!(
                "refused a {} job for tenant {tenant}: {reason}",
                req.origin.as_str()
            ),
            Some(client),
        );
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "no_eligible_node",
            reason,
        ));
    }
    let id = auth::job_id();
    let queued = edge
        .store
        .insert_job(
            &NewJob {
                id: &id,
                tenant: &tenant,
                origin: req.origin.as_str(),
                kind: req.job.kind().as_str(),
                needs: &needs,
                payload: &payload,
                idem_key: req.idempotency_key.as_deref(),
                request_hash: &hash,
                max_attempts: edge.cfg.max_attempts,
            },
            now,
        )
        .await?;
    let accepted = |job_id, existing| Accepted {
        job_id,
        existing,
        tier: needs.tier,
        eligible_nodes: eligible,
    };
    match queued {
        Queued::New => {
            edge.wakes().queued(&tenant, needs.tier);
            Ok((StatusCode::ACCEPTED, Json(accepted(id, false))))
        }
        Queued::Existing { id, same: true } => Ok((StatusCode::OK, Json(accepted(id, true)))),
        Queued::Existing { same: false, .. } => Err(conflict_key()),
    }
}

fn bad_job(why: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "bad_job", why)
}

/// What a job request must be before the edge looks for a node: its
/// payload's size, its payload read as its kind's type (a shell job's
/// every field checked; a tool job is checked with its manifest by
/// `needs`), a kind some node runs, an idempotency key's form.
fn check_job(raw: RawJobRequest) -> ApiResult<JobRequest> {
    let limit = match raw.kind {
        JobKind::Tool => MAX_TOOL_JOB_BYTES,
        _ => MAX_PAYLOAD_BYTES,
    };
    let size = serde_json::to_string(&raw.payload).map_or(usize::MAX, |p| p.len());
    if size > limit {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!(
                "a {} job's payload is at most {limit} bytes of JSON",
                raw.kind.as_str()
            ),
        ));
    }
    let req = JobRequest::try_from(raw).map_err(|e| bad_job(e.to_string()))?;
    if let JobPayload::Harness(_) = req.job {
        return Err(bad_job(
            "no node runs harness sessions yet: submit the session's commands as shell jobs".into(),
        ));
    }
    if let Some(k) = &req.idempotency_key {
        if k.is_empty() || k.len() > 128 || !k.bytes().all(|b| (0x21..0x7f).contains(&b)) {
            return Err(bad_job(
                "an idempotency_key is 1-128 printable ASCII characters, without spaces".into(),
            ));
        }
    }
    Ok(req)
}

/// The request's digest, of the request as sent: a retry with the same
/// idempotency key must be the same request.
fn request_hash(req: &RawJobRequest) -> String {
    use sha2::Digest;
    let text = serde_json::to_string(req).unwrap_or_default();
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
}

fn conflict_key() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "idempotency_conflict",
        "this idempotency_key names another job, submitted with another request: use a new key for a new job",
    )
}

fn existing(
    j: (String, Option<String>),
    hash: &str,
    tier: u8,
    eligible: i64,
) -> ApiResult<(StatusCode, Json<Accepted>)> {
    if j.1.as_deref() != Some(hash) {
        return Err(conflict_key());
    }
    Ok((
        StatusCode::OK,
        Json(Accepted {
            job_id: j.0,
            existing: true,
            tier,
            eligible_nodes: eligible,
        }),
    ))
}

pub(super) async fn job_status(
    State(edge): State<Arc<Edge>>,
    Path((tenant, job)): Path<(String, String)>,
    h: HeaderMap,
) -> ApiResult<Json<JobView>> {
    let mut v = job_view(operator_job(&edge, &h, &tenant, &job, None).await?);
    // What it runs: a shell job's command (never its variables), a tool
    // job's tool; and its node's name.
    if let Some((_, payload)) = edge.store.job_spec(&tenant, &v.job_id).await? {
        match JobPayload::stored(&v.kind, &payload) {
            Some(JobPayload::Shell(s)) => v.command = Some(s.command),
            Some(JobPayload::Tool(t)) => {
                v.tool = Some(match t.name {
                    Some(n) if n != t.tool => format!("{} ({n})", t.tool),
                    _ => t.tool,
                });
            }
            _ => {}
        }
    }
    if let Some(n) = &v.node_id {
        v.node_name = edge.store.node_by_id(n).await?.and_then(|n| n.name);
    }
    Ok(Json(v))
}

/// The tenants the edge serves (their names only).
pub(super) async fn list_tenants(
    State(edge): State<Arc<Edge>>,
    h: HeaderMap,
) -> ApiResult<Json<Tenants>> {
    edge.operator(&h)?;
    Ok(Json(Tenants {
        tenants: edge.cfg.tenant_tokens.keys().cloned().collect(),
    }))
}

/// Queues a job again: a new job with the kind, origin, needs and payload
/// of the one named, refused like a submission when no live node can
/// take it.
pub(super) async fn rerun_job(
    State(edge): State<Arc<Edge>>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    Path((tenant, job)): Path<(String, String)>,
    h: HeaderMap,
) -> ApiResult<(StatusCode, Json<Accepted>)> {
    let old = operator_job(&edge, &h, &tenant, &job, None).await?;
    let (needs, _) = edge
        .store
        .job_spec(&tenant, &old.id)
        .await?
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "no_job", "no such job"))?;
    let now = now_ms();
    let live_since = now - edge.cfg.node_live_ms;
    let eligible = edge
        .store
        .eligible_nodes(&tenant, &needs, live_since)
        .await?;
    if eligible == 0 {
        let held = edge.store.held_back(&tenant, &needs, live_since).await?;
        let reason = if held.is_empty() {
            let offers = edge.store.live_offers(&tenant, live_since).await?;
            let origin = match old.origin.as_str() {
                "webhook" => crate::routing::Origin::Webhook,
                "event" => crate::routing::Origin::Event,
                "chat" => crate::routing::Origin::Chat,
                _ => crate::routing::Origin::Internal,
            };
            needs.refusal(&tenant, origin, &offers)
        } else {
            needs.held_back(&tenant, &held)
        };
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "no_eligible_node",
            reason,
        ));
    }
    let id = auth::job_id();
    if !edge
        .store
        .rerun(&tenant, &old.id, &id, edge.cfg.max_attempts, now)
        .await?
    {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_job",
            "no such job",
        ));
    }
    edge.wakes().queued(&tenant, needs.tier);
    crate::log::info(
        &format!("tenant {tenant}: job {} queued again as job {id}", old.id),
        Some(client),
    );
    Ok((
        StatusCode::ACCEPTED,
        Json(Accepted {
            job_id: id,
            existing: false,
            tier: needs.tier,
            eligible_nodes: eligible,
        }),
    ))
}

/// An operator's job, after `act` (the time it acts at) was done to it;
/// whether `act` changed it.
async fn operator_job(
    edge: &Edge,
    h: &HeaderMap,
    tenant: &str,
    job: &str,
    act: Option<i64>,
) -> ApiResult<crate::store::JobRow> {
    edge.operator(h)?;
    known_tenant(edge, tenant)?;
    job_id_ok(job)?;
    let cancelled = match act {
        Some(now) => Some(edge.store.cancel(tenant, job, now).await?),
        None => None,
    };
    let j = edge
        .store
        .job(tenant, job)
        .await?
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "no_job", "no such job"))?;
    if cancelled == Some(true) {
        // Its node stops it now: a held renewal or a long poll of the node
        // is answered at once.
        if let Some(n) = &j.node_id {
            edge.wakes().key(&crate::wake::stops_key(n));
        }
        edge.wakes().key(&crate::wake::cancel_key(&j.id));
        edge.wakes().key(&crate::wake::job_key(&j.id));
    }
    if cancelled == Some(false) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "job_ended",
            format!(
                "job {} has already ended ({}): there is nothing to cancel",
                j.id, j.state
            ),
        ));
    }
    Ok(j)
}

fn job_view(j: crate::store::JobRow) -> JobView {
    JobView {
        job_id: j.id,
        kind: j.kind,
        state: j.state,
        tier: j.tier,
        node_id: j.node_id,
        attempts: j.attempts,
        exit_code: j.exit_code,
        origin: j.origin,
        max_attempts: j.max_attempts,
        stdout_bytes: j.stdout_bytes,
        stderr_bytes: j.stderr_bytes,
        result: j.result.and_then(|r| serde_json::from_str(&r).ok()),
        error: j.error,
        look: j.look.and_then(|l| serde_json::from_str(&l).ok()),
        submitted_ms: j.enqueued_ms,
        leased_ms: j.leased_ms,
        done_ms: j.done_ms,
        command: None,
        tool: None,
        node_name: None,
    }
}

pub(super) async fn job_logs(
    State(edge): State<Arc<Edge>>,
    Path((tenant, job)): Path<(String, String)>,
    Query(q): Query<LogsQuery>,
    h: HeaderMap,
) -> ApiResult<Json<JobLogs>> {
    let j = operator_job(&edge, &h, &tenant, &job, None).await?;
    let wait = q.wait_ms.unwrap_or(0).min(MAX_WAIT_MS);
    let until = tokio::time::Instant::now() + std::time::Duration::from_millis(wait);
    let following = q.stdout_after.is_some() || q.stderr_after.is_some();
    loop {
        // Listening first: output that comes while the store is read wakes
        // the next look.
        let waiter = crate::wake::Wakes::waiter();
        if wait > 0 {
            edge.wakes()
                .listen_key(&waiter, &crate::wake::job_key(&j.id));
        }
        let o = edge
            .store
            .job_output(&tenant, &j.id)
            .await?
            .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "no_job", "no such job"))?;
        let ended = !matches!(o.state.as_str(), "queued" | "leased");
        let fresh =
            |bytes: Option<i64>, after: Option<i64>| bytes.unwrap_or(0) > after.unwrap_or(-1);
        let news = !following
            || fresh(o.stdout_bytes, q.stdout_after)
            || fresh(o.stderr_bytes, q.stderr_after);
        if news || ended || waiter.stopped() || tokio::time::Instant::now() >= until {
            let (stdout_tail, stdout_from) = after(o.stdout_tail, o.stdout_bytes, q.stdout_after);
            let (stderr_tail, stderr_from) = after(o.stderr_tail, o.stderr_bytes, q.stderr_after);
            return Ok(Json(JobLogs {
                stdout_tail,
                stderr_tail,
                stdout_bytes: o.stdout_bytes,
                stderr_bytes: o.stderr_bytes,
                bound_bytes: crate::MAX_TAIL_BYTES,
                stdout_from,
                stderr_from,
                state: Some(o.state),
                exit_code: o.exit_code,
            }));
        }
        // Woken by output or the job's end on this replica; another
        // replica's is seen within a second.
        tokio::select! {
            _ = waiter.woken() => {}
            _ = tokio::time::sleep_until(until.min(tokio::time::Instant::now() + std::time::Duration::from_secs(1))) => {}
        }
    }
}

/// The part of a kept tail after byte `after` of its stream (the whole
/// tail without one), and the byte it starts at.
fn after(tail: Option<String>, bytes: Option<i64>, after: Option<i64>) -> (Option<String>, i64) {
    let total = bytes.unwrap_or(0);
    let Some(tail) = tail else {
        return (None, total);
    };
    let len = i64::try_from(tail.len()).unwrap_or(i64::MAX);
    let start = (total - len).max(0);
    let Some(a) = after else {
        return (Some(tail), start);
    };
    if a <= start {
        return (Some(tail), start);
    }
    let mut at = usize::try_from(a - start)
        .unwrap_or(usize::MAX)
        .min(tail.len());
    while !tail.is_char_boundary(at) {
        at += 1;
    }
    (
        Some(tail[at..].to_string()),
        start + i64::try_from(at).unwrap_or(0),
    )
}

/// A tenant's jobs, newest first, a page at a time.
pub(super) async fn list_jobs(
    State(edge): State<Arc<Edge>>,
    Path(tenant): Path<String>,
    Query(q): Query<JobsQuery>,
    h: HeaderMap,
) -> ApiResult<Json<JobPage>> {
    edge.operator(&h)?;
    known_tenant(&edge, &tenant)?;
    let bad = |why: &str| ApiError::new(StatusCode::BAD_REQUEST, "bad_query", why.to_string());
    let limit = q.limit.unwrap_or(100);
    if !(1..=crate::MAX_PAGE).contains(&limit) {
        return Err(bad("limit is 1 to 500"));
    }
    if let Some(s) = &q.state {
        if !["queued", "leased", "succeeded", "failed", "cancelled"].contains(&s.as_str()) {
            return Err(bad(
                "state is queued, leased, succeeded, failed or cancelled",
            ));
        }
    }
    let before = match &q.before {
        None => None,
        Some(c) => {
            let (ms, id) = c
                .split_once('.')
                .ok_or_else(|| bad("before is the previous page's next"))?;
            let ms: i64 = ms
                .parse()
                .map_err(|_| bad("before is the previous page's next"))?;
            if !auth::is_nonce(id) {
                return Err(bad("before is the previous page's next"));
            }
            Some((ms, id.to_string()))
        }
    };
    let rows = edge
        .store
        .jobs(
            &tenant,
            q.state.as_deref(),
            before.as_ref().map(|(m, i)| (*m, i.as_str())),
            limit,
        )
        .await?;
    let next = (i64::try_from(rows.len()).unwrap_or(0) == limit)
        .then(|| rows.last().map(|j| format!("{}.{}", j.enqueued_ms, j.id)))
        .flatten();
    let jobs = rows
        .into_iter()
        .map(|j| JobView {
            result: None,
            look: None,
            ..job_view(j)
        })
        .collect();
    Ok(Json(JobPage { jobs, next }))
}

pub(super) async fn cancel_job(
    State(edge): State<Arc<Edge>>,
    Path((tenant, job)): Path<(String, String)>,
    h: HeaderMap,
) -> ApiResult<Json<JobView>> {
    let j = operator_job(&edge, &h, &tenant, &job, Some(now_ms())).await?;
    Ok(Json(job_view(j)))
}

async fn nodes_of(edge: &Edge, q: &NodesQuery) -> ApiResult<NodePage> {
    let bad = |why: &str| ApiError::new(StatusCode::BAD_REQUEST, "bad_query", why.to_string());
    if let Some(t) = &q.tenant {
        if !is_tenant(t) {
            return Err(bad("a tenant is lower-case letters, digits, - and _"));
        }
    }
    let limit = q.limit.unwrap_or(100);
    if !(1..=crate::MAX_PAGE).contains(&limit) {
        return Err(bad("limit is 1 to 500"));
    }
    let after = match &q.after {
        None => None,
        Some(c) => {
            let (t, id) = c
                .split_once('.')
                .ok_or_else(|| bad("after is the previous page's next"))?;
            if !is_tenant(t) || !auth::is_node_id(id) {
                return Err(bad("after is the previous page's next"));
            }
            Some((t.to_string(), id.to_string()))
        }
    };
    let seen_since = if q.all == Some(true) {
        i64::MIN
    } else {
        now_ms() - edge.cfg.forget_nodes_ms
    };
    let rows = edge
        .store
        .nodes_page(
            q.tenant.as_deref(),
            after.as_ref().map(|(t, i)| (t.as_str(), i.as_str())),
            limit,
            seen_since,
        )
        .await?;
    let next = (i64::try_from(rows.len()).unwrap_or(0) == limit)
        .then(|| rows.last().map(|n| format!("{}.{}", n.tenant, n.id)))
        .flatten();
    let live_since = now_ms() - edge.cfg.node_live_ms;
    Ok(NodePage {
        nodes: rows.iter().map(|n| node_view(n, live_since)).collect(),
        next,
    })
}

pub(super) async fn list_nodes(
    State(edge): State<Arc<Edge>>,
    Query(q): Query<NodesQuery>,
    h: HeaderMap,
) -> ApiResult<Json<NodePage>> {
    edge.operator(&h)?;
    Ok(Json(nodes_of(&edge, &q).await?))
}

pub(super) async fn show_node(
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
    found
        .map(|n| Json(node_view(&n, now_ms() - edge.cfg.node_live_ms)))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "no_node",
                "no node has that id or name (oz0 node list shows them)",
            )
        })
}

/// What an operator does to a node: approve, drain, undrain, remove.
pub(super) async fn change_node(
    State(edge): State<Arc<Edge>>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    Path((node, action)): Path<(String, String)>,
    Query(q): Query<DrainQuery>,
    h: HeaderMap,
) -> ApiResult<Json<NodeView>> {
    edge.operator(&h)?;
    let change = match action.as_str() {
        "approve" => NodeChange::Approve,
        "drain" => match q.deadline_s {
            Some(s) => NodeChange::DrainBy(
                now_ms().saturating_add(i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX)),
            ),
            None => NodeChange::Drain(true),
        },
        "undrain" => NodeChange::Drain(false),
        "remove" => NodeChange::Remove,
        _ => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "no_action",
                "a node is approved, drained, undrained or removed",
            ))
        }
    };
    let no_node = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "no_node",
            "no node has that id or name (oz0 node list shows them)",
        )
    };
    let n = if auth::is_node_id(&node) || is_node_name(&node) {
        edge.store.node(&node).await?
    } else {
        None
    }
    .ok_or_else(no_node)?;
    let now = now_ms();
    if !edge.store.set_node(&n.id, change, now).await? {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "node_removed",
            format!("node {} was removed: there is nothing to {action}", n.id),
        ));
    }
    // A held poll of the node answers, so it polls again as it is now.
    edge.wakes().key(&crate::wake::node_key(&n.id));
    crate::log::info(
        &format!(
            "node {} of tenant {}: {action} by an operator",
            n.id, n.tenant
        ),
        Some(client),
    );
    let n = edge.store.node_by_id(&n.id).await?.ok_or_else(no_node)?;
    Ok(Json(node_view(&n, now - edge.cfg.node_live_ms)))
}

pub(super) async fn nodes_page(
    State(edge): State<Arc<Edge>>,
    Query(q): Query<NodesQuery>,
    h: HeaderMap,
) -> Response {
    if let Err(e) = edge.operator_in_browser(&h) {
        let mut r = e.into_response();
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"oz0-edge\""),
        );
        return r;
    }
    match nodes_of(&edge, &q).await {
        Ok(page) => {
            let mut r =
                crate::page::render_nodes(&page, q.tenant.as_deref(), now_ms()).into_response();
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
