//! What a connection may take from the edge: idle and half-sent requests
//! are dropped after the header deadline, a slow body gets 408, a header
//! block over the bound gets 431, connections over the cap are closed as
//! they arrive, one client address holds at most its share, and the slots
//! kept for the fleet stay free for it — and through all of it the edge
//! keeps answering.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::net::{connect_from, health_from, is_open};
use common::{linux_facts, node, start_with, ACME};
use oz0_edge::client::Trust;
use oz0_edge::serve::Limits;
use oz0_edge::Store;

fn limits() -> Limits {
    Limits {
        max_connections: 8,
        header_timeout: Duration::from_millis(800),
        request_timeout: Duration::from_millis(1500),
        max_header_bytes: 16 * 1024,
        ..Limits::default()
    }
}

fn addr(url: &str) -> String {
    url.trim_start_matches("http://").to_string()
}

/// Reads until the peer closes (or 10 s); what it sent, and how long.
fn until_closed(s: &mut TcpStream) -> (String, Duration) {
    let t = Instant::now();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    (String::from_utf8_lossy(&out).into_owned(), t.elapsed())
}

const HEALTH: &str = "GET /v1/health HTTP/1.1\r\nhost: x\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_slow_and_oversized_connections_are_dropped() {
    let e = start_with(
        Store::open("sqlite::memory:").await.unwrap(),
        30_000,
        None,
        limits(),
        Trust::System,
    )
    .await;
    let a = addr(&e.url);
    tokio::task::spawn_blocking(move || {
        // Nothing sent at all.
        let mut s = TcpStream::connect(&a).unwrap();
        let (_, took) = until_closed(&mut s);
        assert!(took < Duration::from_secs(3), "an idle connection stayed {took:?}");
        // Half a header block.
        let mut s = TcpStream::connect(&a).unwrap();
        s.write_all(b"GET /v1/health HTTP/1.1\r\nhost: x\r\n").unwrap();
        let (_, took) = until_closed(&mut s);
        assert!(took < Duration::from_secs(3), "a half-sent header stayed {took:?}");
        // Kept alive after one request, then idle.
        let mut s = TcpStream::connect(&a).unwrap();
        s.write_all(HEALTH.as_bytes()).unwrap();
        let (got, took) = until_closed(&mut s);
        assert!(got.starts_with("HTTP/1.1 200"), "{got}");
        assert!(took < Duration::from_secs(3), "an idle kept-alive connection stayed {took:?}");
        // A 200 KB header.
        let mut s = TcpStream::connect(&a).unwrap();
        let big = format!("GET /v1/health HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n", "a".repeat(200_000));
        let _ = s.write_all(big.as_bytes());
        let (got, _) = until_closed(&mut s);
        assert!(got.is_empty() || got.starts_with("HTTP/1.1 431"), "{got}");
        // A body promised and never sent: 408 when the request's time is up.
        let mut s = TcpStream::connect(&a).unwrap();
        s.write_all(b"POST /v1/tenants/acme/jobs HTTP/1.1\r\nhost: x\r\nauthorization: Bearer operator-token-0123456789\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{").unwrap();
        let (got, took) = until_closed(&mut s);
        assert!(got.starts_with("HTTP/1.1 408"), "{got}");
        assert!(took < Duration::from_secs(4), "{took:?}");
    })
    .await
    .unwrap();
}

/// The edge answers a health request within 5 s.
fn answers_soon(a: &str) {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let mut s = TcpStream::connect(a).unwrap();
        s.write_all(HEALTH.as_bytes()).unwrap();
        let mut buf = [0u8; 64];
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let n = s.read(&mut buf).unwrap_or(0);
        if String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200") {
            return;
        }
        assert!(Instant::now() < until, "the edge stopped answering");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_are_closed_and_the_edge_keeps_answering() {
    let mut l = limits();
    l.header_timeout = Duration::from_secs(5);
    let e = start_with(
        Store::open("sqlite::memory:").await.unwrap(),
        30_000,
        None,
        l,
        Trust::System,
    )
    .await;
    let a = addr(&e.url);
    tokio::task::spawn_blocking(move || {
        // Eight idle connections hold every slot.
        let held: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(&a).unwrap()).collect();
        std::thread::sleep(Duration::from_millis(300));
        let mut over = TcpStream::connect(&a).unwrap();
        over.write_all(HEALTH.as_bytes()).unwrap();
        let (got, took) = until_closed(&mut over);
        assert!(
            got.is_empty() && took < Duration::from_secs(1),
            "over the cap: {got:?} after {took:?}"
        );
        drop(held);
        // The slots come back as the held ones go; the edge answers.
        answers_soon(&a);
        // Bursts of connections that come and go: the edge answers after.
        for _ in 0..4 {
            let _burst: Vec<TcpStream> = (0..50)
                .filter_map(|_| TcpStream::connect(&a).ok())
                .collect();
        }
        answers_soon(&a);
    })
    .await
    .unwrap();
}

