//! Start-up cost of a job: create + place + remove of a run's cgroup(s),
//! against a plain fork/exec measured in the same run.
//!
//! Both variants start the same child (`head -c1`, which exits after one byte
//! on its stdin) so that the job variant can place it before it ends; the job
//! variant adds `Job::create` (with memory and process limits), placing the
//! child's pid in every hierarchy, and `Job::remove`. A plain `/bin/true`
//! fork/exec is printed for scale. Run: `cargo bench -p oz0-jobs` (needs a
//! usable cgroup mode: root, or a delegated subtree).

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use oz0_jobs::{probe_mode, Job, JobMode, ProbeOptions, RunId};
use oz0_policy::Limits;

const ROUNDS: u32 = 200;

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

fn per_round(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6 / f64::from(ROUNDS)
}

fn main() {
    let probe = probe_mode(&ProbeOptions::default());
    if let JobMode::Unavailable { reason, fix } = &probe.mode {
        println!("job_start: skipped: {reason} — {fix}");
        return;
    }
    let limits = Limits {
        memory_mib: Some(64),
        processes: Some(8),
        cpu_seconds: None,
        timeout_seconds: None,
    };
    // Warm up both paths.
    for i in 0..10 {
        finish(spawn_wait_byte());
        let job = Job::create(
            &probe.mode,
            &RunId::new(&format!("bw{i}")).unwrap(),
            &limits,
        )
        .expect("create");
        job.remove().expect("remove");
    }

    let t = Instant::now();
    for _ in 0..ROUNDS {
        Command::new("/bin/true").status().expect("true");
    }
    let plain_true = t.elapsed();

    let t = Instant::now();
    for _ in 0..ROUNDS {
        finish(spawn_wait_byte());
    }
    let plain = t.elapsed();

    let t = Instant::now();
    for i in 0..ROUNDS {
        let job = Job::create(&probe.mode, &RunId::new(&format!("b{i}")).unwrap(), &limits)
            .expect("create");
        let c = spawn_wait_byte();
        job.place_pid(c.id()).expect("place");
        finish(c);
        job.remove().expect("remove");
    }
    let with_job = t.elapsed();

    let t = Instant::now();
    for i in 0..ROUNDS {
        let job = Job::create(&probe.mode, &RunId::new(&format!("c{i}")).unwrap(), &limits)
            .expect("create");
        job.remove().expect("remove");
    }
    let job_only = t.elapsed();

    println!(
        "job_start: mode {} ({ROUNDS} rounds each)",
        probe.facts.mode
    );
    println!(
        "  fork/exec /bin/true:             {:8.1} us",
        per_round(plain_true)
    );
    println!(
        "  fork/exec head -c1 (baseline):   {:8.1} us",
        per_round(plain)
    );
    println!(
        "  same + job create/place/remove:  {:8.1} us",
        per_round(with_job)
    );
    println!(
        "  job create+remove alone:         {:8.1} us",
        per_round(job_only)
    );
    println!(
        "  ratio with job / baseline:       {:8.2}x  (extra {:.1} us per run)",
        with_job.as_secs_f64() / plain.as_secs_f64(),
        per_round(with_job) - per_round(plain)
    );
    println!(
        "  ratio job create+remove / fork-exec /bin/true: {:.2}x",
        job_only.as_secs_f64() / plain_true.as_secs_f64()
    );
}
