//! Floods against the `oz0-edge` binary: started with a low soft limit of
//! open files it raises it and serves past a thousand idle connections;
//! with a hard limit too low for its cap it lowers the cap, says so once
//! with the fix, and keeps serving its nodes; a flood of TLS handshakes
//! that time out and of requests from unknown nodes is logged in a few
//! lines that count them all.

mod common;

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::certs::TestCa;
use common::net::{connect_from, health_from, is_open};
use common::{linux_facts, ACME, OPERATOR};
use oz0_edge::client::{raw_request_with, NodeClient, NodeKey, Trust};

/// A guard against a hung test, never a measure.
const GUARD: Duration = Duration::from_secs(30);

fn temp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "oz0-edge-floods-{tag}-{}",
        oz0_edge::auth::random_id()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn secrets(d: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(d.join("tenants"), format!("acme={ACME}\n")).unwrap();
    std::fs::write(d.join("operators"), format!("{OPERATOR}\n")).unwrap();
    for f in ["tenants", "operators"] {
        std::fs::set_permissions(d.join(f), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

/// Whether a tool a test needs is missing: it fails under
/// `OZ0_MUST_WORK=1`, and is skipped with the reason otherwise.
fn missing(what: &str, why: &str) -> bool {
    if std::env::var("OZ0_MUST_WORK").as_deref() == Ok("1") {
        panic!("OZ0_MUST_WORK=1 and {what}: {why}");
    }
    eprintln!("SKIPPED: {what}: {why}");
    true
}

/// This process's hard limit of open files, its soft limit raised to it
/// (the test holds as many connections as the edge).
fn hard_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let l = getrlimit(Resource::Nofile);
    let hard = l.maximum.unwrap_or(1 << 20);
    let _ = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(hard),
            maximum: l.maximum,
        },
    );
    hard
}

