//! The one-time, root-only delegation of a cgroup subtree to a node's user
//! (`oz0-node setup cgroups --user NAME`), and its undoing (`--remove`). The
//! node never does this itself.
//!
//! Each user gets a folder of their own, `<hierarchy>/oz0/<user>`, under an
//! `oz0` folder that stays root's: several node users (or a node and a test
//! user) coexist on one machine, none can remove, limit or enter another's
//! subtree, and none owns the limits of its own parent.

use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::detect::{controllers_of, procs_of, CgroupVersion, Layout, V2_REQUIRED};
use crate::error::JobError;
use crate::fs::{CgroupFs, RealFs};
use crate::DELEGATED_DIR;

/// Which layout to set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetupMode {
    /// v2 when the unified hierarchy offers memory and pids, else v1.
    #[default]
    Auto,
    /// The unified hierarchy.
    V2,
    /// The memory, pids, cpuacct (and freezer) hierarchies.
    V1,
}

/// What setup did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SetupReport {
    /// The layout set up.
    pub version: CgroupVersion,
    /// The user it was delegated to.
    pub user: String,
    /// Their uid.
    pub uid: u32,
    /// Their primary gid.
    pub gid: u32,
    /// The delegated folders (created now or already there), one per hierarchy.
    pub delegated: Vec<PathBuf>,
    /// Files and folders whose owner was set to the user.
    pub chowned: Vec<PathBuf>,
    /// The shared parents, kept root's (an earlier setup that handed a whole
    /// `oz0` folder to one user is taken back here).
    pub parents: Vec<PathBuf>,
    /// Controllers available to jobs under it.
    pub controllers: Vec<String>,
    /// What the operator does next, if anything.
    pub next: String,
}

/// What `--remove` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RemoveReport {
    /// The user whose folders were removed.
    pub user: String,
    /// Folders removed (the user's jobs, their folder, and an `oz0` parent
    /// left empty), deepest first.
    pub removed: Vec<PathBuf>,
    /// Shared parents kept, each with why.
    pub kept: Vec<Kept>,
}

/// A folder `--remove` left in place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Kept {
    /// The folder.
    pub path: PathBuf,
    /// Why it stays (who else is in it).
    pub why: String,
}

/// Delegates a cgroup subtree to `user` on the real system (root only).
pub fn setup_delegation(user: &str, mode: SetupMode) -> Result<SetupReport, JobError> {
    setup_delegation_with(&RealFs, user, mode)
}

/// Delegates through `fs`. v1: `<hierarchy>/oz0/<user>` in the memory, pids,
/// cpuacct and freezer hierarchies, owned by the user together with its
/// `cgroup.procs` and `tasks`. v2: `<mount>/oz0/<user>` with memory and pids
/// (and cpu when offered) enabled for it, owned by the user together with
/// `cgroup.procs`, `cgroup.subtree_control` and `cgroup.threads` (the files
/// the kernel's delegation model hands over). `oz0` itself is root's.
/// Idempotent.
pub fn setup_delegation_with(
    fs: &dyn CgroupFs,
    user: &str,
    mode: SetupMode,
) -> Result<SetupReport, JobError> {
    setup_delegation_in(fs, user, mode, DELEGATED_DIR)
}

/// As [`setup_delegation_with`], with another parent folder than `oz0`
/// (tests, or a node whose `--cgroup-root` names another folder).
pub fn setup_delegation_in(
    fs: &dyn CgroupFs,
    user: &str,
    mode: SetupMode,
    dir_name: &str,
) -> Result<SetupReport, JobError> {
    let (uid, gid, name) = root_and_user(fs, user, dir_name)?;
    let layout = read_layout(fs)?;
    let v2_ok = layout.v2.as_ref().is_some_and(|h| {
        let c = controllers_of(fs, &h.point);
        V2_REQUIRED.iter().all(|w| c.iter().any(|x| x == w))
    });
    let version = match mode {
        SetupMode::V2 => CgroupVersion::V2,
        SetupMode::V1 => CgroupVersion::V1,
        SetupMode::Auto if v2_ok => CgroupVersion::V2,
        SetupMode::Auto => CgroupVersion::V1,
    };
    let (points, controllers) = hierarchies(fs, &layout, version, v2_ok, &name)?;
    let enable = subtree_control(fs, version, &points);
    let mut rep = SetupReport {
        version,
        user: name,
        uid,
        gid,
        delegated: Vec::new(),
        chowned: Vec::new(),
        parents: Vec::new(),
        controllers,
        next: String::new(),
    };
    for point in &points {
        delegate_under(fs, point, dir_name, enable.as_deref(), &mut rep)?;
    }
    rep.controllers.sort();
    rep.controllers.dedup();
    rep.next = next_step(&rep);
    Ok(rep)
}

