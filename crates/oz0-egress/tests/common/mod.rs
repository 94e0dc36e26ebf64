//! Shared fixtures: a proxy with runs on temp unix sockets (unix) or
//! loopback TCP listeners, a test resolver, and upstream servers on
//! 127.0.0.1 only.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
#[cfg(unix)]
use std::path::Path;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

#[cfg(unix)]
use oz0_egress::RunEgress;
use oz0_egress::{
    AuditRecord, Proxy, ProxyConfig, ProxyHandle, ProxyLimits, Resolver, RunGuard, Token,
};
use oz0_policy::net::{Egress, HostName};

/// Maps test names to addresses and counts every call.
#[derive(Default)]
pub struct MapResolver {
    pub map: Mutex<HashMap<String, Vec<IpAddr>>>,
    pub calls: AtomicUsize,
    pub asked: Mutex<Vec<String>>,
}

impl Resolver for MapResolver {
    fn resolve(&self, name: &HostName, _port: u16) -> io::Result<Vec<IpAddr>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.asked.lock().unwrap().push(name.to_string());
        self.map
            .lock()
            .unwrap()
            .get(name.as_str())
            .cloned()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such test name"))
    }
}

pub struct Fixture {
    pub proxy: Option<ProxyHandle>,
    pub resolver: Arc<MapResolver>,
    pub audit: Arc<Mutex<Vec<AuditRecord>>>,
    pub dir: PathBuf,
}

static N: AtomicUsize = AtomicUsize::new(0);

impl Fixture {
    pub fn new() -> Fixture {
        Fixture::with_limits(ProxyLimits::default())
    }

    /// A proxy with `limits` instead of the defaults.
    pub fn with_limits(limits: ProxyLimits) -> Fixture {
        let dir = std::env::temp_dir().join(format!(
            "oz0-egress-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let resolver = Arc::new(MapResolver::default());
        let audit: Arc<Mutex<Vec<AuditRecord>>> = Arc::default();
        let sink = audit.clone();
        let config = ProxyConfig {
            resolver: resolver.clone(),
            audit: Arc::new(move |r: &AuditRecord| sink.lock().unwrap().push(r.clone())),
            own_addrs: None,
            limits,
            ..ProxyConfig::default()
        };
        Fixture {
            proxy: Some(Proxy::start(config).unwrap()),
            resolver,
            audit,
            dir,
        }
    }

    pub fn map(&self, name: &str, ip: &str) {
        self.resolver
            .map
            .lock()
            .unwrap()
            .insert(name.into(), vec![ip.parse().unwrap()]);
    }

    pub fn calls(&self) -> usize {
        self.resolver.calls.load(Ordering::SeqCst)
    }

    /// Adds a run; returns its guard and token.
    #[cfg(unix)]
    pub fn run(&self, id: &str, allow: &[String], forward: &[u16]) -> (RunGuard, Token) {
        let token = Token::generate().unwrap();
        let egress = Egress::parse(allow, forward).unwrap();
        let guard = self
            .proxy
            .as_ref()
            .unwrap()
            .add_run(RunEgress {
                run_id: id.into(),
                token: token.clone(),
                egress,
                socket_path: self.dir.join(format!("{id}.sock")),
            })
            .unwrap();
        (guard, token)
    }

    /// Adds a run on a loopback TCP listener at 127.0.0.1:0; returns its
    /// guard and token (the guard tells the bound address).
    pub fn tcp_run(&self, id: &str, allow: &[String], forward: &[u16]) -> (RunGuard, Token) {
        let token = Token::generate().unwrap();
        let egress = Egress::parse(allow, forward).unwrap();
        let guard = self
            .proxy
            .as_ref()
            .unwrap()
            .add_run_tcp(
                id.into(),
                token.clone(),
                egress,
                "127.0.0.1:0".parse().unwrap(),
            )
            .unwrap();
        (guard, token)
    }

    /// Adds a run served over a channel, with its bridge listening on a
    /// loopback port; returns the guard, the token and the port.
    #[cfg(target_os = "linux")]
    pub fn channel_run(&self, id: &str, allow: &[String]) -> (RunGuard, Token, u16) {
        let token = Token::generate().unwrap();
        let egress = Egress::parse(allow, &[]).unwrap();
        let (guard, channel) = self
            .proxy
            .as_ref()
            .unwrap()
            .add_run_channel(id.into(), token.clone(), egress)
            .unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let channel = std::os::unix::net::UnixStream::from(channel);
        thread::spawn(move || oz0_egress::bridge::serve_channel(l, &channel));
        (guard, token, port)
    }

    pub fn records(&self) -> Vec<AuditRecord> {
        self.audit.lock().unwrap().clone()
    }

    /// The audit records once there are at least `n` (a tunnel's record is
    /// written when the tunnel ends, after the client has let go), or what
    /// there is after 5 s.
    pub fn records_at_least(&self, n: usize) -> Vec<AuditRecord> {
        self.records_until(|r| r.len() >= n)
    }

    /// The audit records once `done` says they are all there (see
    /// [`Fixture::records_at_least`]), or what there is after 5 s.
    pub fn records_until(&self, done: impl Fn(&[AuditRecord]) -> bool) -> Vec<AuditRecord> {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let r = self.records();
            if done(&r) || std::time::Instant::now() > until {
                return r;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(p) = self.proxy.take() {
            p.shutdown();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn basic(token: &Token) -> String {
    use base64_encode as b64;
    format!(
        "Proxy-Authorization: Basic {}\r\n",
        b64(&format!("oz0:{}", token.expose()))
    )
}

/// Standard base64 (tests only; the proxy decodes with the base64 crate).
pub fn base64_encode(s: &str) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = s.as_bytes();
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A TCP echo server on 127.0.0.1.
pub fn echo_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            thread::spawn(move || {
                let mut r = s.try_clone().unwrap();
                let _ = io::copy(&mut r, &mut s);
                let _ = s.shutdown(Shutdown::Write);
            });
        }
    });
    port
}

/// An HTTP server on 127.0.0.1 that answers each request with its own
/// request head as the body (keep-alive).
pub fn http_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { return };
            thread::spawn(move || {
                let mut w = s.try_clone().unwrap();
                let mut r = BufReader::new(s);
                loop {
                    let mut head = String::new();
                    let mut len = 0usize;
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap_or(0);
                        }
                        head.push_str(&line);
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0; len];
                    if r.read_exact(&mut body).is_err() {
                        return;
                    }
                    head.push_str(&String::from_utf8_lossy(&body));
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Upstream: {port}\r\n\r\n{head}",
                        head.len()
                    );
                    if w.write_all(resp.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

pub trait Conn: Read + Write {}
impl<T: Read + Write> Conn for T {}

/// A response: status, head text (lowercased names kept as sent), body.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub head: String,
    pub body: String,
}

/// Reads one response (Content-Length bodies, or none for CONNECT 200).
pub fn read_resp(s: &mut dyn Conn, connect: bool) -> io::Result<Resp> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("eof after {:?}", String::from_utf8_lossy(&head)),
            ));
        }
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head).to_string();
    let status: u16 = head[9..12].parse().unwrap();
    let len = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0; if connect && status == 200 { 0 } else { len }];
    s.read_exact(&mut body)?;
    Ok(Resp {
        status,
        head,
        body: String::from_utf8_lossy(&body).to_string(),
    })
}

