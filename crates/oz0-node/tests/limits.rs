//! Black-box tests of the job limits of `oz0-node sandbox run` (`--memory`,
//! `--processes`, `--cpu-seconds`, `--timeout`) and of failing closed when
//! the run's job cannot be made.
//!
//! They need a cgroup the test user may make jobs in (`oz0-node setup
//! cgroups --user USER`, once, as root). Where there is none they skip with
//! the reason, and fail under `OZ0_MUST_WORK=1`.
//!
//! Every test reads the run's `--json-status`, checks that a job held the
//! run (so a run without limits cannot pass), and checks that the job's
//! cgroup folders are gone afterwards.

// The Linux node's black-box tests (the Windows node's are windows.rs).
#![cfg(target_os = "linux")]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{marker, processes_with, stderr, Env};
use serde_json::Value;

/// The root of the cgroup mounts.
const CGROUP_MOUNT: &str = "/sys/fs/cgroup";

/// True when runs with limits can be made here (a job this user can make);
/// otherwise skips with the node's own reason.
fn jobs_ready() -> bool {
    if !common::sandbox_ready() {
        return false;
    }
    let env = Env::new("jobprobe");
    let out = env.sh(&["--memory", "64"], "true");
    if out.status.success() {
        return true;
    }
    common::skip(&format!(
        "runs with limits cannot be made here (run `oz0-node setup cgroups --user $USER` once as root): {}",
        stderr(&out).trim()
    ))
}

macro_rules! ready {
    () => {
        if !jobs_ready() {
            return;
        }
    };
}

/// `n` seconds of a time limit, times `OZ0_TEST_TIME_SCALE` (default 1):
/// where a machine runs slower than this one (`tests/machines.rs` runs
/// these tests in an emulated guest, where starting a sandbox alone takes
/// seconds) the limits the tests set grow with it.
fn secs(n: u64) -> String {
    let scale: u64 = std::env::var("OZ0_TEST_TIME_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|s| *s >= 1)
        .unwrap_or(1);
    (n * scale).to_string()
}

/// Runs `cmd` with `extra` flags and `--json-status`; returns the output
/// and the status document.
fn run_with_status(env: &Env, extra: &[&str], cmd: &[&str]) -> (Output, Value) {
    let status_file = env.root.join("status.json");
    let _ = std::fs::remove_file(&status_file);
    let status_s = status_file.display().to_string();
    let mut flags: Vec<&str> = extra.to_vec();
    flags.extend(["--json-status", status_s.as_str()]);
    let out = env.cmd(&flags, cmd).output().unwrap();
    let text = std::fs::read_to_string(&status_file).unwrap_or_else(|e| {
        panic!(
            "no status file ({e}); exit {:?}, stderr: {}",
            out.status,
            stderr(&out)
        )
    });
    let doc: Value = serde_json::from_str(&text).unwrap();
    (out, doc)
}

/// The job part of a status, asserting there was one (a cgroup held the run).
fn job(doc: &Value) -> &Value {
    let j = &doc["enforced"]["limits"]["job"];
    assert!(j.is_object(), "the run had no job: {doc:#}");
    let mode = j["mode"].as_str().unwrap_or_default();
    assert!(mode.starts_with("cgroup"), "job mode {mode:?}: {doc:#}");
    j
}

/// Cgroup folders whose name holds `run_id`, anywhere a job can be made:
/// `<mount>/<hierarchy>/oz0/…` (v1 delegation), `<mount>/oz0/…` (v2
/// delegation), and the node's own v2 cgroup's children.
fn job_dirs_of(run_id: &str) -> Vec<PathBuf> {
    assert!(!run_id.is_empty());
    let mut parents = vec![Path::new(CGROUP_MOUNT).join("oz0")];
    if let Ok(rd) = std::fs::read_dir(CGROUP_MOUNT) {
        for e in rd.flatten() {
            parents.push(e.path().join("oz0"));
        }
    }
    // v2: jobs may be made next to the node's own cgroup.
    if let Ok(text) = std::fs::read_to_string("/proc/self/cgroup") {
        for line in text.lines() {
            if let Some(rel) = line.strip_prefix("0::") {
                let own = Path::new(CGROUP_MOUNT).join(rel.trim_start_matches('/'));
                parents.push(own.clone());
                if let Some(p) = own.parent() {
                    parents.push(p.to_path_buf());
                }
            }
        }
    }
    let mut left = Vec::new();
    for p in parents {
        let Ok(rd) = std::fs::read_dir(&p) else {
            continue;
        };
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().contains(run_id) {
                left.push(e.path());
            }
        }
    }
    left
}

