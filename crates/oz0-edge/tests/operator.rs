//! The operator's side end to end: `oz0 node show` and `oz0 node list`
//! against a real edge, `openapi.json` against the router, and the Nodes
//! page screenshot in the docs.

mod common;

use std::collections::BTreeSet;

use common::{
    failing_facts, linux_facts, node, start_on, store_urls, windows_facts, ACME, OPERATOR,
};
use oz0_edge::api::Routes;
use oz0_edge::auth;
use oz0_edge::Store;
use oz0_policy::facts::{FixKind, Mechanism, SelfTest};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oz0_node_show_and_list() {
    let stores = store_urls().await;
    let url = stores.first();
    let e = start_on(Store::open(&url).await.unwrap(), 30_000).await;
    let vm = node(&e, "acme", ACME, "linux-kvm", &linux_facts(true, true)).await;
    let _w = node(&e, "acme", ACME, "win-psec", &windows_facts()).await;
    // The CLI blocks this worker; the edge runs on the other.
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_oz0"))
            .args(args)
            .env("OZ0_EDGE", &e.url)
            .env("OZ0_OPERATOR_TOKEN", OPERATOR)
            .env_remove("OZ0_OPERATOR_TOKEN_FILE")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (st, out, err) = run(&["node", "show", "linux-kvm"]);
    assert_eq!(st, Some(0), "{err}");
    assert!(out.contains("Tier: tier 2 proven, routed at 2"), "{out}");
    assert!(
        out.contains("Mechanism: bubblewrap 0.8.0, Landlock ABI 7, seccomp, cgroup v1"),
        "{out}"
    );
    assert!(out.contains("MicroVMs: ready"), "{out}");
    assert!(out.contains("Fix: none"), "{out}");
    let (st, out, _) = run(&["node", "show", vm.node_id(), "--json"]);
    assert_eq!(st, Some(0));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["tier_routed"], 2);
    assert_eq!(v["facts"]["labels"]["isolation.microvm"], "ready");
    let (st, out, _) = run(&["node", "list"]);
    assert_eq!(st, Some(0));
    // A header, then one line per node.
    assert_eq!(out.lines().count(), 3, "{out}");
    assert!(out.starts_with("NAME "), "{out}");
    assert!(out.contains("tier 1 (psec 1.0, routed as tier 0)"), "{out}");
    // No edge named (no flag, no OZ0_EDGE, no settings file): the token
    // goes nowhere, and the refusal names the fix.
    let home = std::env::temp_dir().join(format!("oz0-noedge-{}", std::process::id()));
    std::fs::create_dir_all(&home).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_oz0"))
        .args(["node", "list"])
        .env_remove("OZ0_EDGE")
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("OZ0_OPERATOR_TOKEN", OPERATOR)
        .env_remove("OZ0_OPERATOR_TOKEN_FILE")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("no edge named") && err.contains("--edge"),
        "{err}"
    );
    std::fs::remove_dir_all(&home).unwrap();
    let (st, _, err) = run(&["node", "show", "nope"]);
    assert_eq!(st, Some(1));
    assert!(err.contains("no node has that id or name"), "{err}");
}

