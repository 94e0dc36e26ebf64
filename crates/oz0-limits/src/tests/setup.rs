//! `setup cgroups`: a folder of each user's own under a root-owned `oz0`
//! (v2: the unified hierarchy; v1: every hierarchy), several users side by
//! side, `--remove`, and what each refuses.

use super::*;

const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n\
    oz0test:x:1001:1001::/home/oz0test:/bin/sh\n\
    oz0test2:x:1002:1002::/home/oz0test2:/bin/sh\n";

/// A v2 host with memory and pids at the root, as root.
fn v2_root_host() -> FakeFs {
    let f = FakeFs::new(0);
    f.mount(CG, FakeMount::V2);
    f.set_root_controllers(CG, "cpuset cpu io memory pids");
    f.set_writable(CG, true);
    f.set_writable(&format!("{CG}/cgroup.subtree_control"), true);
    f.set_self(
        "0::/\n",
        "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
    );
    f.set_file("/etc/passwd", PASSWD);
    f
}

fn owners(fs: &FakeFs) -> Vec<(String, u32)> {
    fs.chowns()
        .into_iter()
        .map(|(p, u, g)| {
            assert_eq!(u, g);
            (p.to_string_lossy().into_owned(), u)
        })
        .collect()
}

#[test]
fn setup_v2_delegates_a_folder_of_the_users_own() {
    let fs = v2_root_host();
    let rep = setup_delegation_with(&fs, "oz0test", SetupMode::Auto).unwrap();
    assert_eq!(rep.version, CgroupVersion::V2);
    assert_eq!(
        rep.delegated,
        vec![PathBuf::from("/sys/fs/cgroup/oz0/oz0test")]
    );
    assert_eq!(rep.parents, vec![PathBuf::from("/sys/fs/cgroup/oz0")]);
    assert_eq!(rep.controllers, ["cpu", "memory", "pids"]);
    // `oz0` and its files stay root's; the user gets its folder and the
    // three files of the kernel's delegation model, not its limits.
    let o = owners(&fs);
    let root: Vec<&str> = o
        .iter()
        .filter(|x| x.1 == 0)
        .map(|x| x.0.as_str())
        .collect();
    let user: Vec<&str> = o
        .iter()
        .filter(|x| x.1 == 1001)
        .map(|x| x.0.as_str())
        .collect();
    assert_eq!(
        root,
        [
            "/sys/fs/cgroup/oz0",
            "/sys/fs/cgroup/oz0/cgroup.procs",
            "/sys/fs/cgroup/oz0/cgroup.subtree_control",
            "/sys/fs/cgroup/oz0/cgroup.threads"
        ]
    );
    assert_eq!(
        user,
        [
            "/sys/fs/cgroup/oz0/oz0test",
            "/sys/fs/cgroup/oz0/oz0test/cgroup.procs",
            "/sys/fs/cgroup/oz0/oz0test/cgroup.subtree_control",
            "/sys/fs/cgroup/oz0/oz0test/cgroup.threads"
        ]
    );
    assert_eq!(o.len(), 8);
    assert_eq!(
        fs.content("/sys/fs/cgroup/oz0/cgroup.subtree_control")
            .unwrap(),
        "cpu memory pids"
    );
    assert!(rep
        .next
        .contains("start the node inside /sys/fs/cgroup/oz0/oz0test"));
    // Idempotent.
    setup_delegation_with(&fs, "oz0test", SetupMode::V2).unwrap();
}

