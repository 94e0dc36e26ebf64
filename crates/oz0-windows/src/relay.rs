//! The egress relay's ports and the Windows Firewall facts its route relies on.
//!
//! On the relay route PSEC does not keep other machines from a listener in
//! the container; Windows Firewall does, by blocking inbound connections no
//! rule allows. The `ingress` self-test property holds the node to that
//! ([`check_firewall`]). Where Windows Firewall holds the relay itself, the
//! node prints the one scoped rule that lets it through ([`firewall_rule`]).

use serde::{Deserialize, Serialize};

use crate::winpath::WinPath;

/// First relay port on 127.0.0.1.
pub const FIRST_PORT: u16 = 47330;
/// Last relay port on 127.0.0.1.
pub const LAST_PORT: u16 = 47361;
/// At most this many relayed runs at once on a machine (one port each).
pub const MAX_RELAYS: usize = (LAST_PORT - FIRST_PORT + 1) as usize;
/// The relay's AppContainer profile name.
pub const RELAY_PROFILE: &str = "oz0.egress-relay";
/// The display name of the scoped firewall rule.
pub const RULE_NAME: &str = "Orchestrator Zero egress relay";

/// A port in the relay range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u16", into = "u16")]
pub struct RelayPort(u16);

/// Why no relay port was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RelayError {
    /// Outside the range.
    #[error("port {0} is outside the relay range 127.0.0.1:{FIRST_PORT}-{LAST_PORT}")]
    OutOfRange(u16),
    /// Every port is taken.
    #[error("all {MAX_RELAYS} relay ports (127.0.0.1:{FIRST_PORT}-{LAST_PORT}) are in use: at most {MAX_RELAYS} PSEC runs take the relay at once; wait for one to end")]
    Full,
}

impl RelayPort {
    /// Checks a port is in range.
    pub fn new(p: u16) -> Result<Self, RelayError> {
        if (FIRST_PORT..=LAST_PORT).contains(&p) {
            Ok(RelayPort(p))
        } else {
            Err(RelayError::OutOfRange(p))
        }
    }

    /// The number.
    pub fn get(self) -> u16 {
        self.0
    }
}

impl TryFrom<u16> for RelayPort {
    type Error = RelayError;
    fn try_from(p: u16) -> Result<Self, RelayError> {
        Self::new(p)
    }
}

impl From<RelayPort> for u16 {
    fn from(p: RelayPort) -> u16 {
        p.0
    }
}

/// The relay ports this node holds. Other processes (another node, anything)
/// may hold ports too: [`RelayPorts::allocate`] asks a binder, which binds the
/// listener and says whether it got the port, so the check and the use are
/// one step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelayPorts {
    held: u32,
}

impl RelayPorts {
    /// No port held.
    pub fn new() -> Self {
        Self::default()
    }

    /// Gives the lowest port this node does not hold and `try_bind` gets.
    pub fn allocate(
        &mut self,
        mut try_bind: impl FnMut(RelayPort) -> bool,
    ) -> Result<RelayPort, RelayError> {
        for port in FIRST_PORT..=LAST_PORT {
            let i = port - FIRST_PORT;
            if self.held & (1 << i) != 0 {
                continue;
            }
            let port = RelayPort(port);
            if try_bind(port) {
                self.held |= 1 << i;
                return Ok(port);
            }
        }
        Err(RelayError::Full)
    }

    /// Gives a port back when its run ends.
    pub fn release(&mut self, port: RelayPort) {
        self.held &= !(1 << (port.0 - FIRST_PORT));
    }

    /// How many this node holds.
    pub fn held(&self) -> usize {
        self.held.count_ones() as usize
    }
}

/// A Windows Firewall profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// Domain.
    Domain,
    /// Private.
    Private,
    /// Public.
    Public,
}

impl Profile {
    /// All three.
    pub const ALL: [Profile; 3] = [Profile::Domain, Profile::Private, Profile::Public];
    /// Its name.
    pub const fn name(self) -> &'static str {
        match self {
            Profile::Domain => "domain",
            Profile::Private => "private",
            Profile::Public => "public",
        }
    }
}

