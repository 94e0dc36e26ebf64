//! Host canonicalisation: the one place a host, as `--allow` names it or as
//! a request targets it, becomes a canonical [`Host`] (IPv6 in brackets or
//! bare, IPv4 in every `inet_aton` spelling, names case-folded without a
//! trailing dot), and `host:port` splitting and port parsing.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::{cut, NetError, Port, MAX_ENTRY_LEN, MAX_LABEL_LEN, MAX_NAME_LEN};

/// A canonical DNS name: lowercase ASCII, no trailing dot, labels of
/// letters, digits, `-` and `_`, and a last label that is not all digits
/// (those are IPv4 spellings, see [`Host::parse`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostName(String);

impl HostName {
    /// The canonical text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True for `x.invalid` and `invalid` (RFC 6761: never resolves, so the
    /// proxy refuses it before any lookup).
    pub fn is_invalid_tld(&self) -> bool {
        self.0 == "invalid" || self.0.ends_with(".invalid")
    }

    /// True for `localhost` and names under `.localhost` (RFC 6761).
    pub fn is_localhost(&self) -> bool {
        self.0 == "localhost" || self.0.ends_with(".localhost")
    }

    /// Number of labels.
    pub fn labels(&self) -> usize {
        self.0.split('.').count()
    }

    /// True if `self` is a strict subdomain of `base` (`a.example.com` of
    /// `example.com`, not `example.com` itself nor `badexample.com`).
    pub fn is_strict_subdomain_of(&self, base: &HostName) -> bool {
        self.0.len() > base.0.len() + 1
            && self.0.ends_with(base.0.as_str())
            && self.0.as_bytes()[self.0.len() - base.0.len() - 1] == b'.'
    }
}

impl fmt::Display for HostName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A canonical request target host: a DNS name or an IP address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// A DNS name.
    Name(HostName),
    /// An IP address (IPv4-mapped IPv6 addresses are stored as IPv4).
    Ip(IpAddr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => n.fmt(f),
            Host::Ip(IpAddr::V4(ip)) => ip.fmt(f),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
        }
    }
}

fn bad_host(value: &str, why: &'static str) -> NetError {
    NetError::BadHost {
        value: cut(value),
        why,
    }
}

impl Host {
    /// Canonicalises a host as it appears in a URL authority or a CONNECT
    /// target (without the port): IPv6 in brackets, IPv4 in any of the
    /// spellings `inet_aton` and URL parsers accept (`127.1`, `0x7f.0.0.1`,
    /// `0177.0.0.1`, `2130706433`), names case-folded with one trailing dot
    /// removed. Bare IPv6 (`::1`) is accepted too.
    pub fn parse(s: &str) -> Result<Host, NetError> {
        if s.is_empty() {
            return Err(bad_host(s, "it is empty"));
        }
        if s.len() > MAX_ENTRY_LEN {
            return Err(NetError::TooLong { value: cut(s) });
        }
        if let Some(inner) = s.strip_prefix('[') {
            let inner = inner
                .strip_suffix(']')
                .ok_or_else(|| bad_host(s, "an IPv6 address in brackets lacks its `]`"))?;
            let ip: Ipv6Addr = inner.parse().map_err(|_| {
                bad_host(
                    s,
                    "not an IPv6 address (zone ids like %eth0 are not accepted)",
                )
            })?;
            return Ok(Host::Ip(IpAddr::V6(ip).to_canonical()));
        }
        if s.contains(':') {
            let ip: Ipv6Addr = s
                .parse()
                .map_err(|_| bad_host(s, "contains `:` but is not an IPv6 address"))?;
            return Ok(Host::Ip(IpAddr::V6(ip).to_canonical()));
        }
        let lower = s.to_ascii_lowercase();
        let name = lower.strip_suffix('.').unwrap_or(&lower);
        if name.is_empty() {
            return Err(bad_host(s, "it is only a dot"));
        }
        if let Some(v4) = parse_ipv4_loose(name) {
            return v4
                .map(|ip| Host::Ip(IpAddr::V4(ip)))
                .ok_or_else(|| bad_host(s, "its last label is numeric, so it must be an IPv4 address, and it is not a valid one"));
        }
        check_name(s, name)?;
        Ok(Host::Name(HostName(name.to_string())))
    }

    /// True for an IP address, as opposed to a name.
    pub fn is_ip(&self) -> bool {
        matches!(self, Host::Ip(_))
    }
}

