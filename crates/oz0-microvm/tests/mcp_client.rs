//! End to end with a real MCP client: the PyPI `mcp` package's stdio client
//! (`tests/mcp_client.py`) starts `sandbox vm … -- SERVER` on the QEMU/TCG
//! test backend, initialises, lists the tools and calls them; the test then
//! checks the results on the host. Two VM boots:
//!
//! - the node's own test server (`oz0-node mcp-test-server`) in the base
//!   guest;
//! - a real MCP server written with the official Python SDK
//!   (`tests/mcp_server.py`, run by CPython in the guest's `python` image),
//!   with egress: its write appears on the host, it sees only `lo`, and
//!   through the proxy an allowed loopback listener answers while an
//!   unlisted one gets 403.
//!
//! Needs `qemu-system-x86_64`, the guest from `scripts/build-test-guest.sh`
//! and `scripts/build-test-guest-python.sh` (folder in
//! `OZ0_MICROVM_TEST_GUEST`, default `/tmp/oz0-guest`), bubblewrap and
//! `python3` with `mcp` (`python3 -m pip install mcp`). Skips with a printed
//! reason when one is missing; fails under `OZ0_MUST_WORK=1`. Run as root,
//! it runs the node as the unprivileged user `oz0test`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod stage;
use stage::{http_listener, Stage};

fn guest_dir() -> PathBuf {
    std::env::var_os("OZ0_MICROVM_TEST_GUEST")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/oz0-guest"))
}

/// Prints why the test does not run; panics instead under `OZ0_MUST_WORK=1`.
fn skip(why: &str) {
    if std::env::var("OZ0_MUST_WORK").as_deref() == Ok("1") {
        panic!("OZ0_MUST_WORK=1 and {why}");
    }
    eprintln!("SKIP: {why}");
}

fn ready() -> bool {
    let g = guest_dir();
    if !Path::new("/usr/bin/qemu-system-x86_64").exists() {
        skip("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)");
        return false;
    }
    if !g.join("initrd.cpio").exists() {
        skip(&format!(
            "no test guest in {} (run scripts/build-test-guest.sh {})",
            g.display(),
            g.display()
        ));
        return false;
    }
    if Command::new("bwrap").arg("--version").output().is_err() {
        skip("bubblewrap is not installed");
        return false;
    }
    let mcp = Command::new("python3")
        .args(["-c", "import mcp.client.stdio"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !matches!(mcp, Ok(s) if s.success()) {
        skip("python3 has no `mcp` package (python3 -m pip install mcp)");
        return false;
    }
    true
}

/// The server command the MCP client spawns: `sandbox vm [OPTS] -- SERVER`
/// with a clean environment, as `oz0test` when root.
fn server_cmd(st: &Stage, opts: &[String], server: &[&str]) -> Vec<String> {
    let mut cmd: Vec<String> = Vec::new();
    if rustix::process::getuid().is_root() {
        cmd.extend(
            [
                "setpriv",
                "--reuid=oz0test",
                "--regid=oz0test",
                "--init-groups",
                "--",
            ]
            .map(String::from),
        );
    }
    cmd.extend([
        "env".into(),
        "-i".into(),
        format!("HOME={}", st.dir.display()),
        "PATH=/usr/local/bin:/usr/bin:/bin".into(),
        "OZ0_MICROVM_TEST_BACKEND=qemu-tcg".into(),
        format!("OZ0_MICROVM_TEST_GUEST={}", guest_dir().display()),
    ]);
    cmd.extend(st.vm_args());
    cmd.extend(opts.iter().cloned());
    cmd.push("--".into());
    cmd.extend(server.iter().map(|s| s.to_string()));
    cmd
}

/// Runs the MCP client against `server` with `calls`; its JSON report.
fn client(server: Vec<String>, calls: Value) -> (Value, Duration) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client.py");
    let started = Instant::now();
    let out = Command::new("python3")
        .arg(&script)
        .arg(calls.to_string())
        .arg("--")
        .args(server)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run python3 tests/mcp_client.py");
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the MCP client failed ({}): {stdout}",
        out.status
    );
    let r: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("client output is not JSON ({e}): {stdout:?}"));
    (r, took)
}

