//! Which connections the edge takes, decided as each is accepted and
//! before anything is read from it (so before TLS): at most the cap open
//! at once, at most a share of it from one client, and the last eighth of
//! the cap kept for the addresses the fleet and its operators use.
//!
//! A connection is *anonymous* until a request on it shows a node's valid
//! signature or an operator's token; anonymous connections hold at most
//! `cap - reserve` slots. Showing one takes the connection out of that
//! share and makes its address *known* for [`KNOWN_FOR_MS`]: a connection
//! from a known address may take any free slot, the reserve included. A
//! flood of connections from addresses no node or operator uses can fill
//! the anonymous share and nothing more, while the nodes, which poll every
//! few seconds, keep their addresses known and their way in.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

/// How long an address a node's signature or an operator's token came
/// from may use the reserve.
pub const KNOWN_FOR_MS: i64 = 10 * 60 * 1000;
/// Most addresses remembered as known (a registered node could otherwise
/// grow the table from every address it has).
pub const MAX_KNOWN: usize = 65_536;

/// One client as the caps count it: an IPv4 address, or an IPv6 /64 (the
/// least one host is given, so a host cannot take more by changing its
/// address within it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Client {
    /// An IPv4 address (an IPv4-mapped IPv6 address counts as one).
    V4(Ipv4Addr),
    /// The first 64 bits of an IPv6 address.
    V6([u8; 8]),
}

impl From<IpAddr> for Client {
    fn from(ip: IpAddr) -> Client {
        match ip {
            IpAddr::V4(a) => Client::V4(a),
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(v4) => Client::V4(v4),
                None => {
                    let mut net = [0u8; 8];
                    net.copy_from_slice(&a.octets()[..8]);
                    Client::V6(net)
                }
            },
        }
    }
}

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Client::V4(a) => write!(f, "{a}"),
            Client::V6(net) => {
                let mut o = [0u8; 16];
                o[..8].copy_from_slice(net);
                write!(f, "{}/64", std::net::Ipv6Addr::from(o))
            }
        }
    }
}

/// Why a connection was closed as it arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Its client holds its share already.
    PerClient,
    /// Every slot is taken.
    Full,
    /// The anonymous share is taken, and its address is not known.
    Anonymous,
}

const ANONYMOUS: u8 = 0;
const KNOWN: u8 = 1;
const GONE: u8 = 2;

