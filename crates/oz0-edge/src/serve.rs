//! Serving the API on a listener a hostile network can reach: TLS (rustls,
//! its certificate reloaded on demand), caps on open connections, a
//! deadline for each request's headers and for each whole request, and a
//! bound on the header block.
//!
//! A connection is admitted or closed as it is accepted, before TLS and
//! before anything is read (see [`slots`]): at most
//! [`Limits::max_connections`] open at once, at most
//! [`Limits::max_connections_per_client`] from one client address, and
//! [`Limits::reserve`] of them kept for addresses a node's signature or an
//! operator's token came from; the edge keeps answering the others. A
//! client that sends its headers slowly, or none, is dropped after
//! [`Limits::header_timeout`] (idle keep-alive connections too); a request
//! that takes longer than [`Limits::request_timeout`] to be sent and
//! answered gets 408; a header block over [`Limits::max_header_bytes`]
//! gets 431. Events that come in floods (refused connections, failed
//! accepts, TLS handshakes that fail) are logged through
//! [`crate::log::Tally`].

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
use tower::ServiceExt;

use crate::log::{Level, Tally};
use crate::wire::ApiError;

pub mod open_files;
pub mod slots;

/// What a connection may take.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections open at once from one client: an IPv4 address or an
    /// IPv6 /64 (loopback too).
    pub max_connections_per_client: usize,
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
            max_connections: 16384,
            max_connections_per_client: 64,
            header_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_header_bytes: 16 * 1024,
            handshake_timeout: Duration::from_secs(10),
        }
    }
}

impl Limits {
    /// The slots kept for known addresses: an eighth of the cap.
    pub fn reserve(&self) -> usize {
        self.max_connections / 8
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

/// Why the edge's certificate and key cannot be served; each names the
/// file and the flag.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CertError {
    /// The certificate file cannot be read or holds none.
    #[error("--tls-cert {}: {err}", path.display())]
    Cert {
        /// The file.
        path: PathBuf,
        /// Why.
        err: crate::client::CertsError,
    },
    /// The key file cannot be read or holds no private key.
    #[error("--tls-key {}: {err} (a PEM private key: PKCS#8, PKCS#1 or SEC1)", path.display())]
    Key {
        /// The file.
        path: PathBuf,
        /// Why.
        err: rustls::pki_types::pem::Error,
    },
    /// A key of a kind TLS cannot sign with.
    #[error("--tls-key {}: {err}", path.display())]
    KeyType {
        /// The file.
        path: PathBuf,
        /// Why.
        err: rustls::Error,
    },
    /// The certificate is not X.509 v3 (a v1 certificate has no
    /// extensions: no host names a client can check).
    #[error("--tls-cert {}: an X.509 v{version} certificate; TLS needs v3, with the edge's host names in subjectAltName: make a v3 one (e.g. openssl req -x509 -addext \"subjectAltName=DNS:edge.example\" …, or openssl x509 -req … -extfile with a subjectAltName line)", path.display())]
    Version {
        /// The file.
        path: PathBuf,
        /// Its version (1 or 2).
        version: u8,
    },
    /// The certificate's public key cannot be read.
    #[error("--tls-cert {}: its public key cannot be read, so --tls-key {} cannot be matched with it: {err} (is it an X.509 v3 certificate in PEM?)", cert.display(), key.display())]
    Unreadable {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why.
        err: rustls::Error,
    },
    /// The key is not the certificate's.
    #[error("--tls-key {} is not the key of --tls-cert {}: {err}", key.display(), cert.display())]
    Mismatch {
        /// The key file.
        key: PathBuf,
        /// The certificate file.
        cert: PathBuf,
        /// Why.
        err: rustls::Error,
    },
    /// The TLS library offers no protocol version.
    #[error("{0}")]
    Config(rustls::Error),
}

fn load(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, CertError> {
    let chain = crate::http::read_certs(cert).map_err(|err| CertError::Cert {
        path: cert.to_path_buf(),
        err,
    })?;
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|err| CertError::Key {
        path: key.to_path_buf(),
        err,
    })?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key_der).map_err(|err| {
        CertError::KeyType {
            path: key.to_path_buf(),
            err,
        }
    })?;
    if let Some(version) = x509_version(&chain[0]).filter(|v| *v < 3) {
        return Err(CertError::Version {
            path: cert.to_path_buf(),
            version,
        });
    }
    let ck = CertifiedKey::new(chain, signing);
    ck.keys_match().map_err(|err| match err {
        rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => {
            CertError::Mismatch {
                key: key.to_path_buf(),
                cert: cert.to_path_buf(),
                err,
            }
        }
        err => CertError::Unreadable {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            err,
        },
    })?;
    Ok(Arc::new(ck))
}

