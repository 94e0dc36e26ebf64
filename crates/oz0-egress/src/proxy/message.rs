//! What the proxy reads from and rewrites in a request: the size of its
//! head, its canonical target (a `CONNECT` authority or an absolute
//! `http://` URL), and the hop-by-hop and `Proxy-*` headers that are never
//! forwarded.

use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName};
use hyper::{Method, Request};

use oz0_policy::net::{self as policy, Host, NetError, Port};

pub(super) fn head_size(req: &Request<Incoming>) -> usize {
    let line = req.method().as_str().len() + req.uri().to_string().len() + 12;
    req.headers()
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 4)
        .sum::<usize>()
        + line
}

/// Why a request's target is malformed: what the client sent and how to
/// send it instead.
#[derive(Debug, thiserror::Error)]
pub(super) enum TargetError {
    #[error("a CONNECT target is host:port, e.g. CONNECT example.com:443")]
    ConnectShape,
    #[error("CONNECT target: {0}")]
    ConnectTarget(#[source] NetError),
    #[error("https:// URLs go through CONNECT (set HTTPS_PROXY)")]
    Https,
    #[error("only http:// URLs and CONNECT are proxied, not {0}://")]
    Scheme(String),
    #[error("this is a proxy: send an absolute URL (GET http://host/path) or CONNECT host:port")]
    NotAbsolute,
    #[error("the URL has no host")]
    NoHost,
    #[error("user information in a proxied URL is not forwarded: remove it")]
    UserInfo,
    #[error("URL host: {0}")]
    UrlHost(#[source] NetError),
}

/// The canonical target of a request, or why it is malformed.
pub(super) fn target_of(req: &Request<Incoming>) -> Result<(Host, Port), TargetError> {
    let uri = req.uri();
    if req.method() == Method::CONNECT {
        let pq = uri.path_and_query().map_or("", |pq| pq.as_str());
        if uri.scheme().is_some() || !(pq.is_empty() || pq == "/") {
            return Err(TargetError::ConnectShape);
        }
        let auth = uri.authority().ok_or(TargetError::ConnectShape)?;
        if auth.as_str().contains('@') {
            return Err(TargetError::ConnectShape);
        }
        return policy::parse_target(auth.as_str()).map_err(TargetError::ConnectTarget);
    }
    match uri.scheme_str() {
        Some("http") => {}
        Some(s) if s.eq_ignore_ascii_case("https") => return Err(TargetError::Https),
        Some(s) => return Err(TargetError::Scheme(s.to_string())),
        None => return Err(TargetError::NotAbsolute),
    }
    let auth = uri.authority().ok_or(TargetError::NoHost)?;
    if auth.as_str().contains('@') {
        return Err(TargetError::UserInfo);
    }
    let hp = auth.as_str();
    let with_port = if auth.port().is_some() {
        hp.to_string()
    } else {
        format!("{hp}:80")
    };
    policy::parse_target(&with_port).map_err(TargetError::UrlHost)
}

/// Headers that describe one hop, never forwarded (RFC 9110 §7.6.1), plus
/// every `Proxy-*` header (the token travels in one).
pub(super) fn strip_hop_headers(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    let chunked = headers.contains_key(header::TRANSFER_ENCODING);
    for name in [
        header::CONNECTION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
    headers.remove("keep-alive");
    // A message framed by Transfer-Encoding ignores Content-Length; do not
    // let the next hop read a length the body never had.
    if chunked {
        headers.remove(header::CONTENT_LENGTH);
    }
    let proxy: Vec<HeaderName> = headers
        .keys()
        .filter(|k| k.as_str().starts_with("proxy-"))
        .cloned()
        .collect();
    for name in proxy {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use hyper::header::HeaderValue;

    use super::*;

    #[test]
    fn hop_headers_go() {
        let mut h = HeaderMap::new();
        for (n, v) in [
            ("connection", "keep-alive, x-secret-hop"),
            ("x-secret-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-authorization", "Basic abc"),
            ("proxy-connection", "keep-alive"),
            ("proxy-foo", "bar"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("content-length", "5"),
            ("upgrade", "websocket"),
            ("accept", "*/*"),
            ("user-agent", "t"),
        ] {
            h.append(HeaderName::from_static(n), HeaderValue::from_static(v));
        }
        strip_hop_headers(&mut h);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort();
        assert_eq!(left, ["accept", "user-agent"]);
    }
}