/// Asserts no cgroup folder of the run is left.
fn assert_job_removed(doc: &Value) {
    let run_id = doc["run_id"].as_str().expect("status has a run id");
    let left = job_dirs_of(run_id);
    assert!(left.is_empty(), "job cgroups left behind: {left:?}");
}

/// Writes `body` to `name` in the work dir (so markers in it appear in the
/// run's command lines, never in `oz0-node`'s own).
fn write_script(env: &Env, name: &str, body: &str) -> String {
    let p = env.work.join(name);
    std::fs::write(&p, body).unwrap();
    p.display().to_string()
}

/// `--processes 8` counts every task of the run: bubblewrap's 2 own
/// processes (its outer process and the sandbox's pid 1) + the command's
/// tree. The command here is one Python process that tries to fork 20
/// children; each child, once it runs, appends one line to `started.log` and
/// sleeps. The count is the lines in that file: command-tree processes that
/// actually started, not counting the parent itself. With 8 − 2 = 6 for the
/// command tree, the parent is 1 and at most 5 children start; the test
/// asserts the design's bound (at most 6 started) and that the limit refused
/// forks.
#[test]
fn twenty_processes_under_a_limit_of_eight_start_at_most_six() {
    ready!();
    let env = Env::new("pids");
    let script = write_script(
        &env,
        "forks.py",
        r#"
import os, time
started = refused = 0
kids = []
for i in range(20):
    try:
        pid = os.fork()
    except OSError:
        refused += 1
        continue
    if pid == 0:
        with open("started.log", "a") as f:
            f.write("started %d\n" % i)
        time.sleep(3)
        os._exit(0)
    kids.append(pid)
print("forked", len(kids), "refused", refused, flush=True)
for k in kids:
    os.waitpid(k, 0)
"#,
    );
    let (out, doc) = run_with_status(
        &env,
        &["--processes", "8", "--timeout", "60"],
        &["/usr/bin/python3", &script],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let started = std::fs::read_to_string(env.work.join("started.log"))
        .unwrap_or_default()
        .lines()
        .count();
    eprintln!(
        "--processes 8: {started} of 20 children started ({})",
        common::stdout(&out).trim()
    );
    assert!(started >= 1, "no child started at all: {}", stderr(&out));
    assert!(
        started <= 6,
        "{started} children started under --processes 8"
    );
    let j = job(&doc);
    assert!(
        j["stats"]["pids_limit_hits"].as_u64().unwrap_or(0) >= 1,
        "the job saw no refused fork: {j:#}"
    );
    assert_eq!(j["limit_hit"], "processes", "{j:#}");
    if let Some(peak) = j["stats"]["pids_peak"].as_u64() {
        assert!(peak <= 8, "pids peak {peak} over the limit: {j:#}");
    }
    assert_job_removed(&doc);
}

/// Allocates and touches N MiB (every page written, so it is really used).
fn alloc_script(env: &Env) -> String {
    write_script(
        env,
        "alloc.py",
        r#"
import sys
n = int(sys.argv[1])
chunks = []
for i in range(n):
    chunks.append(bytearray(b"\x01") * (1024 * 1024))
open("allocated-%d" % n, "w").write("done")
print("allocated", n, "MiB", flush=True)
"#,
    )
}

#[test]
fn memory_over_the_limit_is_killed_and_reported_while_under_it_succeeds() {
    ready!();
    let env = Env::new("mem");
    let script = alloc_script(&env);

    let (out, doc) = run_with_status(
        &env,
        &["--memory", "256", "--timeout", "120"],
        &["/usr/bin/python3", &script, "128"],
    );
    assert_eq!(out.status.code(), Some(0), "128 MiB: {}", stderr(&out));
    assert!(env.work.join("allocated-128").exists());
    assert_eq!(doc["outcome"], "exited", "{doc:#}");
    let j = job(&doc);
    assert_eq!(j["stats"]["oom_kills"], 0, "{j:#}");
    assert_job_removed(&doc);

    let (out, doc) = run_with_status(
        &env,
        &["--memory", "256", "--timeout", "120"],
        &["/usr/bin/python3", &script, "512"],
    );
    assert!(
        !env.work.join("allocated-512").exists(),
        "512 MiB were allocated under --memory 256"
    );
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(doc["outcome"], "out_of_memory", "{doc:#}");
    let j = job(&doc);
    assert_eq!(j["limit_hit"], "memory", "{j:#}");
    assert!(j["stats"]["oom_kills"].as_u64().unwrap_or(0) >= 1, "{j:#}");
    if let Some(peak) = j["stats"]["memory_peak_bytes"].as_u64() {
        assert!(peak <= 256 << 20, "memory peak {peak} over 256 MiB: {j:#}");
    }
    assert!(stderr(&out).contains("--memory"), "{}", stderr(&out));
    assert_job_removed(&doc);
}

#[test]
fn cpu_spinner_is_stopped_at_its_cpu_seconds() {
    ready!();
    let env = Env::new("cpu");
    let m = marker("spin");
    let script = write_script(
        &env,
        "spin.sh",
        &format!("# {m}\n(while :; do :; done) &\nwhile :; do :; done\n"),
    );
    // The wall-time limit is far above the CPU one: if CPU time were not
    // enforced the run would end by timeout, not by cpu_time.
    let (cpu, wall) = (secs(1), secs(60));
    let (out, doc) = run_with_status(
        &env,
        &["--cpu-seconds", &cpu, "--timeout", &wall],
        &["/bin/sh", &script],
    );
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_ne!(out.status.code(), Some(124), "{}", stderr(&out));
    assert_eq!(doc["outcome"], "cpu_time", "{doc:#}");
    let j = job(&doc);
    assert_eq!(j["limit_hit"], "cpu_time", "{j:#}");
    let used = j["stats"]["cpu_usec"].as_u64().unwrap_or(0);
    assert!(
        used >= cpu.parse::<u64>().unwrap() * 1_000_000,
        "stopped after only {used} µs of CPU: {j:#}"
    );
    assert!(stderr(&out).contains("--cpu-seconds"), "{}", stderr(&out));
    assert!(processes_with(&m).is_empty(), "spinners left behind");
    assert_job_removed(&doc);
}

#[test]
fn timeout_kills_the_whole_tree_of_a_run_with_limits() {
    ready!();
    let env = Env::new("walltime");
    let m = marker("wt");
    // A daemonised grandchild in its own session, a plain background child,
    // and the first process, all sleeping far past the timeout.
    let script = write_script(
        &env,
        "tree.sh",
        &format!(
            "(setsid bash -c 'exec -a {m}-a sleep 600' &)\n(exec -a {m}-b sleep 600 &)\nexec -a {m}-c sleep 600\n"
        ),
    );
    let (out, doc) = run_with_status(
        &env,
        &[
            "--timeout",
            &secs(2),
            "--memory",
            "256",
            "--processes",
            "64",
        ],
        &["/bin/bash", &script],
    );
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    assert_eq!(doc["outcome"], "timeout", "{doc:#}");
    job(&doc);
    assert!(
        processes_with(&m).is_empty(),
        "left behind: {:?}",
        processes_with(&m)
    );
    assert_job_removed(&doc);
}

/// The host can still start processes (a fork + exec that must succeed).
fn host_can_fork() -> bool {
    Command::new("/bin/true")
        .stdin(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

#[test]
fn fork_bomb_is_contained_and_the_host_stays_responsive() {
    ready!();
    let env = Env::new("bomb");
    let m = marker("bomb");
    // The bomb runs in a child; the first process execs a long sleep (exec
    // needs no new process), so the run lasts until its timeout.
    let script = write_script(
        &env,
        "bomb.sh",
        &format!("# {m}\nf() {{ f | f & }}\nf &\nexec sleep 600\n"),
    );
    // While the bomb runs, the host keeps forking.
    let stop = Arc::new(AtomicBool::new(false));
    let (forks_ok, forks_failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let watcher = {
        let (stop, ok, failed) = (stop.clone(), forks_ok.clone(), forks_failed.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                if host_can_fork() {
                    ok.fetch_add(1, Ordering::SeqCst);
                } else {
                    failed.fetch_add(1, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let start = Instant::now();
    let (out, doc) = run_with_status(
        &env,
        &["--processes", "32", "--timeout", &secs(5)],
        &["/bin/sh", &script],
    );
    let took = start.elapsed();
    stop.store(true, Ordering::SeqCst);
    watcher.join().unwrap();
    eprintln!(
        "fork bomb: run took {took:?}; host forks during it: {} ok, {} failed",
        forks_ok.load(Ordering::SeqCst),
        forks_failed.load(Ordering::SeqCst)
    );
    // It ended by its timeout, not because the bomb took the run down.
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    assert_eq!(doc["outcome"], "timeout", "{doc:#}");
    let j = job(&doc);
    assert!(
        j["stats"]["pids_limit_hits"].as_u64().unwrap_or(0) >= 1,
        "the bomb never reached the limit: {j:#}"
    );
    if let Some(peak) = j["stats"]["pids_peak"].as_u64() {
        assert!(peak <= 32, "pids peak {peak} over the limit: {j:#}");
    }
    assert!(forks_ok.load(Ordering::SeqCst) >= 1);
    assert_eq!(
        forks_failed.load(Ordering::SeqCst),
        0,
        "the host could not fork while the bomb ran"
    );
    assert!(host_can_fork(), "the host cannot fork after the run");
    assert!(
        processes_with(&m).is_empty(),
        "bomb processes left behind: {}",
        processes_with(&m).len()
    );
    assert_job_removed(&doc);
}

/// Job folders (any run) under the v1 `oz0` folders and the v2 one.
fn all_job_dirs() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut parents = vec![Path::new(CGROUP_MOUNT).join("oz0")];
    if let Ok(rd) = std::fs::read_dir(CGROUP_MOUNT) {
        for e in rd.flatten() {
            parents.push(e.path().join("oz0"));
        }
    }
    for p in parents {
        if let Ok(rd) = std::fs::read_dir(&p) {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().starts_with("oz0-job-") {
                    out.push(e.path());
                }
            }
        }
    }
    out
}

/// A cgroup folder the test makes unwritable, in every v1 hierarchy that
/// has a delegated `oz0` folder; removed on drop.
struct ReadOnlyCgroup {
    rel: String,
    made: Vec<PathBuf>,
}

impl ReadOnlyCgroup {
    fn new(tag: &str) -> ReadOnlyCgroup {
        let rel = format!("oz0/{}", marker(tag));
        let mut made = Vec::new();
        for ctl in ["memory", "pids", "cpuacct", "cpu,cpuacct", "freezer"] {
            let base = Path::new(CGROUP_MOUNT).join(ctl).join("oz0");
            if !base.is_dir() {
                continue;
            }
            let p = Path::new(CGROUP_MOUNT).join(ctl).join(&rel);
            if std::fs::create_dir(&p).is_ok() {
                use std::os::unix::fs::PermissionsExt;
                let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o555));
                made.push(p);
            }
        }
        ReadOnlyCgroup { rel, made }
    }
}

impl Drop for ReadOnlyCgroup {
    fn drop(&mut self) {
        for p in &self.made {
            let _ = std::fs::remove_dir(p);
        }
    }
}

#[test]
fn a_run_whose_job_cannot_be_made_never_executes() {
    ready!();
    let env = Env::new("failclosed");
    let ran = env.work.join("ran");
    let touch = format!("touch {}", ran.display());
    let ro = ReadOnlyCgroup::new("ro");
    let mut roots: Vec<String> = vec![
        // A real cgroup folder owned by root.
        format!("{CGROUP_MOUNT}/memory"),
        format!("{CGROUP_MOUNT}/pids"),
        // A plain folder this user cannot write.
        {
            let d = env.root.join("ro-root");
            std::fs::create_dir(&d).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o555)).unwrap();
            d.display().to_string()
        },
    ];
    if !ro.made.is_empty() {
        // A cgroup folder inside the delegated tree, made read-only.
        roots.push(ro.rel.clone());
        roots.push(ro.made[0].display().to_string());
    }
    let before = all_job_dirs();
    for root in &roots {
        for limits in [
            &["--memory", "256"][..],
            &["--processes", "8"][..],
            &["--cpu-seconds", "5"][..],
        ] {
            let mut flags = vec!["--cgroup-root", root.as_str()];
            flags.extend_from_slice(limits);
            let out = env.sh(&flags, &touch);
            let err = stderr(&out);
            assert_eq!(
                out.status.code(),
                Some(125),
                "--cgroup-root {root} {limits:?}: {err}"
            );
            assert!(
                !ran.exists(),
                "--cgroup-root {root} {limits:?}: the command ran"
            );
            assert!(
                err.contains("cgroup") || err.contains("job"),
                "the reason does not name the job: {err}"
            );
            assert_eq!(
                err.trim().lines().count(),
                1,
                "the reason is not one line: {err}"
            );
        }
    }
    // Nothing left behind: no job folder that was not there before.
    let after: Vec<PathBuf> = all_job_dirs()
        .into_iter()
        .filter(|d| !before.contains(d))
        .filter(|d| {
            d.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.split('-').nth(2))
                .is_some_and(|pid| {
                    // Only jobs of runs that are gone (other tests may be running).
                    !Path::new("/proc").join(pid).exists()
                })
        })
        .collect();
    assert!(after.is_empty(), "left behind: {after:?}");
}

#[test]
fn no_job_cgroup_is_left_after_a_plain_run_with_limits() {
    ready!();
    let env = Env::new("cleanup");
    let (out, doc) = run_with_status(
        &env,
        &[
            "--memory",
            "256",
            "--processes",
            "64",
            "--cpu-seconds",
            "10",
        ],
        &["/bin/sh", "-c", "exit 3"],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(doc["outcome"], "exited");
    let j = job(&doc);
    let enforced: Vec<&str> = j["enforced"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["limit"].as_str())
        .collect();
    for l in ["--memory", "--processes", "--cpu-seconds"] {
        assert!(enforced.contains(&l), "{l} not enforced: {j:#}");
    }
    assert_job_removed(&doc);
}
