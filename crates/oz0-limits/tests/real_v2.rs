//! Real-kernel tests of cgroup v2 jobs, as root, under a temporary cgroup
//! `<cgroup2 mount>/oz0-itest-<pid>-<tag>`.
//!
//! Where that cgroup offers memory and pids (a v2 host), the full limits are
//! tested; where it does not (a hybrid host whose controllers are bound to v1
//! hierarchies), the test shows that asking for them fails closed, and still
//! tests what v2 gives without controllers: placement, `cpu.stat`,
//! `cgroup.kill`, `cgroup.events` and removal.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;
use oz0_limits::{Job, JobError, JobMode, LimitHit, RunId, Supervisor, Verdict};
use oz0_policy::Limits;

/// The cgroup2 mount point, from /proc/self/mountinfo.
fn cgroup2_mount() -> Option<PathBuf> {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mi.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        if !right.starts_with("cgroup2 ") {
            return None;
        }
        left.split(' ').nth(4).map(PathBuf::from)
    })
}

fn temp_v2(test: &str, tag: &str) -> Option<(TempTree, PathBuf)> {
    if !is_root() {
        skip(test, "needs root");
        return None;
    }
    if !std::path::Path::new(PY).exists() {
        skip(test, "needs /usr/bin/python3");
        return None;
    }
    let Some(m) = cgroup2_mount() else {
        skip(test, "no cgroup2 mount");
        return None;
    };
    let dir = m.join(format!("oz0-itest-{}-{tag}", std::process::id()));
    if let Err(e) = std::fs::create_dir(&dir) {
        skip(test, &format!("cannot create {}: {e}", dir.display()));
        return None;
    }
    let t = TempTree {
        dirs: vec![dir.clone()],
        mode: JobMode::V2 { root: dir.clone() },
    };
    Some((t, m))
}

fn offers(dir: &std::path::Path, ctl: &str) -> bool {
    std::fs::read_to_string(dir.join("cgroup.controllers"))
        .map(|s| s.split_whitespace().any(|c| c == ctl))
        .unwrap_or(false)
}

#[test]
fn root_v2_cpu_seconds_kill_and_remove() {
    const T: &str = "root_v2_cpu_seconds";
    let Some((t, _)) = temp_v2(T, "cpu") else {
        return;
    };
    if !t.dirs[0].join("cgroup.kill").exists() {
        skip(T, "kernel without cgroup.kill (before 5.14)");
        return;
    }
    let l = Limits {
        cpu_seconds: Some(1),
        ..Default::default()
    };
    let job = Job::create(&t.mode, &RunId::new("cpu").unwrap(), &l).expect("create");
    assert_eq!(job.version_name(), "cgroup-v2");
    let mut c = spawn_py("import os\nif os.fork() == 0:\n    pass\nwhile True:\n    pass\n");
    job.place_pid(c.id()).unwrap();
    go(&mut c);
    let t0 = Instant::now();
    let mut sup = Supervisor::new(&l, t0);
    let v = loop {
        if let Some(v) = sup.check(Some(&job), Instant::now()).unwrap() {
            break v;
        }
        std::thread::sleep(sup.next_poll(Instant::now()).unwrap());
    };
    let Verdict::CpuTime { used_usec, .. } = v else {
        panic!("{v:?}")
    };
    // Two spinners on two CPUs: the poll interval shrinks near the limit.
    assert!(
        used_usec > 1_000_000 && used_usec < 1_400_000,
        "used {used_usec}"
    );
    job.wait_empty(Duration::from_secs(5))
        .expect("cgroup.kill emptied the job");
    let st = c.wait().unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&st), Some(9));
    assert_eq!(job.outcome().limit_hit, Some(LimitHit::CpuTime));
    let paths = job.paths();
    job.remove().unwrap();
    assert!(!paths[0].exists());
}

#[test]
fn root_v2_limits_enforced_or_refused() {
    const T: &str = "root_v2_limits";
    let Some((t, _)) = temp_v2(T, "lim") else {
        return;
    };
    let root = t.dirs[0].clone();
    if offers(&root, "pids") && offers(&root, "memory") {
        pids_limit_holds(&t.mode, "v2pids");
        return;
    }
    // Controllers bound elsewhere: every such limit is refused, nothing is made.
    for (l, name) in [
        (limits(Some(64), None, None), "--memory"),
        (limits(None, Some(8), None), "--processes"),
    ] {
        let e = Job::create(&t.mode, &RunId::new("refused").unwrap(), &l).unwrap_err();
        match &e {
            JobError::Unenforceable { limit, .. } => assert_eq!(*limit, name),
            other => panic!("{other}"),
        }
        eprintln!("{T}: refused as expected: {e}");
    }
    let left: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().unwrap().is_dir())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
