//! A proxy started on first use, so that a node process whose runs have no
//! egress never starts the proxy's runtime (its threads cost a run about a
//! millisecond), and a daemon starts it once for all its runs.

use std::net::SocketAddr;
#[cfg(target_os = "linux")]
use std::os::fd::OwnedFd;
use std::sync::Mutex;

use oz0_policy::net::Egress;

use crate::proxy::{Proxy, ProxyConfig, ProxyHandle};
#[cfg(unix)]
use crate::service::RunEgress;
use crate::service::{EgressService, Lease};
use crate::{EgressError, Token};

/// Why the proxy's configuration could not be made (e.g. the audit log
/// could not be opened): the maker's own error.
pub type ConfigError = Box<dyn std::error::Error + Send + Sync>;

/// Makes the proxy's configuration when the proxy first starts (e.g. opens
/// the audit log then); its error says why egress cannot be served.
pub type MakeConfig = Box<dyn Fn() -> Result<ProxyConfig, ConfigError> + Send + Sync>;

/// The node's egress proxy, started by the first run that has egress and
/// stopped when this is dropped.
pub struct LazyProxy {
    make: MakeConfig,
    running: Mutex<Option<ProxyHandle>>,
}

impl std::fmt::Debug for LazyProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyProxy").finish_non_exhaustive()
    }
}

impl LazyProxy {
    /// A proxy that starts with `make()`'s configuration when first used.
    pub fn new(make: MakeConfig) -> LazyProxy {
        LazyProxy {
            make,
            running: Mutex::new(None),
        }
    }

    /// A proxy that records every decision in the file `open()` opens when
    /// the proxy starts (so that a node process whose runs have no egress
    /// never makes the file), with the node's defaults otherwise. Past
    /// `max` bytes the file is opened again, and `open()` must then begin
    /// a new one (see [`crate::audit::FileSink::reopening`]).
    pub fn with_audit_file(
        open: impl Fn() -> Result<std::fs::File, ConfigError> + Send + Sync + 'static,
        max: u64,
    ) -> LazyProxy {
        let open = std::sync::Arc::new(open);
        LazyProxy::new(Box::new(move || {
            let open = open.clone();
            let sink = crate::audit::FileSink::reopening(Box::new(move || open()), max)?;
            Ok(ProxyConfig {
                audit: std::sync::Arc::new(sink),
                ..Default::default()
            })
        }))
    }

    /// Whether it has started.
    pub fn started(&self) -> bool {
        self.lock().is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<ProxyHandle>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&ProxyHandle) -> Result<T, EgressError>,
    ) -> Result<T, EgressError> {
        let mut running = self.lock();
        if running.is_none() {
            let config = (self.make)().map_err(|e| EgressError::Start(e.to_string()))?;
            *running = Some(Proxy::start(config)?);
        }
        match running.as_ref() {
            Some(p) => f(p),
            None => Err(EgressError::ShutDown),
        }
    }
}

impl EgressService for LazyProxy {
    #[cfg(target_os = "linux")]
    fn open_channel(
        &self,
        run_id: String,
        token: Token,
        egress: Egress,
    ) -> Result<(Lease, OwnedFd), EgressError> {
        self.with(|p| p.open_channel(run_id, token, egress))
    }

    #[cfg(unix)]
    fn open_socket(&self, run: RunEgress) -> Result<Lease, EgressError> {
        self.with(|p| p.open_socket(run))
    }

    fn open_tcp(
        &self,
        run_id: String,
        token: Token,
        egress: Egress,
        bind: SocketAddr,
    ) -> Result<(Lease, SocketAddr), EgressError> {
        self.with(|p| p.open_tcp(run_id, token, egress, bind))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn starts_once_on_first_use_and_says_why_it_cannot() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let made = Arc::new(AtomicUsize::new(0));
        let counter = made.clone();
        let lazy = LazyProxy::new(Box::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(ProxyConfig::default())
        }));
        assert!(!lazy.started());
        let egress = Egress::parse(&["example.com:443".to_string()], &[]).unwrap();
        let a = lazy
            .open_channel("a".into(), Token::generate().unwrap(), egress.clone())
            .unwrap();
        let b = lazy
            .open_channel("b".into(), Token::generate().unwrap(), egress.clone())
            .unwrap();
        assert!(lazy.started());
        assert_eq!(made.load(Ordering::SeqCst), 1, "one proxy for both runs");
        drop((a, b));

        let broken = LazyProxy::new(Box::new(|| Err("the audit log is not writable".into())));
        let err = broken
            .open_channel("c".into(), Token::generate().unwrap(), egress)
            .unwrap_err();
        assert!(err.to_string().contains("audit log"), "{err}");
        assert!(!broken.started());
    }

    /// The portable door starts the proxy too, and hands back the bound
    /// loopback address.
    #[test]
    fn a_tcp_run_starts_the_proxy_on_first_use() {
        let lazy = LazyProxy::new(Box::new(|| Ok(ProxyConfig::default())));
        assert!(!lazy.started());
        let egress = Egress::parse(&["example.com:443".to_string()], &[]).unwrap();
        let (lease, addr) = lazy
            .open_tcp(
                "t".into(),
                Token::generate().unwrap(),
                egress,
                "127.0.0.1:0".parse().unwrap(),
            )
            .unwrap();
        assert!(lazy.started());
        assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");
        drop(lease);
    }
}
