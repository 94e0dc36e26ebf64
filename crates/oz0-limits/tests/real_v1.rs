//! Real-kernel tests of cgroup v1 jobs.
//!
//! The `root_` tests run as root against a temporary subtree
//! (`oz0-itest-<pid>-<test>`) of each v1 hierarchy. `root_delegated_user_*`
//! delegates such a subtree to the unprivileged user `oz0test` with
//! [`setup_delegation_in`] and re-runs this test binary as that user (via
//! `setpriv`) to create, place, limit, kill and remove a job unprivileged.
//!
//! Needs: root, cgroup v1 memory + pids mounted, `/usr/bin/python3`,
//! `setpriv`, and the user `oz0test`. Missing any, a test prints why and is
//! skipped — unless `OZ0_MUST_WORK=1`, when it fails. Every cgroup made here
//! is removed, also when a test fails (the guard's `Drop`).

mod common;

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use oz0_limits::{
    probe_mode, setup_delegation_in, CgroupVersion, Job, JobError, JobMode, LimitHit, ProbeOptions,
    RealFs, RunId, SetupMode, Supervisor, Verdict,
};
use oz0_policy::Limits;

#[test]
fn root_v1_pids_limit_holds_and_kill_empties_the_job() {
    let Some(t) = TempTree::new("root_v1_pids_limit_holds", "pids") else {
        return;
    };
    pids_limit_holds(&t.mode, "pids");
}

#[test]
fn root_v1_memory_limit_oom_kills_128_mib_and_allows_16() {
    let Some(t) = TempTree::new("root_v1_memory_limit", "mem") else {
        return;
    };
    let job = Job::create(
        &t.mode,
        &RunId::new("mem").unwrap(),
        &limits(Some(64), Some(16), None),
    )
    .expect("create job");
    // Touch every page so the memory is really used.
    let alloc = |mib: u32| {
        format!(
            "a = bytearray({mib} << 20)\nfor i in range(0, len(a), 4096):\n    a[i] = 1\nprint('done', flush=True)\n"
        )
    };
    let mut small = spawn_py(&alloc(16));
    job.place_pid(small.id()).unwrap();
    go(&mut small);
    assert_eq!(first_line(&mut small), "done");
    assert!(small.wait().unwrap().success());
    assert!(!job.stats().oom_killed);

    let mut big = spawn_py(&alloc(128));
    job.place_pid(big.id()).unwrap();
    go(&mut big);
    let st = big.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&st),
        Some(9),
        "128 MiB under 64 MiB must be killed, got {st:?}"
    );
    let out = job.outcome();
    assert!(out.stats.oom_killed, "{out:?}");
    assert!(out.stats.oom_kills >= 1);
    assert_eq!(out.limit_hit, Some(LimitHit::Memory));
    let peak = out.stats.memory_peak_bytes.unwrap();
    assert!(peak > 32 << 20 && peak <= 64 << 20, "peak {peak}");
    assert!(out.enforced[0].mechanism.contains("memory.limit_in_bytes"));
    job.remove().unwrap();
}

#[test]
fn root_v1_cpu_seconds_supervisor_stops_a_spinner() {
    let Some(t) = TempTree::new("root_v1_cpu_seconds", "cpu") else {
        return;
    };
    if !matches!(
        t.mode,
        JobMode::V1 {
            cpuacct: Some(_),
            ..
        }
    ) {
        skip("root_v1_cpu_seconds", "no cpuacct hierarchy");
        return;
    }
    let l = Limits {
        cpu_seconds: Some(1),
        timeout_seconds: Some(20),
        ..Default::default()
    };
    let job = Job::create(&t.mode, &RunId::new("cpu").unwrap(), &l).expect("create");
    let mut c = spawn_py("while True:\n    pass\n");
    job.place_pid(c.id()).unwrap();
    go(&mut c);
    let t0 = Instant::now();
    let mut sup = Supervisor::new(&l, t0);
    let verdict = loop {
        if let Some(v) = sup.check(Some(&job), Instant::now()).unwrap() {
            break v;
        }
        std::thread::sleep(sup.next_poll(Instant::now()).unwrap());
    };
    let wall = t0.elapsed();
    let Verdict::CpuTime { used_usec, .. } = verdict else {
        panic!("{verdict:?}")
    };
    assert!(
        used_usec > 1_000_000 && used_usec < 1_300_000,
        "used {used_usec}"
    );
    assert!(wall < Duration::from_secs(5), "took {wall:?}");
    let st = c.wait().unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&st), Some(9));
    assert_eq!(job.outcome().limit_hit, Some(LimitHit::CpuTime));
    job.remove().unwrap();
}

