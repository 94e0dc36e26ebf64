//! The proxy: one tokio runtime for the node, one unix socket, channel or
//! loopback TCP listener per run.
//!
//! This module owns the proxy's configuration (its bounds and deadlines and
//! the seams it is built with); the work is split by responsibility:
//!
//! - `handle`: starting the runtime, adding runs (a socket file or a
//!   channel on unix, a loopback TCP listener anywhere) and the guards that
//!   end them.
//! - `accept`: a run's accept loop (one, generic over the listener), the
//!   loop over a channel, the bridge's descriptor hand-over and the
//!   connection limits.
//! - `request`: one client connection and each request on it: the token,
//!   the policy, the lookup and address check, then a tunnel or a forward.
//! - `message`: what the proxy reads from and rewrites in a request (head
//!   size, target, hop-by-hop headers).
//! - `tunnel`: dialling an upstream and carrying a `CONNECT` tunnel's bytes.
//! - `body`: the proxy's response bodies and the metered, idle-limited
//!   bodies of plain-HTTP exchanges.

mod accept;
mod body;
mod handle;
mod message;
mod request;
mod tunnel;

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;

use crate::audit::{AuditSink, StderrSink};
use crate::resolve::{Resolver, SystemResolver};

pub use handle::{Proxy, ProxyHandle, RunGuard};

/// Errors inside bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ProxyBody = BoxBody<Bytes, BoxError>;

/// Largest request head (request line and headers) the proxy accepts with
/// a 400 beyond it. Heads larger than [`PARSE_BUFFER`] never reach the proxy's
/// code: the HTTP parser answers 431 itself.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// The HTTP parser's read buffer, an upper bound on any request head.
pub const PARSE_BUFFER: usize = 64 * 1024;
/// Most headers in a request.
pub const MAX_HEADERS: usize = 100;
/// Most addresses of a name tried when dialling.
pub const MAX_DIAL_ADDRS: usize = 4;

/// Bounds and deadlines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyLimits {
    /// Connections open at once across all runs; more wait to be accepted.
    pub max_connections: usize,
    /// Connections open at once for one run.
    pub max_connections_per_run: usize,
    /// See [`MAX_HEAD_BYTES`].
    pub max_head_bytes: usize,
    /// Time a client has to send a whole request head (also closes idle
    /// keep-alive connections).
    pub header_timeout: Duration,
    /// Time to resolve a name.
    pub resolve_timeout: Duration,
    /// Time to connect to one address.
    pub connect_timeout: Duration,
    /// A tunnel or a streamed body with no bytes either way for this long
    /// is closed; also the wait for an upstream's response head.
    pub idle_timeout: Duration,
}

impl Default for ProxyLimits {
    fn default() -> Self {
        ProxyLimits {
            max_connections: 1024,
            max_connections_per_run: 256,
            max_head_bytes: MAX_HEAD_BYTES,
            header_timeout: Duration::from_secs(30),
            resolve_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
        }
    }
}

/// How the proxy is built. `Default` is what the node uses: the system
/// resolver, records on stderr, the node's interface addresses read per run
/// (on Linux; see `own_addrs`).
pub struct ProxyConfig {
    /// Resolves allowed names.
    pub resolver: Arc<dyn Resolver>,
    /// Receives every decision.
    pub audit: Arc<dyn AuditSink>,
    /// The node's own addresses, refused as targets of names; `None` reads
    /// them from `/proc` when each run is added ([`own_addresses`]). Off
    /// Linux `None` finds none: the address-class checks (loopback,
    /// private, link-local, unique-local, CGNAT, metadata, multicast,
    /// broadcast, reserved) still refuse those addresses, but a public
    /// address on one of the node's interfaces is refused only if it is
    /// listed here.
    ///
    /// [`own_addresses`]: crate::resolve::own_addresses
    pub own_addrs: Option<Vec<IpAddr>>,
    /// Bounds and deadlines.
    pub limits: ProxyLimits,
    /// Runtime worker threads.
    pub worker_threads: usize,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            resolver: Arc::new(SystemResolver),
            audit: Arc::new(StderrSink),
            own_addrs: None,
            limits: ProxyLimits::default(),
            worker_threads: 2,
        }
    }
}

impl fmt::Debug for ProxyConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyConfig")
            .field("own_addrs", &self.own_addrs)
            .field("limits", &self.limits)
            .field("worker_threads", &self.worker_threads)
            .finish_non_exhaustive()
    }
}
