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
