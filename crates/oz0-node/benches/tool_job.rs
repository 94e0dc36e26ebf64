//! Benchmark: a tool job through the fleet, submit → result, with its
//! phases, against baselines measured in the same run. Not a test: nothing
//! here asserts a time.
//!
//! - `direct`: `mcp-server-filesystem` started as a plain process of this
//!   user, no wall, and the node's own MCP client (initialize, tools/list,
//!   the call): what any implementation reaches here for this server.
//! - `plugin call (tier 1)`: the same call through `oz0-node plugin call`,
//!   the server in the tier-1 sandbox.
//! - `edge job (tier 1)`: the same call submitted to a real `oz0-edge` and
//!   run by a real node (`oz0-node run --edge`, polling every 50 ms).
//! - `plugin call (microVM)` and `edge job (microVM)`: a server of the
//!   official Python SDK in a VM of the QEMU test backend — software
//!   emulation (TCG), no KVM: this machine's `/dev/kvm` boots no guest
//!   (nested virtualisation), so these figures are the emulator's, not a
//!   microVM's on hardware.
//!
//! Phases, from the edge's timestamps and the node's job record: queue
//! (submitted → handed out), boot (the VM's guest agent answered), start
//! (the server answered `initialize`, boot included), list, call, and
//! report (the call's end → the edge recorded it).
//!
//! Run as the node's unprivileged user, with the test build of the node
//! (the one build whose facts may offer the QEMU test backend):
//!
//! ```text
//! cargo build --release -p oz0-edge && cargo build --release -p oz0-node --features test-backends \
//!   && cp target/release/oz0-node /tmp/oz0-node-test && chmod 755 /tmp/oz0-node-test
//! OZ0_NODE_TEST_BIN=/tmp/oz0-node-test OZ0_EDGE_BIN=target/release/oz0-edge \
//!   OZ0_MICROVM_TEST_GUEST=/tmp/oz0-guest cargo bench -p oz0-node --bench tool_job [-- RUNS]
//! ```
//!
//! RUNS (default 5) is the number of tier-1 calls per row; the microVM rows
//! run 2 each. Without QEMU or the test guest the microVM rows say why.

#[path = "../tests/common/mod.rs"]
#[allow(unused_imports, unused_macros)]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use base64::Engine;
use common::fleet::{edge_bin, Edge, Node};
use common::TempDir;
use oz0_edge::routing::{JobKind, Origin};

const FS_SERVER: &str = "/usr/bin/mcp-server-filesystem";
const FS_MANIFEST: &str =
    "name: fs\ntools:\n  - id: fs\n    command: [mcp-server-filesystem, /work]\n";
const PY_SERVER: &str = "from mcp.server.mcpserver import MCPServer\n\nserver = MCPServer(\"bench\")\n\n\n@server.tool()\ndef add(a: int, b: int) -> int:\n    \"\"\"a + b.\"\"\"\n    return a + b\n\n\nif __name__ == \"__main__\":\n    server.run()\n";

