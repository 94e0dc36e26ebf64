//! Black-box tests of `orchestrator-zero-node.exe`, the Windows node (cargo
//! builds it as `oz0-node.exe`), run under Wine.
//!
//! Debian's Wine 8.0 is a Windows whose probes find no PSEC (its
//! `IsApiSetImplemented` knows no process security environment), so it is
//! a real machine of the seed's "Windows 11 whose probes find no PSEC" row
//! for the binary's own code: its registry, its loader, its sockets. What
//! only a Windows 11 machine with PSEC can show is listed in the README
//! (Platform support) and not claimed here.
//!
//! What they need is `common::wine`'s.

// The tests drive the .exe from a Linux host.
#![cfg(target_os = "linux")]

#[macro_use]
mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::wine::{lines, stop, win, wine, Wine};
use common::{skip, stderr, stdout, TempDir};

const NO_PSEC_REASON: &str =
    "(the API set api-win-appmodel-processmodel~securityenvironment is not implemented)";

#[test]
fn sandbox_check_says_tier_0_with_the_probes_reason_and_fix() {
    let Some(w) = wine() else { return };
    let o = w.run(&["sandbox", "check"], &[]);
    let out = lines(&stdout(&o));
    assert_eq!(o.status.code(), Some(1), "{out:?} {}", stderr(&o));
    // The first two lines, as the seed's table has them for a Windows whose
    // probes find no PSEC: tier 0, the build, no PSEC — and the reason is
    // the API set the probe asked about, never the build number.
    assert!(
        out[0].starts_with("Sandbox: tier 0: Windows build ")
            && out[0].ends_with(&format!(
                "has no PSEC, which Windows tier 1 runs in {NO_PSEC_REASON}"
            )),
        "{out:?}"
    );
    let build = out[0]
        .trim_start_matches("Sandbox: tier 0: Windows build ")
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    assert!(
        build.bytes().all(|b| b.is_ascii_digit() || b == b'.'),
        "{build}"
    );
    assert_eq!(
        out[1],
        format!("Windows {build}: no PSEC: the API set api-win-appmodel-processmodel~securityenvironment is not implemented")
    );
    assert!(
        out[2].starts_with("Fix: this build has no PSEC, which Windows tier 1 runs in:")
            && out[2].ends_with("meanwhile run tier-1 work on Linux or macOS nodes"),
        "{out:?}"
    );
    // No microVMs, and what smolvm would need here.
    assert_eq!(
        out.last().map(String::as_str),
        Some("MicroVMs: none: not yet on Windows: smolvm needs the Windows Hypervisor Platform, and Developer Mode or an administrator"),
        "{out:?}"
    );
    // --json: the same, for machines, with what each probe step answered.
    let o = w.run(&["sandbox", "check", "--json"], &[]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["tier"], 0);
    assert_eq!(v["tier_routed"], 0);
    assert_eq!(v["fix_kind"]["kind"], "no_psec", "{v}");
    assert_eq!(v["probe"]["api_set_implemented"], false, "{v}");
    assert_eq!(v["probe"]["edition"], "client", "{v}");
    assert_eq!(v["probe"]["create_close"]["result"], "not_run", "{v}");
    assert_eq!(v["headline"], out[0]);
    assert_eq!(v["microvm"]["ready"], false, "{v}");
    assert!(
        v["microvm"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("Windows Hypervisor Platform")),
        "{v}"
    );
}

