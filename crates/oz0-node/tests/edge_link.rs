//! The node's link to its edge, through the real binaries over HTTPS (a
//! real `oz0-edge` with a CA the test makes, the real `oz0-node run
//! --edge`, the real `oz0` CLI):
//!
//! - the node waits for work with long polls: an idle node asks the edge
//!   about once per 15 s (not once per `--poll-ms`), and still takes a job
//!   as soon as it is queued;
//! - its log lines carry their time (UTC, RFC 3339, ms), and a job an
//!   operator cancelled is logged as a cancel;
//! - `key rotate` is refused while a node runs on the same data directory;
//! - an edge whose certificate the node does not trust stops `run --once`
//!   (and the daemon) with an error, not retries;
//! - several `--edge` URLs: the node fails over to the next one it can
//!   reach, and says so; two replicas on one PostgreSQL, the node moving
//!   from one to the other when the first goes away.

#![cfg(target_os = "linux")]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::fleet::{edge_bin, oz0_bin, processes_with, write_secret, Edge, Node, TOKEN};
use common::{marker, skip, TempDir};
use oz0_edge::client::{raw_request_with, Trust};
use oz0_edge::routing::Origin;

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

/// Requests the edge answered on `/v1/node/poll`, from its metrics.
fn polls(edge: &Edge) -> u64 {
    let (st, body) = edge
        .rt
        .block_on(raw_request_with(
            &edge.url,
            &Trust::CaFile(edge.ca.clone()),
            "GET",
            "/metrics",
            &[(
                "authorization",
                format!("Bearer {}", common::fleet::OPERATOR),
            )],
            vec![],
        ))
        .unwrap();
    assert_eq!(st, 200);
    String::from_utf8_lossy(&body)
        .lines()
        .filter(|l| {
            l.starts_with("oz0_edge_request_duration_seconds_count{route=\"/v1/node/poll\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn an_idle_node_waits_in_one_long_poll_and_takes_a_job_at_once() {
    let Some(bin) = binaries() else { return };
    let edge = Edge::start(&bin, 30);
    // --poll-ms 200: a node polling as it did asked 5 times a second.
    let mut n = Node::start(&edge, "wait-a", &["--sandbox", "none"]);
    n.wait_log("facts reported", 60);
    std::thread::sleep(Duration::from_secs(3));
    let idle = polls(&edge);
    assert!(
        idle <= 2,
        "an idle node polled {idle} times in 3 s:\n{}",
        n.log()
    );
    // The held poll is answered by the job's submission.
    let id = edge
        .submit(
            Origin::Internal,
            serde_json::json!({"command": ["sh", "-c", "echo taken"]}),
        )
        .unwrap();
    let j = edge.wait_job(&id, 30);
    assert_eq!(j.state, "succeeded", "{j:?}\n{}", n.log());
    assert_eq!(n.output(&id, "stdout"), "taken\n");
    assert!(
        polls(&edge) <= idle + 4,
        "{} polls for one job:\n{}",
        polls(&edge) - idle,
        n.log()
    );
}

/// A job's work folder is removed after it whatever the job left there:
/// folders it made unwritable and unreadable to their owner included
/// (each such job once left its files on the node's disk for good).
#[test]
fn a_jobs_work_folder_goes_whatever_it_left() {
    let Some(bin) = binaries() else { return };
    let edge = Edge::start(&bin, 30);
    let mut n = Node::start(&edge, "work-a", &["--sandbox", "none"]);
    n.wait_log("facts reported", 60);
    let id = edge
        .submit(
            Origin::Internal,
            serde_json::json!({"command": ["sh", "-c", "mkdir -p d/e/g && echo x > d/e/f && chmod 000 d/e/g && chmod 500 d/e && chmod 000 d && echo left"]}),
        )
        .unwrap();
    let j = edge.wait_job(&id, 30);
    assert_eq!(j.state, "succeeded", "{j:?}\n{}", n.log());
    assert_eq!(n.output(&id, "stdout"), "left\n");
    let work = n.dir.join("work");
    let left: Vec<_> = std::fs::read_dir(&work)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        left.is_empty(),
        "{left:?} left in {}\n{}",
        work.display(),
        n.log()
    );
    assert!(!n.log().contains("cannot remove"), "{}", n.log());
}

/// A running job's output is bounded by what the node keeps of all job
/// records (`--keep-jobs-mib`): past it, the run is stopped and the job
/// fails, saying why, instead of filling the node's disk.
#[test]
fn a_job_that_writes_without_end_is_stopped_at_the_records_bound() {
    let Some(bin) = binaries() else { return };
    let edge = Edge::start(&bin, 30);
    let mut n = Node::start(
        &edge,
        "flood-a",
        &["--sandbox", "none", "--keep-jobs-mib", "2"],
    );
    n.wait_log("facts reported", 60);
    let id = edge
        .submit(
            Origin::Internal,
            serde_json::json!({"command": ["sh", "-c", "yes flooding"], "timeout": 60}),
        )
        .unwrap();
    let j = edge.wait_job(&id, 50);
    assert_eq!(j.state, "failed", "{j:?}\n{}", n.log());
    assert!(
        j.error.as_deref().unwrap_or("").contains("--keep-jobs-mib"),
        "{j:?}"
    );
}

/// Whether `line` starts with a time as `2026-05-01T12:34:56.789Z `.
fn stamped(line: &str) -> bool {
    let b = line.as_bytes();
    b.len() > 25
        && b[..24].iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'.',
            23 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
        && b[24] == b' '
}

#[test]
fn log_lines_carry_their_time_and_a_cancel_is_logged_as_one() {
    let Some(bin) = binaries() else { return };
    let edge = Edge::start(&bin, 30);
    let mut n = Node::start(&edge, "wait-b", &["--sandbox", "none"]);
    n.wait_log("facts reported", 60);
    let m = marker("cancelled");
    let id = edge
        .submit(
            Origin::Internal,
            serde_json::json!({"command": ["sh", "-c", "sleep 300; :", &m]}),
        )
        .unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while processes_with(&m).is_empty() {
        assert!(
            Instant::now() < until,
            "the job did not start:\n{}",
            n.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (st, _, err) = edge.oz0(&["job", "cancel", "--tenant", "acme", &id]);
    assert_eq!(st, Some(0), "{err}");
    n.wait_log(&format!("job {id} cancelled by an operator"), 30);
    let log = n.log();
    let line = log
        .lines()
        .find(|l| l.contains(&format!("job {id} cancelled")))
        .unwrap();
    assert!(!line.contains("lease"), "{line}");
    // Every line of the daemon's log says when.
    for l in log.lines() {
        assert!(stamped(l), "a log line without its time: {l:?}");
    }
    let until = Instant::now() + Duration::from_secs(10);
    while !processes_with(&m).is_empty() {
        assert!(
            Instant::now() < until,
            "the cancelled job still runs:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `oz0-node key rotate` against `edge`, on `n`'s data directory.
fn rotate(edge: &Edge, n: &Node) -> (Option<i32>, String) {
    let o = std::process::Command::new(common::node())
        .args(["key", "rotate", "--edge", &edge.url])
        .arg("--edge-ca")
        .arg(&edge.ca)
        .arg("--data-dir")
        .arg(n.dir.join("data"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (
        o.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

#[test]
fn a_key_is_not_rotated_under_a_running_node() {
    let Some(bin) = binaries() else { return };
    let edge = Edge::start(&bin, 30);
    let mut n = Node::start(&edge, "rotate-a", &["--sandbox", "none"]);
    n.wait_log("facts reported", 60);
    let key = n.dir.join("data/identity/node.key");
    let before = std::fs::read(&key).unwrap();
    let (st, out) = rotate(&edge, &n);
    assert_eq!(st, Some(1), "{out}");
    assert!(
        out.contains("a node runs on the data directory") && out.contains("Stop it first"),
        "{out}"
    );
    assert_eq!(std::fs::read(&key).unwrap(), before, "the key changed");
    // The running node still works with its key.
    let run = |n: &Node, what: &str| {
        let id = edge
            .submit(
                Origin::Internal,
                serde_json::json!({"command": ["echo", what]}),
            )
            .unwrap();
        let j = edge.wait_job(&id, 30);
        assert_eq!(j.state, "succeeded", "{j:?}\n{}", n.log());
    };
    run(&n, "before");
    // Stopped, the node's key rotates; started again, it works with it.
    n.signal("TERM");
    assert_eq!(n.wait_exit(30), Some(0));
    let (st, out) = rotate(&edge, &n);
    assert_eq!(st, Some(0), "{out}");
    assert!(out.contains("key rotated"), "{out}");
    assert_ne!(std::fs::read(&key).unwrap(), before);
    n.restart(
        &common::node(),
        &edge,
        "rotate-a",
        &["--sandbox", "none"],
        &[("OZ0_MICROVM", "off")],
    );
    run(&n, "after");
}

/// `oz0-node run --sandbox none` against `edges` (each after `--edge`),
/// trusting `ca`, with `extra` flags; its log goes to `dir/log`.
fn node_cmd(dir: &TempDir, edges: &[&str], ca: &Path, extra: &[&str]) -> Command {
    write_secret(&dir.join("token"), TOKEN);
    let mut c = Command::new(common::node());
    c.arg("run");
    for e in edges {
        c.args(["--edge", e]);
    }
    c.args(["--tenant", "acme", "--sandbox", "none"])
        .arg("--edge-ca")
        .arg(ca)
        .arg("--enrolment-token-file")
        .arg(dir.join("token"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--work-root")
        .arg(dir.join("work"))
        .args(extra)
        .env("OZ0_MICROVM", "off")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("log")).unwrap());
    c
}

/// Waits up to `secs` for `c` to exit: its status, or None (killed).
fn exit_within(c: &mut std::process::Child, secs: u64) -> Option<i32> {
    let until = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(st) = c.try_wait().unwrap() {
            return st.code();
        }
        if Instant::now() >= until {
            let _ = c.kill();
            let _ = c.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn an_edge_whose_certificate_does_not_verify_stops_the_node() {
    let Some(bin) = binaries() else { return };
    let edge = Edge::start(&bin, 30);
    let dir = TempDir::new("untrusted");
    // A CA that did not sign the edge's certificate.
    let other = common::fleet::certs::TestCa::new(&dir.0, "other");
    for extra in [&["--once"][..], &[][..]] {
        let mut c = node_cmd(&dir, &[&edge.url], &other.ca, extra)
            .spawn()
            .unwrap();
        // The code before retried for ever: killed after a minute.
        let st = exit_within(&mut c, 60);
        let log = std::fs::read_to_string(dir.join("log")).unwrap();
        assert_eq!(st, Some(1), "{extra:?}: {log}");
        assert!(
            log.contains("UnknownIssuer")
                && log.contains("not retrying")
                && log.contains("--edge-ca"),
            "{extra:?}: {log}"
        );
        assert!(!log.contains("retrying in"), "{extra:?}: {log}");
    }
    // An edge that is not there yet is waited for, as before.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down = format!("https://{}", port.local_addr().unwrap());
    drop(port);
    let mut c = node_cmd(&dir, &[&down], &edge.ca, &["--once"])
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(dir.join("log"))
        .unwrap()
        .contains("retrying in")
    {
        assert!(Instant::now() < until, "the node did not retry");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(c.try_wait().unwrap(), None, "the node gave up");
    let _ = c.kill();
    let _ = c.wait();
}

/// A loopback URL nothing listens on.
fn nowhere() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("https://{}", port.local_addr().unwrap())
}

/// Waits up to `secs` for the log at `path` to say `what`.
fn wait_said(path: &Path, what: &str, secs: u64) -> String {
    let until = Instant::now() + Duration::from_secs(secs);
    loop {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        if log.contains(what) {
            return log;
        }
        assert!(
            Instant::now() < until,
            "the node did not say {what:?} within {secs}s:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_node_fails_over_to_the_next_edge_it_can_reach() {
    let Some(bin) = binaries() else { return };
    let edge = Edge::start(&bin, 30);
    let dir = TempDir::new("failover");
    let down = nowhere();
    let mut c = node_cmd(&dir, &[&down, &edge.url], &edge.ca, &[])
        .spawn()
        .unwrap();
    let log = wait_said(&dir.join("log"), "facts reported", 60);
    assert!(
        log.contains(&format!(
            "cannot register with the edge: cannot connect to the edge at {down}"
        )) && log.contains(&format!("failing over to the edge at {}", edge.url)),
        "{log}"
    );
    assert!(
        log.contains(&format!("registered with the edge at {} as node", edge.url)),
        "{log}"
    );
    let id = edge
        .submit(
            Origin::Internal,
            serde_json::json!({"command": ["echo", "over"]}),
        )
        .unwrap();
    let j = edge.wait_job(&id, 30);
    assert_eq!(j.state, "succeeded", "{j:?}");
    let _ = c.kill();
    let _ = c.wait();
}

/// Two edge replicas on one PostgreSQL store: a job submitted through
/// either is the same queue; when the replica the node waits on goes
/// away, the node goes on with the other and takes what is queued there.
#[test]
fn a_node_fails_over_between_replicas_on_one_postgresql() {
    let Some(bin) = binaries() else { return };
    let Some(pg) = common::fleet::postgres_store("link") else {
        skip("OZ0_EDGE_TEST_POSTGRES is unset: scripts/test runs this file under with-postgres.sh");
        return;
    };
    let mut a = Edge::start_with(&bin, 30, &["--store", &pg]);
    let b = Edge::start_with(&bin, 30, &["--store", &pg]);
    // Each replica's certificate is of a CA of its own: the node trusts both.
    let dir = TempDir::new("replicas");
    let cas = dir.join("cas.pem");
    std::fs::write(
        &cas,
        std::fs::read_to_string(&a.ca).unwrap() + &std::fs::read_to_string(&b.ca).unwrap(),
    )
    .unwrap();
    let mut c = node_cmd(&dir, &[&a.url, &b.url], &cas, &[])
        .spawn()
        .unwrap();
    wait_said(&dir.join("log"), "facts reported", 60);
    let run = |through: &Edge, seen_by: &Edge, what: &str| {
        let id = through
            .submit(
                Origin::Internal,
                serde_json::json!({"command": ["echo", what]}),
            )
            .unwrap();
        let j = seen_by.wait_job(&id, 60);
        assert_eq!(j.state, "succeeded", "{j:?}");
    };
    // Submitted through b, taken by the node waiting on a: one queue.
    run(&b, &a, "through b");
    // Replica a goes away while the node waits on it: the node goes on
    // with b, and takes what is submitted there.
    let _ = a.child.kill();
    let _ = a.child.wait();
    let log = wait_said(
        &dir.join("log"),
        &format!("failing over to the edge at {}", b.url),
        60,
    );
    assert!(log.contains("cannot poll the edge for work"), "{log}");
    run(&b, &b, "on b");
    let _ = c.kill();
    let _ = c.wait();
}
