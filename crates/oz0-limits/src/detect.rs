//! Finding where a job may live, by asking the system.
//!
//! Inputs are `/proc/self/cgroup` (which cgroup this process is in, per
//! hierarchy), `/proc/self/mountinfo` (where each hierarchy is mounted and
//! which controllers it carries) and the permissions and control files of the
//! candidate folders. Nothing is created or changed here: `sandbox check` runs
//! this without side effects.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::fs::{join_rel, CgroupFs, RealFs};
use crate::DELEGATED_DIR;

/// Controllers a v2 job needs in its parent's `cgroup.controllers`.
pub(crate) const V2_REQUIRED: [&str; 2] = ["memory", "pids"];

/// Which cgroup version to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupVersion {
    /// The unified hierarchy.
    V2,
    /// Per-controller hierarchies.
    V1,
}

/// What the caller of the probe may impose.
#[derive(Debug, Clone, Default)]
pub struct ProbeOptions {
    /// `--cgroup-root`: the folder jobs are created under. For v2, an absolute
    /// path under the cgroup2 mount, or a path relative to it. For v1, a path
    /// relative to each hierarchy's mount (e.g. `oz0`), or an absolute path
    /// under one of them, whose relative part is used for every hierarchy.
    pub cgroup_root: Option<PathBuf>,
    /// Use only this version (default: v2 when it holds, else v1).
    pub version: Option<CgroupVersion>,
}

/// Where jobs are created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum JobMode {
    /// cgroup v2: jobs are children of `root`. When `root` is the node's own
    /// cgroup and holds processes, [`crate::Job::create`] first moves them into
    /// a leaf `root/oz0-node` (the kernel's "no internal processes" rule).
    V2 {
        /// The delegated parent of the job cgroups.
        root: PathBuf,
    },
    /// cgroup v1: one job folder per hierarchy, under these parents.
    V1 {
        /// Parent in the memory hierarchy.
        memory: PathBuf,
        /// Parent in the pids hierarchy.
        pids: PathBuf,
        /// Parent in the cpuacct hierarchy (CPU usage, needed for `--cpu-seconds`).
        cpuacct: Option<PathBuf>,
        /// Parent in the freezer hierarchy (an atomic kill; without it, a kill loop).
        freezer: Option<PathBuf>,
    },
    /// No job can be made here.
    Unavailable {
        /// What is missing.
        reason: String,
        /// The exact fix.
        fix: String,
    },
}

impl JobMode {
    /// Short name for facts: `cgroup-v2`, `cgroup-v1`, `unavailable`.
    pub fn name(&self) -> &'static str {
        match self {
            JobMode::V2 { .. } => "cgroup-v2",
            JobMode::V1 { .. } => "cgroup-v1",
            JobMode::Unavailable { .. } => "unavailable",
        }
    }
}

/// Facts for `sandbox check`: which mode, why, with which controllers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeFacts {
    /// `cgroup-v2`, `cgroup-v1` or `unavailable`.
    pub mode: &'static str,
    /// One line: why this mode.
    pub why: String,
    /// Controllers a job gets.
    pub controllers: Vec<String>,
    /// The job parents.
    pub roots: Vec<PathBuf>,
    /// What the v2 probe found (also when v1 was chosen).
    pub v2: String,
    /// What the v1 probe found (also when v2 was chosen).
    pub v1: String,
    /// How the whole job is killed.
    pub kill: &'static str,
    /// How `--cpu-seconds` is enforced.
    pub cpu_time: &'static str,
    /// The fix, when unavailable.
    pub fix: Option<String>,
}

/// The probe's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeResult {
    /// Where jobs go.
    pub mode: JobMode,
    /// What `sandbox check` prints.
    pub facts: ProbeFacts,
}

/// Probes the real system.
pub fn probe_mode(opts: &ProbeOptions) -> ProbeResult {
    probe_mode_with(&RealFs, opts)
}

