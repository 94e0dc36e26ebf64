//! The routes a node calls, each signed by its key: registration (with the
//! tenant's enrolment token), facts reports, per-tier polling under a lease,
//! renewal and completion.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::Json;
use oz0_policy::facts::NodeFacts;
use std::net::SocketAddr;

use super::access::signed_headers;
use super::error::{parse_json, ApiResult};
use super::{node_view, Edge, DROPPED_COUNTER};
use crate::auth::{self, AuthError};
use crate::routing::is_tenant;
use crate::sanitize::{is_usable_node_name, sanitize, NODE_NAME_FORM};
use crate::store::{JobEnd, NodeRow, Registration, Report};
use crate::wire::*;
use crate::MAX_REPORT_BYTES;

pub(super) async fn register(
    State(edge): State<Arc<Edge>>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
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
        // One line an interval however many come (a token guesser sends
        // thousands).
        static REFUSED: crate::log::Tally = crate::log::Tally::new(crate::log::Level::Warn);
        REFUSED.note(
            "refused a registration: wrong or missing enrolment token",
            Some(client),
        );
        return Err(ApiError::new(StatusCode::UNAUTHORIZED, "unauthenticated", "the tenant's enrolment token is missing or wrong, or the tenant does not exist: pass the token the edge was started with for that tenant"));
    }
    let key = auth::decode_key(&req.public_key)?;
    let s = signed_headers(&h)?;
    // A node's id is its first key's; after a rotation it keeps it, and
    // registers again (idempotently) with its new key.
    let rotated = edge
        .store
        .node_by_id(s.node)
        .await?
        .filter(|n| n.public_key == req.public_key);
    let id = match &rotated {
        Some(n) => n.id.clone(),
        None => auth::node_id(&key),
    };
    if s.node != id {
        return Err(AuthError::Header(auth::H_NODE).into());
    }
    let now = edge.check_signed(&method, &uri, &s, &key, &body).await?;
    let name = match req.name.as_deref() {
        Some(n) if is_usable_node_name(n) => Some(n),
        // Refused rather than registered without it, and not echoed: the
        // node's own check named the value before it started.
        Some(_) => {
            crate::log::info(
                &format!("node {id}: refused its registration: its name is not a host name"),
                Some(client),
            );
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_name",
                format!("the node's name is not one the edge takes: a name is {NODE_NAME_FORM}; start the node with another --name"),
            ));
        }
        None => None,
    };
    let approved = !edge.cfg.approval_tenants.contains(&req.tenant);
    let node = match edge
        .store
        .register_node(&id, &req.tenant, &req.public_key, name, approved, now)
        .await?
    {
        Registration::New(n) => {
            crate::log::info(
                &format!(
                    "node {id} registered with tenant {}{}",
                    n.tenant,
                    if n.approved {
                        ""
                    } else {
                        ", waiting for an operator's approval"
                    }
                ),
                Some(client),
            );
            n
        }
        Registration::Known(n) => n,
        Registration::NameTaken(holder) => {
            return Err(ApiError::new(StatusCode::CONFLICT, "name_taken", format!(
                "node {} of tenant {} already has the name {:?}: give this node another --name, or remove the other (oz0 node remove {})",
                if holder.is_empty() { "another" } else { holder.as_str() },
                req.tenant,
                name.unwrap_or_default(),
                if holder.is_empty() { "NODE" } else { holder.as_str() },
            )));
        }
    };
    if node.removed_ms.is_some() {
        return Err(removed(&node.id));
    }
    if node.tenant != req.tenant {
        return Err(ApiError::new(StatusCode::CONFLICT, "other_tenant", format!("node {id} is registered with another tenant: a key belongs to one tenant; make a new key for this one")));
    }
    if node.public_key != req.public_key {
        return Err(AuthError::Signature(id).into());
    }
    Ok(Json(Registered {
        node_id: node.id,
        tenant: node.tenant,
    }))
}

/// The answer to a removed node, whatever it asks.
pub(super) fn removed(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "node_removed",
        format!("node {id} was removed by an operator, and its key is refused for good: to bring the machine back, move its key aside (<data-dir>/identity/node.key) so that it makes a new one, and register again"),
    )
}