/// `oz0 job tool` reads an installed plugin, the edge routes the job by
/// its manifest, `--wait` prints the tool's text once a node completed it,
/// `oz0 job show` and `oz0 job cancel` follow it; refusals name the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oz0_job_tool_show_and_cancel() {
    let stores = store_urls().await;
    let url = stores.first();
    let e = start_on(Store::open(&url).await.unwrap(), 30_000).await;
    let n = node(&e, "acme", ACME, "linux-ok", &linux_facts(false, false)).await;
    let dir = std::env::temp_dir().join(format!("oz0-jobcli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("oz0-plugin.yaml"),
        format!("name: acme\ntools:\n  - id: fs\n    command: [mcp-server-filesystem, /work]\n  - id: vm\n    package: oci:ghcr.io/acme/vm@sha256:{}\n    isolation: microvm\n    command: [/srv]\n", "0".repeat(64)),
    )
    .unwrap();
    std::fs::write(dir.join("input.csv"), "a,b\n").unwrap();
    let oz0 = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_oz0"))
            .args(args)
            .env("OZ0_EDGE", &e.url)
            .env("OZ0_OPERATOR_TOKEN", OPERATOR)
            .env_remove("OZ0_OPERATOR_TOKEN_FILE")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let plugin = dir.display().to_string();
    let file = dir.join("input.csv").display().to_string();
    let tool = [
        "job", "tool", "--tenant", "acme", "--plugin", &plugin, "--tool",
    ];
    // Submitted: a command tool goes to the tier-1 queue.
    let mut a: Vec<&str> = tool.to_vec();
    a.extend([
        "fs",
        "--name",
        "read_text_file",
        "--arguments",
        r#"{"path": "/work/.oz0-files/input.csv"}"#,
        "--file",
        &file,
        "--json",
    ]);
    let (st, out, err) = oz0(&a);
    assert_eq!(st, Some(0), "{err}");
    let acc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(acc["tier"], 1, "{acc}");
    let id = acc["job_id"].as_str().unwrap().to_string();
    let l = n.poll_job(1).await.unwrap().expect("the tool job");
    assert_eq!(l.job.job.payload()["files"][0]["name"], "input.csv");
    assert!(l.job.job.payload()["manifest"]
        .as_str()
        .unwrap()
        .contains("id: fs"));
    n.finish_job(
        &l,
        &oz0_edge::client::Completion {
            succeeded: true,
            exit_code: Some(0),
            result: Some(serde_json::json!({"content": [{"type": "text", "text": "a,b"}]})),
            error: None,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let (st, out, _) = oz0(&["job", "show", "--tenant", "acme", &id]);
    assert_eq!(st, Some(0));
    assert!(
        out.contains("(tool, tier 1): succeeded") && out.contains("Result:\na,b\n"),
        "{out}"
    );
    let (st, _, err) = oz0(&["job", "cancel", "--tenant", "acme", &id]);
    assert_eq!(st, Some(1));
    assert!(err.contains("already ended"), "{err}");
    // An id may begin with '-' (ids of earlier versions did, one in 64):
    // it is an id, never a flag.
    for verb in ["show", "logs", "cancel"] {
        let (st, _, err) = oz0(&["job", verb, "--tenant", "acme", "-AAAAAAAAAAAAAAAAAAAAA"]);
        assert_eq!(st, Some(1), "{verb}: {err}");
        assert!(err.contains("no such job"), "{verb}: {err}");
    }
    // --wait on a job nobody takes: it says so, and cancel stops it.
    let mut a: Vec<&str> = tool.to_vec();
    a.extend(["fs", "--wait", "1"]);
    let (st, out, err) = oz0(&a);
    // 124, as timeout(1) says it: the job did not end in time.
    assert_eq!(st, Some(124), "{out}");
    assert!(err.contains("did not end within 1 s"), "{err}");
    let queued = out.split_whitespace().nth(1).unwrap().to_string();
    let (st, out, _) = oz0(&["job", "cancel", "--tenant", "acme", &queued]);
    assert_eq!(st, Some(0));
    assert!(
        out.contains(": cancelled") && out.contains("cancelled by an operator"),
        "{out}"
    );
    assert!(n.poll_job(1).await.unwrap().is_none());
    // Refusals: no microVM node, a tool the manifest lacks, bad arguments.
    let mut a: Vec<&str> = tool.to_vec();
    a.push("vm");
    let (st, _, err) = oz0(&a);
    assert_eq!(st, Some(1));
    assert!(
        err.contains("runs only in a microVM") && err.contains("isolation.microvm=ready"),
        "{err}"
    );
    let mut a: Vec<&str> = tool.to_vec();
    a.push("nope");
    let (_, _, err) = oz0(&a);
    assert!(
        err.contains("has no tool \"nope\" (it has: fs, vm)"),
        "{err}"
    );
    let mut a: Vec<&str> = tool.to_vec();
    a.extend(["fs", "--arguments", "[1]"]);
    let (st, _, err) = oz0(&a);
    assert_eq!(st, Some(1));
    assert!(err.contains("give a JSON object"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn openapi_describes_exactly_the_routes() {
    let doc: serde_json::Value = serde_json::from_str(include_str!("../openapi.json")).unwrap();
    let mut described = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if ["get", "post", "put", "delete", "patch"].contains(&method.as_str()) {
                described.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    let routed: BTreeSet<(String, String)> = Routes::build()
        .specs()
        .iter()
        .map(|r| (r.method.to_string(), r.path.to_string()))
        .collect();
    assert_eq!(described, routed, "openapi.json and the router disagree");
}

/// An edge with a node in each state the page shows: up, down (not heard
/// from for an hour), draining, pending approval (tenant `solo` asks for
/// it), a Windows node routed at tier 0, and one whose report was hostile.
async fn fleet_of_states() -> common::TestEdge {
    let stores = store_urls().await;
    let url = stores.first();
    let e = common::start_configured(
        Store::open(&url).await.unwrap(),
        |c| {
            c.approval_tenants.insert("solo".into());
        },
        None,
        oz0_edge::serve::Limits::default(),
        oz0_edge::client::Trust::System,
    )
    .await;
    node(&e, "acme", ACME, "build-01", &linux_facts(true, true)).await;
    node(&e, "acme", ACME, "build-02", &linux_facts(false, true)).await;
    node(&e, "acme", ACME, "ci-files", &failing_facts()).await;
    node(&e, "acme", ACME, "win-psec", &windows_facts()).await;
    let mut nopsec = windows_facts();
    nopsec.platform.build_raw = "26100.4061".into();
    nopsec.tier_proven = 0;
    nopsec.self_test = SelfTest::NotRun;
    nopsec.mechanism = Mechanism {
        kind: "none".into(),
        ..Default::default()
    };
    nopsec.fix = Some(FixKind::PsecMissing);
    node(&e, "acme", ACME, "win-old", &nopsec).await;
    let mut hostile = windows_facts();
    hostile.platform.build_raw = "26200.9457; rm -rf /".into();
    hostile.node_version = "<script>alert(1)</script>".into();
    hostile.fix = Some(FixKind::PsecStartWithFlag);
    hostile.tier_proven = 0;
    hostile.self_test = SelfTest::NotRun;
    node(&e, "acme", ACME, "hostile", &hostile).await;
    node(
        &e,
        "solo",
        common::SOLO,
        "new-node",
        &linux_facts(false, true),
    )
    .await;
    e.op.node_action("build-02", "drain").await.unwrap();
    let hour_ago = oz0_edge::time::now_ms() - 3_600_000;
    e.edge
        .store()
        .exec(
            "UPDATE nodes SET last_seen_ms = $1 WHERE name = 'ci-files'",
            vec![hour_ago.into()],
        )
        .await
        .unwrap();
    e
}

/// The Nodes page shows each node's state and when it was last seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nodes_page_shows_liveness_draining_and_approval() {
    let e = fleet_of_states().await;
    let html = e.op.nodes_page().await.unwrap();
    for want in [
        "<td class=\"s-up\">up<br><small>last seen",
        "<td class=\"s-down\">down<br>",
        "<td class=\"s-wait\">draining<br>",
        "<td class=\"s-wait\">pending approval<br>",
        "waits for an operator&#39;s approval (oz0 node approve",
        "7 node(s), 4 up",
        "tier 1 proven; takes no work until an operator approves it",
    ] {
        assert!(html.contains(want), "no {want:?} in the page:\n{html}");
    }
    assert!(!html.contains("<script>"));
}

/// A browser's Basic password opens the Nodes page and nothing else: a
/// page of another site can make a browser send a cached Basic password
/// with a form's POST (approving its own pending node, say), never a
/// Bearer header. Only the page's refusal asks a browser for a password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_password_opens_the_nodes_page_and_nothing_else() {
    use base64::Engine as _;
    let e = fleet_of_states().await;
    let pending =
        e.op.nodes(Some("solo"))
            .await
            .unwrap()
            .into_iter()
            .find(|n| n.name.as_deref() == Some("new-node"))
            .unwrap();
    let addr: std::net::SocketAddr = e.url.trim_start_matches("http://").parse().unwrap();
    let basic = format!(
        "Authorization: Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("operator:{OPERATOR}"))
    );
    let bearer = format!("Authorization: Bearer {OPERATOR}");
    let ask = move |line: String, auth: String| {
        tokio::task::spawn_blocking(move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            common::net::ask(
                &mut s,
                &format!("{line} HTTP/1.1\r\nhost: x\r\n{auth}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"),
                std::time::Duration::from_secs(20),
            )
        })
    };
    let approve = format!("POST /v1/nodes/{}/approve", pending.id);
    let cancel = "POST /v1/tenants/acme/jobs/AAAAAAAAAAAAAAAAAAAAAA/cancel".to_string();
    for line in [approve.clone(), cancel, "GET /v1/nodes".into()] {
        let r = ask(line.clone(), basic.clone()).await.unwrap();
        assert!(
            r.starts_with("HTTP/1.1 401"),
            "{line} with a Basic password: {r}"
        );
        assert!(
            r.to_ascii_lowercase().contains("www-authenticate: bearer"),
            "{line}: {r}"
        );
        assert!(
            !r.to_ascii_lowercase().contains("basic"),
            "{line} asks a browser: {r}"
        );
    }
    let still = e.op.nodes(Some("solo")).await.unwrap();
    assert!(
        still
            .iter()
            .any(|n| n.name.as_deref() == Some("new-node") && !n.approved),
        "a Basic password approved a node"
    );
    let page = ask("GET /nodes".into(), basic.clone()).await.unwrap();
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    let page = ask("GET /nodes".into(), String::new()).await.unwrap();
    assert!(page.starts_with("HTTP/1.1 401"), "{page}");
    assert!(
        page.to_ascii_lowercase()
            .contains("www-authenticate: basic"),
        "the page asks a browser for the token: {page}"
    );
    // The same operator token as Bearer does what the password cannot.
    let r = ask(approve, bearer).await.unwrap();
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
}

/// Writes `docs/nodes-page.png` with Debian's chromium:
/// `cargo test -p oz0-edge --test operator -- --ignored nodes_page_screenshot`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium; run by hand to refresh docs/nodes-page.png"]
async fn nodes_page_screenshot() {
    let e = fleet_of_states().await;
    let out = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/nodes-page.png");
    let profile = std::env::temp_dir().join(format!("oz0-chromium-{}", auth::random_id()));
    let page = format!(
        "{}/nodes",
        e.url.replace("http://", &format!("http://oz0:{OPERATOR}@"))
    );
    let status = std::process::Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1400,1120",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={out}"))
        .arg(page)
        .status()
        .unwrap();
    assert!(status.success());
    let _ = std::fs::remove_dir_all(profile);
}

/// `oz0 man --dir` writes its pages without following a link at a page's
/// name (a shared folder such as /tmp/man may hold one).
#[test]
#[cfg(unix)]
fn man_pages_never_follow_a_link() {
    let dir = std::env::temp_dir().join(format!("oz0-man-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("pages")).unwrap();
    std::fs::write(dir.join("victim"), "the user's file").unwrap();
    std::os::unix::fs::symlink(dir.join("victim"), dir.join("pages/oz0.1")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_oz0"))
        .args(["man", "--dir"])
        .arg(dir.join("pages"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not followed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("victim")).unwrap(),
        "the user's file"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
