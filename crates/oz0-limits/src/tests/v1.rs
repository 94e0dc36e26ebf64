//! cgroup v1 against the fake hybrid host: probing the delegated `oz0`
//! folders, limits in every hierarchy, failing closed, freeze-kill-thaw and
//! the outcome's counters.

use rustix::io::Errno;

use super::*;

#[test]
fn v1_probe_finds_delegated_folders() {
    let fs = v1_host(1001, true);
    let r = probe_mode_with(fs.as_ref(), &ProbeOptions::default());
    assert_eq!(
        r.mode,
        JobMode::V1 {
            memory: "/sys/fs/cgroup/memory/oz0".into(),
            pids: "/sys/fs/cgroup/pids/oz0".into(),
            cpuacct: Some("/sys/fs/cgroup/cpu,cpuacct/oz0".into()),
            freezer: Some("/sys/fs/cgroup/freezer/oz0".into()),
        }
    );
    assert_eq!(r.facts.mode, "cgroup-v1");
    assert_eq!(
        r.facts.controllers,
        ["memory", "pids", "cpuacct", "freezer"]
    );
    assert!(r.facts.v2.contains("lacks [memory pids]"), "{}", r.facts.v2);
    assert!(r.facts.kill.starts_with("freezer"));
    assert!(r.facts.cpu_time.contains("cpuacct.usage"));
}

#[test]
fn v1_probe_without_delegation_names_the_setup_command() {
    let fs = v1_host(1001, false);
    let r = probe_mode_with(fs.as_ref(), &ProbeOptions::default());
    let JobMode::Unavailable { reason, fix } = &r.mode else {
        panic!("{:?}", r.mode)
    };
    assert!(
        reason.starts_with("cgroup v1: no writable folder in the memory hierarchy"),
        "{reason}"
    );
    assert_eq!(
        fix,
        "run `oz0-node setup cgroups --user oz0test` once as root"
    );
    assert_eq!(r.facts.fix.as_deref(), Some(fix.as_str()));
}

#[test]
fn v1_probe_prefers_a_folder_under_the_nodes_own_cgroup() {
    let fs = v1_host(1001, true);
    fs.make_cgroup("/sys/fs/cgroup/memory/svc", false);
    fs.make_cgroup("/sys/fs/cgroup/memory/svc/oz0", true);
    fs.set_self(
        "9:freezer:/\n8:pids:/\n4:memory:/svc\n2:cpu,cpuacct:/\n0::/\n",
        V1_MOUNTS,
    );
    let r = probe_mode_with(fs.as_ref(), &ProbeOptions::default());
    let JobMode::V1 { memory, .. } = &r.mode else {
        panic!("{:?}", r.mode)
    };
    assert_eq!(memory, &PathBuf::from("/sys/fs/cgroup/memory/svc/oz0"));
}

#[test]
fn v1_override_names_a_folder_in_every_hierarchy() {
    let fs = v1_host(1001, false);
    for (m, _) in V1_HIERS {
        fs.make_cgroup(&format!("{m}/mine"), true);
    }
    let r = probe_mode_with(
        fs.as_ref(),
        &ProbeOptions {
            cgroup_root: Some("/sys/fs/cgroup/memory/mine".into()),
            version: None,
        },
    );
    let JobMode::V1 { pids, .. } = &r.mode else {
        panic!("{:?}", r.mode)
    };
    assert_eq!(pids, &PathBuf::from("/sys/fs/cgroup/pids/mine"));
}

