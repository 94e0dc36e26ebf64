//! Starting the proxy and adding runs to it: [`Proxy`], the running
//! [`ProxyHandle`], each run's [`RunGuard`], and the state a run's
//! connections share.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
#[cfg(unix)]
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
#[cfg(unix)]
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
#[cfg(unix)]
use tokio::net::UnixListener;
#[cfg(target_os = "linux")]
use tokio::net::UnixStream;
use tokio::sync::{watch, Semaphore};

use oz0_policy::net::Egress;

use super::accept::accept_loop;
#[cfg(target_os = "linux")]
use super::accept::channel_loop;
use super::{ProxyConfig, ProxyLimits};
use crate::audit::AuditSink;
use crate::resolve::{own_addresses, Resolver};
#[cfg(unix)]
use crate::service::RunEgress;
use crate::service::{EgressService, Lease};
use crate::token::Token;
use crate::EgressError;

/// Starts the proxy.
#[derive(Debug)]
pub struct Proxy;

impl Proxy {
    /// Starts the proxy's runtime (its own threads; the caller stays
    /// synchronous). Runs are added with [`ProxyHandle::add_run_tcp`]
    /// (anywhere), `ProxyHandle::add_run` (unix) or
    /// `ProxyHandle::add_run_channel` (Linux).
    pub fn start(config: ProxyConfig) -> Result<ProxyHandle, EgressError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.worker_threads.max(1))
            .max_blocking_threads(64)
            .thread_name("oz0-egress")
            .enable_all()
            .build()
            .map_err(EgressError::Runtime)?;
        let shared = Arc::new(Shared {
            global: Arc::new(Semaphore::new(config.limits.max_connections.max(1))),
            large_buffers: Semaphore::new(crate::pump::LARGE_BUDGET),
            resolver: config.resolver,
            audit: config.audit,
            own_addrs: config.own_addrs,
            limits: config.limits,
        });
        Ok(ProxyHandle {
            rt: Some(rt),
            shared,
        })
    }
}

pub(super) struct Shared {
    pub(super) resolver: Arc<dyn Resolver>,
    pub(super) audit: Arc<dyn AuditSink>,
    pub(super) own_addrs: Option<Vec<IpAddr>>,
    pub(super) limits: ProxyLimits,
    pub(super) global: Arc<Semaphore>,
    /// Large tunnel buffers, shared by every tunnel (see `pump`).
    pub(super) large_buffers: Semaphore,
}

/// The running proxy. Dropping it (or [`ProxyHandle::shutdown`]) stops
/// every run's socket and connection.
pub struct ProxyHandle {
    rt: Option<tokio::runtime::Runtime>,
    shared: Arc<Shared>,
}

impl fmt::Debug for ProxyHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyHandle").finish_non_exhaustive()
    }
}

impl ProxyHandle {
    /// Creates the run's socket and serves it until the returned guard is
    /// dropped. A request on it must carry `run.token`; it opens only
    /// `run.egress`. Unix only; off Linux the socket takes HTTP only, never
    /// a bridge's descriptor hand-over (the bridge copies there).
    #[cfg(unix)]
    pub fn add_run(&self, run: RunEgress) -> Result<RunGuard, EgressError> {
        let rt = self.rt.as_ref().ok_or(EgressError::ShutDown)?;
        let path = run.socket_path.clone();
        let bind_err = |source| EgressError::Bind {
            path: path.clone(),
            source,
        };
        let std_listener = std::os::unix::net::UnixListener::bind(&path).map_err(bind_err)?;
        std_listener.set_nonblocking(true).map_err(bind_err)?;
        let ino = std::fs::metadata(&path).map(|m| (m.dev(), m.ino())).ok();
        let listener = {
            let _enter = rt.enter();
            UnixListener::from_std(std_listener).map_err(bind_err)?
        };
        let (close, closed) = watch::channel(false);
        let ctx = self.run_ctx(run.run_id.clone(), run.token, run.egress, closed);
        rt.spawn(accept_loop(listener, ctx, self.shared.clone()));
        Ok(RunGuard {
            run_id: run.run_id,
            endpoint: Endpoint::Socket { path, ino },
            close,
        })
    }

