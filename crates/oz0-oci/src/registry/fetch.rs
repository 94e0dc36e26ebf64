//! A GET by digest: the registry's `401` answered with a token, a blob's
//! redirects followed within bounds, and the body streamed bounded,
//! hashed and refused unless it has the digest (and, for a blob, the
//! size) asked for.

use std::io::Write;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::Response;
use sha2::Digest as _;

use super::http::{content_length, is_loopback, Url};
use super::{Client, RegistryError, IDLE_TIMEOUT, MAX_REDIRECTS};
use crate::reference::{shown, Digest, Reference};

/// What a blob's GET is for, in messages.
pub(super) struct Want<'a> {
    pub(super) r: &'a Reference,
    pub(super) what: &'a str,
    /// Most bytes taken.
    pub(super) max: u64,
    /// The digest the bytes must have.
    pub(super) digest: &'a Digest,
    /// The size they must have, when the manifest declared it.
    pub(super) size: Option<u64>,
    pub(super) accept: Option<String>,
    pub(super) blob: bool,
}

impl Client {
    pub(super) fn fetch(
        &self,
        want: Want<'_>,
        out: &mut dyn Write,
    ) -> Result<Option<String>, RegistryError> {
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
                .await
                .map_err(|e| e.to_string())?;
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
                    let token = self
                        .authenticate(r, &h)
                        .await
                        .map_err(|e| e.to_string())?;
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
                    let mut next = next;
                    next.not_here = url.not_here || !is_loopback(&url.host);
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
