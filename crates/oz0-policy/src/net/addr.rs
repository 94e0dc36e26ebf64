//! Address classes (the SSRF guard): which addresses a name may not
//! resolve to ([`AddrClass`]), judged by [`classify`], with IPv6 forms
//! that embed IPv4 judged by the embedded address.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::Serialize;

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