#[test]
fn setup_v2_two_users_coexist_and_each_probes_its_own() {
    let fs = v2_root_host();
    setup_delegation_with(&fs, "oz0test", SetupMode::V2).unwrap();
    let second = setup_delegation_with(&fs, "oz0test2", SetupMode::V2).unwrap();
    assert_eq!(
        second.delegated,
        vec![PathBuf::from("/sys/fs/cgroup/oz0/oz0test2")]
    );
    // oz0test2's node, started inside its folder (as `next` says).
    fs.become_user(1002);
    fs.add_process("/sys/fs/cgroup/oz0/oz0test2", 4242);
    fs.set_self(
        "0::/oz0/oz0test2\n",
        "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
    );
    let p = probe_mode_with(&fs, &ProbeOptions::default());
    assert_eq!(
        p.mode,
        JobMode::V2 {
            root: "/sys/fs/cgroup/oz0/oz0test2".into()
        },
        "{:?}",
        p.facts
    );
    let job = Job::create_with(Arc::new(fs), &p.mode, &run("b"), &limits()).unwrap();
    assert!(job.paths()[0].starts_with("/sys/fs/cgroup/oz0/oz0test2"));
}

#[test]
fn setup_v2_refuses_a_shared_folder_a_node_still_runs_in() {
    let fs = v2_root_host();
    // An earlier setup's node running in `oz0` itself.
    fs.poke(
        Path::new("/sys/fs/cgroup/cgroup.subtree_control"),
        "cpu memory pids",
    );
    fs.make_cgroup("/sys/fs/cgroup/oz0", true);
    fs.add_process("/sys/fs/cgroup/oz0", 777);
    let e = setup_delegation_with(&fs, "oz0test", SetupMode::V2).unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("/sys/fs/cgroup/oz0/cgroup.subtree_control"),
        "{m}"
    );
    assert!(m.contains("stop that node, then run this again"), "{m}");
}

#[test]
fn setup_v1_delegates_every_hierarchy() {
    let fs = v1_host(0, false);
    fs.set_file("/etc/passwd", PASSWD);
    let rep = setup_delegation_with(fs.as_ref(), "oz0test", SetupMode::Auto).unwrap();
    assert_eq!(rep.version, CgroupVersion::V1);
    assert_eq!(
        rep.controllers,
        ["cpu", "cpuacct", "freezer", "memory", "pids"]
    );
    assert_eq!(rep.delegated.len(), 4);
    let o = owners(&fs);
    for (m, _) in V1_HIERS {
        for f in ["", "/cgroup.procs", "/tasks"] {
            let shared = (format!("{m}/oz0{f}"), 0);
            let mine = (format!("{m}/oz0/oz0test{f}"), 1001);
            assert!(o.contains(&shared), "{shared:?} not root's");
            assert!(o.contains(&mine), "{mine:?} not the user's");
        }
    }
    // Forcing v2 here explains why not.
    let e = setup_delegation_with(fs.as_ref(), "oz0test", SetupMode::V2).unwrap_err();
    assert!(e.to_string().contains("bound to cgroup v1"), "{e}");
}

#[test]
fn setup_v1_two_users_coexist_and_get_their_limits() {
    let fs = v1_host(0, false);
    fs.set_file("/etc/passwd", PASSWD);
    setup_delegation_with(fs.as_ref(), "oz0test", SetupMode::V1).unwrap();
    setup_delegation_with(fs.as_ref(), "oz0test2", SetupMode::V1).unwrap();
    for (uid, name, other) in [(1001, "oz0test", "oz0test2"), (1002, "oz0test2", "oz0test")] {
        fs.become_user(uid);
        let p = probe_mode_with(fs.as_ref(), &ProbeOptions::default());
        let JobMode::V1 { memory, pids, .. } = &p.mode else {
            panic!("{name}: {:?}", p.facts)
        };
        assert_eq!(
            memory,
            &PathBuf::from(format!("/sys/fs/cgroup/memory/oz0/{name}"))
        );
        assert_eq!(
            pids,
            &PathBuf::from(format!("/sys/fs/cgroup/pids/oz0/{name}"))
        );
        let job = Job::create_with(fs.clone(), &p.mode, &run(name), &limits()).unwrap();
        let n = job.name().to_string();
        assert_eq!(
            fs.content(&format!("/sys/fs/cgroup/pids/oz0/{name}/{n}/pids.max"))
                .as_deref(),
            Some("8")
        );
        // Neither the other user's folder nor the shared parent is theirs.
        for p in [
            format!("/sys/fs/cgroup/memory/oz0/{other}"),
            "/sys/fs/cgroup/memory/oz0".into(),
        ] {
            assert!(!fs.can_write(Path::new(&p)), "{name} may write {p}");
        }
        job.remove().unwrap();
    }
}

