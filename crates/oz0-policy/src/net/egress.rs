//! A run's egress policy ([`Egress`]): validating `--allow` and `--forward`
//! as a whole, the decision for a target before any lookup ([`Verdict`],
//! [`DenyReason`]), and whether a resolved address may be dialled.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

use serde::Serialize;

use super::{
    classify, AddrClass, AllowRule, Host, HostName, HostPattern, NetError, Port, MAX_ALLOW,
    MAX_FORWARD,
};

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
