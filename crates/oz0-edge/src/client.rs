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

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use ed25519_dalek::{Signer, SigningKey};
use oz0_policy::facts::NodeFacts;
use serde::de::DeserializeOwned;

use crate::auth;
pub use crate::http::Trust;
use crate::http::{self, EdgeUrl};
use crate::routing::JobRequest;
use crate::wire::{
    Accepted, ApiError, CompleteRequest, JobView, LeasedJobView, NodeView, PollRequest,
    PollResponse, RegisterRequest, Registered, RenewRequest, Renewed,
};

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
pub enum ClientError {
    /// Not an edge URL.
    #[error("edge URL {0:?} is not one the client opens: use https://HOST[:PORT] (or http:// on loopback)")]
    Url(String),
    /// Plain HTTP to a host that is not this machine's loopback.
    #[error("edge URL {0:?} is plain HTTP off loopback, where tokens, jobs and their secrets would cross the network in clear: use https:// (the edge serves TLS with --tls-cert and --tls-key)")]
    PlainOffLoopback(String),
    /// TLS could not be set up or did not verify.
    #[error("TLS: {0}")]
    Tls(String),
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
    #[error("the lease on job {job} is lost (expired or taken): stop the job")]
    LeaseLost {
        /// The job.
        job: String,
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
    /// The edge's refusal code, when the edge refused.
    pub fn refusal_code(&self) -> Option<&str> {
        match self {
            ClientError::Refused { refusal, .. } => Some(&refusal.error),
            _ => None,
        }
    }
}

const KEY_PREFIX: &str = "oz0-node-key-v1 ed25519 ";

/// The node's identity: an ed25519 key.
#[derive(Clone)]
pub struct NodeKey {
    signing: SigningKey,
    id: String,
}

impl std::fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NodeKey({})", self.id)
    }
}

impl NodeKey {
    /// A new random key (not saved).
    pub fn generate() -> NodeKey {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).expect("the OS random source failed");
        NodeKey::from_seed(seed)
    }

    fn from_seed(seed: [u8; 32]) -> NodeKey {
        let signing = SigningKey::from_bytes(&seed);
        let id = auth::node_id(&signing.verifying_key());
        NodeKey { signing, id }
    }

    /// A new key for the node this key is (the node keeps its id when
    /// its key is rotated).
    pub fn successor(&self) -> NodeKey {
        NodeKey {
            id: self.id.clone(),
            ..NodeKey::generate()
        }
    }

    /// The key file's text: the seed and, for a rotated key, the node's id.
    fn file_text(&self) -> String {
        let seed = B64.encode(self.signing.to_bytes());
        if self.id == auth::node_id(&self.signing.verifying_key()) {
            format!("{KEY_PREFIX}{seed}\n")
        } else {
            format!("{KEY_PREFIX}{seed} id={}\n", self.id)
        }
    }

    /// Replaces the key file at `path` with this key (written aside, 0600,
    /// then renamed into place).
    pub fn save(&self, path: &Path) -> Result<(), ClientError> {
        let kerr = |source| ClientError::KeyFile {
            path: path.to_path_buf(),
            source,
        };
        let tmp = path.with_extension(format!("tmp-{}", auth::random_id()));
        write_private(&tmp, self.file_text().as_bytes()).map_err(kerr)?;
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            kerr(e)
        })
    }

    /// Loads the key at `path`, or makes one there: the file mode 0600, its
    /// folder 0700. A key file others can read is refused.
    pub fn load_or_create(path: &Path) -> Result<NodeKey, ClientError> {
        let kerr = |source| ClientError::KeyFile {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent() {
            make_private_dir(dir).map_err(|source| ClientError::KeyFile {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        match std::fs::read_to_string(path) {
            Ok(text) => {
                check_private(path)?;
                let bad = || ClientError::KeyFormat {
                    path: path.to_path_buf(),
                };
                let body = text.trim_end().strip_prefix(KEY_PREFIX).ok_or_else(bad)?;
                let (seed, id) = match body.split_once(" id=") {
                    Some((s, id)) if auth::is_node_id(id) => (s, Some(id)),
                    Some(_) => return Err(bad()),
                    None => (body, None),
                };
                let seed: [u8; 32] = B64
                    .decode(seed)
                    .ok()
                    .and_then(|b| b.try_into().ok())
                    .ok_or_else(bad)?;
                let mut key = NodeKey::from_seed(seed);
                if let Some(id) = id {
                    key.id = id.to_string();
                }
                Ok(key)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = NodeKey::generate();
                let text = key.file_text();
                // Written aside, then linked into place: never a half-written key,
                // and a key another process made first wins.
                let tmp = path.with_extension(format!("tmp-{}", auth::random_id()));
                write_private(&tmp, text.as_bytes()).map_err(kerr)?;
                let linked = std::fs::hard_link(&tmp, path);
                let _ = std::fs::remove_file(&tmp);
                match linked {
                    Ok(()) => Ok(key),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        NodeKey::load_or_create(path)
                    }
                    Err(e) => Err(kerr(e)),
                }
            }
            Err(e) => Err(kerr(e)),
        }
    }

    /// The node id the edge knows this key by.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The public key, base64url.
    pub fn public_key(&self) -> String {
        auth::encode_key(&self.signing.verifying_key())
    }

    /// The headers that authenticate one request.
    pub fn sign(&self, method: &str, path: &str, body: &[u8]) -> Vec<(&'static str, String)> {
        let ts = crate::time::now_ms();
        let nonce = auth::random_id();
        let msg = auth::signed_message(method, path, &self.id, ts, &nonce, body);
        let sig = B64.encode(self.signing.sign(&msg).to_bytes());
        vec![
            (auth::H_NODE, self.id.clone()),
            (auth::H_TIMESTAMP, ts.to_string()),
            (auth::H_NONCE, nonce),
            (auth::H_SIGNATURE, sig),
        ]
    }
}

#[cfg(unix)]
fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let meta = std::fs::metadata(dir)?;
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

#[cfg(not(unix))]
fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    // The data directory's ACL is set by the node (only its user).
    std::fs::create_dir_all(dir)
}

#[cfg(unix)]
fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(data)?;
    f.sync_all()
}

