//! The proxy end to end: real unix sockets, real listeners on 127.0.0.1.
//! A run's socket spoken to directly: tunnels and plain HTTP, the token, the
//! allowlist and the address checks, bad requests, audit records, and the
//! end of a run. The bridge and channels are in `bridge.rs`.

// Runs on unix sockets; runs on TCP listeners are in tcp.rs.
#![cfg(unix)]

mod common;

use std::io::{self, Read, Write};

use common::*;
use oz0_egress::Decision;

fn s(v: &[String]) -> Vec<String> {
    v.to_vec()
}

#[test]
fn connect_to_an_allowed_ip_literal_tunnels() {
    let f = Fixture::new();
    let echo = echo_server();
    let (run, token) = f.run("r1", &[format!("127.0.0.1:{echo}")], &[]);
    let mut c = unix(run.socket_path().unwrap());
    write!(
        c,
        "CONNECT 127.0.0.1:{echo} HTTP/1.1\r\nHost: 127.0.0.1:{echo}\r\n{}\r\n",
        basic(&token)
    )
    .unwrap();
    let r = read_resp(&mut c, true).unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    c.write_all(b"ping through the tunnel").unwrap();
    let mut buf = [0u8; 23];
    c.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"ping through the tunnel");
    drop(c);
    // Bearer works too; the odd spelling 127.1 is the same literal.
    let r = ask(
        run.socket_path().unwrap(),
        &format!(
            "CONNECT 127.1:{echo} HTTP/1.1\r\nProxy-Authorization: Bearer {}\r\n\r\n",
            token.expose()
        ),
    );
    assert_eq!(r.status, 200, "{r:?}");
}

#[test]
fn plain_http_is_forwarded_without_proxy_headers() {
    let f = Fixture::new();
    let web = http_server();
    let (run, token) = f.run("r1", &[format!("127.0.0.1:{web}")], &[]);
    let mut c = unix(run.socket_path().unwrap());
    // Two requests on one connection (keep-alive), the second with a body.
    write!(
        c,
        "GET http://127.0.0.1:{web}/a?b=c HTTP/1.1\r\nHost: wrong.example\r\n{}Proxy-Connection: keep-alive\r\nConnection: x-hop\r\nX-Hop: 1\r\nX-Keep: 2\r\n\r\n",
        basic(&token)
    )
    .unwrap();
    let r = read_resp(&mut c, false).unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    let got = r.body.to_ascii_lowercase();
    assert!(got.starts_with("get /a?b=c http/1.1\r\n"), "{got}");
    assert!(got.contains(&format!("host: 127.0.0.1:{web}\r\n")), "{got}");
    assert!(got.contains("x-keep: 2"), "{got}");
    for gone in ["proxy-", "x-hop", token.expose()] {
        assert!(!got.contains(gone), "{gone} reached the upstream: {got}");
    }
    write!(
        c,
        "POST http://127.0.0.1:{web}/p HTTP/1.1\r\n{}Content-Length: 5\r\n\r\nhello",
        basic(&token)
    )
    .unwrap();
    let r = read_resp(&mut c, false).unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.body.ends_with("hello"), "{r:?}");
    drop(c);
    let allowed: Vec<_> = f
        .records_until(|rs| rs.iter().filter(|r| r.decision == Decision::Allow).count() >= 2)
        .into_iter()
        .filter(|r| r.decision == Decision::Allow)
        .collect();
    assert_eq!(allowed.len(), 2, "{allowed:?}");
    assert_eq!(allowed[1].bytes_up, 5);
    assert!(allowed[1].bytes_down > 0);
}

