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
//!
//! Here is what a caller sees (the client, its options and errors); the
//! token dance and the credentials file are in `auth`, a GET by digest
//! with its redirects and checks in `fetch`, connections in `http`.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::manifest::{Descriptor, MANIFEST_TYPES, MAX_MANIFEST};
use crate::reference::{shown, valid_host, Digest, Reference};

mod auth;
mod fetch;
mod http;

use auth::read_credentials;
use fetch::Want;
use http::tls_config;

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
}

#[cfg(test)]
pub(crate) mod tests;
