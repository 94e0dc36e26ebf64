//! Helpers shared by the real-kernel tests.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use oz0_limits::{probe_mode, CgroupVersion, Job, JobMode, LimitHit, ProbeOptions, RunId};
use oz0_policy::Limits;

pub const PY: &str = "/usr/bin/python3";
pub const USER: &str = "oz0test";
/// A second unprivileged user, beside the first (scripts/test makes it).
pub const USER2: &str = "oz0test2";
/// Set (to the delegated folder's name) when this binary runs as `oz0test`.
pub const CHILD_ENV: &str = "OZ0_JOBS_ITEST_DELEGATED";

pub fn must_work() -> bool {
    std::env::var("OZ0_MUST_WORK").as_deref() == Ok("1")
}

/// Skips (prints why) or, under OZ0_MUST_WORK=1, fails.
pub fn skip(test: &str, reason: &str) {
    assert!(
        !must_work(),
        "{test}: required (OZ0_MUST_WORK=1) but {reason}"
    );
    eprintln!("{test}: skipped: {reason}");
}

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A temporary folder in every v1 hierarchy, removed on drop with whatever is in it.
pub struct TempTree {
    pub dirs: Vec<PathBuf>,
    pub mode: JobMode,
}

impl TempTree {
    /// As root: a v1 mode whose parents are `<hierarchy>/oz0-itest-<pid>-<tag>`.
    pub fn new(test: &str, tag: &str) -> Option<TempTree> {
        if !is_root() {
            skip(test, "needs root");
            return None;
        }
        if !Path::new(PY).exists() {
            skip(test, "needs /usr/bin/python3");
            return None;
        }
        let name = format!("oz0-itest-{}-{tag}", std::process::id());
        let probe = probe_mode(&ProbeOptions {
            cgroup_root: Some(PathBuf::from(&name)),
            version: Some(CgroupVersion::V1),
        });
        let JobMode::V1 {
            memory,
            pids,
            cpuacct,
            freezer,
        } = &probe.mode
        else {
            skip(test, &format!("no cgroup v1 here: {}", probe.facts.why));
            return None;
        };
        let mut dirs = vec![memory.clone(), pids.clone()];
        dirs.extend(cpuacct.iter().cloned());
        dirs.extend(freezer.iter().cloned());
        Some(TempTree {
            dirs,
            mode: probe.mode.clone(),
        })
    }
}

pub fn kill_and_rmdir(dir: &Path) {
    if !dir.exists() {
        return;
    }
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                kill_and_rmdir(&e.path());
            }
        }
    }
    for _ in 0..200 {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for p in procs
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            if let Some(pid) = rustix::process::Pid::from_raw(p) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        if std::fs::remove_dir(dir).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!("warning: could not remove {}", dir.display());
}

impl Drop for TempTree {
    fn drop(&mut self) {
        for d in &self.dirs {
            kill_and_rmdir(d);
        }
    }
}

/// A python child that waits for one line on stdin before running `code`, so
/// it can be placed in the job first.
pub fn spawn_py(code: &str) -> Child {
    let prog = format!("import sys\nsys.stdin.readline()\n{code}");
    Command::new(PY)
        .args(["-S", "-c", &prog])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .current_dir("/")
        .spawn()
        .expect("spawn python3")
}

pub fn go(c: &mut Child) {
    c.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    c.stdin.as_mut().unwrap().flush().unwrap();
}

pub fn first_line(c: &mut Child) -> String {
    let mut s = String::new();
    BufReader::new(c.stdout.as_mut().unwrap())
        .read_line(&mut s)
        .unwrap();
    s.trim().to_string()
}

/// Forks children (each sleeps) until one fork fails; prints how many started
/// and the errno of the failure.
pub const FORK_LOOP: &str = r#"
import os, time
n = 0
err = "none"
for i in range(20):
    try:
        pid = os.fork()
    except OSError as e:
        err = str(e.errno)
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    n += 1
print(n, err, flush=True)
time.sleep(30)
"#;

pub fn limits(mem: Option<u64>, procs: Option<u32>, cpu: Option<u64>) -> Limits {
    Limits {
        memory_mib: mem,
        processes: procs,
        cpu_seconds: cpu,
        timeout_seconds: None,
        tmp_mib: None,
    }
}

/// The process limit, the fork loop, kill and remove, with a job in `mode`.
pub fn pids_limit_holds(mode: &JobMode, run: &str) {
    let job = Job::create(
        mode,
        &RunId::new(run).unwrap(),
        &limits(Some(64), Some(8), None),
    )
    .expect("create job");
    let mut c = spawn_py(FORK_LOOP);
    job.place_pid(c.id()).expect("place");
    go(&mut c);
    let line = first_line(&mut c);
    // 8 tasks: python itself and 7 children; the 8th fork fails with EAGAIN (11).
    assert_eq!(line, "7 11", "started children, errno");
    assert_eq!(job.pids().len(), 8);
    let out = job.outcome();
    assert!(out.stats.pids_limit_hits >= 1, "{out:?}");
    assert_eq!(out.limit_hit, Some(LimitHit::Processes));
    job.kill().expect("kill");
    job.wait_empty(Duration::from_secs(5))
        .expect("empty after kill");
    let st = c.wait().unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&st), Some(9));
    let paths = job.paths();
    job.remove().expect("remove");
    for p in paths {
        assert!(!p.exists(), "{} left behind", p.display());
    }
}
