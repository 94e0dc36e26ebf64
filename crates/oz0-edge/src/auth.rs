//! Who may talk to the edge: node signatures, tenant enrolment tokens,
//! operator tokens.
//!
//! A node request carries four headers ([`H_NODE`], [`H_TIMESTAMP`],
//! [`H_NONCE`], [`H_SIGNATURE`]); the signature is ed25519 over
//! [`signed_message`], which binds the method, the path, the node id, the
//! timestamp, the nonce and the exact body bytes. The edge refuses a bad
//! signature, a timestamp outside [`MAX_SKEW_MS`] and a nonce it has seen
//! (nonces are remembered in the store until the timestamp window closes,
//! so every replica refuses a replay).

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use ed25519_dalek::{Signature, VerifyingKey};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Header: the node id.
pub const H_NODE: &str = "oz0-node";
/// Header: Unix milliseconds when the request was signed.
pub const H_TIMESTAMP: &str = "oz0-timestamp";
/// Header: 16 random bytes, base64url.
pub const H_NONCE: &str = "oz0-nonce";
/// Header: the ed25519 signature, base64url.
pub const H_SIGNATURE: &str = "oz0-signature";
/// How far a request's timestamp may be from the edge's clock.
pub const MAX_SKEW_MS: i64 = 120_000;
/// Shortest enrolment or operator token accepted.
pub const MIN_TOKEN_CHARS: usize = 16;

/// Authentication failures (each answered with 401, or 403 for a node of
/// another tenant).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuthError {
    /// A header is missing or malformed.
    #[error("header {0} is missing or malformed: sign requests with oz0_edge::client")]
    Header(&'static str),
    /// The node is not registered.
    #[error("node {0} is not registered: register it with the tenant's enrolment token first")]
    UnknownNode(String),
    /// Timestamp outside the window.
    #[error("timestamp is {0} ms away from the edge's clock (at most {MAX_SKEW_MS} ms): sync the node's clock")]
    Skew(i64),
    /// Signature does not verify.
    #[error("signature does not verify for node {0}: the request was altered or signed with another key")]
    Signature(String),
    /// Nonce seen before.
    #[error("nonce already used by node {0}: a replayed request is refused")]
    Replay(String),
    /// Wrong or missing token.
    #[error("missing or wrong token: send Authorization: Bearer <token>")]
    Token,
    /// Public key malformed.
    #[error("public key is not a valid ed25519 key (32 bytes, base64url)")]
    PublicKey,
}

/// What a node's new key signs when it replaces the old one: the node id
/// and the new key, so the proof is good for that rotation only.
pub fn rotation_message(node_id: &str, new_public_key: &str) -> Vec<u8> {
    format!("oz0-edge-rotate-v1\n{node_id}\n{new_public_key}").into_bytes()
}

/// The node id for a public key: `n` and the first 12 bytes of its SHA-256,
/// in hex.
pub fn node_id(public_key: &VerifyingKey) -> String {
    let d = Sha256::digest(public_key.as_bytes());
    let mut s = String::with_capacity(25);
    s.push('n');
    for b in &d[..12] {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// `^n[0-9a-f]{24}$`.
pub fn is_node_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 25
        && b[0] == b'n'
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

/// The bytes a node signs.
pub fn signed_message(
    method: &str,
    path: &str,
    node: &str,
    ts_ms: i64,
    nonce: &str,
    body: &[u8],
) -> Vec<u8> {
    let mut m = Vec::with_capacity(body.len() + 128);
    m.extend_from_slice(b"oz0-edge-request-v1\n");
    for part in [method, path, node, &ts_ms.to_string(), nonce] {
        m.extend_from_slice(part.as_bytes());
        m.push(b'\n');
    }
    m.extend_from_slice(body);
    m
}

/// Encodes a public key for the wire.
pub fn encode_key(k: &VerifyingKey) -> String {
    B64.encode(k.as_bytes())
}

/// Decodes a public key from the wire.
pub fn decode_key(s: &str) -> Result<VerifyingKey, AuthError> {
    if s.len() != 43 {
        return Err(AuthError::PublicKey);
    }
    let bytes = B64.decode(s).map_err(|_| AuthError::PublicKey)?;
    let arr: [u8; 32] = bytes.try_into().map_err(|_| AuthError::PublicKey)?;
    let k = VerifyingKey::from_bytes(&arr).map_err(|_| AuthError::PublicKey)?;
    if k.is_weak() {
        return Err(AuthError::PublicKey);
    }
    Ok(k)
}

/// `^[A-Za-z0-9_-]{22}$`: 16 bytes in base64url.
pub fn is_nonce(s: &str) -> bool {
    s.len() == 22
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
}

/// Verifies a signature (strictly: no malleable encodings).
pub fn verify(key: &VerifyingKey, node: &str, msg: &[u8], sig_b64: &str) -> Result<(), AuthError> {
    let bytes = B64
        .decode(sig_b64)
        .map_err(|_| AuthError::Header(H_SIGNATURE))?;
    let arr: [u8; 64] = bytes
        .try_into()
        .map_err(|_| AuthError::Header(H_SIGNATURE))?;
    key.verify_strict(msg, &Signature::from_bytes(&arr))
        .map_err(|_| AuthError::Signature(node.to_string()))
}

/// A secret token, kept only as its SHA-256 digest.
#[derive(Clone)]
pub struct TokenDigest([u8; 32]);

impl std::fmt::Debug for TokenDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenDigest(…)")
    }
}

