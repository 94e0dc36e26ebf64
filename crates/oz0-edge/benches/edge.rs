//! Report ingestion and routing decisions per second with 1,000 simulated
//! nodes, over HTTP against a real edge, for SQLite and (when
//! `OZ0_EDGE_TEST_POSTGRES` is set, e.g. under scripts/with-postgres.sh)
//! PostgreSQL; prints PostgreSQL's figures as a ratio of SQLite's.
//!
//! `cargo bench -p oz0-edge --bench edge` (`OZ0_EDGE_BENCH_NODES` to change
//! the node count).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use oz0_edge::auth::TokenDigest;
use oz0_edge::client::{NodeClient, NodeKey, OperatorClient};
use oz0_edge::routing::{JobPayload, JobRequest, Origin};
use oz0_edge::{Edge, EdgeConfig, Store};
use oz0_policy::facts::{
    Mechanism, Microvm, MicrovmReason, NodeFacts, Os, Platform, SelfTest, FACTS_SCHEMA,
};

const CONCURRENCY: usize = 32;
const TOKEN: &str = "bench-enrolment-0123456789";
const OPERATOR: &str = "bench-operator-0123456789";

fn facts(i: usize) -> NodeFacts {
    let tier1 = i % 4 != 0;
    let mut f = NodeFacts {
        schema: FACTS_SCHEMA,
        node_version: "0.1.0".into(),
        platform: Platform {
            os: Os::Linux,
            arch: "x86_64".into(),
            build_raw: "6.1.0-28-amd64".into(),
        },
        tier_proven: u8::from(tier1),
        tier_routed: u8::from(tier1),
        mechanism: Mechanism {
            kind: "bubblewrap".into(),
            bwrap_version: Some("0.8.0".into()),
            landlock_abi: Some(7),
            seccomp: true,
            cgroup_mode: Some("cgroup_v2".into()),
            ..Default::default()
        },
        self_test: if tier1 {
            SelfTest::Passed
        } else {
            SelfTest::NotRun
        },
        fix: None,
        microvm: Microvm {
            ready: false,
            reason: Some(MicrovmReason::NoKvmAccess),
            pinned: None,
            backend: None,
        },
        oci: Default::default(),
        labels: BTreeMap::new(),
    };
    // Containers run inside tier 1: a tier-0 node offers none (the edge
    // would drop the claim, and log it, at each report).
    f.oci = oz0_policy::facts::Oci {
        ready: tier1,
        runtimes: if tier1 {
            vec![oz0_policy::facts::OciRuntime::Tier1]
        } else {
            Vec::new()
        },
        reason: None,
    };
    f.derive_labels();
    f
}

/// Runs `f(i)` for `0..n` with CONCURRENCY tasks; returns operations per second.
async fn rate<F, Fut>(n: usize, f: F) -> f64
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let f = Arc::new(f);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CONCURRENCY {
        let (f, next) = (f.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    break;
                }
                f(i).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    n as f64 / start.elapsed().as_secs_f64()
}

struct Figures {
    reports: f64,
    submits: f64,
    leases: f64,
}

async fn run(kind: &str, url: &str, nodes: usize) -> Figures {
    let mut tenants = BTreeMap::new();
    tenants.insert("bench".to_string(), TokenDigest::new(TOKEN));
    let edge = Edge::new(
        Store::open(url).await.unwrap(),
        EdgeConfig::new(tenants, vec![TokenDigest::new(OPERATOR)]),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    // The simulated nodes all come from loopback, each on a connection of
    // its own: the per-address cap (64, for nodes behind one address) is
    // raised to hold them all.
    let limits = oz0_edge::serve::Limits {
        max_connections_per_client: nodes + 2 * CONCURRENCY,
        ..Default::default()
    };
    let server = tokio::spawn(oz0_edge::serve_with(listener, edge, None, limits));

    let clients: Arc<Vec<NodeClient>> = Arc::new(
        (0..nodes)
            .map(|_| NodeClient::new(&base, "bench", NodeKey::generate()).unwrap())
            .collect(),
    );
    let c = clients.clone();
    rate(nodes, move |i| {
        let c = c.clone();
        async move {
            c[i].register(TOKEN, Some(&format!("node-{i}")))
                .await
                .unwrap();
        }
    })
    .await;
    let c = clients.clone();
    let reports = rate(nodes * 3, move |i| {
        let c = c.clone();
        async move {
            c[i % c.len()]
                .report_facts(&facts(i % c.len()))
                .await
                .unwrap();
        }
    })
    .await;
    let op = Arc::new(OperatorClient::new(&base, OPERATOR).unwrap());
    let jobs = nodes * 2;
    let o = op.clone();
    let submits = rate(jobs, move |i| {
        let o = o.clone();
        async move {
            let origin = if i % 2 == 0 {
                Origin::Webhook
            } else {
                Origin::Internal
            };
            let req = JobRequest::new(
                origin,
                JobPayload::Shell(oz0_edge::wire::ShellJob {
                    command: vec!["true".into(), i.to_string()],
                    ..Default::default()
                }),
            );
            o.submit_job("bench", &req).await.unwrap();
        }
    })
    .await;
    // Every poll is a routing decision; count only those that handed out a job.
    let handed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (c, h) = (clients.clone(), handed.clone());
    let start = Instant::now();
    rate(jobs, move |i| {
        let (c, h) = (c.clone(), h.clone());
        async move {
            let n = &c[i % c.len()];
            let tier = u8::from((i % c.len()) % 4 != 0);
            for t in (0..=tier).rev() {
                if let Some(l) = n.poll_job(t).await.unwrap() {
                    h.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let _ = l;
                    break;
                }
            }
        }
    })
    .await;
    let leases =
        handed.load(std::sync::atomic::Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64();
    server.abort();
    println!("{kind:>8}: {nodes} nodes: {reports:>8.0} reports/s  {submits:>8.0} job submissions/s (eligibility decided)  {leases:>8.0} leases/s ({} of {jobs} handed out)", handed.load(std::sync::atomic::Ordering::Relaxed));
    Figures {
        reports,
        submits,
        leases,
    }
}

fn main() {
    let nodes: usize = std::env::var("OZ0_EDGE_BENCH_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = std::env::temp_dir().join(format!("oz0-edge-bench-{}", oz0_edge::auth::random_id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sqlite = run("sqlite", &format!("sqlite:{}", dir.join("edge.db").display()), nodes).await;
        std::fs::remove_dir_all(&dir).unwrap();
        match std::env::var("OZ0_EDGE_TEST_POSTGRES") {
            Ok(url) => {
                let pg = run("postgres", &url, nodes).await;
                println!(
                    "postgres/sqlite: reports {:.2}x, job submissions {:.2}x, leases {:.2}x",
                    pg.reports / sqlite.reports,
                    pg.submits / sqlite.submits,
                    pg.leases / sqlite.leases
                );
            }
            Err(_) => println!("SKIPPED postgres: OZ0_EDGE_TEST_POSTGRES is unset (run under crates/oz0-edge/scripts/with-postgres.sh)"),
        }
    });
}
