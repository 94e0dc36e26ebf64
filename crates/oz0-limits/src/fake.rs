//! An in-memory cgroup tree that behaves like the kernel where the job logic
//! depends on it, so v1 and v2 planning, probing, limits and fail-closed
//! paths are tested without root and without the host having that layout.
//!
//! Modelled: control files created by `mkdir` per hierarchy (v1: by the
//! hierarchy's controllers; v2: by the parent's `cgroup.subtree_control`),
//! `cgroup.controllers` inheritance, the v2 "no internal processes" rule on
//! `cgroup.subtree_control` and `cgroup.procs`, process moves, `cgroup.kill`,
//! `rmdir` refusing a populated cgroup or one with children, `SIGKILL`,
//! per-path write permission, and injected write failures.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::fs::CgroupFs;

/// A hierarchy in the fake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FakeMount {
    /// cgroup2.
    V2,
    /// cgroup v1 with these controllers.
    V1(Vec<String>),
}

#[derive(Debug, Clone)]
struct FileNode {
    content: String,
    writable: bool,
}

#[derive(Debug, Clone)]
struct DirNode {
    writable: bool,
}

#[derive(Debug, Default)]
struct State {
    files: BTreeMap<PathBuf, FileNode>,
    dirs: BTreeMap<PathBuf, DirNode>,
    mounts: Vec<(PathBuf, FakeMount)>,
    euid: u32,
    self_pid: i32,
    omit: BTreeSet<String>,
    fail_write: BTreeMap<String, i32>,
    fail_mkdir: BTreeSet<PathBuf>,
    killed: Vec<i32>,
    chowned: Vec<(PathBuf, u32, u32)>,
}

/// The fake system. Cheap to build; all state behind one mutex.
#[derive(Debug, Default)]
pub struct FakeFs {
    st: Mutex<State>,
}

fn errno(e: rustix::io::Errno) -> io::Error {
    io::Error::from_raw_os_error(e.raw_os_error())
}

const V1_MAX: &str = "9223372036854771712";

fn v1_files(ctl: &str) -> Vec<(&'static str, String)> {
    match ctl {
        "memory" => vec![
            ("memory.limit_in_bytes", V1_MAX.into()),
            ("memory.memsw.limit_in_bytes", V1_MAX.into()),
            ("memory.max_usage_in_bytes", "0".into()),
            ("memory.usage_in_bytes", "0".into()),
            ("memory.failcnt", "0".into()),
            (
                "memory.oom_control",
                "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n".into(),
            ),
        ],
        "pids" => vec![
            ("pids.max", "max".into()),
            ("pids.current", "0".into()),
            ("pids.events", "max 0\n".into()),
            ("pids.peak", "0".into()),
        ],
        "cpuacct" => vec![("cpuacct.usage", "0".into())],
        "cpu" => vec![("cpu.shares", "1024".into())],
        "freezer" => vec![("freezer.state", "THAWED".into())],
        _ => vec![],
    }
}

fn v2_files(ctl: &str) -> Vec<(&'static str, String)> {
    match ctl {
        "memory" => vec![
            ("memory.max", "max".into()),
            ("memory.swap.max", "max".into()),
            ("memory.oom.group", "0".into()),
            ("memory.current", "0".into()),
            ("memory.peak", "0".into()),
            (
                "memory.events",
                "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n".into(),
            ),
        ],
        "pids" => vec![
            ("pids.max", "max".into()),
            ("pids.current", "0".into()),
            ("pids.events", "max 0\n".into()),
            ("pids.peak", "0".into()),
        ],
        "cpu" => vec![
            ("cpu.max", "max 100000".into()),
            ("cpu.weight", "100".into()),
        ],
        _ => vec![],
    }
}

impl State {
    fn mount_of(&self, p: &Path) -> Option<(PathBuf, FakeMount)> {
        self.mounts
            .iter()
            .filter(|(m, _)| p.starts_with(m))
            .max_by_key(|(m, _)| m.components().count())
            .cloned()
    }

    fn put_file(&mut self, p: PathBuf, content: String, writable: bool) {
        self.files.insert(p, FileNode { content, writable });
    }