    /// Listens for the run on a new TCP socket at `bind`, and serves it
    /// until the returned guard is dropped, exactly as a run on a socket
    /// file is served: a request must carry `token`; it opens only
    /// `egress`. `bind` must be a loopback address (`127.0.0.1`, `[::1]`,
    /// any of `127.0.0.0/8`), else [`EgressError::NotLoopback`]; port 0
    /// picks a free port, which [`RunGuard::tcp_addr`] tells. This is the
    /// portable way to serve a run (on Windows tokio serves no unix
    /// sockets, and no descriptor can be handed over): any process on the
    /// node can connect to the listener, and the token alone admits the run.
    /// On Windows the listener is bound with `SO_EXCLUSIVEADDRUSE`, so no
    /// other process can bind the same port and take its connections.
    pub fn add_run_tcp(
        &self,
        run_id: String,
        token: Token,
        egress: Egress,
        bind: SocketAddr,
    ) -> Result<RunGuard, EgressError> {
        self.listen_tcp(run_id, token, egress, bind)
            .map(|(guard, _)| guard)
    }

    /// [`ProxyHandle::add_run_tcp`], and the address bound.
    fn listen_tcp(
        &self,
        run_id: String,
        token: Token,
        egress: Egress,
        bind: SocketAddr,
    ) -> Result<(RunGuard, SocketAddr), EgressError> {
        let rt = self.rt.as_ref().ok_or(EgressError::ShutDown)?;
        if !bind.ip().is_loopback() {
            return Err(EgressError::NotLoopback { addr: bind });
        }
        let bind_err = |source| EgressError::BindTcp { addr: bind, source };
        // On Windows, exclusive: no other process may bind the same port
        // with SO_REUSEADDR and take the run's connections (and tokens).
        #[cfg(windows)]
        let std_listener = oz0_windows::native::exclusive_listener(bind).map_err(bind_err)?;
        #[cfg(not(windows))]
        let std_listener = std::net::TcpListener::bind(bind).map_err(bind_err)?;
        let addr = std_listener.local_addr().map_err(bind_err)?;
        std_listener.set_nonblocking(true).map_err(bind_err)?;
        let listener = {
            let _enter = rt.enter();
            TcpListener::from_std(std_listener).map_err(bind_err)?
        };
        let (close, closed) = watch::channel(false);
        let ctx = self.run_ctx(run_id.clone(), token, egress, closed);
        rt.spawn(accept_loop(listener, ctx, self.shared.clone()));
        let guard = RunGuard {
            run_id,
            endpoint: Endpoint::Tcp(addr),
            close,
        };
        Ok((guard, addr))
    }

    /// Serves a run over a channel instead of a socket file: returns the
    /// run's guard and the other end of a connected unix socket pair, for
    /// the run's bridge. The bridge hands each connection it accepts over
    /// the channel (its TCP socket's descriptor, with one marker byte, see
    /// [`crate::bridge::serve_channel`]); nothing else is accepted on it. No
    /// file is made: nothing of the run names a path of the node's, and the
    /// bridge needs no unix socket of its own. Linux only (the hand-over
    /// checks the descriptor with Linux socket options).
    #[cfg(target_os = "linux")]
    pub fn add_run_channel(
        &self,
        run_id: String,
        token: Token,
        egress: Egress,
    ) -> Result<(RunGuard, std::os::fd::OwnedFd), EgressError> {
        let rt = self.rt.as_ref().ok_or(EgressError::ShutDown)?;
        let (ours, theirs) =
            std::os::unix::net::UnixStream::pair().map_err(EgressError::Channel)?;
        ours.set_nonblocking(true).map_err(EgressError::Channel)?;
        let stream = {
            let _enter = rt.enter();
            UnixStream::from_std(ours).map_err(EgressError::Channel)?
        };
        let (close, closed) = watch::channel(false);
        let ctx = self.run_ctx(run_id.clone(), token, egress, closed);
        rt.spawn(channel_loop(stream, ctx, self.shared.clone()));
        Ok((
            RunGuard {
                run_id,
                endpoint: Endpoint::Channel,
                close,
            },
            theirs.into(),
        ))
    }

