//! Benchmark: trivial jobs end to end through a real `oz0-edge` (TLS, a CA
//! made at run time) and a real `oz0-node run --edge --jobs P`, against
//! the ceiling: the same runs started directly with `oz0-node sandbox run`,
//! P at a time, in the same run of the benchmark. Not a test: nothing here
//! asserts a time.
//!
//! - direct: N runs of `true`, each `sandbox run --work <fresh folder>`,
//!   from P threads;
//! - fleet: N jobs `["true"]` submitted at once, timed from the first
//!   submission until the last has ended at the edge (the node's default
//!   sandbox: tier 1 where the machine proves it, as the direct runs),
//!   between two direct rounds whose mean is its baseline;
//! - fleet, 10,000 kept records: the same on a node whose data directory
//!   already holds 10,000 job records (what a node has after a busy week),
//!   to show the rate does not fall as records grow.
//!
//! Each line prints the rate and its ratio to the direct one, the CPU a
//! job costs each process, and the ratio that CPU alone would give (the
//! edge and the client run on the same cores as the node here, and a job
//! costs their CPU too), and the ceiling that gives on these cores: the
//! rate of a node that cost no more CPU a job than a direct run does,
//! with the edge's and the client's CPU as measured. Run as an
//! unprivileged user (the node refuses root), with the binaries built
//! (`cargo build -p oz0-node -p oz0-edge`):
//!
//! ```text
//! OZ0_NODE_BIN=target/debug/oz0-node OZ0_EDGE_BIN=target/debug/oz0-edge \
//!   cargo bench -p oz0-node --bench fleet_rate [-- N [P]]
//! ```
//!
//! N defaults to 300 and P to 2.

#[path = "shared/mod.rs"]
mod shared;

#[path = "../tests/common/mod.rs"]
#[allow(unused_imports, unused_macros)]
mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::fleet::{edge_bin, Edge, Node};
use common::{node, TempDir};
use oz0_edge::routing::Origin;

/// Records put in the node's data directory before the second fleet round.
const KEPT_RECORDS: usize = 10_000;

/// How often the client asks for a job's state while it waits.
const ASK_EVERY: Duration = Duration::from_millis(20);

/// How long a job may take to end before the round fails.
const WAIT_SECS: u64 = 600;

/// N runs of `true` through `sandbox run`, P at a time: runs per second.
fn direct(n: usize, p: usize) -> f64 {
    let dir = TempDir::new("rate-direct");
    let bin = node();
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..p {
            let (dir, bin) = (&dir, &bin);
            s.spawn(move || {
                for k in (t..n).step_by(p) {
                    let work = dir.join(&format!("w{k}"));
                    std::fs::create_dir(&work).unwrap();
                    let st = Command::new(bin)
                        .args(["sandbox", "run", "--work"])
                        .arg(&work)
                        .arg("--data-dir")
                        .arg(dir.join("data"))
                        .args(["--", "true"])
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .status()
                        .unwrap();
                    assert!(st.success(), "sandbox run failed: {st}");
                }
            });
        }
    });
    n as f64 / started.elapsed().as_secs_f64()
}

/// Where a round's CPU went, per job: the edge's, the node's own, its
/// runs' and this process's (submitting and asking for each job's state).
struct Cpu([(Duration, Duration); 3]);

impl Cpu {
    fn now(edge: &Edge, node: &Node) -> Cpu {
        Cpu([
            shared::cpu_of(&edge.child.id().to_string()),
            shared::cpu_of(&node.pid().to_string()),
            shared::cpu_of("self"),
        ])
    }

    /// Milliseconds per job since `before`: the edge's, the node's own,
    /// its runs', this process's.
    fn per_job(&self, before: &Cpu, n: usize) -> [f64; 4] {
        let ms = |a: Duration, b: Duration| (a - b).as_secs_f64() * 1000.0 / n as f64;
        let (e, nd, me) = (self.0[0], self.0[1], self.0[2]);
        let (e0, nd0, me0) = (before.0[0], before.0[1], before.0[2]);
        [
            ms(e.0, e0.0),
            ms(nd.0, nd0.0),
            ms(nd.1, nd0.1),
            ms(me.0, me0.0),
        ]
    }
}