/// Probes through `fs` (the real system or a fake).
pub fn probe_mode_with(fs: &dyn CgroupFs, opts: &ProbeOptions) -> ProbeResult {
    let layout = match Layout::read(fs) {
        Ok(l) => l,
        Err(e) => {
            let reason = e.to_string();
            let fix = "mount /proc (the node reads /proc/self/cgroup and /proc/self/mountinfo)"
                .to_string();
            return unavailable(reason.clone(), fix, reason.clone(), reason);
        }
    };
    let user = crate::setup::user_name(fs, fs.euid());
    let want_v2 = opts.version != Some(CgroupVersion::V1);
    let want_v1 = opts.version != Some(CgroupVersion::V2);

    let v2 = if want_v2 {
        probe_v2(fs, &layout, opts.cgroup_root.as_deref(), &user)
    } else {
        Err(("not tried (v1 was asked for)".into(), String::new()))
    };
    let v1 = if want_v1 {
        probe_v1(fs, &layout, opts.cgroup_root.as_deref(), &user)
    } else {
        Err(("not tried (v2 was asked for)".into(), String::new()))
    };

    match (v2, v1) {
        (Ok(v2), v1) => {
            let v1_note = match v1 {
                Ok(f) => format!("also usable: {}", f.why),
                Err((r, _)) => r,
            };
            ProbeResult {
                facts: ProbeFacts {
                    mode: "cgroup-v2",
                    why: v2.why.clone(),
                    controllers: v2.controllers,
                    roots: v2.roots,
                    v2: v2.why,
                    v1: v1_note,
                    kill: v2.kill,
                    cpu_time: CPU_V2,
                    fix: None,
                },
                mode: v2.mode,
            }
        }
        (Err((r2, _)), Ok(v1)) => ProbeResult {
            facts: ProbeFacts {
                mode: "cgroup-v1",
                why: v1.why.clone(),
                controllers: v1.controllers,
                roots: v1.roots,
                v2: r2,
                v1: v1.why,
                kill: v1.kill,
                cpu_time: if matches!(
                    v1.mode,
                    JobMode::V1 {
                        cpuacct: Some(_),
                        ..
                    }
                ) {
                    CPU_V1
                } else {
                    "not available (no cpuacct hierarchy): --cpu-seconds is refused"
                },
                fix: None,
            },
            mode: v1.mode,
        },
        (Err((r2, f2)), Err((r1, f1))) => {
            // Prefer the fix of the layout the host actually has.
            let has_v1 = layout.v1.contains_key("memory") || layout.v1.contains_key("pids");
            let has_v2_ctl = layout
                .v2
                .as_ref()
                .map(|m| {
                    fs.read(&m.point.join("cgroup.controllers"))
                        .map(|c| c.split_whitespace().any(|x| x == "memory"))
                        .unwrap_or(false)
                })
                .unwrap_or(false);
            let (reason, fix) = if has_v2_ctl || !has_v1 {
                (format!("cgroup v2: {r2}; cgroup v1: {r1}"), f2)
            } else {
                (format!("cgroup v1: {r1}; cgroup v2: {r2}"), f1)
            };
            let fix = if fix.is_empty() {
                "name a writable cgroup with --cgroup-root".to_string()
            } else {
                fix
            };
            unavailable(reason, fix, r2, r1)
        }
    }
}

const CPU_V2: &str =
    "polled: cpu.stat usage_usec of the job, the whole job killed when over (overshoot at most one poll interval per CPU)";
const CPU_V1: &str =
    "polled: cpuacct.usage of the job, the whole job killed when over (overshoot at most one poll interval per CPU)";

fn unavailable(reason: String, fix: String, v2: String, v1: String) -> ProbeResult {
    ProbeResult {
        facts: ProbeFacts {
            mode: "unavailable",
            why: reason.clone(),
            controllers: Vec::new(),
            roots: Vec::new(),
            v2,
            v1,
            kill: "none",
            cpu_time: "none",
            fix: Some(fix.clone()),
        },
        mode: JobMode::Unavailable { reason, fix },
    }
}

