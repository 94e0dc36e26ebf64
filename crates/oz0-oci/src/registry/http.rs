//! One GET on a connection of its own: the URLs the client may reach,
//! TCP and TLS opened within `CONNECT_TIMEOUT`, answers awaited within
//! `IDLE_TIMEOUT`, and small bodies read within a bound.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, InvalidDnsNameError, ServerName};

use super::{Client, RegistryError, CONNECT_TIMEOUT, IDLE_TIMEOUT};
use crate::reference::valid_host;

/// A URL the client may GET: the registry's, a token realm, a redirect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Url {
    pub(super) tls: bool,
    /// `host` or `[v6]`, lower case.
    pub(super) host: String,
    pub(super) port: u16,
    /// `/path?query`.
    pub(super) target: String,
    /// Reached by a redirect from a registry not on this machine: it must
    /// not lead here (see [`is_here`]), whatever its name says.
    pub(super) not_here: bool,
}

impl Url {
    /// The authority as references name it: `host` or `host:port` when
    /// the port is not the scheme's.
    pub(super) fn authority(&self) -> String {
        if self.port == if self.tls { 443 } else { 80 } {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// Parses an absolute `http(s)://HOST[:PORT]/…` URL (no user info).
    pub(super) fn parse(s: &str) -> Option<Url> {
        let (tls, rest) = match (s.strip_prefix("https://"), s.strip_prefix("http://")) {
            (Some(r), _) => (true, r),
            (None, Some(r)) => (false, r),
            _ => return None,
        };
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (auth, target) = rest.split_at(end);
        if auth.contains('@') || !valid_host(auth) {
            return None;
        }
        let (host, port) = match auth.rsplit_once(':') {
            Some((h, p)) if !p.contains(']') => (h, p.parse().ok()?),
            _ => (auth, if tls { 443 } else { 80 }),
        };
        let target = match target {
            "" => "/".to_string(),
            t if t.starts_with('?') => format!("/{t}"),
            t => t.to_string(),
        };
        if target.bytes().any(|b| !(0x21..0x7f).contains(&b)) || target.contains('#') {
            return None;
        }
        Some(Url {
            tls,
            host: host.to_ascii_lowercase(),
            port,
            target,
            not_here: false,
        })
    }

    /// The registry `authority`'s API URL for `target`: HTTPS, or plain
    /// HTTP when the registry is on loopback.
    pub(super) fn registry(authority: &str, target: String) -> Url {
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !p.contains(']') => (h, p.parse().ok()),
            _ => (authority, None),
        };
        let tls = !is_loopback(host);
        Url {
            tls,
            host: host.to_string(),
            port: port.unwrap_or(if tls { 443 } else { 80 }),
            target,
            not_here: false,
        }
    }
}

/// Whether `ip` is this machine or its link: loopback, unspecified (which
/// connects to this machine), link-local (a cloud's metadata service), an
/// IPv4 address written as IPv6 included.
pub(super) fn is_here(ip: std::net::IpAddr) -> bool {
    use std::net::IpAddr;
    match ip.to_canonical() {
        IpAddr::V4(a) => a.is_loopback() || a.is_unspecified() || a.is_link_local(),
        IpAddr::V6(a) => {
            a.is_loopback() || a.is_unspecified() || (a.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

/// Whether `host` is this machine: `localhost`, 127.0.0.0/8, `[::1]`.
pub(super) fn is_loopback(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h == "localhost" || h.parse::<std::net::IpAddr>().is_ok_and(|a| a.is_loopback())
}

pub(super) type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

/// `step` of connecting to `url` (a lookup, a connect), within
/// [`CONNECT_TIMEOUT`].
async fn connecting<T>(
    url: &Url,
    step: impl std::future::Future<Output = std::io::Result<T>>,
) -> Result<T, HttpError> {
    tokio::time::timeout(CONNECT_TIMEOUT, step)
        .await
        .map_err(|_| HttpError::ConnectTimeout {
            authority: url.authority(),
            secs: CONNECT_TIMEOUT.as_secs(),
        })?
        .map_err(|error| HttpError::Connect {
            authority: url.authority(),
            error,
        })
}

pub(super) fn tls_config(
    ca_file: Option<&Path>,
) -> Result<Arc<rustls::ClientConfig>, RegistryError> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        None => {
            for c in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(c);
            }
        }
        Some(p) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(p)
                .and_then(|i| i.collect::<Result<_, _>>())
                .map_err(|e| RegistryError::Tls(format!("--oci-ca {}: {e}", p.display())))?;
            for c in certs {
                roots
                    .add(c)
                    .map_err(|e| RegistryError::Tls(format!("--oci-ca {}: {e}", p.display())))?;
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| RegistryError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// Why a GET, or the small body it brought, failed: which host or what,
/// and why (each message as a fetch's error carries it on).
#[derive(Debug, thiserror::Error)]
pub(super) enum HttpError {
    #[error("cannot connect to {authority} in {secs} s")]
    ConnectTimeout { authority: String, secs: u64 },
    #[error("{authority} leads only to this machine or its link (loopback, unspecified, link-local), where a registry elsewhere never sends the node")]
    Here { authority: String },
    #[error("cannot connect to {authority}: {error}")]
    Connect {
        authority: String,
        error: std::io::Error,
    },
    #[error("{host}: {error}")]
    ServerName {
        host: String,
        error: InvalidDnsNameError,
    },
    #[error("TLS with {authority} took over {secs} s")]
    TlsTimeout { authority: String, secs: u64 },
    #[error("TLS with {authority}: {error} (is its certificate valid, for this name, and signed by a CA the node trusts: the system's, or --oci-ca's?)")]
    Tls {
        authority: String,
        error: std::io::Error,
    },
    #[error("HTTP: {0}")]
    Handshake(hyper::Error),
    #[error("cannot make the request: {0}")]
    Request(hyper::http::Error),
    #[error("{authority} sent no answer in {secs} s")]
    NoAnswer { authority: String, secs: u64 },
    #[error("the GET failed: {0}")]
    Get(hyper::Error),
    #[error("{what} is over {max} bytes")]
    TooLong { what: String, max: u64 },
    #[error("{what} did not come in {secs} s")]
    Slow { what: String, secs: u64 },
    #[error("{what}: {error}")]
    Body {
        what: String,
        error: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl Client {
    /// One GET of `url`.
    pub(super) async fn get(
        &self,
        url: &Url,
        accept: Option<&str>,
        authorization: Option<&str>,
    ) -> Result<Response<Incoming>, HttpError> {
        let mut sender = self.connect(url).await?;
        let mut req = Request::get(url.target.as_str())
            .header(hyper::header::HOST, url.authority())
            .header(
                hyper::header::USER_AGENT,
                concat!("oz0-node/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(a) = accept {
            req = req.header(hyper::header::ACCEPT, a);
        }
        if let Some(a) = authorization {
            req = req.header(hyper::header::AUTHORIZATION, a);
        }
        let req = req
            .body(Empty::<Bytes>::new())
            .map_err(HttpError::Request)?;
        tokio::time::timeout(IDLE_TIMEOUT, sender.send_request(req))
            .await
            .map_err(|_| HttpError::NoAnswer {
                authority: url.authority(),
                secs: IDLE_TIMEOUT.as_secs(),
            })?
            .map_err(HttpError::Get)
    }

    async fn connect(&self, url: &Url) -> Result<Sender, HttpError> {
        let host = url.host.trim_start_matches('[').trim_end_matches(']');
        // Resolved here, and only the addresses checked are dialled: a
        // name (or `[::ffff:127.0.0.1]`, `0.0.0.0`) a registry elsewhere
        // redirects to may lead to this machine.
        let addrs: Vec<std::net::SocketAddr> =
            connecting(url, tokio::net::lookup_host((host, url.port)))
                .await?
                .filter(|a| !(url.not_here && is_here(a.ip())))
                .collect();
        if addrs.is_empty() {
            return Err(HttpError::Here {
                authority: url.authority(),
            });
        }
        let stream = connecting(url, tokio::net::TcpStream::connect(&addrs[..])).await?;
        let _ = stream.set_nodelay(true);
        if !url.tls {
            return handshake(stream).await;
        }
        let name =
            ServerName::try_from(host.to_string()).map_err(|error| HttpError::ServerName {
                host: url.host.clone(),
                error,
            })?;
        let tls = tokio::time::timeout(
            CONNECT_TIMEOUT,
            tokio_rustls::TlsConnector::from(self.tls.clone()).connect(name, stream),
        )
        .await
        .map_err(|_| HttpError::TlsTimeout {
            authority: url.authority(),
            secs: CONNECT_TIMEOUT.as_secs(),
        })?
        .map_err(|error| HttpError::Tls {
            authority: url.authority(),
            error,
        })?;
        handshake(tls).await
    }
}

pub(super) fn content_length(resp: &Response<Incoming>) -> Option<u64> {
    resp.headers()
        .get(hyper::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// A small body, at most `max` bytes.
pub(super) async fn read_bounded(
    resp: Response<Incoming>,
    max: u64,
    what: &str,
) -> Result<Vec<u8>, HttpError> {
    if content_length(&resp).is_some_and(|n| n > max) {
        return Err(HttpError::TooLong {
            what: what.into(),
            max,
        });
    }
    let limit = usize::try_from(max).unwrap_or(usize::MAX);
    let body = tokio::time::timeout(
        IDLE_TIMEOUT,
        http_body_util::Limited::new(resp.into_body(), limit).collect(),
    )
    .await
    .map_err(|_| HttpError::Slow {
        what: what.into(),
        secs: IDLE_TIMEOUT.as_secs(),
    })?
    .map_err(|error| HttpError::Body {
        what: what.into(),
        error,
    })?;
    Ok(body.to_bytes().to_vec())
}

async fn handshake<S>(stream: S) -> Result<Sender, HttpError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(HttpError::Handshake)?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}
