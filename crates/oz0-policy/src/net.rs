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

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::num::NonZeroU16;

use serde::{Serialize, Serializer};

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

fn cut(value: &str) -> String {
    let mut end = value.len().min(MAX_ENTRY_LEN);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    value[..end].to_string()
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
fn parse_ipv4_loose(name: &str) -> Option<Option<Ipv4Addr>> {
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
fn split_host_port(s: &str) -> (&str, Option<&str>) {
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

fn parse_port(whole: &str, p: &str) -> Result<Port, NetError> {
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

/// A run's egress policy. `Default` is no egress at all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Egress {
    /// `--allow` rules, canonical, in the order given.
    pub allow: Vec<AllowRule>,
    /// `--forward` ports, in the order given.
    pub forward: Vec<Port>,
}

/// What the policy says about a request target, before any lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A forwarded node-local port: dial `127.0.0.1:port`.
    Forward(Port),
    /// An IP literal the run names: dial exactly it, no address check.
    Literal(IpAddr, Port),
    /// A name a rule allows: resolve it once, keep only the addresses
    /// [`Egress::address_ok`] accepts, and dial one of those.
    Resolve(HostName, Port),
    /// Refused before any lookup.
    Deny(DenyReason),
}

/// Why a target was refused. `Display` is the sentence the proxy puts in
/// the 403 body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DenyReason {
    /// Under `.invalid`.
    InvalidTld,
    /// No rule covers it.
    NotAllowed,
    /// `localhost` on a port that is not forwarded.
    NotForwarded,
    /// Every address of an allowed name is restricted.
    RestrictedAddress(AddrClass),
    /// An allowed name has no address.
    NoAddress,
}

impl fmt::Display for DenyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DenyReason::InvalidTld => f.write_str("names under .invalid are refused before any lookup"),
            DenyReason::NotAllowed => f.write_str("not in this run's allowlist"),
            DenyReason::NotForwarded => f.write_str("this node-local port is not forwarded to this run (--forward PORT)"),
            DenyReason::RestrictedAddress(c) => write!(
                f,
                "the name resolves only to {c} addresses, which are refused unless the run names the address itself"
            ),
            DenyReason::NoAddress => f.write_str("the name has no address"),
        }
    }
}

/// Address classes a name may not resolve to (SSRF guard).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AddrClass {
    /// `0.0.0.0/8`, `::`.
    Unspecified,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918 and similar non-global IPv4 ranges.
    Private,
    /// `100.64.0.0/10`.
    Cgnat,
    /// `169.254.0.0/16`, `fe80::/10`.
    LinkLocal,
    /// Cloud metadata endpoints (`169.254.169.254`, `fd00:ec2::254`).
    Metadata,
    /// `fc00::/7`.
    UniqueLocal,
    /// Multicast.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// Reserved, documentation or benchmarking ranges.
    Reserved,
    /// One of the node's own interface addresses.
    OwnInterface,
}

impl fmt::Display for AddrClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AddrClass::Unspecified => "unspecified",
            AddrClass::Loopback => "loopback",
            AddrClass::Private => "private",
            AddrClass::Cgnat => "carrier-grade NAT",
            AddrClass::LinkLocal => "link-local",
            AddrClass::Metadata => "cloud metadata",
            AddrClass::UniqueLocal => "unique-local",
            AddrClass::Multicast => "multicast",
            AddrClass::Broadcast => "broadcast",
            AddrClass::Reserved => "reserved",
            AddrClass::OwnInterface => "the node's own",
        })
    }
}

