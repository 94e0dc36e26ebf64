//! A job's life beyond its cgroup layout: the supervisor's CPU-time and
//! wall-time kills, cleanup of stale jobs, removal on drop, and limits
//! refused before anything is made.

use std::time::{Duration, Instant};

use super::*;

#[test]
fn supervisor_kills_the_job_over_its_cpu_seconds() {
    let fs = v2_host(true);
    let mode = JobMode::V2 { root: OWN.into() };
    let job = Job::create_with(fs.clone(), &mode, &run("r1"), &limits()).unwrap();
    let d = PathBuf::from(OWN).join(job.name());
    fs.add_process(&d.to_string_lossy(), 6000);
    let t0 = Instant::now();
    let mut sup = Supervisor::new(&limits(), t0);
    assert!(sup.is_active());
    assert!(sup.describe().contains("CPU time 1 s"));
    fs.poke(&d.join("cpu.stat"), "usage_usec 990000\n");
    assert_eq!(sup.check(Some(&job), t0).unwrap(), None);
    // Little budget left: poll sooner.
    assert!(sup.next_poll(t0).unwrap() < Duration::from_millis(100));
    fs.poke(&d.join("cpu.stat"), "usage_usec 1000001\n");
    let v = sup.check(Some(&job), t0).unwrap();
    assert_eq!(
        v,
        Some(Verdict::CpuTime {
            used_usec: 1_000_001,
            limit_usec: 1_000_000
        })
    );
    assert_eq!(fs.killed(), vec![6000]);
    assert_eq!(job.outcome().limit_hit, Some(LimitHit::CpuTime));
}

#[test]
fn supervisor_kills_at_the_timeout() {
    let fs = v2_host(true);
    let mode = JobMode::V2 { root: OWN.into() };
    let job = Job::create_with(fs.clone(), &mode, &run("r1"), &limits()).unwrap();
    fs.add_process(&format!("{OWN}/{}", job.name()), 6001);
    let t0 = Instant::now();
    let mut sup = Supervisor::new(&limits(), t0);
    let v = sup.check(Some(&job), t0 + Duration::from_secs(11)).unwrap();
    assert_eq!(v, Some(Verdict::Timeout { after_seconds: 10 }));
    assert_eq!(fs.killed(), vec![6001]);
}

#[test]
fn cleanup_removes_only_jobs_of_dead_nodes() {
    let fs = v2_host(true);
    let mode = JobMode::V2 { root: OWN.into() };
    let live = Job::create_with(fs.clone(), &mode, &run("live"), &limits()).unwrap();
    // A job of node pid 999 (dead), and one of a reused pid 4243 (other start time).
    for n in ["oz0-job-999-5-old", "oz0-job-4243-7-reused"] {
        fs.make_cgroup(&format!("{OWN}/{n}"), true);
    }
    fs.add_process(&format!("{OWN}/oz0-job-999-5-old"), 7000);
    let rep = cleanup_stale_with(fs.clone(), &mode);
    assert_eq!(rep.live, 1);
    assert_eq!(rep.removed.len(), 2, "{rep:?}");
    assert!(rep.failed.is_empty());
    assert_eq!(fs.killed(), vec![7000]);
    assert!(fs.exists(&PathBuf::from(OWN).join(live.name())));
    // The node's leaf is not a job.
    assert!(fs.exists(&PathBuf::from(OWN).join("oz0-node")));
    live.remove().unwrap();
}

#[test]
fn dropping_a_job_removes_it() {
    let fs = v2_host(true);
    let mode = JobMode::V2 { root: OWN.into() };
    {
        let job = Job::create_with(fs.clone(), &mode, &run("r1"), &limits()).unwrap();
        fs.add_process(&format!("{OWN}/{}", job.name()), 5000);
    }
    assert_eq!(fs.killed(), vec![5000]);
    no_jobs_left(&fs, CG);
}

#[test]
fn limits_out_of_range_are_refused() {
    let fs = v1_host(1001, true);
    let mode = probe_mode_with(fs.as_ref(), &ProbeOptions::default()).mode;
    let l = Limits {
        processes: Some(0),
        ..Default::default()
    };
    assert!(matches!(
        Job::create_with(fs.clone(), &mode, &run("r1"), &l),
        Err(JobError::Limits(_))
    ));
    no_jobs_left(&fs, "/sys/fs/cgroup");
}
