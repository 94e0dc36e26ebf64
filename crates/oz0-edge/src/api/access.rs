//! Who is asking: signed node requests (timestamp, signature, then nonce,
//! with nonces past their window swept now and then) and operator tokens.
//! A request that passes either marks its connection proven
//! (`crate::serve::proven`), which keeps the fleet's way in open when
//! anonymous connections fill theirs.

use std::sync::atomic::Ordering;

use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use base64::Engine;

use super::error::ApiResult;
use super::Edge;
use crate::auth::{self, AuthError};
use crate::store::NodeRow;
use crate::time::now_ms;
use crate::wire::ApiError;

/// How often nonces past their window are swept.
const SWEEP_EVERY_MS: i64 = 30_000;

fn header_str<'a>(h: &'a HeaderMap, name: &'static str) -> Result<&'a str, AuthError> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .ok_or(AuthError::Header(name))
}

pub(super) struct Signed<'a> {
    pub(super) node: &'a str,
    ts: i64,
    nonce: &'a str,
    sig: &'a str,
}

pub(super) fn signed_headers(h: &HeaderMap) -> Result<Signed<'_>, AuthError> {
    let node = header_str(h, auth::H_NODE)?;
    if !auth::is_node_id(node) {
        return Err(AuthError::Header(auth::H_NODE));
    }
    let ts = header_str(h, auth::H_TIMESTAMP)?
        .parse::<i64>()
        .map_err(|_| AuthError::Header(auth::H_TIMESTAMP))?;
    let nonce = header_str(h, auth::H_NONCE)?;
    if !auth::is_nonce(nonce) {
        return Err(AuthError::Header(auth::H_NONCE));
    }
    let sig = header_str(h, auth::H_SIGNATURE)?;
    if sig.len() != 86 {
        return Err(AuthError::Header(auth::H_SIGNATURE));
    }
    Ok(Signed {
        node,
        ts,
        nonce,
        sig,
    })
}

impl Edge {
    /// Checks the timestamp, the signature, then the nonce (so forged
    /// requests cannot use up nonces).
    pub(super) async fn check_signed(
        &self,
        method: &Method,
        uri: &Uri,
        s: &Signed<'_>,
        key: &ed25519_dalek::VerifyingKey,
        body: &[u8],
    ) -> ApiResult<i64> {
        let now = now_ms();
        within_skew(now, s.ts)?;
        let msg = auth::signed_message(method.as_str(), uri.path(), s.node, s.ts, s.nonce, body);
        auth::verify(key, s.node, &msg, s.sig)?;
        if !self
            .store
            .use_nonce(s.node, s.nonce, s.ts.saturating_add(2 * auth::MAX_SKEW_MS))
            .await?
        {
            return Err(AuthError::Replay(s.node.to_string()).into());
        }
        self.sweep(now);
        Ok(now)
    }

