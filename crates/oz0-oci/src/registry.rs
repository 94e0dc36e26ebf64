//! The registry client: what a pull needs of the OCI distribution API
//! (a manifest by digest, blobs by digest) and its token dance, on hyper
//! and rustls.
//!
//! The registry is hostile until its bytes check out:
//! - only the registries the operator allows are spoken to, over HTTPS
//!   (plain HTTP on loopback only); a token realm must be one of them too
//!   (or the registry itself), so a registry cannot send the node, or the
//!   operator's credentials, anywhere else;
//! - every answer is bounded before it is read: a manifest and a config
//!   at [`crate::manifest::MAX_MANIFEST`], a token answer at [`MAX_TOKEN`],
//!   a blob at the size its manifest declares (and the caller's bound);
//! - every manifest and blob is hashed as it streams and refused unless it
//!   has the digest it was asked for and, for a blob, its declared size;
//! - a blob may be redirected (registries serve them from a CDN) at most
//!   [`MAX_REDIRECTS`] times, to HTTPS only (plain HTTP from a loopback
//!   registry to loopback), never from elsewhere to this machine, and
//!   without the registry's credentials; nothing else is.
//!
//! Credentials come from a file in the containers `auth.json` format that
//! only the node's user can read; they are sent to their registry only.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use sha2::Digest as _;

use crate::manifest::{Descriptor, MANIFEST_TYPES, MAX_MANIFEST};
use crate::reference::{shown, valid_host, Digest, Reference};

/// Largest token answer read.
pub const MAX_TOKEN: u64 = 64 * 1024;
/// Largest credentials file read.
pub const MAX_AUTH_FILE: u64 = 256 * 1024;
/// Most redirects a blob's GET follows.
pub const MAX_REDIRECTS: usize = 5;
/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a registry may send nothing (headers, or the next bytes of a
/// body) before the GET is given up.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// How a node speaks to registries.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The registries it may pull from, `HOST[:PORT]` each, as an image
    /// reference names them (`--oci-registry`).
    pub allowed: Vec<String>,
    /// The credentials file (`auth.json` format), readable by the node's
    /// user only.
    pub auth_file: Option<PathBuf>,
    /// A PEM file of CA certificates to verify registries against, instead
    /// of the system's.
    pub ca_file: Option<PathBuf>,
}

/// Why a registry could not be spoken to, or what it sent is refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The registry is not one the operator allows.
    #[error("{registry} is not a registry this node pulls from (allowed: {allowed}): allow it with --oci-registry {registry}")]
    NotAllowed {
        /// The registry (escaped).
        registry: String,
        /// Those allowed.
        allowed: String,
    },
    /// The registry names are malformed.
    #[error("--oci-registry {0} is not HOST[:PORT] (e.g. ghcr.io, 127.0.0.1:5000)")]
    BadRegistry(String),
    /// The credentials file cannot be used.
    #[error("the credentials file {path}: {why}")]
    Credentials {
        /// Its path.
        path: String,
        /// What is wrong, and the fix.
        why: String,
    },
    /// TLS cannot be set up.
    #[error("TLS: {0}")]
    Tls(String),
    /// A GET failed, or what it brought is refused.
    #[error("{what} from {registry}: {why}")]
    Fetch {
        /// The registry.
        registry: String,
        /// What was fetched: `the manifest sha256:…`, `layer 2 of 3 (sha256:…)`.
        what: String,
        /// Why it failed.
        why: String,
    },
}

/// A URL the client may GET: the registry's, a token realm, a redirect.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Url {
    tls: bool,
    /// `host` or `[v6]`, lower case.
    host: String,
    port: u16,
    /// `/path?query`.
    target: String,
}

impl Url {
    /// The authority as references name it: `host` or `host:port` when
    /// the port is not the scheme's.
    fn authority(&self) -> String {
        if self.port == if self.tls { 443 } else { 80 } {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// Parses an absolute `http(s)://HOST[:PORT]/…` URL (no user info).
    fn parse(s: &str) -> Option<Url> {
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
        })
    }

