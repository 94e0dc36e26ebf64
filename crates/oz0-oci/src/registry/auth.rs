//! Credentials and the token dance: the operator's credentials file, a
//! `401`'s challenge, and a token taken from a realm the operator allows,
//! sent to its registry only.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use base64::Engine as _;

use super::http::{is_loopback, read_bounded, HttpError, Url};
use super::{Client, RegistryError, MAX_AUTH_FILE, MAX_TOKEN};
use crate::reference::{shown, Reference};

/// `s` percent-encoded for a query value.
pub(super) fn query_value(s: &str) -> String {
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
pub(super) fn challenge(h: &str) -> (String, HashMap<String, String>) {
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

/// Reads the credentials file: `{"auths": {"HOST": {"auth": base64("user:password")}}}`.
pub(super) fn read_credentials(path: &Path) -> Result<HashMap<String, String>, RegistryError> {
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

/// Why no token was taken: what the challenge, its realm or the token
/// service did wrong (what it sent, escaped), and the fix where the
/// operator has one.
#[derive(Debug, thiserror::Error)]
pub(super) enum TokenError {
    #[error("the registry wants credentials (HTTP 401, Basic): name a credentials file with --oci-auth FILE")]
    BasicWithoutCredentials,
    #[error("the registry answered HTTP 401 with no challenge the node takes ({0})")]
    Challenge(String),
    #[error("the registry's Bearer challenge names no realm")]
    NoRealm,
    #[error("its token realm {0} is not a URL the node follows")]
    RealmNotUrl(String),
    #[error("its token realm {0} has a query already")]
    RealmQuery(String),
    #[error("the registry sends the node for a token to {0}, which is not a registry it allows: if you trust it, allow it with --oci-registry {0}")]
    RealmNotAllowed(String),
    #[error("its token realm {0} is plain HTTP off loopback")]
    RealmPlainHttp(String),
    #[error(
        "its token service refused the node (HTTP {status}): check the credentials for {registry}"
    )]
    Refused { status: u16, registry: String },
    #[error("its token service answered HTTP {0}")]
    Status(u16),
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error("its token answer is not JSON with a token: {0}")]
    NotJson(serde_json::Error),
    #[error("its token answer holds no token the node can send")]
    NoToken,
}

impl Client {
    /// Takes a token for `r` from the realm a `401`'s challenge names.
    pub(super) async fn authenticate(
        &self,
        r: &Reference,
        challenge_header: &str,
    ) -> Result<String, TokenError> {
        let (scheme, params) = challenge(challenge_header);
        let creds = self.credentials.get(&r.registry);
        let basic = creds.map(|c| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(c)
            )
        });
        match scheme.as_str() {
            "basic" => return basic.ok_or(TokenError::BasicWithoutCredentials),
            "bearer" => {}
            _ => return Err(TokenError::Challenge(shown(challenge_header))),
        }
        let realm = params.get("realm").ok_or(TokenError::NoRealm)?;
        let mut url = Url::parse(realm).ok_or_else(|| TokenError::RealmNotUrl(shown(realm)))?;
        if url.target.contains('?') {
            return Err(TokenError::RealmQuery(shown(realm)));
        }
        let realm_host = url.authority();
        if realm_host != r.api_host() && !self.allowed.contains(&realm_host) {
            return Err(TokenError::RealmNotAllowed(shown(&realm_host)));
        }
        if !url.tls && !is_loopback(&url.host) {
            return Err(TokenError::RealmPlainHttp(shown(realm)));
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
                TokenError::Refused {
                    status,
                    registry: r.registry.clone(),
                }
            } else {
                TokenError::Status(status)
            });
        }
        let body = read_bounded(resp, MAX_TOKEN, "the token answer").await?;
        #[derive(serde::Deserialize)]
        struct Answer {
            token: Option<String>,
            access_token: Option<String>,
        }
        let a: Answer = serde_json::from_slice(&body).map_err(TokenError::NotJson)?;
        let token = a
            .token
            .or(a.access_token)
            .filter(|t| !t.is_empty() && t.bytes().all(|b| (0x21..0x7f).contains(&b)))
            .ok_or(TokenError::NoToken)?;
        Ok(format!("Bearer {token}"))
    }
}
