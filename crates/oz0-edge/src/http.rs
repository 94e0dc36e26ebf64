//! A minimal HTTP/1 client over one connection per request (hyper).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;

use crate::client::ClientError;

/// Longest the client waits for one request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest response the client reads.
pub const MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

/// `http://HOST:PORT`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeUrl {
    host: String,
    port: u16,
}

impl EdgeUrl {
    /// Parses `http://HOST[:PORT][/]`.
    pub fn parse(s: &str) -> Result<EdgeUrl, ClientError> {
        let bad = || ClientError::Url(s.chars().take(100).collect());
        let rest = s.strip_prefix("http://").ok_or_else(bad)?;
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
        let port = match port.strip_prefix(':') {
            Some(p) => p.parse().map_err(|_| bad())?,
            None if port.is_empty() => 80,
            None => port.parse().map_err(|_| bad())?,
        };
        if host.is_empty() {
            return Err(bad());
        }
        Ok(EdgeUrl { host, port })
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
        write!(f, "http://{}", self.authority())
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
    let stream = tokio::net::TcpStream::connect((url.host.as_str(), url.port))
        .await
        .map_err(|source| ClientError::Connect {
            edge: url.to_string(),
            source,
        })?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| ClientError::Http(e.to_string()))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", url.authority())
        .header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let req = req
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| ClientError::Http(e.to_string()))?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| ClientError::Http(e.to_string()))?;
    let status = resp.status().as_u16();
    let body = Limited::new(resp.into_body(), MAX_RESPONSE_BYTES)
        .collect()
        .await
        .map_err(|e| ClientError::Http(e.to_string()))?
        .to_bytes();
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            EdgeUrl::parse("http://127.0.0.1:8440").unwrap().to_string(),
            "http://127.0.0.1:8440"
        );
        assert_eq!(
            EdgeUrl::parse("http://edge.example/").unwrap().to_string(),
            "http://edge.example:80"
        );
        assert_eq!(
            EdgeUrl::parse("http://[::1]:9").unwrap().to_string(),
            "http://[::1]:9"
        );
        for bad in [
            "https://x",
            "http://",
            "http://u:p@x",
            "http://x/api",
            "http://x:99999",
            "x:1",
        ] {
            assert!(EdgeUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
