//! Black-box tests of a run's network: egress only through the run's proxy
//! (token, allowlist, forwarded ports), no direct connection, no name
//! lookup, no ingress — seen from inside the run (curl, Python, git, the
//! probe) and from the host.
//!
//! Every target is a listener this test opens on 127.0.0.1 (or, for the
//! name-lookup test, inside a network namespace of its own): no other
//! address is ever dialled.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{marker, stderr, stdout, Env};
use serde_json::Value;

macro_rules! ready {
    () => {
        if !common::sandbox_ready() {
            return;
        }
    };
}

/// The commit id the test's git server advertises.
const GIT_SHA: &str = "0123456789abcdef0123456789abcdef01234567";

/// A loopback HTTP server the test owns. It answers every request with 200
/// and a body naming its port (and serves a dumb-HTTP git repository's
/// `info/refs` and `HEAD`), and records every connection and request head.
struct Server {
    port: u16,
    conns: Arc<AtomicUsize>,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start() -> Server {
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

    fn conns(&self) -> usize {
        self.conns.load(Ordering::SeqCst)
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }

    /// The body every plain request gets.
    fn hello(&self) -> String {
        format!("oz0-test-server {}", self.port)
    }
}

fn serve_one(mut s: TcpStream, port: u16, heads: &Mutex<Vec<String>>) {
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
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Writes a script into the work dir; returns its path.
fn write_script(env: &Env, name: &str, body: &str) -> String {
    let p = env.work.join(name);
    std::fs::write(&p, body).unwrap();
    p.display().to_string()
}

/// Runs a shell script (written into the work dir) with `extra` flags.
fn run_script(env: &Env, extra: &[&str], body: &str) -> Output {
    let script = write_script(env, &format!("{}.sh", marker("s")), body);
    env.cmd(extra, ["/bin/sh", script.as_str()])
        .output()
        .unwrap()
}

/// `KEY VALUE` lines of a script's output.
fn kv(out: &Output) -> BTreeMap<String, String> {
    stdout(out)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// The proxy's audit records in `oz0-node`'s stderr.
/// The audit records of runs with `env`'s data directory, from the node's
/// audit log there (never from stderr, which the run shares).
fn audit(env: &Env) -> Vec<Value> {
    let log = env.data.join("egress-audit.jsonl");
    let text = std::fs::read_to_string(&log)
        .unwrap_or_else(|e| panic!("no audit log at {}: {e}", log.display()));
    text.lines()
        .map(|j| serde_json::from_str(j).unwrap_or_else(|e| panic!("audit line {j}: {e}")))
        .collect()
}

/// The one audit record whose target is `target`.
fn audit_for<'a>(recs: &'a [Value], target: &str, status: u64) -> &'a Value {
    recs.iter()
        .find(|r| r["target"].as_str() == Some(target) && r["status"].as_u64() == Some(status))
        .unwrap_or_else(|| panic!("no audit record for {target} with status {status}: {recs:#?}"))
}

/// The token in a proxy URL `http://oz0:TOKEN@127.0.0.1:PORT`.
fn token_of(url: &str) -> String {
    let rest = url.trim().strip_prefix("http://oz0:").expect(url);
    rest.split_once('@').expect(url).0.to_string()
}

/// Asserts that no audit record, nor anything else on stderr, holds `token`.
fn assert_no_token_in_log(out: &Output, env: &Env, token: &str) {
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
fn curl_line(name: &str, args: &str) -> String {
    format!(
        "printf '%s %s\\n' {name} \"$(curl -sS -m 20 -o /dev/null -w '%{{http_code}}' {args} 2>/dev/null)\"\n"
    )
}

#[test]
fn allowed_ip_literal_and_forwarded_port_answer_through_the_proxy() {
    ready!();
    let env = Env::new("allow");
    let allowed = Server::start();
    let fwd = Server::start();
    let (a, f) = (allowed.port, fwd.port);
    let status_file = env.root.join("status.json");
    let script = format!(
        "echo \"proxy $HTTP_PROXY\"\n\
         printf 'curl %s\\n' \"$(curl -sS -m 20 http://127.0.0.1:{a}/curl)\"\n\
         printf 'tunnel %s\\n' \"$(curl -sS -m 20 -p http://127.0.0.1:{a}/tunnel)\"\n\
         printf 'python %s\\n' \"$(/usr/bin/python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{a}/py', timeout=20).read().decode().strip())\")\"\n\
         printf 'fwd %s\\n' \"$(curl -sS -m 20 http://127.0.0.1:{f}/fwd)\"\n\
         printf 'fwdname %s\\n' \"$(curl -sS -m 20 http://localhost:{f}/fwdname)\"\n\
         printf 'fwdpython %s\\n' \"$(/usr/bin/python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{f}/fwdpy', timeout=20).read().decode().strip())\")\"\n"
    );
    let out = run_script(
        &env,
        &[
            "--allow",
            &format!("127.0.0.1:{a}"),
            "--forward",
            &f.to_string(),
            "--json-status",
            &status_file.display().to_string(),
        ],
        &script,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let r = kv(&out);
    for k in ["curl", "tunnel", "python"] {
        assert_eq!(r[k], allowed.hello(), "{k}: {r:?}\n{}", stderr(&out));
    }
    for k in ["fwd", "fwdname", "fwdpython"] {
        assert_eq!(r[k], fwd.hello(), "{k}: {r:?}\n{}", stderr(&out));
    }
    assert_eq!(allowed.conns(), 3);
    assert_eq!(fwd.conns(), 3);
    // What reached the servers carries no proxy credentials.
    for h in allowed.heads().iter().chain(fwd.heads().iter()) {
        assert!(
            !h.to_ascii_lowercase().contains("proxy-authorization"),
            "the token went upstream: {h}"
        );
    }
    // Every request was decided, and allowed, in the audit trail.
    let recs = audit(&env);
    let allowed_recs = recs.iter().filter(|r| r["decision"] == "allow").count();
    assert!(allowed_recs >= 6, "{recs:#?}");
    let token = token_of(&r["proxy"]);
    assert_no_token_in_log(&out, &env, &token);
    let status: Value =
        serde_json::from_str(&std::fs::read_to_string(&status_file).unwrap()).unwrap();
    let eg = &status["enforced"]["egress"];
    assert_eq!(eg["forward"], serde_json::json!([f]), "{eg}");
    assert!(
        !std::fs::read_to_string(&status_file)
            .unwrap()
            .contains(&token),
        "the token is in the status file"
    );
    // The status names the bridge's port, which is the one in HTTP_PROXY.
    let port = eg["bridge_port"].as_u64().unwrap();
    assert!(r["proxy"].ends_with(&format!("@127.0.0.1:{port}")), "{r:?}");
}

#[test]
fn git_ls_remote_over_http_through_the_proxy() {
    ready!();
    let env = Env::new("git");
    let git = ["/usr/bin/git", "/usr/local/bin/git"]
        .into_iter()
        .find(|g| Path::new(g).exists());
    let Some(git) = git else {
        common::skip("git is not installed (apt-get install git)");
        return;
    };
    let srv = Server::start();
    let p = srv.port;
    let out = run_script(
        &env,
        &["--allow", &format!("127.0.0.1:{p}")],
        &format!("GIT_TERMINAL_PROMPT=0 {git} ls-remote http://127.0.0.1:{p}/repo.git\n"),
    );
    if !out.status.success() && stderr(&out).contains("remote-http") {
        common::skip(&format!(
            "this git has no http transport: {}",
            stderr(&out).trim()
        ));
        return;
    }
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("{GIT_SHA}\trefs/heads/main")),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        srv.heads()
            .iter()
            .any(|h| h.starts_with("GET /repo.git/info/refs")),
        "{:?}",
        srv.heads()
    );
}

#[test]
fn the_proxy_answers_407_without_this_runs_token() {
    ready!();
    let env = Env::new("token");
    let srv = Server::start();
    let p = srv.port;
    let url = format!("http://127.0.0.1:{p}/");
    // The same bridge, with no credentials, a wrong token of the right
    // shape, the right token under another user, and (control) the right
    // one as Basic and as Bearer.
    let mut script = String::from(
        "echo \"proxy $HTTP_PROXY\"\n\
         BP=${HTTP_PROXY##*:}\n\
         TOK=${HTTP_PROXY#http://oz0:}; TOK=${TOK%@*}\n\
         WRONG=$(printf '%s' \"$TOK\" | tr '0-9a-f' 'f0-9a-e')\n",
    );
    script += &curl_line("none", &format!("--proxy http://127.0.0.1:$BP {url}"));
    script += &curl_line(
        "wrong",
        &format!("--proxy \"http://oz0:$WRONG@127.0.0.1:$BP\" {url}"),
    );
    script += &curl_line(
        "user",
        &format!("--proxy \"http://root:$TOK@127.0.0.1:$BP\" {url}"),
    );
    script += &curl_line(
        "tunnelnone",
        &format!("-p --proxy http://127.0.0.1:$BP {url}"),
    );
    script += &format!(
        "printf 'authenticate %s\\n' \"$(curl -sS -m 20 -o /dev/null -D - --proxy http://127.0.0.1:$BP {url} | tr -d '\\r' | grep -i '^proxy-authenticate:' | cut -d' ' -f2)\"\n"
    );
    script += &curl_line("basic", &url);
    script += &curl_line(
        "bearer",
        &format!("--proxy http://127.0.0.1:$BP --proxy-header \"Proxy-Authorization: Bearer $TOK\" {url}"),
    );
    let out = run_script(&env, &["--allow", &format!("127.0.0.1:{p}")], &script);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = kv(&out);
    assert_eq!(r["none"], "407", "{r:?}");
    assert_eq!(r["wrong"], "407", "{r:?}");
    assert_eq!(r["user"], "407", "{r:?}");
    assert_eq!(r["authenticate"], "Basic", "{r:?}");
    // A tunnel without the token gets no 200 (curl reports 407 or 000).
    assert_ne!(r["tunnelnone"], "200", "{r:?}");
    assert_eq!(r["basic"], "200", "{r:?}");
    assert_eq!(r["bearer"], "200", "{r:?}");
    // Only the two authorised requests reached the server.
    assert_eq!(srv.conns(), 2, "{:?}", srv.heads());
    let recs = audit(&env);
    let auth = recs.iter().filter(|r| r["decision"] == "auth").count();
    assert!(auth >= 4, "407s not audited: {recs:#?}");
    for rec in recs.iter().filter(|r| r["decision"] == "auth") {
        assert_eq!(rec["status"], 407, "{rec}");
    }
    assert_no_token_in_log(&out, &env, &token_of(&r["proxy"]));
}

/// Starts a run that writes its proxy URL to `url` in its work dir, then (if
/// `use_token` is given) waits for the file `other` and uses the token in it
/// through its own bridge, then waits for `stop`.
fn start_waiting_run(env: &Env, scratch: &Path, target: u16) -> Child {
    let script = write_script(
        env,
        "wait.sh",
        &format!(
            "echo \"$HTTP_PROXY\" > url.tmp && mv url.tmp url\n\
             while [ ! -e other ]; do sleep 0.05; done\n\
             BP=${{HTTP_PROXY##*:}}\n\
             OTHER=$(cat other)\n\
             printf 'other %s\\n' \"$(curl -sS -m 20 -o /dev/null -w '%{{http_code}}' --proxy \"http://oz0:$OTHER@127.0.0.1:$BP\" http://127.0.0.1:{target}/)\" > result.tmp\n\
             printf 'own %s\\n' \"$(curl -sS -m 20 -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{target}/)\" >> result.tmp\n\
             mv result.tmp result\n\
             while [ ! -e stop ]; do sleep 0.05; done\n"
        ),
    );
    std::fs::create_dir_all(scratch).unwrap();
    env.cmd(
        &["--allow", &format!("127.0.0.1:{target}"), "--timeout", "60"],
        ["/bin/sh", script.as_str()],
    )
    // The run's scratch folder (and so its proxy socket) goes here.
    .env("TMPDIR", scratch)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap()
}

fn wait_for_file(p: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(s) = std::fs::read_to_string(p) {
            return s;
        }
        assert!(Instant::now() < deadline, "{} never appeared", p.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A token opens only its own run's proxy: each of two live runs sends the
/// other's token through its own bridge and gets 407; its own gets 200. No
/// socket of a run exists on the host (the proxy serves each run over a
/// channel its bridge holds), so there is nothing there to connect to.
#[test]
fn another_runs_token_gets_407() {
    ready!();
    let (env_a, env_b) = (Env::new("runa"), Env::new("runb"));
    let srv = Server::start();
    let p = srv.port;
    let (scratch_a, scratch_b) = (env_a.root.join("scratch"), env_b.root.join("scratch"));
    let run_a = start_waiting_run(&env_a, &scratch_a, p);
    let run_b = start_waiting_run(&env_b, &scratch_b, p);
    let tok_a = token_of(&wait_for_file(&env_a.work.join("url")));
    let tok_b = token_of(&wait_for_file(&env_b.work.join("url")));
    assert_ne!(tok_a, tok_b);

    // Inside: each run uses the other's (live) token through its own bridge.
    std::fs::write(env_a.work.join("other"), &tok_b).unwrap();
    std::fs::write(env_b.work.join("other"), &tok_a).unwrap();
    let res_a = wait_for_file(&env_a.work.join("result"));
    let res_b = wait_for_file(&env_b.work.join("result"));
    // The runs' private host folders hold no socket.
    for scratch in [&scratch_a, &scratch_b] {
        for e in std::fs::read_dir(scratch).unwrap().flatten() {
            let sock = e.path().join("egress.sock");
            assert!(!sock.exists(), "{} exists", sock.display());
        }
    }

    std::fs::write(env_a.work.join("stop"), "").unwrap();
    std::fs::write(env_b.work.join("stop"), "").unwrap();
    let out_a = run_a.wait_with_output().unwrap();
    let out_b = run_b.wait_with_output().unwrap();
    assert!(out_a.status.success(), "{}", stderr(&out_a));
    assert!(out_b.status.success(), "{}", stderr(&out_b));

    assert_eq!(res_a, "other 407\nown 200\n", "run A");
    assert_eq!(res_b, "other 407\nown 200\n", "run B");
    // Own requests only.
    assert_eq!(srv.conns(), 2);
    for (out, env, tok) in [(&out_a, &env_a, &tok_a), (&out_b, &env_b, &tok_b)] {
        assert_no_token_in_log(out, env, tok);
        let recs = audit(env);
        assert!(recs.iter().all(|r| r["run"] == recs[0]["run"]), "{recs:#?}");
        assert_eq!(
            recs.iter().filter(|r| r["decision"] == "auth").count(),
            1,
            "{recs:#?}"
        );
    }
    let (ra, rb) = (&audit(&env_a)[0]["run"], &audit(&env_b)[0]["run"]);
    assert_ne!(ra, rb);
}

#[test]
fn unlisted_hosts_and_invalid_names_get_403() {
    ready!();
    let env = Env::new("deny");
    let allowed = Server::start();
    let other = Server::start();
    let (a, o) = (allowed.port, other.port);
    let mut script = String::from("echo \"proxy $HTTP_PROXY\"\n");
    script += &curl_line("other_port", &format!("http://127.0.0.1:{o}/"));
    script += &curl_line("unlisted", &format!("http://unlisted.example:{a}/"));
    script += &curl_line("invalid", &format!("http://x.invalid:{a}/"));
    script += &format!(
        "printf 'invalid_connect %s\\n' \"$(curl -sS -m 20 -p -o /dev/null -w '%{{http_connect}}' http://x.invalid:{a}/ 2>/dev/null)\"\n"
    );
    // 127.0.0.1 reached through a name the run did not name.
    script += &curl_line("localhost", &format!("http://localhost:{a}/"));
    script += &curl_line("localhost_sub", &format!("http://a.localhost:{a}/"));
    // The token used as a host name is still kept out of the log.
    script += "TOK=${HTTP_PROXY#http://oz0:}; TOK=${TOK%@*}\n";
    script += &curl_line("tokenhost", &format!("http://$TOK.example:{a}/"));
    script += &format!(
        "printf 'body %s\\n' \"$(curl -sS -m 20 http://x.invalid:{a}/ 2>/dev/null | tr '\\n' ' ')\"\n"
    );
    script += &format!(
        "printf 'body_unlisted %s\\n' \"$(curl -sS -m 20 http://127.0.0.1:{o}/ 2>/dev/null | tr '\\n' ' ')\"\n"
    );
    script += &curl_line("allowed", &format!("http://127.0.0.1:{a}/"));
    let out = run_script(&env, &["--allow", &format!("127.0.0.1:{a}")], &script);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = kv(&out);
    for k in [
        "other_port",
        "unlisted",
        "invalid",
        "invalid_connect",
        "localhost",
        "localhost_sub",
    ] {
        assert_eq!(r[k], "403", "{k}: {r:?}\n{}", stderr(&out));
    }
    // A 64-character label is not a host name: 400 (or 403), never through.
    assert!(r["tokenhost"] == "400" || r["tokenhost"] == "403", "{r:?}");
    assert!(r["body"].contains("before any lookup"), "{r:?}");
    assert!(r["body_unlisted"].contains("allowlist"), "{r:?}");
    assert_eq!(r["allowed"], "200", "{r:?}");
    // Refused targets never saw a connection; the allowed one saw one.
    assert_eq!(other.conns(), 0);
    assert_eq!(allowed.conns(), 1);

    let recs = audit(&env);
    let inv = audit_for(&recs, &format!("x.invalid:{a}"), 403);
    assert_eq!(inv["decision"], "deny");
    assert!(inv["addr"].is_null(), "{inv}");
    assert!(
        inv["reason"]
            .as_str()
            .unwrap()
            .contains("before any lookup"),
        "{inv}"
    );
    let unl = audit_for(&recs, &format!("unlisted.example:{a}"), 403);
    assert!(unl["addr"].is_null(), "{unl}");
    let lh = audit_for(&recs, &format!("localhost:{a}"), 403);
    assert!(lh["addr"].is_null(), "{lh}");
    let token = token_of(&r["proxy"]);
    assert_no_token_in_log(&out, &env, &token);
    let trail = std::fs::read_to_string(env.data.join("egress-audit.jsonl")).unwrap();
    assert!(trail.contains("<token>.example"), "{trail}");
}

/// The uid and gid of this process.
fn ids() -> (u32, u32) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| -> u32 {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    (field("Uid:"), field("Gid:"))
}

/// A DNS server and two HTTP listeners (8080, 8081) on 127.0.0.1 of the
/// namespace it runs in: it logs every query's name and every connection,
/// and answers A queries with 127.0.0.1.
const FAKE_DNS: &str = r#"
import socket, struct, sys, threading
root = sys.argv[1]
qlog = open(root + "/dns.log", "a", buffering=1)
tlog = open(root + "/tcp.log", "a", buffering=1)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("127.0.0.1", 53))
def serve(port):
    t = socket.socket()
    t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    t.bind(("127.0.0.1", port))
    t.listen(16)
    ready.release()
    while True:
        c, _ = t.accept()
        tlog.write("conn %d\n" % port)
        c.settimeout(5)
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                d = c.recv(4096)
                if not d:
                    break
                data += d
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nns-server")
        except Exception:
            pass
        c.close()
ready = threading.Semaphore(0)
for port in (8080, 8081):
    threading.Thread(target=serve, args=(port,), daemon=True).start()
    ready.acquire()
open(root + "/fake.ready", "w").close()
while True:
    q, addr = u.recvfrom(4096)
    i, labels = 12, []
    while i < len(q) and q[i]:
        n = q[i]
        labels.append(q[i + 1:i + 1 + n].decode("ascii", "replace"))
        i += 1 + n
    qtype = struct.unpack(">H", q[i + 1:i + 3])[0]
    qlog.write("%s %d\n" % (".".join(labels), qtype))
    question = q[12:i + 5]
    if qtype == 1:
        hdr = q[:2] + b"\x81\x80" + struct.pack(">HHHH", 1, 1, 0, 0)
        ans = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 60, 4) + socket.inet_aton("127.0.0.1")
    else:
        hdr = q[:2] + b"\x81\x80" + struct.pack(">HHHH", 1, 0, 0, 0)
        ans = b""
    u.sendto(hdr + question + ans, addr)
"#;

/// Proves `x.invalid` is refused before any lookup by watching the lookups:
/// `oz0-node` runs in a user+network+mount namespace of the test's own
/// whose `/etc/resolv.conf` names a DNS server the test runs there (and
/// whose `/etc/hosts` names one more host). Controls show the watch works:
/// an allowed name is looked up (its query is logged) and, resolving to
/// 127.0.0.1, refused by the SSRF guard; a name from the hosts file is
/// refused the same way; the IP literal the run names (on another port)
/// answers.
#[test]
fn x_invalid_is_refused_without_a_dns_query() {
    ready!();
    let env = Env::new("dns");
    let unshare = ["/usr/bin/unshare", "/bin/unshare"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    let ip = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    let (Some(unshare), Some(ip)) = (unshare, ip) else {
        common::skip("needs unshare(1) and ip(8) (util-linux, iproute2) to watch name lookups");
        return;
    };
    let root = env.root.0.clone();
    std::fs::write(root.join("resolv.conf"), "nameserver 127.0.0.1\n").unwrap();
    std::fs::write(
        root.join("hosts"),
        "127.0.0.1 localhost\n127.0.0.1 hosts.oz0-test.example\n",
    )
    .unwrap();
    std::fs::write(root.join("fake.py"), FAKE_DNS).unwrap();
    let mut req = String::new();
    for t in [
        "x.invalid",
        "dns.oz0-test.example",
        "hosts.oz0-test.example",
        "127.0.0.1",
    ] {
        req += &curl_line(t, &format!("http://{t}:8080/"));
    }
    // The literal the run names is on another port: a named literal lifts
    // the address check for names on its own port.
    req += &curl_line("literal", "http://127.0.0.1:8081/");
    req += "printf 'connect %s\\n' \"$(curl -sS -m 20 -p -o /dev/null -w '%{http_connect}' http://sub.x.invalid:8080/ 2>/dev/null)\"\n";
    let req_path = write_script(&env, "req.sh", &req);
    let (uid, gid) = ids();
    let outer = format!(
        "set -e\n\
         {ip} link set lo up\n\
         mount --bind \"$R/resolv.conf\" /etc/resolv.conf\n\
         mount --bind \"$R/hosts\" /etc/hosts\n\
         /usr/bin/python3 \"$R/fake.py\" \"$R\" 2>\"$R/fake.err\" &\n\
         PY=$!\n\
         i=0; while [ ! -e \"$R/fake.ready\" ]; do sleep 0.05; i=$((i+1)); [ $i -lt 400 ]; done\n\
         set +e\n\
         {unshare} -U --map-user={uid} --map-group={gid} -- \"$NODE\" sandbox run --work \"$W\" --data-dir \"$D\" \
           --allow dns.oz0-test.example:8080 --allow hosts.oz0-test.example:8080 --allow 127.0.0.1:8081 \
           -- /bin/sh \"$REQ\"\n\
         rc=$?\n\
         kill $PY\n\
         exit $rc\n"
    );
    let out = Command::new(unshare)
        .args(["-Urnm", "--", "/bin/sh", "-c", &outer])
        .env("R", &root)
        .env("NODE", common::node())
        .env("W", &env.work)
        .env("D", &env.data)
        .env("REQ", &req_path)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = stderr(&out);
    if !out.status.success()
        && !root.join("fake.ready").exists()
        && (err.contains("unshare")
            || err.contains("mount")
            || err.contains("Operation not permitted"))
    {
        common::skip(&format!(
            "cannot make a user+network+mount namespace to watch lookups: {}",
            err.trim()
        ));
        return;
    }
    assert!(
        out.status.success(),
        "{err}\nfake dns: {}",
        std::fs::read_to_string(root.join("fake.err")).unwrap_or_default()
    );
    let r = kv(&out);
    assert_eq!(r["x.invalid"], "403", "{r:?}\n{err}");
    assert_eq!(r["connect"], "403", "{r:?}\n{err}");
    assert_eq!(r["dns.oz0-test.example"], "403", "{r:?}\n{err}");
    assert_eq!(r["hosts.oz0-test.example"], "403", "{r:?}\n{err}");
    // 127.0.0.1:8080 itself is not allowed; 127.0.0.1:8081 is.
    assert_eq!(r["127.0.0.1"], "403", "{r:?}\n{err}");
    assert_eq!(r["literal"], "200", "{r:?}\n{err}");
    let queries = std::fs::read_to_string(root.join("dns.log")).unwrap_or_default();
    eprintln!("queries seen: {queries:?}; answers inside: {r:?}");
    // The watch works: the allowed name was looked up here...
    assert!(
        queries.contains("dns.oz0-test.example"),
        "no query seen for the allowed name: {queries:?}\n{err}"
    );
    // ...and nothing under .invalid ever was.
    assert!(
        !queries.contains("invalid"),
        "a name under .invalid was looked up: {queries:?}"
    );
    // Only the IP literal reached the listener; the names resolving to
    // 127.0.0.1 were refused before any dial.
    let conns = std::fs::read_to_string(root.join("tcp.log")).unwrap_or_default();
    assert_eq!(conns, "conn 8081\n", "{conns:?}");
    let recs = audit(&env);
    for name in ["dns.oz0-test.example:8080", "hosts.oz0-test.example:8080"] {
        let rec = audit_for(&recs, name, 403);
        assert!(
            rec["reason"]
                .as_str()
                .unwrap_or_default()
                .contains("loopback"),
            "{rec}"
        );
    }
    let inv = audit_for(&recs, "x.invalid:8080", 403);
    assert!(inv["reason"]
        .as_str()
        .unwrap()
        .contains("before any lookup"));
}

#[test]
fn direct_connections_from_the_run_fail() {
    ready!();
    let env = Env::new("direct");
    let allowed = Server::start();
    let fwd = Server::start();
    let (a, f) = (allowed.port, fwd.port);
    // A host abstract unix socket, and a host socket file outside every
    // mounted path.
    let abstract_name = marker("abs");
    let abs_listener = {
        use std::os::linux::net::SocketAddrExt;
        let addr =
            std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
        UnixListener::bind_addr(&addr).unwrap()
    };
    abs_listener.set_nonblocking(true).unwrap();
    let outside = common::TempDir::new("sock");
    let fs_sock = outside.join("host.sock");
    let fs_listener = UnixListener::bind(&fs_sock).unwrap();
    fs_listener.set_nonblocking(true).unwrap();
    // Controls: the host itself reaches all of them.
    {
        use std::os::linux::net::SocketAddrExt;
        let addr =
            std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
        UnixStream::connect_addr(&addr).unwrap();
        UnixStream::connect(&fs_sock).unwrap();
        let _ = abs_listener.accept().unwrap();
        let _ = fs_listener.accept().unwrap();
    }
    let fs_s = fs_sock.display().to_string();
    let targets = [
        format!("127.0.0.1:{a}"),
        format!("127.0.0.1:{f}"),
        format!("localhost:{a}"),
        format!("[::1]:{a}"),
    ];
    let mut probe_args: Vec<&str> = vec!["--no-syscalls", "--env"];
    for t in &targets {
        probe_args.extend(["--connect", t.as_str()]);
    }
    let abs_arg = format!("@{abstract_name}");
    probe_args.extend(["--unix", abs_arg.as_str(), "--unix", fs_s.as_str()]);
    let r = env.probe(
        &[
            "--allow",
            &format!("127.0.0.1:{a}"),
            "--forward",
            &f.to_string(),
        ],
        &probe_args,
    );
    eprintln!("from inside: connect {} unix {}", r["connect"], r["unix"]);
    // The run's own bridge listens on its loopback at a random port, which
    // may be the host listener's number by chance: reaching it is no leak.
    let bridge = r["env"]["HTTP_PROXY"]
        .as_str()
        .and_then(|p| p.rsplit(':').next())
        .unwrap_or_default()
        .trim_end_matches('/')
        .to_string();
    for t in &targets {
        let v = r["connect"][t].as_str().unwrap_or_default();
        if t.ends_with(&format!(":{bridge}")) {
            continue;
        }
        assert!(!v.is_empty() && v != "ok", "{t}: {r}");
        if t.starts_with("127.0.0.1:") {
            assert_eq!(v, "ECONNREFUSED", "{t}: {r}");
        }
    }
    let abs = r["unix"][&abs_arg].as_str().unwrap_or_default();
    assert!(!abs.is_empty() && abs != "ok", "abstract socket: {r}");
    // Refused by the filter on new unix sockets (EPERM); with
    // --allow-unix-sockets the socket file is simply not there (ENOENT).
    let fsv = r["unix"][&fs_s].as_str().unwrap_or_default();
    assert!(matches!(fsv, "EPERM" | "ENOENT"), "{r}");
    // Nothing arrived at any of the host's listeners.
    assert_eq!(allowed.conns(), 0);
    assert_eq!(fwd.conns(), 0);
    assert!(
        abs_listener.accept().is_err(),
        "the abstract socket got a connection"
    );
    assert!(
        fs_listener.accept().is_err(),
        "the socket file got a connection"
    );

    // The same with Python's socket module.
    let py = write_script(
        &env,
        "direct.py",
        &format!(
            r#"
import socket
for port in ({a}, {f}):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        print(port, "ok")
    except OSError as e:
        print(port, type(e).__name__)
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("\0{abstract_name}")
    print("abstract ok")
except OSError as e:
    print("abstract", type(e).__name__)
"#
        ),
    );
    let script = format!("/usr/bin/python3 {py}\n");
    let out = run_script(
        &env,
        &[
            "--allow",
            &format!("127.0.0.1:{a}"),
            "--forward",
            &f.to_string(),
        ],
        &script,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let py = kv(&out);
    assert_eq!(py[&a.to_string()], "ConnectionRefusedError", "{py:?}");
    assert_eq!(py[&f.to_string()], "ConnectionRefusedError", "{py:?}");
    assert_ne!(py["abstract"], "ok", "{py:?}");
    assert_eq!(allowed.conns(), 0);
    assert_eq!(fwd.conns(), 0);
    assert!(abs_listener.accept().is_err());
}

#[test]
fn name_lookups_inside_fail() {
    ready!();
    let env = Env::new("lookup");
    let srv = Server::start();
    let py = write_script(
        &env,
        "lookup.py",
        r#"
import socket
try:
    print("python", socket.getaddrinfo("example.com", 80)[0][4][0])
except socket.gaierror as e:
    print("python gaierror", e.errno)
"#,
    );
    let script = format!("getent hosts example.com; echo \"getent $?\"\n/usr/bin/python3 {py}\n");
    // With and without a proxy: the proxy resolves names, the run never does.
    for extra in [
        vec![],
        vec!["--allow".to_string(), format!("example.com:{}", srv.port)],
    ] {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let out = run_script(&env, &extra, &script);
        assert!(out.status.success(), "{}", stderr(&out));
        let r = kv(&out);
        eprintln!("lookups inside {extra:?}: {r:?}");
        assert_ne!(r["getent"], "0", "{extra:?}: {r:?}");
        assert!(
            r["python"].starts_with("gaierror"),
            "{extra:?}: example.com resolved inside: {r:?}"
        );
    }
}

#[test]
fn a_listener_inside_the_run_is_unreachable_from_the_host() {
    ready!();
    let env = Env::new("ingress");
    let (p1, p2) = (free_port(), free_port());
    // The run listens on its loopback and on all its interfaces, checks that
    // it can reach itself, says so, and counts what it accepts until told
    // to stop.
    let script = write_script(
        &env,
        "listen.py",
        &format!(
            r#"
import os, socket, time
ls = []
for host, port in (("127.0.0.1", {p1}), ("0.0.0.0", {p2})):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    s.listen(16)
    c = socket.create_connection(("127.0.0.1", port), timeout=2)
    a, _ = s.accept()
    a.close(); c.close()
    s.settimeout(0.05)
    ls.append(s)
open("listening", "w").write("ok")
accepted = 0
deadline = time.time() + 30
while not os.path.exists("done") and time.time() < deadline:
    for s in ls:
        try:
            a, _ = s.accept()
            accepted += 1
            a.close()
        except socket.timeout:
            pass
open("accepted.tmp", "w").write(str(accepted))
os.rename("accepted.tmp", "accepted")
"#
        ),
    );
    let child = env
        .cmd(&["--timeout", "60"], ["/usr/bin/python3", script.as_str()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let listening = env.work.join("listening");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !listening.exists() {
        if Instant::now() > deadline {
            let out = child.wait_with_output().unwrap();
            panic!("the run never listened: {}", stderr(&out));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut host_results = Vec::new();
    for port in [p1, p2] {
        let r = TcpStream::connect_timeout(
            &format!("127.0.0.1:{port}").parse().unwrap(),
            Duration::from_secs(2),
        );
        host_results.push((port, r.map(|_| ()).map_err(|e| e.kind())));
    }
    std::fs::write(env.work.join("done"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let accepted = std::fs::read_to_string(env.work.join("accepted")).unwrap();
    assert_eq!(accepted, "0", "the run accepted a connection from outside");
    for (port, r) in host_results {
        assert_eq!(
            r,
            Err(std::io::ErrorKind::ConnectionRefused),
            "host connect to 127.0.0.1:{port}"
        );
    }
}

#[test]
fn without_allow_or_forward_there_is_no_proxy() {
    ready!();
    let env = Env::new("noproxy");
    let status_file = env.root.join("status.json");
    let out = env
        .cmd(
            &["--json-status", &status_file.display().to_string()],
            ["/usr/bin/env"],
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    for line in stdout(&out).lines() {
        let name = line
            .split('=')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        assert!(
            !name.contains("proxy"),
            "proxy variable without egress: {line}"
        );
    }
    assert!(!stderr(&out).contains("oz0-egress"), "{}", stderr(&out));
    let status: Value =
        serde_json::from_str(&std::fs::read_to_string(&status_file).unwrap()).unwrap();
    assert!(status["enforced"]["egress"].is_null(), "{status:#}");

    // Control: with an --allow, the variables are there (all six, no NO_PROXY).
    let out = env
        .cmd(&["--allow", "127.0.0.1:9"], ["/usr/bin/env"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let mut names: Vec<String> = stdout(&out)
        .lines()
        .filter_map(|l| l.split_once('=').map(|(n, _)| n.to_string()))
        .filter(|n| n.to_ascii_lowercase().contains("proxy"))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "ALL_PROXY",
            "HTTPS_PROXY",
            "HTTP_PROXY",
            "all_proxy",
            "http_proxy",
            "https_proxy"
        ]
    );
}

/// The run and the host share the work dir; a unix socket a host process
/// listens on there must not become a way out (issue: "a command must not
/// connect to arbitrary host unix sockets").
#[test]
fn a_host_unix_socket_in_the_work_dir_is_unreachable() {
    ready!();
    let env = Env::new("worksock");
    let sock = env.work.join("host.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    listener.set_nonblocking(true).unwrap();
    let s = sock.display().to_string();
    let r = env.probe(&[], &["--no-syscalls", "--unix", s.as_str()]);
    let accepted = listener.accept().is_ok();
    assert_ne!(
        r["unix"][&s], "ok",
        "the run connected to a host socket: {r}"
    );
    assert!(
        !accepted,
        "the host socket accepted a connection from the run"
    );
}
