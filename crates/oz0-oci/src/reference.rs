//! Image references and digests, parsed once: `oci:REGISTRY/NAME@sha256:…`.
//!
//! An image is named by digest only, so what runs is what was reviewed,
//! never what a tag points at today. The registry is named, never implied
//! (no silent `docker.io`).

use std::fmt;

/// Longest reference taken.
pub const MAX_REFERENCE: usize = 512;

/// A `sha256:<64 lower-case hex>` content digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    hex: String,
}

impl Digest {
    /// Parses `sha256:<64 lower-case hex digits>`.
    pub fn parse(s: &str) -> Option<Digest> {
        let hex = s.strip_prefix("sha256:")?;
        Digest::from_hex(hex)
    }

    /// The digest of 64 lower-case hex digits.
    pub fn from_hex(hex: &str) -> Option<Digest> {
        let ok = hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        ok.then(|| Digest { hex: hex.into() })
    }

    /// The digest of `data`.
    pub fn of(data: &[u8]) -> Digest {
        use sha2::Digest as _;
        Digest::from_sha256(sha2::Sha256::digest(data).as_slice())
    }

    /// The digest whose 32 bytes are `bytes`.
    pub(crate) fn from_sha256(bytes: &[u8]) -> Digest {
        let mut hex = String::with_capacity(64);
        for b in bytes {
            hex.push_str(&format!("{b:02x}"));
        }
        Digest { hex }
    }

    /// The 64 hex digits (a file name in the cache).
    pub fn hex(&self) -> &str {
        &self.hex
    }

    /// The first 12 hex digits, for messages.
    pub fn short(&self) -> &str {
        &self.hex[..12]
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Digest, D::Error> {
        let s = String::deserialize(d)?;
        Digest::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!("{} is not sha256:<64 hex digits>", shown(&s)))
        })
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex)
    }
}

/// `REGISTRY/NAME@sha256:…`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// The registry as named (`ghcr.io`, `127.0.0.1:5000`), lower case.
    pub registry: String,
    /// The repository (`acme/fetch-mcp`).
    pub repository: String,
    /// The digest: of an image manifest or of an index.
    pub digest: Digest,
}

/// Why a reference is refused; each names the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReferenceError {
    /// Named by a tag (or by nothing), which can point at another image
    /// tomorrow.
    #[error("{shown} names a tag, not a digest: a tag can point at another image tomorrow, so the node pulls images by digest only. Pin it: `skopeo inspect --format '{{{{.Digest}}}}' docker://{name}:{tag}` prints the digest; then name oci:{name}@sha256:<that digest>")]
    Tag {
        /// The reference as given (escaped).
        shown: String,
        /// `REGISTRY/NAME`.
        name: String,
        /// The tag (`latest` when none was named).
        tag: String,
    },
    /// Anything else malformed.
    #[error("{shown} is not an image reference: {why}; name one as oci:REGISTRY/NAME@sha256:<64 hex digits>, e.g. oci:ghcr.io/acme/tool@sha256:4f6c…")]
    Malformed {
        /// The reference as given (escaped).
        shown: String,
        /// What is wrong.
        why: String,
    },
}

/// `s` shown in a message: at most 200 characters, control characters
/// escaped (a reference may come from a job).
pub(crate) fn shown(s: &str) -> String {
    let cut: String = s.chars().take(200).collect();
    let more = if s.chars().count() > 200 { "…" } else { "" };
    format!("{:?}{more}", cut)
}

impl Reference {
    /// Parses `[oci:]REGISTRY/NAME@sha256:<hex>`.
    pub fn parse(s: &str) -> Result<Reference, ReferenceError> {
        let bad = |why: &str| ReferenceError::Malformed {
            shown: shown(s),
            why: why.into(),
        };
        if s.len() > MAX_REFERENCE {
            return Err(bad(&format!("it is over {MAX_REFERENCE} bytes")));
        }
        let body = s.strip_prefix("oci:").unwrap_or(s);
        let (name, digest) = match body.split_once('@') {
            Some((n, d)) => (n, Some(d)),
            None => (body, None),
        };
        let (registry, path) = name
            .split_once('/')
            .ok_or_else(|| bad("it names no registry (REGISTRY/NAME)"))?;
        if !(registry.contains('.') || registry.contains(':') || registry == "localhost") {
            return Err(bad(&format!(
                "{} is not a registry host (a host name with a dot, HOST:PORT or localhost; Docker Hub is docker.io)",
                shown(registry)
            )));
        }
        if !valid_host(registry) {
            return Err(bad(&format!("{} is not a host[:port]", shown(registry))));
        }
        // A tag is after the last '/' of the path.
        let (repository, tag) = match path.rsplit_once('/') {
            Some((dir, last)) => match last.split_once(':') {
                Some((l, t)) => (format!("{dir}/{l}"), Some(t)),
                None => (path.to_string(), None),
            },
            None => match path.split_once(':') {
                Some((l, t)) => (l.to_string(), Some(t)),
                None => (path.to_string(), None),
            },
        };
        let Some(digest) = digest else {
            return Err(ReferenceError::Tag {
                shown: shown(s),
                name: format!("{registry}/{repository}"),
                tag: tag.unwrap_or("latest").into(),
            });
        };
        if tag.is_some() {
            return Err(bad("it names both a tag and a digest: drop the tag"));
        }
        if !valid_repository(&repository) {
            return Err(bad(&format!(
                "the repository {} may hold lower-case components of a-z, 0-9, '.', '_', '-' separated by '/'",
                shown(&repository)
            )));
        }
        let digest = Digest::parse(digest)
            .ok_or_else(|| bad("the digest is not sha256: and 64 lower-case hex digits"))?;
        Ok(Reference {
            registry: registry.to_ascii_lowercase(),
            repository,
            digest,
        })
    }

