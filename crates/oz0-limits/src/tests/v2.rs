//! cgroup v2 against the fake systemd host: probing for a delegated parent,
//! creating jobs that write every limit or fail closed, kill, remove and
//! the outcome's counters.

use std::time::Duration;

use rustix::io::Errno;

use super::*;

#[test]
fn v2_probe_finds_the_delegated_own_cgroup() {
    let fs = v2_host(true);
    let r = probe_mode_with(fs.as_ref(), &ProbeOptions::default());
    assert_eq!(r.mode, JobMode::V2 { root: OWN.into() });
    assert_eq!(r.facts.mode, "cgroup-v2");
    assert!(r.facts.why.contains("oz0-node"), "{}", r.facts.why);
    assert!(r.facts.controllers.contains(&"memory".to_string()));
    assert_eq!(r.facts.kill, "cgroup.kill");
    assert!(r.facts.v1.contains("no memory hierarchy"), "{}", r.facts.v1);
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["mode"]["mode"], "v2");
    assert_eq!(json["facts"]["mode"], "cgroup-v2");
}

#[test]
fn a_probe_without_proc_names_the_file_and_the_fix() {
    let fs = FakeFs::new(1001);
    let r = probe_mode_with(&fs, &ProbeOptions::default());
    let JobMode::Unavailable { reason, fix } = &r.mode else {
        panic!("{:?}", r.mode)
    };
    assert!(
        reason.starts_with("cannot read /proc/self/cgroup: "),
        "{reason}"
    );
    assert!(fix.starts_with("mount /proc"), "{fix}");
    assert_eq!(&r.facts.v2, reason);
}

#[test]
fn v2_probe_without_delegation_names_the_fix() {
    let fs = v2_host(false);
    let r = probe_mode_with(fs.as_ref(), &ProbeOptions::default());
    let JobMode::Unavailable { reason, fix } = &r.mode else {
        panic!("{:?}", r.mode)
    };
    assert!(reason.contains("not writable"), "{reason}");
    assert!(fix.contains("Delegate=yes"), "{fix}");
    assert!(
        fix.contains("oz0-node setup cgroups --user oz0test"),
        "{fix}"
    );
    // Fail closed: a job cannot be made in an unavailable mode.
    let e = Job::create_with(fs.clone(), &r.mode, &run("r1"), &limits()).unwrap_err();
    assert!(matches!(e, JobError::Unavailable { .. }), "{e}");
}

#[test]
fn v2_probe_rejects_a_root_processes_cannot_move_to() {
    let fs = v2_host(true);
    // A writable sibling whose common ancestor with our cgroup is not ours.
    fs.make_cgroup("/sys/fs/cgroup/other", true);
    let r = probe_mode_with(
        fs.as_ref(),
        &ProbeOptions {
            cgroup_root: Some("/sys/fs/cgroup/other".into()),
            version: Some(CgroupVersion::V2),
        },
    );
    let JobMode::Unavailable { reason, .. } = &r.mode else {
        panic!("{:?}", r.mode)
    };
    assert!(reason.contains("cannot be moved"), "{reason}");
    assert!(reason.contains("/sys/fs/cgroup/cgroup.procs"), "{reason}");
}

#[test]
fn v2_probe_rejects_a_root_holding_foreign_processes() {
    let fs = v2_host(true);
    let sib = "/sys/fs/cgroup/user.slice/user-1001.slice/user@1001.service/app.slice/other";
    fs.make_cgroup(sib, true);
    fs.add_process(sib, 777);
    let r = probe_mode_with(
        fs.as_ref(),
        &ProbeOptions {
            cgroup_root: Some(sib.into()),
            version: None,
        },
    );
    let JobMode::Unavailable { reason, .. } = &r.mode else {
        panic!("{:?}", r.mode)
    };
    assert!(reason.contains("holds processes"), "{reason}");
}

#[test]
fn v2_probe_reports_missing_controllers() {
    let fs = v2_host(true);
    fs.poke(&Path::new(OWN).join("cgroup.controllers"), "cpu");
    let r = probe_mode_with(fs.as_ref(), &ProbeOptions::default());
    let JobMode::Unavailable { reason, .. } = &r.mode else {
        panic!("{:?}", r.mode)
    };
    assert!(reason.contains("lacks [memory pids]"), "{reason}");
}

