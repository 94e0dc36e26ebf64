//! The library a node daemon (and the `oz0` CLI) uses to talk to the edge.
//!
//! ```no_run
//! # async fn run() -> Result<(), oz0_edge::client::ClientError> {
//! use oz0_edge::client::{NodeClient, NodeKey};
//! # let facts: oz0_policy::facts::NodeFacts = unimplemented!();
//! let key = NodeKey::load_or_create("/var/lib/oz0-node/identity/node.key".as_ref())?;
//! let edge = NodeClient::new("http://127.0.0.1:8440", "acme", key)?;
//! edge.register("the tenant's enrolment token", Some("build-01")).await?;
//! let view = edge.report_facts(&facts).await?; // the edge's routed tier: view.tier_routed
//! for tier in (0..=view.tier_routed).rev() {
//!     if let Some(mut lease) = edge.poll_job(tier).await? {
//!         let work = async { /* run lease.job.payload; kill it when dropped */ (true, Some(0)) };
//!         match edge.run_leased(&mut lease, work).await {
//!             Ok((ok, code)) => edge.complete_job(&lease, ok, code).await?,
//!             Err(e) => eprintln!("job stopped: {e}"),
//!         }
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! Leases: [`Lease::deadline`] is computed from the moment the poll was
//! *sent*, less [`LEASE_MARGIN_DIVISOR`]th of the lease, so it is never later
//! than the edge's expiry. A node must stop a job by its deadline unless a
//! renewal succeeded; [`NodeClient::run_leased`] does that for a future.

mod key;
mod node;
mod operator;

use std::path::PathBuf;

use serde::de::DeserializeOwned;

use crate::http;
pub use crate::http::{CertsError, Trust};
use crate::wire::ApiError;
pub use key::NodeKey;
pub use node::{Lease, NodeClient, Polled, HOLD_RENEWAL_AFTER};
pub use operator::{raw_request, raw_request_with, OperatorClient};

/// How a job ended, as a node reports it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Completion {
    /// Whether it succeeded.
    pub succeeded: bool,
    /// Its exit status, when it has one.
    pub exit_code: Option<i32>,
    /// A tool job's result (at most [`crate::MAX_RESULT_BYTES`] of JSON).
    pub result: Option<serde_json::Value>,
    /// Why it failed (at most [`crate::MAX_ERROR_BYTES`]).
    pub error: Option<String>,
    /// The end of its stdout (at most [`crate::MAX_TAIL_BYTES`]).
    pub stdout_tail: Option<String>,
    /// The end of its stderr (at most [`crate::MAX_TAIL_BYTES`]).
    pub stderr_tail: Option<String>,
    /// Bytes it wrote to stdout in all.
    pub stdout_bytes: Option<u64>,
    /// Bytes it wrote to stderr in all.
    pub stderr_bytes: Option<u64>,
    /// What the node's look after the run found.
    pub look: Option<crate::wire::JobLook>,
}

/// The node's deadline is the lease less this fraction of it (clock rate
/// differences, edge replicas' clocks): `lease_ms / 10`.
pub const LEASE_MARGIN_DIVISOR: i64 = 10;

/// A client failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Not an edge URL.
    #[error("edge URL {0:?} is not one the client opens: use https://HOST[:PORT] (or http:// on loopback)")]
    Url(String),
    /// Plain HTTP to a host that is not this machine's loopback.
    #[error("edge URL {0:?} is plain HTTP off loopback, where tokens, jobs and their secrets would cross the network in clear: use https:// (the edge serves TLS with --tls-cert and --tls-key)")]
    PlainOffLoopback(String),
    /// TLS could not be set up, or the handshake failed.
    #[error("TLS: {0}")]
    Tls(String),
    /// The edge's certificate did not verify (an unknown issuer, expired,
    /// for another name): trying again does not help until it, or what
    /// the client trusts, changes.
    #[error("TLS: {0}")]
    Certificate(String),
    /// Could not connect.
    #[error("cannot connect to the edge at {edge}: {source} (is oz0-edge running there?)")]
    Connect {
        /// The edge.
        edge: String,
        /// Why.
        source: std::io::Error,
    },
    /// HTTP failed.
    #[error("HTTP exchange with the edge failed: {0}")]
    Http(String),
    /// Timed out.
    #[error("the edge at {edge} did not answer within {:?}", http::REQUEST_TIMEOUT)]
    Timeout {
        /// The edge.
        edge: String,
    },
    /// The edge refused the request, with its reason.
    #[error("the edge refused ({status} {}): {}", refusal.error, refusal.reason)]
    Refused {
        /// HTTP status.
        status: u16,
        /// The edge's code and reason.
        refusal: ApiError,
    },
    /// The lease is gone: the job must stop.
    #[error("{}", if *cancelled { format!("job {job} was cancelled by an operator: stop the job") } else { format!("the lease on job {job} is lost (expired or taken): stop the job") })]
    LeaseLost {
        /// The job.
        job: String,
        /// An operator cancelled it (rather than the lease lapsing).
        cancelled: bool,
    },
    /// The edge answered something unexpected.
    #[error("the edge's answer (status {status}) does not parse: {detail}")]
    Response {
        /// HTTP status.
        status: u16,
        /// Why.
        detail: String,
    },
    /// Key file I/O.
    #[error("node key {path}: {source}")]
    KeyFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Key file readable by others.
    #[error("node key {path} has mode {mode:o}, readable or writable by others: chmod 600 it (and 700 its folder)")]
    KeyPermissions {
        /// The file.
        path: PathBuf,
        /// Its mode.
        mode: u32,
    },
    /// Key file malformed.
    #[error("node key {path} is not an oz0 node key: move it aside and a new key is made (the node then registers again)")]
    KeyFormat {
        /// The file.
        path: PathBuf,
    },
}

impl ClientError {
    /// Whether trying again cannot help until a setting changes: the
    /// edge's certificate does not verify.
    pub fn is_permanent(&self) -> bool {
        matches!(self, ClientError::Certificate(_))
    }

    /// The edge's refusal code, when the edge refused.
    pub fn refusal_code(&self) -> Option<&str> {
        match self {
            ClientError::Refused { refusal, .. } => Some(&refusal.error),
            _ => None,
        }
    }
}

fn decode<T: DeserializeOwned>(status: u16, body: &[u8]) -> Result<T, ClientError> {
    if (200..300).contains(&status) {
        serde_json::from_slice(body).map_err(|e| ClientError::Response {
            status,
            detail: e.to_string(),
        })
    } else {
        let mut refusal: ApiError = serde_json::from_slice(body).unwrap_or_else(|_| ApiError {
            status,
            error: "http".into(),
            reason: format!("HTTP {status} without the edge's error body"),
        });
        refusal.status = status;
        Err(ClientError::Refused { status, refusal })
    }
}
