//! The bridge end to end: a run's connections reaching the proxy through
//! the in-sandbox bridge (descriptor hand-over, a channel instead of a
//! socket file, the copying bridge) and real clients (`curl`, Python)
//! through it. Real unix sockets, real listeners on 127.0.0.1.

// Channels and the descriptor hand-over are Linux only; runs on TCP
// listeners are in tcp.rs.
#![cfg(target_os = "linux")]

mod common;

use std::io::{self, Read, Write};
use std::process::Command;

use common::*;

#[test]
fn bridge_carries_connect_and_plain_http() {
    let f = Fixture::new();
    let echo = echo_server();
    let web = http_server();
    let (run, token) = f.run(
        "r1",
        &[format!("127.0.0.1:{echo}"), format!("127.0.0.1:{web}")],
        &[],
    );
    let port = bridge(run.socket_path().unwrap());
    let mut c = tcp(port);
    write!(
        c,
        "CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n{}\r\n",
        basic(&token)
    )
    .unwrap();
    assert_eq!(read_resp(&mut c, true).unwrap().status, 200);
    let data: Vec<u8> = (0..1_000_000u32).map(|i| i.to_le_bytes()[0]).collect();
    let mut w = c.try_clone().unwrap();
    let d2 = data.clone();
    let writer = std::thread::spawn(move || w.write_all(&d2).unwrap());
    let mut got = vec![0u8; data.len()];
    c.read_exact(&mut got).unwrap();
    writer.join().unwrap();
    assert!(got == data);
    let mut c = tcp(port);
    write!(
        c,
        "GET http://127.0.0.1:{web}/via-bridge HTTP/1.1\r\n{}\r\n",
        basic(&token)
    )
    .unwrap();
    let r = read_resp(&mut c, false).unwrap();
    assert!(r.body.starts_with("GET /via-bridge"), "{r:?}");
    let mut c = tcp(port);
    write!(c, "CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n\r\n").unwrap();
    assert_eq!(read_resp(&mut c, true).unwrap().status, 407);
}

/// A run served over a channel (the tier-1 bridge's way): connections the
/// bridge hands over are served with the run's token and allowlist; no
/// socket file exists; the channel takes nothing but hand-overs, and the
/// run's end closes it.
#[test]
fn a_run_over_a_channel_is_served_like_one_on_a_socket() {
    let f = Fixture::new();
    let echo = echo_server();
    let (run, token, port) = f.channel_run("ch1", &[format!("127.0.0.1:{echo}")]);
    assert!(run.socket_path().is_none());
    for _ in 0..3 {
        let mut c = tcp(port);
        write!(
            c,
            "CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n{}\r\n",
            basic(&token)
        )
        .unwrap();
        assert_eq!(read_resp(&mut c, true).unwrap().status, 200);
        c.write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        c.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
    }
    let mut c = tcp(port);
    write!(c, "CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n\r\n").unwrap();
    assert_eq!(read_resp(&mut c, true).unwrap().status, 407);
    let mut c = tcp(port);
    write!(c, "CONNECT x.invalid:443 HTTP/1.1\r\n{}\r\n", basic(&token)).unwrap();
    assert_eq!(read_resp(&mut c, true).unwrap().status, 403);
    let runs: Vec<_> = f
        .records_at_least(5)
        .iter()
        .map(|r| r.run.clone())
        .collect();
    assert_eq!(runs.len(), 5, "{runs:?}");
    assert!(runs.iter().all(|r| r == "ch1"));
    // Plain bytes on a channel (a bridge that is not one) end it: the
    // proxy closes its end.
    let (_run2, theirs) = f
        .proxy
        .as_ref()
        .unwrap()
        .add_run_channel(
            "ch2".into(),
            oz0_egress::Token::generate().unwrap(),
            oz0_policy::net::Egress::parse(&[], &[]).unwrap(),
        )
        .unwrap();
    let mut theirs = std::os::unix::net::UnixStream::from(theirs);
    theirs.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    theirs
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    match theirs.read(&mut [0u8; 16]) {
        Ok(0) => {}
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
        other => panic!("the channel stayed open: {other:?}"),
    }
    drop(run);
    // After the run's end, nothing is served.
    let mut c = tcp(port);
    let _ = write!(
        c,
        "CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n{}\r\n",
        basic(&token)
    );
    assert!(read_resp(&mut c, true).is_err());
}