fn tools(r: &Value) -> Vec<&str> {
    r["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

/// The client closed the server's stdin (then signalled its group after a
/// grace period): the node removes the VM and its record.
fn assert_vm_removed(st: &Stage) {
    let t = Instant::now();
    while !vm_records(st).is_empty() && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        vm_records(st).is_empty(),
        "records left: {:?}",
        vm_records(st)
    );
}

fn vm_records(st: &Stage) -> Vec<PathBuf> {
    std::fs::read_dir(st.dir.join("data/microvm/vms"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

#[test]
fn real_mcp_client_writes_through_a_vm() {
    if !ready() {
        return;
    }
    let st = stage::stage("mcpclient", env!("CARGO_BIN_EXE_oz0-vm-testnode"));
    let content = "written by a real MCP client, in a VM";
    let (r, took) = client(
        server_cmd(
            &st,
            &["--memory".into(), "256".into()],
            &["/oz0/oz0-node", "mcp-test-server"],
        ),
        serde_json::json!([["write_file", {"path": "from-mcp-client.txt", "content": content}]]),
    );
    assert_eq!(r["server"], "oz0-vm-test", "{r}");
    assert!(tools(&r).contains(&"write_file"), "{r}");
    assert_eq!(r["calls"][0]["is_error"], false, "{r}");
    assert_eq!(
        std::fs::read_to_string(st.dir.join("work/from-mcp-client.txt"))
            .expect("the guest's write is on the host"),
        content
    );
    assert_vm_removed(&st);
    eprintln!(
        "mcp client: protocol {}, first MCP response after {:.2} s, session {:.2} s \
         (qemu, TCG software emulation)",
        r["protocol"].as_str().unwrap_or("?"),
        r["first_response_s"].as_f64().unwrap_or(f64::NAN),
        took.as_secs_f64()
    );
}

#[test]
fn python_sdk_server_in_a_vm_writes_and_reaches_only_allowed_hosts() {
    if !ready() {
        return;
    }
    if !guest_dir().join("initrd-python.cpio").exists() {
        skip(&format!(
            "the test guest has no python image (run scripts/build-test-guest-python.sh {})",
            guest_dir().display()
        ));
        return;
    }
    let st = stage::stage("mcppython", env!("CARGO_BIN_EXE_oz0-vm-testnode"));
    let server_py = st.dir.join("work/mcp_server.py");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_server.py"),
        &server_py,
    )
    .expect("stage the server");
    let allowed = http_listener("hello from an allowed host");
    let unlisted = http_listener("must never be seen");
    let content = "written by the Python SDK's server, in a VM";
    let (r, took) = client(
        server_cmd(
            &st,
            &[
                "--image".into(),
                "python".into(),
                "--memory".into(),
                "512".into(),
                "--allow".into(),
                format!("127.0.0.1:{allowed}"),
            ],
            &["python3", "/work/mcp_server.py"],
        ),
        serde_json::json!([
            ["write_file", {"path": "from-python-server.txt", "content": content}],
            ["net_interfaces", {}],
            ["fetch", {"url": format!("http://127.0.0.1:{allowed}/")}],
            ["fetch", {"url": format!("http://127.0.0.1:{unlisted}/")}],
        ]),
    );
    assert_eq!(r["server"], "oz0-python-vm-test", "{r}");
    let t = tools(&r);
    for name in ["write_file", "net_interfaces", "fetch"] {
        assert!(t.contains(&name), "{name} missing: {r}");
    }
    let calls = r["calls"].as_array().expect("calls");
    assert!(
        calls.iter().all(|c| c["is_error"] == false),
        "a call failed: {r}"
    );
    assert_eq!(
        std::fs::read_to_string(st.dir.join("work/from-python-server.txt"))
            .expect("the guest's write is on the host"),
        content
    );
    assert_eq!(
        calls[1]["text"], "lo",
        "the guest has another interface: {r}"
    );
    assert_eq!(
        calls[2]["text"], "200 hello from an allowed host",
        "the allowed host through the proxy: {r}"
    );
    let refused = calls[3]["text"].as_str().unwrap_or("");
    assert!(
        refused.starts_with("403 ") && refused.contains("not in this run's allowlist"),
        "the unlisted host: {r}"
    );
    assert_vm_removed(&st);
    eprintln!(
        "python mcp server: protocol {}, first MCP response after {:.2} s, session {:.2} s \
         (CPython 3.11 + mcp in the guest; qemu, TCG software emulation)",
        r["protocol"].as_str().unwrap_or("?"),
        r["first_response_s"].as_f64().unwrap_or(f64::NAN),
        took.as_secs_f64()
    );
}