/// The hierarchy mounts to delegate under for `version`, and (v1) the
/// controllers they offer; an error names the missing mount and the fix.
fn hierarchies(
    fs: &dyn CgroupFs,
    layout: &Layout,
    version: CgroupVersion,
    v2_ok: bool,
    name: &str,
) -> Result<(Vec<PathBuf>, Vec<String>), JobError> {
    match version {
        CgroupVersion::V2 => {
            let Some(h) = &layout.v2 else {
                return Err(JobError::Unavailable {
                    reason: "no cgroup2 mount".into(),
                    fix: "mount cgroup2 (e.g. at /sys/fs/cgroup) or use `--mode v1`".into(),
                });
            };
            if !v2_ok {
                return Err(JobError::Unavailable {
                    reason: format!(
                        "the cgroup v2 root {} offers [{}]: memory and pids are bound to cgroup v1 hierarchies",
                        h.point.display(),
                        controllers_of(fs, &h.point).join(" ")
                    ),
                    fix: format!("run `oz0-node setup cgroups --user {name}` without forcing v2 (v1 is used)"),
                });
            }
            Ok((vec![h.point.clone()], Vec::new()))
        }
        CgroupVersion::V1 => {
            for need in ["memory", "pids"] {
                if !layout.v1.contains_key(need) {
                    return Err(JobError::Unavailable {
                        reason: format!("no cgroup v1 {need} hierarchy is mounted"),
                        fix: format!(
                            "mount it (`mount -t cgroup -o {need} cgroup /sys/fs/cgroup/{need}`) or use cgroup v2"
                        ),
                    });
                }
            }
            let mut seen: Vec<PathBuf> = Vec::new();
            let mut controllers = Vec::new();
            for ctl in ["memory", "pids", "cpuacct", "freezer"] {
                if let Some(h) = layout.v1.get(ctl) {
                    if !seen.contains(&h.point) {
                        seen.push(h.point.clone());
                        controllers.extend(h.controllers.iter().cloned());
                    }
                }
            }
            Ok((seen, controllers))
        }
    }
}

/// v2: what to write to `cgroup.subtree_control` on the way down (memory
/// and pids, and cpu when offered); v1 has no such file.
fn subtree_control(
    fs: &dyn CgroupFs,
    version: CgroupVersion,
    points: &[PathBuf],
) -> Option<String> {
    match version {
        CgroupVersion::V2 => {
            let mut e: Vec<&str> = V2_REQUIRED.to_vec();
            if controllers_of(fs, &points[0]).iter().any(|c| c == "cpu") {
                e.push("cpu");
            }
            Some(
                e.iter()
                    .map(|c| format!("+{c}"))
                    .collect::<Vec<_>>()
                    .join(" "),
            )
        }
        CgroupVersion::V1 => None,
    }
}

