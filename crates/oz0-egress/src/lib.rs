//! `oz0-egress` owns the only way out of a sandboxed run: the node's egress
//! proxy and the bridge that reaches it from inside the run.
//!
//! - [`service`]: the proxy as the synchronous crates see it (a trait),
//!   so that they are built without the async runtime (this crate without
//!   its default `proxy` feature is synchronous code only).
//! - `proxy` (feature `proxy`): HTTP proxy semantics (`CONNECT host:port` tunnels and
//!   absolute-form plain HTTP) for **one run per unix socket, channel or
//!   loopback TCP listener**, each knowing exactly one run's token and
//!   allowlist. A tier-1 run is served over a channel (a connected socket
//!   pair whose other end its bridge holds: no file); a VM's monitor over a
//!   socket file it mounts; a node without either (Windows) over a TCP
//!   listener on the node's loopback.
//! - [`token`]: the per-run secret (`Proxy-Authorization: Basic oz0:<token>`
//!   or `Bearer <token>`).
//! - `bridge` (unix): inside the run, a loopback TCP listener handing each
//!   connection to the proxy (std only, no parsing).
//! - [`reverse`] (its names portable, its work unix): the same route into a VM whose runtime carries only
//!   connections the host opens (Apple's container's `--publish-socket`):
//!   the guest's bridge takes the node's connections, the node carries
//!   each used one to the proxy.
//! - [`audit`]: one structured record per decision, never the token,
//!   written where no run can write ([`FileSink`]).
//! - [`resolve`]: the name-resolution seam and the node's own addresses.
//!
//! Platforms. Portable (Linux, macOS, Windows): the proxy's request
//! handling (token, policy, lookup and address checks, tunnels, plain-HTTP
//! forwarding, limits, audit), runs on a loopback TCP listener
//! (`ProxyHandle::add_run_tcp`, [`EgressService::open_tcp`]), tokens,
//! audit sinks and the resolver seam. Unix only (`cfg(unix)`): runs on a
//! socket file (`ProxyHandle::add_run`, `EgressService::open_socket`)
//! and the bridge. Linux only: runs over a channel
//! (`ProxyHandle::add_run_channel`), the bridge's descriptor hand-over
//! (`SCM_RIGHTS`, checked with Linux socket options) and `splice(2)`; on
//! other unixes a socket file takes HTTP only and the bridge copies. The
//! node's own addresses are read from `/proc` on Linux only; elsewhere the
//! address-class checks alone guard the node (see
//! [`resolve::own_addresses`]).
//!
//! Threat model. Everything arriving on a run's socket is hostile: the
//! command may send malformed or oversized requests, guess or replay tokens,
//! spell hosts in odd ways, or aim names at the node's loopback, the LAN or a
//! cloud metadata service. The proxy therefore (1) checks the run's token,
//! in constant time, before looking at anything else (407); (2) canonicalises
//! the target with the same code that validated `--allow` and refuses what no
//! rule names (403), names under `.invalid` before any lookup; (3) resolves an
//! allowed name once, refuses loopback, private, link-local, unique-local,
//! CGNAT, metadata, multicast, broadcast, reserved and the node's own
//! addresses unless the run named that address itself, and dials exactly an
//! address it checked; (4) answers malformed requests with 400 and never
//! panics on input; (5) bounds connections, head sizes and every wait. A
//! token opens only its own socket's run: another run's token is as wrong as
//! none. A run's loopback TCP listener, unlike its socket file or channel,
//! can be reached by every process on the node: there the token alone
//! tells the run's connections from any other process's, so it must reach
//! only the run. Node-local services are reachable only on `--forward`ed
//! ports of `127.0.0.1`. The bridge is trusted code running inside the
//! sandbox; it holds no secret and makes no decision.

pub mod audit;
#[cfg(unix)]
pub mod bridge;
#[cfg(feature = "proxy")]
mod lazy;
#[cfg(feature = "proxy")]
pub mod proxy;
#[cfg(feature = "proxy")]
mod pump;
pub mod resolve;
pub mod reverse;
pub mod service;
pub mod token;

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

pub use audit::{AuditRecord, AuditSink, Decision, FileSink, StderrSink, AUDIT_LOG_NAME};
#[cfg(feature = "proxy")]
pub use lazy::{ConfigError, LazyProxy, MakeConfig};
#[cfg(feature = "proxy")]
pub use proxy::{Proxy, ProxyConfig, ProxyHandle, ProxyLimits, RunGuard};
pub use resolve::{Resolver, SystemResolver};
pub use service::{EgressService, Lease, RunEgress};
pub use token::Token;

/// Why the proxy could not do what it was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EgressError {
    /// The runtime did not start.
    #[error("could not start the egress proxy's runtime: {0}")]
    Runtime(#[source] io::Error),
    /// A run's socket could not be created.
    #[error("could not listen on {}: {source}: remove the stale socket or choose another path", path.display())]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A run's loopback TCP listener could not be made.
    #[error("could not listen on {addr}: {source}: choose another port (port 0 picks a free one)")]
    BindTcp {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        source: io::Error,
    },
    /// A run's TCP listener was asked for on an address other than loopback.
    #[error("a run's egress listener must be on loopback, not {addr}: bind it to 127.0.0.1 or [::1] (port 0 picks a free one)")]
    NotLoopback {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The OS CSPRNG failed.
    #[error("the OS random number generator failed: {0}")]
    Random(String),
    /// A token of the wrong shape.
    #[error("a proxy token is 64 lowercase hex digits")]
    BadToken,
    /// A run's channel could not be made.
    #[error("could not make the run's egress channel: {0}")]
    Channel(#[source] io::Error),
    /// The proxy could not be configured when it first started.
    #[error("the egress proxy could not start: {0}")]
    Start(String),
    /// The proxy was shut down.
    #[error("the egress proxy has shut down: start it again")]
    ShutDown,
}
