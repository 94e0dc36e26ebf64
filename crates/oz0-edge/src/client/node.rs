//! A node's side: registration, facts, polling and the leases of the
//! jobs it runs.

use std::future::Future;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use ed25519_dalek::Signer;
use oz0_policy::facts::NodeFacts;
use serde::de::DeserializeOwned;

use super::{decode, ClientError, Completion, NodeKey, Trust, LEASE_MARGIN_DIVISOR};
use crate::auth;
use crate::http::{self, EdgeUrl};
use crate::wire::{
    CompleteRequest, LeasedJobView, NodeView, OutputRequest, OutputTaken, PollRequest,
    PollResponse, RegisterRequest, Registered, RenewRequest, Renewed, StopJob,
};

/// A job this node holds under a lease.
#[derive(Debug, Clone)]
pub struct Lease {
    /// The job, as the edge handed it.
    pub job: LeasedJobView,
    deadline: Instant,
}

impl Lease {
    fn new(job: LeasedJobView, sent: Instant, lease_ms: i64) -> Lease {
        let ms = lease_ms - lease_ms / LEASE_MARGIN_DIVISOR;
        Lease {
            job,
            deadline: sent + Duration::from_millis(u64::try_from(ms).unwrap_or(0)),
        }
    }

    /// By when the job must have stopped, unless renewed.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Whether the deadline has passed.
    pub fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }
}

/// The answer to a poll.
#[derive(Debug, Clone)]
pub struct Polled {
    /// A job, under a lease.
    pub lease: Option<Lease>,
    /// The tier the edge routes this node at now.
    pub tier_routed: Option<u8>,
    /// Jobs of the poll's `holding` this node must stop now (cancelled,
    /// or their lease is not this node's any more).
    pub stop: Vec<StopJob>,
}

/// A running job's first held renewal is sent this long after it started
/// (a shorter job ends with no renewal at all); from then on one is
/// always held, so a cancel reaches the node at once.
pub const HOLD_RENEWAL_AFTER: Duration = Duration::from_millis(250);

/// A node's connection to the edge.
#[derive(Debug)]
pub struct NodeClient {
    edge: EdgeUrl,
    tenant: String,
    key: NodeKey,
}

impl NodeClient {
    /// A client for `edge_url` (`https://HOST:PORT`, or `http://` on
    /// loopback), as a node of `tenant`, trusting the system's CAs.
    pub fn new(edge_url: &str, tenant: &str, key: NodeKey) -> Result<NodeClient, ClientError> {
        NodeClient::with_trust(edge_url, tenant, key, &Trust::System)
    }

    /// As [`NodeClient::new`], verifying the edge against `trust`.
    pub fn with_trust(
        edge_url: &str,
        tenant: &str,
        key: NodeKey,
        trust: &Trust,
    ) -> Result<NodeClient, ClientError> {
        Ok(NodeClient {
            edge: EdgeUrl::parse_with(edge_url, trust)?,
            tenant: tenant.to_string(),
            key,
        })
    }

    /// Connections (and TLS handshakes) this client opened so far: one
    /// is kept open and used again for request after request.
    pub fn connections_opened(&self) -> u64 {
        self.edge.connections_opened()
    }

    /// This node's id.
    pub fn node_id(&self) -> &str {
        self.key.id()
    }

    /// The key.
    pub fn key(&self) -> &NodeKey {
        &self.key
    }