/// Who the edge takes the signing node for.
pub(super) async fn whoami(
    State(edge): State<Arc<Edge>>,
    method: Method,
    uri: Uri,
    h: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<Registered>> {
    let (node, now) = edge.node_request(&method, &uri, &h, &body).await?;
    edge.heard_from(&node, now).await?;
    Ok(Json(Registered {
        node_id: node.id,
        tenant: node.tenant,
    }))
}

/// Replaces the node's key: the request is signed by the old key, and
/// carries the new one with its own signature over the node id and the
/// new key (proof that the node holds it).
pub(super) async fn rotate(
    State(edge): State<Arc<Edge>>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    method: Method,
    uri: Uri,
    h: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<Registered>> {
    let (node, _) = edge.node_request(&method, &uri, &h, &body).await?;
    let req: RotateRequest = parse_json(&body, "key rotation")?;
    let new_key = auth::decode_key(&req.public_key)?;
    let msg = auth::rotation_message(&node.id, &req.public_key);
    auth::verify(&new_key, &node.id, &msg, &req.proof)?;
    if !edge
        .store
        .rotate_key(&node.id, &node.public_key, &req.public_key)
        .await?
    {
        return Err(ApiError::new(StatusCode::CONFLICT, "key_taken", "the new key is another node's, or the node changed meanwhile: make a new key and rotate again"));
    }
    crate::log::info(
        &format!(
            "node {}: key rotated; the old key is refused from now on",
            node.id
        ),
        Some(client),
    );
    Ok(Json(Registered {
        node_id: node.id,
        tenant: node.tenant,
    }))
}

pub(super) async fn report_facts(
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
            microvm_level: s.microvm_level(),
            oci_level: s.oci_level(),
            arch: s.arch.as_deref().unwrap_or(""),
            dropped,
            now_ms: now,
            psec: (s.os == "windows").then(|| {
                if s.mechanism.kind == "psec" {
                    s.mechanism.psec_contract.as_deref().unwrap_or("unknown")
                } else {
                    ""
                }
            }),
            build: s.build.as_deref(),
        })
        .await?;
    if dropped > 0 {
        edge.store.count(DROPPED_COUNTER, dropped).await?;
        let mut names = out.dropped.clone();
        names.dedup();
        crate::log::info(
            &format!(
                "node {}: report kept with {dropped} field(s) dropped: {}",
                node.id,
                names.join(", ")
            ),
            None,
        );
    }
    let stored = edge
        .store
        .node(&node.id)
        .await?
        .filter(|n| n.id == node.id)
        .ok_or_else(|| AuthError::UnknownNode(node.id.clone()))?;
    Ok(Json(node_view(&stored, now - edge.cfg.node_live_ms)))
}

pub(super) async fn poll(
    State(edge): State<Arc<Edge>>,
    method: Method,
    uri: Uri,
    h: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<PollResponse>> {
    let (node, now) = edge.node_request(&method, &uri, &h, &body).await?;
    let req: PollRequest = parse_json(&body, "poll")?;
    may_poll(&edge, &node, &req, now).await?;
    let (job, stop, held_ms) = wait_for_work(&edge, &node, &req).await?;
    edge.heard_from(&node, crate::time::now_ms()).await?;
    let job = match job {
        None => None,
        Some((j, lease_id)) => Some(leased_view(&edge, j, lease_id)?),
    };
    Ok(Json(PollResponse {
        job,
        tier_routed: Some(node.tier_taken()),
        stop,
        held_ms,
    }))
}

/// Refuses a poll the node may not make: before its facts, while it waits
/// for approval (its polls still count as heard from), for a tier above
/// its own, or holding too many jobs.
async fn may_poll(edge: &Edge, node: &NodeRow, req: &PollRequest, now: i64) -> ApiResult<()> {
    if node.last_report_ms.is_none() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "no_facts",
            "report this node's facts before taking work",
        ));
    }
    // A node waiting for approval takes no work at all: its tenant's
    // enrolment token alone must not hand out jobs and their secrets. Its
    // polls still count as heard from, so a job's refusal can name it.
    if !node.approved {
        edge.heard_from(node, now).await?;
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "pending_approval",
            format!("node {} waits for an operator's approval and takes no work until then: an operator approves it with oz0 node approve {}", node.id, node.id),
        ));
    }
    if !node.polls(req.tier) && !node.drained {
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
    if req.holding.len() > MAX_HOLDING || !req.holding.iter().all(|j| auth::is_nonce(j)) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_poll",
            format!("holding names at most {MAX_HOLDING} job ids"),
        ));
    }
    Ok(())
}

