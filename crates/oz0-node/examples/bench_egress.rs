//! Benchmark: a run's egress (bridge inside the run + the run's proxy)
//! against direct loopback on the host, measured in the same invocation,
//! alternating. Prints figures and ratios; asserts nothing.
//!
//! - Bulk: `curl` downloads N MiB from a server this program runs on
//!   127.0.0.1, directly on the host (the baseline) and from inside a run
//!   through its proxy, both as a proxied plain-HTTP request and through a
//!   CONNECT tunnel. Throughput is curl's own (bytes / its transfer time), so
//!   process and sandbox start-up are not counted.
//! - The same download on the host through a bare relay (this program: one
//!   thread per direction, 1 MiB reads and writes, no proxy, no sandbox), to
//!   show what any process carrying the bytes between two loopback TCP
//!   connections costs on this machine.
//! - Latency: one small request per new connection, curl's `time_total`,
//!   directly and through the proxy; median and p99, and the difference.
//!
//! ```text
//! cargo build --release -p oz0-node
//! cargo run --release -p oz0-node --example bench_egress [-- MIB [REPEATS [REQUESTS]]]
//! ```
//!
//! Run it as the user a node runs as (not root). `OZ0_NODE_BIN` names the
//! `oz0-node` binary when it is not next to this example's folder.
//! `OZ0_BENCH_BULK_ONLY=direct|relay|http|connect` repeats only that bulk mode and
//! skips the rest (for profiling one path with `perf`).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::node;

const CHUNK: usize = 1 << 20;

fn read_head(s: &mut TcpStream) -> bool {
    let mut buf = Vec::new();
    let mut b = [0u8; 2048];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&b[..n]),
        }
    }
    true
}

/// Serves `bytes` of zeros to every request.
fn bulk_server(bytes: u64) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                if !read_head(&mut s) {
                    return;
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {bytes}\r\nConnection: close\r\n\r\n"
                );
                if s.write_all(head.as_bytes()).is_err() {
                    return;
                }
                let zeros = vec![0u8; CHUNK];
                let mut left = bytes;
                while left > 0 {
                    let n = usize::try_from(left).map_or(CHUNK, |l| l.min(CHUNK));
                    if s.write_all(&zeros[..n]).is_err() {
                        return;
                    }
                    left -= n as u64;
                }
            });
        }
    });
    port
}

/// Answers every request with a tiny body, then closes.
fn small_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                let _ = s.set_nodelay(true);
                if read_head(&mut s) {
                    let _ = s.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                    );
                }
            });
        }
    });
    port
}

/// A bare relay: every connection to the returned port is carried byte for
/// byte to `127.0.0.1:to`.
fn bare_relay(to: u16) -> u16 {
    fn pump(mut a: TcpStream, mut b: TcpStream) {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match a.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if b.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = b.shutdown(std::net::Shutdown::Write);
    }
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let Ok(up) = TcpStream::connect(("127.0.0.1", to)) else {
                continue;
            };
            let (s2, up2) = (s.try_clone().unwrap(), up.try_clone().unwrap());
            std::thread::spawn(move || pump(s, up));
            std::thread::spawn(move || pump(up2, s2));
        }
    });
    port
}

