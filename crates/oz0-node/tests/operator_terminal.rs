//! What reaches an operator's terminal: text a job, a node or an edge
//! controls is escaped, and a reader that goes away ends the output, not
//! the command.
//!
//! - A job printing OSC 52 (clipboard), OSC 0 (window title), CSI cursor-up
//!   and erase-line, a C1 CSI, backspace, a lone CR and DEL: `oz0 job
//!   submit --wait`, `oz0 job logs` and (a tool job's result) `oz0 job
//!   show` show them as visible escapes; `--raw` gives them as written;
//!   `--json` escapes the C1 and DEL that JSON would leave as they are.
//! - `oz0 job logs | head -c 1` ends with status 0 and no panic.
//! - An edge that sends control characters in a node's name, labels,
//!   lines and reasons, a job's error or a refusal (a real edge drops or
//!   blanks them; this one is a stand-in on loopback): `oz0 node list`,
//!   `node show`, `job show` and the error on stderr show them escaped.
//! - The node's log shows what an edge says (its tenant, its tier line,
//!   its refusals) escaped.
//! - `oz0`, `oz0-node facts`, `config show`, `sandbox check`, `plugin
//!   check` and `oz0-edge --show-config` with a stdout whose reader has
//!   gone: the status they have with a reader, no panic.

// The Linux node's black-box tests (the Windows node's are windows.rs).
#![cfg(target_os = "linux")]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine;
use common::fleet::{edge_bin, oz0_bin, Edge, Node};
use common::{node, sandbox_ready, skip, TempDir};
use oz0_edge::routing::{JobKind, Origin};

/// What the job writes: OSC 52, OSC 0, CSI cursor-up and erase-line, a C1
/// CSI (U+009B) clearing the screen, a backspace, a lone CR and DEL.
const HOSTILE: &str = "osc52:\u{1b}]52;c;b3duZWQ=\u{7}|title:\u{1b}]0;owned\u{7}|up:\u{1b}[1A\u{1b}[2K|c1:\u{9b}2J|bs:x\u{8}|cr:abc\rdef|del:\u{7f}|end";
/// The same, as `oz0` shows it.
const SHOWN: &str = r"osc52:\x1b]52;c;b3duZWQ=\x07|title:\x1b]0;owned\x07|up:\x1b[1A\x1b[2K|c1:\u{9b}2J|bs:x\x08|cr:abc\x0ddef|del:\x7f|end";
/// `printf` of [`HOSTILE`] (octal escapes; `\302\233` is U+009B).
const PRINTF: &str = r"printf 'osc52:\033]52;c;b3duZWQ=\007|title:\033]0;owned\007|up:\033[1A\033[2K|c1:\302\2332J|bs:x\010|cr:abc\rdef|del:\177|end\n'";

const STUB: &str = include_str!("fixtures/mcp_stub.py");

/// The characters of `s` a terminal would act on (newline, tab and a CR
/// right before a newline aside).
fn controls(s: &str) -> Vec<char> {
    s.replace("\r\n", "\n")
        .chars()
        .filter(|c| c.is_control() && *c != '\n' && *c != '\t')
        .collect()
}

fn ready() -> Option<PathBuf> {
    if !sandbox_ready() {
        return None;
    }
    let Some(edge) = edge_bin() else {
        skip("the oz0-edge binary is not found: set OZ0_EDGE_BIN or `cargo build -p oz0-edge`");
        return None;
    };
    if oz0_bin().is_none() {
        skip("the oz0 binary is not found: set OZ0_CLI_BIN or `cargo build -p oz0-edge`");
        return None;
    }
    Some(edge)
}