fn vm_manifest() -> String {
    format!("name: py\ntools:\n  - id: py\n    package: oci:oz0.test/python@sha256:{}\n    isolation: microvm\n    container: {{memory_mb: 384, cpus: 1}}\n    command: [python3, /work/.oz0-files/server.py]\n", "0".repeat(64))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// The phases of one job, ms.
#[derive(Default, Clone)]
struct Phases {
    total: f64,
    queue: f64,
    boot: f64,
    start: f64,
    list: f64,
    call: f64,
    report: f64,
}

/// A row: medians of each phase.
fn row(name: &str, runs: &[Phases], baseline: Option<f64>) {
    let m = |f: fn(&Phases) -> f64| median(&mut runs.iter().map(f).collect::<Vec<_>>());
    let total = m(|p| p.total);
    println!(
        "{name:<24} {total:>9.1} ms  (queue {:>6.1}, boot {:>7.1}, start {:>7.1}, list {:>5.1}, call {:>5.1}, report {:>5.1}){}  [{} runs]",
        m(|p| p.queue),
        m(|p| p.boot),
        m(|p| p.start),
        m(|p| p.list),
        m(|p| p.call),
        m(|p| p.report),
        baseline.map(|b| format!("  ratio {:.2}", total / b)).unwrap_or_default(),
        runs.len()
    );
}

/// The direct call: the server as a plain process, the node's client.
fn direct(work: &Path) -> Phases {
    let t = Instant::now();
    let mut child = Command::new(FS_SERVER)
        .arg(work)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("mcp-server-filesystem starts");
    let cancel = AtomicBool::new(false);
    let r = oz0_plugin::mcp::Client::new(
        child.stdin.take().unwrap(),
        child.stdout.take().unwrap(),
        Instant::now() + Duration::from_secs(60),
        &cancel,
    )
    .call(serde_json::json!({"name": "list_allowed_directories", "arguments": {}}))
    .expect("the direct call answers");
    let total = t.elapsed().as_secs_f64() * 1000.0;
    let _ = child.kill();
    let _ = child.wait();
    Phases {
        total,
        start: r.initialize_ms as f64,
        list: r.list_ms as f64,
        call: r.call_ms as f64,
        ..Phases::default()
    }
}

/// `oz0-node plugin call … --json`, its phases from its own report.
fn plugin_call(
    node: &Path,
    plugin: &Path,
    tool: &str,
    name: &str,
    args: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Phases {
    let t = Instant::now();
    let o = Command::new(node)
        .args(["plugin", "call"])
        .arg(plugin)
        .args([tool, "--name", name, "--arguments", args, "--json"])
        .args(extra)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let total = t.elapsed().as_secs_f64() * 1000.0;
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|_| panic!("plugin call: {}", String::from_utf8_lossy(&o.stderr)));
    assert_eq!(doc["outcome"], "exited", "{doc}");
    let mut p = phases_of(&doc["phases"]);
    p.total = total;
    p
}

fn phases_of(v: &serde_json::Value) -> Phases {
    let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
    Phases {
        boot: f("vm_answered_ms"),
        start: f("initialize_ms"),
        list: f("list_ms"),
        call: f("call_ms"),
        ..Phases::default()
    }
}

/// One job through the edge: submit → result, its phases from the edge's
/// timestamps and the node's record.
fn edge_job(edge: &Edge, n: &Node, payload: serde_json::Value) -> Phases {
    let t = Instant::now();
    let id = edge
        .submit_kind(Origin::Internal, JobKind::Tool, payload)
        .expect("the edge takes the job");
    let j = loop {
        let j = edge.job(&id);
        if !matches!(j.state.as_str(), "queued" | "leased") {
            break j;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let total = t.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(j.state, "succeeded", "{j:?}\n{}", n.log());
    let status: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(n.dir.join(&format!("data/jobs/{id}/status.json"))).unwrap(),
    )
    .unwrap();
    let mut p = phases_of(&status["phases"]);
    let (sub, leased, done) = (
        j.submitted_ms,
        j.leased_ms.unwrap_or(0),
        j.done_ms.unwrap_or(0),
    );
    p.total = total;
    p.queue = (leased - sub) as f64;
    let ran = status["duration_ms"].as_f64().unwrap_or(0.0);
    p.report = ((done - leased) as f64 - ran).max(0.0);
    p
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn main() {
    let runs: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(5);
    if std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
    {
        eprintln!("tool_job: run as the node's unprivileged user (nodes never run as root), e.g. runuser -u oz0test -- …");
        std::process::exit(2);
    }
    let (Some(edge_bin), Some(test_node)) = (
        edge_bin(),
        std::env::var_os("OZ0_NODE_TEST_BIN").map(PathBuf::from),
    ) else {
        eprintln!("tool_job: set OZ0_EDGE_BIN and OZ0_NODE_TEST_BIN (see this file's header)");
        std::process::exit(2);
    };
    if !Path::new(FS_SERVER).exists() {
        eprintln!("tool_job: {FS_SERVER} is missing: npm install -g @modelcontextprotocol/server-filesystem");
        std::process::exit(2);
    }
    let root = TempDir::new("bench-tooljob");
    let plugin = root.join("fs");
    std::fs::create_dir(&plugin).unwrap();
    std::fs::write(plugin.join("oz0-plugin.yaml"), FS_MANIFEST).unwrap();
    let work = root.join("work");
    std::fs::create_dir(&work).unwrap();
    println!("tool call: list_allowed_directories of @modelcontextprotocol/server-filesystem; medians, {runs} runs per row");
    let mut d: Vec<Phases> = (0..runs).map(|_| direct(&work)).collect();
    let base = median(&mut d.iter().map(|p| p.total).collect::<Vec<_>>());
    row("direct (no wall)", &d, None);
    d.clear();
    let data = root.join("data");
    let data_s = data.display().to_string();
    let pc: Vec<Phases> = (0..runs)
        .map(|_| {
            plugin_call(
                &test_node,
                &plugin,
                "fs",
                "list_allowed_directories",
                "{}",
                &["--data-dir", &data_s],
                &[],
            )
        })
        .collect();
    row("plugin call (tier 1)", &pc, Some(base));

    let edge = Edge::start(&edge_bin, 60);
    let guest = std::env::var("OZ0_MICROVM_TEST_GUEST").unwrap_or_else(|_| "/tmp/oz0-guest".into());
    let vm_ready = Path::new("/usr/bin/qemu-system-x86_64").exists()
        && Path::new(&guest).join("initrd-python.cpio").exists();
    let env: Vec<(&str, &str)> = if vm_ready {
        vec![
            ("OZ0_MICROVM_TEST_BACKEND", "qemu-tcg"),
            ("OZ0_MICROVM_TEST_GUEST", guest.as_str()),
        ]
    } else {
        vec![("OZ0_MICROVM", "off")]
    };
    let mut n = Node::start_with(&test_node, &edge, "bench", &["--poll-ms", "50"], &env);
    n.wait_log("facts reported", 300);
    let payload = serde_json::json!({"manifest": FS_MANIFEST, "tool": "fs", "name": "list_allowed_directories"});
    let ej: Vec<Phases> = (0..runs)
        .map(|_| edge_job(&edge, &n, payload.clone()))
        .collect();
    row("edge job (tier 1)", &ej, Some(base));

    if !vm_ready {
        println!("microVM rows: not run: qemu-system-x86_64 or the test guest's python image ({guest}) is missing (scripts/build-test-guest.sh, scripts/build-test-guest-python.sh)");
        return;
    }
    println!("microVM: the Python SDK server's add(2, 3) in a VM of the QEMU test backend, software emulation (TCG), no KVM; 2 runs per row");
    let vplugin = root.join("py");
    std::fs::create_dir(&vplugin).unwrap();
    std::fs::write(vplugin.join("oz0-plugin.yaml"), vm_manifest()).unwrap();
    let server = root.join("server.py");
    std::fs::write(&server, PY_SERVER).unwrap();
    let file = format!("server.py={}", server.display());
    let vp: Vec<Phases> = (0..2)
        .map(|_| {
            plugin_call(
                &test_node,
                &vplugin,
                "py",
                "add",
                r#"{"a": 2, "b": 3}"#,
                &["--file", &file, "--data-dir", &data_s],
                &env,
            )
        })
        .collect();
    row("plugin call (microVM)", &vp, Some(base));
    let vpay = serde_json::json!({
        "manifest": vm_manifest(), "tool": "py", "name": "add", "arguments": {"a": 2, "b": 3},
        "files": [{"name": "server.py", "base64": b64(PY_SERVER)}],
    });
    let vj: Vec<Phases> = (0..2).map(|_| edge_job(&edge, &n, vpay.clone())).collect();
    row("edge job (microVM)", &vj, Some(base));
    n.signal("TERM");
    let _ = n.wait_exit(60);
}
