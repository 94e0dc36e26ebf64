//! Unit tests of the probe's parsers: `/proc/self/cgroup` and
//! `/proc/self/mountinfo` layouts, and the common ancestor of two cgroups.

use super::*;

#[test]
fn parses_hybrid_layout() {
    let cg = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/abc\n2:cpu,cpuacct:/x\n0::/\n";
    let mi = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    let l = Layout::parse(cg, mi);
    assert_eq!(l.v2.unwrap().own, PathBuf::from("/sys/fs/cgroup/unified"));
    assert_eq!(
        l.v1["memory"].own,
        PathBuf::from("/sys/fs/cgroup/memory/process_api/abc")
    );
    assert_eq!(
        l.v1["cpuacct"].own,
        PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/x")
    );
    assert_eq!(l.v1["cpu"].controllers, vec!["cpu", "cpuacct"]);
    assert!(!l.v1.contains_key("name=systemd"));
}

#[test]
fn strips_mount_root_and_unescapes() {
    let cg = "0::/docker/abc/sub\n";
    let mi = "41 31 0:38 /docker/abc /sys/fs/cgroup\\040x rw - cgroup2 cgroup2 rw\n";
    let l = Layout::parse(cg, mi);
    assert_eq!(l.v2.unwrap().own, PathBuf::from("/sys/fs/cgroup x/sub"));
    // A cgroup outside the mount's root is not visible through it.
    let l = Layout::parse("0::/other\n", mi);
    assert!(l.v2.is_none());
}

#[test]
fn common_ancestor_of_paths() {
    assert_eq!(
        common_ancestor(Path::new("/a/b/c"), Path::new("/a/b/d/e")),
        PathBuf::from("/a/b")
    );
}
