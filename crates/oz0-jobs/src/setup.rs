//! The one-time, root-only delegation of a cgroup subtree to the node's user
//! (`oz0-node setup cgroups --user NAME`). The node never does this itself.

use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::JobError;
use crate::fs::{CgroupFs, RealFs};
use crate::probe::{controllers_of, CgroupVersion, Layout, V2_REQUIRED};
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
    /// The delegated folders (created now or already there).
    pub delegated: Vec<PathBuf>,
    /// Files and folders whose owner was set.
    pub chowned: Vec<PathBuf>,
    /// Controllers available to jobs under it.
    pub controllers: Vec<String>,
    /// What the operator does next, if anything.
    pub next: String,
}

/// Delegates a cgroup subtree to `user` on the real system (root only).
pub fn setup_delegation(user: &str, mode: SetupMode) -> Result<SetupReport, JobError> {
    setup_delegation_with(&RealFs, user, mode)
}

/// Delegates through `fs`. v1: `<hierarchy>/oz0` in the memory, pids,
/// cpuacct and freezer hierarchies, owned by the user together with its
/// `cgroup.procs` and `tasks`. v2: `<mount>/oz0` with memory and pids (and cpu
/// when offered) enabled for it, owned by the user together with
/// `cgroup.procs`, `cgroup.subtree_control` and `cgroup.threads` (the files
/// the kernel's delegation model hands over). Idempotent.
pub fn setup_delegation_with(
    fs: &dyn CgroupFs,
    user: &str,
    mode: SetupMode,
) -> Result<SetupReport, JobError> {
    setup_delegation_in(fs, user, mode, DELEGATED_DIR)
}

/// As [`setup_delegation_with`], with another folder name than `oz0` (tests,
/// or a node whose `--cgroup-root` names another folder).
pub fn setup_delegation_in(
    fs: &dyn CgroupFs,
    user: &str,
    mode: SetupMode,
    dir_name: &str,
) -> Result<SetupReport, JobError> {
    if dir_name.is_empty() || dir_name.contains('/') || dir_name.starts_with('.') {
        return Err(JobError::Unavailable {
            reason: format!("{dir_name:?} is not a folder name"),
            fix: "name one folder, e.g. `oz0`".into(),
        });
    }
    let euid = fs.euid();
    if euid != 0 {
        return Err(JobError::NotRoot(euid));
    }
    let (uid, gid, name) =
        lookup_user(fs, user).ok_or_else(|| JobError::UnknownUser(user.to_string()))?;
    let layout = Layout::read(fs).map_err(|reason| JobError::Unavailable {
        reason,
        fix: "mount /proc".into(),
    })?;
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
    let mut rep = SetupReport {
        version,
        user: name.clone(),
        uid,
        gid,
        delegated: Vec::new(),
        chowned: Vec::new(),
        controllers: Vec::new(),
        next: String::new(),
    };
    match version {
        CgroupVersion::V2 => {
            let Some(h) = &layout.v2 else {
                return Err(JobError::Unavailable {
                    reason: "no cgroup2 mount".into(),
                    fix: "mount cgroup2 (e.g. at /sys/fs/cgroup) or use `--mode v1`".into(),
                });
            };
            let offered = controllers_of(fs, &h.point);
            if !v2_ok {
                return Err(JobError::Unavailable {
                    reason: format!(
                        "the cgroup v2 root {} offers [{}]: memory and pids are bound to cgroup v1 hierarchies",
                        h.point.display(),
                        offered.join(" ")
                    ),
                    fix: format!("run `oz0-node setup cgroups --user {name}` without forcing v2 (v1 is used)"),
                });
            }
            let mut enable: Vec<&str> = V2_REQUIRED.to_vec();
            if offered.iter().any(|c| c == "cpu") {
                enable.push("cpu");
            }
            let sc = h.point.join("cgroup.subtree_control");
            let value = enable
                .iter()
                .map(|c| format!("+{c}"))
                .collect::<Vec<_>>()
                .join(" ");
            fs.write(&sc, &value).map_err(|e| io("write", &sc, e))?;
            let dir = h.point.join(dir_name);
            mkdir_ok(fs, &dir)?;
            // The delegatee must not own the limits of its own parent, so only
            // these three files and the folder are handed over.
            for f in [
                "",
                "cgroup.procs",
                "cgroup.subtree_control",
                "cgroup.threads",
            ] {
                let p = if f.is_empty() {
                    dir.clone()
                } else {
                    dir.join(f)
                };
                if fs.exists(&p) {
                    fs.chown(&p, uid, gid).map_err(|e| io("chown", &p, e))?;
                    rep.chowned.push(p);
                }
            }
            rep.controllers = controllers_of(fs, &dir);
            rep.next = format!(
                "start the node inside {d}: as root, write its pid to {d}/cgroup.procs before \
                 it drops to {name} (or under systemd use `Delegate=yes` instead, which needs no setup)",
                d = dir.display()
            );
            rep.delegated.push(dir);
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
            for ctl in ["memory", "pids", "cpuacct", "freezer"] {
                let Some(h) = layout.v1.get(ctl) else {
                    continue;
                };
                if seen.contains(&h.point) {
                    continue;
                }
                seen.push(h.point.clone());
                let dir = h.point.join(dir_name);
                mkdir_ok(fs, &dir)?;
                for f in ["", "cgroup.procs", "tasks"] {
                    let p = if f.is_empty() {
                        dir.clone()
                    } else {
                        dir.join(f)
                    };
                    if fs.exists(&p) {
                        fs.chown(&p, uid, gid).map_err(|e| io("chown", &p, e))?;
                        rep.chowned.push(p);
                    }
                }
                rep.controllers.extend(h.controllers.iter().cloned());
                rep.delegated.push(dir);
            }
            rep.controllers.sort();
            rep.controllers.dedup();
            rep.next =
                format!("nothing: the node, running as {name}, finds these folders by itself");
        }
    }
    Ok(rep)
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