    /// The registry `authority`'s API URL for `target`: HTTPS, or plain
    /// HTTP when the registry is on loopback.
    fn registry(authority: &str, target: String) -> Url {
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
        }
    }
}

/// Whether `host` is this machine: `localhost`, 127.0.0.0/8, `[::1]`.
fn is_loopback(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h == "localhost" || h.parse::<std::net::IpAddr>().is_ok_and(|a| a.is_loopback())
}

/// `s` percent-encoded for a query value.
fn query_value(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The parameters of a `WWW-Authenticate` challenge: its scheme (lower
/// case) and `key="value"` pairs.
fn challenge(h: &str) -> (String, HashMap<String, String>) {
    let h = h.trim();
    let (scheme, mut rest) = h.split_once(' ').unwrap_or((h, ""));
    let mut params = HashMap::new();
    loop {
        rest = rest.trim_start_matches([' ', ',']);
        let Some(eq) = rest.find('=') else { break };
        let key = rest[..eq].trim().to_ascii_lowercase();
        rest = &rest[eq + 1..];
        let value;
        if let Some(q) = rest.strip_prefix('"') {
            let mut v = String::new();
            let mut chars = q.char_indices();
            let mut end = q.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            v.push(n);
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => v.push(c),
                }
            }
            value = v;
            rest = &q[end.min(q.len())..];
        } else {
            let end = rest.find(',').unwrap_or(rest.len());
            value = rest[..end].trim().to_string();
            rest = &rest[end..];
        }
        params.insert(key, value);
    }
    (scheme.to_ascii_lowercase(), params)
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

/// A client of the registries a node allows.
pub struct Client {
    allowed: Vec<String>,
    /// `user:password` by registry.
    credentials: HashMap<String, String>,
    auth_file: Option<String>,
    tls: Arc<rustls::ClientConfig>,
    rt: tokio::runtime::Runtime,
    /// Bearer tokens by registry and repository.
    tokens: Mutex<HashMap<(String, String), String>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Client(allowed: {:?})", self.allowed)
    }
}

/// Reads the credentials file: `{"auths": {"HOST": {"auth": base64("user:password")}}}`.
fn read_credentials(path: &Path) -> Result<HashMap<String, String>, RegistryError> {
    let bad = |why: String| RegistryError::Credentials {
        path: path.display().to_string(),
        why,
    };
    let f = std::fs::File::open(path).map_err(|e| bad(format!("cannot open it: {e}")))?;
    let meta = f
        .metadata()
        .map_err(|e| bad(format!("cannot look at it: {e}")))?;
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me || meta.mode() & 0o077 != 0 {
        return Err(bad(format!(
            "it holds secrets, so it must be the node's user's (uid {me}) and readable by it only; it is uid {}'s with mode {:o}: chown it to uid {me} and chmod 600 it",
            meta.uid(),
            meta.mode() & 0o7777
        )));
    }
    let mut body = Vec::new();
    f.take(MAX_AUTH_FILE + 1)
        .read_to_end(&mut body)
        .map_err(|e| bad(format!("cannot read it: {e}")))?;
    if u64::try_from(body.len()).unwrap_or(u64::MAX) > MAX_AUTH_FILE {
        return Err(bad(format!("it is over {MAX_AUTH_FILE} bytes")));
    }
    #[derive(serde::Deserialize)]
    struct File {
        #[serde(default)]
        auths: HashMap<String, Entry>,
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        auth: Option<String>,
    }
    // Never echo the file's text: it holds secrets.
    let file: File = serde_json::from_slice(&body).map_err(|e| {
        bad(format!(
            "it is not an auth.json file ({{\"auths\": {{\"HOST\": {{\"auth\": \"BASE64(user:password)\"}}}}}}), at line {} column {}",
            e.line(),
            e.column()
        ))
    })?;
    let mut out = HashMap::new();
    for (host, e) in file.auths {
        let Some(auth) = e.auth else { continue };
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .ok()
            .and_then(|d| String::from_utf8(d).ok())
            .filter(|d| d.contains(':'))
            .ok_or_else(|| {
                bad(format!(
                    "the auth of {} is not base64 of user:password",
                    shown(&host)
                ))
            })?;
        let host = host
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_ascii_lowercase();
        out.insert(host, decoded);
    }
    Ok(out)
}

