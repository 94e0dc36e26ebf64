//! Benchmark: the start-up cost of a run's job limits. Wall time of
//! `oz0-node sandbox run -- /bin/true` with `--memory 256 --processes 64
//! --cpu-seconds 10` against the same run without limits, measured in the
//! same invocation, alternating. Prints medians, p90 and the ratio; asserts
//! nothing.
//!
//! ```text
//! cargo build --release -p oz0-node
//! cargo run --release -p oz0-node --example bench_limits [-- RUNS]
//! ```
//!
//! Run it as the user a node runs as, after `oz0-node setup cgroups --user
//! USER` (the job needs a delegated cgroup). `OZ0_NODE_BIN` names the
//! `oz0-node` binary when it is not next to this example's folder.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::node;

fn run(node: &Path, work: &Path, data: &Path, limits: &[&str]) -> Duration {
    let t = Instant::now();
    let out = Command::new(node)
        .args(["sandbox", "run", "--work"])
        .arg(work)
        .arg("--data-dir")
        .arg(data)
        .args(limits)
        .args(["--", "/bin/true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("oz0-node");
    let took = t.elapsed();
    if !out.status.success() {
        eprintln!(
            "the run failed ({:?}) with {limits:?}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        std::process::exit(1);
    }
    took
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn stats(v: &mut [Duration]) -> (Duration, Duration) {
    v.sort();
    (v[v.len() / 2], v[(v.len() * 9) / 10])
}

fn main() {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(40)
        .max(30);
    let node = node();
    let base = std::env::temp_dir().join(format!("oz0-bench-limits-{}", std::process::id()));
    let (work, data) = (base.join("work"), base.join("data"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    let limits = [
        "--memory",
        "256",
        "--processes",
        "64",
        "--cpu-seconds",
        "10",
    ];

    // Warm-up of both.
    for _ in 0..3 {
        run(&node, &work, &data, &[]);
        run(&node, &work, &data, &limits);
    }
    let (mut plain, mut limited) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for i in 0..runs {
        // Alternate which goes first, so neither always follows the other.
        if i % 2 == 0 {
            plain.push(run(&node, &work, &data, &[]));
            limited.push(run(&node, &work, &data, &limits));
        } else {
            limited.push(run(&node, &work, &data, &limits));
            plain.push(run(&node, &work, &data, &[]));
        }
    }
    let (pm, p90) = stats(&mut plain);
    let (lm, l90) = stats(&mut limited);
    println!("bench_limits: `oz0-node sandbox run -- /bin/true`, {runs} runs each, alternating");
    println!(
        "  without limits (baseline)             median {:7.2} ms  p90 {:7.2} ms",
        ms(pm),
        ms(p90)
    );
    println!(
        "  --memory 256 --processes 64 --cpu-seconds 10  median {:7.2} ms  p90 {:7.2} ms",
        ms(lm),
        ms(l90)
    );
    println!(
        "  ratio (median) {:.2}; extra per run {:+.2} ms",
        ms(lm) / ms(pm),
        ms(lm) - ms(pm)
    );
    let _ = std::fs::remove_dir_all(&base);
}
