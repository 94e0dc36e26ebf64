//! Planning, probing, limits and fail-closed behaviour for both layouts,
//! against the in-memory fake.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oz0_policy::Limits;
use rustix::io::Errno;

use crate::fake::{FakeFs, FakeMount};
use crate::job::cleanup_stale_with;
use crate::*;

const CG: &str = "/sys/fs/cgroup";
const OWN: &str =
    "/sys/fs/cgroup/user.slice/user-1001.slice/user@1001.service/app.slice/oz0.service";

fn limits() -> Limits {
    Limits {
        memory_mib: Some(256),
        processes: Some(8),
        cpu_seconds: Some(1),
        timeout_seconds: Some(10),
        tmp_mib: None,
    }
}

fn run(s: &str) -> RunId {
    RunId::new(s).unwrap()
}

/// A systemd host: cgroup v2 only, the node (pid 4242, plus 4243) in its own
/// service cgroup, delegated to uid 1001 when `delegated`.
fn v2_host(delegated: bool) -> Arc<FakeFs> {
    let fs = FakeFs::new(1001);
    fs.mount(CG, FakeMount::V2);
    fs.set_root_controllers(CG, "cpuset cpu io memory pids");
    fs.poke(
        &Path::new(CG).join("cgroup.subtree_control"),
        "cpu memory pids",
    );
    let mut p = CG.to_string();
    for (seg, w) in [
        ("user.slice", false),
        ("user-1001.slice", false),
        ("user@1001.service", true),
        ("app.slice", true),
    ] {
        p = format!("{p}/{seg}");
        fs.make_cgroup(&p, w);
        fs.poke(
            &Path::new(&p).join("cgroup.subtree_control"),
            "cpu memory pids",
        );
    }
    fs.make_cgroup(OWN, delegated);
    fs.add_process(OWN, 4242);
    fs.add_process(OWN, 4243);
    fs.set_self(
        "0::/user.slice/user-1001.slice/user@1001.service/app.slice/oz0.service\n",
        "30 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
    );
    Arc::new(fs)
}

const V1_MOUNTS: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
34 31 0:31 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

const V1_HIERS: [(&str, &[&str]); 4] = [
    ("/sys/fs/cgroup/memory", &["memory"]),
    ("/sys/fs/cgroup/pids", &["pids"]),
    ("/sys/fs/cgroup/cpu,cpuacct", &["cpu", "cpuacct"]),
    ("/sys/fs/cgroup/freezer", &["freezer"]),
];

/// This build machine's layout: v1 memory/pids/cpu,cpuacct/freezer, and a v2
/// mount without controllers. `delegated`: `oz0` folders exist and belong to the user.
fn v1_host(euid: u32, delegated: bool) -> Arc<FakeFs> {
    let fs = FakeFs::new(euid);
    fs.mount("/sys/fs/cgroup/unified", FakeMount::V2);
    for (m, c) in V1_HIERS {
        fs.mount(m, FakeMount::V1(c.iter().map(|s| s.to_string()).collect()));
        if delegated {
            fs.make_cgroup(&format!("{m}/oz0"), true);
        }
        if euid == 0 {
            fs.set_writable(m, true);
        }
    }
    fs.set_self(
        "9:freezer:/\n8:pids:/\n4:memory:/\n2:cpu,cpuacct:/\n0::/\n",
        V1_MOUNTS,
    );
    Arc::new(fs)
}

fn no_jobs_left(fs: &FakeFs, under: &str) {
    let left: Vec<PathBuf> = fs
        .dirs_under(under)
        .into_iter()
        .filter(|d| d.to_string_lossy().contains(JOB_PREFIX))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

// ---------- cgroup v2 ----------

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
fn setup_v2_delegates_a_subtree() {
    let fs = v2_host(true);
    // Setup runs as root.
    let fs = {
        let f = Arc::try_unwrap(fs).unwrap();
        drop(f);
        let f = FakeFs::new(0);
        f.mount(CG, FakeMount::V2);
        f.set_root_controllers(CG, "cpuset cpu io memory pids");
        f.set_writable(CG, true);
        f.set_writable(&format!("{CG}/cgroup.subtree_control"), true);
        f.set_self(
            "0::/\n",
            "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
        );
        f
    };
    let rep = setup_delegation_with(&fs, "oz0test", SetupMode::Auto).unwrap();
    assert_eq!(rep.version, CgroupVersion::V2);
    assert_eq!(rep.delegated, vec![PathBuf::from("/sys/fs/cgroup/oz0")]);
    assert_eq!(rep.controllers, ["cpu", "memory", "pids"]);
    let chowned: Vec<String> = fs
        .chowns()
        .iter()
        .map(|(p, u, g)| {
            assert_eq!((*u, *g), (1001, 1001));
            p.to_string_lossy().into_owned()
        })
        .collect();
    assert_eq!(
        chowned,
        [
            "/sys/fs/cgroup/oz0",
            "/sys/fs/cgroup/oz0/cgroup.procs",
            "/sys/fs/cgroup/oz0/cgroup.subtree_control",
            "/sys/fs/cgroup/oz0/cgroup.threads"
        ]
    );
    assert!(rep
        .next
        .contains("start the node inside /sys/fs/cgroup/oz0"));
    // Idempotent.
    setup_delegation_with(&fs, "oz0test", SetupMode::V2).unwrap();
}

// ---------- cgroup v1 ----------

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

#[test]
fn v1_without_memsw_still_limits_memory() {
    let fs = v1_host(1001, true);
    fs.omit_in_new_cgroups("memory.memsw.limit_in_bytes");
    let mode = probe_mode_with(fs.as_ref(), &ProbeOptions::default()).mode;
    let job = Job::create_with(fs.clone(), &mode, &run("r1"), &limits()).unwrap();
    assert!(!job.enforced()[0].mechanism.contains("memsw"));
    job.remove().unwrap();
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

#[test]
fn setup_v1_delegates_every_hierarchy() {
    let fs = v1_host(0, false);
    let rep = setup_delegation_with(fs.as_ref(), "oz0test", SetupMode::Auto).unwrap();
    assert_eq!(rep.version, CgroupVersion::V1);
    assert_eq!(
        rep.controllers,
        ["cpu", "cpuacct", "freezer", "memory", "pids"]
    );
    assert_eq!(rep.delegated.len(), 4);
    let chowned: Vec<PathBuf> = fs.chowns().into_iter().map(|(p, _, _)| p).collect();
    for (m, _) in V1_HIERS {
        for f in ["", "/cgroup.procs", "/tasks"] {
            let p = PathBuf::from(format!("{m}/oz0{f}"));
            assert!(chowned.contains(&p), "{p:?} not chowned");
        }
    }
    // Forcing v2 here explains why not.
    let e = setup_delegation_with(fs.as_ref(), "oz0test", SetupMode::V2).unwrap_err();
    assert!(e.to_string().contains("bound to cgroup v1"), "{e}");
}

#[test]
fn setup_refuses_non_root_and_unknown_users() {
    let fs = v1_host(1001, false);
    assert!(matches!(
        setup_delegation_with(fs.as_ref(), "oz0test", SetupMode::Auto),
        Err(JobError::NotRoot(1001))
    ));
    let fs = v1_host(0, false);
    assert!(matches!(
        setup_delegation_with(fs.as_ref(), "nobody-here", SetupMode::Auto),
        Err(JobError::UnknownUser(_))
    ));
    // By number works too.
    assert_eq!(
        setup_delegation_with(fs.as_ref(), "1001", SetupMode::V1)
            .unwrap()
            .user,
        "oz0test"
    );
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