#[test]
fn v1_create_writes_limits_in_every_hierarchy() {
    let fs = v1_host(1001, true);
    let mode = probe_mode_with(fs.as_ref(), &ProbeOptions::default()).mode;
    let job = Job::create_with(fs.clone(), &mode, &run("r1"), &limits()).unwrap();
    assert_eq!(job.version_name(), "cgroup-v1");
    let n = job.name().to_string();
    assert_eq!(
        fs.content(&format!(
            "/sys/fs/cgroup/memory/oz0/{n}/memory.limit_in_bytes"
        )),
        Some("268435456".into())
    );
    assert_eq!(
        fs.content(&format!(
            "/sys/fs/cgroup/memory/oz0/{n}/memory.memsw.limit_in_bytes"
        )),
        Some("268435456".into())
    );
    assert_eq!(
        fs.content(&format!("/sys/fs/cgroup/pids/oz0/{n}/pids.max")),
        Some("8".into())
    );
    assert_eq!(job.procs_paths().len(), 4);
    assert!(job.enforced()[0]
        .mechanism
        .contains("memory.memsw.limit_in_bytes"));
    assert!(job.enforced()[2].mechanism.contains("cpuacct.usage"));
    // Placement moves the pid in every hierarchy.
    job.place_pid(5000).unwrap();
    for p in job.procs_paths() {
        assert_eq!(fs.content(&p.to_string_lossy()).unwrap(), "5000\n");
    }
    // Open files need the real system.
    assert!(job.procs_files().is_err());
    job.remove().unwrap();
    assert_eq!(fs.killed(), vec![5000]);
    no_jobs_left(&fs, "/sys/fs/cgroup");
}

/// Without swap accounting, --memory holds on a machine with no swap; with
/// swap, the job's swap could not be bounded, and --memory is refused
/// (naming the fix) rather than said to hold.
#[test]
fn v1_without_memsw_limits_memory_only_where_there_is_no_swap() {
    let fs = v1_host(1001, true);
    fs.omit_in_new_cgroups("memory.memsw.limit_in_bytes");
    fs.set_file(
        "/proc/meminfo",
        "MemTotal: 1000 kB\nSwapTotal:       0 kB\n",
    );
    let mode = probe_mode_with(fs.as_ref(), &ProbeOptions::default()).mode;
    let job = Job::create_with(fs.clone(), &mode, &run("r1"), &limits()).unwrap();
    assert!(!job.enforced()[0].mechanism.contains("memsw"));
    job.remove().unwrap();
    fs.set_file(
        "/proc/meminfo",
        "MemTotal: 1000 kB\nSwapTotal: 2097148 kB\n",
    );
    let e = Job::create_with(fs.clone(), &mode, &run("r2"), &limits()).unwrap_err();
    assert!(e.to_string().contains("swapaccount=1"), "{e}");
    no_jobs_left(&fs, "/sys/fs/cgroup");
}

#[test]
fn v1_failed_limit_write_leaves_nothing() {
    let fs = v1_host(1001, true);
    fs.fail_writes("memory.limit_in_bytes", Errno::INVAL);
    let mode = probe_mode_with(fs.as_ref(), &ProbeOptions::default()).mode;
    let e = Job::create_with(fs.clone(), &mode, &run("r1"), &limits()).unwrap_err();
    assert!(e.to_string().contains("memory.limit_in_bytes"), "{e}");
    no_jobs_left(&fs, "/sys/fs/cgroup");
}

#[test]
fn v1_missing_pids_max_fails_closed() {
    let fs = v1_host(1001, true);
    fs.omit_in_new_cgroups("pids.max");
    let mode = probe_mode_with(fs.as_ref(), &ProbeOptions::default()).mode;
    let e = Job::create_with(fs.clone(), &mode, &run("r1"), &limits()).unwrap_err();
    assert!(e.to_string().contains("pids.max: does not exist"), "{e}");
    no_jobs_left(&fs, "/sys/fs/cgroup");
}

