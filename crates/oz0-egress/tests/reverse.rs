//! The reverse route (`oz0_egress::reverse`), end to end over real sockets:
//! the guest's bridge taking the node's connections on a published socket,
//! the node carrying each used one to a run's proxy on loopback TCP. The
//! runtime between them is played as Apple's container's `--publish-socket`
//! behaves: it makes the host's socket file, takes a connection there even
//! before the guest listens (and then drops it), and otherwise relays each
//! connection byte for byte to the guest's listener.
#![cfg(unix)]

mod common;

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;

/// The runtime's relay from `host` to `guest`; counts the connections it
/// dropped because the guest did not listen yet.
fn publish_socket(host: &Path, guest: &Path) -> Arc<AtomicUsize> {
    let l = UnixListener::bind(host).unwrap();
    let guest = guest.to_path_buf();
    let dropped = Arc::new(AtomicUsize::new(0));
    let d = dropped.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { return };
            let Ok(g) = UnixStream::connect(&guest) else {
                d.fetch_add(1, Ordering::SeqCst);
                continue;
            };
            std::thread::spawn(move || {
                let (mut c2, mut g2) = (c.try_clone().unwrap(), g.try_clone().unwrap());
                let t = std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c2, &mut g2);
                    let _ = g2.shutdown(std::net::Shutdown::Write);
                });
                let (mut g, mut c) = (g, c);
                let _ = std::io::copy(&mut g, &mut c);
                let _ = c.shutdown(std::net::Shutdown::Write);
                let _ = t.join();
            });
        }
    });
    dropped
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("oz0-reverse-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn the_guests_connections_reach_the_proxy_over_the_nodes() {
    let f = Fixture::new();
    let echo = echo_server();
    let (run, token) = f.tcp_run("r1", &[format!("127.0.0.1:{echo}")], &[]);
    let proxy = run.tcp_addr().unwrap();
    let d = dir("used");
    let (host, guest) = (d.join("host.sock"), d.join("guest.sock"));
    let dropped = publish_socket(&host, &guest);
    // The node dials before the guest listens, as it does while the VM
    // boots: those connections end without READY and are opened again.
    let dialing = oz0_egress::reverse::serve_dialing(&host, proxy).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(dropped.load(Ordering::SeqCst) >= 1, "no early connection");
    let inbound = UnixListener::bind(&guest).unwrap();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || oz0_egress::reverse::serve_accepting(l, inbound));

    let tunnel = |data: &[u8]| -> Vec<u8> {
        let mut c = tcp(port);
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            c,
            "CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n{}\r\n",
            basic(&token)
        )
        .unwrap();
        assert_eq!(read_resp(&mut c, true).unwrap().status, 200);
        let mut w = c.try_clone().unwrap();
        let owned = data.to_vec();
        let writer = std::thread::spawn(move || {
            w.write_all(&owned).unwrap();
            w.shutdown(std::net::Shutdown::Write).unwrap();
        });
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        writer.join().unwrap();
        got
    };
    let data: Vec<u8> = (0..1_000_000u32).map(|i| i.to_le_bytes()[0]).collect();
    assert!(tunnel(&data) == data, "a megabyte each way");
    // More at once than the node keeps ready: each waits for the next.
    let many: Vec<_> = (0..12)
        .map(|k| {
            let t = &tunnel;
            let msg = format!("connection {k}").into_bytes();
            std::thread::scope(|s| s.spawn(move || t(&msg)).join().unwrap())
        })
        .collect();
    for (k, got) in many.iter().enumerate() {
        assert_eq!(got, format!("connection {k}").as_bytes());
    }
    let parallel: Vec<Vec<u8>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..10)
            .map(|k| {
                let t = &tunnel;
                s.spawn(move || t(format!("at once {k}").as_bytes()))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (k, got) in parallel.iter().enumerate() {
        assert_eq!(got, format!("at once {k}").as_bytes());
    }
    // Connections the server closes before sending a byte use up nothing:
    // as many stay ready, and the next one is carried.
    for _ in 0..(3 * oz0_egress::reverse::POOL) {
        drop(tcp(port));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(tunnel(b"after the empty ones"), b"after the empty ones");
    // The proxy still wants the run's token, and holds its allowlist.
    let mut c = tcp(port);
    write!(c, "CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n\r\n").unwrap();
    assert_eq!(read_resp(&mut c, true).unwrap().status, 407);
    let mut c = tcp(port);
    write!(
        c,
        "CONNECT 127.0.0.1:{} HTTP/1.1\r\n{}\r\n",
        echo.wrapping_add(1),
        basic(&token)
    )
    .unwrap();
    assert_eq!(read_resp(&mut c, true).unwrap().status, 403);
    // Stopped, the node closes what it holds, whatever the runtime does
    // (here it keeps its end open): no slot outlives it.
    let counter = dialing.live_counter();
    assert!(counter() >= oz0_egress::reverse::POOL, "{}", counter());
    drop(dialing);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while counter() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(counter(), 0, "slots alive after the stop");
    let _ = std::fs::remove_dir_all(&d);
}

/// A guest that is never ready costs the node nothing but its retries, and
/// stopping ends them.
#[test]
fn a_guest_that_never_listens_is_dialled_until_stopped() {
    let d = dir("never");
    let (host, guest) = (d.join("host.sock"), d.join("guest.sock"));
    let dropped = publish_socket(&host, &guest);
    let proxy = "127.0.0.1:9".parse().unwrap();
    let dialing = oz0_egress::reverse::serve_dialing(&host, proxy).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let before = dropped.load(Ordering::SeqCst);
    assert!(before >= 4, "{before}");
    // Backing off: over 2 s each of the 4 slots tries at most once per
    // REDIAL_MAX (a loaded machine tries fewer times, never more).
    std::thread::sleep(Duration::from_millis(600));
    let from = dropped.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_secs(2));
    let tries = dropped.load(Ordering::SeqCst) - from;
    let most = oz0_egress::reverse::POOL
        * (2000 / oz0_egress::reverse::REDIAL_MAX.as_millis() as usize + 1);
    assert!(
        (1..=most).contains(&tries),
        "{tries} tries in 2 s, at most {most}"
    );
    drop(dialing);
    std::thread::sleep(Duration::from_millis(300));
    let after = dropped.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(dropped.load(Ordering::SeqCst), after, "still dialling");
    let _ = std::fs::remove_dir_all(&d);
}
