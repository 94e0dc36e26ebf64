//! Benchmark: how fast a real node takes and stops work, through a real
//! `oz0-edge` over TLS (a CA made at run time) and a real `oz0-node run
//! --edge --sandbox none` (tier 0: the figures are the edge's and the
//! daemon's, not a wall's), with its default `--poll-ms`. Not a test:
//! nothing here asserts a time.
//!
//! - submit → running: from the submission until the job's first process
//!   opens a FIFO the benchmark waits on (p50, p99);
//! - cancel → stopped: from `oz0 job cancel`'s request until the job's
//!   last process is gone (the FIFO it held open reads its end).
//!
//! Run as an unprivileged user (the node refuses root), with the binaries
//! built (`cargo build -p oz0-node -p oz0-edge`):
//!
//! ```text
//! OZ0_NODE_BIN=target/debug/oz0-node OZ0_EDGE_BIN=target/debug/oz0-edge \
//!   cargo bench -p oz0-node --bench pickup [-- JOBS]
//! ```
//!
//! JOBS (default 40) jobs are submitted one after another, and a quarter
//! as many are cancelled.

#[path = "../tests/common/mod.rs"]
#[allow(unused_imports, unused_macros)]
mod common;

use std::io::Read;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::fleet::{edge_bin, Edge, Node};
use common::TempDir;
use oz0_edge::routing::Origin;

fn fifo(p: &Path) {
    let st = Command::new("mkfifo").arg(p).status().unwrap();
    assert!(st.success(), "mkfifo {}", p.display());
}

/// The `k`-th per mille of `v`, in ms.
fn pct(v: &mut [Duration], k: usize) -> f64 {
    v.sort();
    let i = (v.len() * k / 1000).min(v.len() - 1);
    v[i].as_secs_f64() * 1000.0
}

fn main() {
    let jobs: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(40);
    let Some(bin) = edge_bin() else {
        eprintln!("SKIPPED: no oz0-edge binary: set OZ0_EDGE_BIN or `cargo build -p oz0-edge`");
        return;
    };
    let edge = Edge::start(&bin, 30);
    // The node's defaults, but for the sandbox (tier 0 starts at once).
    let mut node = Node::start(
        &edge,
        "pickup",
        &["--sandbox", "none", "--poll-ms", "2000", "--jobs", "2"],
    );
    node.wait_log("facts reported", 60);
    std::thread::sleep(Duration::from_millis(500));
    let dir = TempDir::new("pickup");

    let mut started = Vec::new();
    for k in 0..jobs {
        let f = dir.join(&format!("start-{k}"));
        fifo(&f);
        let cmd = format!(": > {}", f.display());
        let t = Instant::now();
        let id = edge
            .submit(
                Origin::Internal,
                serde_json::json!({"command": ["sh", "-c", cmd]}),
            )
            .unwrap();
        // Opening a FIFO to read waits for its writer: the job.
        drop(std::fs::File::open(&f).unwrap());
        started.push(t.elapsed());
        edge.wait_job(&id, 30);
    }
    println!(
        "submit -> running: p50 {:.1} ms, p99 {:.1} ms ({jobs} jobs, one at a time)",
        pct(&mut started, 500),
        pct(&mut started, 990)
    );

    let mut stopped = Vec::new();
    for k in 0..jobs.div_ceil(4) {
        let f = dir.join(&format!("cancel-{k}"));
        fifo(&f);
        let cmd = format!("exec 3> {}; exec sleep 300", f.display());
        let id = edge
            .submit(
                Origin::Internal,
                serde_json::json!({"command": ["sh", "-c", cmd]}),
            )
            .unwrap();
        let mut r = std::fs::File::open(&f).unwrap();
        // Past the start of the job's first held renewal.
        std::thread::sleep(Duration::from_millis(400));
        let t = Instant::now();
        edge.cancel(&id);
        // EOF: every holder of the FIFO's write end (the job's processes)
        // is gone.
        let mut sink = Vec::new();
        r.read_to_end(&mut sink).unwrap();
        stopped.push(t.elapsed());
    }
    println!(
        "cancel -> stopped: p50 {:.1} ms, p99 {:.1} ms ({} cancels)",
        pct(&mut stopped, 500),
        pct(&mut stopped, 990),
        stopped.len()
    );
    drop(node);
}