/// A DER certificate's X.509 version (1, 2 or 3), read from the start of
/// its `tbsCertificate`; `None` when it does not parse that far.
fn x509_version(der: &[u8]) -> Option<u8> {
    /// The content of the DER element at the start of `b` with tag `tag`,
    /// and what follows it.
    fn element(b: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
        let (&t, rest) = b.split_first()?;
        if t != tag {
            return None;
        }
        let (&l, rest) = rest.split_first()?;
        let (len, rest) = if l < 0x80 {
            (usize::from(l), rest)
        } else {
            let n = usize::from(l & 0x7f);
            if n == 0 || n > 4 || rest.len() < n {
                return None;
            }
            let len = rest[..n]
                .iter()
                .fold(0usize, |a, b| (a << 8) | usize::from(*b));
            (len, &rest[n..])
        };
        (rest.len() >= len).then(|| rest.split_at(len))
    }
    let (cert, _) = element(der, 0x30)?;
    let (tbs, _) = element(cert, 0x30)?;
    // `[0] EXPLICIT Version DEFAULT v1`: absent means v1.
    let Some((explicit, _)) = element(tbs, 0xa0) else {
        return Some(1);
    };
    let (v, _) = element(explicit, 0x02)?;
    match v {
        [n] if *n < 3 => Some(n + 1),
        _ => None,
    }
}

impl ServerCert {
    /// Loads the certificate chain and its key.
    pub fn load(cert: &Path, key: &Path) -> Result<Arc<ServerCert>, CertError> {
        Ok(Arc::new(ServerCert {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            current: RwLock::new(load(cert, key)?),
        }))
    }

    /// Loads the files again; on an error the current ones stay.
    pub fn reload(&self) -> Result<(), CertError> {
        let next = load(&self.cert, &self.key)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = next;
        Ok(())
    }

    /// The TLS server configuration that presents this certificate.
    pub fn config(self: &Arc<Self>) -> Result<Arc<rustls::ServerConfig>, CertError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(CertError::Config)?
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

tokio::task_local! {
    /// The slot of the connection whose request is being answered.
    static CONNECTION: slots::Proof;
}

/// The request being answered showed a node's valid signature or an
/// operator's token: its connection leaves the anonymous share, and its
/// client's address may use the reserve for [`slots::KNOWN_FOR_MS`].
pub(crate) fn proven() {
    let _ = CONNECTION.try_with(|p| p.prove(crate::time::now_ms()));
}

static ACCEPT_FAILED: Tally = Tally::new(Level::Warn);
static REFUSED_PER_CLIENT: Tally = Tally::new(Level::Warn);
static REFUSED_FULL: Tally = Tally::new(Level::Warn);
static REFUSED_ANONYMOUS: Tally = Tally::new(Level::Warn);
static TLS_FAILED: Tally = Tally::new(Level::Info);
static TLS_TIMED_OUT: Tally = Tally::new(Level::Info);
static HEADERS_TOO_LARGE: Tally = Tally::new(Level::Info);

/// Longest pause after a failed accept; the first is
/// [`FIRST_ACCEPT_PAUSE`], each next one twice as long.
const LAST_ACCEPT_PAUSE: Duration = Duration::from_secs(1);
const FIRST_ACCEPT_PAUSE: Duration = Duration::from_millis(10);

/// What a failed accept says, with the fix when it is one of the limits.
fn accept_failed(e: &std::io::Error) -> String {
    #[cfg(unix)]
    {
        use rustix::io::Errno;
        let errno = e.raw_os_error().map(Errno::from_raw_os_error);
        if errno == Some(Errno::MFILE) {
            return format!("accepting a connection: {e}: the edge is out of open files: raise LimitNOFILE= in its unit (or ulimit -n where it starts), or lower --max-connections");
        }
        if errno == Some(Errno::NFILE) {
            return format!("accepting a connection: {e}: the system is out of open files: raise the sysctl fs.file-max");
        }
    }
    format!("accepting a connection: {e}")
}

fn refused(why: slots::Refused, limits: &Limits, peer: SocketAddr) {
    let client = slots::Client::from(peer.ip());
    match why {
        slots::Refused::PerClient => REFUSED_PER_CLIENT.note(
            &format!(
                "connection closed: {client} has {} open, the most one client may (--max-connections-per-client)",
                limits.max_connections_per_client
            ),
            Some(peer),
        ),
        slots::Refused::Full => REFUSED_FULL.note(
            &format!(
                "connection closed: {} are open, the most at once (--max-connections)",
                limits.max_connections
            ),
            Some(peer),
        ),
        slots::Refused::Anonymous => REFUSED_ANONYMOUS.note(
            &format!(
                "connection closed: the {} slots open to any address are taken; the other {} are kept for addresses nodes and operators used in the last {} minutes",
                limits.max_connections - limits.reserve(),
                limits.reserve(),
                slots::KNOWN_FOR_MS / 60_000
            ),
            Some(peer),
        ),
    }
}

/// How long a stopping edge lets its open connections finish what they
/// were asked before it cuts them: held requests are answered at once
/// (see `wake`), so what remains are requests being read or answered,
/// each bounded by the request timeout. Well within a service manager's
/// stop timeout (systemd's default is 90 s).
pub const DRAIN: Duration = Duration::from_secs(10);

/// Serves `router` on `listener` until `stop` ends, then drains: no new
/// connection is taken (the listener is closed), every open one answers
/// the request it is reading or answering and then closes (HTTP/1's
/// graceful close), and those still open after [`DRAIN`] are cut. What
/// held requests wait for is woken by the caller as `stop` ends.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: Limits,
    stop: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let slots = slots::Slots::new(
        limits.max_connections,
        limits.max_connections_per_client,
        limits.reserve(),
    );
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let (stopping, stopped) = tokio::sync::watch::channel(false);
    let mut pause = Duration::ZERO;
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut stop => break,
            a = listener.accept() => a,
        };
        let (tcp, peer) = match accepted {
            Ok(c) => {
                pause = Duration::ZERO;
                c
            }
            // Out of descriptors and the like: the listener itself is
            // fine, and the pending connections wait in its backlog.
            Err(e) => {
                ACCEPT_FAILED.note(&accept_failed(&e), None);
                pause = (pause * 2).clamp(FIRST_ACCEPT_PAUSE, LAST_ACCEPT_PAUSE);
                tokio::select! {
                    biased;
                    () = &mut stop => break,
                    () = tokio::time::sleep(pause) => {}
                }
                continue;
            }
        };
        let slot = match slots.admit(peer.ip(), crate::time::now_ms()) {
            Ok(s) => s,
            Err(why) => {
                drop(tcp);
                refused(why, &limits, peer);
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let (router, acceptor) = (router.clone(), acceptor.clone());
        let mut told = stopped.clone();
        tokio::spawn(async move {
            let proof = slot.proof();
            match acceptor {
                None => connection(tcp, peer, router, limits, proof, told).await,
                Some(a) => {
                    let shake = tokio::time::timeout(limits.handshake_timeout, a.accept(tcp));
                    // A handshake still going when the edge stops is cut.
                    let shaken = tokio::select! {
                        s = shake => s,
                        () = stopping_now(&mut told) => return,
                    };
                    match shaken {
                        Ok(Ok(tls)) => connection(tls, peer, router, limits, proof, told).await,
                        Ok(Err(e)) => {
                            TLS_FAILED.note(&format!("TLS handshake failed: {e}"), Some(peer))
                        }
                        Err(_) => TLS_TIMED_OUT.note("TLS handshake timed out", Some(peer)),
                    }
                }
            }
            drop(slot);
        });
    }
    drop(listener);
    let _ = stopping.send(true);
    let open = slots.open();
    if open > 0 {
        crate::log::info(
            &format!(
                "stopping: no new connection; {open} open connection(s) answer what they were asked, then close (at most {} s)",
                DRAIN.as_secs()
            ),
            None,
        );
    }
    if tokio::time::timeout(DRAIN, slots.none_open())
        .await
        .is_err()
    {
        crate::log::warn(
            &format!(
                "stopping: {} connection(s) still busy after {} s are cut",
                slots.open(),
                DRAIN.as_secs()
            ),
            None,
        );
    }
    Ok(())
}

