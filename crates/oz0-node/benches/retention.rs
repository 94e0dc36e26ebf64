//! Benchmark: what the job records' retention (`src/edge/retention.rs`)
//! costs the node after each job, with 10, 1,000 and 10,000 records kept,
//! walking `<data-dir>/jobs/` whole at every sweep (as the node did before
//! it indexed its records, and still does at its start) against the index.
//! Not a test: nothing here asserts a time.
//!
//! Each "job" leaves a record as a job does (stdout, stderr and
//! status.json), untimed; then its sweep is timed:
//!
//! - at the limit: the size limit holds exactly the records there were, so
//!   every sweep removes the oldest one (a node that has run long enough);
//! - under it: nothing goes (a node whose records fit).
//!
//! Both run in the same folder in the same run, one after the other; the
//! figures are medians per job, and the ratio is walk / index. For scale,
//! the removal of one record alone (`remove_dir_all`), which every sweep at
//! the limit does whichever way it finds the record. The index's memory is
//! read from the process's resident size around its first walk.
//!
//! `cargo bench -p oz0-node --bench retention [-- JOBS]` (JOBS per case,
//! default 20).

// (Its tests' `use super::*` is unused in this crate's test build.)
#[path = "../src/record.rs"]
#[allow(dead_code, unused_imports)]
mod record;

/// What `retention.rs` takes from its sibling `job.rs` (its `super` is
/// this crate's root here).
mod job {
    pub use crate::record::safe_id;
}

#[path = "../src/edge/retention.rs"]
#[allow(dead_code)]
mod retention;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use retention::{Records, Retention};

/// A record as a job leaves it, last written at `t`: its bytes.
fn leave(jobs: &Path, id: &str, t: SystemTime) -> u64 {
    let d = jobs.join(id);
    fs::create_dir_all(&d).unwrap();
    let files: [(&str, usize); 3] = [("stdout", 1024), ("stderr", 64), ("status.json", 300)];
    for (name, len) in files {
        fs::write(d.join(name), vec![b'x'; len]).unwrap();
        fs::File::open(d.join(name))
            .unwrap()
            .set_modified(t)
            .unwrap();
    }
    fs::File::open(&d).unwrap().set_modified(t).unwrap();
    files.iter().map(|(_, len)| *len as u64).sum()
}

/// The resident size of this process, in bytes.
fn rss() -> u64 {
    let s = fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The median time of `jobs` sweeps, each after one more job's record.
fn per_job(
    rs: &Records,
    dir: &Path,
    r: Retention,
    jobs: usize,
    tag: &str,
    at_limit: bool,
) -> Duration {
    let running = Mutex::new(BTreeSet::new());
    let mut times = Vec::with_capacity(jobs);
    for j in 0..jobs {
        let id = format!("{tag}{j}");
        leave(dir, &id, SystemTime::now());
        let t = Instant::now();
        let s = rs.sweep(Some(&id), r, &running);
        times.push(t.elapsed());
        assert!(s.failed.is_empty() && s.unread.is_empty(), "{s:?}");
        assert_eq!(s.over, usize::from(at_limit), "{s:?}");
    }
    median(times)
}

fn main() {
    let jobs: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20)
        .max(3);
    let base = std::env::temp_dir().join(format!("oz0-bench-retention-{}", std::process::id()));
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!("retention: median per job ({jobs} jobs a case), µs");
    println!(
        "  {:>7}  {:<9} {:>11} {:>11} {:>8}",
        "records", "case", "walk", "index", "walk/ix"
    );
    for n in [10usize, 1_000, 10_000] {
        let dir = base.join(format!("{n}")).join("jobs");
        fs::create_dir_all(&dir).unwrap();
        let start = SystemTime::now() - Duration::from_secs(86_400);
        let mut bytes = 0;
        for i in 0..n {
            bytes += leave(
                &dir,
                &format!("r{i}"),
                start + Duration::from_secs(i as u64),
            );
        }
        let removal = median(
            (0..jobs)
                .map(|j| {
                    let d = dir.join(format!("gone{j}"));
                    leave(&dir, &format!("gone{j}"), start);
                    let t = Instant::now();
                    fs::remove_dir_all(&d).unwrap();
                    t.elapsed()
                })
                .collect(),
        );
        let running = Mutex::new(BTreeSet::new());
        for at_limit in [true, false] {
            let r = Retention {
                max_age: Duration::from_secs(7 * 86_400),
                max_bytes: if at_limit { bytes } else { u64::MAX },
            };
            let case = if at_limit { "at limit" } else { "under it" };
            // The walk at every sweep.
            let walked = Records::with(dir.clone(), Duration::ZERO, usize::MAX);
            walked.sweep(None, r, &running);
            let walk = per_job(&walked, &dir, r, jobs, &format!("w{at_limit}x"), at_limit);
            // The index, after the start's walk.
            let before = rss();
            let indexed = Records::new(dir.clone());
            let t = Instant::now();
            indexed.sweep(None, r, &running);
            let first = t.elapsed();
            let grown = rss().saturating_sub(before);
            let index = per_job(&indexed, &dir, r, jobs, &format!("i{at_limit}x"), at_limit);
            println!(
                "  {n:>7}  {case:<9} {:>11.1} {:>11.1} {:>8.1}",
                us(walk),
                us(index),
                walk.as_secs_f64() / index.as_secs_f64()
            );
            if at_limit {
                println!(
                    "           (one record's removal alone: {:.1} µs; the start's walk: {:.1} ms; the index grew the process by {} KiB, {} bytes a record)",
                    us(removal),
                    first.as_secs_f64() * 1e3,
                    grown >> 10,
                    grown / n as u64
                );
            }
        }
    }
    let _ = fs::remove_dir_all(&base);
}
