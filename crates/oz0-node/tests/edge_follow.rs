//! Following work through the real binaries over HTTPS: a real `oz0-edge`
//! (a CA the test makes), the real `oz0` CLI, nodes that are the client
//! library a node daemon links (sending output as a job runs) and the
//! real `oz0-node run` as it is:
//!
//! - `oz0 job logs` shows a running job's output, `-f` follows it to the
//!   job's end and exits with the job's own status; `--wait` labels the
//!   streams, says what was cut and passes the job's status on; a real
//!   node sends a job's output while it runs, and it stays after a cancel;
//! - a cancel stops a job running on a real node at once, not at its next
//!   renewal; a real node killed with SIGKILL has its job run elsewhere
//!   long before its lease would lapse;
//! - tables with a header and `-o json|wide`, the default tenant (the
//!   edge's only one, `OZ0_TENANT`, or the settings file), `node drain
//!   --deadline`, `job rerun`, shell completion and man pages, and a
//!   reader that goes away.

#![cfg(target_os = "linux")]

mod common;

use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::fleet::{edge_bin, oz0_bin, processes_with, Edge, Node, TOKEN};
use common::{marker, sandbox_ready, skip, TempDir};
use oz0_edge::client::{NodeClient, NodeKey, Trust};
use oz0_edge::routing::Origin;
use oz0_policy::facts::{Mechanism, Microvm, NodeFacts, Os, Platform, SelfTest, FACTS_SCHEMA};