/// The effective state of one profile, as `INetFwPolicy2` reports it
/// (`FirewallEnabled`, `DefaultInboundAction`; effective values, so the
/// store view's `NotConfigured` never appears here).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileFacts {
    /// Which profile.
    pub profile: Profile,
    /// Windows Firewall is on for it.
    pub enabled: bool,
    /// Inbound connections no rule allows are blocked.
    pub blocks_inbound_by_default: bool,
}

/// Why the relay route's ingress does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FirewallError {
    /// A profile was not reported.
    #[error("Windows Firewall's {0} profile was not reported, so inbound blocking cannot be shown for it")]
    Missing(&'static str),
    /// A profile is off.
    #[error("Windows Firewall is off for the {0} profile; on the relay route it is what keeps other machines from a listener in the container: turn it on (Set-NetFirewallProfile -Profile {0} -Enabled True)")]
    Off(&'static str),
    /// A profile allows inbound by default.
    #[error("Windows Firewall's {0} profile allows inbound connections by default; on the relay route it must block them: Set-NetFirewallProfile -Profile {0} -DefaultInboundAction Block")]
    AllowsInbound(&'static str),
}

/// The `ingress` check on the relay route: every profile (domain, private,
/// public) on and blocking inbound by default. The first failure, in that order.
pub fn check_firewall(facts: &[ProfileFacts]) -> Result<(), FirewallError> {
    for p in Profile::ALL {
        let Some(f) = facts.iter().find(|f| f.profile == p) else {
            return Err(FirewallError::Missing(p.name()));
        };
        if !f.enabled {
            return Err(FirewallError::Off(p.name()));
        }
        if !f.blocks_inbound_by_default {
            return Err(FirewallError::AllowsInbound(p.name()));
        }
    }
    Ok(())
}

/// An AppContainer package SID (`S-1-15-2-…`), as `sandbox check --psec` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PackageSid(String);

/// Not an AppContainer SID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an AppContainer package SID (S-1-15-2- followed by numbers): copy it from sandbox check --psec")]
pub struct SidError(String);

impl PackageSid {
    /// Parses `S-1-15-2-N-N-…` strictly.
    pub fn parse(s: &str) -> Result<Self, SidError> {
        let ok = s.strip_prefix("S-1-15-2-").is_some_and(|rest| {
            rest.split('-')
                .all(|n| !n.is_empty() && n.len() <= 10 && n.bytes().all(|b| b.is_ascii_digit()))
                && rest.split('-').count() <= 16
        });
        if ok {
            Ok(PackageSid(s.to_string()))
        } else {
            Err(SidError(s.chars().take(80).collect()))
        }
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for PackageSid {
    type Error = SidError;
    fn try_from(s: String) -> Result<Self, SidError> {
        Self::parse(&s)
    }
}

impl From<PackageSid> for String {
    fn from(s: PackageSid) -> String {
        s.0
    }
}

/// The printed firewall commands for a blocked relay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FirewallRule {
    /// One comment line saying what it does.
    pub comment: String,
    /// The command that adds the rule (elevated PowerShell, once).
    pub add: String,
    /// The command that removes it.
    pub remove: String,
}

/// PowerShell single-quoted string: `'` doubled, nothing else special.
fn ps_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The scoped rule: this node's program, its relay ports on 127.0.0.1 and
/// its relay profile only, so no other program, profile or port matches.
pub fn firewall_rule(program: &WinPath, relay_profile_sid: &PackageSid) -> FirewallRule {
    FirewallRule {
        comment: "# In an elevated PowerShell, once: lets this node's relay alone receive connections, on 127.0.0.1 and its ports only.".to_string(),
        add: format!(
            "New-NetFirewallRule -DisplayName {} -Direction Inbound -Action Allow -Protocol TCP -LocalAddress 127.0.0.1 -LocalPort {FIRST_PORT}-{LAST_PORT} -Program {} -Package {}",
            ps_quote(RULE_NAME),
            ps_quote(program.as_str()),
            relay_profile_sid.as_str()
        ),
        remove: format!("Remove-NetFirewallRule -DisplayName {}", ps_quote(RULE_NAME)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_lowest_free_and_at_most_32() {
        let mut ports = RelayPorts::new();
        let taken_elsewhere = [47330u16, 47332];
        let mut got = vec![];
        while let Ok(p) = ports.allocate(|p| !taken_elsewhere.contains(&p.get())) {
            got.push(p.get());
        }
        assert_eq!(got.len(), MAX_RELAYS - 2);
        assert_eq!(&got[..3], &[47331, 47333, 47334]);
        assert_eq!(*got.last().unwrap(), LAST_PORT);
        let elsewhere = |p: RelayPort| !taken_elsewhere.contains(&p.get());
        assert_eq!(ports.allocate(elsewhere), Err(RelayError::Full));
        ports.release(RelayPort::new(47340).unwrap());
        assert_eq!(ports.allocate(elsewhere).unwrap().get(), 47340);
        assert_eq!(ports.held(), MAX_RELAYS - 2);
    }

    #[test]
    fn thirty_two_runs_then_full() {
        let mut ports = RelayPorts::new();
        for i in 0..32u16 {
            assert_eq!(ports.allocate(|_| true).unwrap().get(), FIRST_PORT + i);
        }
        let e = ports.allocate(|_| true).unwrap_err();
        assert!(e.to_string().contains("at most 32 PSEC runs"));
        assert_eq!(MAX_RELAYS, 32);
    }

    #[test]
    fn range_is_checked() {
        assert!(RelayPort::new(47329).is_err());
        assert!(RelayPort::new(47362).is_err());
        assert!(RelayPort::new(47361).is_ok());
        assert!(serde_json::from_str::<RelayPort>("80").is_err());
    }

    #[test]
    fn firewall_every_profile_on_and_blocking() {
        let on = |profile| ProfileFacts {
            profile,
            enabled: true,
            blocks_inbound_by_default: true,
        };
        let all = [
            on(Profile::Domain),
            on(Profile::Private),
            on(Profile::Public),
        ];
        assert_eq!(check_firewall(&all), Ok(()));
        let mut off = all;
        off[1].enabled = false;
        assert_eq!(check_firewall(&off), Err(FirewallError::Off("private")));
        let mut allows = all;
        allows[2].blocks_inbound_by_default = false;
        let e = check_firewall(&allows).unwrap_err();
        assert_eq!(e, FirewallError::AllowsInbound("public"));
        assert!(e.to_string().contains("-DefaultInboundAction Block"));
        assert_eq!(
            check_firewall(&all[1..]),
            Err(FirewallError::Missing("domain"))
        );
    }

    #[test]
    fn scoped_rule_golden() {
        let program =
            WinPath::parse("C:\\Program Files\\Orchestrator Zero\\orchestrator-zero-node.exe")
                .unwrap();
        let sid = PackageSid::parse(
            "S-1-15-2-1234567890-123456789-1234567890-123456789-1234567890-123456789-1234567890",
        )
        .unwrap();
        let r = firewall_rule(&program, &sid);
        assert_eq!(r.comment, "# In an elevated PowerShell, once: lets this node's relay alone receive connections, on 127.0.0.1 and its ports only.");
        assert_eq!(
            r.add,
            "New-NetFirewallRule -DisplayName 'Orchestrator Zero egress relay' -Direction Inbound -Action Allow -Protocol TCP -LocalAddress 127.0.0.1 -LocalPort 47330-47361 -Program 'C:\\Program Files\\Orchestrator Zero\\orchestrator-zero-node.exe' -Package S-1-15-2-1234567890-123456789-1234567890-123456789-1234567890-123456789-1234567890"
        );
        assert_eq!(
            r.remove,
            "Remove-NetFirewallRule -DisplayName 'Orchestrator Zero egress relay'"
        );
        // A quote in a path cannot end the string early.
        let odd = WinPath::parse("C:\\O'Brien\\node.exe").unwrap();
        assert!(firewall_rule(&odd, &sid)
            .add
            .contains("-Program 'C:\\O''Brien\\node.exe'"));
    }

    #[test]
    fn sids_are_strict() {
        for bad in [
            "S-1-5-18",
            "S-1-15-2-",
            "S-1-15-2-1;calc",
            "S-1-15-2-1 -Action Allow",
            "S-1-15-2-1--2",
        ] {
            assert!(PackageSid::parse(bad).is_err(), "{bad}");
        }
    }
}
