//! Serving the API on a listener a hostile network can reach: TLS (rustls,
//! its certificate reloaded on demand), a cap on open connections, a
//! deadline for each request's headers and for each whole request, and a
//! bound on the header block.
//!
//! A connection over the cap is closed at once (the edge keeps answering
//! the others); a client that sends its headers slowly, or none, is
//! dropped after [`Limits::header_timeout`] (idle keep-alive connections
//! too); a request that takes longer than [`Limits::request_timeout`] to be
//! sent and answered gets 408; a header block over
//! [`Limits::max_header_bytes`] gets 431.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use axum::response::IntoResponse;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::pki_types::{pem::PemObject, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::wire::ApiError;

/// What a connection may take.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Time for a request's header block (and for the next request's on a
    /// kept-alive connection).
    pub header_timeout: Duration,
    /// Time for a whole request: its body read and its answer made.
    pub request_timeout: Duration,
    /// Size of the header block.
    pub max_header_bytes: usize,
    /// Time for a TLS handshake.
    pub handshake_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 4096,
            header_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_header_bytes: 16 * 1024,
            handshake_timeout: Duration::from_secs(10),
        }
    }
}

/// The edge's certificate and key, from PEM files, loaded again on
/// [`ServerCert::reload`] (SIGHUP) without dropping a connection.
#[derive(Debug)]
pub struct ServerCert {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
}

fn load(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, String> {
    let chain =
        crate::http::read_certs(cert).map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?;
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        format!(
            "--tls-key {}: {e} (a PEM private key: PKCS#8, PKCS#1 or SEC1)",
            key.display()
        )
    })?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key_der)
        .map_err(|e| format!("--tls-key {}: {e}", key.display()))?;
    let ck = CertifiedKey::new(chain, signing);
    ck.keys_match().map_err(|e| {
        format!(
            "--tls-key {} is not the key of --tls-cert {}: {e}",
            key.display(),
            cert.display()
        )
    })?;
    Ok(Arc::new(ck))
}

impl ServerCert {
    /// Loads the certificate chain and its key.
    pub fn load(cert: &Path, key: &Path) -> Result<Arc<ServerCert>, String> {
        Ok(Arc::new(ServerCert {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            current: RwLock::new(load(cert, key)?),
        }))
    }

    /// Loads the files again; on an error the current ones stay.
    pub fn reload(&self) -> Result<(), String> {
        let next = load(&self.cert, &self.key)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = next;
        Ok(())
    }

    /// The TLS server configuration that presents this certificate.
    pub fn config(self: &Arc<Self>) -> Result<Arc<rustls::ServerConfig>, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(cfg))
    }
}

impl ResolvesServerCert for ServerCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        )
    }
}

/// Serves `router` on `listener` until the task is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: Limits,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let mut refused: u64 = 0;
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            // Out of descriptors and the like: the listener itself is fine.
            Err(e) => {
                crate::log::warn(&format!("accepting a connection: {e}"), None);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            refused += 1;
            if refused.is_power_of_two() {
                crate::log::warn(
                    &format!(
                        "{} connection(s) refused: over the cap of {} open at once",
                        refused, limits.max_connections
                    ),
                    Some(peer),
                );
            }
            drop(tcp);
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let (router, acceptor) = (router.clone(), acceptor.clone());
        tokio::spawn(async move {
            match acceptor {
                None => connection(tcp, peer, router, limits).await,
                Some(a) => {
                    match tokio::time::timeout(limits.handshake_timeout, a.accept(tcp)).await {
                        Ok(Ok(tls)) => connection(tls, peer, router, limits).await,
                        Ok(Err(e)) => {
                            crate::log::info(&format!("TLS handshake failed: {e}"), Some(peer))
                        }
                        Err(_) => crate::log::info("TLS handshake timed out", Some(peer)),
                    }
                }
            }
            drop(slot);
        });
    }
}

async fn connection<S>(stream: S, peer: SocketAddr, router: Router, limits: Limits)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        let router = router.clone();
        async move {
            let answer = tokio::time::timeout(
                limits.request_timeout,
                router.oneshot(req.map(axum::body::Body::new)),
            )
            .await;
            Ok::<_, Infallible>(match answer {
                Ok(Ok(r)) => r,
                Ok(Err(never)) => match never {},
                Err(_) => ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "timeout",
                    format!(
                        "the request was not sent and answered within {} s",
                        limits.request_timeout.as_secs()
                    ),
                )
                .into_response(),
            })
        }
    });
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192))
        .keep_alive(true);
    if let Err(e) = b.serve_connection(TokioIo::new(stream), svc).await {
        if e.is_parse_too_large() {
            crate::log::info("request header block over the bound: 431", Some(peer));
        }
    }
}