#[test]
fn root_v1_procs_files_are_cloexec_and_place_a_child() {
    let Some(t) = TempTree::new("root_v1_procs_files", "files") else {
        return;
    };
    let job = Job::create(
        &t.mode,
        &RunId::new("files").unwrap(),
        &limits(None, Some(8), None),
    )
    .unwrap();
    let files = job.procs_files().unwrap();
    assert_eq!(files.len(), job.procs_paths().len());
    for f in &files {
        let fl = rustix::io::fcntl_getfd(f).unwrap();
        assert!(fl.contains(rustix::io::FdFlags::CLOEXEC));
    }
    let mut c = spawn_py("print('ok', flush=True)\n");
    for mut f in &files {
        f.write_all(c.id().to_string().as_bytes()).unwrap();
    }
    assert_eq!(job.pids(), vec![i32::try_from(c.id()).unwrap()]);
    go(&mut c);
    assert_eq!(first_line(&mut c), "ok");
    c.wait().unwrap();
    drop(files);
    job.remove().unwrap();
}

#[test]
fn root_v1_drop_removes_a_job_with_processes() {
    let Some(t) = TempTree::new("root_v1_drop", "drop") else {
        return;
    };
    let mut c = spawn_py("import time\ntime.sleep(60)\n");
    let paths = {
        let job = Job::create(
            &t.mode,
            &RunId::new("drop").unwrap(),
            &limits(None, Some(8), None),
        )
        .unwrap();
        job.place_pid(c.id()).unwrap();
        job.paths()
    };
    // Drop killed the child and removed the folders (a zombie is not in a cgroup).
    let st = c.wait().unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&st), Some(9));
    for p in paths {
        assert!(!p.exists(), "{} left behind", p.display());
    }
}

/// Root part: delegate a temporary subtree to `oz0test` and to `oz0test2`
/// side by side, check ownership, run the unprivileged part of this binary
/// as each user, then undo one user's setup and show the other's still
/// works, then the other's, and nothing is left.
#[test]
fn root_two_delegated_users_create_limits_and_remove_jobs() {
    const T: &str = "root_two_delegated_users";
    if !is_root() {
        skip(T, "needs root");
        return;
    }
    for u in [USER, USER2] {
        if Command::new("id")
            .arg(u)
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(true)
        {
            skip(
                T,
                &format!("needs the user {u} (useradd {u}; scripts/test makes it)"),
            );
            return;
        }
    }
    if !Path::new("/usr/bin/setpriv").exists() || !Path::new(PY).exists() {
        skip(T, "needs /usr/bin/setpriv and /usr/bin/python3");
        return;
    }
    let name = format!("oz0-itest-{}-deleg", std::process::id());
    let reps: Vec<_> = match [USER, USER2]
        .iter()
        .map(|u| setup_delegation_in(&RealFs, u, SetupMode::V1, &name))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(r) => r,
        Err(e) => {
            skip(T, &format!("setup: {e}"));
            return;
        }
    };
    // Removed on drop, whatever happens below (children first).
    let _guard = TempTree {
        dirs: reps
            .iter()
            .flat_map(|r| r.delegated.clone())
            .chain(reps[0].parents.clone())
            .collect(),
        mode: JobMode::Unavailable {
            reason: String::new(),
            fix: String::new(),
        },
    };
    // A root-owned folder beside the shared parent that no user may use.
    let denied = format!("oz0-itest-{}-denied", std::process::id());
    let denied_dirs: Vec<PathBuf> = reps[0]
        .parents
        .iter()
        .map(|d| d.parent().unwrap().join(&denied))
        .collect();
    for d in &denied_dirs {
        std::fs::create_dir(d).unwrap();
    }
    let _guard2 = TempTree {
        dirs: denied_dirs,
        mode: JobMode::Unavailable {
            reason: String::new(),
            fix: String::new(),
        },
    };
    for rep in &reps {
        for p in &rep.chowned {
            let m = std::fs::metadata(p).unwrap();
            assert_eq!((m.uid(), m.gid()), (rep.uid, rep.gid), "{}", p.display());
        }
        for p in &rep.parents {
            assert_eq!(std::fs::metadata(p).unwrap().uid(), 0, "{}", p.display());
        }
        assert!(rep.controllers.contains(&"memory".to_string()));
    }
    let as_user = |rep: &oz0_limits::SetupReport, other: &str| {
        let exe = std::env::current_exe().unwrap();
        let out = Command::new("/usr/bin/setpriv")
            .args([
                &format!("--reuid={}", rep.uid),
                &format!("--regid={}", rep.gid),
                "--clear-groups",
                "--",
            ])
            .arg(&exe)
            .args([
                "--exact",
                "unprivileged_part_as_delegated_user",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(
                CHILD_ENV,
                format!("{name}/{}:{denied}:{name}/{other}", rep.user),
            )
            .current_dir("/")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "unprivileged part as {} failed:\n{text}",
            rep.user
        );
        for l in text
            .lines()
            .filter(|l| l.contains("fail-closed message") || l.contains("unprivileged part:"))
        {
            eprintln!("as {}: {l}", rep.user);
        }
        assert!(
            text.contains("unprivileged part: ok"),
            "did not run:\n{text}"
        );
    };
    as_user(&reps[0], USER2);
    as_user(&reps[1], USER);

    // Undo the first user's: theirs goes, the second's stays and works.
    let gone = oz0_limits::remove_delegation_in(&RealFs, USER, &name).unwrap();
    for d in &reps[0].delegated {
        assert!(!d.exists(), "{} left", d.display());
        assert!(gone.removed.contains(d));
    }
    assert_eq!(gone.kept.len(), reps[0].parents.len(), "{gone:?}");
    as_user(&reps[1], USER);
    let gone = oz0_limits::remove_delegation_in(&RealFs, USER2, &name).unwrap();
    assert!(gone.kept.is_empty(), "{gone:?}");
    for d in reps[1].delegated.iter().chain(&reps[0].parents) {
        assert!(!d.exists(), "{} left", d.display());
    }
}

