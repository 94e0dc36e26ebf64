//! Benchmark: the self-test's total and per-property times (median of runs),
//! as `oz0-node sandbox check --self-test --json` reports them. Not a test.
//!
//! `cargo bench -p oz0-node --bench selftest [-- RUNS]` (as the node's user).

mod shared;

use std::collections::BTreeMap;
use std::process::Command;

fn main() {
    let runs = shared::runs(10, 3);
    let (node, _) = shared::node_bin();
    let mut per: BTreeMap<(usize, String), Vec<u64>> = BTreeMap::new();
    let mut totals = Vec::new();
    for _ in 0..runs {
        let out = Command::new(&node)
            .args(["sandbox", "check", "--self-test", "--json"])
            .output()
            .expect("runs");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(v["tier"], 1, "the self-test must pass to be measured: {v}");
        totals.push(v["self_test"]["total_ms"].as_u64().unwrap());
        for (i, l) in v["self_test"]["lines"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
        {
            per.entry((i, l["property"].as_str().unwrap().to_string()))
                .or_default()
                .push(l["ms"].as_u64().unwrap());
        }
    }
    let med = |v: &mut Vec<u64>| {
        v.sort();
        v[v.len() / 2]
    };
    println!("selftest: {runs} runs; median per property (ms):");
    for ((_, p), mut v) in per {
        let max = *v.iter().max().unwrap();
        println!("  {p:<16} {:>5}  (max {max})", med(&mut v));
    }
    let max = *totals.iter().max().unwrap();
    println!(
        "  total            {:>5}  (max {max}; target < 2000)",
        med(&mut totals)
    );
}