fn binaries() -> Option<std::path::PathBuf> {
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

fn facts() -> NodeFacts {
    let mut f = NodeFacts {
        schema: FACTS_SCHEMA,
        node_version: "0.1.0".into(),
        platform: Platform {
            os: Os::Linux,
            arch: "x86_64".into(),
            build_raw: "6.1.0-28-amd64".into(),
        },
        tier_proven: 1,
        tier_routed: 1,
        mechanism: Mechanism {
            kind: "bubblewrap".into(),
            bwrap_version: Some("0.8.0".into()),
            landlock_abi: Some(7),
            seccomp: true,
            cgroup_mode: Some("cgroup_v2".into()),
            ..Default::default()
        },
        self_test: SelfTest::Passed,
        fix: None,
        microvm: Microvm {
            ready: false,
            reason: None,
            pinned: None,
            backend: None,
        },
        oci: Default::default(),
        labels: BTreeMap::new(),
    };
    f.derive_labels();
    f
}

/// A node that is the client library, registered and reporting.
fn library_node(edge: &Edge, name: &str) -> NodeClient {
    let c = NodeClient::with_trust(
        &edge.url,
        "acme",
        NodeKey::generate(),
        &Trust::CaFile(edge.ca.clone()),
    )
    .unwrap();
    edge.rt.block_on(async {
        c.register(TOKEN, Some(name)).await.unwrap();
        c.report_facts(&facts()).await.unwrap();
    });
    c
}

fn shell(edge: &Edge, command: &[&str]) -> String {
    edge.submit(Origin::Webhook, serde_json::json!({ "command": command }))
        .unwrap()
}

/// `oz0 ARGS` with the edge's environment and `env`, its stdout read as
/// it comes; returns the child.
fn spawn_oz0(edge: &Edge, args: &[&str], env: &[(&str, &str)]) -> std::process::Child {
    Command::new(oz0_bin().unwrap())
        .args(args)
        .env("OZ0_EDGE", &edge.url)
        .env("OZ0_EDGE_CA", &edge.ca)
        .env("OZ0_OPERATOR_TOKEN", common::fleet::OPERATOR)
        .env_remove("OZ0_OPERATOR_TOKEN_FILE")
        .env_remove("OZ0_TENANT")
        .env_remove("OZ0_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finish(mut c: std::process::Child) -> (Option<i32>, String, String) {
    let (mut out, mut err) = (String::new(), String::new());
    c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    (c.wait().unwrap().code(), out, err)
}

#[test]
fn a_running_jobs_output_is_followed_to_its_end_and_its_status_passed_on() {
    let Some(bin) = binaries() else { return };
    let edge = Edge::start(&bin, 30);
    let n = library_node(&edge, "lib-01");
    let id = shell(&edge, &["make", "test"]);
    let lease = edge
        .rt
        .block_on(n.poll_job(1))
        .unwrap()
        .expect("the node takes the job");
    edge.rt
        .block_on(n.append_output(&lease, "stdout", 0, "compiling\n"))
        .unwrap();

    // While it runs, `oz0 job logs` shows what came so far (it showed
    // "0 byte(s)" until the job ended).
    let (st, out, err) = edge.oz0(&["job", "logs", "--tenant", "acme", &id]);
    assert_eq!(st, Some(0), "{err}");
    assert!(
        out.contains("== stdout: 10 byte(s)") && out.contains("compiling"),
        "{out}"
    );

    // -f prints what comes, as it comes, and ends with the job.
    let mut follow = spawn_oz0(&edge, &["job", "logs", "-f", &id], &[]);
    let mut first = [0u8; 10];
    follow
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    assert_eq!(&first, b"compiling\n");
    edge.rt
        .block_on(n.append_output(&lease, "stdout", 10, "test 1 ok\n"))
        .unwrap();
    edge.rt
        .block_on(n.append_output(&lease, "stderr", 0, "test 2 \x1b[31mFAILED\n"))
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        follow.try_wait().unwrap().is_none(),
        "-f goes on while the job runs"
    );
    edge.rt
        .block_on(n.complete_job(&lease, false, Some(3)))
        .unwrap();
    let (st, out, err) = finish(follow);
    assert_eq!(st, Some(3), "the job's own exit status: {out} {err}");
    assert_eq!(out, "test 1 ok\n");
    assert!(
        err.contains(r"test 2 \x1b[31mFAILED"),
        "stderr, escaped: {err}"
    );
    assert!(err.contains("exit status 3"), "{err}");

    // --wait: labelled streams, what was cut, the job's status.
    let id = shell(&edge, &["./build"]);
    let mut waiting = spawn_oz0(
        &edge,
        &["job", "rerun", "--tenant", "acme", "--wait", "60", &id],
        &[],
    );
    let mut seen = None;
    for _ in 0..2 {
        let l = loop {
            if let Some(l) = edge.rt.block_on(n.poll_job(1)).unwrap() {
                break l;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        if seen.is_none() {
            // The first job, the original: ends at once.
            edge.rt.block_on(n.complete_job(&l, true, Some(0))).unwrap();
            seen = Some(l.job.job_id.clone());
            continue;
        }
        let big = "y".repeat(35 * 1024);
        for at in [0, 35 * 1024] {
            edge.rt
                .block_on(n.append_output(&l, "stdout", at, &big))
                .unwrap();
        }
        edge.rt
            .block_on(n.append_output(&l, "stderr", 0, "no space left\n"))
            .unwrap();
        edge.rt
            .block_on(n.complete_job(&l, false, Some(7)))
            .unwrap();
    }
    let _ = &mut waiting;
    let (st, out, err) = finish(waiting);
    assert_eq!(st, Some(7), "{out} {err}");
    assert!(
        out.contains("== stdout: 71680 byte(s), the last 65536 kept"),
        "{out}"
    );
    assert!(
        out.contains("== stderr: 14 byte(s)\nno space left"),
        "{out}"
    );
}

#[test]
fn tables_tenants_drains_reruns_completion_and_man_pages() {
    let Some(bin) = binaries() else { return };
    let edge = Edge::start(&bin, 30);
    let n = library_node(&edge, "lib-02");
    let id = shell(&edge, &["sleep", "100"]);

    // The edge's only tenant is the default; tables have a header.
    let (st, out, err) = edge.oz0(&["job", "list"]);
    assert_eq!(st, Some(0), "{err}");
    assert!(out.starts_with("JOB "), "{out}");
    assert!(out.contains(&id) && out.contains("0/3"), "{out}");
    let (st, out, _) = edge.oz0(&["node", "list"]);
    assert_eq!(st, Some(0));
    let header = out.lines().next().unwrap();
    assert!(
        header.starts_with("NAME") && header.contains("STATE"),
        "{out}"
    );
    assert!(!header.contains("PLATFORM"));
    let (_, out, _) = edge.oz0(&["node", "list", "-o", "wide"]);
    assert!(out.lines().next().unwrap().contains("PLATFORM"), "{out}");
    let (_, out, _) = edge.oz0(&["node", "list", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["name"], "lib-02");
    // A tenant the edge does not serve is refused; OZ0_TENANT and the
    // settings file name one.
    let (st, _, err) = finish(spawn_oz0(
        &edge,
        &["job", "list"],
        &[("OZ0_TENANT", "other")],
    ));
    assert_eq!(st, Some(1), "{err}");
    let dir = TempDir::new("oz0-settings");
    let settings = dir.join("config.toml");
    std::fs::write(
        &settings,
        format!("tenant = \"acme\"\nedge = \"{}\"\n", edge.url),
    )
    .unwrap();
    let (st, out, err) = finish(spawn_oz0(
        &edge,
        &["job", "show", &id],
        &[("OZ0_CONFIG", settings.to_str().unwrap())],
    ));
    assert_eq!(st, Some(0), "{err}");
    assert!(out.contains("Command: sleep 100"), "{out}");
    std::fs::write(&settings, "tennant = \"acme\"\n").unwrap();
    let (st, _, err) = finish(spawn_oz0(
        &edge,
        &["job", "list"],
        &[("OZ0_CONFIG", settings.to_str().unwrap())],
    ));
    assert_eq!(st, Some(2), "a wrong key is bad usage: {err}");
    assert!(err.contains("tennant") && err.contains("tenant"), "{err}");

    // A drain with a deadline moves the job; the node learns it at once.
    let mut lease = edge.rt.block_on(n.poll_job(1)).unwrap().unwrap();
    let (st, out, err) = edge.oz0(&["node", "drain", "lib-02", "--deadline", "0s"]);
    assert_eq!(st, Some(0), "{err}");
    assert!(out.contains("State: draining"), "{out}");
    let r = edge
        .rt
        .block_on(n.renew_held(&mut lease, Duration::from_secs(9)));
    assert!(
        matches!(r, Err(oz0_edge::client::ClientError::LeaseLost { .. })),
        "{r:?}"
    );
    let j = edge.job(&id);
    assert_eq!((j.state.as_str(), j.attempts), ("queued", 0));
    let (st, _, err) = edge.oz0(&["node", "drain", "lib-02", "--deadline", "5d"]);
    assert_eq!(st, Some(2), "{err}");
    assert!(err.contains("10m"), "{err}");

    // A job run again is a new job.
    let (st, _, err) = edge.oz0(&["node", "undrain", "lib-02"]);
    assert_eq!(st, Some(0), "{err}");
    let (st, out, err) = edge.oz0(&["job", "rerun", &id]);
    assert_eq!(st, Some(0), "{err}");
    assert!(
        out.contains("queued") && !out.contains(&format!("job {id}")),
        "{out}"
    );

    // Completion and man pages, from the clap definitions.
    let (st, out, _) = edge.oz0(&["completion", "bash"]);
    assert_eq!(st, Some(0));
    assert!(out.contains("oz0") && out.contains("rerun"), "{out}");
    let (st, _, err) = edge.oz0(&["man", "--dir", dir.join("man").to_str().unwrap()]);
    assert_eq!(st, Some(0), "{err}");
    let page = std::fs::read_to_string(dir.join("man/oz0-job-logs.1")).unwrap();
    assert!(page.contains("follow"), "{page}");
    assert!(dir.join("man/oz0.1").exists() && dir.join("man/oz0-node-drain.1").exists());

    // A reader that goes away: no panic, the command's own status.
    for args in [
        &["completion", "bash"][..],
        &["job", "list"][..],
        &["--help"][..],
    ] {
        let mut c = spawn_oz0(&edge, args, &[]);
        drop(c.stdout.take());
        let mut err = String::new();
        c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        let st = c.wait().unwrap();
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(st.code(), Some(0), "{args:?}: {err}");
    }
}

#[test]
fn a_cancel_stops_a_real_nodes_job_at_once_and_a_killed_nodes_job_runs_elsewhere() {
    if !sandbox_ready() {
        return;
    }
    let Some(bin) = binaries() else { return };
    // Leases of 60 s: a node renews every 20 s, and a lease lapses after 60.
    let edge = Edge::start(&bin, 60);
    let mut a = Node::start(&edge, "follow-a", &[]);
    a.wait_log("facts reported", 120);
    let m = marker("cancel");
    let id = edge
        .submit(
            Origin::Webhook,
            serde_json::json!({"command": ["sh", "-c", "sleep 300; :", &m]}),
        )
        .unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while processes_with(&m).is_empty() {
        assert!(
            Instant::now() < until,
            "the job did not start:\n{}",
            a.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The node holds a renewal: the cancel answers it, and the job stops
    // within seconds, not at the next renewal (20 s).
    std::thread::sleep(Duration::from_millis(500));
    let (st, _, err) = edge.oz0(&["job", "cancel", &id]);
    assert_eq!(st, Some(0), "{err}");
    let until = Instant::now() + Duration::from_secs(10);
    while !processes_with(&m).is_empty() {
        assert!(
            Instant::now() < until,
            "the cancelled job still runs:\n{}",
            a.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // A node killed with SIGKILL: its job runs on another node within
    // seconds, not after the 60 s lease.
    let m = marker("killed");
    let id = edge
        .submit(
            Origin::Webhook,
            serde_json::json!({"command": ["sh", "-c", "sleep 300; :", &m]}),
        )
        .unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while edge.job(&id).state != "leased" {
        assert!(
            Instant::now() < until,
            "the job was not taken:\n{}",
            a.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(800));
    a.signal("KILL");
    a.wait_exit(10);
    let b = library_node(&edge, "lib-03");
    let until = Instant::now() + Duration::from_secs(20);
    let lease = loop {
        if let Some(l) = edge.rt.block_on(b.poll_job(1)).unwrap() {
            break l;
        }
        assert!(
            Instant::now() < until,
            "the killed node's job was not handed out again: {:?}",
            edge.job(&id)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        (lease.job.job_id.as_str(), lease.job.attempt),
        (id.as_str(), 2)
    );
    let (_, out, _) = edge.oz0(&["node", "show", "follow-a"]);
    assert!(out.contains("State: down"), "{out}");
    // The sandboxed sleep died with its node.
    for p in processes_with(&m) {
        let _ = Command::new("kill")
            .args(["-9", p.split(':').next().unwrap()])
            .status();
    }
}

/// Reads a child's stream on a thread: what comes, piece by piece, and
/// the whole when it ends.
fn pieces(r: impl Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut r = r;
        let mut buf = [0u8; 4096];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0
                || tx
                    .send(String::from_utf8_lossy(&buf[..n]).into_owned())
                    .is_err()
            {
                break;
            }
        }
    });
    rx
}

#[test]
fn a_real_nodes_running_job_sends_its_output_as_it_runs_and_it_stays_after_a_cancel() {
    if !sandbox_ready() {
        return;
    }
    let Some(bin) = binaries() else { return };
    let edge = Edge::start(&bin, 60);
    let mut a = Node::start(&edge, "stream-a", &[]);
    a.wait_log("facts reported", 120);
    let m = marker("stream");
    // A line on stdout, a byte that is not UTF-8 on stderr, then a long
    // sleep: the job runs until it is cancelled.
    let id = edge
        .submit(
            Origin::Webhook,
            serde_json::json!({"command": [
                "sh", "-c",
                r#"printf '%s first-line\n' "$1"; printf 'bad \377 byte\n' >&2; sleep 300"#,
                "sh", &m,
            ]}),
        )
        .unwrap();
    let line = format!("{m} first-line\n");

    // `-f` prints the line while the job runs (before, nothing came until
    // the job ended).
    let mut follow = spawn_oz0(&edge, &["job", "logs", "-f", &id], &[]);
    let out = pieces(follow.stdout.take().unwrap());
    let err = pieces(follow.stderr.take().unwrap());
    let mut seen = String::new();
    let until = Instant::now() + Duration::from_secs(90);
    while !seen.contains(&line) {
        assert!(
            Instant::now() < until,
            "-f showed no output of the running job ({:?}, so far {seen:?}):\n{}",
            edge.job(&id).state,
            a.log()
        );
        if let Ok(p) = out.recv_timeout(Duration::from_millis(200)) {
            seen.push_str(&p);
        }
    }
    assert_eq!(edge.job(&id).state, "leased", "the job still runs");

    // `oz0 job logs` shows both streams while it runs, the byte that is
    // not UTF-8 as `?` (the edge's byte count is the file's).
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let (st, shown, e) = edge.oz0(&["job", "logs", "--tenant", "acme", &id]);
        assert_eq!(st, Some(0), "{e}");
        if shown.contains(&line) && shown.contains("== stderr: 11 byte(s)\nbad ? byte\n") {
            break;
        }
        assert!(Instant::now() < until, "logs of the running job: {shown}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(!processes_with(&m).is_empty(), "the job still runs");

    // A cancel ends the follow with the job's status, and what came is
    // still shown.
    let (st, _, e) = edge.oz0(&["job", "cancel", &id]);
    assert_eq!(st, Some(0), "{e}");
    let st = follow.wait().unwrap().code();
    let said: String = err.iter().collect();
    seen.extend(out.iter());
    assert_eq!(st, Some(1), "{seen} {said}");
    assert!(said.contains("cancelled"), "{said}");
    assert_eq!(seen, line, "the line once");
    let (st, shown, e) = edge.oz0(&["job", "logs", "--tenant", "acme", &id]);
    assert_eq!(st, Some(0), "{e}");
    assert!(shown.contains(&line), "logs after the cancel: {shown}");
    common::fleet::wait_gone(&m, 30);
}