fn host_curl(args: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-s", "--noproxy", "*", "-o", "/dev/null"])
        .args(args)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .stdin(Stdio::null())
        .output()
        .expect("curl on the host");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

struct Sandbox {
    node: PathBuf,
    work: PathBuf,
    data: PathBuf,
}

impl Sandbox {
    /// Runs `script` in a run allowed `allow`; returns its stdout.
    fn sh(&self, allow: &[String], script: &str) -> String {
        let path = self.work.join("bench.sh");
        std::fs::write(&path, script).unwrap();
        let mut c = Command::new(&self.node);
        c.args(["sandbox", "run", "--work"])
            .arg(&self.work)
            .arg("--data-dir")
            .arg(&self.data);
        for a in allow {
            c.args(["--allow", a]);
        }
        let out = c
            .arg("--")
            .arg("/bin/sh")
            .arg(&path)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .expect("oz0-node");
        if !out.status.success() {
            eprintln!(
                "the run failed ({:?}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .filter(|l| !l.starts_with("oz0-egress "))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            std::process::exit(1);
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// `SIZE TIME` from curl -> MiB/s.
fn mib_per_s(line: &str, want: u64) -> f64 {
    let mut it = line.split_whitespace();
    let size: f64 = it.next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
    let secs: f64 = it.next().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
    // curl's size is a whole byte count (and a float `as` saturates).
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    if size as u64 != want {
        eprintln!("short transfer: {size} of {want} bytes ({line:?})");
        std::process::exit(1);
    }
    size / secs / (1024.0 * 1024.0)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    // `p` is a fraction in 0..=1, so the rounded index lies in 0..v.len()
    // (and a float `as` saturates in any case).
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mib: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(256);
    let repeats: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let requests: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(300);
    let bytes = mib << 20;

    let node = node();
    let base = std::env::temp_dir().join(format!("oz0-bench-egress-{}", std::process::id()));
    let work = base.join("work");
    let data = base.join("data");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    let sb = Sandbox { node, work, data };

    let bulk = bulk_server(bytes);
    let small = small_server();
    let allow = vec![format!("127.0.0.1:{bulk}"), format!("127.0.0.1:{small}")];
    let bulk_url = format!("http://127.0.0.1:{bulk}/bulk");
    let relayed_url = format!("http://127.0.0.1:{}/bulk", bare_relay(bulk));
    let small_url = format!("http://127.0.0.1:{small}/");
    let w = "%{size_download} %{time_total}\\n";

    println!("bench_egress: {mib} MiB x {repeats} per mode, {requests} new connections per mode; curl's own timers");
    // Warm-up (page cache, first-run costs).
    host_curl(&["-w", "%{size_download}", &bulk_url]);
    sb.sh(&allow, &format!("curl -s -o /dev/null {small_url}\n"));

    if let Ok(only) = std::env::var("OZ0_BENCH_BULK_ONLY") {
        for _ in 0..repeats {
            let line = match only.as_str() {
                "direct" => host_curl(&["-w", "%{size_download} %{time_total}", &bulk_url]),
                "relay" => host_curl(&["-w", "%{size_download} %{time_total}", &relayed_url]),
                "http" | "connect" => sb.sh(
                    &allow,
                    &format!(
                        "curl -s {} -o /dev/null -w '{w}' {bulk_url}\n",
                        if only == "connect" { "-p" } else { "" }
                    ),
                ),
                other => {
                    eprintln!(
                        "OZ0_BENCH_BULK_ONLY: {other:?} is not direct, relay, http or connect"
                    );
                    std::process::exit(2);
                }
            };
            println!("{only}: {:.1} MiB/s", mib_per_s(line.trim(), bytes));
        }
        let _ = std::fs::remove_dir_all(&base);
        return;
    }

    let (mut direct, mut relayed, mut proxied, mut tunnel) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..repeats {
        let d = host_curl(&["-w", "%{size_download} %{time_total}", &bulk_url]);
        direct.push(mib_per_s(&d, bytes));
        let r = host_curl(&["-w", "%{size_download} %{time_total}", &relayed_url]);
        relayed.push(mib_per_s(&r, bytes));
        let inside = sb.sh(
            &allow,
            &format!(
                "curl -s -o /dev/null -w '{w}' {bulk_url}\ncurl -s -p -o /dev/null -w '{w}' {bulk_url}\n"
            ),
        );
        let mut lines = inside.lines();
        proxied.push(mib_per_s(lines.next().unwrap_or(""), bytes));
        tunnel.push(mib_per_s(lines.next().unwrap_or(""), bytes));
    }
    let (d, r, p, t) = (
        median(&mut direct),
        median(&mut relayed),
        median(&mut proxied),
        median(&mut tunnel),
    );
    println!("bulk throughput (median of {repeats}):");
    println!("  direct loopback on the host   {d:9.1} MiB/s  (baseline)");
    println!(
        "  host -> bare relay (no proxy) {r:9.1} MiB/s  ratio {:.2}  (what any relay costs here)",
        r / d
    );
    println!(
        "  run -> bridge -> proxy (HTTP) {p:9.1} MiB/s  ratio {:.2}",
        p / d
    );
    println!(
        "  run -> bridge -> proxy (CONNECT) {t:6.1} MiB/s  ratio {:.2}",
        t / d
    );
    println!(
        "  target: ratio >= 0.80; against the bare relay: HTTP {:.2}, CONNECT {:.2}",
        p / r,
        t / r
    );

    // Latency per new connection.
    let mut d_lat = Vec::new();
    for _ in 0..requests {
        let out = host_curl(&["-w", "%{time_total}", &small_url]);
        d_lat.push(out.trim().parse::<f64>().unwrap_or(f64::NAN) * 1e3);
    }
    let loop_script = |extra: &str| {
        format!(
            "i=0; while [ $i -lt {requests} ]; do curl -s {extra} -o /dev/null -w '%{{time_total}}\\n' {small_url}; i=$((i+1)); done\n"
        )
    };
    let parse = |s: String| -> Vec<f64> {
        s.lines()
            .filter_map(|l| l.trim().parse::<f64>().ok())
            .map(|v| v * 1e3)
            .collect()
    };
    let mut p_lat = parse(sb.sh(&allow, &loop_script("")));
    let mut t_lat = parse(sb.sh(&allow, &loop_script("-p")));
    let (dm, d99) = (median(&mut d_lat), pct(&mut d_lat, 0.99));
    let (pm, p99) = (median(&mut p_lat), pct(&mut p_lat, 0.99));
    let (tm, t99) = (median(&mut t_lat), pct(&mut t_lat, 0.99));
    println!("latency per new connection, ms (median / p99):");
    println!("  direct loopback on the host      {dm:7.3} / {d99:7.3}  (baseline)");
    println!(
        "  through the proxy (HTTP)         {pm:7.3} / {p99:7.3}  added {:+.3} / {:+.3}",
        pm - dm,
        p99 - d99
    );
    println!(
        "  through the proxy (CONNECT)      {tm:7.3} / {t99:7.3}  added {:+.3} / {:+.3}",
        tm - dm,
        t99 - d99
    );
    let _ = std::fs::remove_dir_all(&base);
    std::thread::sleep(Duration::from_millis(10));
}