    fn sweep(&self, now: i64) {
        let last = self.last_sweep.load(Ordering::Relaxed);
        if now - last > SWEEP_EVERY_MS
            && self
                .last_sweep
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let store = self.store.clone();
            tokio::spawn(async move {
                if let Err(e) = store.expire_nonces(now).await {
                    crate::log::error(&format!("sweeping nonces: {e}"), None);
                }
            });
        }
    }

    /// Authenticates a request from a registered node.
    pub(super) async fn node_request(
        &self,
        method: &Method,
        uri: &Uri,
        h: &HeaderMap,
        body: &[u8],
    ) -> ApiResult<(NodeRow, i64)> {
        let s = signed_headers(h)?;
        let node = self
            .store
            .node(s.node)
            .await?
            .filter(|n| n.id == s.node)
            .ok_or_else(|| AuthError::UnknownNode(s.node.to_string()))?;
        if node.removed_ms.is_some() {
            return Err(super::node::removed(&node.id));
        }
        let key = auth::decode_key(&node.public_key)?;
        let now = self.check_signed(method, uri, &s, &key, body).await?;
        // The connections kept for the fleet and operators are for nodes
        // an operator let in: a node that holds only an enrolment token
        // (a leaked one, say) and waits for approval does not get them.
        if node.approved {
            crate::serve::proven();
        }
        self.seen_here(&node.id, now);
        // Taken for dead, it speaks again: it is up (whatever it asks).
        let node = if node.gone_ms.is_some() {
            self.store.back(&node.id, now).await?;
            NodeRow {
                gone_ms: None,
                last_seen_ms: now,
                ..node
            }
        } else {
            node
        };
        Ok((node, now))
    }

    /// An operator's request: the token as `Authorization: Bearer`, and
    /// only so. A browser sends a Basic password it has cached with any
    /// request a page of another site makes it send (a form's POST
    /// included), so a Basic password here would let any web page an
    /// operator opens approve, remove or cancel in their name; no page can
    /// make a browser send a Bearer header to another site.
    pub(super) fn operator(&self, h: &HeaderMap) -> ApiResult<()> {
        let presented = bearer(h);
        self.operator_token(
            presented.as_deref(),
            "this needs an operator token: send Authorization: Bearer <token>",
        )
    }

    /// The Nodes page (a `GET` that changes nothing, shown in a browser):
    /// the token as Bearer, or as the Basic password a browser asks for.
    /// Its answer is a page no other site can read or frame.
    pub(super) fn operator_in_browser(&self, h: &HeaderMap) -> ApiResult<()> {
        let presented = bearer(h).or_else(|| basic_password(h));
        self.operator_token(presented.as_deref(), "this page needs an operator token: send Authorization: Bearer <token>, or give it as the password when the browser asks")
    }

    fn operator_token(&self, presented: Option<&str>, reason: &str) -> ApiResult<()> {
        match presented {
            Some(t) if self.cfg.operator_tokens.iter().any(|d| d.matches(t)) => {
                crate::serve::proven();
                Ok(())
            }
            _ => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                reason,
            )),
        }
    }
}

/// Whether a request's timestamp `ts` is near enough the edge's clock.
/// The timestamp is the sender's: any `i64` at all, so the distance is
/// taken without a subtraction that could overflow.
fn within_skew(now: i64, ts: i64) -> Result<(), AuthError> {
    let skew = now.abs_diff(ts);
    if skew > auth::MAX_SKEW_MS.unsigned_abs() {
        return Err(AuthError::Skew(i64::try_from(skew).unwrap_or(i64::MAX)));
    }
    Ok(())
}

/// The token of `Authorization: Bearer <token>`.
fn bearer(h: &HeaderMap) -> Option<String> {
    let v = h.get(header::AUTHORIZATION)?.to_str().ok()?;
    v.strip_prefix("Bearer ").map(|t| t.trim().to_string())
}

/// The password of `Authorization: Basic <user:password>`.
fn basic_password(h: &HeaderMap) -> Option<String> {
    let v = h.get(header::AUTHORIZATION)?.to_str().ok()?;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(v.strip_prefix("Basic ")?.trim())
        .ok()?;
    let s = String::from_utf8(raw).ok()?;
    s.split_once(':').map(|(_, p)| p.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timestamp_at_either_end_of_i64_is_refused_as_skew() {
        let now = now_ms();
        assert!(within_skew(now, now).is_ok());
        assert!(within_skew(now, now - auth::MAX_SKEW_MS).is_ok());
        assert!(within_skew(now, now + auth::MAX_SKEW_MS + 1).is_err());
        for ts in [i64::MIN, i64::MIN + 1, -1, i64::MAX] {
            assert!(
                matches!(within_skew(now, ts), Err(AuthError::Skew(s)) if s > auth::MAX_SKEW_MS),
                "{ts}"
            );
        }
        // Distances past i64::MAX are said as i64::MAX.
        assert!(matches!(
            within_skew(0, i64::MIN),
            Err(AuthError::Skew(i64::MAX))
        ));
        assert!(matches!(
            within_skew(i64::MAX, i64::MIN),
            Err(AuthError::Skew(i64::MAX))
        ));
    }
}