/// The unprivileged part (runs only when started by the test above).
#[test]
fn unprivileged_part_as_delegated_user() {
    let Ok(v) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = v.split(':');
    let (name, denied, other) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    assert!(!is_root());
    // Another user's folder, beside this one's, is not this user's.
    let theirs = probe_mode(&ProbeOptions {
        cgroup_root: Some(PathBuf::from(other)),
        version: Some(CgroupVersion::V1),
    });
    assert!(
        matches!(theirs.mode, JobMode::Unavailable { .. }),
        "another user's folder was usable: {:?}",
        theirs.mode
    );
    let probe = probe_mode(&ProbeOptions {
        cgroup_root: Some(PathBuf::from(name)),
        version: None,
    });
    assert!(
        matches!(probe.mode, JobMode::V1 { .. }),
        "{:?}",
        probe.facts
    );
    pids_limit_holds(&probe.mode, "user");

    // A root-owned parent: the probe says why and names the fix ...
    let p = probe_mode(&ProbeOptions {
        cgroup_root: Some(PathBuf::from(denied)),
        version: Some(CgroupVersion::V1),
    });
    let JobMode::Unavailable { fix, .. } = &p.mode else {
        panic!("{:?}", p.mode)
    };
    assert!(
        fix.contains("oz0-node setup cgroups --user oz0test"),
        "{fix}"
    );
    // ... and a job forced there fails closed, leaving nothing.
    let JobMode::V1 {
        memory,
        pids,
        cpuacct,
        freezer,
    } = &probe.mode
    else {
        unreachable!()
    };
    let swap = |d: &PathBuf| d.parent().unwrap().parent().unwrap().join(denied);
    let forced = JobMode::V1 {
        memory: swap(memory),
        pids: swap(pids),
        cpuacct: cpuacct.as_ref().map(swap),
        freezer: freezer.as_ref().map(swap),
    };
    let e = Job::create(
        &forced,
        &RunId::new("denied").unwrap(),
        &limits(Some(64), Some(8), None),
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, JobError::Io { .. }), "{msg}");
    assert!(msg.contains("permission denied"), "{msg}");
    assert!(
        msg.contains("oz0-node setup cgroups --user oz0test"),
        "{msg}"
    );
    println!("fail-closed message: {msg}");
    println!("unprivileged part: ok");
}

#[test]
fn root_v1_cleanup_stale_removes_a_dead_nodes_job() {
    let Some(t) = TempTree::new("root_v1_cleanup_stale", "stale") else {
        return;
    };
    // A job as a node that died would have left it: pid 1 with a start time
    // that is not pid 1's, holding a live process.
    let name = "oz0-job-1-999999999-gone";
    let dirs: Vec<PathBuf> = t.dirs.iter().map(|d| d.join(name)).collect();
    for d in &t.dirs {
        std::fs::create_dir_all(d).unwrap();
    }
    for d in &dirs {
        std::fs::create_dir(d).unwrap();
    }
    let mut c = spawn_py("import time\ntime.sleep(60)\n");
    for d in &dirs {
        std::fs::write(d.join("cgroup.procs"), c.id().to_string()).unwrap();
    }
    // And a live job of this process, which must stay.
    let live = Job::create(
        &t.mode,
        &RunId::new("live").unwrap(),
        &limits(None, Some(8), None),
    )
    .unwrap();
    let rep = oz0_limits::cleanup_stale(&t.mode);
    assert_eq!(rep.live, 1, "{rep:?}");
    assert!(rep.failed.is_empty(), "{rep:?}");
    assert_eq!(rep.removed.len(), dirs.len(), "{rep:?}");
    for d in &dirs {
        assert!(!d.exists(), "{} left", d.display());
    }
    let st = c.wait().unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&st), Some(9));
    assert!(live.paths().iter().all(|p| p.exists()));
    live.remove().unwrap();
}
