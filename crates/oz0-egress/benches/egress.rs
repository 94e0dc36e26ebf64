//! Egress benchmark: bulk transfer and per-connection latency through
//! bridge + proxy (unix), the proxy on a run's socket file (unix) and on a
//! run's loopback TCP listener (everywhere), against direct loopback,
//! measured in the same run.
//!
//! `cargo bench -p oz0-egress --bench egress [-- MiB]`. Prints ratios; asserts
//! nothing. Every connection is to a listener this program opens on
//! 127.0.0.1.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
#[cfg(unix)]
use std::path::PathBuf;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

#[cfg(unix)]
use oz0_egress::RunEgress;
use oz0_egress::{AuditRecord, Proxy, ProxyConfig, Token};
use oz0_policy::net::Egress;

const CHUNK: usize = 256 * 1024;

/// Accepts connections; reads each to EOF, then answers with the count.
fn sink_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    thread::spawn(move || {
        for s in l.incoming().flatten() {
            thread::spawn(move || {
                let mut s = s;
                let mut buf = vec![0u8; CHUNK];
                let mut n = 0u64;
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(k) => n += k as u64,
                    }
                }
                let _ = s.write_all(&n.to_le_bytes());
            });
        }
    });
    port
}

/// Accepts connections; writes the number of bytes the client asks for
/// (8-byte little endian), then closes.
fn source_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    thread::spawn(move || {
        for s in l.incoming().flatten() {
            thread::spawn(move || {
                let mut s = s;
                let mut want = [0u8; 8];
                if s.read_exact(&mut want).is_err() {
                    return;
                }
                let mut left = u64::from_le_bytes(want);
                let buf = vec![7u8; CHUNK];
                while left > 0 {
                    let k = usize::try_from(left).map_or(CHUNK, |l| l.min(CHUNK));
                    if s.write_all(&buf[..k]).is_err() {
                        return;
                    }
                    left -= k as u64;
                }
            });
        }
    });
    port
}

/// Echoes one byte per connection.
fn echo_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    thread::spawn(move || {
        for s in l.incoming().flatten() {
            thread::spawn(move || {
                let mut s = s;
                let mut b = [0u8; 1];
                if s.read_exact(&mut b).is_ok() {
                    let _ = s.write_all(&b);
                }
            });
        }
    });
    port
}

