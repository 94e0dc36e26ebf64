//! Runs served on a loopback TCP listener (`ProxyHandle::add_run_tcp`, the
//! portable door): the same token check, policy, address checks, tunnels
//! and end of a run as on a socket file, spoken to over real TCP. Only
//! loopback is accepted as the listener's address. Portable: nothing here
//! needs a unix socket.

mod common;

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use common::*;
use oz0_egress::{Decision, EgressError, ProxyLimits, Token};
use oz0_policy::net::Egress;

fn addr_of(run: &oz0_egress::RunGuard) -> SocketAddr {
    let addr = run.tcp_addr().expect("a TCP run has an address");
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");
    assert!(run.socket_path().is_none());
    addr
}

#[test]
fn a_request_without_the_runs_token_gets_407() {
    let f = Fixture::new();
    let echo = echo_server();
    let allow = [format!("127.0.0.1:{echo}")];
    let (a, token_a) = f.tcp_run("tcp-a", &allow, &[]);
    let (b, token_b) = f.tcp_run("tcp-b", &allow, &[]);
    let (a, b) = (addr_of(&a), addr_of(&b));
    assert_ne!(a, b, "each run has its own listener");
    let connect = |auth: &str| format!("CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n{auth}\r\n");
    let wrong = Token::generate().unwrap();
    let cases = [
        ("none", connect("")),
        ("wrong", connect(&basic(&wrong))),
        ("other run's", connect(&basic(&token_b))),
        (
            "bad target, no token",
            "CONNECT x.invalid HTTP/1.1\r\n\r\n".to_string(),
        ),
    ];
    for (name, req) in &cases {
        let r = ask_tcp(a, req);
        assert_eq!(r.status, 407, "{name}: {r:?}");
        assert!(
            r.head
                .to_ascii_lowercase()
                .contains("proxy-authenticate: basic realm=\"oz0\""),
            "{name}: {r:?}"
        );
    }
    assert_eq!(ask_tcp(a, &connect(&basic(&token_a))).status, 200);
    assert_eq!(ask_tcp(b, &connect(&basic(&token_b))).status, 200);
    assert_eq!(ask_tcp(b, &connect(&basic(&token_a))).status, 407);
    let auth: Vec<_> = f
        .records()
        .into_iter()
        .filter(|r| r.decision == Decision::Auth)
        .collect();
    assert_eq!(auth.len(), cases.len() + 1, "{auth:#?}");
    assert!(auth[..cases.len()].iter().all(|r| r.run == "tcp-a"));
    assert_eq!(auth[cases.len()].run, "tcp-b");
}

#[test]
fn a_host_the_allowlist_does_not_name_gets_403_without_a_lookup() {
    let f = Fixture::new();
    f.map("api.example.com", "127.0.0.1");
    let (run, token) = f.tcp_run("r1", &["api.example.com:443".into()], &[]);
    let addr = addr_of(&run);
    for line in [
        "CONNECT other.example.com:443",
        "CONNECT api.example.com:80",
        "CONNECT 127.0.0.1:443",
        "GET http://other.example.com/",
    ] {
        let r = ask_tcp(addr, &format!("{line} HTTP/1.1\r\n{}\r\n", basic(&token)));
        assert_eq!(r.status, 403, "{line}: {r:?}");
        assert!(
            r.body.contains("not in this run's allowlist"),
            "{line}: {r:?}"
        );
    }
    assert_eq!(f.calls(), 0, "{:?}", f.resolver.asked.lock().unwrap());
    let deny = f
        .records()
        .iter()
        .filter(|r| r.decision == Decision::Deny && r.run == "r1")
        .count();
    assert_eq!(deny, 4, "{:#?}", f.records());
}