    /// The host and port the registry's API is at (Docker Hub's is not at
    /// `docker.io`).
    pub fn api_host(&self) -> &str {
        if self.registry == "docker.io" || self.registry == "index.docker.io" {
            "registry-1.docker.io"
        } else {
            &self.registry
        }
    }

    /// The repository as the API names it (Docker Hub's official images
    /// are under `library/`).
    pub fn api_repository(&self) -> String {
        if self.api_host() == "registry-1.docker.io" && !self.repository.contains('/') {
            format!("library/{}", self.repository)
        } else {
            self.repository.clone()
        }
    }

    /// `REGISTRY/NAME` (no digest).
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "oci:{}/{}@{}",
            self.registry, self.repository, self.digest
        )
    }
}

/// `host`, `host:port` or `[v6]:port`.
pub(crate) fn valid_host(s: &str) -> bool {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        match rest.split_once(']') {
            Some((h, p)) => (h, p.strip_prefix(':').map(Some).unwrap_or(None)),
            None => return false,
        }
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|n| n > 0));
    let host_ok = !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b':')
        && !host.starts_with(['-', '.']);
    port_ok && host_ok
}

/// The distribution spec's repository grammar: components of
/// `[a-z0-9]+` joined by `.`, `_`, `__` or `-`s, separated by `/`.
fn valid_repository(r: &str) -> bool {
    if r.is_empty() || r.len() > 255 {
        return false;
    }
    r.split('/').all(|c| {
        let b = c.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter()
                .all(|&x| x.is_ascii_lowercase() || x.is_ascii_digit() || b"._-".contains(&x))
            && !c.contains("..")
            && !c.contains("___")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:4f6c0d1b5e8a4f6c0d1b5e8a4f6c0d1b5e8a4f6c0d1b5e8a4f6c0d1b5e8a4f6c";

    #[test]
    fn references() {
        let r = Reference::parse(&format!("oci:ghcr.io/acme/fetch-mcp@{D}")).unwrap();
        assert_eq!(r.registry, "ghcr.io");
        assert_eq!(r.repository, "acme/fetch-mcp");
        assert_eq!(r.to_string(), format!("oci:ghcr.io/acme/fetch-mcp@{D}"));
        let r = Reference::parse(&format!("127.0.0.1:5000/x@{D}")).unwrap();
        assert_eq!(r.registry, "127.0.0.1:5000");
        let r = Reference::parse(&format!("docker.io/alpine@{D}")).unwrap();
        assert_eq!(r.api_host(), "registry-1.docker.io");
        assert_eq!(r.api_repository(), "library/alpine");
    }

    #[test]
    fn tags_are_refused_with_the_way_to_the_digest() {
        for (s, name, tag) in [
            ("oci:ghcr.io/acme/x:1.2", "ghcr.io/acme/x", "1.2"),
            ("127.0.0.1:5000/x", "127.0.0.1:5000/x", "latest"),
            ("localhost/a/b:v1", "localhost/a/b", "v1"),
        ] {
            let e = Reference::parse(s).unwrap_err();
            assert_eq!(
                e,
                ReferenceError::Tag {
                    shown: shown(s),
                    name: name.into(),
                    tag: tag.into()
                }
            );
            let m = e.to_string();
            assert!(
                m.contains(&format!(
                    "skopeo inspect --format '{{{{.Digest}}}}' docker://{name}:{tag}"
                )),
                "{m}"
            );
        }
    }

    #[test]
    fn malformed_references_are_refused() {
        for s in [
            format!("alpine@{D}"),
            format!("ghcr.io/acme/x:1@{D}"),
            "ghcr.io/acme/x@sha256:abc".into(),
            format!("ghcr.io/ACME/x@{D}"),
            format!("ghcr.io/a/../b@{D}"),
            format!("gh\u{1b}cr.io/a@{D}"),
            format!("ghcr.io:99999/a@{D}"),
            format!("ghcr.io/a@{}", D.to_uppercase()),
        ] {
            let e = Reference::parse(&s).unwrap_err();
            assert!(matches!(e, ReferenceError::Malformed { .. }), "{s}: {e}");
            assert!(!e.to_string().contains('\u{1b}'), "{e}");
        }
    }

    #[test]
    fn digests() {
        assert_eq!(
            Digest::of(b"").to_string(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert!(Digest::parse("sha512:00").is_none());
    }
}
