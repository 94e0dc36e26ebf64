//! What the node's start-up benchmarks share: the `RUNS` argument, the
//! node binary they measure, and the figures they print. Each benchmark
//! uses part of it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

/// The first argument that is a number (`cargo bench … -- RUNS`), else
/// `default`; at least `least`.
pub fn runs(default: usize, least: usize) -> usize {
    std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(default)
        .max(least)
}

/// The node binary measured: `OZ0_NODE_BIN` (the shipped build, from
/// `scripts/build-node --release`), else cargo's; and whether it was
/// named.
pub fn node_bin() -> (PathBuf, bool) {
    match std::env::var_os("OZ0_NODE_BIN") {
        Some(p) => (PathBuf::from(p), true),
        None => (PathBuf::from(env!("CARGO_BIN_EXE_oz0-node")), false),
    }
}

/// The median of `v`.
pub fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The 90th percentile of `v`.
pub fn p90(v: &mut [Duration]) -> Duration {
    v.sort();
    v[(v.len() * 9) / 10]
}

/// A process's CPU so far from `/proc/<pid>/stat` (`pid` may be `self`):
/// its own (user plus system) and its waited-for children's (the kernel
/// sums them in nanoseconds and rounds only what it shows, to clock ticks).
pub fn cpu_of(pid: &str) -> (Duration, Duration) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("a stat file");
    let rest = &stat[stat.rfind(')').expect("a stat line") + 2..];
    let f: Vec<u64> = rest
        .split(' ')
        .skip(11)
        .take(4)
        .map(|v| v.parse().expect("a tick count"))
        .collect();
    let hz = rustix::param::clock_ticks_per_second() as f64;
    let t = |a: u64, b: u64| Duration::from_secs_f64((a + b) as f64 / hz);
    (t(f[0], f[1]), t(f[2], f[3]))
}