/// N jobs through `edge` and its node: jobs per second, submission to the
/// last end.
///
/// The wait asks the edge little, so that the client's asking costs the
/// round (on the same cores) as little as it can: the last job's state
/// every [`ASK_EVERY`] until it has ended, then whether any job is still
/// queued or leased (waiting on those the same way), then the succeeded
/// jobs, a page at a time, to check that every job is among them.
fn fleet(edge: &Edge, n: usize) -> f64 {
    let started = Instant::now();
    let ids: Vec<String> = (0..n)
        .map(|_| {
            edge.submit(Origin::Internal, serde_json::json!({"command": ["true"]}))
                .unwrap()
        })
        .collect();
    let mut last = ids.last().cloned();
    while let Some(id) = last.take() {
        edge.wait_job_every(&id, WAIT_SECS, ASK_EVERY);
        last = ["queued", "leased"]
            .iter()
            .find_map(|s| edge.jobs(Some(s), None, 1).jobs.pop())
            .map(|j| j.job_id);
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    let mut left: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
    let mut before = None;
    while !left.is_empty() {
        let page = edge.jobs(Some("succeeded"), before.as_deref(), 500);
        for j in &page.jobs {
            left.remove(j.job_id.as_str());
        }
        before = page.next;
        assert!(
            before.is_some() || left.is_empty(),
            "jobs that did not succeed: {left:?}"
        );
    }
    rate
}

/// `count` job records in `data/jobs/`, shaped as the node leaves them.
fn plant_records(data: &Path, count: usize) {
    let jobs = data.join("jobs");
    std::fs::create_dir_all(&jobs).unwrap();
    for k in 0..count {
        let r = jobs.join(format!("j{k:024x}"));
        std::fs::create_dir(&r).unwrap();
        std::fs::write(r.join("stdout"), "a line of output\n").unwrap();
        std::fs::write(r.join("stderr"), "").unwrap();
        std::fs::write(
            r.join("status.json"),
            r#"{"outcome":"exited","exit_code":0}"#,
        )
        .unwrap();
    }
}

/// This process's waited-for children's CPU so far.
fn children_cpu() -> Duration {
    shared::cpu_of("self").1
}

fn start_node(edge: &Edge, tag: &str, p: usize, records: usize) -> Node {
    // The node's folders exist before it starts, so that records can be
    // planted in its data directory (mode 0700, as the node makes it).
    let mut n = Node::start(edge, tag, &["--jobs", &p.to_string()]);
    n.wait_log("facts reported", 120);
    if records > 0 {
        let data = n.dir.join("data");
        plant_records(&data, records);
        let bin = node();
        n.restart(
            &bin,
            edge,
            tag,
            &["--jobs", &p.to_string()],
            &[("OZ0_MICROVM", "off")],
        );
        n.wait_log("facts reported", 120);
    }
    n
}

fn main() {
    let mut nums = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse::<usize>().ok());
    let n = nums.next().unwrap_or(300);
    let p = nums.next().unwrap_or(2);
    let Some(bin) = edge_bin() else {
        eprintln!("SKIPPED: no oz0-edge binary: set OZ0_EDGE_BIN or `cargo build -p oz0-edge`");
        return;
    };
    // Warm the caches of both paths once.
    direct(p * 2, p);
    let edge = Edge::start(&bin, 30);
    // Each fleet round is measured between two direct rounds, and compared
    // with their mean: other load on the machine moves both alike.
    for (tag, records) in [("rate", 0), ("rate-kept", KEPT_RECORDS)] {
        let nd = start_node(&edge, tag, p, records);
        fleet(&edge, p * 2);
        let c0 = children_cpu();
        let before = direct(n, p);
        let direct_cpu = (children_cpu() - c0).as_secs_f64() * 1000.0 / n as f64;
        let cpu = Cpu::now(&edge, &nd);
        let r = fleet(&edge, n);
        let cpu = Cpu::now(&edge, &nd).per_job(&cpu, n);
        let after = direct(n, p);
        let base = (before + after) / 2.0;
        println!(
            "fleet, --jobs {p}, {records} kept records: {r:.1} jobs/s = {:.2}x direct \
             (`sandbox run true`, {p} at a time: {before:.1} before, {after:.1} after; {n} each)",
            r / base
        );
        let [edge_ms, node_ms, runs_ms, client_ms] = cpu;
        println!(
            "  CPU per job: edge {edge_ms:.2} ms, node {node_ms:.2} ms, its runs {runs_ms:.2} ms, \
             client {client_ms:.2} ms; a direct run {direct_cpu:.2} ms"
        );
        // Where both rounds are bound by CPU, their rates go as the CPU a
        // job costs. The edge and this client run on the same cores as the
        // node here (in a fleet, the edge is a machine of its own): a job
        // costs their CPU on top of its node's and its runs'.
        let all = edge_ms + node_ms + runs_ms + client_ms;
        println!(
            "  by CPU alone: {:.2}x (a direct run's CPU / a job's, every process counted); \
             the edge's and the client's share of a job's: {:.2} ms, {:.0}%",
            direct_cpu / all,
            edge_ms + client_ms,
            100.0 * (edge_ms + client_ms) / all
        );
        // The ceiling on these cores: a node that cost nothing above a
        // direct run (its own CPU and its runs' together equal to a direct
        // run's), with the edge's and the client's CPU as measured.
        let ceiling = direct_cpu / (direct_cpu + edge_ms + client_ms);
        println!(
            "  ceiling here, the edge and the client on the same cores: {ceiling:.2}x \
             (a node costing a direct run's CPU a job); this node at {:.2}x of it; \
             the node and its runs {:.2} ms a job against a direct run's {direct_cpu:.2} ms",
            (r / base) / ceiling,
            node_ms + runs_ms
        );
        drop(nd);
    }
}