/// Bytes a client sends right behind its CONNECT head (before the 200)
/// still reach the server, a half-close passes through the tunnel, and the
/// audit record counts every byte both ways.
#[test]
fn a_tunnel_through_the_bridge_keeps_early_bytes_and_counts_them() {
    let f = Fixture::new();
    let echo = echo_server();
    let (run, token) = f.run("r1", &[format!("127.0.0.1:{echo}")], &[]);
    let port = bridge(run.socket_path().unwrap());
    let mut c = tcp(port);
    let early = b"sent with the head;";
    let mut head =
        format!("CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n{}\r\n", basic(&token)).into_bytes();
    head.extend_from_slice(early);
    c.write_all(&head).unwrap();
    assert_eq!(read_resp(&mut c, true).unwrap().status, 200);
    let rest: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    c.write_all(&rest).unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got).unwrap();
    let mut want = early.to_vec();
    want.extend_from_slice(&rest);
    assert!(
        got == want,
        "echoed {} bytes, sent {}",
        got.len(),
        want.len()
    );
    drop(c);
    let n = want.len() as u64;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let recs = f.records();
        if let Some(r) = recs
            .iter()
            .find(|r| r.method == "CONNECT" && r.status == 200)
        {
            assert_eq!((r.bytes_up, r.bytes_down), (n, n), "{r:?}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no audit record: {recs:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A unix-socket relay that carries bytes but no descriptors, as a VMM's
/// socket forwarding into a guest does; returns its socket path.
fn byte_relay(proxy: &std::path::Path, dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("relay.sock");
    let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let proxy = proxy.to_path_buf();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { return };
            let proxy = proxy.clone();
            std::thread::spawn(move || {
                let Ok(p) = std::os::unix::net::UnixStream::connect(&proxy) else {
                    return;
                };
                let (mut c2, mut p2) = (c.try_clone().unwrap(), p.try_clone().unwrap());
                let t = std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c2, &mut p2);
                    let _ = p2.shutdown(std::net::Shutdown::Write);
                });
                let (mut p, mut c) = (p, c);
                let _ = std::io::copy(&mut p, &mut c);
                let _ = c.shutdown(std::net::Shutdown::Write);
                let _ = t.join();
            });
        }
    });
    path
}

/// Through a socket that carries no descriptors, the handing-over bridge
/// fails and the copying bridge (the one a smolvm guest runs) works.
#[test]
fn the_copying_bridge_works_where_descriptors_cannot_travel() {
    let f = Fixture::new();
    let echo = echo_server();
    let (run, token) = f.run("r1", &[format!("127.0.0.1:{echo}")], &[]);
    let dir = std::env::temp_dir().join(format!("oz0-relay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let relay = byte_relay(run.socket_path().unwrap(), &dir);
    let tunnel = |port: u16| -> Option<Vec<u8>> {
        let mut c = tcp(port);
        c.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .ok()?;
        write!(
            c,
            "CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n{}\r\n",
            basic(&token)
        )
        .ok()?;
        if read_resp(&mut c, true).ok()?.status != 200 {
            return None;
        }
        c.write_all(b"through the relay").ok()?;
        c.shutdown(std::net::Shutdown::Write).ok()?;
        let mut got = Vec::new();
        c.read_to_end(&mut got).ok()?;
        Some(got)
    };
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let copying = l.local_addr().unwrap().port();
    let r2 = relay.clone();
    std::thread::spawn(move || oz0_egress::bridge::serve_copying(l, &r2));
    assert_eq!(tunnel(copying).as_deref(), Some(&b"through the relay"[..]));
    let handing = bridge(&relay);
    assert_eq!(
        tunnel(handing),
        None,
        "a handed-over socket cannot cross a byte relay"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn curl_through_the_bridge() {
    if !have("curl") {
        return;
    }
    let f = Fixture::new();
    let web = http_server();
    let (run, token) = f.run("r1", &[format!("127.0.0.1:{web}")], &[web + 1]);
    let port = bridge(run.socket_path().unwrap());
    let curl = |extra: &[&str], proxy: &str, url: &str| {
        let out = Command::new("curl")
            .args([
                "-sS",
                "--noproxy",
                "",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "10",
            ])
            .args(extra)
            .args(["--proxy", proxy, url])
            .env_remove("NO_PROXY")
            .env_remove("no_proxy")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let url = token.proxy_url(port);
    let target = format!("http://127.0.0.1:{web}/");
    assert_eq!(curl(&[], &url, &target), "200");
    assert_eq!(curl(&["--proxytunnel"], &url, &target), "200");
    let nobody = format!("http://127.0.0.1:{port}");
    assert_eq!(curl(&[], &nobody, &target), "407");
    assert_eq!(curl(&[], &url, "http://unlisted.test/"), "403");
    assert_eq!(curl(&[], &url, "http://x.invalid/"), "403");
    assert_eq!(f.calls(), 0);
}

#[test]
fn python_urllib_through_the_bridge() {
    if !have("python3") {
        return;
    }
    let f = Fixture::new();
    let web = http_server();
    let (run, token) = f.run("r1", &[format!("127.0.0.1:{web}")], &[]);
    let port = bridge(run.socket_path().unwrap());
    let script = r#"
import os, sys, urllib.request, urllib.error
url = os.environ["TARGET"]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": os.environ["PROXY"]}))
try:
    print(opener.open(url, timeout=10).status)
except urllib.error.HTTPError as e:
    print(e.code)
"#;
    let run_py = |proxy: &str, target: &str| {
        let out = Command::new("python3")
            .args(["-c", script])
            .env("PROXY", proxy)
            .env("TARGET", target)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let target = format!("http://127.0.0.1:{web}/py");
    assert_eq!(run_py(&token.proxy_url(port), &target), "200");
    assert_eq!(run_py(&format!("http://127.0.0.1:{port}"), &target), "407");
    assert_eq!(run_py(&token.proxy_url(port), "http://x.invalid/"), "403");
}
