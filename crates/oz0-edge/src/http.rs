//! A minimal HTTP/1 client (hyper) over TLS (rustls, verified against the
//! system's CAs or the operator's own) or, on loopback only, plain TCP.
//!
//! Connections are kept open and used again (keep-alive): a client makes
//! one TLS handshake, not one a request. A connection idle for
//! [`IDLE_REUSE`] is not used again (the edge closes idle ones after 10
//! s); a request that a kept connection could not send (it closed
//! meanwhile) is sent once more on a new one, and never when it may have
//! reached the edge.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};

use crate::client::ClientError;

/// Longest the client waits for one request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest response the client reads.
pub const MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;
/// A kept connection idle this long is closed rather than used again.
pub const IDLE_REUSE: Duration = Duration::from_secs(5);
/// Most idle connections a client keeps.
pub const MAX_IDLE: usize = 8;

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// A client's kept connections.
#[derive(Default)]
struct Pool {
    idle: std::sync::Mutex<Vec<(std::time::Instant, Sender)>>,
    opened: std::sync::atomic::AtomicU64,
}

impl Pool {
    fn take(&self) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some((at, s)) = idle.pop() {
            if at.elapsed() < IDLE_REUSE && s.is_ready() && !s.is_closed() {
                return Some(s);
            }
        }
        None
    }

    fn put(&self, s: Sender) {
        if s.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.retain(|(at, s)| at.elapsed() < IDLE_REUSE && !s.is_closed());
        if idle.len() < MAX_IDLE {
            idle.push((std::time::Instant::now(), s));
        }
    }
}

/// Which certificates an `https://` edge is verified against.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Trust {
    /// The system's CA certificates (`/etc/ssl/certs`, as the platform keeps them).
    #[default]
    System,
    /// Only the CA certificates in this PEM file (`--edge-ca`).
    CaFile(PathBuf),
}

/// Whether `host` is this machine's loopback: the one place plain HTTP is
/// allowed, since nothing between the two ends can read or change it.
pub fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// `https://HOST:PORT` (or `http://` on loopback), validated, with the TLS
/// configuration its connections use.
#[derive(Clone)]
pub struct EdgeUrl {
    host: String,
    port: u16,
    tls: Option<Arc<rustls::ClientConfig>>,
    pool: Arc<Pool>,
}

impl std::fmt::Debug for EdgeUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EdgeUrl({self})")
    }
}

impl PartialEq for EdgeUrl {
    fn eq(&self, o: &EdgeUrl) -> bool {
        self.to_string() == o.to_string()
    }
}

fn tls_error(what: impl std::fmt::Display) -> ClientError {
    ClientError::Tls(what.to_string())
}

/// The TLS client configuration for `trust`.
fn client_config(trust: &Trust) -> Result<Arc<rustls::ClientConfig>, ClientError> {
    let mut roots = rustls::RootCertStore::empty();
    match trust {
        Trust::System => {
            let found = rustls_native_certs::load_native_certs();
            for c in found.certs {
                let _ = roots.add(c);
            }
            if roots.is_empty() {
                return Err(tls_error("no CA certificate of this system could be read (install the ca-certificates package), or name the edge's CA with --edge-ca FILE"));
            }
        }
        Trust::CaFile(path) => {
            let certs = read_certs(path)
                .map_err(|e| tls_error(format!("--edge-ca {}: {e}", path.display())))?;
            for c in certs {
                roots
                    .add(c)
                    .map_err(|e| tls_error(format!("--edge-ca {}: {e}", path.display())))?;
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(tls_error)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// Why a PEM file's certificates cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CertsError {
    /// The file cannot be read, or a PEM section does not parse.
    #[error("{0}")]
    Pem(rustls::pki_types::pem::Error),
    /// The file holds no certificate.
    #[error("no PEM certificate in it (-----BEGIN CERTIFICATE-----)")]
    Empty,
}

/// The certificates of a PEM file (at least one).
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, CertsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(CertsError::Pem)?
        .collect::<Result<_, _>>()
        .map_err(CertsError::Pem)?;
    if certs.is_empty() {
        return Err(CertsError::Empty);
    }
    Ok(certs)
}

impl EdgeUrl {
    /// Parses `https://HOST[:PORT][/]` (or `http://…` with a loopback
    /// host), its connections verified against `trust`.
    pub fn parse_with(s: &str, trust: &Trust) -> Result<EdgeUrl, ClientError> {
        let bad = || ClientError::Url(s.chars().take(100).collect());
        let (rest, tls) = match (s.strip_prefix("https://"), s.strip_prefix("http://")) {
            (Some(r), _) => (r, true),
            (None, Some(r)) => (r, false),
            _ => return Err(bad()),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.is_empty() || rest.contains(['/', '@', '?', '#']) {
            return Err(bad());
        }
        let (host, port) = if let Some(h) = rest.strip_prefix('[') {
            let (h, p) = h.split_once(']').ok_or_else(bad)?;
            (h.to_string(), p)
        } else {
            match rest.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), p),
                None => (rest.to_string(), ""),
            }
        };
        let default_port = if tls { 443 } else { 80 };
        let port = match port.strip_prefix(':') {
            Some(p) => p.parse().map_err(|_| bad())?,
            None if port.is_empty() => default_port,
            None => port.parse().map_err(|_| bad())?,
        };
        if host.is_empty() {
            return Err(bad());
        }
        if !tls && !is_loopback(&host) {
            return Err(ClientError::PlainOffLoopback(s.chars().take(100).collect()));
        }
        let tls = if tls {
            Some(client_config(trust)?)
        } else {
            None
        };
        Ok(EdgeUrl {
            host,
            port,
            tls,
            pool: Arc::default(),
        })
    }

    /// Connections (TCP, and TLS handshakes over them) this URL's
    /// clients opened so far.
    pub fn connections_opened(&self) -> u64 {
        self.pool.opened.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl std::fmt::Display for EdgeUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        write!(f, "{scheme}://{}", self.authority())
    }
}

