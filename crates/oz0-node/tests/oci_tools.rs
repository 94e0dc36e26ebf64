//! Container tools through the fleet, end to end: a real `oz0-edge`, a real
//! node as the unprivileged user with `--oci-registry`, a registry on
//! loopback (Debian's `docker-registry`), and a real MCP server in an image
//! this test builds: the npm `@modelcontextprotocol/server-filesystem` with
//! the host's `node` and the libraries it needs, and nothing else. The
//! plugin's manifest names the image by digest and no `command:`: the
//! server is the image's entrypoint and cmd, as the seed's example manifest
//! has it.
//!
//! - With no node offering `runtime.oci`, a container tool is refused at
//!   submit, with the fix.
//! - A tier-1 node with `--oci-registry` says `runtime.oci=ready` (in
//!   tier 1) in its facts, and the edge shows it; the tool's job pulls the
//!   image, runs the server in its image's root inside tier 1, and comes
//!   back with the server's answers: its allowed folder is `/work`, a file
//!   given with the call is read there, and the host's `/etc/passwd` is
//!   outside what it may read.
//! - `plugin check` pulls the image, starts the server and lists its tools;
//!   with the registry not named, it leaves the tool out and says why.
#![cfg(target_os = "linux")]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use common::fleet::{edge_bin, Edge, Node};
use common::fleet::{processes_with, wait_gone};
use common::oci::{has_runsc, server_layer, tar, Registry, FS_RUN as RUN, SERVER_DIR};
use common::{node, sandbox_ready, skip, TempDir};
use oz0_edge::routing::{JobKind, Origin};

fn manifest(image: &str) -> String {
    format!(
        "name: fs-image\ntools:\n  - id: fs\n    package: {image}\n    container: {{memory_mb: 512}}\n"
    )
}

fn call(image: &str, name: &str, arguments: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "manifest": manifest(image),
        "tool": "fs",
        "name": name,
        "arguments": arguments,
        "timeout": 120,
    })
}

/// An image whose server never answers (busybox's `sh` sleeping, with
/// `marker` on its command line), pushed as `name`; its reference.
fn hanging_image(reg: &Registry, name: &str, marker: &str) -> String {
    let bb = std::fs::read("/bin/busybox").expect("/bin/busybox (apt-get install busybox-static)");
    let layer = tar(&[
        ("bin/", b'5', 0o755, b""),
        ("bin/busybox", b'0', 0o755, &bb),
        ("bin/sh", b'2', 0o777, b"busybox"),
    ]);
    let run = format!(
        r#"{{"Entrypoint":["/bin/sh","-c","sleep 600; true","{marker}"],"Env":["PATH=/bin"]}}"#
    );
    let digest = reg.push_with(name, &[layer], None, &run);
    format!("oci:{}/{name}@{digest}", reg.host())
}

/// A call to a server that never answers is cancelled: the job ends
/// cancelled, and nothing of its run is left: no process (`running`
/// names what the run's processes carry on their command lines), no
/// mount of the image on the host, and the image unpacked once in the
/// node's cache.
fn cancel_leaves_nothing(edge: &Edge, n: &Node, image: &str, running: &str) {
    let id = edge
        .submit_kind(
            Origin::Internal,
            JobKind::Tool,
            call(image, "list_allowed_directories", serde_json::json!({})),
        )
        .unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while processes_with(running).is_empty() {
        assert!(
            std::time::Instant::now() < until,
            "the server never started: {}",
            n.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    edge.cancel(&id);
    let j = json(&edge.wait_job(&id, 60));
    assert_eq!(j["state"], "cancelled", "{j}");
    wait_gone(running, 30);
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains("/oci/images/"), "{mounts}");
    let images = n.dir.join("data/oci/images");
    let rootfs: Vec<_> = std::fs::read_dir(&images)
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("rootfs").exists())
        .collect();
    // The server's image, and this one: each unpacked once.
    assert!(rootfs.len() <= 2, "{rootfs:?}");
}

/// A node named `name` of `edge` pulling from `reg`, once it reported its
/// facts and its log `says` what it offers; and the edge's view of it.
fn oci_node(
    edge: &Edge,
    reg: &Registry,
    name: &str,
    says: &str,
) -> (Node, oz0_edge::wire::NodeView) {
    let mut n = Node::start(edge, name, &["--oci-registry", &reg.host()]);
    n.wait_log("facts reported", 120);
    assert!(n.log().contains(says), "{}", n.log());
    let view = edge.rt.block_on(edge.op.node(name)).unwrap();
    (n, view)
}