#[cfg(not(unix))]
fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    f.write_all(data)?;
    f.sync_all()
}

#[cfg(unix)]
fn check_private(path: &Path) -> Result<(), ClientError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(|source| ClientError::KeyFile {
            path: path.to_path_buf(),
            source,
        })?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(ClientError::KeyPermissions {
            path: path.to_path_buf(),
            mode: mode & 0o7777,
        });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_path: &Path) -> Result<(), ClientError> {
    Ok(())
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

/// An operator's connection to the edge (the `oz0` CLI, tests).
#[derive(Debug, Clone)]
pub struct OperatorClient {
    edge: EdgeUrl,
    token: String,
}

impl OperatorClient {
    /// A client for `edge_url` with an operator token, trusting the
    /// system's CAs.
    pub fn new(edge_url: &str, token: &str) -> Result<OperatorClient, ClientError> {
        OperatorClient::with_trust(edge_url, token, &Trust::System)
    }

    /// As [`OperatorClient::new`], verifying the edge against `trust`.
    pub fn with_trust(
        edge_url: &str,
        token: &str,
        trust: &Trust,
    ) -> Result<OperatorClient, ClientError> {
        Ok(OperatorClient {
            edge: EdgeUrl::parse_with(edge_url, trust)?,
            token: token.to_string(),
        })
    }

    async fn call(
        &self,
        method: &str,
        path: &str,
        body: Vec<u8>,
    ) -> Result<(u16, bytes::Bytes), ClientError> {
        http::request(
            &self.edge,
            method,
            path,
            &[("authorization", format!("Bearer {}", self.token))],
            body,
        )
        .await
    }

    /// Nodes, of one tenant or all.
    pub async fn nodes(&self, tenant: Option<&str>) -> Result<Vec<NodeView>, ClientError> {
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self
                .node_page(tenant, after.as_deref(), Some(crate::MAX_PAGE))
                .await?;
            all.extend(page.nodes);
            match page.next {
                Some(n) => after = Some(n),
                None => return Ok(all),
            }
        }
    }

    /// One page of nodes (`after`: the previous page's `next`).
    pub async fn node_page(
        &self,
        tenant: Option<&str>,
        after: Option<&str>,
        limit: Option<i64>,
    ) -> Result<crate::wire::NodePage, ClientError> {
        let mut q = Vec::new();
        match tenant {
            Some(t) if crate::routing::is_tenant(t) => q.push(format!("tenant={t}")),
            Some(t) => return Err(ClientError::Url(format!("tenant {t:?}"))),
            None => {}
        }
        if let Some(a) = after {
            q.push(format!("after={}", query_value(a)?));
        }
        if let Some(l) = limit {
            q.push(format!("limit={l}"));
        }
        let (s, b) = self
            .call("GET", &format!("/v1/nodes?{}", q.join("&")), vec![])
            .await?;
        decode(s, &b)
    }

    /// One node, by id or name.
    pub async fn node(&self, id_or_name: &str) -> Result<NodeView, ClientError> {
        if !(auth::is_node_id(id_or_name) || crate::sanitize::is_node_name(id_or_name)) {
            return Err(ClientError::Refused {
                status: 404,
                refusal: ApiError {
                    status: 404,
                    error: "no_node".into(),
                    reason: "a node is named by its id (n + 24 hex digits) or its host name".into(),
                },
            });
        }
        let (s, b) = self
            .call("GET", &format!("/v1/nodes/{id_or_name}"), vec![])
            .await?;
        decode(s, &b)
    }

    /// Approves, drains, undrains or removes a node (`action`).
    pub async fn node_action(
        &self,
        id_or_name: &str,
        action: &str,
    ) -> Result<NodeView, ClientError> {
        if !(auth::is_node_id(id_or_name) || crate::sanitize::is_node_name(id_or_name)) {
            return Err(ClientError::Url(format!("node {id_or_name:?}")));
        }
        let (s, b) = self
            .call("POST", &format!("/v1/nodes/{id_or_name}/{action}"), vec![])
            .await?;
        decode(s, &b)
    }

    /// Submits a job; a refusal carries the edge's reason.
    pub async fn submit_job(
        &self,
        tenant: &str,
        job: &JobRequest,
    ) -> Result<Accepted, ClientError> {
        let (s, b) = self
            .call(
                "POST",
                &format!("/v1/tenants/{tenant}/jobs"),
                serde_json::to_vec(job).expect("serializes"),
            )
            .await?;
        decode(s, &b)
    }

    /// A job's state.
    pub async fn job(&self, tenant: &str, job_id: &str) -> Result<JobView, ClientError> {
        let (s, b) = self
            .call(
                "GET",
                &format!("/v1/tenants/{tenant}/jobs/{job_id}"),
                vec![],
            )
            .await?;
        decode(s, &b)
    }

    /// A page of a tenant's jobs, newest first (`before`: the previous
    /// page's `next`).
    pub async fn jobs(
        &self,
        tenant: &str,
        state: Option<&str>,
        before: Option<&str>,
        limit: Option<i64>,
    ) -> Result<crate::wire::JobPage, ClientError> {
        let mut q = Vec::new();
        if let Some(s) = state {
            q.push(format!("state={}", query_value(s)?));
        }
        if let Some(b) = before {
            q.push(format!("before={}", query_value(b)?));
        }
        if let Some(l) = limit {
            q.push(format!("limit={l}"));
        }
        let path = format!("/v1/tenants/{tenant}/jobs?{}", q.join("&"));
        let (s, b) = self.call("GET", &path, vec![]).await?;
        decode(s, &b)
    }

    /// A job's output tails.
    pub async fn job_logs(
        &self,
        tenant: &str,
        job_id: &str,
    ) -> Result<crate::wire::JobLogs, ClientError> {
        let (s, b) = self
            .call(
                "GET",
                &format!("/v1/tenants/{tenant}/jobs/{job_id}/logs"),
                vec![],
            )
            .await?;
        decode(s, &b)
    }

    /// Cancels a job that has not ended: a queued one is never handed out,
    /// a leased one's node stops it at its next renewal. Refused
    /// (`job_ended`) when it had already ended.
    pub async fn cancel_job(&self, tenant: &str, job_id: &str) -> Result<JobView, ClientError> {
        let (s, b) = self
            .call(
                "POST",
                &format!("/v1/tenants/{tenant}/jobs/{job_id}/cancel"),
                vec![],
            )
            .await?;
        decode(s, &b)
    }

    /// The Nodes page's HTML.
    pub async fn nodes_page(&self) -> Result<String, ClientError> {
        let (s, b) = self.call("GET", "/nodes", vec![]).await?;
        if s == 200 {
            Ok(String::from_utf8_lossy(&b).into_owned())
        } else {
            decode(s, &b)
        }
    }
}