/// Runs `program args` with its stdout a pipe whose reader has already
/// gone, as `| head` leaves it: the program's status and its stderr. The
/// reader closes its end, then opens the gate the writer waits at before
/// it starts the program, so every write meets a pipe with no reader.
fn reader_gone(program: &Path, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let dir = TempDir::new("pipe");
    let gate = dir.join("gate");
    let st = Command::new("mkfifo").arg(&gate).status().unwrap();
    assert!(st.success(), "mkfifo {}", gate.display());
    let script = r#"gate=$1; shift
{ read -r _ < "$gate"; exec "$@"; } | { exec 0<&-; echo go > "$gate"; }
exit "${PIPESTATUS[0]}""#;
    let o = Command::new("bash")
        .args(["-c", script, "bash"])
        .arg(&gate)
        .arg(program)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// No panic, no complaint about the pipe.
fn quiet(what: &str, st: Option<i32>, err: &str) {
    assert_eq!(st, Some(0), "{what}: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "{what}: {err}"
    );
}

#[test]
fn a_jobs_control_sequences_reach_the_operator_escaped_unless_raw() {
    let Some(bin) = ready() else { return };
    let edge = Edge::start(&bin, 30);
    let mut a = Node::start(&edge, "alpha", &[]);
    a.wait_log("facts reported", 120);
    let script = format!("{PRINTF}; {PRINTF} >&2");

    // submit --wait: how it ended, then its output, escaped.
    let (st, out, err) = edge.oz0(&[
        "job", "submit", "--tenant", "acme", "--wait", "60", "--", "sh", "-c", &script,
    ]);
    assert_eq!(st, Some(0), "{out}{err}\n{}", a.log());
    assert_eq!(controls(&out), [], "submit --wait: {out:?}");
    // Each stream under a line with its size.
    assert!(
        out.contains(&format!(
            "== stdout: {n} byte(s)\n{SHOWN}\n== stderr: {n} byte(s)\n{SHOWN}\n",
            n = HOSTILE.len() + 1
        )),
        "{out}"
    );
    let id = out.split_whitespace().nth(1).unwrap().to_string();

    // logs: escaped; --raw: as written; --json: JSON with every control escaped.
    let (st, out, _) = edge.oz0(&["job", "logs", "--tenant", "acme", &id]);
    assert_eq!(st, Some(0));
    assert_eq!(controls(&out), [], "logs: {out:?}");
    assert!(
        out.contains(&format!(
            "== stdout: {} byte(s)\n{SHOWN}\n",
            HOSTILE.len() + 1
        )),
        "{out}"
    );
    assert!(out.contains(&format!(
        "== stderr: {} byte(s)\n{SHOWN}\n",
        HOSTILE.len() + 1
    )));
    let (st, raw, _) = edge.oz0(&["job", "logs", "--tenant", "acme", "--raw", &id]);
    assert_eq!(st, Some(0));
    assert!(
        raw.contains(&format!("\n{HOSTILE}\n== stderr"))
            && raw.ends_with(&format!("\n{HOSTILE}\n")),
        "{raw:?}"
    );
    let (st, json, _) = edge.oz0(&["job", "logs", "--tenant", "acme", "--json", &id]);
    assert_eq!(st, Some(0));
    assert_eq!(controls(&json), [], "logs --json: {json:?}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["stdout_tail"], format!("{HOSTILE}\n"), "{json}");

    // show: a tool's result, escaped; --raw as it came.
    let manifest = "tools:\n  - id: stub\n    command: [python3, /work/.oz0-files/stub.py]\n";
    let stub = base64::engine::general_purpose::STANDARD.encode(STUB);
    let tool = edge
        .submit_kind(
            Origin::Internal,
            JobKind::Tool,
            serde_json::json!({
                "manifest": manifest, "tool": "stub", "name": "echo",
                "arguments": {"text": HOSTILE},
                "files": [{"name": "stub.py", "base64": stub}],
            }),
        )
        .unwrap();
    let j = edge.wait_job(&tool, 60);
    assert_eq!(j.state, "succeeded", "{j:?}\n{}", a.log());
    let (st, out, _) = edge.oz0(&["job", "show", "--tenant", "acme", &tool]);
    assert_eq!(st, Some(0));
    assert_eq!(controls(&out), [], "show: {out:?}");
    assert!(out.contains(&format!("Result:\n{SHOWN}")), "{out}");
    let (_, raw, _) = edge.oz0(&["job", "show", "--tenant", "acme", "--raw", &tool]);
    assert!(raw.contains(&format!("Result:\n{HOSTILE}")), "{raw:?}");
}

#[test]
fn job_logs_into_head_ends_quietly() {
    let Some(bin) = ready() else { return };
    let edge = Edge::start(&bin, 30);
    let mut a = Node::start(&edge, "alpha", &[]);
    a.wait_log("facts reported", 120);
    // A reader that goes away early: `| head -c 1` on 128 KiB of output
    // (more than a pipe holds, so the CLI's writes meet a closed pipe).
    let big = edge
        .submit(
            Origin::Internal,
            serde_json::json!({"command": ["sh", "-c", "head -c 200000 /dev/zero | tr '\\0' x; head -c 200000 /dev/zero | tr '\\0' y >&2"]}),
        )
        .unwrap();
    assert_eq!(edge.wait_job(&big, 60).state, "succeeded");
    for extra in [&[][..], &["--json"][..], &["--raw"][..]] {
        let o = Command::new("bash")
            .args([
                "-c",
                r#""$@" | head -c 1; echo " status ${PIPESTATUS[0]}""#,
                "bash",
            ])
            .arg(oz0_bin().unwrap())
            .args(["job", "logs", "--tenant", "acme"])
            .args(extra)
            .arg(&big)
            .env("OZ0_EDGE", &edge.url)
            .env("OZ0_EDGE_CA", &edge.ca)
            .env("OZ0_OPERATOR_TOKEN", common::fleet::OPERATOR)
            .env_remove("OZ0_OPERATOR_TOKEN_FILE")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            out.ends_with(" status 0\n"),
            "logs {extra:?} | head -c 1: {out:?} {err}"
        );
        assert!(
            !err.contains("panicked"),
            "logs {extra:?} | head -c 1: {err}"
        );
    }
}

/// A stand-in edge on loopback (plain HTTP): each request's method and
/// path → `answer`'s status and JSON body. Serves until the test ends.
fn fake_edge(answer: fn(&str, &str) -> (u16, serde_json::Value)) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let mut r = BufReader::new(conn);
            let mut head = String::new();
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                if line == "\r\n" {
                    break;
                }
                if head.is_empty() {
                    head = line;
                }
            }
            let mut body = vec![0u8; len];
            let _ = r.read_exact(&mut body);
            let mut parts = head.split_whitespace();
            let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let (status, v) = answer(method, path);
            let text = v.to_string();
            let _ = write!(
                r.get_mut(),
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                text.len()
            );
        }
    });
    url
}

