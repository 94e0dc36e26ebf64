//! `setup cgroups`: delegating a subtree (v2) or an `oz0` folder in every
//! hierarchy (v1) to the node's user, and what it refuses.

use super::*;

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