#[test]
fn invalid_names_get_403_before_any_lookup() {
    let f = Fixture::new();
    let (run, token) = f.tcp_run("r1", &["*.example.com".into()], &[]);
    let addr = addr_of(&run);
    for line in [
        "CONNECT x.invalid:443",
        "CONNECT a.example.com.invalid:443",
        "GET http://X.INVALID./",
    ] {
        let r = ask_tcp(addr, &format!("{line} HTTP/1.1\r\n{}\r\n", basic(&token)));
        assert_eq!(r.status, 403, "{line}: {r:?}");
        assert!(r.body.contains(".invalid"), "{line}: {r:?}");
    }
    assert_eq!(f.calls(), 0, "{:?}", f.resolver.asked.lock().unwrap());
    // The counter works: an allowed (unmapped) name is looked up once, and
    // one resolving to loopback is refused by its address.
    let r = ask_tcp(
        addr,
        &format!(
            "CONNECT a.example.com:443 HTTP/1.1\r\n{}\r\n",
            basic(&token)
        ),
    );
    assert_eq!(r.status, 502, "{r:?}");
    assert_eq!(f.calls(), 1);
    f.map("svc.example.com", "127.0.0.1");
    let r = ask_tcp(
        addr,
        &format!(
            "CONNECT svc.example.com:443 HTTP/1.1\r\n{}\r\n",
            basic(&token)
        ),
    );
    assert_eq!(r.status, 403, "{r:?}");
    assert!(r.body.contains("loopback"), "{r:?}");
    assert_eq!(f.calls(), 2);
}

#[test]
fn connect_to_a_forwarded_port_carries_bytes_both_ways() {
    let f = Fixture::new();
    let echo = echo_server();
    let web = http_server();
    let (run, token) = f.tcp_run("fwd", &[], &[echo, web]);
    let addr = addr_of(&run);
    let mut c = tcp_to(addr);
    write!(
        c,
        "CONNECT localhost:{echo} HTTP/1.1\r\nHost: localhost:{echo}\r\n{}\r\n",
        basic(&token)
    )
    .unwrap();
    let r = read_resp(&mut c, true).unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    // Enough to make the tunnel's buffers grow (see `pump`).
    let data: Vec<u8> = (0..2_000_000u32).map(|i| i.to_le_bytes()[1]).collect();
    let mut w = c.try_clone().unwrap();
    let d2 = data.clone();
    let writer = std::thread::spawn(move || w.write_all(&d2).unwrap());
    let mut got = vec![0u8; data.len()];
    c.read_exact(&mut got).unwrap();
    writer.join().unwrap();
    assert!(got == data, "the bytes came back changed");
    drop(c);
    let rec = f
        .records_until(|rs| rs.iter().any(|r| r.bytes_up > 0))
        .into_iter()
        .find(|r| r.decision == Decision::Allow)
        .unwrap();
    assert_eq!(rec.run, "fwd");
    assert_eq!(
        rec.addr.as_deref(),
        Some(format!("127.0.0.1:{echo}").as_str())
    );
    let n = u64::try_from(data.len()).unwrap();
    assert_eq!((rec.bytes_up, rec.bytes_down), (n, n), "{rec:?}");

    // Plain HTTP to a forwarded port, without the proxy's headers.
    let r = ask_tcp(
        addr,
        &format!(
            "GET http://127.0.0.1:{web}/x HTTP/1.1\r\n{}\r\n",
            basic(&token)
        ),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let got = r.body.to_ascii_lowercase();
    assert!(got.starts_with("get /x http/1.1\r\n"), "{got}");
    assert!(
        !got.contains("proxy-") && !got.contains(token.expose()),
        "{got}"
    );
    // A port that is not forwarded is refused.
    let r = ask_tcp(
        addr,
        &format!("CONNECT 127.0.0.1:1 HTTP/1.1\r\n{}\r\n", basic(&token)),
    );
    assert_eq!(r.status, 403, "{r:?}");
}

#[test]
fn an_open_tunnel_holds_its_place_under_the_connection_limit() {
    let f = Fixture::with_limits(ProxyLimits {
        max_connections_per_run: 2,
        ..ProxyLimits::default()
    });
    let echo = echo_server();
    let (run, token) = f.tcp_run("r1", &[format!("127.0.0.1:{echo}")], &[]);
    let addr = addr_of(&run);
    let connect = format!("CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n{}\r\n", basic(&token));
    let open = || {
        let mut c = tcp_to(addr);
        c.write_all(connect.as_bytes()).unwrap();
        assert_eq!(read_resp(&mut c, true).unwrap().status, 200);
        c.write_all(b"ping").unwrap();
        let mut b = [0u8; 4];
        c.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"ping");
        c
    };
    let first = open();
    let _second = open();
    // Two tunnels are the run's limit: a third connection waits to be
    // accepted, so its request goes unanswered.
    let mut third = tcp_to(addr);
    third.write_all(connect.as_bytes()).unwrap();
    third
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    let mut b = [0u8; 1];
    match third.read(&mut b) {
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) => {}
        other => panic!("a third connection was served while two tunnels were open: {other:?}"),
    }
    // When one tunnel ends, the waiting connection takes its place.
    drop(first);
    third
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let r = read_resp(&mut third, true).unwrap();
    assert_eq!(r.status, 200, "{r:?}");
}

