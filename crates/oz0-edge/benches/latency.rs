//! How fast work moves through the edge, against the real `oz0-edge`
//! binary over TLS on loopback (a CA made at run time), with nodes that
//! are the client library a node daemon links, each keeping one
//! connection:
//!
//! - submit → running: a job submitted while its node long-polls, until
//!   the node holds it (p50, p99), against the same run's nodes that poll
//!   every 2 s as the node did;
//! - cancel → stopped: a running job cancelled, until `run_leased` gives
//!   it up (its held renewal answered);
//! - 300 trivial jobs end to end (`oz0-node sandbox run -- /bin/true` run
//!   by each node for each job it takes), against the same 300 runs
//!   started directly at the same parallelism, as a ratio;
//! - TLS handshakes: connections the nodes opened for the requests they
//!   made;
//! - with `OZ0_EDGE_TEST_POSTGRES`: two replicas on one PostgreSQL, jobs
//!   submitted through one while the node long-polls the other.
//!
//! Nothing here asserts a time. `cargo bench -p oz0-edge --bench latency`
//! (`OZ0_EDGE_BENCH_PARALLEL`: nodes and direct runs at once, 4;
//! `OZ0_NODE_BIN`: the node binary for the end-to-end runs, else
//! target/{release,debug}/oz0-node; as root they run as `oz0test`, whose
//! cgroups `oz0-node setup cgroups --user oz0test` made).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oz0_edge::client::{ClientError, NodeClient, NodeKey, OperatorClient, Trust};
use oz0_edge::routing::{JobPayload, JobRequest, Origin};
use oz0_edge::wire::{PollRequest, ShellJob};

#[path = "../tests/common/certs.rs"]
mod certs;
mod common;

use common::{env_usize, facts, pct};

const TOKEN: &str = "bench-enrolment-0123456789";
const OPERATOR: &str = "bench-operator-0123456789";

/// The edge binary over TLS; killed on drop.
struct EdgeProcess {
    child: Child,
    url: String,
}

impl Drop for EdgeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn private(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn start_edge(store: &str, dir: &Path, cert: &Path, key: &Path) -> EdgeProcess {
    private(&dir.join("tenants"), &format!("bench={TOKEN}\n"));
    private(&dir.join("operators"), &format!("{OPERATOR}\n"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_oz0-edge"))
        .args(["--no-config", "--listen", "127.0.0.1:0", "--store", store])
        .args(["--lease-secs", "30"])
        .arg("--tenant-tokens")
        .arg(dir.join("tenants"))
        .arg("--operator-tokens")
        .arg(dir.join("operators"))
        .arg("--tls-cert")
        .arg(cert)
        .arg("--tls-key")
        .arg(key)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("https://"))
        .unwrap_or_else(|| panic!("the edge did not say where it listens: {line:?}"))
        .to_string();
    EdgeProcess { child, url }
}

/// The `per_mille`th percentile, ms.
fn shell(command: &[&str]) -> JobRequest {
    JobRequest::new(
        Origin::Internal,
        JobPayload::Shell(ShellJob {
            command: command.iter().map(|c| c.to_string()).collect(),
            ..ShellJob::default()
        }),
    )
}

async fn node(url: &str, ca: &Path, name: &str) -> NodeClient {
    let c = NodeClient::with_trust(url, "bench", NodeKey::generate(), &Trust::CaFile(ca.into()))
        .unwrap();
    c.register(TOKEN, Some(name)).await.unwrap();
    c.report_facts(&facts()).await.unwrap();
    c
}

fn long_poll() -> PollRequest {
    PollRequest {
        wait_ms: 15_000,
        below: true,
        ..PollRequest::tier(1)
    }
}

/// Nodes that take jobs and complete them at once, sending the moment
/// each was taken; with `every`, they poll that often (as the node did)
/// instead of long polling. Ends with `stop`.
fn takers(
    nodes: &[Arc<NodeClient>],
    every: Option<Duration>,
    taken: tokio::sync::mpsc::UnboundedSender<(String, Instant)>,
    stop: Arc<tokio::sync::Notify>,
) -> Vec<tokio::task::JoinHandle<()>> {
    nodes
        .iter()
        .map(|n| {
            let (n, taken, stop) = (n.clone(), taken.clone(), stop.clone());
            tokio::spawn(async move {
                loop {
                    let req = match every {
                        Some(_) => PollRequest::tier(1),
                        None => long_poll(),
                    };
                    let polled = tokio::select! {
                        p = n.poll_with(&req) => p.unwrap(),
                        _ = stop.notified() => return,
                    };
                    match polled.lease {
                        Some(l) => {
                            let _ = taken.send((l.job.job_id.clone(), Instant::now()));
                            n.complete_job(&l, true, Some(0)).await.unwrap();
                        }
                        None => {
                            if let Some(e) = every {
                                tokio::select! {
                                    _ = tokio::time::sleep(e) => {}
                                    _ = stop.notified() => return,
                                }
                            }
                        }
                    }
                }
            })
        })
        .collect()
}

/// Submits `n` jobs one at a time (the next once the last was taken);
/// the time from each submission to its node holding it.
async fn pickups(
    op: &OperatorClient,
    nodes: &[Arc<NodeClient>],
    every: Option<Duration>,
    n: usize,
) -> Vec<Duration> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let stop = Arc::new(tokio::sync::Notify::new());
    let tasks = takers(nodes, every, tx, stop.clone());
    // The nodes are waiting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let a = op.submit_job("bench", &shell(&["true"])).await.unwrap();
        let (id, at) = rx.recv().await.unwrap();
        assert_eq!(id, a.job_id);
        out.push(at - t);
        // Now and then between two polls, never in step with them.
        tokio::time::sleep(Duration::from_millis(7 + (out.len() as u64 * 13) % 40)).await;
    }
    for _ in 0..tasks.len() * 4 {
        stop.notify_waiters();
        tokio::task::yield_now().await;
    }
    for t in tasks {
        t.abort();
    }
    out
}