#[test]
fn forwarded_port_answers_only_when_forwarded() {
    let f = Fixture::new();
    let web = http_server();
    let echo = echo_server();
    let (run, token) = f.run("r1", &[], &[web, echo]);
    for host in ["127.0.0.1", "localhost", "LOCALHOST."] {
        let r = ask(
            run.socket_path().unwrap(),
            &format!("GET http://{host}:{web}/ HTTP/1.1\r\n{}\r\n", basic(&token)),
        );
        assert_eq!(r.status, 200, "{host}: {r:?}");
    }
    let r = ask(
        run.socket_path().unwrap(),
        &format!("CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n{}\r\n", basic(&token)),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let (other, token2) = f.run("r2", &[], &[1]);
    let r = ask(
        other.socket_path().unwrap(),
        &format!(
            "GET http://127.0.0.1:{web}/ HTTP/1.1\r\n{}\r\n",
            basic(&token2)
        ),
    );
    assert_eq!(r.status, 403, "{r:?}");
    let r = ask(
        other.socket_path().unwrap(),
        &format!("CONNECT localhost:{web} HTTP/1.1\r\n{}\r\n", basic(&token2)),
    );
    assert_eq!(r.status, 403, "{r:?}");
    assert!(r.body.contains("not forwarded"), "{r:?}");
    assert_eq!(f.calls(), 0);
}

#[test]
fn tokens_are_checked_first_and_per_run() {
    let f = Fixture::new();
    let echo = echo_server();
    let allow = [format!("127.0.0.1:{echo}")];
    let (a, token_a) = f.run("run-a", &s(&allow), &[]);
    let (b, token_b) = f.run("run-b", &s(&allow), &[]);
    let connect = |auth: &str| format!("CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n{auth}\r\n");
    let wrong = oz0_egress::Token::generate().unwrap();
    let cases = [
        ("none", connect("")),
        ("wrong", connect(&basic(&wrong))),
        ("other run's", connect(&basic(&token_b))),
        (
            "other run's bearer",
            connect(&format!(
                "Proxy-Authorization: Bearer {}\r\n",
                token_b.expose()
            )),
        ),
        (
            "user not oz0",
            connect(&format!(
                "Proxy-Authorization: Basic {}\r\n",
                base64_encode(&format!("root:{}", token_a.expose()))
            )),
        ),
        (
            "twice",
            connect(&format!("{}{}", basic(&token_a), basic(&token_a))),
        ),
        (
            "in the URL only",
            format!(
                "GET http://oz0:{}@127.0.0.1:{echo}/ HTTP/1.1\r\n\r\n",
                token_a.expose()
            ),
        ),
        // Refused by token before its target is even parsed.
        (
            "bad target, no token",
            "CONNECT x.invalid HTTP/1.1\r\n\r\n".to_string(),
        ),
    ];
    for (name, req) in &cases {
        let r = ask(a.socket_path().unwrap(), req);
        assert_eq!(r.status, 407, "{name}: {r:?}");
        assert!(
            r.head.contains("Proxy-Authenticate: Basic realm=\"oz0\"")
                || r.head
                    .to_ascii_lowercase()
                    .contains("proxy-authenticate: basic realm=\"oz0\""),
            "{name}: {r:?}"
        );
    }
    assert_eq!(
        ask(a.socket_path().unwrap(), &connect(&basic(&token_a))).status,
        200
    );
    assert_eq!(
        ask(b.socket_path().unwrap(), &connect(&basic(&token_b))).status,
        200
    );
    assert_eq!(
        ask(b.socket_path().unwrap(), &connect(&basic(&token_a))).status,
        407
    );
    let auth = f
        .records()
        .iter()
        .filter(|r| r.decision == Decision::Auth)
        .count();
    assert_eq!(auth, cases.len() + 1);
}

#[test]
fn unlisted_hosts_get_403_naming_why() {
    let f = Fixture::new();
    f.map("api.example.com", "127.0.0.1");
    let (run, token) = f.run(
        "r1",
        &["api.example.com:443".into(), "*.wild.example".into()],
        &[],
    );
    let cases = [
        (
            "CONNECT other.example.com:443",
            "not in this run's allowlist",
        ),
        ("CONNECT api.example.com:80", "not in this run's allowlist"),
        ("CONNECT wild.example:443", "not in this run's allowlist"),
        ("CONNECT 127.0.0.1:443", "not in this run's allowlist"),
        ("CONNECT [::1]:443", "not in this run's allowlist"),
        (
            "GET http://other.example.com/",
            "not in this run's allowlist",
        ),
        ("CONNECT x.invalid:443", ".invalid"),
        ("CONNECT a.wild.invalid:443", ".invalid"),
        ("GET http://X.INVALID./", ".invalid"),
    ];
    for (line, why) in cases {
        let r = ask(
            run.socket_path().unwrap(),
            &format!("{line} HTTP/1.1\r\n{}\r\n", basic(&token)),
        );
        assert_eq!(r.status, 403, "{line}: {r:?}");
        assert!(r.body.contains(why), "{line}: {r:?}");
    }
    assert_eq!(
        f.calls(),
        0,
        "no lookup for refused names: {:?}",
        f.resolver.asked.lock().unwrap()
    );
}

#[test]
fn invalid_names_trigger_no_lookup_but_allowed_names_do() {
    let f = Fixture::new();
    let (run, token) = f.run("r1", &["*.example.com".into()], &[]);
    let r = ask(
        run.socket_path().unwrap(),
        &format!("CONNECT x.invalid:443 HTTP/1.1\r\n{}\r\n", basic(&token)),
    );
    assert_eq!(r.status, 403);
    assert_eq!(f.calls(), 0);
    // The counter works: an allowed (unmapped) name is looked up once.
    let r = ask(
        run.socket_path().unwrap(),
        &format!(
            "CONNECT a.example.com:443 HTTP/1.1\r\n{}\r\n",
            basic(&token)
        ),
    );
    assert_eq!(r.status, 502, "{r:?}");
    assert_eq!(f.calls(), 1);
}

#[test]
fn a_name_resolving_to_loopback_is_refused_unless_the_address_is_named() {
    let f = Fixture::new();
    let echo = echo_server();
    f.map("svc.test", "127.0.0.1");
    f.map("meta.test", "169.254.169.254");
    f.map("v6.test", "::ffff:127.0.0.1");
    let (run, token) = f.run(
        "r1",
        &["svc.test".into(), "meta.test".into(), "v6.test".into()],
        &[],
    );
    for (name, class) in [
        ("svc.test", "loopback"),
        ("meta.test", "metadata"),
        ("v6.test", "loopback"),
    ] {
        let r = ask(
            run.socket_path().unwrap(),
            &format!("CONNECT {name}:{echo} HTTP/1.1\r\n{}\r\n", basic(&token)),
        );
        assert_eq!(r.status, 403, "{name}: {r:?}");
        assert!(r.body.contains(class), "{name}: {r:?}");
    }
    assert_eq!(f.calls(), 3);
    let (named, token2) = f.run("r2", &["svc.test".into(), format!("127.0.0.1:{echo}")], &[]);
    let mut c = unix(named.socket_path().unwrap());
    write!(
        c,
        "CONNECT svc.test:{echo} HTTP/1.1\r\n{}\r\n",
        basic(&token2)
    )
    .unwrap();
    assert_eq!(read_resp(&mut c, true).unwrap().status, 200);
    c.write_all(b"x").unwrap();
    let mut b = [0u8; 1];
    c.read_exact(&mut b).unwrap();
    drop(c);
    let rec = f
        .records_until(|rs| rs.iter().any(|r| r.run == "r2" && r.addr.is_some()))
        .into_iter()
        .rfind(|r| r.run == "r2")
        .unwrap();
    assert_eq!(
        rec.addr.as_deref(),
        Some(format!("127.0.0.1:{echo}").as_str())
    );
    assert_eq!((rec.bytes_up, rec.bytes_down), (1, 1));
}

#[test]
fn bad_requests_get_400_and_the_proxy_lives_on() {
    let f = Fixture::new();
    let echo = echo_server();
    let (run, token) = f.run("r1", &[format!("127.0.0.1:{echo}")], &[]);
    let auth = basic(&token);
    let big = "a".repeat(20 * 1024);
    let huge = "a".repeat(1024 * 1024);
    let cases: Vec<(&str, String, u16)> = vec![
        (
            "oversized header",
            format!("CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n{auth}X-Big: {big}\r\n\r\n"),
            400,
        ),
        (
            "head over the parse buffer",
            format!("CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n{auth}X-Big: {huge}\r\n\r\n"),
            431,
        ),
        (
            "no port",
            format!("CONNECT 127.0.0.1 HTTP/1.1\r\n{auth}\r\n"),
            400,
        ),
        (
            "port 0",
            format!("CONNECT 127.0.0.1:0 HTTP/1.1\r\n{auth}\r\n"),
            400,
        ),
        (
            "port too big",
            format!("CONNECT 127.0.0.1:65536 HTTP/1.1\r\n{auth}\r\n"),
            400,
        ),
        (
            "empty host",
            format!("CONNECT :443 HTTP/1.1\r\n{auth}\r\n"),
            400,
        ),
        (
            "path target",
            format!("CONNECT /etc/passwd HTTP/1.1\r\n{auth}\r\n"),
            400,
        ),
        (
            "url target",
            format!("CONNECT http://127.0.0.1:{echo}/ HTTP/1.1\r\n{auth}\r\n"),
            400,
        ),
        (
            "userinfo target",
            format!("CONNECT u@127.0.0.1:{echo} HTTP/1.1\r\n{auth}\r\n"),
            400,
        ),
        (
            "bad name",
            format!("CONNECT a..b:443 HTTP/1.1\r\n{auth}\r\n"),
            400,
        ),
        (
            "bad ipv4",
            format!("CONNECT 256.1.1.1:443 HTTP/1.1\r\n{auth}\r\n"),
            400,
        ),
        (
            "origin form",
            format!("GET / HTTP/1.1\r\nHost: x\r\n{auth}\r\n"),
            400,
        ),
        (
            "https url",
            format!("GET https://127.0.0.1:{echo}/ HTTP/1.1\r\n{auth}\r\n"),
            400,
        ),
        (
            "ftp url",
            format!("GET ftp://127.0.0.1:{echo}/ HTTP/1.1\r\n{auth}\r\n"),
            400,
        ),
        (
            "crlf in target",
            format!("CONNECT 127.0.0.1:{echo}\r\nX: y HTTP/1.1\r\n{auth}\r\n"),
            400,
        ),
        (
            "nul in header",
            format!("CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n{auth}X-A: a\0b\r\n\r\n"),
            400,
        ),
        (
            "nul in target",
            format!("CONNECT 127.0.0.1\0:{echo} HTTP/1.1\r\n{auth}\r\n"),
            400,
        ),
        (
            "bare lf garbage",
            "\n\n\n\u{1}\u{2}garbage\r\n\r\n".to_string(),
            400,
        ),
        (
            "space in name",
            format!("GET http://a b/ HTTP/1.1\r\n{auth}\r\n"),
            400,
        ),
    ];
    for (name, req, want) in &cases {
        let r = ask(run.socket_path().unwrap(), req);
        assert_eq!(r.status, *want, "{name}: {r:?}");
    }
    let r = ask(
        run.socket_path().unwrap(),
        &format!("CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n{auth}\r\n"),
    );
    assert_eq!(r.status, 200);
    let bad = f
        .records()
        .iter()
        .filter(|r| r.decision == Decision::Bad)
        .count();
    assert_eq!(bad, cases.len(), "{:#?}", f.records());
}

#[test]
fn audit_records_every_decision_and_never_the_token() {
    let f = Fixture::new();
    let echo = echo_server();
    let (run, token) = f.run("audit-run", &[format!("127.0.0.1:{echo}")], &[]);
    let secret = token.expose().to_string();
    ask(
        run.socket_path().unwrap(),
        &format!("CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n{}\r\n", basic(&token)),
    );
    ask(
        run.socket_path().unwrap(),
        &format!("CONNECT other.test:1 HTTP/1.1\r\n{}\r\n", basic(&token)),
    );
    ask(
        run.socket_path().unwrap(),
        &format!("GET http://oz0:{secret}@127.0.0.1:{echo}/?token={secret} HTTP/1.1\r\n\r\n"),
    );
    ask(
        run.socket_path().unwrap(),
        &format!(
            "GET http://oz0:{secret}@127.0.0.1:{echo}/?token={secret} HTTP/1.1\r\n{}\r\n",
            basic(&token)
        ),
    );
    ask(
        run.socket_path().unwrap(),
        &format!("CONNECT {secret}:1 HTTP/1.1\r\n{}\r\n", basic(&token)),
    );
    let wanted = [
        Decision::Allow,
        Decision::Deny,
        Decision::Auth,
        Decision::Bad,
    ];
    let recs = f.records_until(|rs| wanted.iter().all(|w| rs.iter().any(|r| r.decision == *w)));
    let kinds: Vec<Decision> = recs.iter().map(|r| r.decision).collect();
    for want in wanted {
        assert!(kinds.contains(&want), "{want:?} missing in {recs:#?}");
    }
    for r in &recs {
        assert_eq!(r.run, "audit-run");
        let line = r.to_json_line();
        assert!(!line.contains(&secret[..16]), "token in audit line: {line}");
        serde_json::from_str::<serde_json::Value>(&line).unwrap();
    }
}

#[test]
fn dropping_the_guard_closes_the_socket() {
    let f = Fixture::new();
    let echo = echo_server();
    let (run, token) = f.run("r1", &[format!("127.0.0.1:{echo}")], &[]);
    let path = run.socket_path().unwrap().to_path_buf();
    let mut c = unix(&path);
    write!(
        c,
        "CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n{}\r\n",
        basic(&token)
    )
    .unwrap();
    assert_eq!(read_resp(&mut c, true).unwrap().status, 200);
    drop(run);
    assert!(!path.exists());
    assert!(std::os::unix::net::UnixStream::connect(&path).is_err());
    // The open tunnel ends too. The close reaches it asynchronously, so the
    // echo of a byte sent now may still come back first; then EOF must.
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
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