/// A job leased to the node and its lease id.
type Taken = Option<(crate::store::LeasedJob, String)>;

/// Looks for work and for jobs to stop, and with `wait_ms` waits for
/// either (woken by the queues and the node's keys) until the wait is
/// over: the job taken, the jobs to stop, and how long the poll was held.
async fn wait_for_work(
    edge: &Arc<Edge>,
    node: &NodeRow,
    req: &PollRequest,
) -> ApiResult<(Taken, Vec<StopJob>, u64)> {
    let tiers: Vec<u8> = if req.below {
        (0..=req.tier).rev().filter(|t| node.polls(*t)).collect()
    } else {
        vec![req.tier]
    };
    // A drained node takes nothing, but still learns what to stop.
    let take = req.take && !node.drained;
    // The node must be heard from within its liveness window while it
    // waits: at most half of it.
    let wait = req
        .wait_ms
        .min(MAX_WAIT_MS)
        .min(u64::try_from(edge.cfg.node_live_ms / 2).unwrap_or(0));
    let start = tokio::time::Instant::now();
    let until = start + std::time::Duration::from_millis(wait);
    let held = (wait > 0).then(|| edge.hold(&node.id));
    let waiter = crate::wake::Wakes::waiter();
    // Woken by a change of the node (a cancel, a drain, an approval): one
    // more look, then the answer.
    let mut last = false;
    let answer = loop {
        let looked = start.elapsed();
        if wait > 0 {
            listen(edge, node, req, &waiter, take.then_some(&tiers[..]));
        }
        let now = crate::time::now_ms();
        edge.sweep_jobs(now).await;
        let stop = stops(edge, node, &req.holding).await?;
        let job = if take {
            lease_one(edge, node, &tiers, now).await?
        } else {
            None
        };
        let woke = waiter.take_wake();
        if job.is_some() || !stop.is_empty() || last || tokio::time::Instant::now() >= until {
            break (job, stop, u64::try_from(looked.as_millis()).unwrap_or(0));
        }
        // Woken for a job another node took, or one this node may not
        // take: the next waiter gets the wake.
        if let Some(w) = woke {
            edge.wakes().pass_on(w);
        }
        tokio::select! {
            _ = waiter.woken() => last = waiter.take_changed(),
            _ = tokio::time::sleep_until(until) => {}
        }
    };
    if let Some(h) = held {
        h.answered();
    }
    Ok(answer)
}

/// Listens, for one round, to what ends a node's wait: its queues (when
/// it takes work), its own key, and its stops (when it holds jobs).
fn listen(
    edge: &Edge,
    node: &NodeRow,
    req: &PollRequest,
    waiter: &Arc<crate::wake::Waiter>,
    queues: Option<&[u8]>,
) {
    crate::wake::Wakes::new_round(waiter);
    for t in queues.unwrap_or_default() {
        edge.wakes().listen_queue(waiter, &node.tenant, *t);
    }
    edge.wakes()
        .listen_key(waiter, &crate::wake::node_key(&node.id));
    if !req.holding.is_empty() {
        edge.wakes()
            .listen_key(waiter, &crate::wake::stops_key(&node.id));
    }
}

/// Leases the first job of `tiers`' queues to the node, if any.
async fn lease_one(edge: &Edge, node: &NodeRow, tiers: &[u8], now: i64) -> ApiResult<Taken> {
    for t in tiers {
        let lease_id = auth::random_id();
        if let Some(j) = edge
            .store
            .lease(node, *t, &lease_id, now + edge.cfg.lease_ms, now)
            .await?
        {
            return Ok(Some((j, lease_id)));
        }
    }
    Ok(None)
}

/// The view of a job leased to a node. Stored as submitted and checked
/// with the same type: a payload that no longer reads is the store's
/// fault, said as such.
fn leased_view(
    edge: &Edge,
    j: crate::store::LeasedJob,
    lease_id: String,
) -> ApiResult<LeasedJobView> {
    let job = JobPayload::stored(&j.kind, &j.payload).ok_or_else(|| {
        crate::log::error(
            &format!(
                "job {}'s stored {} payload does not read as one",
                j.id, j.kind
            ),
            None,
        );
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store",
            "the edge's store failed; retry later",
        )
    })?;
    Ok(LeasedJobView {
        job,
        job_id: j.id,
        lease_id,
        lease_ms: edge.cfg.lease_ms,
        tier: j.tier,
        origin: j.origin,
        attempt: j.attempts,
        oci_runtime: j.gvisor.then(|| "gvisor".to_string()),
    })
}