fn tls_config(ca_file: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, RegistryError> {
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

/// What a blob's GET is for, in messages.
struct Want<'a> {
    r: &'a Reference,
    what: &'a str,
    /// Most bytes taken.
    max: u64,
    /// The digest the bytes must have.
    digest: &'a Digest,
    /// The size they must have, when the manifest declared it.
    size: Option<u64>,
    accept: Option<String>,
    blob: bool,
}

impl Client {
    /// A client of `options.allowed`.
    pub fn new(options: &Options) -> Result<Client, RegistryError> {
        let mut allowed = Vec::new();
        for a in &options.allowed {
            let a = a.trim().to_ascii_lowercase();
            if a.is_empty() || a.contains('/') || !valid_host(&a) {
                return Err(RegistryError::BadRegistry(shown(&a)));
            }
            allowed.push(a);
        }
        let credentials = match &options.auth_file {
            Some(p) => read_credentials(p)?,
            None => HashMap::new(),
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| RegistryError::Tls(format!("cannot start the client's runtime: {e}")))?;
        Ok(Client {
            allowed,
            credentials,
            auth_file: options.auth_file.as_ref().map(|p| p.display().to_string()),
            tls: tls_config(options.ca_file.as_deref())?,
            rt,
            tokens: Mutex::new(HashMap::new()),
        })
    }

    /// Refuses a registry the operator did not allow.
    pub fn check_allowed(&self, r: &Reference) -> Result<(), RegistryError> {
        if self.allowed.contains(&r.registry) {
            return Ok(());
        }
        Err(RegistryError::NotAllowed {
            registry: r.registry.clone(),
            allowed: if self.allowed.is_empty() {
                "none".into()
            } else {
                self.allowed.join(", ")
            },
        })
    }

    /// The manifest or index `digest` of `r`'s repository (checked against
    /// its digest), and the registry's `Content-Type`.
    pub fn manifest(
        &self,
        r: &Reference,
        digest: &Digest,
    ) -> Result<(Vec<u8>, Option<String>), RegistryError> {
        let what = format!("the manifest {digest}");
        let mut body = Vec::new();
        let ct = self.fetch(
            Want {
                r,
                what: &what,
                max: MAX_MANIFEST,
                digest,
                size: None,
                accept: Some(MANIFEST_TYPES.join(", ")),
                blob: false,
            },
            &mut body,
        )?;
        Ok((body, ct))
    }

    /// The blob `d` of `r`'s repository, at most `max` bytes, written to
    /// `out` as it streams; refused unless it has `d`'s digest and size.
    pub fn blob(
        &self,
        r: &Reference,
        d: &Descriptor,
        what: &str,
        max: u64,
        out: &mut dyn Write,
    ) -> Result<(), RegistryError> {
        if d.size > max {
            return Err(RegistryError::Fetch {
                registry: r.registry.clone(),
                what: what.into(),
                why: format!(
                    "its manifest declares {} bytes, over the {max} the node takes",
                    d.size
                ),
            });
        }
        self.fetch(
            Want {
                r,
                what,
                max,
                digest: &d.digest,
                size: Some(d.size),
                accept: None,
                blob: true,
            },
            out,
        )?;
        Ok(())
    }

    fn fetch(&self, want: Want<'_>, out: &mut dyn Write) -> Result<Option<String>, RegistryError> {
        self.check_allowed(want.r)?;
        let fail = |why: String| RegistryError::Fetch {
            registry: want.r.registry.clone(),
            what: want.what.to_string(),
            why,
        };
        self.rt.block_on(self.fetch_async(&want, out)).map_err(fail)
    }

    async fn fetch_async(
        &self,
        want: &Want<'_>,
        out: &mut dyn Write,
    ) -> Result<Option<String>, String> {
        let r = want.r;
        let kind = if want.blob { "blobs" } else { "manifests" };
        let mut url = Url::registry(
            r.api_host(),
            format!("/v2/{}/{kind}/{}", r.api_repository(), want.digest),
        );
        let key = (r.registry.clone(), r.api_repository());
        let mut authed = false;
        let mut redirects = 0;
        loop {
            let on_registry = url.authority() == r.api_host();
            let auth = if on_registry {
                self.tokens
                    .lock()
                    .expect("the token map is never poisoned")
                    .get(&key)
                    .cloned()
            } else {
                None
            };
            let resp = self
                .get(&url, want.accept.as_deref(), auth.as_deref())
                .await?;
            let status = resp.status().as_u16();
            match status {
                200 => return self.body(resp, want, out).await,
                401 if on_registry && !authed => {
                    authed = true;
                    let h = resp
                        .headers()
                        .get(hyper::header::WWW_AUTHENTICATE)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_string();
                    let token = self.authenticate(r, &h).await?;
                    self.tokens
                        .lock()
                        .expect("the token map is never poisoned")
                        .insert(key.clone(), token);
                }
                401 | 403 => {
                    return Err(match (&self.auth_file, self.credentials.contains_key(&r.registry)) {
                        (_, true) => format!(
                            "the registry refused the credentials for {} (HTTP {status}): check them in the credentials file",
                            r.registry
                        ),
                        (Some(f), false) => format!(
                            "the registry wants credentials (HTTP {status}) and {f} has none for {}: add them",
                            r.registry
                        ),
                        (None, false) => format!(
                            "the registry wants credentials (HTTP {status}): name a credentials file with --oci-auth FILE"
                        ),
                    })
                }
                301 | 302 | 303 | 307 | 308 if want.blob => {
                    redirects += 1;
                    if redirects > MAX_REDIRECTS {
                        return Err(format!("it was redirected over {MAX_REDIRECTS} times"));
                    }
                    let loc = resp
                        .headers()
                        .get(hyper::header::LOCATION)
                        .and_then(|v| v.to_str().ok())
                        .ok_or("it was redirected without a Location")?;
                    let next = if loc.starts_with('/') {
                        Url::parse(&format!(
                            "{}://{}{loc}",
                            if url.tls { "https" } else { "http" },
                            url.authority()
                        ))
                    } else {
                        Url::parse(loc)
                    }
                    .ok_or_else(|| format!("it was redirected to {}, not a URL the node follows", shown(loc)))?;
                    if !next.tls && (url.tls || !is_loopback(&next.host)) {
                        return Err(format!(
                            "it was redirected to plain HTTP at {}: the node fetches over HTTPS only off loopback",
                            shown(&next.host)
                        ));
                    }
                    if is_loopback(&next.host) && !is_loopback(&url.host) {
                        return Err(format!(
                            "it was redirected to this machine ({}), which a registry elsewhere never sends the node to",
                            shown(&next.host)
                        ));
                    }
                    url = next;
                }
                404 => {
                    return Err(format!(
                        "the registry has no such {} in {} (HTTP 404): is the digest right, and the repository's name?",
                        if want.blob { "blob" } else { "manifest" },
                        shown(&r.repository)
                    ))
                }
                s => return Err(format!("the registry answered HTTP {s}")),
            }
        }
    }

    /// Takes a token for `r` from the realm a `401`'s challenge names.
    async fn authenticate(&self, r: &Reference, challenge_header: &str) -> Result<String, String> {
        let (scheme, params) = challenge(challenge_header);
        let creds = self.credentials.get(&r.registry);
        let basic = creds.map(|c| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(c)
            )
        });
        match scheme.as_str() {
            "basic" => {
                return basic.ok_or_else(|| {
                    "the registry wants credentials (HTTP 401, Basic): name a credentials file with --oci-auth FILE".to_string()
                })
            }
            "bearer" => {}
            _ => {
                return Err(format!(
                    "the registry answered HTTP 401 with no challenge the node takes ({})",
                    shown(challenge_header)
                ))
            }
        }
        let realm = params
            .get("realm")
            .ok_or("the registry's Bearer challenge names no realm")?;
        let mut url = Url::parse(realm).ok_or_else(|| {
            format!(
                "its token realm {} is not a URL the node follows",
                shown(realm)
            )
        })?;
        if url.target.contains('?') {
            return Err(format!(
                "its token realm {} has a query already",
                shown(realm)
            ));
        }
        let realm_host = url.authority();
        if realm_host != r.api_host() && !self.allowed.contains(&realm_host) {
            return Err(format!(
                "the registry sends the node for a token to {}, which is not a registry it allows: if you trust it, allow it with --oci-registry {}",
                shown(&realm_host),
                shown(&realm_host)
            ));
        }
        if !url.tls && !is_loopback(&url.host) {
            return Err(format!(
                "its token realm {} is plain HTTP off loopback",
                shown(realm)
            ));
        }
        let mut q = Vec::new();
        if let Some(s) = params.get("service") {
            q.push(format!("service={}", query_value(s)));
        }
        let scope = params
            .get("scope")
            .cloned()
            .unwrap_or_else(|| format!("repository:{}:pull", r.api_repository()));
        q.push(format!("scope={}", query_value(&scope)));
        url.target = format!("{}?{}", url.target, q.join("&"));
        let resp = self.get(&url, None, basic.as_deref()).await?;
        let status = resp.status().as_u16();
        if status != 200 {
            return Err(if status == 401 || status == 403 {
                format!("its token service refused the node (HTTP {status}): check the credentials for {}", r.registry)
            } else {
                format!("its token service answered HTTP {status}")
            });
        }
        let body = read_bounded(resp, MAX_TOKEN, "the token answer").await?;
        #[derive(serde::Deserialize)]
        struct Answer {
            token: Option<String>,
            access_token: Option<String>,
        }
        let a: Answer = serde_json::from_slice(&body)
            .map_err(|e| format!("its token answer is not JSON with a token: {e}"))?;
        let token = a
            .token
            .or(a.access_token)
            .filter(|t| !t.is_empty() && t.bytes().all(|b| (0x21..0x7f).contains(&b)))
            .ok_or("its token answer holds no token the node can send")?;
        Ok(format!("Bearer {token}"))
    }

    /// One GET of `url`.
    async fn get(
        &self,
        url: &Url,
        accept: Option<&str>,
        authorization: Option<&str>,
    ) -> Result<Response<Incoming>, String> {
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
            .map_err(|e| format!("cannot make the request: {e}"))?;
        tokio::time::timeout(IDLE_TIMEOUT, sender.send_request(req))
            .await
            .map_err(|_| {
                format!(
                    "{} sent no answer in {} s",
                    url.authority(),
                    IDLE_TIMEOUT.as_secs()
                )
            })?
            .map_err(|e| format!("the GET failed: {e}"))
    }

    async fn connect(&self, url: &Url) -> Result<Sender, String> {
        let host = url.host.trim_start_matches('[').trim_end_matches(']');
        let stream = tokio::time::timeout(
            CONNECT_TIMEOUT,
            tokio::net::TcpStream::connect((host, url.port)),
        )
        .await
        .map_err(|_| {
            format!(
                "cannot connect to {} in {} s",
                url.authority(),
                CONNECT_TIMEOUT.as_secs()
            )
        })?
        .map_err(|e| format!("cannot connect to {}: {e}", url.authority()))?;
        let _ = stream.set_nodelay(true);
        if !url.tls {
            return handshake(stream).await;
        }
        let name =
            ServerName::try_from(host.to_string()).map_err(|e| format!("{}: {e}", url.host))?;
        let tls = tokio::time::timeout(
            CONNECT_TIMEOUT,
            tokio_rustls::TlsConnector::from(self.tls.clone()).connect(name, stream),
        )
        .await
        .map_err(|_| format!("TLS with {} took over {} s", url.authority(), CONNECT_TIMEOUT.as_secs()))?
        .map_err(|e| format!("TLS with {}: {e} (is its certificate valid, for this name, and signed by a CA the node trusts: the system's, or --oci-ca's?)", url.authority()))?;
        handshake(tls).await
    }

    /// Streams a 200's body to `out`, bounded, hashed and checked.
    async fn body(
        &self,
        resp: Response<Incoming>,
        want: &Want<'_>,
        out: &mut dyn Write,
    ) -> Result<Option<String>, String> {
        let ct = resp
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let limit = want.size.unwrap_or(want.max).min(want.max);
        if let Some(n) = content_length(&resp) {
            if n > limit {
                return Err(match want.size {
                    Some(s) => {
                        format!("the registry sends {n} bytes, not the {s} its manifest declares")
                    }
                    None => {
                        format!("the registry sends {n} bytes, over the {limit} the node reads")
                    }
                });
            }
        }
        let mut hash = sha2::Sha256::new();
        let mut got: u64 = 0;
        let mut body = resp.into_body();
        loop {
            let frame = tokio::time::timeout(IDLE_TIMEOUT, body.frame())
                .await
                .map_err(|_| {
                    format!(
                        "the registry sent nothing for {} s (after {got} bytes)",
                        IDLE_TIMEOUT.as_secs()
                    )
                })?;
            let Some(frame) = frame else { break };
            let frame = frame.map_err(|e| format!("the transfer failed after {got} bytes: {e}"))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            got = got.saturating_add(u64::try_from(data.len()).expect("usize fits u64"));
            if got > limit {
                return Err(match want.size {
                    Some(s) => {
                        format!("the registry sent over the {s} bytes its manifest declares")
                    }
                    None => format!("the registry sent over the {limit} bytes the node reads"),
                });
            }
            hash.update(&data);
            out.write_all(&data)
                .map_err(|e| format!("cannot store it: {e}"))?;
        }
        if let Some(s) = want.size {
            if got != s {
                return Err(format!(
                    "the registry sent {got} bytes, not the {s} its manifest declares"
                ));
            }
        }
        let digest = Digest::from_sha256(hash.finalize().as_slice());
        if &digest != want.digest {
            return Err(format!(
                "what the registry sent has the digest {digest}: it is not the content asked for, and is not used"
            ));
        }
        Ok(ct)
    }
}

fn content_length(resp: &Response<Incoming>) -> Option<u64> {
    resp.headers()
        .get(hyper::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// A small body, at most `max` bytes.
async fn read_bounded(resp: Response<Incoming>, max: u64, what: &str) -> Result<Vec<u8>, String> {
    if content_length(&resp).is_some_and(|n| n > max) {
        return Err(format!("{what} is over {max} bytes"));
    }
    let limit = usize::try_from(max).unwrap_or(usize::MAX);
    let body = tokio::time::timeout(
        IDLE_TIMEOUT,
        http_body_util::Limited::new(resp.into_body(), limit).collect(),
    )
    .await
    .map_err(|_| format!("{what} did not come in {} s", IDLE_TIMEOUT.as_secs()))?
    .map_err(|e| format!("{what}: {e}"))?;
    Ok(body.to_bytes().to_vec())
}

async fn handshake<S>(stream: S) -> Result<Sender, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

#[cfg(test)]
pub(crate) mod tests;