/// A node as an edge that wants to drive the operator's terminal words it.
fn hostile_node() -> serde_json::Value {
    serde_json::json!({
        "id": "n0123456789abcdef01234567",
        "tenant": "acme",
        "name": "build\u{1b}]0;owned\u{7}",
        "tier_proven": 1,
        "tier_routed": 1,
        "tier_line": "tier 1\u{1b}[1A\u{1b}[2K",
        "platform_line": "linux\u{9b}2J",
        "mechanism_line": "bubblewrap\u{8}\u{8}",
        "fix": "fix\u{1b}]52;c;b3duZWQ=\u{7}",
        "microvm_line": "none\rhidden",
        "routed_note": "note\u{7f}",
        "state": "up",
        "up": true,
        "approved": true,
        "drained": false,
        "last_seen": "now\u{1b}[31m",
        "last_report_ms": null,
        "last_report": null,
        "last_seen_ms": 0,
        "dropped_last": 0,
        "dropped_total": 0,
        "facts": {
            "os": "linux", "tier_proven": 1, "tier_routed": 1, "tier_claimed_routed": 1,
            "mechanism": {"kind": "bubblewrap", "seccomp": true, "psec_features": []},
            "self_test": "passed", "microvm_ready": false, "oci_ready": false,
            "labels": {"team\u{1b}[8m": "hidden\u{9d}0;x\u{9c}"},
        },
    })
}

fn hostile_edge(method: &str, path: &str) -> (u16, serde_json::Value) {
    match (method, path) {
        ("GET", p) if p.starts_with("/v1/nodes?") => (
            200,
            serde_json::json!({"nodes": [hostile_node()], "next": null}),
        ),
        ("GET", p) if p.starts_with("/v1/nodes/") => (200, hostile_node()),
        ("GET", "/v1/tenants/acme/jobs/j1") => (
            200,
            serde_json::json!({
                "job_id": "j1", "kind": "shell\u{1b}[2J", "state": "failed", "tier": 1,
                "node_id": "n\u{1b}]0;owned\u{7}", "attempts": 1, "exit_code": 1,
                "error": "it failed\u{1b}]52;c;b3duZWQ=\u{7}",
            }),
        ),
        _ => (
            403,
            serde_json::json!({"error": "refused\u{1b}[2J", "reason": "no\u{1b}]0;owned\u{7}"}),
        ),
    }
}