/// Runs and cancels `n` jobs; the time from each cancel to its node
/// giving the job up.
async fn cancels(op: &OperatorClient, n0: &NodeClient, n: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let a = op
            .submit_job("bench", &shell(&["sleep", "600"]))
            .await
            .unwrap();
        let mut lease = loop {
            if let Some(l) = n0.poll_with(&long_poll()).await.unwrap().lease {
                break l;
            }
        };
        assert_eq!(lease.job.job_id, a.job_id);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let run = async {
            let r = n0
                .run_leased(&mut lease, std::future::pending::<()>())
                .await;
            let _ = tx.send(Instant::now());
            r
        };
        let cancel = async {
            // Running past its first held renewal.
            tokio::time::sleep(Duration::from_millis(400 + (out.len() as u64 * 17) % 300)).await;
            let t = Instant::now();
            op.cancel_job("bench", &a.job_id).await.unwrap();
            t
        };
        let (r, t) = tokio::join!(run, cancel);
        assert!(
            matches!(
                r,
                Err(ClientError::LeaseLost {
                    cancelled: true,
                    ..
                })
            ),
            "{r:?}"
        );
        out.push(rx.await.unwrap() - t);
    }
    out
}

/// How to start `oz0-node sandbox run --work DIR -- /bin/true`: the
/// node binary, and the user to run it as (as root).
struct Runner {
    node: PathBuf,
    user: Option<String>,
    dir: PathBuf,
}