/// The kernel lets `pids` (a threaded controller) be enabled beside the
/// node's processes, and the node's cgroup then becomes a thread root under
/// which no job can hold a process. A first job with only `--processes`
/// must still move the node to its leaf first, and then a later job with
/// `--memory` too. (Seen on a real kernel by `tests/machines.rs`.)
#[test]
fn v2_a_first_job_with_only_processes_still_empties_the_node_cgroup() {
    let fs = v2_host(true);
    let mode = JobMode::V2 { root: OWN.into() };
    let only_pids = Limits {
        processes: Some(8),
        ..Default::default()
    };
    let job = Job::create_with(fs.clone(), &mode, &run("p"), &only_pids).unwrap();
    assert_eq!(
        fs.content(&format!("{OWN}/oz0-node/cgroup.procs")).unwrap(),
        "4242\n4243\n"
    );
    assert_eq!(fs.content(&format!("{OWN}/cgroup.procs")).unwrap(), "");
    fs.set_process(5000, 2000);
    fs.add_process(&format!("{OWN}/oz0-node"), 5000);
    job.place_pid(5000).expect("a process can join the job");
    let job2 = Job::create_with(fs.clone(), &mode, &run("m"), &limits()).unwrap();
    assert_eq!(
        fs.content(&format!("{OWN}/cgroup.subtree_control"))
            .unwrap(),
        "memory pids"
    );
    job2.remove().unwrap();
    fs.end_process(5000);
    job.remove().unwrap();
}

/// A second `sandbox run` started from the leaf the first one moved the
/// cgroup's processes into makes its job beside the leaf, in the delegated
/// cgroup, which offers every controller (the leaf offers only what the
/// first run enabled). Seen on a real kernel by `tests/machines.rs`.
#[test]
fn v2_a_process_in_the_node_leaf_makes_jobs_beside_it() {
    let fs = v2_host(true);
    let mode = JobMode::V2 { root: OWN.into() };
    let memory_only = Limits {
        memory_mib: Some(64),
        ..Default::default()
    };
    let first = Job::create_with(fs.clone(), &mode, &run("a"), &memory_only).unwrap();
    first.remove().unwrap();
    // The next node process lives in the leaf.
    fs.set_self(
        "0::/user.slice/user-1001.slice/user@1001.service/app.slice/oz0.service/oz0-node\n",
        "30 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
    );
    let p = probe_mode_with(fs.as_ref(), &ProbeOptions::default());
    assert_eq!(p.mode, JobMode::V2 { root: OWN.into() }, "{:?}", p.facts);
    let job = Job::create_with(fs.clone(), &p.mode, &run("b"), &limits()).unwrap();
    assert_eq!(
        job.paths(),
        vec![PathBuf::from(format!("{OWN}/{}", job.name()))]
    );
    job.remove().unwrap();
}

/// The fake holds the kernel to the same rule: a job under a thread root
/// cannot take a process.
#[test]
fn v2_fake_models_the_thread_root_the_kernel_makes() {
    let fs = v2_host(true);
    let sc = PathBuf::from(OWN).join("cgroup.subtree_control");
    fs.write(&sc, "+pids")
        .expect("threaded controllers beside processes");
    let e = fs.write(&sc, "+memory").unwrap_err();
    assert_eq!(
        e.raw_os_error(),
        Some(rustix::io::Errno::OPNOTSUPP.raw_os_error())
    );
    let job = PathBuf::from(OWN).join("j");
    fs.mkdir(&job).unwrap();
    let e = fs.write(&job.join("cgroup.procs"), "4243").unwrap_err();
    assert_eq!(
        e.raw_os_error(),
        Some(rustix::io::Errno::OPNOTSUPP.raw_os_error())
    );
}

#[test]
fn v2_create_moves_the_node_to_a_leaf_and_writes_every_limit() {
    let fs = v2_host(true);
    let mode = JobMode::V2 { root: OWN.into() };
    let job = Job::create_with(fs.clone(), &mode, &run("r1"), &limits()).unwrap();
    let leaf = format!("{OWN}/oz0-node/cgroup.procs");
    assert_eq!(fs.content(&leaf).unwrap(), "4242\n4243\n");
    assert_eq!(
        fs.content(&format!("{OWN}/cgroup.subtree_control"))
            .unwrap(),
        "memory pids"
    );
    assert_eq!(job.name(), "oz0-job-4242-1000-r1");
    let d = format!("{OWN}/oz0-job-4242-1000-r1");
    assert_eq!(job.paths(), vec![PathBuf::from(&d)]);
    assert_eq!(fs.content(&format!("{d}/memory.max")).unwrap(), "268435456");
    assert_eq!(fs.content(&format!("{d}/memory.swap.max")).unwrap(), "0");
    assert_eq!(fs.content(&format!("{d}/memory.oom.group")).unwrap(), "1");
    assert_eq!(fs.content(&format!("{d}/pids.max")).unwrap(), "8");
    let limits: Vec<&str> = job.enforced().iter().map(|e| e.limit).collect();
    assert_eq!(limits, ["--memory", "--processes", "--cpu-seconds"]);
    assert!(job.enforced()[2].mechanism.contains("cpu.stat"));
    assert_eq!(
        job.procs_paths(),
        vec![PathBuf::from(format!("{d}/cgroup.procs"))]
    );
    // A second job reuses the prepared parent.
    let job2 = Job::create_with(fs.clone(), &mode, &run("r2"), &Limits::default()).unwrap();
    job2.remove().unwrap();
    job.remove().unwrap();
    no_jobs_left(&fs, CG);
}