/// Which of the jobs a node says it runs it must stop: those whose lease
/// is not its own any more (cancelled, lapsed, ended).
async fn stops(edge: &Edge, node: &NodeRow, holding: &[String]) -> ApiResult<Vec<StopJob>> {
    if holding.is_empty() {
        return Ok(Vec::new());
    }
    let mine = edge.store.held_by(&node.id).await?;
    let mut stop = Vec::new();
    for j in holding.iter().filter(|j| !mine.contains(j)) {
        let cancelled = edge
            .store
            .job(&node.tenant, j)
            .await?
            .is_some_and(|r| r.state == "cancelled");
        stop.push(StopJob {
            job_id: j.clone(),
            reason: if cancelled { "cancelled" } else { "lost" }.into(),
        });
    }
    Ok(stop)
}

/// A stopping node gives its job back to the queue at once, instead of
/// letting the lease lapse.
pub(super) async fn release(
    State(edge): State<Arc<Edge>>,
    Path(job): Path<String>,
    method: Method,
    uri: Uri,
    h: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    let (node, now) = edge.node_request(&method, &uri, &h, &body).await?;
    job_id_ok(&job)?;
    let req: ReleaseRequest = parse_json(&body, "release")?;
    let Some((tenant, tier)) = edge
        .store
        .release(&job, &node.id, &req.lease_id, now)
        .await?
    else {
        return Err(lease_lost(&job));
    };
    edge.wakes().queued(&tenant, tier);
    edge.wakes().key(&crate::wake::job_key(&job));
    crate::log::info(
        &format!("node {}: gave job {job} back (stopping)", node.id),
        None,
    );
    Ok(Json(serde_json::json!({"ok": true})))
}

fn lease_lost(job: &str) -> ApiError {
    ApiError::new(StatusCode::CONFLICT, "lease_lost", format!("the lease on job {job} expired or is not this node's: stop the job now; it may run elsewhere"))
}

fn job_cancelled(job: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "job_cancelled",
        format!("job {job} was cancelled by an operator: stop it now"),
    )
}

/// The refusal for a lease that is not this node's any more: cancelled,
/// or lost.
async fn not_yours(edge: &Edge, node: &NodeRow, job: &str) -> ApiError {
    match edge.store.job(&node.tenant, job).await {
        Ok(Some(j)) if j.state == "cancelled" => job_cancelled(job),
        _ => lease_lost(job),
    }
}