/// Makes `<point>/<dir_name>` (root's) and `<point>/<dir_name>/<user>`
/// (the user's, with the files that place processes), recording each in
/// `rep`.
fn delegate_under(
    fs: &dyn CgroupFs,
    point: &Path,
    dir_name: &str,
    enable: Option<&str>,
    rep: &mut SetupReport,
) -> Result<(), JobError> {
    // v2: the files the kernel's delegation model hands over; v1: the
    // folder and the two files that place processes.
    let handed: &[&str] = match rep.version {
        CgroupVersion::V2 => &["cgroup.procs", "cgroup.subtree_control", "cgroup.threads"],
        CgroupVersion::V1 => &["cgroup.procs", "tasks"],
    };
    let parent = point.join(dir_name);
    let mine = parent.join(&rep.user);
    if let Some(value) = enable {
        write(fs, &point.join("cgroup.subtree_control"), value)?;
    }
    mkdir_ok(fs, &parent)?;
    // Root's, also when an earlier setup handed the whole folder to a user.
    for p in with_files(&parent, handed) {
        if fs.exists(&p) {
            fs.chown(&p, 0, 0).map_err(|e| io("chown", &p, e))?;
        }
    }
    if let Some(value) = enable {
        enable_below(fs, &parent, value)?;
    }
    rep.parents.push(parent);
    mkdir_ok(fs, &mine)?;
    for p in with_files(&mine, handed) {
        if fs.exists(&p) {
            fs.chown(&p, rep.uid, rep.gid)
                .map_err(|e| io("chown", &p, e))?;
            rep.chowned.push(p);
        }
    }
    if rep.version == CgroupVersion::V2 {
        rep.controllers = controllers_of(fs, &mine);
    }
    rep.delegated.push(mine);
    Ok(())
}

/// Enables `value` for the children of the shared parent; a parent that
/// holds processes of its own (EBUSY) is named with the fix.
fn enable_below(fs: &dyn CgroupFs, parent: &Path, value: &str) -> Result<(), JobError> {
    let sc = parent.join("cgroup.subtree_control");
    write(fs, &sc, value).map_err(|e| match e {
        JobError::Io { op, path, err, .. }
            if err.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error()) =>
        {
            JobError::Io {
                op,
                path,
                err,
                fix: format!(
                    "{} holds processes of its own (a node started inside it by an earlier setup): stop that node, then run this again",
                    parent.display()
                ),
            }
        }
        other => other,
    })
}

/// What the operator does next.
fn next_step(rep: &SetupReport) -> String {
    let name = &rep.user;
    match rep.version {
        CgroupVersion::V2 => format!(
            "start the node inside {d}: as root, write its pid to {d}/cgroup.procs before \
             it drops to {name} (or under systemd use `Delegate=yes` instead, which needs no setup)",
            d = rep.delegated[0].display()
        ),
        CgroupVersion::V1 => {
            format!("nothing: the node, running as {name}, finds these folders by itself")
        }
    }
}

/// Removes what [`setup_delegation`] made for `user` on the real system
/// (root only).
pub fn remove_delegation(user: &str) -> Result<RemoveReport, JobError> {
    remove_delegation_in(&RealFs, user, DELEGATED_DIR)
}

/// Removes `<hierarchy>/<dir_name>/<user>` with the jobs under it in every
/// hierarchy (v2 and v1), then each `<dir_name>` left empty. Refuses, and
/// removes nothing, while any process is inside the user's folders: a
/// running node's jobs are its own to end.
pub fn remove_delegation_in(
    fs: &dyn CgroupFs,
    user: &str,
    dir_name: &str,
) -> Result<RemoveReport, JobError> {
    // A user deleted since setup is named by the folder it left.
    let name = match root_and_user(fs, user, dir_name) {
        Ok((_, _, n)) => n,
        Err(JobError::UnknownUser(_)) if is_folder_name(user) => user.to_string(),
        Err(e) => return Err(e),
    };
    let layout = read_layout(fs)?;
    let mut points: Vec<PathBuf> = layout.v2.iter().map(|h| h.point.clone()).collect();
    for h in layout.v1.values() {
        if !points.contains(&h.point) {
            points.push(h.point.clone());
        }
    }
    // Every folder to remove, deepest first; nothing is removed while any
    // holds a process.
    let mut plan: Vec<PathBuf> = Vec::new();
    let mut busy: Vec<String> = Vec::new();
    for point in &points {
        let mine = point.join(dir_name).join(&name);
        if fs.exists(&mine) {
            subtree(fs, &mine, &mut plan)?;
        }
    }
    for d in &plan {
        let p = procs_of(fs, d);
        if !p.is_empty() {
            busy.push(format!(
                "{} ({})",
                d.display(),
                p.iter().map(i32::to_string).collect::<Vec<_>>().join(" ")
            ));
        }
    }
    if !busy.is_empty() {
        return Err(JobError::InUse {
            user: name,
            procs: busy.join(", "),
        });
    }
    let mut rep = RemoveReport {
        user: name,
        removed: Vec::new(),
        kept: Vec::new(),
    };
    for d in plan {
        fs.rmdir(&d).map_err(|e| io("remove", &d, e))?;
        rep.removed.push(d);
    }
    for point in &points {
        let parent = point.join(dir_name);
        if !fs.exists(&parent) {
            continue;
        }
        let left = fs.list_dirs(&parent).map_err(|e| io("list", &parent, e))?;
        if left.is_empty() && procs_of(fs, &parent).is_empty() {
            fs.rmdir(&parent).map_err(|e| io("remove", &parent, e))?;
            rep.removed.push(parent);
        } else {
            rep.kept.push(Kept {
                path: parent,
                why: format!("still holds {}", left.join(", ")),
            });
        }
    }
    Ok(rep)
}