trait Stream: Read + Write {
    fn half_close(&self);
}
impl Stream for TcpStream {
    fn half_close(&self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}
#[cfg(unix)]
impl Stream for UnixStream {
    fn half_close(&self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

#[derive(Clone, Copy)]
enum Path_ {
    Direct,
    /// The in-sandbox bridge on this port, then the run's socket file.
    #[cfg(unix)]
    Bridge(u16),
    /// The run's socket file.
    #[cfg(unix)]
    Socket,
    /// A run's loopback TCP listener on this port.
    Tcp(u16),
}

struct Setup {
    token: Token,
    #[cfg(unix)]
    socket: PathBuf,
}

fn open(setup: &Setup, how: Path_, port: u16) -> io::Result<Box<dyn Stream>> {
    let mut s: Box<dyn Stream> = match how {
        Path_::Direct => {
            let s = TcpStream::connect(("127.0.0.1", port))?;
            s.set_nodelay(true)?;
            return Ok(Box::new(s));
        }
        #[cfg(unix)]
        Path_::Bridge(b) => {
            let s = TcpStream::connect(("127.0.0.1", b))?;
            s.set_nodelay(true)?;
            Box::new(s)
        }
        #[cfg(unix)]
        Path_::Socket => Box::new(UnixStream::connect(&setup.socket)?),
        Path_::Tcp(p) => {
            let s = TcpStream::connect(("127.0.0.1", p))?;
            s.set_nodelay(true)?;
            Box::new(s)
        }
    };
    write!(
        s,
        "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nProxy-Authorization: Bearer {}\r\n\r\n",
        setup.token.expose()
    )?;
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        head.push(b[0]);
    }
    if !head.starts_with(b"HTTP/1.1 200") {
        return Err(io::Error::other(String::from_utf8_lossy(&head).to_string()));
    }
    Ok(s)
}

fn upload(setup: &Setup, how: Path_, port: u16, bytes: u64) -> f64 {
    let mut s = open(setup, how, port).unwrap();
    let buf = vec![1u8; CHUNK];
    let t = Instant::now();
    let mut left = bytes;
    while left > 0 {
        let k = usize::try_from(left).map_or(CHUNK, |l| l.min(CHUNK));
        s.write_all(&buf[..k]).unwrap();
        left -= k as u64;
    }
    s.half_close();
    let mut n = [0u8; 8];
    s.read_exact(&mut n).unwrap();
    assert_eq!(u64::from_le_bytes(n), bytes);
    bytes as f64 / t.elapsed().as_secs_f64() / (1024.0 * 1024.0)
}

fn download(setup: &Setup, how: Path_, port: u16, bytes: u64) -> f64 {
    let mut s = open(setup, how, port).unwrap();
    let mut buf = vec![0u8; CHUNK];
    let t = Instant::now();
    s.write_all(&bytes.to_le_bytes()).unwrap();
    let mut got = 0u64;
    while got < bytes {
        let k = s.read(&mut buf).unwrap();
        assert!(k > 0, "early EOF");
        got += k as u64;
    }
    bytes as f64 / t.elapsed().as_secs_f64() / (1024.0 * 1024.0)
}

fn latency(setup: &Setup, how: Path_, port: u16, n: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let mut s = open(setup, how, port).unwrap();
        s.write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        out.push(t.elapsed());
    }
    out.sort();
    out
}

// `p` is a fraction in 0..=1, so the rounded index lies in 0..v.len() (and
// a float-to-int `as` saturates in any case).
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn pct(v: &[Duration], p: f64) -> Duration {
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn best(mut f: impl FnMut() -> f64, rounds: usize) -> f64 {
    (0..rounds).map(|_| f()).fold(0.0, f64::max)
}

fn main() {
    let mib: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(512);
    let bytes = mib * 1024 * 1024;
    let sink = sink_server();
    let source = source_server();
    let echo = echo_server();

    let proxy = Proxy::start(ProxyConfig {
        audit: Arc::new(|_: &AuditRecord| {}),
        ..ProxyConfig::default()
    })
    .unwrap();
    let token = Token::generate().unwrap();
    let allow: Vec<String> = [sink, source, echo]
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    let egress = Egress::parse(&allow, &[]).unwrap();
    let tcp_guard = proxy
        .add_run_tcp(
            "bench-tcp".into(),
            token.clone(),
            egress.clone(),
            "127.0.0.1:0".parse().unwrap(),
        )
        .unwrap();
    let tcp_port = tcp_guard.tcp_addr().unwrap().port();
    let mut paths = vec![("direct loopback", Path_::Direct)];

    #[cfg(unix)]
    let dir = std::env::temp_dir().join(format!("oz0-egress-bench-{}", std::process::id()));
    #[cfg(unix)]
    let (guard, setup) = {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("bench.sock");
        let guard = proxy
            .add_run(RunEgress {
                run_id: "bench".into(),
                token: token.clone(),
                egress,
                socket_path: socket.clone(),
            })
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let bridge_port = listener.local_addr().unwrap().port();
        let sock2 = socket.clone();
        thread::spawn(move || oz0_egress::bridge::serve(listener, &sock2));
        paths.push(("proxy (unix socket)", Path_::Socket));
        paths.push(("bridge + proxy", Path_::Bridge(bridge_port)));
        (guard, Setup { token, socket })
    };
    #[cfg(not(unix))]
    let setup = {
        drop(egress);
        Setup { token }
    };
    paths.push(("proxy (tcp listener)", Path_::Tcp(tcp_port)));

    println!(
        "egress benchmark: {mib} MiB per transfer, best of 3; 400 new connections for latency"
    );
    let mut up = Vec::new();
    let mut down = Vec::new();
    for &(name, how) in &paths {
        let u = best(|| upload(&setup, how, sink, bytes), 3);
        let d = best(|| download(&setup, how, source, bytes), 3);
        println!("throughput {name:<20} up {u:>8.0} MiB/s   down {d:>8.0} MiB/s");
        up.push(u);
        down.push(d);
    }
    for (i, &(name, _)) in paths.iter().enumerate().skip(1) {
        println!(
            "throughput ratio {name:<20} / direct: up {:.2}, down {:.2}{}",
            up[i] / up[0],
            down[i] / down[0],
            if name == "bridge + proxy" {
                " (target >= 0.80)"
            } else {
                ""
            }
        );
    }
    let mut med = Vec::new();
    for &(name, how) in &paths {
        let _ = latency(&setup, how, echo, 20);
        let v = latency(&setup, how, echo, 400);
        println!(
            "new connection + 1-byte echo, {name:<20} median {:>7.1} us   p99 {:>7.1} us",
            pct(&v, 0.5).as_secs_f64() * 1e6,
            pct(&v, 0.99).as_secs_f64() * 1e6
        );
        med.push((pct(&v, 0.5), pct(&v, 0.99)));
    }
    for (i, &(name, _)) in paths.iter().enumerate().skip(1) {
        println!(
            "added latency per new connection ({name} - direct): median {:.1} us, p99 {:.1} us",
            (med[i].0.as_secs_f64() - med[0].0.as_secs_f64()) * 1e6,
            (med[i].1.as_secs_f64() - med[0].1.as_secs_f64()) * 1e6
        );
    }
    drop(tcp_guard);
    #[cfg(unix)]
    drop(guard);
    proxy.shutdown();
    #[cfg(unix)]
    let _ = std::fs::remove_dir_all(&dir);
}