struct Found {
    mode: JobMode,
    why: String,
    controllers: Vec<String>,
    roots: Vec<PathBuf>,
    kill: &'static str,
}

/// A cgroup hierarchy as this process sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hier {
    /// Mount point.
    pub point: PathBuf,
    /// This process's cgroup folder in it.
    pub own: PathBuf,
    /// Controllers of the hierarchy (v1).
    pub controllers: Vec<String>,
}

/// Why the cgroup layout could not be read: the file and the system's
/// answer (the callers add the fix: mount /proc).
#[derive(Debug, thiserror::Error)]
pub(crate) enum LayoutError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: &'static str,
        source: io::Error,
    },
}

/// What `/proc/self/cgroup` and `/proc/self/mountinfo` say.
#[derive(Debug, Clone, Default)]
pub(crate) struct Layout {
    pub v2: Option<Hier>,
    /// v1 hierarchies by controller name (a co-mounted `cpu,cpuacct` appears twice).
    pub v1: BTreeMap<String, Hier>,
}

impl Layout {
    pub(crate) fn read(fs: &dyn CgroupFs) -> Result<Layout, LayoutError> {
        let read = |path: &'static str| {
            fs.read(Path::new(path))
                .map_err(|source| LayoutError::Read { path, source })
        };
        let cg = read("/proc/self/cgroup")?;
        let mi = read("/proc/self/mountinfo")?;
        Ok(Self::parse(&cg, &mi))
    }

    pub(crate) fn parse(cgroup: &str, mountinfo: &str) -> Layout {
        // controller list ("" for v2) -> own path
        let mut own_v2: Option<String> = None;
        let mut own_v1: BTreeMap<String, String> = BTreeMap::new();
        for line in cgroup.lines() {
            let mut it = line.splitn(3, ':');
            let (Some(id), Some(ctl), Some(path)) = (it.next(), it.next(), it.next()) else {
                continue;
            };
            if id == "0" && ctl.is_empty() {
                own_v2 = Some(path.to_string());
            } else {
                for c in ctl.split(',') {
                    if !c.is_empty() && !c.starts_with("name=") {
                        own_v1.insert(c.to_string(), path.to_string());
                    }
                }
            }
        }
        let mut layout = Layout::default();
        for m in mountinfo.lines().filter_map(parse_mountinfo_line) {
            match m.fstype.as_str() {
                "cgroup2" if layout.v2.is_none() => {
                    if let Some(own) = &own_v2 {
                        if let Some(rel) = strip_root(own, &m.root) {
                            layout.v2 = Some(Hier {
                                own: join_rel(&m.point, &rel),
                                point: m.point.clone(),
                                controllers: Vec::new(),
                            });
                        }
                    }
                }
                "cgroup" => {
                    let ctls: Vec<String> = m
                        .super_opts
                        .iter()
                        .filter(|o| own_v1.contains_key(o.as_str()))
                        .cloned()
                        .collect();
                    for c in &ctls {
                        if layout.v1.contains_key(c) {
                            continue;
                        }
                        let own = &own_v1[c];
                        if let Some(rel) = strip_root(own, &m.root) {
                            layout.v1.insert(
                                c.clone(),
                                Hier {
                                    own: join_rel(&m.point, &rel),
                                    point: m.point.clone(),
                                    controllers: ctls.clone(),
                                },
                            );
                        }
                    }
                }
                _ => {}
            }
        }
        layout
    }
}

/// The part of `own` below a mount whose root is `root`, or None when this
/// process's cgroup is not visible through that mount.
fn strip_root(own: &str, root: &str) -> Option<String> {
    if root == "/" {
        return Some(own.to_string());
    }
    let rest = own.strip_prefix(root)?;
    if rest.is_empty() || rest.starts_with('/') {
        Some(rest.to_string())
    } else {
        None
    }
}