/// Sends one request; returns the status and the body.
pub async fn request(
    url: &EdgeUrl,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> Result<(u16, Bytes), ClientError> {
    tokio::time::timeout(
        REQUEST_TIMEOUT,
        request_inner(url, method, path, headers, body),
    )
    .await
    .map_err(|_| ClientError::Timeout {
        edge: url.to_string(),
    })?
}

async fn request_inner(
    url: &EdgeUrl,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> Result<(u16, Bytes), ClientError> {
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", url.authority())
        .header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let mut req = req
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| ClientError::Http(e.to_string()))?;
    loop {
        let (mut sender, kept) = match url.pool.take() {
            Some(s) => (s, true),
            None => (connect(url).await?, false),
        };
        let resp = match sender.try_send_request(req).await {
            Ok(r) => r,
            Err(mut e) => match e.take_message() {
                // Not sent: the kept connection had closed. Once more on a
                // new one.
                Some(r) if kept => {
                    req = r;
                    continue;
                }
                _ => return Err(ClientError::Http(e.into_error().to_string())),
            },
        };
        let status = resp.status().as_u16();
        let body = Limited::new(resp.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| ClientError::Http(e.to_string()))?
            .to_bytes();
        url.pool.put(sender);
        return Ok((status, body));
    }
}

/// A new connection to the edge, over TLS unless on loopback.
async fn connect(url: &EdgeUrl) -> Result<Sender, ClientError> {
    let stream = tokio::net::TcpStream::connect((url.host.as_str(), url.port))
        .await
        .map_err(|source| ClientError::Connect {
            edge: url.to_string(),
            source,
        })?;
    let _ = stream.set_nodelay(true);
    url.pool
        .opened
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    match &url.tls {
        None => handshake(stream).await,
        Some(cfg) => {
            let name = ServerName::try_from(url.host.clone())
                .map_err(|e| tls_error(format!("{}: {e}", url.host)))?;
            let tls = tokio_rustls::TlsConnector::from(cfg.clone())
                .connect(name, stream)
                .await
                .map_err(|e| {
                    let m = format!("with the edge at {url}: {e} (is the edge's certificate valid now, for this host name, and signed by a CA this client trusts: the system's, or the one --edge-ca names?)");
                    let refused = e
                        .get_ref()
                        .and_then(|i| i.downcast_ref::<rustls::Error>())
                        .is_some_and(|r| matches!(r, rustls::Error::InvalidCertificate(_)));
                    if refused {
                        ClientError::Certificate(m)
                    } else {
                        tls_error(m)
                    }
                })?;
            handshake(tls).await
        }
    }
}

async fn handshake<S>(
    stream: S,
) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, ClientError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| ClientError::Http(e.to_string()))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let p = |u: &str| EdgeUrl::parse_with(u, &Trust::System).map(|e| e.to_string());
        assert_eq!(p("http://127.0.0.1:8440").unwrap(), "http://127.0.0.1:8440");
        assert_eq!(p("http://localhost/").unwrap(), "http://localhost:80");
        assert_eq!(p("http://[::1]:9").unwrap(), "http://[::1]:9");
        assert_eq!(
            p("https://edge.example/").unwrap(),
            "https://edge.example:443"
        );
        assert_eq!(p("https://10.0.0.5:8440").unwrap(), "https://10.0.0.5:8440");
        for bad in [
            "ftp://x",
            "http://",
            "http://u:p@127.0.0.1",
            "https://x/api",
            "http://127.0.0.1:99999",
            "x:1",
        ] {
            assert!(
                matches!(
                    EdgeUrl::parse_with(bad, &Trust::System),
                    Err(ClientError::Url(_))
                ),
                "{bad}"
            );
        }
        // Plain HTTP is for loopback only.
        for off in [
            "http://edge.example",
            "http://10.0.0.5:8440",
            "http://[2001:db8::1]:1",
            "http://127.0.0.1.example",
        ] {
            let e = EdgeUrl::parse_with(off, &Trust::System).unwrap_err();
            assert!(
                matches!(e, ClientError::PlainOffLoopback(_)),
                "{off}: {e:?}"
            );
            assert!(e.to_string().contains("use https://"), "{e}");
        }
        let e = EdgeUrl::parse_with("https://x", &Trust::CaFile("/nonexistent/ca.pem".into()))
            .unwrap_err();
        assert!(
            e.to_string().contains("--edge-ca /nonexistent/ca.pem"),
            "{e}"
        );
    }
}
