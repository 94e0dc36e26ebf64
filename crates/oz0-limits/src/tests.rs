//! Planning, probing, limits and fail-closed behaviour for both layouts,
//! against the in-memory fake. This module holds the fake hosts every test
//! starts from; the tests themselves are split by theme:
//!
//! - `v2`: cgroup v2 probing, creation, limits, kill and outcome;
//! - `v1`: the same for cgroup v1 hierarchies;
//! - `lifecycle`: supervision, cleanup of stale jobs, drop, limit validation;
//! - `setup`: `setup cgroups` delegation for both layouts.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use oz0_policy::Limits;

use crate::fake::{FakeFs, FakeMount};
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

mod lifecycle;
mod setup;
mod v1;
mod v2;