fn json(j: &oz0_edge::wire::JobView) -> serde_json::Value {
    serde_json::to_value(j).unwrap()
}

fn text(j: &serde_json::Value) -> String {
    j["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The edge binary, a registry on loopback with the server's image in it,
/// the test's folder and the image's reference; None (after `skip`) when
/// something is missing.
fn setup(tag: &str) -> Option<(PathBuf, Registry, TempDir, String)> {
    if !sandbox_ready() {
        return None;
    }
    let Some(edge_bin) = edge_bin() else {
        skip("the oz0-edge binary is not found: set OZ0_EDGE_BIN or `cargo build -p oz0-edge`");
        return None;
    };
    if !Path::new(SERVER_DIR).join("dist/index.js").exists() {
        skip("mcp-server-filesystem is not installed (npm install -g @modelcontextprotocol/server-filesystem)");
        return None;
    }
    let reg = Registry::start()?;
    let dir = TempDir::new(tag);
    let layer = match server_layer(&dir) {
        Ok(l) => l,
        Err(why) => {
            skip(&format!("cannot build the server's image: {why}"));
            return None;
        }
    };
    let digest = reg.push_with("acme/fs-mcp", &[layer], None, RUN);
    let image = format!("oci:{}/acme/fs-mcp@{digest}", reg.host());
    Some((edge_bin, reg, dir, image))
}

#[test]
fn a_container_tool_runs_its_image_s_mcp_server_in_tier_1_through_the_edge() {
    let Some((edge_bin, reg, dir, image)) = setup("oci-tools") else {
        return;
    };
    let edge = Edge::start(&edge_bin, 30);
    let submit = |p: serde_json::Value| edge.submit_kind(Origin::Internal, JobKind::Tool, p);

    // No node offers runtime.oci: refused at submit, with the fix.
    let refused = submit(call(
        &image,
        "list_allowed_directories",
        serde_json::json!({}),
    ))
    .unwrap_err();
    assert!(
        refused.contains("runtime.oci=ready") && refused.contains("--oci-registry"),
        "{refused}"
    );

    let host = reg.host();
    let (n, view) = oci_node(
        &edge,
        &reg,
        "oci",
        "container tools (runtime.oci): ready, in tier1",
    );
    // (Where runsc is installed, gVisor is offered too.)
    assert!(
        view.containers_line
            .starts_with("ready (runtime.oci), in tier1"),
        "{view:?}"
    );
    let labels = &view.facts.as_ref().unwrap().labels;
    assert_eq!(labels["runtime.oci"], "ready", "{view:?}");

    // The server's own answer: its one allowed folder is /work.
    let id = submit(call(
        &image,
        "list_allowed_directories",
        serde_json::json!({}),
    ))
    .unwrap();
    let j = json(&edge.wait_job(&id, 180));
    assert_eq!(j["state"], "succeeded", "{j}\n{}", n.log());
    assert_eq!(j["tier"], 1, "{j}");
    assert!(text(&j).contains("/work"), "{j}");

    // A file given with the call, read by the server at /work/.oz0-files/.
    let mut with_file = call(
        &image,
        "read_text_file",
        serde_json::json!({"path": "/work/.oz0-files/note.txt"}),
    );
    with_file["files"] = serde_json::json!([{
        "name": "note.txt",
        "base64": base64::engine::general_purpose::STANDARD.encode("a note for the image\n"),
    }]);
    let id = submit(with_file).unwrap();
    let j = json(&edge.wait_job(&id, 120));
    assert_eq!(j["state"], "succeeded", "{j}\n{}", n.log());
    assert_eq!(text(&j), "a note for the image\n", "{j}");

    // The host's files are not the image's, and the server may not leave
    // /work anyway: its own refusal comes back.
    let id = submit(call(
        &image,
        "read_text_file",
        serde_json::json!({"path": "/etc/passwd"}),
    ))
    .unwrap();
    let j = json(&edge.wait_job(&id, 120));
    assert_eq!(j["state"], "failed", "{j}");
    assert!(text(&j).contains("outside allowed directories"), "{j}");

    // plugin check: the image pulled (already in this node's cache: a
    // fresh data folder here), its server started and listing its tools.
    let plugin = dir.join("plugin");
    std::fs::create_dir(&plugin).unwrap();
    std::fs::write(plugin.join("oz0-plugin.yaml"), manifest(&image)).unwrap();
    let data = dir.join("check-data");
    let check = |extra: &[&str]| {
        Command::new(node())
            .args(["--no-config", "plugin", "check"])
            .arg(&plugin)
            .arg("--data-dir")
            .arg(&data)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = check(&["--oci-registry", &host]);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{said}{}", common::stderr(&out));
    assert!(
        said.contains("fs: container: offered (its server answered in tier 1")
            && said.contains("list_allowed_directories"),
        "{said}"
    );
    let out = check(&[]);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("is not among --oci-registry"), "{said}");

    // A cancelled call leaves nothing behind.
    let marker = format!("oz0-hang-{}", std::process::id());
    let hang = hanging_image(&reg, "acme/hang", &marker);
    cancel_leaves_nothing(&edge, &n, &hang, &marker);
}

/// A tenant that asks for gVisor (`oz0-edge --oci-gvisor acme`): its
/// container tools are refused while no node offers gVisor, and then run
/// there, behind gVisor's own kernel, with the same answers.
#[test]
fn a_tenant_that_asks_for_gvisor_gets_its_container_tools_run_there() {
    if !has_runsc() {
        skip("runsc (gVisor) is not installed (apt-get install runsc)");
        return;
    }
    let Some((edge_bin, reg, dir, image)) = setup("oci-gvisor") else {
        return;
    };
    let edge = Edge::start_with(&edge_bin, 30, &["--oci-gvisor", "acme"]);
    let submit = |p: serde_json::Value| edge.submit_kind(Origin::Internal, JobKind::Tool, p);
    let refused = submit(call(
        &image,
        "list_allowed_directories",
        serde_json::json!({}),
    ))
    .unwrap_err();
    assert!(
        refused.contains("runs only in gVisor") && refused.contains("runsc"),
        "{refused}"
    );

    let (n, view) = oci_node(
        &edge,
        &reg,
        "gv",
        "container tools (runtime.oci): ready, in tier1, gvisor",
    );
    assert_eq!(
        view.containers_line, "ready (runtime.oci), in tier1, gvisor",
        "{view:?}"
    );
    let id = submit(call(
        &image,
        "list_allowed_directories",
        serde_json::json!({}),
    ))
    .unwrap();
    let j = json(&edge.wait_job(&id, 180));
    assert_eq!(j["state"], "succeeded", "{j}\n{}", n.log());
    assert!(text(&j).contains("/work"), "{j}");
    // The node's record of the job says what ran it.
    let status: serde_json::Value = serde_json::from_str(&n.output(&id, "status.json")).unwrap();
    assert_eq!(
        status["phases"]["backend"], "gVisor (runsc) in the image's root",
        "{status}"
    );

    // A cancelled call leaves nothing behind: gVisor's processes carry
    // the node's state folder (`runsc --root …`) on their command lines.
    let hang = hanging_image(&reg, "acme/hang", "oz0-hang-gvisor");
    let state = n.dir.join("data/gvisor").display().to_string();
    cancel_leaves_nothing(&edge, &n, &hang, &state);
    // No bundle of its run is left (they live in the node's data folder).
    // The node removes it once runsc's last process ended, which is just
    // after what the cancel waited for: a few seconds at most.
    let bundles = || -> Vec<_> {
        std::fs::read_dir(n.dir.join("data/gvisor/runs"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect()
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !bundles().is_empty() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(bundles().is_empty(), "left: {:?}", bundles());

    // plugin call --oci-runtime gvisor: the same server from gVisor, on
    // this node alone.
    let plugin = dir.join("plugin");
    std::fs::create_dir(&plugin).unwrap();
    std::fs::write(plugin.join("oz0-plugin.yaml"), manifest(&image)).unwrap();
    let out = Command::new(node())
        .args(["--no-config", "plugin", "call"])
        .arg(&plugin)
        .args([
            "fs",
            "--name",
            "list_allowed_directories",
            "--json",
            "--data-dir",
        ])
        .arg(dir.join("call-data"))
        .args(["--oci-registry", &reg.host(), "--oci-runtime", "gvisor"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{said}{}", common::stderr(&out));
    let end: serde_json::Value = serde_json::from_str(&said).unwrap();
    assert_eq!(
        end["phases"]["backend"], "gVisor (runsc) in the image's root",
        "{end}"
    );
    assert!(end["result"].to_string().contains("/work"), "{end}");
}
