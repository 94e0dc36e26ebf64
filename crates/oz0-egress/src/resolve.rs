//! Name resolution and the node's own addresses, both behind seams tests
//! can replace.

use std::io;
use std::net::{IpAddr, ToSocketAddrs as _};

use oz0_policy::net::HostName;

/// Resolves a name the policy allows. Called at most once per request, and
/// never for names refused before lookup (`.invalid`, unlisted names, IP
/// literals). Called on a blocking thread: it may block.
pub trait Resolver: Send + Sync + 'static {
    /// The addresses of `name`.
    fn resolve(&self, name: &HostName, port: u16) -> io::Result<Vec<IpAddr>>;
}

/// The system resolver (`getaddrinfo`, honouring `/etc/hosts`).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve(&self, name: &HostName, port: u16) -> io::Result<Vec<IpAddr>> {
        Ok((name.as_str(), port)
            .to_socket_addrs()?
            .map(|a| a.ip())
            .collect())
    }
}

/// The node's own interface addresses, read from `/proc/net/fib_trie`
/// (IPv4 `LOCAL` routes) and `/proc/net/if_inet6`. Best effort: an
/// unreadable file contributes nothing (loopback, private and link-local
/// ranges are refused by class anyway; this catches a public address on a
/// node interface).
#[cfg(target_os = "linux")]
pub fn own_addresses() -> Vec<IpAddr> {
    let mut out = Vec::new();
    if let Ok(text) = std::fs::read_to_string("/proc/net/fib_trie") {
        out.extend(parse_fib_trie(&text));
    }
    if let Ok(text) = std::fs::read_to_string("/proc/net/if_inet6") {
        out.extend(parse_if_inet6(&text));
    }
    out.sort();
    out.dedup();
    out
}

/// The node's own interface addresses: none off Linux, where there is no
/// `/proc` to read them from and this crate makes no other system call
/// for them. The address-class checks still refuse every loopback,
/// private, link-local, unique-local, CGNAT, metadata, multicast,
/// broadcast and reserved address a name resolves to; what is not caught
/// is a *public* address on one of the node's own interfaces. A node that
/// has one can list it in the proxy's configuration
/// (`ProxyConfig::own_addrs`, feature `proxy`).
#[cfg(not(target_os = "linux"))]
pub fn own_addresses() -> Vec<IpAddr> {
    Vec::new()
}

#[cfg(target_os = "linux")]
fn parse_fib_trie(text: &str) -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut last: Option<IpAddr> = None;
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(ip) = t.strip_prefix("|-- ") {
            last = ip.trim().parse().ok();
        } else if t.starts_with("/32 host LOCAL") {
            out.extend(last);
        }
    }
    out
}

#[cfg(target_os = "linux")]
fn parse_if_inet6(text: &str) -> Vec<IpAddr> {
    text.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|hex| u128::from_str_radix(hex, 16).ok())
        .map(|v| IpAddr::V6(v.into()))
        .collect()
}

// Both read Linux's /proc (under Wine a Windows build would find it too).
#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let fib = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n     +-- 127.0.0.0/8 2 0 2\n        |-- 127.0.0.1\n           /32 host LOCAL\n     |-- 203.0.114.9\n        /32 host LOCAL\n     |-- 203.0.114.255\n        /32 link BROADCAST\n";
        let ips: Vec<String> = parse_fib_trie(fib).iter().map(|i| i.to_string()).collect();
        assert_eq!(ips, ["127.0.0.1", "203.0.114.9"]);
        let v6 = "00000000000000000000000000000001 01 80 10 80       lo\nfe800000000000000000000000000001 02 40 20 80     eth0\n";
        let ips: Vec<String> = parse_if_inet6(v6).iter().map(|i| i.to_string()).collect();
        assert_eq!(ips, ["::1", "fe80::1"]);
    }

    #[test]
    fn own_addresses_include_loopback_when_proc_is_there() {
        let own = own_addresses();
        if std::path::Path::new("/proc/net/fib_trie").exists() {
            assert!(own.contains(&"127.0.0.1".parse().unwrap()), "{own:?}");
        }
    }
}