struct MountLine {
    root: String,
    point: PathBuf,
    fstype: String,
    super_opts: Vec<String>,
}

fn parse_mountinfo_line(line: &str) -> Option<MountLine> {
    let (left, right) = line.split_once(" - ")?;
    let l: Vec<&str> = left.split(' ').collect();
    let r: Vec<&str> = right.split(' ').collect();
    if l.len() < 6 || r.len() < 3 {
        return None;
    }
    Some(MountLine {
        root: unescape(l[3]),
        point: PathBuf::from(unescape(l[4])),
        fstype: r[0].to_string(),
        super_opts: r[2].split(',').map(str::to_string).collect(),
    })
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            if let Some(v) = std::str::from_utf8(&b[i + 1..i + 4])
                .ok()
                .and_then(|o| u8::from_str_radix(o, 8).ok())
            {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(crate) fn controllers_of(fs: &dyn CgroupFs, dir: &Path) -> Vec<String> {
    fs.read(&dir.join("cgroup.controllers"))
        .map(|s| s.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

pub(crate) fn procs_of(fs: &dyn CgroupFs, dir: &Path) -> Vec<i32> {
    fs.read(&dir.join("cgroup.procs"))
        .map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn common_ancestor(a: &Path, b: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for (x, y) in a.components().zip(b.components()) {
        if x != y {
            break;
        }
        out.push(x);
    }
    out
}

fn setup_fix(user: &str) -> String {
    format!("run `oz0-node setup cgroups --user {user}` once as root")
}

fn v2_fix(user: &str, mount: &Path) -> String {
    format!(
        "start the node in a delegated cgroup (systemd: a service with `Delegate=yes`, or \
         `systemd-run --user --scope -p Delegate=yes oz0-node …`), or run \
         `oz0-node setup cgroups --user {user}` once as root and start the node inside {}",
        mount.join(DELEGATED_DIR).join(user).display()
    )
}

type ProbeErr = (String, String);

fn probe_v2(
    fs: &dyn CgroupFs,
    layout: &Layout,
    over: Option<&Path>,
    user: &str,
) -> Result<Found, ProbeErr> {
    let Some(h) = &layout.v2 else {
        return Err((
            "no cgroup2 mount holding this process in /proc/self/mountinfo".into(),
            String::new(),
        ));
    };
    let candidates: Vec<PathBuf> = match over {
        Some(p) if p.is_absolute() => {
            if !p.starts_with(&h.point) {
                return Err((
                    format!(
                        "--cgroup-root {} is not under the cgroup2 mount {}",
                        p.display(),
                        h.point.display()
                    ),
                    format!("name a folder under {}", h.point.display()),
                ));
            }
            vec![p.to_path_buf()]
        }
        Some(p) => vec![join_rel(&h.point, &p.to_string_lossy())],
        // Root needs no delegation, and its own cgroup is often a login
        // session's scope that is not ours to reorganise: it uses `oz0`
        // (made on demand) first.
        None if fs.euid() == 0 => vec![h.point.join(DELEGATED_DIR), h.own.clone()],
        // The node's own cgroup (systemd `Delegate=yes`, or started inside
        // its folder), then its user's folder from `setup cgroups`, then the
        // one shared folder an earlier setup handed to a single user.
        None => {
            let mut v = Vec::new();
            // A process started from the leaf an earlier run of the node moved
            // its cgroup's processes into makes its jobs beside that leaf,
            // not in a new one under it (which would offer only the
            // controllers the earlier run enabled).
            if h.own
                .file_name()
                .is_some_and(|n| n == crate::job::NODE_LEAF)
            {
                if let Some(parent) = h.own.parent().filter(|p| *p != h.point) {
                    v.push(parent.to_path_buf());
                }
            }
            v.extend([
                h.own.clone(),
                h.point.join(DELEGATED_DIR).join(user),
                h.point.join(DELEGATED_DIR),
            ]);
            v
        }
    };
    let mut reasons = Vec::new();
    for c in &candidates {
        match check_v2_candidate(fs, h, c) {
            Ok(why) => {
                return Ok(Found {
                    mode: JobMode::V2 { root: c.clone() },
                    why,
                    controllers: if fs.exists(c) {
                        controllers_of(fs, c)
                    } else {
                        V2_REQUIRED.iter().map(|s| s.to_string()).collect()
                    },
                    roots: vec![c.clone()],
                    kill: if fs.exists(&c.join("cgroup.kill")) || c != &h.point {
                        "cgroup.kill"
                    } else {
                        "SIGKILL loop"
                    },
                })
            }
            Err(r) => reasons.push(r),
        }
    }
    Err((reasons.join("; "), v2_fix(user, &h.point)))
}

fn check_v2_candidate(fs: &dyn CgroupFs, h: &Hier, c: &Path) -> Result<String, String> {
    let d = c.display();
    if !fs.exists(c) {
        let offered: Vec<String> = fs
            .read(&h.point.join("cgroup.subtree_control"))
            .map(|s| s.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default();
        let enabled = V2_REQUIRED.iter().all(|w| offered.iter().any(|o| o == w));
        if fs.euid() == 0 && c.parent() == Some(h.point.as_path()) && enabled {
            return Ok(format!(
                "{d} is made on demand by root, with [{}] enabled at the root",
                offered.join(" ")
            ));
        }
        return Err(format!("{d} does not exist"));
    }
    let ctl = controllers_of(fs, c);
    let missing: Vec<&str> = V2_REQUIRED
        .iter()
        .copied()
        .filter(|w| !ctl.iter().any(|x| x == w))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "{d} offers controllers [{}], lacks [{}]",
            ctl.join(" "),
            missing.join(" ")
        ));
    }
    for f in ["", "cgroup.procs", "cgroup.subtree_control"] {
        let p = if f.is_empty() {
            c.to_path_buf()
        } else {
            c.join(f)
        };
        if !fs.can_write(&p) {
            return Err(format!(
                "{} is not writable by this user (not delegated)",
                p.display()
            ));
        }
    }
    // Moving our child from our own cgroup into a job under `c` needs write
    // access to cgroup.procs of their common ancestor (kernel delegation
    // containment, Documentation/admin-guide/cgroup-v2.rst).
    let anc = common_ancestor(&h.own, c);
    if !fs.can_write(&anc.join("cgroup.procs")) {
        return Err(format!(
            "processes cannot be moved from {} to {d}: {}/cgroup.procs is not writable",
            h.own.display(),
            anc.display()
        ));
    }
    let procs = procs_of(fs, c);
    let is_root = c == h.point;
    let mut why = format!("{d} is delegated to this user with [{}]", ctl.join(" "));
    if !procs.is_empty() && !is_root {
        if c == h.own {
            why.push_str(&format!(
                "; its {} process(es) move to the leaf {}/{} first (no internal processes)",
                procs.len(),
                d,
                crate::job::NODE_LEAF
            ));
        } else {
            return Err(format!(
                "{d} holds processes of its own, so no job can be made under it (no internal processes)"
            ));
        }
    }
    Ok(why)
}

fn probe_v1(
    fs: &dyn CgroupFs,
    layout: &Layout,
    over: Option<&Path>,
    user: &str,
) -> Result<Found, ProbeErr> {
    let fix = setup_fix(user);
    let over_rel = v1_relative(layout, over)?;
    let pick = |ctl: &str| pick_v1(fs, layout, over_rel.as_deref(), user, ctl);
    let mut reasons = Vec::new();
    let mut need = |ctl: &str| match pick(ctl) {
        Ok(Some(p)) => Some(p),
        Ok(None) => {
            reasons.push(format!("no {ctl} hierarchy is mounted"));
            None
        }
        Err(r) => {
            reasons.push(r);
            None
        }
    };
    let memory = need("memory");
    let pids = need("pids");
    let (Some(memory), Some(pids)) = (memory, pids) else {
        let fix = if reasons.iter().any(|r| r.contains("is mounted")) {
            "use a kernel with cgroup v1 memory and pids mounted, or cgroup v2 with delegation"
                .to_string()
        } else {
            fix
        };
        return Err((reasons.join("; "), fix));
    };
    let cpuacct = pick("cpuacct").ok().flatten();
    let freezer = pick("freezer").ok().flatten();
    let mut controllers = vec!["memory".to_string(), "pids".to_string()];
    let mut roots = vec![memory.clone(), pids.clone()];
    if let Some(c) = &cpuacct {
        controllers.push("cpuacct".into());
        roots.push(c.clone());
    }
    if let Some(f) = &freezer {
        controllers.push("freezer".into());
        roots.push(f.clone());
    }
    let why = format!(
        "cgroup v1 [{}] writable by this user under {}",
        controllers.join(" "),
        roots
            .iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(Found {
        kill: if freezer.is_some() {
            "freezer, then SIGKILL of every process"
        } else {
            "SIGKILL of every process in cgroup.procs until empty"
        },
        mode: JobMode::V1 {
            memory,
            pids,
            cpuacct,
            freezer,
        },
        why,
        controllers,
        roots,
    })
}

/// The folder named by `--cgroup-root`, relative to each v1 hierarchy.
fn v1_relative(layout: &Layout, over: Option<&Path>) -> Result<Option<String>, ProbeErr> {
    match over {
        Some(p) if p.is_absolute() => {
            for h in layout.v1.values() {
                if let Ok(r) = p.strip_prefix(&h.point) {
                    return Ok(Some(r.to_string_lossy().into_owned()));
                }
            }
            Err((
                format!(
                    "--cgroup-root {} is not under a cgroup v1 hierarchy",
                    p.display()
                ),
                "name a folder under /sys/fs/cgroup/memory (or its relative name, e.g. `oz0`)"
                    .into(),
            ))
        }
        Some(p) => Ok(Some(p.to_string_lossy().into_owned())),
        None => Ok(None),
    }
}

/// The folder jobs of the `ctl` hierarchy go under: `Ok(None)` when that
/// hierarchy is not mounted, an error naming every folder tried when none
/// is usable.
fn pick_v1(
    fs: &dyn CgroupFs,
    layout: &Layout,
    over_rel: Option<&str>,
    user: &str,
    ctl: &str,
) -> Result<Option<PathBuf>, String> {
    let Some(h) = layout.v1.get(ctl) else {
        return Ok(None);
    };
    let cands: Vec<PathBuf> = match over_rel {
        Some(r) => vec![join_rel(&h.point, r)],
        None => {
            // The user's folder from `setup cgroups` first, then the
            // shared folder an earlier setup handed to a single user.
            let mut v = vec![h.point.join(DELEGATED_DIR).join(user)];
            if h.own != h.point {
                v.push(h.own.join(DELEGATED_DIR));
            }
            v.push(h.point.join(DELEGATED_DIR));
            v
        }
    };
    // An existing delegated folder first; a creatable one (root) second.
    for c in &cands {
        if fs.exists(c) && fs.can_write(c) && fs.can_write(&c.join("cgroup.procs")) {
            return Ok(Some(c.clone()));
        }
    }
    for c in &cands {
        if !fs.exists(c) && c.parent().is_some_and(|p| fs.exists(p) && fs.can_write(p)) {
            return Ok(Some(c.clone()));
        }
    }
    Err(format!(
        "no writable folder in the {ctl} hierarchy (tried {})",
        cands
            .iter()
            .map(|c| c.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

#[cfg(test)]
mod tests;