#[cfg(unix)]
pub fn unix(path: &Path) -> UnixStream {
    let s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

pub fn tcp(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Connects to `addr` (a run's TCP listener), with a read deadline.
pub fn tcp_to(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Sends `req` on a fresh connection to the run's TCP listener and reads
/// the answer.
pub fn ask_tcp(addr: SocketAddr, req: &str) -> Resp {
    let mut s = tcp_to(addr);
    // The proxy may answer and close before a huge request is all sent.
    let _ = s.write_all(req.as_bytes());
    read_resp(&mut s, req.starts_with("CONNECT")).unwrap()
}

/// Sends `req` on a fresh connection to the run's socket and reads the answer.
#[cfg(unix)]
pub fn ask(path: &Path, req: &str) -> Resp {
    let mut s = unix(path);
    // The proxy may answer and close before a huge request is all sent.
    let _ = s.write_all(req.as_bytes());
    read_resp(&mut s, req.starts_with("CONNECT")).unwrap()
}

/// Starts the bridge on 127.0.0.1:0 for `sock`; returns its port.
#[cfg(unix)]
pub fn bridge(sock: &Path) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let sock = sock.to_path_buf();
    thread::spawn(move || oz0_egress::bridge::serve(l, &sock));
    port
}

/// True when a missing tool must fail the test (CI).
pub fn must_work() -> bool {
    std::env::var("OZ0_MUST_WORK").is_ok_and(|v| v == "1")
}

pub fn have(tool: &str) -> bool {
    let ok = std::process::Command::new(tool)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            !must_work(),
            "{tool} is required (OZ0_MUST_WORK=1) but not found"
        );
        eprintln!("skipped: {tool} not found");
    }
    ok
}