#[test]
fn v2_as_root_uses_a_folder_of_its_own_not_its_session() {
    let fs = FakeFs::new(0);
    fs.mount(CG, FakeMount::V2);
    fs.set_root_controllers(CG, "cpu memory pids");
    fs.poke(
        &Path::new(CG).join("cgroup.subtree_control"),
        "cpu memory pids",
    );
    fs.set_writable(CG, true);
    for seg in ["user.slice", "user.slice/session-1.scope"] {
        fs.make_cgroup(&format!("{CG}/{seg}"), true);
        fs.poke(
            &Path::new(CG).join(seg).join("cgroup.subtree_control"),
            if seg == "user.slice" {
                "cpu memory pids"
            } else {
                ""
            },
        );
    }
    fs.add_process(&format!("{CG}/user.slice/session-1.scope"), 4242);
    fs.set_self(
        "0::/user.slice/session-1.scope\n",
        "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
    );
    let fs = Arc::new(fs);
    let r = probe_mode_with(fs.as_ref(), &ProbeOptions::default());
    assert_eq!(
        r.mode,
        JobMode::V2 {
            root: "/sys/fs/cgroup/oz0".into()
        }
    );
    let job = Job::create_with(fs.clone(), &r.mode, &run("r1"), &limits()).unwrap();
    assert_eq!(
        fs.content("/sys/fs/cgroup/oz0/cgroup.subtree_control")
            .unwrap(),
        "memory pids"
    );
    // The session was left alone.
    assert!(!fs.exists(Path::new(
        "/sys/fs/cgroup/user.slice/session-1.scope/oz0-node"
    )));
    job.remove().unwrap();
    no_jobs_left(&fs, CG);
}

