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
    CompleteRequest, LeasedJobView, NodeView, PollRequest, PollResponse, RegisterRequest,
    Registered, RenewRequest, Renewed,
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
        let sent = Instant::now();
        let r: PollResponse = self
            .signed(
                "/v1/node/poll",
                serde_json::to_vec(&PollRequest { tier }).expect("serializes"),
                None,
            )
            .await?;
        let lease = r.job.map(|j| {
            let ms = j.lease_ms;
            Lease::new(j, sent, ms)
        });
        Ok((lease, r.tier_routed))
    }

    /// Renews a lease; [`ClientError::LeaseLost`] when it is gone.
    pub async fn renew_lease(&self, lease: &mut Lease) -> Result<(), ClientError> {
        let sent = Instant::now();
        let path = format!("/v1/node/jobs/{}/renew", lease.job.job_id);
        let body = serde_json::to_vec(&RenewRequest {
            lease_id: lease.job.lease_id.clone(),
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

    /// Runs `work` while renewing the lease every third of it. When a
    /// renewal is refused or the deadline passes first, `work` is dropped
    /// (the caller's future must stop its processes when dropped) and
    /// [`ClientError::LeaseLost`] is returned.
    pub async fn run_leased<F: Future>(
        &self,
        lease: &mut Lease,
        work: F,
    ) -> Result<F::Output, ClientError> {
        tokio::pin!(work);
        loop {
            let now = Instant::now();
            if now >= lease.deadline {
                return Err(ClientError::LeaseLost {
                    job: lease.job.job_id.clone(),
                });
            }
            let renew_at = now + (lease.deadline - now) / 3;
            tokio::select! {
                out = &mut work => return Ok(out),
                _ = tokio::time::sleep_until(lease.deadline.into()) => {
                    return Err(ClientError::LeaseLost { job: lease.job.job_id.clone() });
                }
                _ = tokio::time::sleep_until(renew_at.into()) => {
                    match self.renew_lease(lease).await {
                        Ok(()) => {}
                        Err(e @ ClientError::LeaseLost { .. }) => return Err(e),
                        // A renewal that did not get through is retried until the deadline.
                        Err(_) => {}
                    }
                }
            }
        }
    }
}

fn lost(e: ClientError, job: &str) -> ClientError {
    match e.refusal_code() {
        Some("lease_lost") => ClientError::LeaseLost {
            job: job.to_string(),
        },
        _ => e,
    }
}