fn cli(url: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let o = Command::new(oz0_bin().unwrap())
        .args(args)
        .env("OZ0_EDGE", url)
        .env("OZ0_OPERATOR_TOKEN", common::fleet::OPERATOR)
        .env_remove("OZ0_OPERATOR_TOKEN_FILE")
        .env_remove("OZ0_EDGE_CA")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn an_edges_words_reach_the_operator_escaped() {
    if oz0_bin().is_none() {
        skip("the oz0 binary is not found: set OZ0_CLI_BIN or `cargo build -p oz0-edge`");
        return;
    }
    let url = fake_edge(hostile_edge);

    let (st, out, err) = cli(&url, &["node", "list"]);
    assert_eq!(st, Some(0), "{err}");
    assert_eq!(controls(&out), [], "node list: {out:?}");
    assert!(
        out.contains(r"build\x1b]0;owned\x07") && out.contains(r"tier 1\x1b[1A\x1b[2K"),
        "{out}"
    );

    let (st, out, err) = cli(&url, &["node", "show", "build-01"]);
    assert_eq!(st, Some(0), "{err}");
    assert_eq!(controls(&out), [], "node show: {out:?}");
    for shown in [
        r"(build\x1b]0;owned\x07)",
        r"Platform: linux\u{9b}2J",
        r"Mechanism: bubblewrap\x08\x08",
        r"Fix: fix\x1b]52;c;b3duZWQ=\x07",
        r"MicroVMs: none\x0dhidden",
        r"Routing: note\x7f",
        r"Labels: team\x1b[8m=hidden\u{9d}0;x\u{9c}",
    ] {
        assert!(out.contains(shown), "{shown} in {out}");
    }
    let (_, json, _) = cli(&url, &["node", "show", "build-01", "--json"]);
    assert_eq!(controls(&json), [], "node show --json: {json:?}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["platform_line"], "linux\u{9b}2J");

    let (st, out, _) = cli(&url, &["job", "show", "--tenant", "acme", "j1"]);
    assert_eq!(st, Some(0));
    assert_eq!(controls(&out), [], "job show: {out:?}");
    assert!(
        out.contains(r"Error: it failed\x1b]52;c;b3duZWQ=\x07") && out.contains(r"(shell\x1b[2J"),
        "{out}"
    );

    // A refusal's words, on stderr.
    let (st, _, err) = cli(&url, &["job", "cancel", "--tenant", "acme", "j2"]);
    assert_eq!(st, Some(1));
    assert_eq!(controls(&err), [], "refusal: {err:?}");
    assert!(err.contains(r"no\x1b]0;owned\x07"), "{err}");
}

fn hostile_edge_for_nodes(method: &str, path: &str) -> (u16, serde_json::Value) {
    match (method, path) {
        ("POST", "/v1/nodes/register") => (
            200,
            serde_json::json!({"node_id": "n\u{1b}[2J", "tenant": "acme\u{1b}]0;owned\u{7}"}),
        ),
        ("POST", "/v1/node/facts") => (200, hostile_node()),
        (m, p) => refusing_edge(m, p),
    }
}

fn refusing_edge(_: &str, _: &str) -> (u16, serde_json::Value) {
    (
        403,
        serde_json::json!({"error": "refused", "reason": "no\u{1b}]52;c;b3duZWQ=\u{7}"}),
    )
}

/// `oz0-node run --once --sandbox none` against the edge at `url`: its
/// status and log.
fn node_once(url: &str, dir: &TempDir) -> (Option<i32>, String) {
    common::fleet::write_secret(&dir.join("token"), common::fleet::TOKEN);
    let o = Command::new(node())
        .args([
            "run",
            "--once",
            "--sandbox",
            "none",
            "--edge",
            url,
            "--tenant",
            "acme",
        ])
        .arg("--enrolment-token-file")
        .arg(dir.join("token"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--work-root")
        .arg(dir.join("work"))
        .args(["--name", "hostile"])
        .env("OZ0_MICROVM", "off")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn the_nodes_log_shows_an_edges_words_escaped() {
    // The node refuses to run as root.
    if !sandbox_ready() {
        return;
    }
    let dir = TempDir::new("refusing-edge");
    let (st, log) = node_once(&fake_edge(refusing_edge), &dir);
    assert_eq!(st, Some(1), "{log}");
    assert_eq!(controls(&log), [], "the node's log: {log:?}");
    assert!(log.contains(r"no\x1b]52;c;b3duZWQ=\x07"), "{log}");

    let dir = TempDir::new("hostile-edge");
    let (st, log) = node_once(&fake_edge(hostile_edge_for_nodes), &dir);
    assert_eq!(st, Some(0), "{log}");
    assert_eq!(controls(&log), [], "the node's log: {log:?}");
    assert!(
        log.contains(r"as node n\x1b[2J of tenant acme\x1b]0;owned\x07"),
        "{log}"
    );
    assert!(
        log.contains(r"routes this node at tier 1 (tier 1\x1b[1A\x1b[2K)"),
        "{log}"
    );
}

#[test]
fn lists_end_quietly_when_their_reader_goes_away() {
    // The node refuses to run as root.
    if !sandbox_ready() {
        return;
    }
    let Some(oz0) = oz0_bin() else {
        skip("the oz0 binary is not found: set OZ0_CLI_BIN or `cargo build -p oz0-edge`");
        return;
    };
    let url = fake_edge(hostile_edge);
    // A reader gone before the first byte: the command still succeeds.
    let env = [
        ("OZ0_EDGE", url.as_str()),
        ("OZ0_OPERATOR_TOKEN", common::fleet::OPERATOR),
    ];
    for args in [
        &["node", "list"][..],
        &["node", "show", "build-01", "--json"],
    ] {
        let (st, err) = reader_gone(&oz0, args, &env);
        quiet(&format!("oz0 {args:?}"), st, &err);
    }

    // The node's facts, written by a run without an edge.
    let dir = TempDir::new("facts");
    let o = Command::new(node())
        .args(["run", "--once", "--sandbox", "none", "--data-dir"])
        .arg(dir.join("data"))
        .env("OZ0_MICROVM", "off")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let data = dir.join("data").display().to_string();
    let (st, err) = reader_gone(
        &node(),
        &["facts", "--format", "kv", "--data-dir", &data],
        &[],
    );
    quiet("oz0-node facts --format kv", st, &err);
    let (st, err) = reader_gone(&node(), &["facts", "--data-dir", &data], &[]);
    quiet("oz0-node facts", st, &err);
    let (st, err) = reader_gone(&node(), &["config", "show", "--no-config"], &[]);
    quiet("oz0-node config show", st, &err);
    if let Some(e) = edge_bin() {
        let (st, err) = reader_gone(&e, &["--show-config", "--no-config"], &[]);
        quiet("oz0-edge --show-config", st, &err);
    }

    // A check and a plugin's tools: the status they have with a reader.
    let plugin = dir.join("plugin");
    std::fs::create_dir(&plugin).unwrap();
    std::fs::write(
        plugin.join("oz0-plugin.yaml"),
        "name: p\ntools:\n  - id: t\n    command: [/bin/true]\n",
    )
    .unwrap();
    let plugin = plugin.display().to_string();
    let off = [("OZ0_MICROVM", "off")];
    for args in [
        &["sandbox", "check", "--data-dir", &data][..],
        &["plugin", "check", &plugin, "--data-dir", &data],
    ] {
        let o = Command::new(node())
            .args(args)
            .envs(off)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!o.stdout.is_empty(), "{args:?} prints");
        let (st, err) = reader_gone(&node(), args, &off);
        assert_eq!(st, o.status.code(), "oz0-node {args:?}: {err}");
        assert!(!err.contains("panicked"), "oz0-node {args:?}: {err}");
    }
}
