//! Tool jobs through the fleet, end to end: a real `oz0-edge`, real nodes
//! as the unprivileged user, plugins' manifests, and real MCP servers: the
//! npm `@modelcontextprotocol/server-filesystem` as a command tool in a
//! node's tier-1 sandbox, and a server written with the official Python SDK
//! in a microVM of the QEMU test backend (software emulation).
//!
//! - The edge routes by the manifest: a microVM tool with no node that
//!   proved microVMs is refused with the reason, a container tool is
//!   refused (no node here offers runtime.oci: see oci_tools.rs), a manifest with an unknown key is
//!   refused with its line.
//! - The shipped node, even asked for the test backend, offers no microVMs
//!   (a shipped build has no test backends); it runs command tools at tier
//!   1 and completes their jobs with the result or the reason.
//! - A test build of the node (`OZ0_NODE_TEST_BIN`, built with the feature
//!   `test-backends`) proves microVMs through the test backend, says so in
//!   its facts (`qemu-tcg (test)`), polls the tier-2 queue, boots the
//!   server in its VM, makes the call and completes the job with the
//!   result; a file given to the call is read by the tool inside the VM.
//! - A manifest whose aliases would expand to 100 GB is refused at its
//!   first anchor by an edge under a 1 GiB address-space limit, which
//!   answers its health check afterwards; the operator's CLI refuses the
//!   plugin folder before it sends anything.
//! - A result over the bound fails the job and is never cut; a job
//!   cancelled mid-call stops its VM; a node killed mid-call leaves a VM
//!   folder that its next start removes; no VM folder, record or process
//!   survives any of them.
//!
//! Needs `qemu-system-x86_64`, the test guest with its `python` image
//! (`scripts/build-test-guest.sh` and `scripts/build-test-guest-python.sh`,
//! folder in `OZ0_MICROVM_TEST_GUEST`) and `mcp-server-filesystem` on PATH.
//! Skips with the reason when one is missing; fails under `OZ0_MUST_WORK=1`.

// The Linux node's black-box tests (the Windows node's are windows.rs).
#![cfg(target_os = "linux")]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use common::fleet::{edge_bin, oz0_bin, processes_with, Edge, Node, OPERATOR};
use common::oci::{tar, Registry};
use common::{alias_bomb, node, prlimit, sandbox_ready, skip, TempDir, BOMB_AS_LIMIT};
use oz0_edge::client::{raw_request_with, Trust};
use oz0_edge::routing::{JobKind, Origin};

/// The microVM tool's server: the Python SDK's, sent to the VM as a file
/// of the call.
const SERVER: &str = r#"
import pathlib
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("oz0-tool-job-test")


@server.tool()
def read_file(path: str) -> str:
    """The text of PATH."""
    with open(path, encoding="utf-8") as f:
        return f.read()


@server.tool()
def big(n: int) -> str:
    """N bytes of x."""
    return "x" * n


@server.tool()
def hang() -> str:
    """Says it started, then never answers."""
    pathlib.Path("/work/hanging").write_text("yes")
    while True:
        time.sleep(60)


if __name__ == "__main__":
    server.run()
"#;

const STUB: &str = include_str!("fixtures/mcp_stub.py");

const DIGEST: &str = "0000000000000000000000000000000000000000000000000000000000000000";

fn vm_manifest() -> String {
    format!(
        "name: tool-job-test\ntools:\n  - id: py\n    package: oci:oz0.test/python@sha256:{DIGEST}\n    isolation: microvm\n    arch: x86_64\n    container: {{memory_mb: 384, cpus: 1}}\n    command: [python3, /work/.oz0-files/server.py]\n"
    )
}

const FS_MANIFEST: &str =
    "name: fs\ntools:\n  - id: fs\n    command: [mcp-server-filesystem, /work]\n";

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn vm_call(name: &str, arguments: serde_json::Value, files: &[(&str, &str)]) -> serde_json::Value {
    call_of(&vm_manifest(), name, arguments, files)
}