/// The slots of one listener.
#[derive(Debug)]
pub struct Slots {
    cap: usize,
    per_client: usize,
    reserve: usize,
    state: Mutex<State>,
    /// Woken when the last open connection gives its slot back.
    none_open: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct State {
    open: usize,
    anonymous: usize,
    clients: HashMap<Client, usize>,
    /// Known addresses, each with when it stops being known.
    known: HashMap<Client, i64>,
}

/// A connection's slot, given back when it is dropped.
#[derive(Debug)]
pub struct Slot(Arc<Held>);

/// What a request on the connection uses to say it showed a signature or
/// a token.
#[derive(Debug, Clone)]
pub struct Proof(Arc<Held>);

#[derive(Debug)]
struct Held {
    slots: Arc<Slots>,
    client: Client,
    /// ANONYMOUS, KNOWN or GONE; changed only under the slots' lock.
    class: AtomicU8,
}

impl Slots {
    /// `cap` connections at once, `per_client` from one client, the last
    /// `reserve` of them for known addresses.
    pub fn new(cap: usize, per_client: usize, reserve: usize) -> Arc<Slots> {
        Arc::new(Slots {
            cap,
            per_client,
            reserve: reserve.min(cap),
            state: Mutex::default(),
            none_open: tokio::sync::Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a connection from `ip` accepted at `now` (ms), or why not.
    pub fn admit(self: &Arc<Self>, ip: IpAddr, now: i64) -> Result<Slot, Refused> {
        let client = Client::from(ip);
        let mut s = self.lock();
        let held = s.clients.get(&client).copied().unwrap_or(0);
        if held >= self.per_client {
            return Err(Refused::PerClient);
        }
        if s.open >= self.cap {
            return Err(Refused::Full);
        }
        let class = if s.anonymous < self.cap - self.reserve {
            ANONYMOUS
        } else if s.known.get(&client).is_some_and(|until| *until > now) {
            KNOWN
        } else {
            return Err(Refused::Anonymous);
        };
        s.open += 1;
        if class == ANONYMOUS {
            s.anonymous += 1;
        }
        *s.clients.entry(client).or_default() += 1;
        Ok(Slot(Arc::new(Held {
            slots: self.clone(),
            client,
            class: AtomicU8::new(class),
        })))
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.lock().open
    }

    /// Until no connection holds a slot.
    pub async fn none_open(&self) {
        loop {
            // Registered before the count is read: a wake in between is
            // not lost.
            let woken = self.none_open.notified();
            if self.open() == 0 {
                return;
            }
            woken.await;
        }
    }

    /// Connections open, and how many of them are anonymous.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let s = self.lock();
        (s.open, s.anonymous)
    }
}

impl Slot {
    /// The handle a request on this connection proves it with.
    pub fn proof(&self) -> Proof {
        Proof(self.0.clone())
    }

    /// The client it counts against.
    pub fn client(&self) -> Client {
        self.0.client
    }
}

impl Proof {
    /// A request on this connection showed a node's valid signature or an
    /// operator's token at `now`: the connection leaves the anonymous
    /// share, and its address is known until [`KNOWN_FOR_MS`] from now.
    pub fn prove(&self, now: i64) {
        let h = &self.0;
        let mut s = h.slots.lock();
        if s.known.len() >= MAX_KNOWN && !s.known.contains_key(&h.client) {
            s.known.retain(|_, until| *until > now);
        }
        if s.known.len() < MAX_KNOWN || s.known.contains_key(&h.client) {
            s.known.insert(h.client, now + KNOWN_FOR_MS);
        }
        if h.class.load(Ordering::Relaxed) == ANONYMOUS {
            h.class.store(KNOWN, Ordering::Relaxed);
            s.anonymous -= 1;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let h = &self.0;
        let mut s = h.slots.lock();
        match h.class.swap(GONE, Ordering::Relaxed) {
            GONE => return,
            ANONYMOUS => s.anonymous -= 1,
            _ => {}
        }
        s.open -= 1;
        if let Some(n) = s.clients.get_mut(&h.client) {
            *n -= 1;
            if *n == 0 {
                s.clients.remove(&h.client);
            }
        }
        if s.open == 0 {
            h.slots.none_open.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[tokio::test]
    async fn the_wait_for_none_open_ends_when_the_last_slot_is_given_back() {
        let slots = Slots::new(100, 3, 10);
        let wait = std::time::Duration::from_millis(50);
        tokio::time::timeout(wait, slots.none_open()).await.unwrap();
        let a = slots.admit(ip("10.0.0.1"), 0).unwrap();
        let b = slots.admit(ip("10.0.0.2"), 0).unwrap();
        let none = tokio::spawn({
            let slots = slots.clone();
            async move { slots.none_open().await }
        });
        drop(a);
        tokio::time::sleep(wait).await;
        assert!(!none.is_finished());
        assert_eq!(slots.open(), 1);
        drop(b);
        tokio::time::timeout(std::time::Duration::from_secs(1), none)
            .await
            .unwrap()
            .unwrap();
    }

    #[test]
    fn one_client_holds_at_most_its_share() {
        let slots = Slots::new(100, 3, 10);
        let held: Vec<Slot> = (0..3)
            .map(|_| slots.admit(ip("10.0.0.1"), 0).unwrap())
            .collect();
        assert_eq!(
            slots.admit(ip("10.0.0.1"), 0).unwrap_err(),
            Refused::PerClient
        );
        // Loopback counts like any address; another address is its own client.
        assert!(slots.admit(ip("10.0.0.2"), 0).is_ok());
        // An IPv6 host is its /64; an IPv4-mapped address is the IPv4 one.
        let v6: Vec<Slot> = (0..3)
            .map(|i| slots.admit(ip(&format!("2001:db8::{i}")), 0).unwrap())
            .collect();
        assert_eq!(
            slots.admit(ip("2001:db8::ffff:1"), 0).unwrap_err(),
            Refused::PerClient
        );
        assert_eq!(
            slots.admit(ip("::ffff:10.0.0.1"), 0).unwrap_err(),
            Refused::PerClient
        );
        assert!(slots.admit(ip("2001:db8:0:1::1"), 0).is_ok());
        assert_eq!(v6[0].client().to_string(), "2001:db8::/64");
        // A slot given back is free again.
        drop(held);
        assert!(slots.admit(ip("10.0.0.1"), 0).is_ok());
        drop(v6);
        assert_eq!(slots.counts(), (0, 0));
    }

    #[test]
    fn the_reserve_is_for_known_addresses_only() {
        let slots = Slots::new(8, 8, 2);
        // A node proves its address, then closes its connection.
        let node = slots.admit(ip("10.0.0.9"), 0).unwrap();
        node.proof().prove(0);
        drop(node);
        // A flood takes the anonymous share (6), and no more.
        let flood: Vec<Slot> = (0..6)
            .map(|_| slots.admit(ip("192.0.2.1"), 0).unwrap())
            .collect();
        assert_eq!(
            slots.admit(ip("192.0.2.2"), 0).unwrap_err(),
            Refused::Anonymous
        );
        // The node's next connections take the reserve.
        let a = slots.admit(ip("10.0.0.9"), 1).unwrap();
        let b = slots.admit(ip("10.0.0.9"), 1).unwrap();
        assert_eq!(slots.counts(), (8, 6));
        assert_eq!(slots.admit(ip("10.0.0.9"), 1).unwrap_err(), Refused::Full);
        drop((a, b));
        // An address stops being known KNOWN_FOR_MS after it last proved.
        assert_eq!(
            slots.admit(ip("10.0.0.9"), KNOWN_FOR_MS).unwrap_err(),
            Refused::Anonymous
        );
        drop(flood);
        assert_eq!(slots.counts(), (0, 0));
    }

    #[test]
    fn a_proven_connection_leaves_the_anonymous_share() {
        let slots = Slots::new(8, 8, 2);
        let first = slots.admit(ip("10.0.0.1"), 0).unwrap();
        let p = first.proof();
        p.prove(0);
        p.prove(5);
        assert_eq!(slots.counts(), (1, 0));
        // The six anonymous slots are all free for others still.
        let others: Vec<Slot> = (0..6)
            .map(|_| slots.admit(ip("192.0.2.1"), 0).unwrap())
            .collect();
        assert_eq!(slots.counts(), (7, 6));
        drop(first);
        // A proof that outlives its slot changes nothing.
        p.prove(6);
        assert_eq!(slots.counts(), (6, 6));
        drop(others);
        assert_eq!(slots.counts(), (0, 0));
    }

    #[test]
    fn the_known_table_is_bounded() {
        let slots = Slots::new(4, 4, 1);
        for i in 0..MAX_KNOWN + 10 {
            let a = u32::try_from(i).unwrap().to_be_bytes();
            let s = slots
                .admit(IpAddr::V4(Ipv4Addr::from(a)), 0)
                .expect("a free slot");
            s.proof().prove(0);
        }
        assert_eq!(slots.lock().known.len(), MAX_KNOWN);
        // Once they expire, new addresses are remembered again.
        let s = slots.admit(ip("192.0.2.7"), KNOWN_FOR_MS).unwrap();
        s.proof().prove(KNOWN_FOR_MS);
        assert_eq!(slots.lock().known.len(), 1);
    }
}