fn check_name(orig: &str, name: &str) -> Result<(), NetError> {
    if !name.is_ascii() {
        return Err(bad_host(
            orig,
            "it is not ASCII: write internationalised names in their xn-- (punycode) form",
        ));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(bad_host(orig, "longer than 253 characters"));
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(bad_host(
                orig,
                "it has an empty label (`..` or a leading dot)",
            ));
        }
        if label.len() > MAX_LABEL_LEN {
            return Err(bad_host(orig, "a label is longer than 63 characters"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(bad_host(
                orig,
                "labels may hold only letters, digits, `-` and `_`",
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(bad_host(orig, "a label starts or ends with `-`"));
        }
    }
    Ok(())
}

/// `None`: not an IPv4 spelling at all (the last label is not numeric).
/// `Some(None)`: looks like IPv4 (numeric last label) but is not valid.
/// `Some(Some(ip))`: an IPv4 address in one of the `inet_aton` forms.
///
/// Following the WHATWG URL host parser: a name whose last label is a number
/// (decimal, `0x` hex or leading-zero octal) is an IPv4 address or invalid.
pub(super) fn parse_ipv4_loose(name: &str) -> Option<Option<Ipv4Addr>> {
    let parts: Vec<&str> = name.split('.').collect();
    let last = parts.last()?;
    parse_ipv4_number(last)?;
    if parts.len() > 4 {
        return Some(None);
    }
    let mut nums = Vec::with_capacity(4);
    for p in &parts {
        match parse_ipv4_number(p) {
            Some(Some(n)) => nums.push(n),
            _ => return Some(None),
        }
    }
    let (last, head) = nums.split_last()?;
    if head.iter().any(|&n| n > 255) {
        return Some(None);
    }
    // At most 3 (4 parts at most, checked above).
    let Ok(head_len) = u32::try_from(head.len()) else {
        return Some(None);
    };
    let bits = 8 * (4 - head_len);
    if bits < 32 && *last >= (1u64 << bits) {
        return Some(None);
    }
    if *last > u64::from(u32::MAX) {
        return Some(None);
    }
    let mut v: u64 = *last;
    for (i, n) in (0u32..).zip(head) {
        v |= n << (24 - 8 * i);
    }
    // Within 32 bits by the checks above; a value beyond is no address.
    Some(u32::try_from(v).ok().map(Ipv4Addr::from))
}

/// `None`: not a number (so the label is part of a name). `Some(None)`: a
/// number (all decimal digits, or `0x` and hex digits, as the WHATWG URL
/// parser defines it) that is malformed or out of range. `Some(Some(n))`.
fn parse_ipv4_number(s: &str) -> Option<Option<u64>> {
    let numeric = !s.is_empty()
        && (s.bytes().all(|b| b.is_ascii_digit())
            || s.strip_prefix("0x")
                .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit())));
    if !numeric {
        return None;
    }
    let (digits, radix) = if let Some(h) = s.strip_prefix("0x") {
        (h, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    if digits.is_empty() {
        return Some(Some(0));
    }
    // Long runs of digits overflow: refuse rather than wrap.
    Some(
        u64::from_str_radix(digits, radix)
            .ok()
            .filter(|&n| n <= u64::from(u32::MAX)),
    )
}

/// Splits `host[:port]` (IPv6 in brackets when a port follows) into the host
/// text and the optional port text.
pub(super) fn split_host_port(s: &str) -> (&str, Option<&str>) {
    if s.starts_with('[') {
        if let Some(end) = s.find(']') {
            let rest = &s[end + 1..];
            return match rest.strip_prefix(':') {
                Some(p) => (&s[..=end], Some(p)),
                None => (s, None),
            };
        }
        return (s, None);
    }
    match s.matches(':').count() {
        1 => {
            let (h, p) = s.split_once(':').expect("one colon");
            (h, Some(p))
        }
        // Zero colons: a bare host; more: a bare IPv6 address.
        _ => (s, None),
    }
}

pub(super) fn parse_port(whole: &str, p: &str) -> Result<Port, NetError> {
    let bad = || NetError::BadPort {
        value: cut(whole),
        port: cut(p),
    };
    if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    p.parse::<u16>().ok().and_then(Port::new).ok_or_else(bad)
}

/// Parses a request target `host:port` (a CONNECT target, or a URL
/// authority with its port filled in): the same canonicalisation as
/// `--allow`. The port is required.
pub fn parse_target(authority: &str) -> Result<(Host, Port), NetError> {
    let (h, p) = split_host_port(authority);
    let p = p.ok_or_else(|| NetError::BadPort {
        value: cut(authority),
        port: String::new(),
    })?;
    Ok((Host::parse(h)?, parse_port(authority, p)?))
}