    async fn signed<T: DeserializeOwned>(
        &self,
        path: &str,
        body: Vec<u8>,
        extra: Option<(&'static str, String)>,
    ) -> Result<T, ClientError> {
        let mut headers = self.key.sign("POST", path, &body);
        headers.extend(extra);
        let (status, resp) = http::request(&self.edge, "POST", path, &headers, body).await?;
        decode(status, &resp)
    }

    /// Registers this node's key with the tenant (idempotent).
    pub async fn register(
        &self,
        enrolment_token: &str,
        name: Option<&str>,
    ) -> Result<Registered, ClientError> {
        let body = serde_json::to_vec(&RegisterRequest {
            tenant: self.tenant.clone(),
            public_key: self.key.public_key(),
            name: name.map(str::to_string),
        })
        .expect("a registration serializes");
        self.signed(
            "/v1/nodes/register",
            body,
            Some(("authorization", format!("Bearer {enrolment_token}"))),
        )
        .await
    }

    /// Who the edge takes this node's signature for: its id and tenant,
    /// or a refusal (an unknown, removed or replaced key).
    pub async fn whoami(&self) -> Result<Registered, ClientError> {
        self.signed("/v1/node/whoami", Vec::new(), None).await
    }

    /// Replaces this node's key with `next` (from [`NodeKey::successor`]):
    /// signed by the current key, with `next`'s proof. From then on only
    /// `next` works; save it before using it.
    pub async fn rotate_key(&self, next: &NodeKey) -> Result<Registered, ClientError> {
        let public_key = next.public_key();
        let msg = auth::rotation_message(self.key.id(), &public_key);
        let proof = B64.encode(next.signing.sign(&msg).to_bytes());
        let body = serde_json::to_vec(&crate::wire::RotateRequest { public_key, proof })
            .expect("serializes");
        self.signed("/v1/node/rotate", body, None).await
    }

    /// The signed manifest of release `version` the edge serves (checked by
    /// [`crate::release::verify`], not here).
    pub async fn release_manifest(
        &self,
        version: &str,
    ) -> Result<crate::release::Signed, ClientError> {
        let body = serde_json::to_vec(&crate::release::ReleaseRequest {
            version: version.into(),
            name: None,
            offset: 0,
        })
        .expect("serializes");
        self.signed("/v1/node/release", body, None).await
    }

    /// At most [`crate::release::PIECE_BYTES`] bytes of release file `name`
    /// from `offset`; empty at its end.
    pub async fn release_piece(
        &self,
        version: &str,
        name: &str,
        offset: u64,
    ) -> Result<Vec<u8>, ClientError> {
        let body = serde_json::to_vec(&crate::release::ReleaseRequest {
            version: version.into(),
            name: Some(name.into()),
            offset,
        })
        .expect("serializes");
        let p: crate::release::Piece = self.signed("/v1/node/release/piece", body, None).await?;
        base64::engine::general_purpose::STANDARD
            .decode(p.data)
            .map_err(|e| ClientError::Http(format!("a release piece that is not base64: {e}")))
    }

    /// Reports facts; returns how the edge sees the node (its routed tier,
    /// labels, the fix in the edge's words, fields dropped).
    pub async fn report_facts(&self, facts: &NodeFacts) -> Result<NodeView, ClientError> {
        self.signed(
            "/v1/node/facts",
            serde_json::to_vec(facts).expect("facts serialize"),
            None,
        )
        .await
    }

    /// Polls one tier's queue. The edge refuses a tier above the one it
    /// routes this node at (`tier_not_routed`).
    pub async fn poll_job(&self, tier: u8) -> Result<Option<Lease>, ClientError> {
        Ok(self.poll(tier).await?.0)
    }

    /// Polls one tier's queue: a job or none, and the tier the edge routes
    /// this node at now.
    pub async fn poll(&self, tier: u8) -> Result<(Option<Lease>, Option<u8>), ClientError> {
        let p = self.poll_with(&PollRequest::tier(tier)).await?;
        Ok((p.lease, p.tier_routed))
    }

    /// Polls as `req` says: with `wait_ms`, a long poll the edge answers
    /// the moment a job for this node is queued or one of `holding` is
    /// cancelled (or when the wait is over); with `below`, the queues of
    /// the lower tiers too; with `take: false`, only what to stop.
    ///
    /// A node waits for work with one long poll after another:
    /// `PollRequest { tier: routed, below: true, wait_ms: 15_000,
    /// take: free_slot, holding: running_job_ids }`.
    pub async fn poll_with(&self, req: &PollRequest) -> Result<Polled, ClientError> {
        let sent = Instant::now();
        let r: PollResponse = self
            .signed(
                "/v1/node/poll",
                serde_json::to_vec(req).expect("serializes"),
                None,
            )
            .await?;
        // The edge leased the job no sooner than `held_ms` after the poll
        // was sent.
        let leased = sent + Duration::from_millis(r.held_ms.min(crate::wire::MAX_WAIT_MS));
        let lease = r.job.map(|j| {
            let ms = j.lease_ms;
            Lease::new(j, leased, ms)
        });
        Ok(Polled {
            lease,
            tier_routed: r.tier_routed,
            stop: r.stop,
        })
    }

    /// Renews a lease; [`ClientError::LeaseLost`] when it is gone.
    pub async fn renew_lease(&self, lease: &mut Lease) -> Result<(), ClientError> {
        self.renew_held(lease, Duration::ZERO).await
    }

    /// Renews a lease, then holds the answer up to `wait` (at most a
    /// third of the lease): a cancel of the job answers at once with
    /// [`ClientError::LeaseLost`] (`cancelled: true`).
    pub async fn renew_held(&self, lease: &mut Lease, wait: Duration) -> Result<(), ClientError> {
        let sent = Instant::now();
        let path = format!("/v1/node/jobs/{}/renew", lease.job.job_id);
        let body = serde_json::to_vec(&RenewRequest {
            lease_id: lease.job.lease_id.clone(),
            wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        })
        .expect("serializes");
        match self.signed::<Renewed>(&path, body, None).await {
            Ok(r) => {
                let renewed = Lease::new(lease.job.clone(), sent, r.lease_ms);
                lease.deadline = renewed.deadline;
                Ok(())
            }
            Err(e) => Err(lost(e, &lease.job.job_id)),
        }
    }

    /// Sends a piece of a running job's output: `data` is the stream's
    /// bytes from `offset` on (bytes it wrote before them); the edge keeps
    /// the last [`crate::MAX_TAIL_BYTES`] of each stream and skips what it
    /// already has. Returns the stream's byte count at the edge;
    /// [`ClientError::LeaseLost`] when the lease is gone.
    pub async fn append_output(
        &self,
        lease: &Lease,
        stream: &str,
        offset: u64,
        data: &str,
    ) -> Result<u64, ClientError> {
        let path = format!("/v1/node/jobs/{}/output", lease.job.job_id);
        let body = serde_json::to_vec(&OutputRequest {
            lease_id: lease.job.lease_id.clone(),
            stream: stream.to_string(),
            offset,
            data: data.to_string(),
        })
        .expect("serializes");
        self.signed::<OutputTaken>(&path, body, None)
            .await
            .map(|t| t.bytes)
            .map_err(|e| lost(e, &lease.job.job_id))
    }

    /// Reports a job's end; [`ClientError::LeaseLost`] when the lease was gone.
    pub async fn complete_job(
        &self,
        lease: &Lease,
        succeeded: bool,
        exit_code: Option<i32>,
    ) -> Result<(), ClientError> {
        self.finish_job(
            lease,
            &Completion {
                succeeded,
                exit_code,
                ..Completion::default()
            },
        )
        .await
    }

    /// Reports a job's end with its result or failure reason;
    /// [`ClientError::LeaseLost`] when the lease was gone.
    pub async fn finish_job(&self, lease: &Lease, end: &Completion) -> Result<(), ClientError> {
        let path = format!("/v1/node/jobs/{}/complete", lease.job.job_id);
        let body = serde_json::to_vec(&CompleteRequest {
            lease_id: lease.job.lease_id.clone(),
            succeeded: end.succeeded,
            exit_code: end.exit_code,
            result: end.result.clone(),
            error: end.error.clone(),
            stdout_tail: end.stdout_tail.clone(),
            stderr_tail: end.stderr_tail.clone(),
            stdout_bytes: end.stdout_bytes,
            stderr_bytes: end.stderr_bytes,
            look: end.look.clone(),
        })
        .expect("serializes");
        self.signed::<serde_json::Value>(&path, body, None)
            .await
            .map(|_| ())
            .map_err(|e| lost(e, &lease.job.job_id))
    }

    /// Gives the job back to its queue at once (the node is stopping), so
    /// another node can take it without waiting for the lease to lapse.
    pub async fn release_job(&self, lease: &Lease) -> Result<(), ClientError> {
        let path = format!("/v1/node/jobs/{}/release", lease.job.job_id);
        let body = serde_json::to_vec(&crate::wire::ReleaseRequest {
            lease_id: lease.job.lease_id.clone(),
        })
        .expect("serializes");
        self.signed::<serde_json::Value>(&path, body, None)
            .await
            .map(|_| ())
            .map_err(|e| lost(e, &lease.job.job_id))
    }

    /// Runs `work` under the lease: from [`HOLD_RENEWAL_AFTER`] on, one
    /// held renewal after another (each held up to a third of the lease),
    /// so a cancel stops the job within milliseconds. When a renewal is
    /// refused or the deadline passes first, `work` is dropped (the
    /// caller's future must stop its processes when dropped) and
    /// [`ClientError::LeaseLost`] is returned.
    pub async fn run_leased<F: Future>(
        &self,
        lease: &mut Lease,
        work: F,
    ) -> Result<F::Output, ClientError> {
        tokio::pin!(work);
        let lease_ms = u64::try_from(lease.job.lease_ms).unwrap_or(0);
        let hold = Duration::from_millis(lease_ms / 3);
        let mut next = Instant::now() + HOLD_RENEWAL_AFTER.min(hold);
        loop {
            if Instant::now() >= lease.deadline {
                return Err(ClientError::LeaseLost {
                    job: lease.job.job_id.clone(),
                    cancelled: false,
                });
            }
            let deadline = lease.deadline;
            let mut copy = lease.clone();
            let renewal = async {
                tokio::time::sleep_until(next.into()).await;
                self.renew_held(&mut copy, hold).await
            };
            tokio::select! {
                out = &mut work => return Ok(out),
                _ = tokio::time::sleep_until(deadline.into()) => {
                    return Err(ClientError::LeaseLost { job: lease.job.job_id.clone(), cancelled: false });
                }
                r = renewal => match r {
                    Ok(()) => {
                        lease.deadline = copy.deadline;
                        next = Instant::now();
                    }
                    Err(e @ ClientError::LeaseLost { .. }) => return Err(e),
                    // A renewal that did not get through is tried again
                    // each second until the deadline.
                    Err(_) => next = Instant::now() + Duration::from_secs(1),
                },
            }
        }
    }
}

fn lost(e: ClientError, job: &str) -> ClientError {
    match e.refusal_code() {
        Some(code @ ("lease_lost" | "job_cancelled")) => ClientError::LeaseLost {
            job: job.to_string(),
            cancelled: code == "job_cancelled",
        },
        _ => e,
    }
}