/// A query value the client puts in a URL: letters, digits and `._-:`.
fn query_value(s: &str) -> Result<&str, ClientError> {
    if s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-:".contains(&b))
    {
        Ok(s)
    } else {
        Err(ClientError::Url(format!("query value {s:?}")))
    }
}

/// Sends one raw request (tests of refusals: forged signatures, replays).
pub async fn raw_request(
    edge_url: &str,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> Result<(u16, Vec<u8>), ClientError> {
    raw_request_with(edge_url, &Trust::System, method, path, headers, body).await
}

/// [`raw_request`], verifying the edge against `trust`.
pub async fn raw_request_with(
    edge_url: &str,
    trust: &Trust,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> Result<(u16, Vec<u8>), ClientError> {
    let url = EdgeUrl::parse_with(edge_url, trust)?;
    let (s, b) = http::request(&url, method, path, headers, body).await?;
    Ok((s, b.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn key_file_is_private_and_stable() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("oz0-edge-key-{}", auth::random_id()));
        let path = dir.join("identity").join("node.key");
        let a = NodeKey::load_or_create(&path).unwrap();
        let b = NodeKey::load_or_create(&path).unwrap();
        assert_eq!(a.id(), b.id());
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            std::fs::metadata(path.parent().unwrap())
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o700
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            NodeKey::load_or_create(&path),
            Err(ClientError::KeyPermissions { .. })
        ));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&path, "garbage").unwrap();
        assert!(matches!(
            NodeKey::load_or_create(&path),
            Err(ClientError::KeyFormat { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
