//! Helpers of the network tests: loopback servers the test owns, scripts
//! run in a sandbox, the egress audit trail.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Output;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use std::time::Duration;

use super::{marker, stderr, stdout, Env};

/// The commit id the test's git server advertises.
pub const GIT_SHA: &str = "0123456789abcdef0123456789abcdef01234567";

/// A loopback HTTP server the test owns. It answers every request with 200
/// and a body naming its port (and serves a dumb-HTTP git repository's
/// `info/refs` and `HEAD`), and records every connection and request head.
pub struct Server {
    pub port: u16,
    conns: Arc<AtomicUsize>,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Server {
    pub fn start() -> Server {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let conns = Arc::new(AtomicUsize::new(0));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let (c, h) = (conns.clone(), heads.clone());
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(s) = s else { continue };
                c.fetch_add(1, Ordering::SeqCst);
                let h = h.clone();
                std::thread::spawn(move || serve_one(s, port, &h));
            }
        });
        Server { port, conns, heads }
    }

    pub fn conns(&self) -> usize {
        self.conns.load(Ordering::SeqCst)
    }

    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }

    /// The body every plain request gets.
    pub fn hello(&self) -> String {
        format!("oz0-test-server {}", self.port)
    }
}

pub fn serve_one(mut s: TcpStream, port: u16, heads: &Mutex<Vec<String>>) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 65536 {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    if buf.is_empty() {
        return;
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
    heads.lock().unwrap().push(head);
    let body = if path.contains("/info/refs") {
        format!("{GIT_SHA}\trefs/heads/main\n")
    } else if path.ends_with("/HEAD") {
        "ref: refs/heads/main\n".to_string()
    } else {
        format!("oz0-test-server {port}\n")
    };
    let resp = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = s.write_all(resp.as_bytes());
}

/// A port with nothing listening on the host's loopback right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Writes a script into the work dir; returns its path.
pub fn write_script(env: &Env, name: &str, body: &str) -> String {
    let p = env.work.join(name);
    std::fs::write(&p, body).unwrap();
    p.display().to_string()
}

/// Runs a shell script (written into the work dir) with `extra` flags.
pub fn run_script(env: &Env, extra: &[&str], body: &str) -> Output {
    let script = write_script(env, &format!("{}.sh", marker("s")), body);
    env.cmd(extra, ["/bin/sh", script.as_str()])
        .output()
        .unwrap()
}

/// `KEY VALUE` lines of a script's output.
pub fn kv(out: &Output) -> BTreeMap<String, String> {
    stdout(out)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// The proxy's audit records in `oz0-node`'s stderr.
/// The audit records of runs with `env`'s data directory, from the node's
/// audit log there (never from stderr, which the run shares).
pub fn audit(env: &Env) -> Vec<Value> {
    let log = env.data.join("egress-audit.jsonl");
    let text = std::fs::read_to_string(&log)
        .unwrap_or_else(|e| panic!("no audit log at {}: {e}", log.display()));
    text.lines()
        .map(|j| serde_json::from_str(j).unwrap_or_else(|e| panic!("audit line {j}: {e}")))
        .collect()
}

/// The one audit record whose target is `target`.
pub fn audit_for<'a>(recs: &'a [Value], target: &str, status: u64) -> &'a Value {
    recs.iter()
        .find(|r| r["target"].as_str() == Some(target) && r["status"].as_u64() == Some(status))
        .unwrap_or_else(|| panic!("no audit record for {target} with status {status}: {recs:#?}"))
}

/// The token in a proxy URL `http://oz0:TOKEN@127.0.0.1:PORT`.
pub fn token_of(url: &str) -> String {
    let rest = url.trim().strip_prefix("http://oz0:").expect(url);
    rest.split_once('@').expect(url).0.to_string()
}

/// Asserts that no audit record, nor anything else on stderr, holds `token`.
pub fn assert_no_token_in_log(out: &Output, env: &Env, token: &str) {
    assert!(token.len() >= 16, "not a token: {token:?}");
    assert!(
        !stderr(out).contains(token),
        "the token is in oz0-node's log: {}",
        stderr(out)
    );
    let trail = std::fs::read_to_string(env.data.join("egress-audit.jsonl")).unwrap_or_default();
    assert!(!trail.contains(token), "the token is in the audit log");
    // Decisions are never written where the run's own stderr goes.
    assert!(
        !stderr(out).contains("oz0-egress {"),
        "audit records on stderr: {}",
        stderr(out)
    );
}

/// curl through the run's proxy: prints `NAME CODE`.
pub fn curl_line(name: &str, args: &str) -> String {
    format!(
        "printf '%s %s\\n' {name} \"$(curl -sS -m 20 -o /dev/null -w '%{{http_code}}' {args} 2>/dev/null)\"\n"
    )
}