impl TokenDigest {
    /// Digests a token.
    pub fn new(token: &str) -> TokenDigest {
        TokenDigest(Sha256::digest(token.as_bytes()).into())
    }

    /// Constant-time comparison with a presented token.
    pub fn matches(&self, presented: &str) -> bool {
        let d: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        bool::from(self.0.ct_eq(&d))
    }
}

/// 16 random bytes, base64url (nonces, lease ids).
pub fn random_id() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the OS random source failed");
    B64.encode(b)
}

/// A new job's id: a [`random_id`] that does not begin with `-`, so that
/// no command line reads it as a flag (`oz0 job show -x…` would be one in
/// 64 ids).
pub fn job_id() -> String {
    loop {
        let id = random_id();
        if !id.starts_with('-') {
            return id;
        }
    }
}

/// A file of secrets (tokens, a release key) that others may read, or
/// that cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrivateFileError {
    /// Readable by others.
    #[error("{} has mode {mode:o}, readable by others: chmod 600 {}", path.display(), path.display())]
    Open {
        /// The file.
        path: std::path::PathBuf,
        /// Its mode bits.
        mode: u32,
    },
    /// Not readable.
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The text of a file of secrets, refused when others may read it.
pub fn read_private(path: &std::path::Path) -> Result<String, PrivateFileError> {
    let read = |source| PrivateFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).map_err(read)?.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(PrivateFileError::Open {
                path: path.to_path_buf(),
                mode: mode & 0o777,
            });
        }
    }
    std::fs::read_to_string(path).map_err(read)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};

    #[test]
    fn sign_and_verify() {
        let sk = SigningKey::from_bytes(&[7u8; 32]);
        let id = node_id(&sk.verifying_key());
        assert!(is_node_id(&id));
        let msg = signed_message(
            "POST",
            "/v1/node/facts",
            &id,
            5,
            "AAAAAAAAAAAAAAAAAAAAAA",
            b"{}",
        );
        let sig = B64.encode(sk.sign(&msg).to_bytes());
        assert!(verify(&sk.verifying_key(), &id, &msg, &sig).is_ok());
        let other = signed_message(
            "POST",
            "/v1/node/poll",
            &id,
            5,
            "AAAAAAAAAAAAAAAAAAAAAA",
            b"{}",
        );
        assert!(verify(&sk.verifying_key(), &id, &other, &sig).is_err());
        assert_eq!(
            decode_key(&encode_key(&sk.verifying_key())).unwrap(),
            sk.verifying_key()
        );
        assert!(decode_key("AAAA").is_err());
    }

    #[test]
    fn tokens_compare_by_digest() {
        let t = TokenDigest::new("a-long-enough-secret");
        assert!(t.matches("a-long-enough-secret"));
        assert!(!t.matches("a-long-enough-secreT"));
        assert_eq!(format!("{t:?}"), "TokenDigest(…)");
        assert!(is_nonce(&random_id()));
        // Job ids are nonces that never begin with '-'.
        for _ in 0..2000 {
            let id = job_id();
            assert!(is_nonce(&id) && !id.starts_with('-'), "{id}");
        }
    }
}
