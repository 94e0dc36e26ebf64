//! The edge as history grows, against the real `oz0-edge` binary over
//! loopback, on SQLite and (with `OZ0_EDGE_TEST_POSTGRES`, e.g. under
//! `scripts/with-postgres.sh`) PostgreSQL:
//!
//! - poll latency (p50, p99) of 1,000 nodes polling empty queues, first
//!   with an empty history, then with 100,000 finished jobs in the store —
//!   the baseline is the same edge in the same run before the history (the
//!   jobs are written straight into the store with the edge stopped, a
//!   SQLite store being its edge's alone, and the edge started again on
//!   the same address and store);
//! - lease + complete throughput with 10,000 queued jobs;
//! - the edge process's memory (resident now, and its peak);
//! - poll latency again while 10,000 more nodes (another tenant's) wait
//!   for work, each holding a long poll open — the baseline is the same
//!   polls just before they came — and the edge's memory then: polls as
//!   fast as 32 tasks send them (the edge saturated: what any added work
//!   costs shows at once), and polls at a fixed 500/s (the latency a
//!   fleet's nodes see). They share
//!   one address here, so the edge runs with `--max-connections-per-client
//!   20000` (a fleet's nodes each have their own; the default is 64).
//!
//! Nothing here asserts a time. `cargo bench -p oz0-edge --bench history`
//! (`OZ0_EDGE_BENCH_NODES`, `OZ0_EDGE_BENCH_HISTORY`, `OZ0_EDGE_BENCH_QUEUED`,
//! `OZ0_EDGE_BENCH_IDLE` change the sizes).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oz0_edge::client::{NodeClient, NodeKey};
use oz0_edge::Store;

mod common;
use common::{env_usize, facts, pct};

const CONCURRENCY: usize = 32;
/// The rate of the paced polls: a busy fleet's, well below what the edge
/// answers at most here (about 4,000/s), so that their latency is the
/// edge's, not a queue's.
const PACED_PER_S: u64 = 500;
const TOKEN: &str = "bench-enrolment-0123456789";
const OPERATOR: &str = "bench-operator-0123456789";

/// The edge binary on a store; killed on drop.
struct EdgeProcess {
    child: Child,
    url: String,
    _dir: std::path::PathBuf,
}

impl Drop for EdgeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback address nothing listens on now, for an edge that is
/// started again on the same one.
fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