pub(super) fn job_id_ok(job: &str) -> ApiResult<()> {
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

pub(super) async fn renew(
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
    let wait = req
        .wait_ms
        .min(MAX_WAIT_MS)
        .min(u64::try_from(edge.cfg.lease_ms / 3).unwrap_or(0));
    let waiter = crate::wake::Wakes::waiter();
    // It listens before the lease is checked: a cancel that came between
    // the check and the listening would not answer the held renewal. A
    // renewal refused below (any job id a node names) ends its waiter,
    // and with it the waiter's place under the key: nothing is kept.
    if wait > 0 {
        edge.wakes()
            .listen_key(&waiter, &crate::wake::cancel_key(&job));
    }
    if !edge
        .store
        .renew(&job, &node.id, &req.lease_id, now + edge.cfg.lease_ms, now)
        .await?
    {
        return Err(not_yours(&edge, &node, &job).await);
    }
    edge.heard_from(&node, now).await?;
    if wait > 0 {
        // Held: answered at once when the job is cancelled, else when the
        // wait is over (the node renews again then).
        let held = edge.hold(&node.id);
        let until = tokio::time::Instant::now() + std::time::Duration::from_millis(wait);
        loop {
            tokio::select! {
                _ = waiter.woken() => {}
                _ = tokio::time::sleep_until(until) => break,
            }
            // The edge is stopping: the lease was renewed, said now.
            if waiter.stopped() {
                break;
            }
            let still = edge
                .store
                .job(&node.tenant, &job)
                .await?
                .is_some_and(|j| j.state == "leased" && j.node_id.as_deref() == Some(&node.id));
            if !still {
                held.answered();
                return Err(not_yours(&edge, &node, &job).await);
            }
            edge.wakes()
                .listen_key(&waiter, &crate::wake::cancel_key(&job));
        }
        held.answered();
        edge.seen_here(&node.id, crate::time::now_ms());
    }
    Ok(Json(Renewed {
        lease_ms: edge.cfg.lease_ms,
    }))
}

/// A piece of a running job's output, kept in its stream's bounded tail.
pub(super) async fn output(
    State(edge): State<Arc<Edge>>,
    Path(job): Path<String>,
    method: Method,
    uri: Uri,
    h: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<OutputTaken>> {
    let (node, now) = edge.node_request(&method, &uri, &h, &body).await?;
    job_id_ok(&job)?;
    let req: OutputRequest = parse_json(&body, "output")?;
    let stream = match req.stream.as_str() {
        "stdout" => crate::store::Stream::Stdout,
        "stderr" => crate::store::Stream::Stderr,
        _ => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_output",
                "a job's output stream is stdout or stderr",
            ))
        }
    };
    if req.data.len() > crate::MAX_TAIL_BYTES {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!(
                "a piece of output is at most {} bytes: send its end, with the offset of where it starts",
                crate::MAX_TAIL_BYTES
            ),
        ));
    }
    let Some(bytes) = edge
        .store
        .append_output(
            &job,
            &node.id,
            &req.lease_id,
            crate::store::Piece {
                stream,
                offset: req.offset,
                data: &req.data,
            },
            now,
        )
        .await?
    else {
        return Err(not_yours(&edge, &node, &job).await);
    };
    edge.wakes().key(&crate::wake::job_key(&job));
    edge.heard_from(&node, now).await?;
    Ok(Json(OutputTaken { bytes }))
}

pub(super) async fn complete(
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
    let result = req
        .result
        .as_ref()
        .map(|r| serde_json::to_string(r).unwrap_or_else(|_| "null".into()));
    if let Some(r) = &result {
        if r.len() > crate::MAX_RESULT_BYTES {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!(
                    "a job's result is at most {} bytes of JSON: report the job failed with the reason instead",
                    crate::MAX_RESULT_BYTES
                ),
            ));
        }
    }
    if req
        .error
        .as_ref()
        .is_some_and(|e| e.len() > crate::MAX_ERROR_BYTES)
    {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!(
                "a job's failure reason is at most {} bytes",
                crate::MAX_ERROR_BYTES
            ),
        ));
    }
    // The reason is the job's output, in the node's words: kept as data for
    // the operator who asked, one line (no control characters).
    let error: Option<String> = req.error.as_deref().map(|e| {
        e.chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect()
    });
    for t in [&req.stdout_tail, &req.stderr_tail].into_iter().flatten() {
        if t.len() > crate::MAX_TAIL_BYTES {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!(
                    "a job's output tail is at most {} bytes (its end)",
                    crate::MAX_TAIL_BYTES
                ),
            ));
        }
    }
    if req.look.as_ref().is_some_and(|l| !l.within_bounds()) {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!(
                "the look after a run carries at most {} findings and {} changed files, each text at most {} bytes, each kind a plain word",
                crate::MAX_LOOK_ITEMS,
                crate::MAX_LOOK_ITEMS,
                crate::MAX_ERROR_BYTES
            ),
        ));
    }
    let look = req
        .look
        .as_ref()
        .map(|l| serde_json::to_string(l).expect("a look serialises"));
    let bytes = |n: Option<u64>| n.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
    let end = JobEnd {
        succeeded: req.succeeded,
        exit_code: req.exit_code.map(i64::from),
        result: result.as_deref(),
        error: error.as_deref(),
        stdout_tail: req.stdout_tail.as_deref(),
        stderr_tail: req.stderr_tail.as_deref(),
        stdout_bytes: bytes(req.stdout_bytes),
        stderr_bytes: bytes(req.stderr_bytes),
        look: look.as_deref(),
    };
    if !edge
        .store
        .complete(&job, &node.id, &req.lease_id, &end, now)
        .await?
    {
        return Err(not_yours(&edge, &node, &job).await);
    }
    edge.wakes().key(&crate::wake::job_key(&job));
    edge.heard_from(&node, now).await?;
    Ok(Json(serde_json::json!({"ok": true})))
}