#[test]
fn sandbox_check_psec_runs_no_self_test_without_psec() {
    let Some(w) = wine() else { return };
    let o = w.run(&["sandbox", "check", "--psec"], &[]);
    let out = lines(&stdout(&o));
    assert_eq!(o.status.code(), Some(1), "{out:?}");
    assert!(out[0].contains(NO_PSEC_REASON), "{out:?}");
    assert!(
        !out.iter().any(|l| l.starts_with("Self-test")),
        "no check runs without PSEC: {out:?}"
    );
    assert!(
        out.iter().any(|l| {
            l
            == "Sandbox: tier 0: the self-test of PSEC cannot run: the probes found no PSEC (above)"
        }),
        "{out:?}"
    );
    // The Linux spelling is refused with the Windows one named.
    let o = w.run(&["sandbox", "check", "--self-test"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("sandbox check --psec"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn sandbox_run_is_refused_without_the_preview_and_without_psec() {
    let Some(w) = wine() else { return };
    let dir = TempDir::new("winrun");
    let work = dir.join("work");
    std::fs::create_dir(&work).unwrap();
    let marker = work.join("ran");
    let args = [
        "sandbox",
        "run",
        "--work",
        &win(&work),
        "--",
        "C:\\windows\\system32\\cmd.exe",
        "/c",
        "echo x > ran",
    ];
    // Without the preview: refused as on any node without tier 1.
    let o = w.run(&args, &[]);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("sandbox refused: this node has no tier 1")
            && stderr(&o).contains("set OZ0_SANDBOX_PSEC_PREVIEW=1"),
        "{}",
        stderr(&o)
    );
    // With it: refused with the probes' reason, and nothing ran; with
    // --json-status the refusal is the status document too (written over
    // what was at FILE).
    let status = dir.join("status.json");
    std::fs::write(&status, "stale").unwrap();
    let status_flag = format!("--json-status={}", win(&status));
    let mut with_status = args.to_vec();
    with_status.insert(2, &status_flag);
    let o = w.run(&with_status, &[("OZ0_SANDBOX_PSEC_PREVIEW", "1")]);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&status).unwrap()).unwrap();
    assert_eq!(doc["outcome"], "sandbox_error", "{doc}");
    assert_eq!(doc["exit_code"], 125, "{doc}");
    assert!(
        doc["reason"]
            .as_str()
            .is_some_and(|r| r.contains("this machine has no PSEC")),
        "{doc}"
    );
    let names: Vec<_> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "only work and status.json: {names:?}");
    // A status whose folder is not there refuses the run, naming the flag.
    let gone = format!("--json-status={}", win(&dir.join("gone/status.json")));
    let mut with_gone = args.to_vec();
    with_gone.insert(2, &gone);
    let o = w.run(&with_gone, &[("OZ0_SANDBOX_PSEC_PREVIEW", "1")]);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("sandbox refused: --json-status "),
        "{}",
        stderr(&o)
    );
    // A bad --allow is refused as on Linux, in the same words, and said in
    // the status too: no earlier status stays.
    std::fs::write(&status, "stale").unwrap();
    let mut bad_allow = with_status.clone();
    bad_allow.insert(2, "--allow=bad host!");
    let o = w.run(&bad_allow, &[("OZ0_SANDBOX_PSEC_PREVIEW", "1")]);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "oz0-node: sandbox refused: --allow \"bad host!\": contains whitespace or a control character"
        ),
        "{}",
        stderr(&o)
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&status).unwrap()).unwrap();
    assert_eq!(doc["exit_code"], 125, "{doc}");
    assert!(
        doc["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("--allow \"bad host!\": ")),
        "{doc}"
    );
    // A folder named otherwise than Windows resolves it (here Wine's C:
    // spelt through Z:, as a link or another drive's letter would) is
    // refused, naming the real one, and nothing is written there.
    let aliased = w.prefix.join("drive_c");
    let alias = format!("--json-status={}", win(&aliased.join("status.json")));
    let mut with_alias = args.to_vec();
    with_alias.insert(2, &alias);
    let o = w.run(&with_alias, &[("OZ0_SANDBOX_PSEC_PREVIEW", "1")]);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("name the real folder, reached through no link")
            && stderr(&o).contains("C:\\"),
        "{}",
        stderr(&o)
    );
    assert!(!aliased.join("status.json").exists());
    let o = w.run(&args, &[("OZ0_SANDBOX_PSEC_PREVIEW", "1")]);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("this machine has no PSEC, which the preview runs in")
            && e.contains("is not implemented")
            && e.contains("nothing was started")
            && e.contains("Fix: this build has no PSEC"),
        "{e}"
    );
    // Bad input is refused before anything: a preview value, a route, the
    // host network, an allowlist entry.
    for (env, extra, want) in [
        (
            ("OZ0_SANDBOX_PSEC_PREVIEW", "yes"),
            None,
            "OZ0_SANDBOX_PSEC_PREVIEW must be 1",
        ),
        (
            ("OZ0_SANDBOX_PSEC_ROUTE", "tunnel"),
            None,
            "OZ0_SANDBOX_PSEC_ROUTE=\"tunnel\" is neither bridge nor relay",
        ),
        (
            ("OZ0_X", "1"),
            Some("--share-net"),
            "--share-net (the host network) is refused",
        ),
        (
            ("OZ0_X", "1"),
            Some("--allow=bad host!"),
            "sandbox refused: --allow \"bad host!\"",
        ),
    ] {
        let mut a: Vec<&str> = args.to_vec();
        if let Some(x) = extra {
            a.insert(2, x);
        }
        let mut envs = vec![env];
        if env.0 != "OZ0_SANDBOX_PSEC_PREVIEW" {
            envs.push(("OZ0_SANDBOX_PSEC_PREVIEW", "1"));
        }
        let o = w.run(&a, &envs);
        assert_eq!(
            o.status.code(),
            Some(125),
            "{env:?} {extra:?}: {:?}",
            o.status
        );
        assert!(
            stderr(&o).contains(want),
            "{env:?} {extra:?}: {}",
            stderr(&o)
        );
    }
    assert!(!marker.exists(), "a refused run never starts its command");
}

