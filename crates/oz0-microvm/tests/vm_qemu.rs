//! End to end, QEMU/TCG test backend: a real MCP server in a VM whose
//! monitor runs inside tier 1, driven over stdio by a JSON-RPC MCP client.
//!
//! Needs `qemu-system-x86_64` and the guest from `scripts/build-test-guest.sh`
//! (folder in `OZ0_MICROVM_TEST_GUEST`, default `/tmp/oz0-guest`). Skips with
//! a printed reason when either is missing; fails under `OZ0_MUST_WORK=1`.
//! Run as root, it runs the node as the unprivileged user `oz0test`.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::json;

mod stage;
use stage::{records_pid, vm_folders, Client, Stage};

fn guest_dir() -> PathBuf {
    std::env::var_os("OZ0_MICROVM_TEST_GUEST")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/oz0-guest"))
}

fn skip(why: &str) -> bool {
    if std::env::var("OZ0_MUST_WORK").as_deref() == Ok("1") {
        panic!("OZ0_MUST_WORK=1 and {why}");
    }
    eprintln!("SKIP: {why}");
    true
}

/// Starts `sandbox vm` with the QEMU test backend (as oz0test when root).
fn start_vm(st: &Stage, extra: &[String]) -> Child {
    let mut args = st.vm_args();
    args.extend(["--memory".into(), "256".into()]);
    args.extend(extra.iter().cloned());
    args.extend([
        "--".into(),
        "/oz0/oz0-node".into(),
        "mcp-test-server".into(),
    ]);
    let envs = [
        ("OZ0_MICROVM_TEST_BACKEND", "qemu-tcg".to_string()),
        ("OZ0_MICROVM_TEST_GUEST", guest_dir().display().to_string()),
    ];
    stage::start_node(st, &args, &envs)
}

fn http_server() -> (u16, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let h = std::thread::spawn(move || {
        for s in l.incoming().take(4) {
            let Ok(mut s) = s else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\noz0-ok",
            );
        }
    });
    (port, h)
}

fn ready() -> bool {
    let g = guest_dir();
    if !Path::new("/usr/bin/qemu-system-x86_64").exists() {
        return !skip("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)");
    }
    if !g.join("initrd.cpio").exists() {
        return !skip(&format!(
            "no test guest in {} (run scripts/build-test-guest.sh {})",
            g.display(),
            g.display()
        ));
    }
    if Command::new("bwrap").arg("--version").output().is_err() {
        return !skip("bubblewrap is not installed");
    }
    true
}

#[test]
fn mcp_server_in_a_vm_end_to_end() {
    if !ready() {
        return;
    }
    let st = stage::stage("vmtest", env!("CARGO_BIN_EXE_oz0-vm-testnode"));
    let (port, _srv) = http_server();

    // 1. A full session: tools, a write, only lo, egress allowed and refused,
    //    a guest-made link to /, then the end of input.
    let started = Instant::now();
    let mut c = Client::new(start_vm(
        &st,
        &["--allow".into(), format!("127.0.0.1:{port}")],
    ));
    c.initialize();
    let first = started.elapsed();
    let tools = c.request("tools/list", json!({}));
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"write_file"), "{names:?}");
    let (t, err) = c.call(
        "write_file",
        json!({"path": "hello.txt", "content": "from the guest"}),
    );
    assert!(!err, "{t}");
    assert_eq!(
        std::fs::read_to_string(st.dir.join("work/hello.txt")).unwrap(),
        "from the guest"
    );
    let (t, _) = c.call("net_interfaces", json!({}));
    assert_eq!(t, "lo", "the guest has a network device besides lo");
    let (t, err) = c.call(
        "http_get",
        json!({"url": format!("http://127.0.0.1:{port}/")}),
    );
    assert!(
        !err && t.starts_with("HTTP/1.1 200") && t.ends_with("oz0-ok"),
        "{t}"
    );
    let (t, err) = c.call("http_get", json!({"url": "http://other.invalid/"}));
    assert!(!err && t.starts_with("HTTP/1.1 403"), "{t}");
    let (t, err) = c.call("symlink", json!({"target": "/", "link": "/work/rootlink"}));
    assert!(!err, "{t}");
    let link = st.dir.join("work/rootlink");
    let m = std::fs::symlink_metadata(&link).unwrap();
    assert!(m.file_type().is_symlink());
    assert_eq!(std::fs::read_link(&link).unwrap(), PathBuf::from("/"));
    // The guest resolves its own link in its own root (it has /init; the host does not).
    let (t, err) = c.call("read_file", json!({"path": "/work/rootlink/init"}));
    assert!(!err && t.contains("__oz0-vm-guest"), "{t}");
    let code = c.wait(Duration::from_secs(30));
    assert_eq!(code, 0);
    assert!(
        vm_folders(&st).is_empty(),
        "records left: {:?}",
        vm_folders(&st)
    );
    // The host never followed the link: it is still there, still a link.
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    eprintln!("first MCP response after {first:?} (qemu, TCG software emulation)");

    // 2. The client is killed: its pipes close mid-session.
    let mut c = Client::new(start_vm(&st, &[]));
    c.initialize();
    let (_, dir) = records_pid(&st).expect("a record while the VM runs");
    assert!(dir.is_dir());
    let Client { mut child, out, .. } = c;
    drop(out);
    drop(child.stdin.take());
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the VM outlived its client"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !dir.exists(),
        "{} left after the client died",
        dir.display()
    );
    assert!(vm_folders(&st).is_empty());

    // 3. SIGTERM of the node.
    let mut c = Client::new(start_vm(&st, &[]));
    c.initialize();
    let (pid, dir) = records_pid(&st).expect("a record while the VM runs");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(i32::try_from(pid).unwrap()).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let t = Instant::now();
    let code = loop {
        if let Some(s) = c.child.try_wait().unwrap() {
            break s.code();
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the VM outlived SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, Some(143));
    assert!(!dir.exists(), "{} left after SIGTERM", dir.display());
    assert!(vm_folders(&st).is_empty());
}
