//! Egress policy: which hosts and node-local ports a run may reach through
//! the node's egress proxy. An empty policy means no network at all.
//!
//! This module is the single implementation of host canonicalisation, allow
//! rule matching and address classification; the proxy (`oz0-egress`) calls
//! it for every request, so what `--allow` accepts at spec time is exactly
//! what the proxy lets through. It is pure: no lookups, no I/O.
//!
//! Threat model: the entries come from the caller (trusted to name what a
//! run gets, but possibly forwarding values from outside events); the targets
//! matched against them come from the sandboxed command (hostile). Both go
//! through the same canonicalisation, so spellings such as `EXAMPLE.com.`,
//! `127.1`, `0x7f.0.0.1`, `2130706433` or `[::ffff:127.0.0.1]` cannot slip
//! past a rule or the address checks.
//!
//! The work is split by responsibility into private submodules, each item
//! re-exported here (`oz0_policy::net::Egress` and so on):
//!
//! - `host`: host canonicalisation ([`Host`], [`HostName`]), `host:port`
//!   splitting and request targets ([`parse_target`]).
//! - `allow`: one `--allow` entry ([`AllowRule`], [`HostPattern`]).
//! - `egress`: a run's whole policy ([`Egress`]) and its decision for a
//!   target ([`Verdict`], [`DenyReason`]).
//! - `addr`: the address classes a name may not resolve to ([`AddrClass`],
//!   [`classify`]).

mod addr;
mod allow;
mod egress;
mod host;
#[cfg(test)]
mod tests;

use std::fmt;
use std::num::NonZeroU16;

use serde::Serialize;

pub use addr::{classify, AddrClass};
pub use allow::{AllowRule, HostPattern};
pub use egress::{DenyReason, Egress, Verdict};
pub use host::{parse_target, Host, HostName};

/// Most `--allow` entries a run may name.
pub const MAX_ALLOW: usize = 256;
/// Most `--forward` ports a run may name.
pub const MAX_FORWARD: usize = 64;
/// Longest `--allow` entry or request host, in bytes.
pub const MAX_ENTRY_LEN: usize = 300;
/// Longest DNS name (RFC 1035), without the trailing dot.
pub const MAX_NAME_LEN: usize = 253;
/// Longest DNS label.
pub const MAX_LABEL_LEN: usize = 63;

/// Why an egress entry or a request target was refused. Each variant names
/// the value and, where there is one, the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NetError {
    /// An empty entry.
    #[error("--allow: an entry is empty: name a host, e.g. --allow example.com or --allow example.com:443")]
    Empty,
    /// Too long.
    #[error("--allow {value:?}: longer than {MAX_ENTRY_LEN} bytes")]
    TooLong {
        /// The value (cut to the limit).
        value: String,
    },
    /// A URL was given where a host was expected.
    #[error("--allow {value:?}: a scheme is not part of a host: write just the host, e.g. --allow {hint}")]
    Scheme {
        /// The value.
        value: String,
        /// What to write instead.
        hint: String,
    },
    /// A path, query or fragment.
    #[error("--allow {value:?}: a path, query or fragment cannot be allowed, only a host[:port]: write --allow {hint}")]
    Path {
        /// The value.
        value: String,
        /// What to write instead.
        hint: String,
    },
    /// `user@host`.
    #[error(
        "--allow {value:?}: user information (`user@`) is not part of a host: write --allow {hint}"
    )]
    UserInfo {
        /// The value.
        value: String,
        /// What to write instead.
        hint: String,
    },
    /// Whitespace or control characters.
    #[error("--allow {value:?}: contains whitespace or a control character")]
    BadChar {
        /// The value.
        value: String,
    },
    /// `*` or `*.com`: would allow too much.
    #[error("--allow {value:?}: a wildcard must name a domain of at least two labels, e.g. *.example.com; `*` and `*.com` would allow too much")]
    WildcardTooBroad {
        /// The value.
        value: String,
    },
    /// A `*` anywhere but as the whole first label.
    #[error("--allow {value:?}: `*` is allowed only as the whole first label, e.g. *.example.com (strict subdomains)")]
    WildcardPlacement {
        /// The value.
        value: String,
    },
    /// A wildcard over IP addresses.
    #[error("--allow {value:?}: a wildcard cannot cover IP addresses: name each address")]
    WildcardIp {
        /// The value.
        value: String,
    },
    /// Not a valid host name.
    #[error("{value:?} is not a valid host name: {why}")]
    BadHost {
        /// The value.
        value: String,
        /// What is wrong.
        why: &'static str,
    },
    /// A port out of range or not a number.
    #[error("{value:?}: port {port:?} is not a number from 1 to 65535")]
    BadPort {
        /// The whole value.
        value: String,
        /// The port part.
        port: String,
    },
    /// `--forward 0`.
    #[error("--forward 0: a port must be from 1 to 65535")]
    ForwardZero,
    /// The same port forwarded twice.
    #[error("--forward {0} is named twice: name each port once")]
    ForwardDuplicate(u16),
    /// The same entry twice.
    #[error("--allow {0} is named twice (after canonicalisation): name each host once")]
    AllowDuplicate(String),
    /// Too many entries.
    #[error("{count} {flag} entries given, over the limit of {limit}")]
    TooMany {
        /// The flag.
        flag: &'static str,
        /// How many.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// A name that can never be reached through the proxy.
    #[error("--allow {value:?}: {why}")]
    Unreachable {
        /// The value.
        value: String,
        /// Why and what to do.
        why: &'static str,
    },
}

fn cut(value: &str) -> String {
    let mut end = value.len().min(MAX_ENTRY_LEN);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    value[..end].to_string()
}

/// A TCP port from 1 to 65535.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Port(NonZeroU16);

impl Port {
    /// A port, or `None` for 0.
    pub fn new(port: u16) -> Option<Self> {
        NonZeroU16::new(port).map(Port)
    }

    /// The number.
    pub fn get(self) -> u16 {
        self.0.get()
    }
}

impl fmt::Display for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
