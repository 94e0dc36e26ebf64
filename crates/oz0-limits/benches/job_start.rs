//! Start-up cost of a job: create + place + remove of a run's cgroup(s),
//! against a plain fork/exec measured in the same run.
//!
//! Both variants start the same child (`head -c1`, which exits after one byte
//! on its stdin) so that the job variant can place it before it ends; the job
//! variant adds `Job::create` (with memory and process limits), placing the
//! child's pid in every hierarchy, and `Job::remove`. A plain `/bin/true`
//! fork/exec is printed for scale. Rounds alternate between the variants and
//! medians are reported, so background load hits both alike.
//!
//! Run: `cargo bench -p oz0-limits` (needs a usable cgroup mode: root, or a
//! delegated subtree). As root it works under a temporary folder
//! `oz0-bench-<pid>` in each hierarchy and removes it at the end.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use oz0_limits::{probe_mode, Job, JobMode, ProbeOptions, RunId};
use oz0_policy::Limits;

const ROUNDS: usize = 200;

fn spawn_wait_byte() -> std::process::Child {
    Command::new("head")
        .arg("-c1")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn head")
}

fn finish(mut c: std::process::Child) {
    c.stdin
        .take()
        .expect("stdin")
        .write_all(b"x")
        .expect("write");
    c.wait().expect("wait");
}

fn median(v: &mut [Duration]) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e6
}

fn parents(mode: &JobMode) -> Vec<PathBuf> {
    match mode {
        JobMode::V2 { root } => vec![root.clone()],
        JobMode::V1 {
            memory,
            pids,
            cpuacct,
            freezer,
        } => [Some(memory), Some(pids), cpuacct.as_ref(), freezer.as_ref()]
            .into_iter()
            .flatten()
            .cloned()
            .collect(),
        JobMode::Unavailable { .. } => Vec::new(),
    }
}

fn main() {
    let is_root = rustix::process::geteuid().is_root();
    let opts = ProbeOptions {
        cgroup_root: is_root.then(|| PathBuf::from(format!("oz0-bench-{}", std::process::id()))),
        version: None,
    };
    let probe = probe_mode(&opts);
    if let JobMode::Unavailable { reason, fix } = &probe.mode {
        println!("job_start: skipped: {reason} — {fix}");
        return;
    }
    let made: Vec<PathBuf> = parents(&probe.mode)
        .into_iter()
        .filter(|p| !p.exists())
        .collect();
    let limits = Limits {
        memory_mib: Some(64),
        processes: Some(8),
        cpu_seconds: None,
        timeout_seconds: None,
        tmp_mib: None,
    };
    let run = |tag: &str, i: usize| RunId::new(&format!("{tag}{i}")).unwrap();
    // Warm up.
    for i in 0..10 {
        finish(spawn_wait_byte());
        Job::create(&probe.mode, &run("w", i), &limits)
            .expect("create")
            .remove()
            .expect("remove");
    }
    let (mut t_true, mut t_plain, mut t_job) = (Vec::new(), Vec::new(), Vec::new());
    let (mut t_create, mut t_place, mut t_remove) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..ROUNDS {
        let t = Instant::now();
        Command::new("/bin/true").status().expect("true");
        t_true.push(t.elapsed());

        let t = Instant::now();
        finish(spawn_wait_byte());
        t_plain.push(t.elapsed());

        let t = Instant::now();
        let job = Job::create(&probe.mode, &run("b", i), &limits).expect("create");
        let t1 = Instant::now();
        let c = spawn_wait_byte();
        job.place_pid(c.id()).expect("place");
        finish(c);
        let t2 = Instant::now();
        job.remove().expect("remove");
        let t3 = Instant::now();
        t_job.push(t3 - t);
        t_create.push(t1 - t);
        t_place.push(t2 - t1);
        t_remove.push(t3 - t2);
    }
    for p in made.iter().rev() {
        let _ = std::fs::remove_dir(p);
    }
    let (tt, tp, tj) = (
        median(&mut t_true),
        median(&mut t_plain),
        median(&mut t_job),
    );
    println!(
        "job_start: mode {} ({ROUNDS} alternating rounds, medians)",
        probe.facts.mode
    );
    println!("  fork/exec /bin/true:                {tt:8.1} us");
    println!("  fork/exec head -c1 (baseline):      {tp:8.1} us");
    println!("  same in a job (create+place+remove): {tj:7.1} us");
    println!(
        "    create {:.1} us, spawn+place+exit {:.1} us, remove {:.1} us",
        median(&mut t_create),
        median(&mut t_place),
        median(&mut t_remove)
    );
    println!(
        "  ratio job / baseline: {:.2}x (extra {:.1} us per run); extra / fork-exec /bin/true: {:.2}x",
        tj / tp,
        tj - tp,
        (tj - tp) / tt
    );
}