/// Sixteen idle connections to `a`, from 127.0.0.2 and 127.0.0.3.
fn flood(a: std::net::SocketAddr) -> Vec<TcpStream> {
    (0..8)
        .flat_map(|_| [2, 3])
        .map(|last| connect_from(last, a))
        .collect()
}

fn socket_addr(url: &str) -> std::net::SocketAddr {
    addr(url).parse().unwrap()
}

/// A guard against a hung test, never a measure.
const GUARD: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_address_cannot_take_every_connection() {
    let e = start_with(
        Store::open("sqlite::memory:").await.unwrap(),
        30_000,
        None,
        Limits::default(),
        Trust::System,
    )
    .await;
    let a = socket_addr(&e.url);
    tokio::task::spawn_blocking(move || {
        // 127.0.0.1 takes its 64 connections (the default per address)...
        let held: Vec<TcpStream> = (0..64).map(|_| connect_from(1, a)).collect();
        // ...and its 65th is closed before anything is read from it.
        let got = health_from(1, a, GUARD);
        assert!(
            got.is_empty(),
            "the 65th connection of 127.0.0.1 was answered: {got:?}"
        );
        // Another address is served all the while.
        let got = health_from(2, a, GUARD);
        assert!(got.starts_with("HTTP/1.1 200"), "127.0.0.2: {got:?}");
        let closed = held.iter().filter(|s| !is_open(s)).count();
        assert_eq!(closed, 0, "the edge closed {closed} of the 64 it had taken");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_poll_while_anonymous_connections_hold_every_slot_open_to_them() {
    let l = Limits {
        max_connections: 16,
        ..Limits::default()
    };
    let e = start_with(
        Store::open("sqlite::memory:").await.unwrap(),
        30_000,
        None,
        l,
        Trust::System,
    )
    .await;
    // A node of the fleet, polling from 127.0.0.1 before the flood.
    let n = node(&e, "acme", ACME, "n1", &linux_facts(false, false)).await;
    assert!(n.poll_job(1).await.unwrap().is_none());
    let a = socket_addr(&e.url);
    // Idle connections from two other addresses: more than the cap.
    let held = tokio::task::spawn_blocking(move || {
        let held = flood(a);
        // One more, from an address no node or operator used: refused.
        let got = health_from(4, a, GUARD);
        assert!(
            got.is_empty(),
            "an anonymous connection over its share was answered: {got:?}"
        );
        held
    })
    .await
    .unwrap();
    // The node is still served, request after request (a connection each).
    for i in 0..5 {
        let r = n.poll_job(1).await;
        assert!(
            matches!(r, Ok(None)),
            "poll {i} while the flood holds its slots: {r:?}"
        );
    }
    // A connection the anonymous ones hold is not taken from them.
    let closed = tokio::task::spawn_blocking(move || held.iter().filter(|s| !is_open(s)).count())
        .await
        .unwrap();
    assert_eq!(closed, 16 - 14, "the anonymous share of 16 is 14");
}

/// The slots kept for the fleet are for nodes an operator let in: a node
/// that holds only an enrolment token and waits for approval (its tenant
/// asks for it) gets no more than any anonymous address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_waiting_for_approval_gets_no_kept_slot() {
    let l = Limits {
        max_connections: 16,
        ..Limits::default()
    };
    let e = common::start_configured(
        Store::open("sqlite::memory:").await.unwrap(),
        |c| {
            c.approval_tenants.insert("solo".into());
        },
        None,
        l,
        Trust::System,
    )
    .await;
    // A pending node, polling from 127.0.0.1 before the flood: its signed
    // requests are answered (it waits for approval).
    let dir = std::env::temp_dir().join(format!("oz0-edge-pending-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let key = || oz0_edge::client::NodeKey::load_or_create(&dir.join("node.key")).unwrap();
    let n = oz0_edge::client::NodeClient::new(&e.url, "solo", key()).unwrap();
    n.register(common::SOLO, Some("p1")).await.unwrap();
    n.report_facts(&linux_facts(false, false)).await.unwrap();
    let r = n.poll_job(1).await.unwrap_err();
    assert_eq!(r.refusal_code(), Some("pending_approval"), "{r}");
    // The same node on a new connection (a client keeps its own open).
    drop(n);
    let n = oz0_edge::client::NodeClient::new(&e.url, "solo", key()).unwrap();
    let a = socket_addr(&e.url);
    let held = tokio::task::spawn_blocking(move || {
        let held = flood(a);
        // Once the flood holds the anonymous share, another address is
        // refused.
        assert!(health_from(4, a, GUARD).is_empty());
        held
    })
    .await
    .unwrap();
    // Now its connection is one over the anonymous share: closed.
    let r = n.poll_job(1).await.unwrap_err();
    assert_eq!(
        r.refusal_code(),
        None,
        "a pending node took a slot kept for the fleet: {r}"
    );
    drop(held);
    let _ = std::fs::remove_dir_all(&dir);
}