/// `dir` and everything under it, deepest first.
fn subtree(fs: &dyn CgroupFs, dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), JobError> {
    for c in fs.list_dirs(dir).map_err(|e| io("list", dir, e))? {
        subtree(fs, &dir.join(c), out)?;
    }
    out.push(dir.to_path_buf());
    Ok(())
}

fn is_folder_name(s: &str) -> bool {
    !s.is_empty() && !s.contains('/') && !s.starts_with('.')
}

/// Checks the folder name and root, and looks the user up.
fn root_and_user(
    fs: &dyn CgroupFs,
    user: &str,
    dir_name: &str,
) -> Result<(u32, u32, String), JobError> {
    if !is_folder_name(dir_name) {
        return Err(JobError::Unavailable {
            reason: format!("{dir_name:?} is not a folder name"),
            fix: "name one folder, e.g. `oz0`".into(),
        });
    }
    let euid = fs.euid();
    if euid != 0 {
        return Err(JobError::NotRoot(euid));
    }
    let found = lookup_user(fs, user).ok_or_else(|| JobError::UnknownUser(user.to_string()))?;
    if !is_folder_name(&found.2) {
        return Err(JobError::UnknownUser(user.to_string()));
    }
    Ok(found)
}

fn read_layout(fs: &dyn CgroupFs) -> Result<Layout, JobError> {
    Layout::read(fs).map_err(|e| JobError::Unavailable {
        reason: e.to_string(),
        fix: "mount /proc".into(),
    })
}

fn with_files(dir: &Path, files: &[&str]) -> Vec<PathBuf> {
    std::iter::once(dir.to_path_buf())
        .chain(files.iter().map(|f| dir.join(f)))
        .collect()
}

fn write(fs: &dyn CgroupFs, path: &Path, value: &str) -> Result<(), JobError> {
    fs.write(path, value).map_err(|e| io("write", path, e))
}

fn io(op: &'static str, path: &Path, err: io::Error) -> JobError {
    JobError::Io {
        op,
        path: path.to_path_buf(),
        err,
        fix: "check that the cgroup hierarchy is mounted read-write".into(),
    }
}

fn mkdir_ok(fs: &dyn CgroupFs, dir: &Path) -> Result<(), JobError> {
    match fs.mkdir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io("create", dir, e)),
    }
}

/// `(uid, gid, name)` of a user given by name or number, from `/etc/passwd`.
pub(crate) fn lookup_user(fs: &dyn CgroupFs, user: &str) -> Option<(u32, u32, String)> {
    let passwd = fs.read(Path::new("/etc/passwd")).ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        if f.len() < 4 {
            return None;
        }
        let (uid, gid) = (f[2].parse().ok()?, f[3].parse().ok()?);
        (f[0] == user || f[2] == user).then(|| (uid, gid, f[0].to_string()))
    })
}

/// The name of `uid` for messages (the number when unknown).
pub(crate) fn user_name(fs: &dyn CgroupFs, uid: u32) -> String {
    lookup_user(fs, &uid.to_string())
        .map(|(_, _, n)| n)
        .unwrap_or_else(|| uid.to_string())
}