/// Until the edge stops (or nothing can tell it any more).
async fn stopping_now(told: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = told.wait_for(|s| *s).await;
}

async fn connection<S>(
    stream: S,
    peer: SocketAddr,
    router: Router,
    limits: Limits,
    proof: slots::Proof,
    mut stop: tokio::sync::watch::Receiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        let (router, proof) = (router.clone(), proof.clone());
        async move {
            let answer = tokio::time::timeout(
                limits.request_timeout,
                CONNECTION.scope(proof, router.oneshot(req.map(axum::body::Body::new))),
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
    let conn = b.serve_connection(TokioIo::new(stream), svc);
    tokio::pin!(conn);
    // When the edge stops: the request being read or answered is
    // answered, then the connection closes (no keep-alive).
    let served = tokio::select! {
        r = conn.as_mut() => r,
        () = stopping_now(&mut stop) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = served {
        if e.is_parse_too_large() {
            HEADERS_TOO_LARGE.note("request header block over the bound: 431", Some(peer));
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_x509_version_is_read_from_the_certificate() {
        // SEQUENCE { SEQUENCE { [0] { INTEGER 2 } … } … }: v3.
        let v3 = [
            0x30, 0x09, 0x30, 0x07, 0xa0, 0x03, 0x02, 0x01, 0x02, 0x02, 0x00,
        ];
        assert_eq!(super::x509_version(&v3), Some(3));
        // No [0]: v1 (the serial number comes first).
        let v1 = [0x30, 0x06, 0x30, 0x04, 0x02, 0x02, 0x01, 0x01];
        assert_eq!(super::x509_version(&v1), Some(1));
        assert_eq!(super::x509_version(&[0x30, 0x85]), None);
        assert_eq!(super::x509_version(b"not DER"), None);
    }
}