#[test]
fn v2_limit_without_its_controller_is_refused() {
    let fs = v2_host(true);
    fs.poke(&Path::new(OWN).join("cgroup.controllers"), "cpu memory");
    let mode = JobMode::V2 { root: OWN.into() };
    let e = Job::create_with(fs.clone(), &mode, &run("r1"), &limits()).unwrap_err();
    assert!(
        matches!(
            e,
            JobError::Unenforceable {
                limit: "--processes",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("offers no pids controller"), "{e}");
    no_jobs_left(&fs, CG);
    // The node was not moved for a job that was refused.
    assert!(!fs.exists(&PathBuf::from(OWN).join("oz0-node")));
    // CPU time and kill need no controller.
    let l = Limits {
        cpu_seconds: Some(1),
        ..Default::default()
    };
    Job::create_with(fs.clone(), &mode, &run("r2"), &l)
        .unwrap()
        .remove()
        .unwrap();
}

#[test]
fn v2_kill_uses_cgroup_kill_and_remove_leaves_nothing() {
    let fs = v2_host(true);
    let mode = JobMode::V2 { root: OWN.into() };
    let job = Job::create_with(fs.clone(), &mode, &run("r1"), &limits()).unwrap();
    fs.add_process(&format!("{OWN}/{}", job.name()), 5000);
    fs.add_process(&format!("{OWN}/{}", job.name()), 5001);
    assert!(!job.is_empty());
    assert_eq!(job.pids(), vec![5000, 5001]);
    job.kill().unwrap();
    assert_eq!(fs.killed(), vec![5000, 5001]);
    job.wait_empty(Duration::from_millis(10)).unwrap();
    job.remove().unwrap();
    no_jobs_left(&fs, CG);
    // The node's own processes were not touched.
    assert_eq!(
        fs.content(&format!("{OWN}/oz0-node/cgroup.procs")).unwrap(),
        "4242\n4243\n"
    );
}

#[test]
fn v2_missing_limit_file_fails_closed() {
    let fs = v2_host(true);
    fs.omit_in_new_cgroups("memory.swap.max");
    let mode = JobMode::V2 { root: OWN.into() };
    let e = Job::create_with(fs.clone(), &mode, &run("r1"), &limits()).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("memory.swap.max"), "{msg}");
    assert!(msg.contains("does not exist"), "{msg}");
    no_jobs_left(&fs, CG);
    // Without a memory limit the same host works.
    let l = Limits {
        processes: Some(8),
        ..Default::default()
    };
    Job::create_with(fs.clone(), &mode, &run("r2"), &l)
        .unwrap()
        .remove()
        .unwrap();
}

#[test]
fn v2_unwritable_limit_fails_closed_with_the_fix() {
    let fs = v2_host(true);
    fs.fail_writes("pids.max", Errno::ACCESS);
    let mode = JobMode::V2 { root: OWN.into() };
    let e = Job::create_with(fs.clone(), &mode, &run("r1"), &limits()).unwrap_err();
    let msg = e.to_string();
    assert!(msg.starts_with("cannot write /sys/fs/cgroup/"), "{msg}");
    assert!(msg.contains("pids.max: permission denied"), "{msg}");
    assert!(msg.contains("Delegate=yes"), "{msg}");
    no_jobs_left(&fs, CG);
}

#[test]
fn v2_unwritable_root_fails_closed() {
    let fs = v2_host(true);
    let mode = JobMode::V2 { root: OWN.into() };
    fs.fail_mkdir(&format!("{OWN}/oz0-job-4242-1000-r1"));
    let e = Job::create_with(fs.clone(), &mode, &run("r1"), &limits()).unwrap_err();
    assert!(e.to_string().starts_with("cannot create "), "{e}");
    no_jobs_left(&fs, CG);
}

#[test]
fn v2_outcome_reports_oom_pids_and_cpu() {
    let fs = v2_host(true);
    let mode = JobMode::V2 { root: OWN.into() };
    let job = Job::create_with(fs.clone(), &mode, &run("r1"), &limits()).unwrap();
    let d = PathBuf::from(OWN).join(job.name());
    fs.poke(
        &d.join("memory.events"),
        "low 0\nhigh 0\nmax 9\noom 1\noom_kill 0\noom_group_kill 1\n",
    );
    fs.poke(&d.join("memory.peak"), "268435456");
    fs.poke(&d.join("pids.events"), "max 3\n");
    fs.poke(
        &d.join("cpu.stat"),
        "usage_usec 250000\nuser_usec 1\nsystem_usec 2\n",
    );
    let o = job.outcome();
    assert!(o.stats.oom_killed);
    assert_eq!(o.stats.memory_peak_bytes, Some(268435456));
    assert_eq!(o.stats.pids_limit_hits, 3);
    assert_eq!(o.stats.cpu_usec, Some(250000));
    assert_eq!(o.limit_hit, Some(LimitHit::Memory));
    assert_eq!(job.cpu_usage().unwrap(), Duration::from_millis(250));
    let json = serde_json::to_value(&o).unwrap();
    assert_eq!(json["limit_hit"], "memory");
}

/// Two runs whose jobs are made at once (the daemon's --jobs, the
/// self-test): the one made second used to find the node already moved
/// into its leaf by the first and the delegated cgroup still holding the
/// node's processes of a moment before, and refused the cgroup as someone
/// else's. Preparations now take turns, and a node in its leaf empties
/// the cgroup above it as it would its own. (Seen on a real kernel by
/// `tests/machines.rs`.) A cgroup that is neither stays refused.
#[test]
fn v2_a_node_in_its_leaf_still_empties_the_cgroup_above_it() {
    let fs = v2_host(true);
    let mode = JobMode::V2 { root: OWN.into() };
    fs.set_self(
        "0::/user.slice/user-1001.slice/user@1001.service/app.slice/oz0.service/oz0-node\n",
        "30 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
    );
    let job = Job::create_with(fs.clone(), &mode, &run("m"), &limits()).unwrap();
    assert_eq!(fs.content(&format!("{OWN}/cgroup.procs")).unwrap(), "");
    assert_eq!(
        fs.content(&format!("{OWN}/oz0-node/cgroup.procs")).unwrap(),
        "4242\n4243\n"
    );
    assert_eq!(
        fs.content(&format!("{OWN}/cgroup.subtree_control"))
            .unwrap(),
        "memory pids"
    );
    job.remove().unwrap();

    let fs = v2_host(true);
    fs.set_self(
        "0::/user.slice/user-1001.slice/user@1001.service/app.slice/other.service\n",
        "30 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
    );
    let e = Job::create_with(fs.clone(), &mode, &run("o"), &limits()).unwrap_err();
    assert!(e.to_string().contains("holds processes"), "{e}");
}