/// The class of a non-public address, or `None` for an address a name may
/// resolve to. IPv6 addresses that embed IPv4 (mapped, compatible, NAT64
/// `64:ff9b::/96`, 6to4 `2002::/16`) are judged by the embedded address.
pub fn classify(ip: IpAddr) -> Option<AddrClass> {
    match ip.to_canonical() {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<AddrClass> {
    let o = ip.octets();
    Some(match o {
        [169, 254, 169, 254] | [100, 100, 100, 200] => AddrClass::Metadata,
        [0, ..] => AddrClass::Unspecified,
        [127, ..] => AddrClass::Loopback,
        [10, ..] => AddrClass::Private,
        [172, b, ..] if (16..32).contains(&b) => AddrClass::Private,
        [192, 168, ..] => AddrClass::Private,
        [100, b, ..] if (64..128).contains(&b) => AddrClass::Cgnat,
        [169, 254, ..] => AddrClass::LinkLocal,
        [255, 255, 255, 255] => AddrClass::Broadcast,
        [224..=239, ..] => AddrClass::Multicast,
        [240..=255, ..] => AddrClass::Reserved,
        // IETF protocol assignments, TEST-NETs, benchmarking, 6to4 relay.
        [192, 0, 0, _] | [192, 0, 2, _] | [198, 51, 100, _] | [203, 0, 113, _] => {
            AddrClass::Reserved
        }
        [198, 18 | 19, ..] | [192, 88, 99, _] => AddrClass::Reserved,
        _ => return None,
    })
}

fn classify_v6(ip: Ipv6Addr) -> Option<AddrClass> {
    let s = ip.segments();
    if ip.is_unspecified() {
        return Some(AddrClass::Unspecified);
    }
    if ip.is_loopback() {
        return Some(AddrClass::Loopback);
    }
    if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        return Some(AddrClass::Metadata);
    }
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    // IPv4-compatible `::a.b.c.d` (deprecated: never a real destination).
    if s[..6] == [0, 0, 0, 0, 0, 0] {
        return classify_v4(embedded(s[6], s[7])).or(Some(AddrClass::Reserved));
    }
    // NAT64 `64:ff9b::a.b.c.d`: what DNS64 hands out on IPv6-only networks.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return classify_v4(embedded(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        return classify_v4(embedded(s[1], s[2]));
    }
    Some(match s[0] {
        x if x & 0xffc0 == 0xfe80 => AddrClass::LinkLocal,
        // Site-local (deprecated) `fec0::/10`.
        x if x & 0xffc0 == 0xfec0 => AddrClass::LinkLocal,
        x if x & 0xfe00 == 0xfc00 => AddrClass::UniqueLocal,
        x if x & 0xff00 == 0xff00 => AddrClass::Multicast,
        // Documentation `2001:db8::/32`, discard `100::/64`, NAT64 local-use.
        0x2001 if s[1] == 0xdb8 => AddrClass::Reserved,
        0x0100 if s[1..4] == [0, 0, 0] => AddrClass::Reserved,
        0x0064 if s[1] == 0xff9b => AddrClass::Reserved,
        _ => return None,
    })
}

impl Egress {
    /// Validates `--allow` and `--forward`.
    pub fn parse(allow: &[String], forward: &[u16]) -> Result<Self, NetError> {
        if allow.len() > MAX_ALLOW {
            return Err(NetError::TooMany {
                flag: "--allow",
                count: allow.len(),
                limit: MAX_ALLOW,
            });
        }
        if forward.len() > MAX_FORWARD {
            return Err(NetError::TooMany {
                flag: "--forward",
                count: forward.len(),
                limit: MAX_FORWARD,
            });
        }
        let mut rules: Vec<AllowRule> = Vec::with_capacity(allow.len());
        for entry in allow {
            let rule = AllowRule::parse(entry)?;
            if rules.contains(&rule) {
                return Err(NetError::AllowDuplicate(rule.to_string()));
            }
            rules.push(rule);
        }
        let mut ports: Vec<Port> = Vec::with_capacity(forward.len());
        for &p in forward {
            let port = Port::new(p).ok_or(NetError::ForwardZero)?;
            if ports.contains(&port) {
                return Err(NetError::ForwardDuplicate(p));
            }
            ports.push(port);
        }
        Ok(Egress {
            allow: rules,
            forward: ports,
        })
    }

    /// True when the run gets a proxy.
    pub fn is_enabled(&self) -> bool {
        !self.allow.is_empty() || !self.forward.is_empty()
    }

    /// True if `port` is forwarded.
    pub fn forwards(&self, port: Port) -> bool {
        self.forward.contains(&port)
    }

    /// The decision for a target before any lookup. Order: forwarded ports
    /// (`127.0.0.1`, `localhost`), then `.invalid`, then the rules.
    pub fn verdict(&self, host: &Host, port: Port) -> Verdict {
        let is_forward_host = match host {
            Host::Ip(ip) => *ip == IpAddr::V4(Ipv4Addr::LOCALHOST),
            Host::Name(n) => n.as_str() == "localhost",
        };
        if is_forward_host && self.forwards(port) {
            return Verdict::Forward(port);
        }
        if let Host::Name(n) = host {
            if n.is_invalid_tld() {
                return Verdict::Deny(DenyReason::InvalidTld);
            }
            if n.is_localhost() {
                return Verdict::Deny(DenyReason::NotForwarded);
            }
        }
        if !self.allow.iter().any(|r| r.matches(host, port)) {
            return Verdict::Deny(DenyReason::NotAllowed);
        }
        match host {
            Host::Ip(ip) => Verdict::Literal(*ip, port),
            Host::Name(n) => Verdict::Resolve(n.clone(), port),
        }
    }