#[test]
fn only_loopback_is_accepted_as_the_listeners_address() {
    let f = Fixture::new();
    let proxy = f.proxy.as_ref().unwrap();
    let egress = Egress::parse(&[], &[]).unwrap();
    for bind in ["0.0.0.0:0", "192.0.2.1:0", "[::]:0", "[::ffff:127.0.0.1]:0"] {
        let bind: SocketAddr = bind.parse().unwrap();
        let err = proxy
            .add_run_tcp("r".into(), Token::generate().unwrap(), egress.clone(), bind)
            .unwrap_err();
        assert!(
            matches!(err, EgressError::NotLoopback { addr } if addr == bind),
            "{bind}: {err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains(&bind.to_string()) && msg.contains("127.0.0.1"),
            "the message names the address and the fix: {msg}"
        );
    }
    // Any address of 127.0.0.0/8 is loopback.
    let run = proxy.add_run_tcp(
        "r".into(),
        Token::generate().unwrap(),
        egress.clone(),
        "127.0.0.2:0".parse().unwrap(),
    );
    match run {
        Ok(run) => assert_eq!(addr_of(&run).ip().to_string(), "127.0.0.2"),
        // Not every OS answers on all of 127/8 (macOS has only 127.0.0.1).
        Err(EgressError::BindTcp { .. }) => {}
        Err(e) => panic!("{e:?}"),
    }
    // A port in use names the address.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let bind = taken.local_addr().unwrap();
    let err = proxy
        .add_run_tcp("r".into(), Token::generate().unwrap(), egress, bind)
        .unwrap_err();
    assert!(
        matches!(err, EgressError::BindTcp { addr, .. } if addr == bind),
        "{err:?}"
    );
    assert!(err.to_string().contains(&bind.to_string()), "{err}");
}

#[test]
fn dropping_the_guard_closes_the_listener_and_the_tunnels() {
    let f = Fixture::new();
    let echo = echo_server();
    let (run, token) = f.tcp_run("r1", &[format!("127.0.0.1:{echo}")], &[]);
    let addr = addr_of(&run);
    let mut c = tcp_to(addr);
    write!(
        c,
        "CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n{}\r\n",
        basic(&token)
    )
    .unwrap();
    assert_eq!(read_resp(&mut c, true).unwrap().status, 200);
    drop(run);
    // The runtime closes the listener moments after the guard is gone.
    // (Windows retries a refused loopback connect for about two seconds
    // before it says so.)
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => break,
            other => {
                assert!(
                    Instant::now() < until,
                    "the run's listener still answers after its guard was dropped: {other:?}"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    // The open tunnel ends too. The close reaches it asynchronously, so the
    // echo of a byte sent now may still come back first; then EOF must.
    let _ = c.write_all(b"x");
    let mut b = [0u8; 16];
    loop {
        match c.read(&mut b) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                panic!("the tunnel stayed open after its run ended")
            }
            Err(_) => break,
        }
    }
}