fn start_edge(store: &str, dir: &std::path::Path, listen: &str) -> EdgeProcess {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(
        dir.join("tenants"),
        format!("bench={TOKEN}\nidle={TOKEN}\n"),
    )
    .unwrap();
    std::fs::write(dir.join("operators"), format!("{OPERATOR}\n")).unwrap();
    for f in ["tenants", "operators"] {
        std::fs::set_permissions(dir.join(f), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_oz0-edge"))
        .args([
            "--listen",
            listen,
            "--store",
            store,
            "--lease-secs",
            "300",
            "--max-connections-per-client",
            "20000",
        ])
        .arg("--tenant-tokens")
        .arg(dir.join("tenants"))
        .arg("--operator-tokens")
        .arg(dir.join("operators"))
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
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .to_string();
    EdgeProcess {
        child,
        url,
        _dir: dir.to_path_buf(),
    }
}

/// The edge's resident and peak memory, MiB.
fn memory(pid: u32) -> (f64, f64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = |k: &str| {
        s.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (kb("VmRSS:") / 1024.0, kb("VmHWM:") / 1024.0)
}

/// Runs `f(i)` for `0..n` on CONCURRENCY tasks; each call's time.
async fn timed<F, Fut>(n: usize, f: F) -> (Vec<Duration>, Duration)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let f = Arc::new(f);
    let next = Arc::new(AtomicUsize::new(0));
    let times = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CONCURRENCY {
        let (f, next, times) = (f.clone(), next.clone(), times.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let t = Instant::now();
                f(i).await;
                times.lock().unwrap().push(t.elapsed());
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let all = Arc::try_unwrap(times).unwrap().into_inner().unwrap();
    (all, start.elapsed())
}

/// Inserts `n` jobs in `state` straight into the store, 500 a statement.
async fn bulk(store: &Store, n: usize, state: &str) {
    let now = oz0_edge::time::now_ms();
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let rows: Vec<String> = chunk
            .iter()
            .map(|i| {
                let done = if state == "queued" { "NULL".to_string() } else { (now - 1000).to_string() };
                format!("('{}', 'bench', 'internal', 'shell', 0, 0, 0, NULL, '{{\"command\":[\"true\"]}}', '{state}', {}, {done}, 1)", oz0_edge::auth::random_id(), now - 2000 + i64::try_from(*i % 1000).unwrap_or(0))
            })
            .collect();
        let sql = format!(
            "INSERT INTO jobs (id, tenant, origin, kind, tier_need, need_microvm, need_oci, need_arch, payload, state, enqueued_ms, done_ms, attempts) VALUES {}",
            rows.join(", ")
        );
        store.exec(&sql, vec![]).await.unwrap();
    }
}

/// Writes `n` jobs in `state` straight into the store with the edge
/// stopped (a SQLite store is its edge's alone while it runs), then starts
/// the edge again on the same address and waits until every client
/// reaches it: the new edge, and how long the writing took.
async fn with_jobs_written(
    edge: EdgeProcess,
    store_url: &str,
    dir: &std::path::Path,
    (n, state): (usize, &str),
    clients: &Arc<Vec<NodeClient>>,
) -> (EdgeProcess, Duration) {
    let listen = edge.url.trim_start_matches("http://").to_string();
    drop(edge);
    let store = Store::open(store_url).await.unwrap();
    let t = Instant::now();
    bulk(&store, n, state).await;
    let took = t.elapsed();
    drop(store);
    let edge = start_edge(store_url, dir, &listen);
    // Connections to the stopped edge are dropped on their first use.
    for c in clients.iter() {
        for attempt in 0.. {
            match c.whoami().await {
                Ok(_) => break,
                Err(e) => assert!(attempt < 3, "the edge again: {e}"),
            }
        }
    }
    (edge, took)
}

async fn polls(clients: &Arc<Vec<NodeClient>>, rounds: usize) -> (f64, f64, f64) {
    let c = clients.clone();
    let n = c.len() * rounds;
    let (mut t, all) = timed(n, move |i| {
        let c = c.clone();
        async move {
            assert!(c[i % c.len()].poll_job(0).await.unwrap().is_none());
        }
    })
    .await;
    (
        pct(&mut t, 500),
        pct(&mut t, 990),
        n as f64 / all.as_secs_f64(),
    )
}

/// Polls at a fixed rate (`per_s`, for `secs`), each on a task of its
/// own so that a slow answer does not slow the rate (an open loop, as a
/// fleet's nodes poll): p50 and p99, ms.
async fn paced_polls(clients: &Arc<Vec<NodeClient>>, per_s: u64, secs: u64) -> (f64, f64) {
    let n = usize::try_from(per_s * secs).unwrap_or(usize::MAX);
    let times = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / per_s));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        tick.tick().await;
        let (c, times) = (clients.clone(), times.clone());
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            assert!(c[i % c.len()].poll_job(0).await.unwrap().is_none());
            times.lock().unwrap().push(t.elapsed());
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut all = Arc::try_unwrap(times).unwrap().into_inner().unwrap();
    (pct(&mut all, 500), pct(&mut all, 990))
}

async fn run(kind: &str, store_url: &str, dir: &std::path::Path) {
    let nodes = env_usize("OZ0_EDGE_BENCH_NODES", 1000);
    let history = env_usize("OZ0_EDGE_BENCH_HISTORY", 100_000);
    let queued = env_usize("OZ0_EDGE_BENCH_QUEUED", 10_000);
    let edge = start_edge(store_url, dir, &free_addr());
    let clients: Arc<Vec<NodeClient>> = Arc::new(
        (0..nodes)
            .map(|_| NodeClient::new(&edge.url, "bench", NodeKey::generate()).unwrap())
            .collect(),
    );
    let c = clients.clone();
    timed(nodes, move |i| {
        let c = c.clone();
        async move {
            c[i].register(TOKEN, Some(&format!("node-{i}")))
                .await
                .unwrap();
            c[i].report_facts(&facts()).await.unwrap();
        }
    })
    .await;
    // The ceiling: a request with one store round trip and no signature
    // (the health check), as many at once.
    let url = edge.url.clone();
    let (mut ht, hall) = timed(nodes * 5, move |_| {
        let url = url.clone();
        async move {
            let (s, _) = oz0_edge::client::raw_request(&url, "GET", "/v1/health", &[], vec![])
                .await
                .unwrap();
            assert_eq!(s, 200);
        }
    })
    .await;
    println!(
        "{kind:>8}: ceiling (health checks, one store round trip, no signature): p50 {:.2} ms, p99 {:.2} ms, {:.0}/s",
        pct(&mut ht, 500),
        pct(&mut ht, 990),
        (nodes * 5) as f64 / hall.as_secs_f64()
    );
    let (p50a, p99a, ra) = polls(&clients, 5).await;
    let (edge, loaded) =
        with_jobs_written(edge, store_url, dir, (history, "succeeded"), &clients).await;
    let (p50b, p99b, rb) = polls(&clients, 5).await;
    println!("{kind:>8}: {nodes} nodes polling empty queues: p50 {p50a:.2} ms, p99 {p99a:.2} ms, {ra:.0} polls/s with an empty history");
    println!(
        "{kind:>8}: the same with {history} finished jobs (loaded in {:.1} s): p50 {p50b:.2} ms, p99 {p99b:.2} ms, {rb:.0} polls/s (p99 ratio {:.2})",
        loaded.as_secs_f64(),
        p99b / p99a
    );
    let (edge, _) = with_jobs_written(edge, store_url, dir, (queued, "queued"), &clients).await;
    let c = clients.clone();
    let handed = Arc::new(AtomicUsize::new(0));
    let h = handed.clone();
    let (_, all) = timed(queued, move |i| {
        let (c, h) = (c.clone(), h.clone());
        async move {
            let n = &c[i % c.len()];
            if let Some(l) = n.poll_job(0).await.unwrap() {
                n.complete_job(&l, true, Some(0)).await.unwrap();
                h.fetch_add(1, Ordering::Relaxed);
            }
        }
    })
    .await;
    let done = handed.load(Ordering::Relaxed);
    let (rss, hwm) = memory(edge.child.id());
    println!(
        "{kind:>8}: lease + complete with {queued} queued: {:.0}/s ({done} done); the edge's memory: {rss:.1} MiB resident, {hwm:.1} MiB at its peak",
        done as f64 / all.as_secs_f64()
    );
    let idle = env_usize("OZ0_EDGE_BENCH_IDLE", 10_000);
    let (p50c, p99c, rc) = polls(&clients, 5).await;
    let (q50c, q99c) = paced_polls(&clients, PACED_PER_S, 10).await;
    let t = Instant::now();
    let waiting = idle_nodes(&edge.url, idle).await;
    let up = t.elapsed().as_secs_f64();
    let (q50d, q99d) = paced_polls(&clients, PACED_PER_S, 10).await;
    let (p50d, p99d, rd) = polls(&clients, 5).await;
    let (rss, hwm) = memory(edge.child.id());
    println!(
        "{kind:>8}: {nodes} nodes polling as fast as they can: p50 {p50c:.2} ms, p99 {p99c:.2} ms, {rc:.0}/s; with {idle} more nodes holding long polls (up in {up:.0} s): p50 {p50d:.2} ms, p99 {p99d:.2} ms, {rd:.0}/s (p99 ratio {:.2}); the edge's memory: {rss:.1} MiB resident, {hwm:.1} MiB at its peak",
        p99d / p99c
    );
    println!(
        "{kind:>8}: polls at {PACED_PER_S}/s (an open loop): p50 {q50c:.2} ms, p99 {q99c:.2} ms; with the {idle} nodes holding long polls: p50 {q50d:.2} ms, p99 {q99d:.2} ms (p99 ratio {:.2})",
        q99d / q99c
    );
    for w in waiting {
        w.abort();
    }
}

/// `n` nodes of tenant `idle`, each waiting for work with one long poll
/// after another on a connection of its own, until their tasks end.
async fn idle_nodes(url: &str, n: usize) -> Vec<tokio::task::JoinHandle<()>> {
    let clients: Arc<Vec<NodeClient>> = Arc::new(
        (0..n)
            .map(|_| NodeClient::new(url, "idle", NodeKey::generate()).unwrap())
            .collect(),
    );
    let c = clients.clone();
    timed(n, move |i| {
        let c = c.clone();
        async move {
            c[i].register(TOKEN, Some(&format!("idle-{i}")))
                .await
                .unwrap();
            c[i].report_facts(&facts()).await.unwrap();
        }
    })
    .await;
    let waiting = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let (c, w) = (clients.clone(), waiting.clone());
        tasks.push(tokio::spawn(async move {
            let req = oz0_edge::wire::PollRequest {
                wait_ms: 15_000,
                below: true,
                ..oz0_edge::wire::PollRequest::tier(1)
            };
            let mut first = true;
            loop {
                let p = c[i].poll_with(&req);
                if first {
                    w.fetch_add(1, Ordering::Relaxed);
                    first = false;
                }
                if p.await.is_err() {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }));
    }
    while waiting.load(Ordering::Relaxed) < n {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Their polls reached the edge and are held.
    tokio::time::sleep(Duration::from_secs(2)).await;
    tasks
}

/// Room for this process's connections: the soft limit of open files
/// raised to the hard one.
fn more_files() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let l = getrlimit(Resource::Nofile);
    let _ = setrlimit(
        Resource::Nofile,
        rustix::process::Rlimit {
            current: l.maximum,
            maximum: l.maximum,
        },
    );
}

fn main() {
    more_files();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = std::env::temp_dir().join(format!("oz0-edge-history-{}", oz0_edge::auth::random_id()));
        std::fs::create_dir_all(&dir).unwrap();
        run("sqlite", &format!("sqlite:{}", dir.join("edge.db").display()), &dir).await;
        match std::env::var("OZ0_EDGE_TEST_POSTGRES") {
            Ok(url) => {
                let d2 = dir.join("pg");
                std::fs::create_dir_all(&d2).unwrap();
                run("postgres", &url, &d2).await;
            }
            Err(_) => println!("SKIPPED postgres: OZ0_EDGE_TEST_POSTGRES is unset (run under crates/oz0-edge/scripts/with-postgres.sh)"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    });
}