    fn run_ctx(
        &self,
        run_id: String,
        token: Token,
        egress: Egress,
        closed: watch::Receiver<bool>,
    ) -> Arc<RunCtx> {
        Arc::new(RunCtx {
            run_id,
            token,
            egress,
            own: self.shared.own_addrs.clone().unwrap_or_else(own_addresses),
            closed,
            conns: Arc::new(Semaphore::new(
                self.shared.limits.max_connections_per_run.max(1),
            )),
        })
    }

    /// Stops every run and waits (briefly) for the proxy's threads.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(rt) = self.rt.take() {
            // Within another runtime (an async caller dropping the last
            // handle) a runtime may not wait for its threads: they are told
            // to stop and left to finish.
            if tokio::runtime::Handle::try_current().is_ok() {
                rt.shutdown_background();
            } else {
                rt.shutdown_timeout(Duration::from_secs(1));
            }
        }
    }
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

impl EgressService for ProxyHandle {
    #[cfg(target_os = "linux")]
    fn open_channel(
        &self,
        run_id: String,
        token: Token,
        egress: Egress,
    ) -> Result<(Lease, std::os::fd::OwnedFd), EgressError> {
        let (guard, theirs) = self.add_run_channel(run_id, token, egress)?;
        Ok((Lease::new(guard), theirs))
    }

    #[cfg(unix)]
    fn open_socket(&self, run: RunEgress) -> Result<Lease, EgressError> {
        self.add_run(run).map(Lease::new)
    }

    fn open_tcp(
        &self,
        run_id: String,
        token: Token,
        egress: Egress,
        bind: SocketAddr,
    ) -> Result<(Lease, SocketAddr), EgressError> {
        let (guard, addr) = self.listen_tcp(run_id, token, egress, bind)?;
        Ok((Lease::new(guard), addr))
    }
}

/// A run's socket, channel or listener. Dropping it closes the socket or
/// listener, ends the run's open connections and tunnels, and removes the
/// socket file. The proxy's runtime closes a listener moments after the
/// drop, not within it: a connection that arrives meanwhile is closed
/// unserved, the run having ended.
#[derive(Debug)]
pub struct RunGuard {
    run_id: String,
    endpoint: Endpoint,
    close: watch::Sender<bool>,
}

/// Where a run is served.
#[derive(Debug)]
enum Endpoint {
    /// A socket file, and its device and inode (removed on drop only if
    /// the file is still the one made).
    #[cfg(unix)]
    Socket {
        path: PathBuf,
        ino: Option<(u64, u64)>,
    },
    /// A channel: nothing to remove.
    #[cfg(target_os = "linux")]
    Channel,
    /// A TCP listener on loopback, at this address.
    Tcp(SocketAddr),
}

impl RunGuard {
    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The run's socket (bind-mount it into the run, and only that run);
    /// none for a run served over a channel or a TCP listener.
    pub fn socket_path(&self) -> Option<&Path> {
        match &self.endpoint {
            #[cfg(unix)]
            Endpoint::Socket { path, .. } => Some(path),
            #[cfg(target_os = "linux")]
            Endpoint::Channel => None,
            Endpoint::Tcp(_) => None,
        }
    }

    /// The address of the run's TCP listener (the bound port, when it was
    /// asked for with port 0); none for a run on a socket file or a
    /// channel.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        match self.endpoint {
            Endpoint::Tcp(addr) => Some(addr),
            #[cfg(unix)]
            Endpoint::Socket { .. } => None,
            #[cfg(target_os = "linux")]
            Endpoint::Channel => None,
        }
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        let _ = self.close.send(true);
        #[cfg(unix)]
        if let Endpoint::Socket { path, ino } = &self.endpoint {
            // Remove the file only if it is still ours.
            let same = std::fs::symlink_metadata(path)
                .map(|m| Some((m.dev(), m.ino())) == *ino)
                .unwrap_or(false);
            if same {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

pub(super) struct RunCtx {
    pub(super) run_id: String,
    pub(super) token: Token,
    pub(super) egress: Egress,
    pub(super) own: Vec<IpAddr>,
    pub(super) closed: watch::Receiver<bool>,
    pub(super) conns: Arc<Semaphore>,
}

pub(super) async fn wait_closed(rx: &mut watch::Receiver<bool>) {
    // An error means the guard is gone: closed too.
    let _ = rx.wait_for(|c| *c).await;
}