/// A microVM tool without `command:` (the seed's example manifest): its VM
/// runs `image`'s entrypoint and cmd.
fn image_manifest(image: &str) -> String {
    format!(
        "name: tool-job-test\ntools:\n  - id: py\n    package: {image}\n    isolation: microvm\n    arch: x86_64\n    container: {{memory_mb: 384, cpus: 1}}\n"
    )
}

/// A call of tool `py` of `manifest`, with the server's file and `files`.
fn call_of(
    manifest: &str,
    name: &str,
    arguments: serde_json::Value,
    files: &[(&str, &str)],
) -> serde_json::Value {
    let mut f = vec![serde_json::json!({"name": "server.py", "base64": b64(SERVER)})];
    for (n, c) in files {
        f.push(serde_json::json!({"name": n, "base64": b64(c)}));
    }
    serde_json::json!({
        "manifest": manifest,
        "tool": "py",
        "name": name,
        "arguments": arguments,
        "files": f,
        "timeout": 240,
    })
}

fn fs_call(name: &str, arguments: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"manifest": FS_MANIFEST, "tool": "fs", "name": name, "arguments": arguments, "timeout": 60})
}

fn guest_dir() -> PathBuf {
    std::env::var_os("OZ0_MICROVM_TEST_GUEST")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/oz0-guest"))
}

/// The test build of the node: `OZ0_NODE_TEST_BIN`, else cargo's.
fn test_node() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("OZ0_NODE_TEST_BIN") {
        return Some(PathBuf::from(p));
    }
    let p = node().with_file_name("oz0-node-test");
    p.exists().then_some(p)
}

fn ready() -> Option<(PathBuf, PathBuf)> {
    if !sandbox_ready() {
        return None;
    }
    let Some(edge) = edge_bin() else {
        skip("the oz0-edge binary is not found: set OZ0_EDGE_BIN or `cargo build -p oz0-edge`");
        return None;
    };
    if !Path::new("/usr/bin/qemu-system-x86_64").exists() {
        skip("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)");
        return None;
    }
    if !guest_dir().join("initrd-python.cpio").exists() {
        skip(&format!(
            "no test guest with the python image in {} (scripts/build-test-guest.sh and scripts/build-test-guest-python.sh)",
            guest_dir().display()
        ));
        return None;
    }
    if !Path::new("/usr/bin/mcp-server-filesystem").exists() {
        skip("mcp-server-filesystem is not installed (npm install -g @modelcontextprotocol/server-filesystem)");
        return None;
    }
    let Some(test_node) = test_node() else {
        skip("no test build of the node: set OZ0_NODE_TEST_BIN (cargo build -p oz0-node --features test-backends)");
        return None;
    };
    Some((edge, test_node))
}

/// Records and QEMU processes of VMs a node left.
fn vm_leftovers(n: &Node) -> Vec<String> {
    let mut left: Vec<String> = std::fs::read_dir(n.dir.join("data/microvm/vms"))
        .map(|d| {
            d.flatten()
                .map(|e| e.path().display().to_string())
                .collect()
        })
        .unwrap_or_default();
    left.extend(
        processes_with(&n.dir.s())
            .into_iter()
            .filter(|p| p.contains("qemu-system")),
    );
    left
}

