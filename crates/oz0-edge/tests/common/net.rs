//! Connections as many clients make them: from a chosen loopback address
//! (all of 127.0.0.0/8 is this machine's on Linux), held idle, asked once
//! for the edge's health, and checked for being still open.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::time::Duration;

/// A plain request for `/v1/health`.
pub const HEALTH: &str = "GET /v1/health HTTP/1.1\r\nhost: x\r\n\r\n";

/// A connection to `to` from `127.0.0.<last>`.
pub fn connect_from(last: u8, to: SocketAddr) -> TcpStream {
    use rustix::net::{AddressFamily, SocketType};
    let fd = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
    rustix::net::bind(&fd, &SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, last), 0))
        .unwrap_or_else(|e| panic!("binding 127.0.0.{last}: {e}"));
    rustix::net::connect(&fd, &to).unwrap_or_else(|e| panic!("connecting to {to}: {e}"));
    TcpStream::from(fd)
}

/// Whether the edge has not closed `s` (nothing to read, and no end).
pub fn is_open(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 1];
    let open = matches!((&*s).read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    s.set_nonblocking(false).unwrap();
    open
}

/// Sends `request` on `s` and reads until the edge closes it, or until
/// `guard` passes with nothing more (a guard against a hung test only).
pub fn ask(s: &mut TcpStream, request: &str, guard: Duration) -> String {
    // A connection the edge refused may be closed before this is written.
    let _ = s.write_all(request.as_bytes());
    s.set_read_timeout(Some(guard)).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
        // One answer is enough: a kept-alive connection stays open.
        if out.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The edge's answer to a health request from `127.0.0.<last>`.
pub fn health_from(last: u8, to: SocketAddr, guard: Duration) -> String {
    ask(&mut connect_from(last, to), HEALTH, guard)
}
