//! Black-box tests of a run's network beside its proxy: no direct
//! connection out, no name lookup, no ingress, no host unix socket —
//! seen from inside the run and from the host.
//!
//! Every target is a listener this test opens on 127.0.0.1: no other
//! address is ever dialled.

// The Linux node's black-box tests (the Windows node's are windows.rs).
#![cfg(target_os = "linux")]

#[macro_use]
mod common;

use std::net::TcpStream;
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::net::*;
use common::{marker, stderr, stdout, Env};
use serde_json::Value;

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
