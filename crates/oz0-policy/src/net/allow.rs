//! One `--allow HOST[:PORT]` entry: parsing it (with errors that show the
//! fix), the hosts it covers ([`HostPattern`]), and matching a canonical
//! target against it.

use std::fmt;
use std::net::IpAddr;

use serde::{Serialize, Serializer};

use super::host::{parse_ipv4_loose, parse_port, split_host_port};
use super::{cut, Host, HostName, NetError, Port, MAX_ENTRY_LEN};

/// Which hosts an allow rule covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// Exactly this name.
    Exact(HostName),
    /// Strict subdomains of this name (`*.example.com`), not the name itself.
    Subdomains(HostName),
    /// Exactly this address, named as a literal.
    Ip(IpAddr),
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Exact(n) => n.fmt(f),
            HostPattern::Subdomains(n) => write!(f, "*.{n}"),
            HostPattern::Ip(ip) => Host::Ip(*ip).fmt(f),
        }
    }
}

/// One validated `--allow HOST[:PORT]` entry. Without a port, every port
/// of the host is allowed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AllowRule {
    /// The hosts.
    pub host: HostPattern,
    /// The port, or any port.
    pub port: Option<Port>,
}

impl fmt::Display for AllowRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(p) => write!(f, "{}:{p}", self.host),
            None => self.host.fmt(f),
        }
    }
}

impl Serialize for AllowRule {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl AllowRule {
    /// Parses one `--allow` entry.
    pub fn parse(entry: &str) -> Result<AllowRule, NetError> {
        if entry.is_empty() {
            return Err(NetError::Empty);
        }
        if entry.len() > MAX_ENTRY_LEN {
            return Err(NetError::TooLong { value: cut(entry) });
        }
        let value = entry.to_string();
        if entry
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return Err(NetError::BadChar { value });
        }
        // Hints strip what does not belong, so the error shows the fix.
        if let Some((_, rest)) = entry.split_once("://") {
            return Err(NetError::Scheme {
                value,
                hint: hint_of(rest),
            });
        }
        if let Some(i) = entry.find(['/', '?', '#']) {
            return Err(NetError::Path {
                value,
                hint: hint_of(&entry[..i]),
            });
        }
        if let Some((_, host)) = entry.rsplit_once('@') {
            return Err(NetError::UserInfo {
                value,
                hint: hint_of(host),
            });
        }
        let (h, p) = split_host_port(entry);
        let port = p.map(|p| parse_port(entry, p)).transpose()?;
        let host = if let Some(base) = h.strip_prefix("*.") {
            if base.contains('*') {
                return Err(NetError::WildcardPlacement { value });
            }
            match Host::parse(base) {
                Ok(Host::Name(n)) if n.labels() >= 2 => HostPattern::Subdomains(n),
                Ok(Host::Name(_)) => return Err(NetError::WildcardTooBroad { value }),
                Ok(Host::Ip(_)) => return Err(NetError::WildcardIp { value }),
                Err(NetError::BadHost { .. }) if base.trim_end_matches('.').is_empty() => {
                    return Err(NetError::WildcardTooBroad { value })
                }
                // `*.1.2.3`: numeric last label, not a valid address either.
                Err(_) if parse_ipv4_loose(&base.to_ascii_lowercase()).is_some() => {
                    return Err(NetError::WildcardIp { value })
                }
                Err(e) => return Err(e),
            }
        } else if h == "*" {
            return Err(NetError::WildcardTooBroad { value });
        } else if h.contains('*') {
            return Err(NetError::WildcardPlacement { value });
        } else {
            match Host::parse(h)? {
                Host::Name(n) => HostPattern::Exact(n),
                Host::Ip(ip) => HostPattern::Ip(ip),
            }
        };
        if let HostPattern::Exact(n) | HostPattern::Subdomains(n) = &host {
            if n.is_invalid_tld() {
                return Err(NetError::Unreachable {
                    value,
                    why: "names under .invalid never resolve and are always refused",
                });
            }
            if n.is_localhost() {
                return Err(NetError::Unreachable {
                    value,
                    why:
                        "localhost is the node itself: use --forward PORT for a node-local service",
                });
            }
        }
        Ok(AllowRule { host, port })
    }

    /// True if this rule covers `host:port`. An IP literal is covered only
    /// by a rule naming that same address; names only by name rules.
    pub fn matches(&self, host: &Host, port: Port) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        match (&self.host, host) {
            (HostPattern::Exact(a), Host::Name(b)) => a == b,
            (HostPattern::Subdomains(base), Host::Name(b)) => b.is_strict_subdomain_of(base),
            (HostPattern::Ip(a), Host::Ip(b)) => a == b,
            _ => false,
        }
    }
}

fn hint_of(rest: &str) -> String {
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let host = &rest[..end];
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    if host.is_empty() {
        "example.com".to_string()
    } else {
        cut(host)
    }
}
