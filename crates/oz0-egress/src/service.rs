//! The proxy as the synchronous crates see it: a service that takes a run
//! and hands back what the run needs to reach it, with a lease that ends
//! the run's egress when dropped.
//!
//! The launcher (`oz0-linux`) and the VM lifecycle (`oz0-microvm`) are
//! synchronous code: they depend on this trait, not on the proxy's async
//! runtime, and are built without it (this crate without its `proxy`
//! feature). The node binary gives them the real proxy
//! ([`crate::proxy::ProxyHandle`] or [`crate::LazyProxy`]).
//!
//! Channels are Linux only and socket files unix only; a loopback TCP
//! listener ([`EgressService::open_tcp`]) is served everywhere.

use std::net::SocketAddr;
#[cfg(target_os = "linux")]
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use oz0_policy::net::Egress;

use crate::{EgressError, Token};

/// One run's egress when it is served on a socket file (a VM's monitor
/// mounts the file into its guest). Unix only in use: a run on a loopback
/// TCP listener is given its id, token and policy alone
/// ([`EgressService::open_tcp`]).
#[derive(Debug, Clone)]
pub struct RunEgress {
    /// The run's id (in every audit record).
    pub run_id: String,
    /// The only token this socket accepts.
    pub token: Token,
    /// The run's policy.
    pub egress: Egress,
    /// Where to create the run's socket; must not exist yet.
    pub socket_path: PathBuf,
}

/// A run's place at the proxy. Dropping it closes the run's socket,
/// channel or listener, ends its connections and tunnels, and removes its
/// socket file.
pub struct Lease(#[allow(dead_code)] Box<dyn Send>);

impl Lease {
    /// A lease that ends when `guard` is dropped.
    pub fn new(guard: impl Send + 'static) -> Lease {
        Lease(Box::new(guard))
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lease")
    }
}

/// Serves runs' egress.
pub trait EgressService: Send + Sync {
    /// Serves a run over a channel: the lease, and the other end of a
    /// connected unix socket pair for the run's bridge (see
    /// [`crate::bridge::serve_channel`]). No file is made. Linux only.
    #[cfg(target_os = "linux")]
    fn open_channel(
        &self,
        run_id: String,
        token: Token,
        egress: Egress,
    ) -> Result<(Lease, OwnedFd), EgressError>;

    /// Serves a run on a new socket file at `run.socket_path`. Unix only.
    #[cfg(unix)]
    fn open_socket(&self, run: RunEgress) -> Result<Lease, EgressError>;

    /// Serves a run on a new TCP listener at `bind`, which must be a
    /// loopback address (port 0 picks a free port): the lease, and the
    /// address the listener is bound to (the run's proxy URL names it).
    /// Any process on the node can connect to it; the token is what admits
    /// only the run. Portable.
    fn open_tcp(
        &self,
        run_id: String,
        token: Token,
        egress: Egress,
        bind: SocketAddr,
    ) -> Result<(Lease, SocketAddr), EgressError>;
}