impl Runner {
    fn find(dir: &Path) -> Option<Runner> {
        let exe = std::env::current_exe().ok()?;
        let target = exe.parent()?.parent()?.parent()?.to_path_buf();
        let node = std::env::var_os("OZ0_NODE_BIN")
            .map(PathBuf::from)
            .or_else(|| {
                ["release", "debug"]
                    .iter()
                    .map(|p| target.join(p).join("oz0-node"))
                    .find(|p| p.exists())
            })?;
        use std::os::unix::fs::PermissionsExt;
        let root = rustix::process::getuid().is_root();
        let user = root.then(|| "oz0test".to_string());
        // The node's user reaches the binary and its work folders here.
        let d = dir.join("runs");
        std::fs::create_dir_all(&d).ok()?;
        for p in [dir, &d] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).ok()?;
        }
        let copy = d.join("oz0-node");
        std::fs::copy(&node, &copy).ok()?;
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).ok()?;
        let r = Runner {
            node: copy,
            user,
            dir: d,
        };
        r.run(0).then_some(r)
    }

    /// One run in worker `w`'s folder; whether it succeeded.
    fn run(&self, w: usize) -> bool {
        let work = self.dir.join(format!("w{w}"));
        if !work.exists() {
            let _ = std::fs::create_dir_all(&work);
            if let Some(u) = &self.user {
                let _ = Command::new("chown").arg(u).arg(&work).status();
            }
        }
        let mut c = match &self.user {
            Some(u) => {
                let mut c = Command::new("runuser");
                c.args(["-u", u, "--"]).arg(&self.node);
                c
            }
            None => Command::new(&self.node),
        };
        c.args(["sandbox", "run", "--work"])
            .arg(&work)
            .args(["--", "/bin/true"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

/// `n` runs started directly, `parallel` at once; runs a second.
async fn direct(r: &Arc<Runner>, n: usize, parallel: usize) -> f64 {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let t = Instant::now();
    let workers: Vec<_> = (0..parallel)
        .map(|w| {
            let (r, next) = (r.clone(), next.clone());
            tokio::task::spawn_blocking(move || {
                while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < n {
                    assert!(r.run(w));
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    n as f64 / t.elapsed().as_secs_f64()
}

/// `n` jobs submitted at once, each run by the node that takes it (one
/// job at a time a node, `parallel` nodes); jobs a second, from the
/// first submission to the last completion.
async fn through_edge(
    op: &OperatorClient,
    nodes: &[Arc<NodeClient>],
    r: &Arc<Runner>,
    n: usize,
) -> f64 {
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let finished = Arc::new(tokio::sync::Notify::new());
    let t = Instant::now();
    let workers: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(w, node)| {
            let (node, r, done, finished) =
                (node.clone(), r.clone(), done.clone(), finished.clone());
            tokio::spawn(async move {
                loop {
                    let Some(mut l) = node.poll_with(&long_poll()).await.unwrap().lease else {
                        continue;
                    };
                    let r2 = r.clone();
                    let ok = node
                        .run_leased(&mut l, tokio::task::spawn_blocking(move || r2.run(100 + w)))
                        .await
                        .unwrap()
                        .unwrap();
                    node.complete_job(&l, ok, Some(0)).await.unwrap();
                    if done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1 == n {
                        finished.notify_one();
                    }
                }
            })
        })
        .collect();
    let submit: Vec<_> = (0..8)
        .map(|k| {
            let op = op.clone();
            tokio::spawn(async move {
                for _ in (k..n).step_by(8) {
                    op.submit_job("bench", &shell(&["/bin/true"]))
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for s in submit {
        s.await.unwrap();
    }
    finished.notified().await;
    let rate = n as f64 / t.elapsed().as_secs_f64();
    for w in workers {
        w.abort();
    }
    rate
}

async fn run(kind: &str, store: &str, dir: &Path, ca: &certs::TestCa, cert: &Path, key: &Path) {
    let parallel = env_usize("OZ0_EDGE_BENCH_PARALLEL", 4);
    let edge = start_edge(store, dir, cert, key);
    let op =
        OperatorClient::with_trust(&edge.url, OPERATOR, &Trust::CaFile(ca.ca.clone())).unwrap();
    let mut nodes = Vec::new();
    for i in 0..parallel {
        nodes.push(Arc::new(
            node(&edge.url, &ca.ca, &format!("{kind}-{i}")).await,
        ));
    }

    let mut held = pickups(&op, &nodes, None, 200).await;
    let mut polled = pickups(&op, &nodes, Some(Duration::from_secs(2)), 20).await;
    let (h50, h99, p50, p99) = (
        pct(&mut held, 500),
        pct(&mut held, 990),
        pct(&mut polled, 500),
        pct(&mut polled, 990),
    );
    println!(
        "{kind:>8}: submit -> running, long polls: p50 {h50:.1} ms, p99 {h99:.1} ms (200 jobs); polls every 2 s: p50 {p50:.0} ms, p99 {p99:.0} ms (20 jobs); p50 ratio {:.3}",
        h50 / p50
    );

    let mut c = cancels(&op, &nodes[0], 100).await;
    println!(
        "{kind:>8}: cancel -> stopped (a held renewal answered): p50 {:.1} ms, p99 {:.1} ms (100 cancels; a renewal every third of the 30 s lease stopped it within 10 s)",
        pct(&mut c, 500),
        pct(&mut c, 990)
    );

    let requests = 200 + 20 + 100 * 3;
    let opened: u64 = nodes.iter().map(|n| n.connections_opened()).sum();
    println!(
        "{kind:>8}: TLS handshakes: the {parallel} nodes opened {opened} connection(s) for their registrations, reports, polls, renewals and completions (one a request before)",
    );
    let _ = requests;

    match Runner::find(dir) {
        Some(r) => {
            let r = Arc::new(r);
            let n = 300;
            let d = direct(&r, n, parallel).await;
            let e = through_edge(&op, &nodes, &r, n).await;
            let d2 = direct(&r, n, parallel).await;
            println!(
                "{kind:>8}: {n} trivial jobs (sandbox run -- /bin/true), {parallel} at once: directly {:.1}/s, through the edge {e:.1}/s: ratio {:.2}",
                (d + d2) / 2.0,
                e / ((d + d2) / 2.0)
            );
        }
        None => println!(
            "{kind:>8}: SKIPPED the end-to-end runs: no oz0-node binary that runs `sandbox run` here (cargo build -p oz0-node; as root, oz0-node setup cgroups --user oz0test)"
        ),
    }
}

/// Two replicas on one PostgreSQL: submitted through one, taken through
/// the other.
async fn replicas(url: &str, dir: &Path, ca: &certs::TestCa, cert: &Path, key: &Path) {
    let a = start_edge(url, dir, cert, key);
    let d2 = dir.join("b");
    std::fs::create_dir_all(&d2).unwrap();
    let b = start_edge(url, &d2, cert, key);
    let op = OperatorClient::with_trust(&a.url, OPERATOR, &Trust::CaFile(ca.ca.clone())).unwrap();
    let n = vec![Arc::new(node(&b.url, &ca.ca, "replica-b").await)];
    let mut t = pickups(&op, &n, None, 100).await;
    println!(
        "postgres: submitted through one replica, taken through another (LISTEN/NOTIFY): p50 {:.1} ms, p99 {:.1} ms (100 jobs)",
        pct(&mut t, 500),
        pct(&mut t, 990)
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = std::env::temp_dir().join(format!("oz0-edge-latency-{}", oz0_edge::auth::random_id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = certs::TestCa::new(&dir, "bench");
        let (cert, key) = ca.leaf("edge", &["127.0.0.1"], None);
        let d = dir.join("sqlite");
        std::fs::create_dir_all(&d).unwrap();
        run("sqlite", &format!("sqlite:{}", d.join("edge.db").display()), &d, &ca, &cert, &key).await;
        match std::env::var("OZ0_EDGE_TEST_POSTGRES") {
            Ok(url) => {
                let d = dir.join("pg");
                std::fs::create_dir_all(&d).unwrap();
                run("postgres", &url, &d, &ca, &cert, &key).await;
                let d = dir.join("pg2");
                std::fs::create_dir_all(&d).unwrap();
                replicas(&url, &d, &ca, &cert, &key).await;
            }
            Err(_) => println!("SKIPPED postgres: OZ0_EDGE_TEST_POSTGRES is unset (run under crates/oz0-edge/scripts/with-postgres.sh)"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    });
}