/// A running `oz0-edge`, its log (stderr) collected line by line.
struct EdgeProcess {
    child: std::process::Child,
    url: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for EdgeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl EdgeProcess {
    /// `oz0-edge` with `extra` flags, its files in `d`, started by
    /// `prlimit --nofile=NOFILE` when given.
    fn start(d: &Path, nofile: Option<&str>, extra: &[&str]) -> EdgeProcess {
        let bin = env!("CARGO_BIN_EXE_oz0-edge");
        let mut c = match nofile {
            Some(n) => {
                let mut c = Command::new("prlimit");
                c.arg(format!("--nofile={n}")).arg("--").arg(bin);
                c
            }
            None => Command::new(bin),
        };
        c.args(["--no-config", "--listen", "127.0.0.1:0", "--store"])
            .arg(format!("sqlite:{}", d.join("edge.db").display()))
            .arg("--tenant-tokens")
            .arg(d.join("tenants"))
            .arg("--operator-tokens")
            .arg(d.join("operators"))
            .args(extra)
            .env_remove("OZ0_EDGE_STORE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (l, err) = (log.clone(), child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                l.lock().unwrap().push(line);
            }
        });
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("https://") || w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {line:?}; log: {:?}", log.lock().unwrap()))
            .to_string();
        EdgeProcess { child, url, log }
    }

    fn addr(&self) -> SocketAddr {
        self.url.rsplit('/').next().unwrap().parse().unwrap()
    }

    /// The log's lines that contain `what`.
    fn lines(&self, what: &str) -> Vec<String> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(what))
            .cloned()
            .collect()
    }

    /// The log's lines that contain `what`, once there is one.
    fn wait_for(&self, what: &str) -> Vec<String> {
        let until = Instant::now() + GUARD;
        loop {
            let l = self.lines(what);
            if !l.is_empty() {
                return l;
            }
            assert!(
                Instant::now() < until,
                "no {what:?} in the log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

#[test]
fn an_edge_started_with_256_open_files_raises_the_limit_and_serves_past_1100_connections() {
    if which("prlimit").is_none() && missing("prlimit is missing", "apt-get install util-linux") {
        return;
    }
    let hard = hard_limit();
    if hard < 4096
        && missing(
            &format!("the hard limit of open files is {hard}"),
            "this test holds 1,100 connections at each end: ulimit -Hn 4096",
        )
    {
        return;
    }
    let d = temp("nofile");
    secrets(&d);
    let e = EdgeProcess::start(&d, Some(&format!("256:{hard}")), &[]);
    let a = e.addr();
    // 1,100 idle connections from 20 addresses (55 each, within one
    // address's share), all open while a request is made and answered.
    let held: Vec<_> = (0..55)
        .flat_map(|_| 2..22)
        .map(|last| connect_from(last, a))
        .collect();
    let got = health_from(1, a, GUARD);
    assert!(
        got.starts_with("HTTP/1.1 200"),
        "with 1,100 idle connections open: {got:?}\n{}",
        e.log()
    );
    let closed = held.iter().filter(|s| !is_open(s)).count();
    assert_eq!(
        closed,
        0,
        "{closed} of the 1,100 idle connections were closed before the request was answered\n{}",
        e.log()
    );
    // Said once: raised from 256 to the hard limit (with the cap lowered
    // too, on a machine whose hard limit is below 4096 + 64).
    let raised = e.wait_for("open files");
    assert!(
        raised.len() == 1
            && raised[0].contains("from 256 to")
            && raised[0].contains(&hard.to_string()),
        "{raised:?}"
    );
    assert!(e.lines("Too many open files").is_empty(), "{}", e.log());
    drop(held);
    drop(e);
    let _ = std::fs::remove_dir_all(&d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_whose_hard_limit_is_too_low_lowers_its_cap_and_names_the_fix() {
    if which("prlimit").is_none() && missing("prlimit is missing", "apt-get install util-linux") {
        return;
    }
    hard_limit();
    let d = temp("low");
    secrets(&d);
    let e = EdgeProcess::start(&d, Some("256:256"), &[]);
    // Said once, with what was done and the fix.
    let said = e.wait_for("open files");
    assert_eq!(said.len(), 1, "{}", e.log());
    for want in [
        "256",
        "--max-connections 16384",
        "at most 192",
        "LimitNOFILE",
        "ulimit -Hn",
    ] {
        assert!(said[0].contains(want), "no {want:?} in {:?}", said[0]);
    }
    // A node of the fleet, polling before the flood.
    let n = NodeClient::new(&e.url, "acme", NodeKey::generate()).unwrap();
    n.register(ACME, Some("n1")).await.unwrap();
    n.report_facts(&linux_facts(false, false)).await.unwrap();
    // 300 idle connections from 5 addresses: more than the lowered cap.
    let a = e.addr();
    let held = tokio::task::spawn_blocking(move || {
        (0..60)
            .flat_map(|_| 2..7)
            .map(|last| connect_from(last, a))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    // The node is served, and the edge never ran out of descriptors: it
    // took the anonymous share of 192 (168) and closed the rest at once.
    for i in 0..3 {
        let r = n.poll_job(1).await;
        assert!(matches!(r, Ok(None)), "poll {i}: {r:?}\n{}", e.log());
    }
    let open = tokio::task::spawn_blocking(move || held.iter().filter(|s| is_open(s)).count())
        .await
        .unwrap();
    assert_eq!(open, 168, "{}", e.log());
    assert!(e.lines("Too many open files").is_empty(), "{}", e.log());
    drop(e);
    let _ = std::fs::remove_dir_all(&d);
}

/// The events a line of the log accounts for: `N more in the last …`, or
/// the one it is about.
fn events(line: &str) -> u64 {
    let msg = line.split("oz0-edge: ").nth(1).unwrap_or(line);
    msg.split_once(" more in the last ")
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_of_handshake_timeouts_and_unknown_nodes_are_logged_in_a_few_lines() {
    let d = temp("tls");
    secrets(&d);
    let ca = TestCa::new(&d, "flood");
    let (cert, key) = ca.leaf("edge", &["127.0.0.1"], None);
    let (c, k) = (cert.display().to_string(), key.display().to_string());
    let e = EdgeProcess::start(&d, None, &["--tls-cert", &c, "--tls-key", &k]);
    let a = e.addr();
    let started = Instant::now();
    // 300 connections that never begin TLS, from 10 addresses: each times
    // out (10 s).
    let held = tokio::task::spawn_blocking(move || {
        (0..30)
            .flat_map(|_| 2..12)
            .map(|last| connect_from(last, a))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    // 200 signed requests from a node the edge never registered.
    let trust = Trust::CaFile(ca.ca.clone());
    let stranger = NodeKey::generate();
    for _ in 0..200 {
        let h = stranger.sign("POST", "/v1/node/whoami", b"");
        let (s, _) = raw_request_with(&e.url, &trust, "POST", "/v1/node/whoami", &h, vec![])
            .await
            .unwrap();
        assert_eq!(s, 401);
    }
    // 200 registrations with a wrong enrolment token.
    let body = br#"{"tenant":"acme","public_key":"x"}"#.to_vec();
    for _ in 0..200 {
        let h = [("authorization", "Bearer wrong-token".to_string())];
        let (s, _) = raw_request_with(
            &e.url,
            &trust,
            "POST",
            "/v1/nodes/register",
            &h,
            body.clone(),
        )
        .await
        .unwrap();
        assert_eq!(s, 401);
    }
    // Wait until the log accounts for every one of them.
    let counted = |what: &str| e.lines(what).iter().map(|l| events(l)).sum::<u64>();
    let until = Instant::now() + Duration::from_secs(60);
    while counted("TLS handshake timed out") < 300
        || counted("is not registered") < 200
        || counted("refused a registration") < 200
    {
        assert!(
            Instant::now() < until,
            "the log does not account for the flood:\n{}",
            e.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(held);
    // The first of a kind at once, then one line per 10 s with the count.
    let bound = 2 + started.elapsed().as_secs() / 10;
    for what in [
        "TLS handshake timed out",
        "is not registered",
        "refused a registration",
    ] {
        let lines = e.lines(what);
        assert!(
            lines.len() as u64 <= bound,
            "{} lines for {what:?} (at most {bound}):\n{}",
            lines.len(),
            lines.join("\n")
        );
    }
    assert_eq!(counted("TLS handshake timed out"), 300, "{}", e.log());
    assert_eq!(counted("is not registered"), 200, "{}", e.log());
    assert_eq!(counted("refused a registration"), 200, "{}", e.log());
    drop(e);
    let _ = std::fs::remove_dir_all(&d);
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(tool))
            .find(|f| f.is_file())
    })
}
