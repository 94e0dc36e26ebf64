//! The edge: the control plane that decides where work runs.
//!
//! It owns the node registry (each node's ed25519 public key, under one
//! tenant), signed fact reports, the edge's *sanitized* view of each node's
//! facts, routing by the tier a node **proved** (per-tier queues, label
//! matching, leases with expiry), the operator API behind `oz0 node show` and
//! `oz0 node list`, the server-rendered Nodes page, and [`client`], the library
//! a node daemon uses to talk to it.
//!
//! # Threat model
//!
//! - **Nodes are not trusted for words.** A node may be compromised or simply
//!   wrong. Everything it sends is parsed into [`oz0_policy::facts::NodeFacts`]
//!   (unknown fields refused), then [`sanitize`]d: a build, a version, a
//!   contract or a label is kept only when it matches a strict pattern or a
//!   closed set, and anything else is dropped and counted; a name that is
//!   not a host name is refused at registration, unechoed. Fixes are
//!   worded by the edge from the fix *kind*. No node-supplied prose reaches a
//!   page, the API or a log verbatim; the Nodes page escapes every value anyway
//!   and forbids scripts by its Content-Security-Policy. The one exception is
//!   a job's own output — a tool's result (bounded, whole or refused) and the
//!   reason a job failed (bounded, one line) — which the API returns as JSON
//!   data to the operator who asked for that job, and nowhere else.
//! - **A terminal is not driven by what it shows.** `oz0` escapes every
//!   text a job, a node or the edge controls ([`term`]): a job's output,
//!   names, lines, labels, reasons; control sequences appear as `\x1b[…`
//!   instead of acting (the clipboard, the title, lines above), unless the
//!   operator asks for the raw bytes (`--raw`). The node's log escapes what
//!   the edge says the same way.
//! - **A tool job is routed by its manifest.** The plugin's `oz0-plugin.yaml`
//!   travels in the job and is parsed here by the code the node runs it with
//!   (`oz0-plugin`); what the submitter says about isolation must match it.
//! - **The edge enforces the routing rule itself.** A node's routed tier is
//!   recomputed from its facts: tier 0 unless its self-test passed; Windows
//!   (PSEC, a preview) is routed at tier 0 whatever it claims; tier 2 needs a
//!   booted microVM. A node routed at tier 0 cannot poll the tier-1 queue.
//! - **Reports are authenticated.** Every node request is signed with the
//!   node's key over (method, path, node id, timestamp, nonce, body); forged
//!   signatures, unknown nodes, timestamps outside the skew window and
//!   replayed nonces are refused. Registration additionally needs the
//!   tenant's enrolment token. Tokens are compared as SHA-256 digests in
//!   constant time and never logged.
//! - **Work is never run twice at once.** A job is handed out under a lease;
//!   it is handed again only after that lease expired, and the old holder's
//!   renewals and completion are refused from then on. The client computes a
//!   local deadline that is never later than the edge's.
//! - **The network is hostile.** Off loopback the edge speaks only HTTPS
//!   (rustls) and its clients verify its certificate (the system's CAs or
//!   the operator's); plain HTTP is refused off loopback on both sides. A
//!   connection may hold the edge only so long: its headers within a
//!   deadline, its whole request within another, a bounded header block,
//!   and a cap on connections open at once ([`mod@serve`]).
//! - **A node is admitted, not just enrolled.** A tenant can give new nodes
//!   no work at all until an operator approves them (its enrolment token
//!   alone hands out no job and no secret); a removed node's key is
//!   refused for good; a key is replaced only on the old one's signature and
//!   the new one's proof; a name belongs to one node of a tenant.
//! - **Out of scope here:** a malicious database, and the confidentiality of
//!   the store's files from the edge's own user (the store is made 0600 and
//!   the edge runs with umask 077).

#[cfg(feature = "server")]
pub mod api;
pub mod auth;
pub mod client;
mod http;
#[cfg(feature = "server")]
pub mod log;
#[cfg(feature = "server")]
pub mod metrics;
#[cfg(feature = "server")]
pub mod page;
pub mod release;
pub mod routing;
pub mod sanitize;
#[cfg(feature = "server")]
pub mod serve;
#[cfg(feature = "server")]
pub mod store;
pub mod term;
pub mod time;
#[cfg(feature = "server")]
mod wake;
pub mod wire;

#[cfg(feature = "server")]
pub use api::{serve, serve_until, serve_with, Edge, EdgeConfig};
#[cfg(feature = "server")]
pub use store::Store;

/// Largest request body the edge reads (a facts report, a job, a poll).
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Largest facts report, signed body included.
pub const MAX_REPORT_BYTES: usize = 16 * 1024;
/// Largest job payload, as JSON text (a tool job's is
/// [`oz0_plugin::job::MAX_TOOL_JOB_BYTES`]).
pub const MAX_PAYLOAD_BYTES: usize = 32 * 1024;
/// Largest tool result a completion carries, as JSON text: the MCP
/// client's bound on one message of the server's.
pub const MAX_RESULT_BYTES: usize = oz0_plugin::mcp::MAX_LINE_BYTES;
/// Longest failure reason a completion carries.
pub const MAX_ERROR_BYTES: usize = 4096;
/// The most of each of a job's output streams the edge keeps: its end.
pub const MAX_TAIL_BYTES: usize = 64 * 1024;
/// Most findings, and most changed project files, of the look after a run
/// that a completion carries (the node says how many more there were).
pub const MAX_LOOK_ITEMS: usize = 100;
/// Most items one page of a list holds.
pub const MAX_PAGE: i64 = 500;
/// Largest body of the two routes that carry a tool job or its result
/// (a submission, a completion).
pub const MAX_LARGE_BODY_BYTES: usize = 2 * 1024 * 1024;