#[test]
fn v1_cpu_seconds_without_cpuacct_is_refused_before_anything_is_made() {
    let fs = v1_host(1001, true);
    let JobMode::V1 {
        memory,
        pids,
        freezer,
        ..
    } = probe_mode_with(fs.as_ref(), &ProbeOptions::default()).mode
    else {
        panic!()
    };
    let mode = JobMode::V1 {
        memory,
        pids,
        cpuacct: None,
        freezer,
    };
    let e = Job::create_with(fs.clone(), &mode, &run("r1"), &limits()).unwrap_err();
    assert!(
        matches!(
            e,
            JobError::Unenforceable {
                limit: "--cpu-seconds",
                ..
            }
        ),
        "{e}"
    );
    no_jobs_left(&fs, "/sys/fs/cgroup");
}

#[test]
fn v1_kill_freezes_kills_and_thaws() {
    let fs = v1_host(1001, true);
    let mode = probe_mode_with(fs.as_ref(), &ProbeOptions::default()).mode;
    let job = Job::create_with(fs.clone(), &mode, &run("r1"), &limits()).unwrap();
    job.place_pid(5000).unwrap();
    job.place_pid(5001).unwrap();
    job.kill().unwrap();
    assert_eq!(fs.killed(), vec![5000, 5001]);
    let st = format!("/sys/fs/cgroup/freezer/oz0/{}/freezer.state", job.name());
    assert_eq!(fs.content(&st).unwrap(), "THAWED");
    assert!(job.is_empty());
}

#[test]
fn v1_outcome_reads_oom_control_and_pids_events() {
    let fs = v1_host(1001, true);
    let mode = probe_mode_with(fs.as_ref(), &ProbeOptions::default()).mode;
    let job = Job::create_with(fs.clone(), &mode, &run("r1"), &limits()).unwrap();
    let n = job.name().to_string();
    let m = PathBuf::from("/sys/fs/cgroup/memory/oz0").join(&n);
    fs.poke(
        &m.join("memory.oom_control"),
        "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
    );
    fs.poke(&m.join("memory.max_usage_in_bytes"), "268435456");
    let p = PathBuf::from("/sys/fs/cgroup/pids/oz0").join(&n);
    fs.poke(&p.join("pids.events"), "max 4\n");
    let c = PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/oz0").join(&n);
    fs.poke(&c.join("cpuacct.usage"), "2000000000");
    let s = job.stats();
    assert_eq!(s.oom_kills, 2);
    assert!(s.oom_killed);
    assert_eq!(s.pids_limit_hits, 4);
    assert_eq!(s.memory_peak_bytes, Some(268435456));
    assert_eq!(s.cpu_usec, Some(2_000_000));
    // Kernels without the oom_kill counter: under_oom / failcnt.
    fs.poke(
        &m.join("memory.oom_control"),
        "oom_kill_disable 0\nunder_oom 1\n",
    );
    assert!(job.stats().oom_killed);
}

#[test]
fn v1_as_root_creates_the_parent_on_demand() {
    let fs = v1_host(0, false);
    let mode = probe_mode_with(fs.as_ref(), &ProbeOptions::default()).mode;
    assert!(matches!(mode, JobMode::V1 { .. }), "{mode:?}");
    let job = Job::create_with(fs.clone(), &mode, &run("r1"), &limits()).unwrap();
    assert!(fs.exists(Path::new("/sys/fs/cgroup/pids/oz0")));
    job.remove().unwrap();
    no_jobs_left(&fs, "/sys/fs/cgroup");
}

#[test]
fn v1_unwritable_root_creates_nothing() {
    // The user's oz0 exists in memory but not in pids (half-done setup).
    let fs = v1_host(1001, true);
    let mode = probe_mode_with(fs.as_ref(), &ProbeOptions::default()).mode;
    fs.set_writable("/sys/fs/cgroup/memory/oz0", false);
    let e = Job::create_with(fs.clone(), &mode, &run("r1"), &limits()).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("cannot create /sys/fs/cgroup/memory/oz0/oz0-job-"),
        "{msg}"
    );
    assert!(
        msg.contains("oz0-node setup cgroups --user oz0test"),
        "{msg}"
    );
    no_jobs_left(&fs, "/sys/fs/cgroup");
}