    /// Fills a new cgroup folder with its control files.
    fn populate(&mut self, dir: &Path, is_root: bool) {
        let Some((_, kind)) = self.mount_of(dir) else {
            return;
        };
        let mut files: Vec<(&'static str, String)> = Vec::new();
        match &kind {
            FakeMount::V1(ctls) => {
                files.push(("cgroup.procs", String::new()));
                files.push(("tasks", String::new()));
                files.push(("notify_on_release", "0".into()));
                files.push(("cgroup.clone_children", "0".into()));
                for c in ctls {
                    files.extend(v1_files(c));
                }
            }
            FakeMount::V2 => {
                let parent_sc = dir
                    .parent()
                    .and_then(|p| self.files.get(&p.join("cgroup.subtree_control")))
                    .map(|f| f.content.clone())
                    .unwrap_or_default();
                files.push(("cgroup.procs", String::new()));
                files.push(("cgroup.threads", String::new()));
                files.push(("cgroup.subtree_control", String::new()));
                files.push((
                    "cpu.stat",
                    "usage_usec 0\nuser_usec 0\nsystem_usec 0\n".into(),
                ));
                if !is_root {
                    files.push(("cgroup.controllers", parent_sc.clone()));
                    files.push(("cgroup.events", "populated 0\nfrozen 0\n".into()));
                    files.push(("cgroup.kill", String::new()));
                    files.push(("cgroup.freeze", "0".into()));
                    files.push(("cgroup.type", "domain".into()));
                    for c in parent_sc.split_whitespace() {
                        files.extend(v2_files(c));
                    }
                } else {
                    files.push(("cgroup.controllers", String::new()));
                }
            }
        }
        for (name, content) in files {
            if self.omit.contains(name) && !is_root {
                continue;
            }
            self.put_file(dir.join(name), content, true);
        }
    }

    fn procs(&self, dir: &Path) -> Vec<i32> {
        self.files
            .get(&dir.join("cgroup.procs"))
            .map(|f| {
                f.content
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn set_procs(&mut self, dir: &Path, pids: &[i32]) {
        if let Some(f) = self.files.get_mut(&dir.join("cgroup.procs")) {
            f.content = pids.iter().map(|p| format!("{p}\n")).collect();
        }
    }

    fn remove_pid_everywhere(&mut self, pid: i32, within: Option<&Path>) {
        let dirs: Vec<PathBuf> = self
            .dirs
            .keys()
            .filter(|d| within.is_none_or(|w| d.starts_with(w)))
            .cloned()
            .collect();
        for d in dirs {
            let p: Vec<i32> = self.procs(&d).into_iter().filter(|x| *x != pid).collect();
            self.set_procs(&d, &p);
        }
    }

    fn subtree_pids(&self, dir: &Path) -> Vec<i32> {
        self.dirs
            .keys()
            .filter(|d| d.starts_with(dir))
            .flat_map(|d| self.procs(d))
            .collect()
    }

    fn child_dirs(&self, dir: &Path) -> Vec<PathBuf> {
        self.dirs
            .keys()
            .filter(|d| d.parent() == Some(dir))
            .cloned()
            .collect()
    }
}

/// The controllers the kernel lets a cgroup enable beside its own
/// processes (cgroup v2's threaded controllers).
const THREADED: [&str; 4] = ["cpu", "cpuset", "pids", "perf_event"];

impl State {
    /// A v2 cgroup (not a mount's root) with processes and a threaded
    /// controller enabled for its children: the kernel's thread root.
    fn is_thread_root(&self, dir: &Path) -> bool {
        let Some((m, FakeMount::V2)) = self.mount_of(dir) else {
            return false;
        };
        if m == dir || self.procs(dir).is_empty() {
            return false;
        }
        self.files
            .get(&dir.join("cgroup.subtree_control"))
            .is_some_and(|f| f.content.split_whitespace().any(|c| THREADED.contains(&c)))
    }
}

impl FakeFs {
    /// An empty system run as `euid` whose own pid is 4242 (started at tick 1000).
    pub fn new(euid: u32) -> Self {
        let fs = FakeFs::default();
        {
            let mut st = fs.st.lock().unwrap_or_else(|e| e.into_inner());
            st.euid = euid;
            st.self_pid = 4242;
        }
        fs.set_file(
            "/etc/passwd",
            "root:x:0:0:root:/root:/bin/sh\noz0test:x:1001:1001::/home/oz0test:/bin/sh\n",
        );
        fs.set_process(4242, 1000);
        fs.set_file("/proc/self/stat", &stat_line(4242, 1000));
        fs
    }

    fn st(&self) -> std::sync::MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets a plain file (writable).
    pub fn set_file(&self, path: &str, content: &str) {
        self.st()
            .put_file(PathBuf::from(path), content.to_string(), true);
    }

    /// Adds a running process with this start time (`/proc/<pid>/stat`).
    pub fn set_process(&self, pid: u32, start: u64) {
        self.set_file(&format!("/proc/{pid}/stat"), &stat_line(pid, start));
    }

    /// Removes a process (it died): its `/proc` entry and its place in every cgroup.
    pub fn end_process(&self, pid: i32) {
        let mut st = self.st();
        st.files.remove(&PathBuf::from(format!("/proc/{pid}/stat")));
        st.remove_pid_everywhere(pid, None);
    }

    /// Mounts a hierarchy at `point` (its root cgroup, owned by root: not writable).
    pub fn mount(&self, point: &str, kind: FakeMount) {
        let p = PathBuf::from(point);
        let mut st = self.st();
        st.mounts.push((p.clone(), kind));
        st.dirs.insert(p.clone(), DirNode { writable: false });
        st.populate(&p, true);
        for (path, f) in st.files.iter_mut() {
            if path.parent() == Some(p.as_path()) {
                f.writable = false;
            }
        }
    }

    /// Sets the v2 root's `cgroup.controllers` (what the kernel offers there).
    pub fn set_root_controllers(&self, point: &str, ctls: &str) {
        self.st().put_file(
            Path::new(point).join("cgroup.controllers"),
            ctls.to_string(),
            false,
        );
    }

    /// Makes a cgroup as root would (parents must exist), writable or not
    /// for this user (the folder and its files).
    pub fn make_cgroup(&self, path: &str, writable: bool) {
        let p = PathBuf::from(path);
        let mut st = self.st();
        st.dirs.insert(p.clone(), DirNode { writable });
        st.populate(&p, false);
        for (fp, f) in st.files.iter_mut() {
            if fp.parent() == Some(p.as_path()) {
                f.writable = writable;
            }
        }
    }

    /// Sets whether this user may write `path` (a folder or a file).
    pub fn set_writable(&self, path: &str, writable: bool) {
        let p = PathBuf::from(path);
        let mut st = self.st();
        if let Some(d) = st.dirs.get_mut(&p) {
            d.writable = writable;
        }
        if let Some(f) = st.files.get_mut(&p) {
            f.writable = writable;
        }
    }

    /// Puts `pid` into the cgroup `dir` (and gives it a `/proc` entry).
    pub fn add_process(&self, dir: &str, pid: i32) {
        {
            let mut st = self.st();
            let d = PathBuf::from(dir);
            let within = st.mount_of(&d).map(|(m, _)| m);
            st.remove_pid_everywhere(pid, within.as_deref());
            let mut p = st.procs(&d);
            p.push(pid);
            st.set_procs(&d, &p);
        }
        if !self.exists(Path::new(&format!("/proc/{pid}/stat"))) {
            self.set_process(u32::try_from(pid).expect("a pid is positive"), 1);
        }
    }

    /// Sets `/proc/self/cgroup` and `/proc/self/mountinfo`.
    pub fn set_self(&self, cgroup: &str, mountinfo: &str) {
        self.set_file("/proc/self/cgroup", cgroup);
        self.set_file("/proc/self/mountinfo", mountinfo);
    }

    /// New cgroups get no file of this name (a kernel without it).
    pub fn omit_in_new_cgroups(&self, name: &str) {
        self.st().omit.insert(name.to_string());
    }

    /// Writes to any file of this name fail with `errno`.
    pub fn fail_writes(&self, name: &str, errno: rustix::io::Errno) {
        self.st()
            .fail_write
            .insert(name.to_string(), errno.raw_os_error());
    }

    /// `mkdir` of this path fails with EACCES.
    pub fn fail_mkdir(&self, path: &str) {
        self.st().fail_mkdir.insert(PathBuf::from(path));
    }

    /// Overwrites a file's content as the kernel would (counters, usage).
    pub fn poke(&self, path: &Path, content: &str) {
        if let Some(f) = self.st().files.get_mut(path) {
            f.content = content.to_string();
        }
    }

    /// Processes sent SIGKILL (or killed by `cgroup.kill`), in order.
    pub fn killed(&self) -> Vec<i32> {
        self.st().killed.clone()
    }

    /// `chown` calls made.
    pub fn chowns(&self) -> Vec<(PathBuf, u32, u32)> {
        self.st().chowned.clone()
    }

    /// Continues as `uid` (what a setup made, seen by its user): what was
    /// chowned to `uid` becomes writable, what was chowned to anyone else
    /// not (the last `chown` of a path counts).
    pub fn become_user(&self, uid: u32) {
        let mut st = self.st();
        st.euid = uid;
        let owners: BTreeMap<PathBuf, u32> =
            st.chowned.iter().map(|(p, u, _)| (p.clone(), *u)).collect();
        for (p, u) in owners {
            if let Some(d) = st.dirs.get_mut(&p) {
                d.writable = u == uid;
            }
            if let Some(f) = st.files.get_mut(&p) {
                f.writable = u == uid;
            }
        }
    }

    /// Folders at or under `prefix`.
    pub fn dirs_under(&self, prefix: &str) -> Vec<PathBuf> {
        self.st()
            .dirs
            .keys()
            .filter(|d| d.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// A file's content, if it exists.
    pub fn content(&self, path: &str) -> Option<String> {
        self.st()
            .files
            .get(Path::new(path))
            .map(|f| f.content.clone())
    }
}

fn stat_line(pid: u32, start: u64) -> String {
    format!("{pid} (oz0-node) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0\n")
}

impl CgroupFs for FakeFs {
    fn read(&self, path: &Path) -> io::Result<String> {
        let st = self.st();
        if path.file_name().is_some_and(|n| n == "cgroup.events") {
            if let Some(dir) = path.parent() {
                if st.files.contains_key(path) {
                    let populated = !st.subtree_pids(dir).is_empty();
                    return Ok(format!("populated {}\nfrozen 0\n", u8::from(populated)));
                }
            }
        }
        if st.dirs.contains_key(path) {
            return Err(errno(rustix::io::Errno::ISDIR));
        }
        st.files
            .get(path)
            .map(|f| f.content.clone())
            .ok_or_else(|| errno(rustix::io::Errno::NOENT))
    }

    fn write(&self, path: &Path, data: &str) -> io::Result<()> {
        let mut st = self.st();
        let Some(f) = st.files.get(path) else {
            return Err(errno(rustix::io::Errno::NOENT));
        };
        if !f.writable {
            return Err(errno(rustix::io::Errno::ACCESS));
        }
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        if let Some(e) = st.fail_write.get(&name) {
            return Err(io::Error::from_raw_os_error(*e));
        }
        let dir = path.parent().unwrap_or(Path::new("/")).to_path_buf();
        let mount = st.mount_of(&dir);
        let is_root = mount.as_ref().is_some_and(|(m, _)| *m == dir);
        let v2 = matches!(mount, Some((_, FakeMount::V2)));
        match name.as_str() {
            "cgroup.procs" | "tasks" => {
                let mut pid: i32 = data
                    .trim()
                    .parse()
                    .map_err(|_| errno(rustix::io::Errno::INVAL))?;
                if pid == 0 {
                    pid = st.self_pid;
                }
                let sc = st
                    .files
                    .get(&dir.join("cgroup.subtree_control"))
                    .map(|f| f.content.trim().to_string())
                    .unwrap_or_default();
                if v2 && !is_root && !sc.is_empty() {
                    return Err(errno(rustix::io::Errno::BUSY));
                }
                // Under a thread root no domain cgroup may hold a process.
                if v2 && dir.ancestors().skip(1).any(|a| st.is_thread_root(a)) {
                    return Err(errno(rustix::io::Errno::OPNOTSUPP));
                }
                let within = mount.map(|(m, _)| m);
                st.remove_pid_everywhere(pid, within.as_deref());
                let mut p = st.procs(&dir);
                p.push(pid);
                st.set_procs(&dir, &p);
            }
            "cgroup.subtree_control" => {
                let offered: Vec<String> = st
                    .files
                    .get(&dir.join("cgroup.controllers"))
                    .map(|f| f.content.split_whitespace().map(str::to_string).collect())
                    .unwrap_or_default();
                let mut cur: BTreeSet<String> = st.files[path]
                    .content
                    .split_whitespace()
                    .map(str::to_string)
                    .collect();
                for tok in data.split_whitespace() {
                    let (add, c) = match tok.split_at(1) {
                        ("+", c) => (true, c),
                        ("-", c) => (false, c),
                        _ => return Err(errno(rustix::io::Errno::INVAL)),
                    };
                    if !offered.iter().any(|o| o == c) {
                        return Err(errno(rustix::io::Errno::NOENT));
                    }
                    if add {
                        cur.insert(c.to_string());
                    } else {
                        cur.remove(c);
                    }
                }
                // As the kernel: beside processes, threaded controllers
                // may be enabled (the cgroup becomes a thread root) and
                // domain controllers may not (EBUSY, or EOPNOTSUPP in a
                // thread root).
                let adds_domain = data
                    .split_whitespace()
                    .any(|t| t.starts_with('+') && !THREADED.contains(&&t[1..]));
                if !is_root && adds_domain && !st.procs(&dir).is_empty() {
                    return Err(errno(if st.is_thread_root(&dir) {
                        rustix::io::Errno::OPNOTSUPP
                    } else {
                        rustix::io::Errno::BUSY
                    }));
                }
                let v: Vec<String> = cur.into_iter().collect();
                st.files.get_mut(path).expect("checked").content = v.join(" ");
            }
            "cgroup.kill" => {
                let pids = st.subtree_pids(&dir);
                for p in pids {
                    st.killed.push(p);
                    st.remove_pid_everywhere(p, None);
                    st.files.remove(&PathBuf::from(format!("/proc/{p}/stat")));
                }
            }
            _ => {
                st.files.get_mut(path).expect("checked").content = data.trim().to_string();
            }
        }
        Ok(())
    }

    fn mkdir(&self, path: &Path) -> io::Result<()> {
        let mut st = self.st();
        if st.dirs.contains_key(path) || st.files.contains_key(path) {
            return Err(errno(rustix::io::Errno::EXIST));
        }
        let parent = path.parent().unwrap_or(Path::new("/"));
        let Some(pd) = st.dirs.get(parent) else {
            return Err(errno(rustix::io::Errno::NOENT));
        };
        if !pd.writable || st.fail_mkdir.contains(path) {
            return Err(errno(rustix::io::Errno::ACCESS));
        }
        st.dirs
            .insert(path.to_path_buf(), DirNode { writable: true });
        st.populate(path, false);
        Ok(())
    }

    fn rmdir(&self, path: &Path) -> io::Result<()> {
        let mut st = self.st();
        if !st.dirs.contains_key(path) {
            return Err(errno(rustix::io::Errno::NOENT));
        }
        let parent = path.parent().unwrap_or(Path::new("/"));
        if !st.dirs.get(parent).is_some_and(|d| d.writable) {
            return Err(errno(rustix::io::Errno::ACCESS));
        }
        if !st.child_dirs(path).is_empty() || !st.procs(path).is_empty() {
            return Err(errno(rustix::io::Errno::BUSY));
        }
        st.dirs.remove(path);
        st.files.retain(|p, _| p.parent() != Some(path));
        Ok(())
    }

    fn list_dirs(&self, path: &Path) -> io::Result<Vec<String>> {
        let st = self.st();
        if !st.dirs.contains_key(path) {
            return Err(errno(rustix::io::Errno::NOENT));
        }
        Ok(st
            .child_dirs(path)
            .iter()
            .filter_map(|d| d.file_name()?.to_str().map(str::to_string))
            .collect())
    }

    fn exists(&self, path: &Path) -> bool {
        let st = self.st();
        st.dirs.contains_key(path) || st.files.contains_key(path)
    }

    fn can_write(&self, path: &Path) -> bool {
        let st = self.st();
        st.dirs.get(path).map(|d| d.writable).unwrap_or(false)
            || st.files.get(path).map(|f| f.writable).unwrap_or(false)
    }

    fn chown(&self, path: &Path, uid: u32, gid: u32) -> io::Result<()> {
        let mut st = self.st();
        if !st.dirs.contains_key(path) && !st.files.contains_key(path) {
            return Err(errno(rustix::io::Errno::NOENT));
        }
        if st.euid != 0 {
            return Err(errno(rustix::io::Errno::PERM));
        }
        st.chowned.push((path.to_path_buf(), uid, gid));
        Ok(())
    }

    fn open_write(&self, path: &Path) -> io::Result<File> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("the fake cannot open {} as a real file", path.display()),
        ))
    }

    fn euid(&self) -> u32 {
        self.st().euid
    }

    fn sigkill(&self, pid: i32) -> io::Result<()> {
        let mut st = self.st();
        st.killed.push(pid);
        st.remove_pid_everywhere(pid, None);
        st.files.remove(&PathBuf::from(format!("/proc/{pid}/stat")));
        Ok(())
    }
}
