//! Black-box tests of a run's egress: only through the run's proxy, with
//! its token, to what its allowlist names and its forwarded ports — seen
//! from inside the run (curl, Python, git, the probe) and from the host.
//!
//! Every target is a listener this test opens on 127.0.0.1 (or, for the
//! name-lookup test, inside a network namespace of its own): no other
//! address is ever dialled.

// The Linux node's black-box tests (the Windows node's are windows.rs).
#![cfg(target_os = "linux")]

#[macro_use]
mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::net::*;
use common::{stderr, stdout, Env};
use serde_json::Value;

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
