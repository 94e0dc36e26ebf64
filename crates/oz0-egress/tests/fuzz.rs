//! Arbitrary input never panics: the token check, target and allow-entry
//! parsing, and the live proxy fed arbitrary bytes.

mod common;

#[cfg(unix)]
use std::io::{Read, Write};
#[cfg(unix)]
use std::time::Duration;

#[cfg(unix)]
use common::*;
use oz0_egress::Token;
use oz0_policy::net::{parse_target, AllowRule, Egress, Host, Port};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn token_check_never_panics_or_accepts_noise(value in proptest::collection::vec(any::<u8>(), 0..700)) {
        let t = Token::from_secret(&"7".repeat(64)).unwrap();
        prop_assert!(!t.authorizes(&value));
    }

    #[test]
    fn host_parsing_is_total_and_idempotent(s in "\\PC{0,80}") {
        if let Ok(h) = Host::parse(&s) {
            let again = Host::parse(&h.to_string()).unwrap();
            prop_assert_eq!(again, h);
        }
        let _ = parse_target(&s);
        if let Ok(rule) = AllowRule::parse(&s) {
            prop_assert_eq!(AllowRule::parse(&rule.to_string()).unwrap(), rule);
        }
    }

    #[test]
    fn host_like_strings(s in "[0-9a-fA-FxX.:\\[\\]*%-]{0,40}", port in any::<u16>()) {
        let _ = Host::parse(&s);
        let _ = parse_target(&format!("{s}:{port}"));
        if let Ok(rule) = AllowRule::parse(&s) {
            let e = Egress { allow: vec![rule], forward: vec![] };
            if let (Ok(h), Some(p)) = (Host::parse(&s), Port::new(port)) {
                let _ = e.verdict(&h, p);
            }
        }
    }
}

#[cfg(unix)]
fn request_bytes() -> impl Strategy<Value = Vec<u8>> {
    let prefix = prop_oneof![
        Just(b"".to_vec()),
        Just(b"CONNECT ".to_vec()),
        Just(b"GET http://".to_vec()),
        Just(b"CONNECT 127.0.0.1:1 HTTP/1.1\r\n".to_vec()),
    ];
    (prefix, proptest::collection::vec(any::<u8>(), 0..600)).prop_map(|(mut p, rest)| {
        p.extend(rest);
        p
    })
}

#[cfg(unix)]
#[test]
fn live_proxy_survives_arbitrary_bytes() {
    let f = Fixture::new();
    let echo = echo_server();
    let (run, token) = f.run("fuzz", &[format!("127.0.0.1:{echo}")], &[]);
    let path = run.socket_path().unwrap().to_path_buf();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 200,
        ..ProptestConfig::default()
    });
    runner
        .run(&request_bytes(), |bytes| {
            let mut s = unix(&path);
            s.set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
            let _ = s.write_all(&bytes);
            let _ = s.shutdown(std::net::Shutdown::Write);
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out);
            // Whatever came back is an HTTP status line or nothing.
            prop_assert!(
                out.is_empty() || out.starts_with(b"HTTP/1.1 "),
                "{:?}",
                String::from_utf8_lossy(&out)
            );
            Ok(())
        })
        .unwrap();
    let r = ask(
        &path,
        &format!("CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n{}\r\n", basic(&token)),
    );
    assert_eq!(r.status, 200);
}