    /// True if the run names `ip` itself (as a literal rule covering
    /// `port`), which lifts the address-class check for that address.
    pub fn names_ip(&self, ip: IpAddr, port: Port) -> bool {
        let host = Host::Ip(ip.to_canonical());
        self.allow
            .iter()
            .any(|r| matches!(r.host, HostPattern::Ip(_)) && r.matches(&host, port))
    }

    /// Whether a resolved address of an allowed name may be dialled:
    /// `Ok(())`, or the class that refuses it. `own` lists the node's
    /// interface addresses.
    pub fn address_ok(&self, ip: IpAddr, port: Port, own: &[IpAddr]) -> Result<(), AddrClass> {
        let ip = ip.to_canonical();
        if self.names_ip(ip, port) {
            return Ok(());
        }
        if let Some(class) = classify(ip) {
            return Err(class);
        }
        if own.iter().any(|o| o.to_canonical() == ip) {
            return Err(AddrClass::OwnInterface);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn host(x: &str) -> Host {
        Host::parse(x).unwrap_or_else(|e| panic!("{x}: {e}"))
    }

    fn port(p: u16) -> Port {
        Port::new(p).unwrap()
    }

    #[test]
    fn empty_is_no_egress() {
        let e = Egress::parse(&[], &[]).unwrap();
        assert_eq!(e, Egress::default());
        assert!(!e.is_enabled());
        assert!(Egress::parse(&[], &[8080]).unwrap().is_enabled());
        assert!(Egress::parse(&s(&["a.com"]), &[]).unwrap().is_enabled());
    }

    #[test]
    fn canonical_hosts() {
        let cases: &[(&str, &str)] = &[
            ("Example.COM", "example.com"),
            ("example.com.", "example.com"),
            ("127.0.0.1", "127.0.0.1"),
            ("127.1", "127.0.0.1"),
            ("127.0.1", "127.0.0.1"),
            ("0x7f.0.0.1", "127.0.0.1"),
            ("0x7F.1", "127.0.0.1"),
            ("0177.0.0.1", "127.0.0.1"),
            ("2130706433", "127.0.0.1"),
            ("0x7f000001", "127.0.0.1"),
            ("017700000001", "127.0.0.1"),
            ("127.0.0.1.", "127.0.0.1"),
            ("0", "0.0.0.0"),
            ("0x", "0.0.0.0"),
            ("10.0.0.0x1", "10.0.0.1"),
            ("[::1]", "[::1]"),
            ("::1", "[::1]"),
            ("[0:0:0:0:0:0:0:1]", "[::1]"),
            ("[::ffff:127.0.0.1]", "127.0.0.1"),
            ("[::ffff:7f00:1]", "127.0.0.1"),
            ("[2001:DB8::A]", "[2001:db8::a]"),
            ("1.2.3.com", "1.2.3.com"),
            ("0x7f.com", "0x7f.com"),
            ("0x1g", "0x1g"),
            ("1a", "1a"),
            ("xn--bcher-kva.example", "xn--bcher-kva.example"),
            ("_svc.example.com", "_svc.example.com"),
        ];
        for (input, want) in cases {
            assert_eq!(host(input).to_string(), *want, "{input}");
        }
    }

    #[test]
    fn bad_hosts() {
        let cases: &[(&str, &str)] = &[
            ("", "empty"),
            (".", "only a dot"),
            ("a..b", "empty label"),
            (".a.com", "empty label"),
            ("a.com..", "empty label"),
            ("-a.com", "starts or ends"),
            ("a b.com", "letters, digits"),
            ("a\0.com", "letters, digits"),
            ("bücher.de", "punycode"),
            ("256.0.0.1", "numeric"),
            ("1.2.3.4.5", "numeric"),
            ("1.2.3.256", "numeric"),
            ("1.2.65536", "numeric"),
            ("4294967296", "numeric"),
            ("99999999999999999999999", "numeric"),
            ("09", "numeric"),
            ("a.09", "numeric"),
            ("[::1", "lacks"),
            ("[::1%eth0]", "zone"),
            ("[1.2.3.4]", "IPv6"),
            ("1:2", "IPv6"),
            ("a.com:80", "IPv6"),
        ];
        for (input, want) in cases {
            let err = Host::parse(input).expect_err(input).to_string();
            assert!(err.contains(want), "{input:?}: {err:?} lacks {want:?}");
        }
        let long = format!("{}.com", "a".repeat(64));
        assert!(Host::parse(&long).unwrap_err().to_string().contains("63"));
        let very_long = ["a".repeat(63).as_str(); 4].join(".");
        assert!(Host::parse(&very_long)
            .unwrap_err()
            .to_string()
            .contains("253"));
    }

    #[test]
    fn allow_entries_parse() {
        let cases: &[(&str, &str)] = &[
            ("example.com", "example.com"),
            ("EXAMPLE.com.:443", "example.com:443"),
            ("*.example.com", "*.example.com"),
            ("*.Example.com:8443", "*.example.com:8443"),
            ("*.co.uk", "*.co.uk"),
            ("10.1.2.3", "10.1.2.3"),
            ("127.1:8080", "127.0.0.1:8080"),
            ("[::1]:443", "[::1]:443"),
            ("::1", "[::1]"),
            ("2001:db8::1", "[2001:db8::1]"),
            ("[2001:db8::1]", "[2001:db8::1]"),
            ("a.com:65535", "a.com:65535"),
            ("a.com:1", "a.com:1"),
        ];
        for (input, want) in cases {
            let r = AllowRule::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(r.to_string(), *want, "{input}");
            // The display form parses back to the same rule.
            assert_eq!(AllowRule::parse(&r.to_string()).unwrap(), r, "{input}");
        }
    }

    #[test]
    fn allow_entries_refused() {
        let cases: &[(&str, &str)] = &[
            ("", "empty"),
            ("*", "too much"),
            ("*:443", "too much"),
            ("*.com", "too much"),
            ("*.com.", "too much"),
            ("*.", "too much"),
            ("*.*.com", "only as the whole first label"),
            ("a.*.com", "only as the whole first label"),
            ("*a.com", "only as the whole first label"),
            ("**.a.com", "only as the whole first label"),
            ("*.1.2.3", "IP addresses"),
            ("*.10.0.0.1", "IP addresses"),
            ("http://example.com", "--allow example.com"),
            ("https://u:p@example.com:8443/x", "--allow example.com:8443"),
            ("example.com/path", "--allow example.com"),
            ("example.com?q", "path"),
            ("example.com#f", "path"),
            ("user@example.com", "--allow example.com"),
            ("a.com:0", "port \"0\""),
            ("a.com:65536", "port \"65536\""),
            ("a.com:99999999", "1 to 65535"),
            ("a.com:", "port \"\""),
            ("a.com:http", "1 to 65535"),
            ("a.com:+80", "1 to 65535"),
            ("[::1]:0", "1 to 65535"),
            (" a.com", "whitespace"),
            ("a.com\r\nX: y", "whitespace"),
            ("a\0.com", "control"),
            ("x.invalid", ".invalid"),
            ("*.invalid.", "too much"),
            ("*.x.invalid", ".invalid"),
            ("localhost", "--forward"),
            ("LOCALHOST.:80", "--forward"),
            ("a.localhost", "--forward"),
            ("999.1.1.1", "not a valid one"),
        ];
        for (input, want) in cases {
            let err = AllowRule::parse(input).expect_err(input).to_string();
            assert!(err.contains(want), "{input:?}: {err:?} lacks {want:?}");
        }
        let long = "a".repeat(MAX_ENTRY_LEN + 1);
        assert!(AllowRule::parse(&long)
            .unwrap_err()
            .to_string()
            .contains("longer"));
    }

    #[test]
    fn egress_parse_lists() {
        let dup = Egress::parse(&s(&["a.com", "A.com."]), &[]).unwrap_err();
        assert_eq!(dup, NetError::AllowDuplicate("a.com".into()));
        assert_eq!(Egress::parse(&[], &[0]).unwrap_err(), NetError::ForwardZero);
        assert_eq!(
            Egress::parse(&[], &[80, 80]).unwrap_err(),
            NetError::ForwardDuplicate(80)
        );
        let many: Vec<String> = (0..=MAX_ALLOW).map(|i| format!("h{i}.com")).collect();
        assert!(Egress::parse(&many, &[])
            .unwrap_err()
            .to_string()
            .contains("over the limit"));
        let ports: Vec<u16> = (1..=u16::try_from(MAX_FORWARD).unwrap() + 1).collect();
        assert!(Egress::parse(&[], &ports).is_err());
        let e = Egress::parse(&s(&["a.com", "a.com:443"]), &[1, 65535]).unwrap();
        assert_eq!(e.allow.len(), 2);
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            serde_json::json!({"allow": ["a.com", "a.com:443"], "forward": [1, 65535]})
        );
    }

    #[test]
    fn verdicts() {
        let e = Egress::parse(
            &s(&[
                "example.com",
                "*.wild.org",
                "api.only.net:443",
                "10.0.0.5",
                "[2001:db8::1]:8443",
            ]),
            &[8080],
        )
        .unwrap();
        use Verdict::*;
        let name = |x: &str| match Host::parse(x).unwrap() {
            Host::Name(n) => n,
            Host::Ip(_) => unreachable!(),
        };
        let deny = Deny;
        let cases: &[(&str, u16, Verdict)] = &[
            ("example.com", 443, Resolve(name("example.com"), port(443))),
            ("EXAMPLE.COM.", 80, Resolve(name("example.com"), port(80))),
            ("www.example.com", 443, deny(DenyReason::NotAllowed)),
            ("badexample.com", 443, deny(DenyReason::NotAllowed)),
            ("a.wild.org", 1, Resolve(name("a.wild.org"), port(1))),
            ("a.b.wild.org", 1, Resolve(name("a.b.wild.org"), port(1))),
            ("wild.org", 443, deny(DenyReason::NotAllowed)),
            ("xwild.org", 443, deny(DenyReason::NotAllowed)),
            (
                "api.only.net",
                443,
                Resolve(name("api.only.net"), port(443)),
            ),
            ("api.only.net", 80, deny(DenyReason::NotAllowed)),
            (
                "10.0.0.5",
                22,
                Literal("10.0.0.5".parse().unwrap(), port(22)),
            ),
            (
                "012.0.0.5",
                22,
                Literal("10.0.0.5".parse().unwrap(), port(22)),
            ),
            ("10.0.0.6", 22, deny(DenyReason::NotAllowed)),
            (
                "[2001:db8:0::1]",
                8443,
                Literal("2001:db8::1".parse().unwrap(), port(8443)),
            ),
            ("[2001:db8::1]", 443, deny(DenyReason::NotAllowed)),
            ("127.0.0.1", 8080, Forward(port(8080))),
            ("127.1", 8080, Forward(port(8080))),
            ("2130706433", 8080, Forward(port(8080))),
            ("localhost", 8080, Forward(port(8080))),
            ("LocalHost.", 8080, Forward(port(8080))),
            ("127.0.0.1", 8081, deny(DenyReason::NotAllowed)),
            ("localhost", 8081, deny(DenyReason::NotForwarded)),
            ("x.localhost", 8080, deny(DenyReason::NotForwarded)),
            ("x.invalid", 443, deny(DenyReason::InvalidTld)),
            ("invalid", 443, deny(DenyReason::InvalidTld)),
            ("[::1]", 8080, deny(DenyReason::NotAllowed)),
        ];
        for (h, p, want) in cases {
            assert_eq!(&e.verdict(&host(h), port(*p)), want, "{h}:{p}");
        }
    }

    #[test]
    fn a_wildcard_does_not_open_invalid() {
        let e = Egress::parse(&s(&["*.example.com"]), &[]).unwrap();
        assert_eq!(
            e.verdict(&host("x.invalid"), port(443)),
            Verdict::Deny(DenyReason::InvalidTld)
        );
    }

    #[test]
    fn address_classes() {
        let cases: &[(&str, Option<AddrClass>)] = &[
            ("8.8.8.8", None),
            ("1.1.1.1", None),
            ("2606:4700::1111", None),
            ("0.0.0.0", Some(AddrClass::Unspecified)),
            ("0.1.2.3", Some(AddrClass::Unspecified)),
            ("127.0.0.1", Some(AddrClass::Loopback)),
            ("127.255.0.9", Some(AddrClass::Loopback)),
            ("10.1.2.3", Some(AddrClass::Private)),
            ("172.16.0.1", Some(AddrClass::Private)),
            ("172.31.255.255", Some(AddrClass::Private)),
            ("172.32.0.1", None),
            ("192.168.1.1", Some(AddrClass::Private)),
            ("100.64.0.1", Some(AddrClass::Cgnat)),
            ("100.127.255.255", Some(AddrClass::Cgnat)),
            ("100.128.0.1", None),
            ("169.254.1.1", Some(AddrClass::LinkLocal)),
            ("169.254.169.254", Some(AddrClass::Metadata)),
            ("224.0.0.1", Some(AddrClass::Multicast)),
            ("255.255.255.255", Some(AddrClass::Broadcast)),
            ("240.0.0.1", Some(AddrClass::Reserved)),
            ("192.0.2.1", Some(AddrClass::Reserved)),
            ("::", Some(AddrClass::Unspecified)),
            ("::1", Some(AddrClass::Loopback)),
            ("::ffff:127.0.0.1", Some(AddrClass::Loopback)),
            ("::ffff:169.254.169.254", Some(AddrClass::Metadata)),
            ("::127.0.0.1", Some(AddrClass::Loopback)),
            ("64:ff9b::10.0.0.1", Some(AddrClass::Private)),
            ("64:ff9b::8.8.8.8", None),
            ("2002:7f00:1::", Some(AddrClass::Loopback)),
            ("2002:808:808::", None),
            ("fe80::1", Some(AddrClass::LinkLocal)),
            ("fec0::1", Some(AddrClass::LinkLocal)),
            ("fc00::1", Some(AddrClass::UniqueLocal)),
            ("fd12:3456::1", Some(AddrClass::UniqueLocal)),
            ("fd00:ec2::254", Some(AddrClass::Metadata)),
            ("ff02::1", Some(AddrClass::Multicast)),
            ("2001:db8::1", Some(AddrClass::Reserved)),
        ];
        for (ip, want) in cases {
            let got = classify(ip.parse().unwrap());
            assert_eq!(got, *want, "{ip}");
        }
    }

    #[test]
    fn address_ok_honours_named_literals_and_own_addresses() {
        let e = Egress::parse(&s(&["svc.test", "127.0.0.1:9000", "10.0.0.5"]), &[]).unwrap();
        let ip = |x: &str| x.parse::<IpAddr>().unwrap();
        let own = [ip("203.0.114.7")];
        assert_eq!(
            e.address_ok(ip("127.0.0.1"), port(80), &own),
            Err(AddrClass::Loopback)
        );
        assert_eq!(e.address_ok(ip("127.0.0.1"), port(9000), &own), Ok(()));
        assert_eq!(
            e.address_ok(ip("::ffff:127.0.0.1"), port(9000), &own),
            Ok(())
        );
        assert_eq!(e.address_ok(ip("10.0.0.5"), port(1), &own), Ok(()));
        assert_eq!(
            e.address_ok(ip("10.0.0.6"), port(1), &own),
            Err(AddrClass::Private)
        );
        assert_eq!(
            e.address_ok(ip("203.0.114.7"), port(443), &own),
            Err(AddrClass::OwnInterface)
        );
        assert_eq!(e.address_ok(ip("8.8.4.4"), port(443), &own), Ok(()));
    }

    #[test]
    fn targets() {
        let (h, p) = parse_target("Example.com.:443").unwrap();
        assert_eq!((h.to_string(), p.get()), ("example.com".into(), 443));
        let (h, p) = parse_target("[::1]:8080").unwrap();
        assert_eq!((h.to_string(), p.get()), ("[::1]".into(), 8080));
        for bad in [
            "example.com",
            "a.com:0",
            "a.com:x",
            ":443",
            "[::1]",
            "a b:1",
            "::1:80",
        ] {
            assert!(parse_target(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn strict_subdomain() {
        let n = |x: &str| match host(x) {
            Host::Name(n) => n,
            Host::Ip(_) => unreachable!(),
        };
        assert!(n("a.example.com").is_strict_subdomain_of(&n("example.com")));
        assert!(!n("example.com").is_strict_subdomain_of(&n("example.com")));
        assert!(!n("aexample.com").is_strict_subdomain_of(&n("example.com")));
    }
}