#[test]
fn run_sandbox_psec_reports_tier_0_with_the_reason_and_starts() {
    let Some(w) = wine() else { return };
    let dir = TempDir::new("winnode");
    let data = dir.join("data");
    let o = w.run(
        &[
            "run",
            "--sandbox",
            "psec",
            "--once",
            "--data-dir",
            &win(&data),
        ],
        &[],
    );
    let log = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{log}");
    assert!(log.contains(NO_PSEC_REASON), "{log}");
    assert!(log.contains("facts written to"), "{log}");
    // Whether PSEC is here, once per start.
    assert_eq!(log.matches("psec.available=").count(), 1, "{log}");
    assert!(log.contains(": psec.available=false\n"), "{log}");
    let facts: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("facts.json")).unwrap()).unwrap();
    assert_eq!(facts["platform"]["os"], "windows", "{facts}");
    assert_eq!(facts["tier_proven"], 0);
    assert_eq!(facts["tier_routed"], 0);
    assert_eq!(facts["mechanism"]["kind"], "none");
    assert_eq!(facts["self_test"]["status"], "not_run");
    assert_eq!(facts["fix"], "psec_missing", "{facts}");
    assert_eq!(facts["labels"]["sandbox.tier"], "0");
    // The key was made, and `facts` prints what `run` wrote.
    assert!(data.join("identity").join("node.key").exists());
    let o = w.run(&["facts", "--data-dir", &win(&data)], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let printed: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(printed, facts);
}