fn wait_clean(n: &Node) {
    let until = Instant::now() + Duration::from_secs(30);
    while !vm_leftovers(n).is_empty() {
        assert!(Instant::now() < until, "left behind: {:?}", vm_leftovers(n));
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn json(j: &oz0_edge::wire::JobView) -> serde_json::Value {
    serde_json::to_value(j).unwrap()
}

/// The running VM's monitor (QEMU, the test backend's VMM), read from
/// `/proc`: no capability, no new privileges, two seccomp filters (tier
/// 1's `vmm` profile and QEMU's own `-sandbox on`, as smolvm's monitor has
/// tier 1's and smolvm's), and in its `/dev` only tier 1's device nodes:
/// software emulation is given no `/dev/kvm` (smol_standin.rs shows the
/// smolvm path's monitor with it).
fn monitor_is_walled(n: &Node) {
    let qemu: Vec<String> = processes_with(&n.dir.s())
        .into_iter()
        .filter(|p| p.contains("qemu-system"))
        .collect();
    assert_eq!(qemu.len(), 1, "one VM's monitor runs: {qemu:?}");
    let pid: u32 = qemu[0].split(':').next().unwrap().parse().unwrap();
    let o = oz0_microvm::monitor::observe(pid).unwrap();
    assert!(o.no_capabilities(), "{o:?}");
    assert!(o.no_new_privs, "{o:?}");
    assert_eq!((o.seccomp, o.seccomp_filters), (2, 2), "{o:?}");
    assert_eq!(
        o.devices,
        ["full", "null", "random", "tty", "urandom", "zero"],
        "{o:?}"
    );
    eprintln!("the VM's monitor (pid {pid}), from /proc: {o:?}");
}

/// Waits until the job's hanging tool has started (its file in the job's
/// work folder).
fn wait_hanging(n: &Node, id: &str) {
    let until = Instant::now() + Duration::from_secs(240);
    let f = n.dir.join(&format!("work/job-{id}-1/hanging"));
    while !f.exists() {
        assert!(
            Instant::now() < until,
            "the hanging tool never started:\n{}",
            n.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn tool_jobs_run_mcp_servers_behind_the_wall_their_manifest_asks_for() {
    let Some((edge_bin, test_node)) = ready() else {
        return;
    };
    // The registry the microVM tool without `command:` names its image in:
    // its config's entrypoint and cmd start the server (the QEMU test
    // backend boots the test guest's `python` image: it has no registry).
    let Some(reg) = Registry::start() else {
        return;
    };
    let layer = tar(&[("srv/", b'5', 0o755, b"")]);
    let python = reg.push_with(
        "python",
        std::slice::from_ref(&layer),
        None,
        r#"{"Entrypoint":["python3"],"Cmd":["/work/.oz0-files/server.py"]}"#,
    );
    let python = format!("oci:{}/python@{python}", reg.host());
    let bare = reg.push_with("bare/python", &[layer], None, r#"{"Env":["A=1"]}"#);
    let bare = format!("oci:{}/bare/python@{bare}", reg.host());
    // A short lease: a cancel reaches the node at its next renewal, a
    // third of it.
    let edge = Edge::start(&edge_bin, 9);
    let guest = guest_dir().display().to_string();
    let test_env = [
        ("OZ0_MICROVM_TEST_BACKEND", "qemu-tcg"),
        ("OZ0_MICROVM_TEST_GUEST", guest.as_str()),
    ];
    let submit = |p: serde_json::Value| edge.submit_kind(Origin::Internal, JobKind::Tool, p);

    // No node at all: refused with the microVM wording.
    let refused = submit(vm_call("read_file", serde_json::json!({}), &[])).unwrap_err();
    assert!(
        refused.contains("runs only in a microVM")
            && refused.contains("isolation.microvm=ready for x86_64"),
        "{refused}"
    );

    // Without `command:`: its node must also read the image's registry.
    let refused = submit(call_of(
        &image_manifest(&python),
        "read_file",
        serde_json::json!({}),
        &[],
    ))
    .unwrap_err();
    assert!(
        refused.contains("isolation.microvm=ready for x86_64 and runtime.oci=ready")
            && refused.contains("--oci-registry"),
        "{refused}"
    );

    // The shipped node, asked for the test backend: no microVMs. It gives
    // tools one variable of its environment, and no other.
    let shipped_env = [
        test_env[0],
        test_env[1],
        ("OZ0TEST_GIVEN", "given-value"),
        ("OZ0TEST_OTHER", "other-value"),
    ];
    let mut shipped = Node::start_with(
        &node(),
        &edge,
        "shipped",
        &["--tool-env", "OZ0TEST_GIVEN"],
        &shipped_env,
    );
    shipped.wait_log("facts reported", 120);
    assert!(
        shipped.log().contains("built without them"),
        "the shipped node must refuse the test backend:\n{}",
        shipped.log()
    );
    let view = edge.rt.block_on(edge.op.node("shipped")).unwrap();
    assert_eq!(view.tier_routed, 1, "{view:?}");
    assert!(!view.microvm_line.contains("ready"), "{view:?}");
    let refused = submit(vm_call("read_file", serde_json::json!({}), &[])).unwrap_err();
    assert!(refused.contains("isolation.microvm=ready"), "{refused}");
    // A container tool: no node offers runtime.oci (none names a registry).
    let refused = submit(serde_json::json!({
        "manifest": format!("tools:\n  - id: box\n    package: oci:ghcr.io/acme/box@sha256:{DIGEST}\n"),
        "tool": "box",
    }))
    .unwrap_err();
    assert!(
        refused.contains("runtime.oci=ready") && refused.contains("--oci-registry"),
        "{refused}"
    );
    // A manifest with an unknown key, and one with a forbidden variable.
    let refused = submit(serde_json::json!({"manifest": "tools:\n  - id: fs\n    command: [x]\n    isolaton: microvm\n", "tool": "fs"})).unwrap_err();
    assert!(
        refused.contains("line 4") && refused.contains("isolaton"),
        "{refused}"
    );
    let refused = submit(serde_json::json!({
        "manifest": vm_manifest().replace("command:", "secrets: [HTTPS_PROXY]\n    command:"),
        "tool": "py",
    }))
    .unwrap_err();
    assert!(
        refused.contains("HTTPS_PROXY is a proxy variable"),
        "{refused}"
    );

    // A command tool on the tier-1 node: a real MCP server, its result back.
    let id = submit(fs_call("list_allowed_directories", serde_json::json!({}))).unwrap();
    let j = json(&edge.wait_job(&id, 60));
    assert_eq!(j["state"], "succeeded", "{j}\n{}", shipped.log());
    assert_eq!(j["tier"], 1, "{j}");
    assert!(
        j["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("/work/job-"),
        "{j}"
    );
    // A tool the server does not list, and a call the server refuses.
    let id = submit(fs_call("nope", serde_json::json!({}))).unwrap();
    let j = json(&edge.wait_job(&id, 60));
    assert_eq!(j["state"], "failed", "{j}");
    assert!(
        j["error"]
            .as_str()
            .unwrap()
            .contains("does not list tool \"nope\""),
        "{j}"
    );
    let id = submit(fs_call(
        "read_text_file",
        serde_json::json!({"path": "/etc/passwd"}),
    ))
    .unwrap();
    let j = json(&edge.wait_job(&id, 60));
    assert_eq!(
        (j["state"].as_str(), j["exit_code"].as_i64()),
        (Some("failed"), Some(1)),
        "{j}"
    );
    assert!(
        j["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("outside allowed directories"),
        "the tool's own error comes back: {j}"
    );
    // Settings and secrets: only what the node's operator listed.
    let stub = |var: &str| {
        serde_json::json!({
            "manifest": format!("tools:\n  - id: stub\n    command: [python3, /work/.oz0-files/stub.py]\n    secrets: [{var}]\n"),
            "tool": "stub", "name": "env", "arguments": {"name": var},
            "files": [{"name": "stub.py", "base64": b64(STUB)}],
        })
    };
    let j = json(&edge.wait_job(&submit(stub("OZ0TEST_GIVEN")).unwrap(), 60));
    assert_eq!(j["state"], "succeeded", "{j}");
    assert!(
        j["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("given-value"),
        "{j}"
    );
    let j = json(&edge.wait_job(&submit(stub("OZ0TEST_OTHER")).unwrap(), 60));
    assert_eq!(j["state"], "failed", "{j}");
    assert!(
        j["error"].as_str().unwrap().contains(
            "which this node gives no tool: start the node with --tool-env OZ0TEST_OTHER"
        ),
        "{j}"
    );
    drop(shipped);

    // The test build proves microVMs through the test backend and says so.
    let registry = ["--oci-registry".to_string(), reg.host()];
    let registry: Vec<&str> = registry.iter().map(String::as_str).collect();
    let mut n = Node::start_with(&test_node, &edge, "vmnode", &registry, &test_env);
    n.wait_log("facts reported: the edge routes this node at tier 2", 300);
    let view = edge.rt.block_on(edge.op.node("vmnode")).unwrap();
    assert_eq!(view.tier_routed, 2, "{view:?}");
    let facts = serde_json::to_value(&view.facts).unwrap();
    assert_eq!(facts["microvm_backend"], "qemu-tcg (test)", "{facts}");
    assert!(view.microvm_line.contains("qemu-tcg (test)"), "{view:?}");

    // A call with a file: the tool reads it inside the VM.
    let text = "given to the call, read in the VM";
    let t = Instant::now();
    let id = submit(vm_call(
        "read_file",
        serde_json::json!({"path": "/work/.oz0-files/input.txt"}),
        &[("input.txt", text)],
    ))
    .unwrap();
    let j = json(&edge.wait_job(&id, 300));
    let took = t.elapsed();
    assert_eq!(j["state"], "succeeded", "{j}\n{}", n.log());
    assert_eq!(j["tier"], 2, "{j}");
    assert_eq!(j["result"]["content"][0]["text"], text, "{j}");
    wait_clean(&n);
    eprintln!(
        "tool job submit -> result: {:.1} s (QEMU TCG software emulation, Python SDK server)",
        took.as_secs_f64()
    );

    // Without `command:`: the VM runs the image's entrypoint and cmd, read
    // from its registry by digest.
    let id = submit(call_of(
        &image_manifest(&python),
        "read_file",
        serde_json::json!({"path": "/work/.oz0-files/input.txt"}),
        &[("input.txt", text)],
    ))
    .unwrap();
    let j = json(&edge.wait_job(&id, 300));
    assert_eq!(j["state"], "succeeded", "{j}\n{}", n.log());
    assert_eq!(j["result"]["content"][0]["text"], text, "{j}");
    wait_clean(&n);
    // An image whose config names neither: the job fails before any VM,
    // saying so with the fix.
    let id = submit(call_of(
        &image_manifest(&bare),
        "read_file",
        serde_json::json!({}),
        &[],
    ))
    .unwrap();
    let j = json(&edge.wait_job(&id, 120));
    assert_eq!(j["state"], "failed", "{j}");
    assert!(
        j["error"].as_str().unwrap_or("").contains(
            "names no entrypoint and no cmd: give the server's command: in oz0-plugin.yaml"
        ),
        "{j}"
    );
    wait_clean(&n);

    // A result over the bound: refused whole, never cut.
    let id = submit(vm_call("big", serde_json::json!({"n": 1_200_000}), &[])).unwrap();
    let j = json(&edge.wait_job(&id, 300));
    assert_eq!(j["state"], "failed", "{j}");
    assert!(j["result"].is_null(), "{j}");
    assert!(
        j["error"]
            .as_str()
            .unwrap_or("")
            .contains("refused whole, not cut"),
        "{j}"
    );
    wait_clean(&n);

    // Cancelled mid-call: the node hears of it and stops the VM. Before,
    // the running monitor is read from /proc.
    let id = submit(vm_call("hang", serde_json::json!({}), &[])).unwrap();
    wait_hanging(&n, &id);
    assert!(!vm_leftovers(&n).is_empty(), "the VM runs");
    monitor_is_walled(&n);
    let j = json(&edge.cancel(&id));
    assert_eq!(j["state"], "cancelled", "{j}");
    n.wait_log(&format!("job {id} cancelled by an operator: stopped"), 30);
    wait_clean(&n);

    // Killed mid-call: the next start removes the VM's folder it left.
    let id = submit(vm_call("hang", serde_json::json!({}), &[])).unwrap();
    wait_hanging(&n, &id);
    n.signal("KILL");
    let _ = n.wait_exit(10);
    let until = Instant::now() + Duration::from_secs(30);
    while vm_leftovers(&n).iter().any(|l| l.contains("qemu-system")) {
        assert!(
            Instant::now() < until,
            "QEMU outlived its node: {:?}",
            vm_leftovers(&n)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        !vm_leftovers(&n).is_empty(),
        "a killed node leaves its VM's record"
    );
    edge.cancel(&id);
    n.restart(&test_node, &edge, "vmnode", &registry, &test_env);
    n.wait_log("removed 1 stale microVM folder(s)", 120);
    n.wait_log("facts reported", 300);
    wait_clean(&n);

    // SIGTERM mid-call: the node stops the VM and exits cleanly.
    let id = submit(vm_call("hang", serde_json::json!({}), &[])).unwrap();
    wait_hanging(&n, &id);
    n.signal("TERM");
    assert_eq!(n.wait_exit(60), Some(0), "{}", n.log());
    wait_clean(&n);
    edge.cancel(&id);
}

#[test]
fn an_alias_bomb_manifest_is_refused_and_the_edge_still_answers() {
    let Some(edge_bin) = edge_bin() else {
        skip("the oz0-edge binary is not found: set OZ0_EDGE_BIN or `cargo build -p oz0-edge`");
        return;
    };
    let Some(oz0) = oz0_bin() else {
        skip("the oz0 binary is not found: set OZ0_CLI_BIN or `cargo build -p oz0-edge`");
        return;
    };
    let Some(prlimit) = prlimit() else {
        skip("prlimit is not installed (apt-get install util-linux)");
        return;
    };
    let edge = Edge::start_under(&[prlimit, BOMB_AS_LIMIT, "--"], &edge_bin, 30, &[]);
    let health = || {
        edge.rt.block_on(raw_request_with(
            &edge.url,
            &Trust::CaFile(edge.ca.clone()),
            "GET",
            "/v1/health",
            &[],
            vec![],
        ))
    };
    assert_eq!(health().unwrap().0, 200);
    let refused = edge
        .submit_kind(
            Origin::Internal,
            JobKind::Tool,
            serde_json::json!({"manifest": alias_bomb(), "tool": "t"}),
        )
        .unwrap_err();
    assert!(
        refused.contains("(400 bad_job)")
            && refused.contains("oz0-plugin.yaml line 2 column")
            && refused.contains("an anchor (&name): a manifest takes no anchors or aliases"),
        "{refused}"
    );
    let (status, body) = health().unwrap_or_else(|e| panic!("the edge stopped answering: {e}"));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));

    // The operator's CLI reads the same manifest from a plugin folder.
    let dir = TempDir::new("bomb");
    std::fs::write(dir.join("oz0-plugin.yaml"), alias_bomb()).unwrap();
    let o = Command::new(prlimit)
        .args([BOMB_AS_LIMIT, "--"])
        .arg(oz0)
        .args([
            "job",
            "tool",
            "--tenant",
            "acme",
            "--plugin",
            &dir.s(),
            "--tool",
            "t",
        ])
        .env("OZ0_EDGE", &edge.url)
        .env("OZ0_EDGE_CA", &edge.ca)
        .env("OZ0_OPERATOR_TOKEN", OPERATOR)
        .env_remove("OZ0_OPERATOR_TOKEN_FILE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("oz0-plugin.yaml line 2 column")
            && err.contains("takes no anchors or aliases"),
        "{err}"
    );
    let jobs = edge
        .rt
        .block_on(edge.op.jobs("acme", None, None, None))
        .unwrap();
    assert!(jobs.jobs.is_empty(), "{jobs:?}");
}