#[test]
fn setup_takes_back_a_shared_folder_an_earlier_setup_handed_out() {
    // The earlier layout: `oz0` itself belonged to one user.
    let fs = v1_host(0, true);
    fs.set_file("/etc/passwd", PASSWD);
    setup_delegation_with(fs.as_ref(), "oz0test2", SetupMode::V1).unwrap();
    fs.become_user(1001);
    assert!(!fs.can_write(Path::new("/sys/fs/cgroup/memory/oz0")));
    assert!(!fs.can_write(Path::new("/sys/fs/cgroup/memory/oz0/cgroup.procs")));
}

#[test]
fn remove_undoes_one_user_and_refuses_while_processes_run() {
    let fs = v1_host(0, false);
    fs.set_file("/etc/passwd", PASSWD);
    setup_delegation_with(fs.as_ref(), "oz0test", SetupMode::V1).unwrap();
    setup_delegation_with(fs.as_ref(), "oz0test2", SetupMode::V1).unwrap();
    // A job of oz0test's with a live process.
    let job_dir = "/sys/fs/cgroup/pids/oz0/oz0test/oz0-job-1-1-x";
    fs.make_cgroup(job_dir, true);
    fs.add_process(job_dir, 555);
    let e = remove_delegation_in(fs.as_ref(), "oz0test", "oz0").unwrap_err();
    let m = e.to_string();
    assert!(m.contains(job_dir) && m.contains("555"), "{m}");
    assert!(m.contains("stop oz0test's node"), "{m}");
    assert!(
        fs.exists(Path::new(job_dir)),
        "removed something while busy"
    );

    fs.end_process(555);
    let rep = remove_delegation_in(fs.as_ref(), "oz0test", "oz0").unwrap();
    assert!(rep.removed.contains(&PathBuf::from(job_dir)));
    // Deepest first: the job before its parent.
    let at = |p: &str| rep.removed.iter().position(|x| x == Path::new(p)).unwrap();
    assert!(at(job_dir) < at("/sys/fs/cgroup/pids/oz0/oz0test"));
    for (m, _) in V1_HIERS {
        assert!(!fs.exists(Path::new(&format!("{m}/oz0/oz0test"))));
        assert!(fs.exists(Path::new(&format!("{m}/oz0/oz0test2"))));
    }
    assert_eq!(rep.kept.len(), 4);
    assert!(rep.kept[0].why.contains("oz0test2"), "{:?}", rep.kept);
    // The last user takes the shared folders with it.
    let rep = remove_delegation_in(fs.as_ref(), "oz0test2", "oz0").unwrap();
    assert!(rep.kept.is_empty(), "{:?}", rep.kept);
    assert!(fs
        .dirs_under("/sys/fs/cgroup")
        .iter()
        .all(|d| !d.to_string_lossy().contains("/oz0")));
    // Nothing left to remove is not an error.
    assert!(remove_delegation_in(fs.as_ref(), "oz0test2", "oz0")
        .unwrap()
        .removed
        .is_empty());
}

#[test]
fn setup_refuses_non_root_and_unknown_users() {
    let fs = v1_host(1001, false);
    assert!(matches!(
        setup_delegation_with(fs.as_ref(), "oz0test", SetupMode::Auto),
        Err(JobError::NotRoot(1001))
    ));
    assert!(matches!(
        remove_delegation_in(fs.as_ref(), "oz0test", "oz0"),
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
