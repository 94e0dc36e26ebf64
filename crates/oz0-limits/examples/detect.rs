//! Prints what the job probe finds on this machine, as JSON (what
//! `oz0-node sandbox check --json` reports as its cgroup facts).
//! `cargo run -p oz0-limits --example detect [-- --cgroup-root P]`

use oz0_limits::{probe_mode, ProbeOptions};

fn main() {
    let mut args = std::env::args().skip(1);
    let mut opts = ProbeOptions::default();
    while let Some(a) = args.next() {
        if a == "--cgroup-root" {
            opts.cgroup_root = args.next().map(Into::into);
        }
    }
    let r = probe_mode(&opts);
    println!("{}", serde_json::to_string_pretty(&r).expect("json"));
}