#[test]
fn a_data_directory_others_can_read_stops_the_node_with_the_fix() {
    let Some(w) = wine() else { return };
    let dir = TempDir::new("winacl");
    // Made by someone else, readable by everyone: Wine answers with an
    // access list granting Everyone read, which the node cannot replace
    // there (Wine keeps no list of its own for it), so it stops.
    let data = dir.join("open");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let o = w.run(&["run", "--once", "--data-dir", &win(&data)], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("the data directory") && e.contains("can still be read by Everyone"),
        "{e}"
    );
    assert!(
        e.contains(&format!("icacls \"{}\" /inheritance:r", win(&data))),
        "the fix names the command: {e}"
    );
    assert!(
        std::fs::read_dir(&data).unwrap().next().is_none(),
        "nothing is made in it: no key, no facts"
    );
    // An enrolment token others can read is refused before anything starts.
    let token = dir.join("enrol");
    std::fs::write(&token, "acme-token").unwrap();
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let data = dir.join("data");
    let o = w.run(
        &[
            "run",
            "--once",
            "--data-dir",
            &win(&data),
            "--edge",
            "http://127.0.0.1:9",
            "--tenant",
            "acme",
            "--enrolment-token-file",
            &win(&token),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--enrolment-token-file")
            && stderr(&o).contains("can be read by Everyone: let only this user read it"),
        "{}",
        stderr(&o)
    );
    assert!(!data.exists(), "nothing started");
}

#[test]
fn help_teaches_the_windows_verbs() {
    let Some(w) = wine() else { return };
    let o = w.run(&["--help"], &[]);
    assert_eq!(o.status.code(), Some(0));
    let h = stdout(&o);
    for want in ["sandbox", "run", "facts", "tier 0"] {
        assert!(h.contains(want), "{want}: {h}");
    }
    let o = w.run(&["sandbox", "run", "--help"], &[]);
    assert!(
        stdout(&o).contains("OZ0_SANDBOX_PSEC_PREVIEW=1"),
        "{}",
        stdout(&o)
    );
}

/// `sandbox proxy` under Wine, started and killed on drop.
struct WinProxy {
    child: std::process::Child,
    addr: String,
    token: String,
    audit: PathBuf,
    _dir: TempDir,
}

impl Drop for WinProxy {
    fn drop(&mut self) {
        stop(&mut self.child);
        let _ = self.child.wait();
    }
}

fn start_proxy(w: &Wine, forward: u16) -> WinProxy {
    use std::io::{BufRead, BufReader};
    let dir = TempDir::new("winproxy");
    let (token, audit) = (dir.join("token"), dir.join("audit.jsonl"));
    let mut child = w
        .cmd(
            &[
                "sandbox",
                "proxy",
                "--allow",
                "allowed.example.com",
                "--forward",
                &forward.to_string(),
                "--token-file",
                &win(&token),
                "--audit-log",
                &win(&audit),
                "--run-id",
                "winrun",
            ],
            &[],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .split_whitespace()
        .find(|w| w.starts_with("127.0.0.1:"))
        .unwrap_or_else(|| panic!("the proxy did not say where it listens: {line:?}"))
        .to_string();
    let token_text = std::fs::read_to_string(&token).unwrap();
    assert!(
        !line.contains(&token_text),
        "the token is never printed: {line}"
    );
    WinProxy {
        child,
        addr,
        token: token_text,
        audit,
        _dir: dir,
    }
}

/// Sends `head` to the proxy and returns its status line and the stream.
fn ask(addr: &str, head: &str) -> (String, std::net::TcpStream) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).unwrap() == 0 {
            break;
        }
        got.push(b[0]);
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    (text.lines().next().unwrap_or("").to_string(), s)
}

/// A loopback server that sends back what it gets; its port.
fn echo_server() -> u16 {
    use std::io::{Read, Write};
    let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = upstream.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in upstream.incoming() {
            let Ok(mut s) = s else { break };
            std::thread::spawn(move || {
                let mut b = [0u8; 64];
                while let Ok(n) = s.read(&mut b) {
                    if n == 0 || s.write_all(&b[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

fn basic(token: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(format!("oz0:{token}"))
}

#[test]
fn the_egress_proxy_under_wine_answers_a_linux_client_as_on_linux() {
    use std::io::{Read, Write};
    let Some(w) = wine() else { return };
    // The node-local service a run may reach on a forwarded port.
    let port = echo_server();
    let p = start_proxy(w, port);
    let auth = basic(&p.token);
    // No token: 407, whatever is asked.
    let (st, _) = ask(
        &p.addr,
        &format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"),
    );
    assert!(st.contains(" 407 "), "{st}");
    // A wrong token: 407.
    let (st, _) = ask(
        &p.addr,
        &format!(
            "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nProxy-Authorization: Basic {}\r\n\r\n",
            basic(&"0".repeat(64))
        ),
    );
    assert!(st.contains(" 407 "), "{st}");
    // A host the allowlist does not name: 403; a name under .invalid: 403
    // before any lookup.
    for host in ["other.example.com:443", "allowed.example.invalid:443"] {
        let (st, _) = ask(
            &p.addr,
            &format!("CONNECT {host} HTTP/1.1\r\nProxy-Authorization: Basic {auth}\r\n\r\n"),
        );
        assert!(st.contains(" 403 "), "{host}: {st}");
    }
    // The forwarded port: a tunnel whose bytes come back.
    let (st, mut s) = ask(
        &p.addr,
        &format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nProxy-Authorization: Basic {auth}\r\n\r\n"),
    );
    assert!(st.contains(" 200 "), "{st}");
    s.write_all(b"ping through wine").unwrap();
    let mut back = [0u8; 17];
    s.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"ping through wine");
    drop(s);
    // The same audit lines as on Linux: one per decision, never the token.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let audit = loop {
        let a = std::fs::read_to_string(&p.audit).unwrap_or_default();
        if a.lines().count() >= 5 || std::time::Instant::now() > until {
            break a;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(!audit.contains(&p.token), "the token is in the audit log");
    let recs: Vec<serde_json::Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let decisions: Vec<&str> = recs
        .iter()
        .map(|r| r["decision"].as_str().unwrap_or(""))
        .collect();
    assert!(recs.iter().all(|r| r["run"] == "winrun"), "{audit}");
    assert_eq!(
        decisions,
        ["auth", "auth", "deny", "deny", "allow"],
        "{audit}"
    );
    assert!(
        recs.iter().all(|r| r["status"] != 0),
        "every record has its status: {audit}"
    );
}

#[test]
fn a_windows_node_under_wine_registers_with_a_linux_edge_at_tier_0() {
    use common::fleet::{edge_bin, write_secret, Edge, TOKEN};
    let Some(w) = wine() else { return };
    let Some(bin) = edge_bin() else {
        skip("no oz0-edge binary: cargo build -p oz0-edge, or set OZ0_EDGE_BIN");
        return;
    };
    let edge = Edge::start_with(&bin, 6, &["--node-live-secs", "4"]);
    let dir = TempDir::new("winedge");
    let token = dir.join("enrol");
    write_secret(&token, TOKEN);
    let data = dir.join("data");
    let mut node = w
        .cmd(
            &[
                "run",
                "--sandbox",
                "psec",
                "--data-dir",
                &win(&data),
                "--edge",
                &edge.url,
                "--tenant",
                "acme",
                "--enrolment-token-file",
                &win(&token),
                "--edge-ca",
                &win(&edge.ca),
                "--name",
                "winbox",
                "--poll-ms",
                "500",
            ],
            &[("NODE_SECRET", "node-only")],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The node's log, read on a thread, until it says the edge took the facts.
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let err = node.stderr.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let mut log = Vec::new();
    // Generous: on a loaded machine Wine starts slowly.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(300);
    while !log.iter().any(|l: &String| l.contains("facts reported")) {
        assert!(
            std::time::Instant::now() < until,
            "no report in 300 s (the node: {:?}): {log:#?}",
            node.try_wait()
        );
        if let Ok(l) = rx.recv_timeout(std::time::Duration::from_millis(200)) {
            log.push(l);
        }
    }
    let reported = log.iter().find(|l| l.contains("facts reported")).unwrap();
    assert!(
        reported.contains("the edge routes this node at tier 0"),
        "{log:#?}"
    );
    // Its log lines carry their time, as the Linux node's do.
    let b = reported.as_bytes();
    assert!(
        b.len() > 25
            && b[4] == b'-'
            && b[10] == b'T'
            && b[23] == b'Z'
            && reported[24..].starts_with(" oz0-node: "),
        "a log line without its time: {reported:?}"
    );
    assert!(
        !log.iter().any(|l| l.contains(TOKEN)),
        "the enrolment token is never logged"
    );
    // `oz0 node show` says tier 0, Windows, and the edge's fix; the node
    // stays up (it tells the edge it is there) past the liveness window.
    std::thread::sleep(std::time::Duration::from_secs(5));
    let (st, out, e) = edge.oz0(&["node", "show", "winbox"]);
    assert_eq!(st, Some(0), "{e}");
    assert!(out.contains("State: up"), "{out}");
    assert!(out.contains("windows"), "{out}");
    assert!(out.contains("routed at 0"), "{out}");
    assert!(
        out.contains("no PSEC, which Windows tier 1 runs in"),
        "the edge's fix: {out}"
    );
    let v = edge.rt.block_on(edge.op.node("winbox")).unwrap();
    assert_eq!((v.tier_proven, v.tier_routed), (0, 0), "{v:?}");
    assert_eq!(
        v.dropped_last, 0,
        "every field of the report was kept: {v:?}"
    );
    // The Nodes page shows it too.
    let page = edge.rt.block_on(edge.op.nodes_page()).unwrap();
    assert!(page.contains("winbox"), "{page}");
    assert!(
        page.contains("no PSEC, which Windows tier 1 runs in"),
        "{page}"
    );

    // It takes tier-0 shell jobs: exactly the job's variables (the node's
    // own variable does not reach it), its output and status.
    use oz0_edge::routing::Origin;
    let logs = |id: &str| {
        let l = edge.rt.block_on(edge.op.job_logs("acme", id)).unwrap();
        (
            l.stdout_tail.unwrap_or_default(),
            l.stderr_tail.unwrap_or_default(),
        )
    };
    let cmd = "C:\\windows\\system32\\cmd.exe";
    let id = edge
        .submit(
            Origin::Internal,
            serde_json::json!({
                "command": [cmd, "/c", "echo hello %GREETING%-%NODE_SECRET%& echo told %OZ0_SANDBOX%& echo to-stderr 1>&2& exit 3"],
                "env": {"GREETING": "from-windows"},
            }),
        )
        .unwrap();
    let j = edge.wait_job(&id, 60);
    assert_eq!(
        (j.state.as_str(), j.exit_code),
        ("failed", Some(3)),
        "{j:?}"
    );
    let (out, err) = logs(&id);
    assert!(
        out.contains("hello from-windows-%NODE_SECRET%"),
        "the job's variable, and not the node's: {out:?}"
    );
    // It is told it has no wall.
    assert!(out.contains("told tier=0;wall=none"), "{out:?}");
    assert!(err.contains("to-stderr"), "{err:?}");
    // What tier 0 cannot enforce is refused, and the job never runs.
    let id = edge
        .submit(
            Origin::Internal,
            serde_json::json!({"command": [cmd, "/c", "echo ran"], "allow": ["example.com"]}),
        )
        .unwrap();
    let j = edge.wait_job(&id, 60);
    assert_eq!(j.state, "failed", "{j:?}");
    assert!(
        j.error
            .clone()
            .unwrap_or_default()
            .contains("tier 0 has no wall: it enforces neither job limits nor an egress allowlist, so a run that asks for them (egress) is refused on this Windows node"),
        "{j:?}"
    );
    assert!(!logs(&id).0.contains("ran"), "a refused job never runs");
    // A timeout ends the job and every process it started: cmd starts a
    // program in the background and waits on another; both end.
    let left = |pat: &str| {
        Command::new("pgrep")
            .args(["-f", pat])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let gone = |pats: &[&str], what: &str| {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while pats.iter().any(|p| !left(p).is_empty()) {
            assert!(std::time::Instant::now() < until, "{what}");
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    };
    let ping = "C:\\windows\\system32\\ping.exe";
    let id = edge
        .submit(
            Origin::Internal,
            serde_json::json!({
                "command": [cmd, "/c", format!("start /b {ping} -n 61 127.0.0.1 >nul & {ping} -n 62 127.0.0.1 >nul")],
                "timeout": 3,
            }),
        )
        .unwrap();
    let j = edge.wait_job(&id, 60);
    assert_eq!(j.exit_code, Some(124), "{j:?}");
    assert!(
        j.error.clone().unwrap_or_default().contains("timeout"),
        "{j:?}"
    );
    gone(
        &["ping.exe -n 61", "ping.exe -n 62"],
        "a process of the timed-out job outlived it",
    );
    // When the first process ends, so does what it left running.
    let id = edge
        .submit(
            Origin::Internal,
            serde_json::json!({
                "command": [cmd, "/c", format!("start /b {ping} -n 63 127.0.0.1 >nul & exit 0")],
            }),
        )
        .unwrap();
    let j = edge.wait_job(&id, 60);
    assert_eq!(
        (j.state.as_str(), j.exit_code),
        ("succeeded", Some(0)),
        "{j:?}"
    );
    gone(
        &["ping.exe -n 63"],
        "a process the job left running outlived it",
    );
    // The node is the one daemon of every platform: its output reaches
    // the edge while the job runs, as a Linux node's does.
    assert!(
        log.iter().any(|l| l.contains("up to 1 job(s) at once")),
        "{log:#?}"
    );
    let id = edge
        .submit(
            Origin::Internal,
            serde_json::json!({"command": [cmd, "/c", format!("echo early-output& {ping} -n 20 127.0.0.1 >nul")]}),
        )
        .unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let running = edge.job(&id).state == "leased";
        if running && logs(&id).0.contains("early-output") {
            break;
        }
        if std::time::Instant::now() >= until {
            log.extend(rx.try_iter());
            panic!(
                "the job's output never reached the edge while it ran: {:?} {log:#?}",
                edge.job(&id)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    edge.cancel(&id);
    // An operator's cancel stops the job and every process it started,
    // and the node logs it as a cancel.
    let id = edge
        .submit(
            Origin::Internal,
            serde_json::json!({"command": [cmd, "/c", format!("{ping} -n 64 127.0.0.1 >nul")]}),
        )
        .unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while left("ping.exe -n 64").is_empty() {
        assert!(std::time::Instant::now() < until, "the job never started");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    edge.cancel(&id);
    gone(
        &["ping.exe -n 64"],
        "a process of the cancelled job outlived it",
    );
    let said = format!("job {id} cancelled by an operator: stopped");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !log.iter().any(|l| l.contains(&said)) {
        assert!(
            std::time::Instant::now() < until,
            "no cancel in the node's log: {log:#?}"
        );
        if let Ok(l) = rx.recv_timeout(std::time::Duration::from_millis(200)) {
            log.push(l);
        }
    }
    stop(&mut node);
}

/// Under `--require-approval` a Windows node waiting for approval stays
/// up, says so once, and takes no job (not its secrets) until `oz0 node
/// approve`; then it runs the job.
#[test]
fn a_windows_node_waiting_for_approval_stays_up_and_takes_no_work() {
    use common::fleet::{edge_bin, write_secret, Edge, TOKEN};
    use oz0_edge::client::{NodeClient, NodeKey, Trust};
    use oz0_edge::routing::Origin;
    use std::time::{Duration, Instant};
    let Some(w) = wine() else { return };
    let Some(bin) = edge_bin() else {
        skip("no oz0-edge binary: cargo build -p oz0-edge, or set OZ0_EDGE_BIN");
        return;
    };
    let edge = Edge::start_with(&bin, 30, &["--require-approval", "acme"]);
    let dir = TempDir::new("winwait");
    let token = dir.join("enrol");
    write_secret(&token, TOKEN);
    let data = dir.join("data");
    let mut node = w
        .cmd(
            &[
                "run",
                "--data-dir",
                &win(&data),
                "--edge",
                &edge.url,
                "--tenant",
                "acme",
                "--enrolment-token-file",
                &win(&token),
                "--edge-ca",
                &win(&edge.ca),
                "--name",
                "winwait",
                "--poll-ms",
                "300",
            ],
            &[],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let err = node.stderr.take().unwrap();
    let into = log.clone();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            into.lock().unwrap().push(l);
        }
    });
    let said = |what: &str| {
        log.lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(what))
            .count()
    };
    let wait_for = |what: &str, node: &mut std::process::Child| {
        // Generous: on a loaded machine Wine starts slowly.
        let until = Instant::now() + Duration::from_secs(300);
        while said(what) == 0 {
            assert!(
                Instant::now() < until && matches!(node.try_wait(), Ok(None)),
                "the node did not say {what:?} (it: {:?}): {:#?}",
                node.try_wait(),
                log.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    wait_for("facts reported", &mut node);

    // An approved node that never polls (the node's own facts, another
    // key), so that a tier-0 job is taken.
    let facts: oz0_policy::facts::NodeFacts =
        serde_json::from_str(&std::fs::read_to_string(data.join("facts.json")).unwrap()).unwrap();
    let idle = NodeClient::with_trust(
        &edge.url,
        "acme",
        NodeKey::generate(),
        &Trust::CaFile(edge.ca.clone()),
    )
    .unwrap();
    edge.rt
        .block_on(idle.register(TOKEN, Some("idle")))
        .unwrap();
    edge.rt.block_on(idle.report_facts(&facts)).unwrap();
    let (st, _, e) = edge.oz0(&["node", "approve", "idle"]);
    assert_eq!(st, Some(0), "{e}");
    let cmd = "C:\\windows\\system32\\cmd.exe";
    let id = edge
        .submit(
            Origin::Internal,
            serde_json::json!({
                "command": [cmd, "/c", "echo secret=%JOB_SECRET%"],
                "env": {"JOB_SECRET": "winwait-0123"},
            }),
        )
        .unwrap();
    let submitted = edge.job(&id).submitted_ms;
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let v = edge.rt.block_on(edge.op.node("winwait")).unwrap();
        if v.last_seen_ms >= submitted + 1_500 {
            break;
        }
        assert!(
            Instant::now() < until && matches!(node.try_wait(), Ok(None)),
            "the waiting node stopped polling ({:?}): {:#?}",
            node.try_wait(),
            log.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let j = edge.job(&id);
    assert_eq!(
        (j.state.as_str(), j.attempts),
        ("queued", 0),
        "a node waiting for approval was handed the job: {j:?}"
    );
    assert_eq!(
        said("waits for an operator's approval"),
        1,
        "said once, not at every poll: {:#?}",
        log.lock().unwrap()
    );

    // Approved: it runs the job.
    let (st, _, e) = edge.oz0(&["node", "approve", "winwait"]);
    assert_eq!(st, Some(0), "{e}");
    let j = edge.wait_job(&id, 120);
    assert_eq!(j.state, "succeeded", "{j:?}: {:#?}", log.lock().unwrap());
    let out = edge
        .rt
        .block_on(edge.op.job_logs("acme", &id))
        .unwrap()
        .stdout_tail
        .unwrap_or_default();
    assert!(out.contains("secret=winwait-0123"), "{out:?}");
    assert_eq!(said("approved by an operator"), 1);
    stop(&mut node);
}

#[test]
fn the_relay_carries_a_run_to_its_proxy_and_refuses_a_33rd() {
    use std::io::{BufRead, BufReader, Read, Write};
    let Some(w) = wine() else { return };
    let port = echo_server();
    let p = start_proxy(w, port);
    // Every relay port taken (here by this test, as 32 running relays
    // would): the 33rd relay is refused with the reason, and listens on
    // nothing.
    let held: Vec<_> = (47330..=47361)
        .filter_map(|p| std::net::TcpListener::bind(("127.0.0.1", p)).ok())
        .collect();
    let o = w.run(&["sandbox", "relay", "--to", &p.addr], &[]);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("all 32 relay ports (127.0.0.1:47330-47361) are in use"),
        "{}",
        stderr(&o)
    );
    drop(held);
    // With ports free it takes the first and carries a client to the
    // proxy, which still wants the run's token.
    let mut relay = w
        .cmd(&["sandbox", "relay", "--to", &p.addr], &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(relay.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .split_whitespace()
        .find(|w| w.starts_with("127.0.0.1:"))
        .unwrap_or_else(|| panic!("the relay did not say its port: {line:?}"))
        .trim_end_matches(',')
        .to_string();
    let relay_port: u16 = addr["127.0.0.1:".len()..].parse().unwrap();
    assert!((47330..=47361).contains(&relay_port), "{addr}");
    let (st, _) = ask(
        &addr,
        &format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"),
    );
    assert!(
        st.contains(" 407 "),
        "through the relay, still the token: {st}"
    );
    let (st, mut s) = ask(
        &addr,
        &format!(
            "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nProxy-Authorization: Basic {}\r\n\r\n",
            basic(&p.token)
        ),
    );
    assert!(st.contains(" 200 "), "{st}");
    s.write_all(b"via the relay").unwrap();
    let mut back = [0u8; 13];
    s.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"via the relay");
    stop(&mut relay);
    // A target off loopback is refused.
    let o = w.run(&["sandbox", "relay", "--to", "192.0.2.1:8080"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("only to the node's egress proxy on loopback"));
}

#[test]
fn relay_remove_profile_says_what_this_windows_has() {
    let Some(w) = wine() else { return };
    // Wine's userenv.dll has no AppContainer profiles at all.
    let o = w.run(&["sandbox", "relay", "--remove-profile"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("This Windows has no AppContainer profiles (userenv.dll exports no DeleteAppContainerProfile), so there is no oz0.egress-relay profile to remove"),
        "{}",
        stdout(&o)
    );
}
