//! One run's job: create (fail closed), place, kill, remove.
//!
//! This module owns the [`Job`] itself: making its cgroup folder(s) and
//! writing every limit (failing closed), handing out its `cgroup.procs`
//! files, killing everything in it, and removing it. The rest of a job's life
//! is split by responsibility:
//!
//! - `accounting`: CPU usage, counters and the run's [`JobOutcome`];
//! - `cleanup`: removing the jobs of nodes that are gone ([`cleanup_stale`]);
//! - `identity`: the node pid and start time written into a job's name;
//! - `v2_parent`: preparing a cgroup v2 parent for jobs (controllers, the
//!   node's leaf);
//! - `crate::supervisor`: the CPU-time and wall-time [`crate::Supervisor`].

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use oz0_policy::Limits;
use serde::Serialize;

use crate::detect::{procs_of, JobMode};
use crate::error::{is_denied, JobError};
use crate::fs::{CgroupFs, RealFs};
use crate::supervisor::{CPU_POLL_MAX, CPU_POLL_MIN};

mod accounting;
mod cleanup;
mod identity;
mod v2_parent;

pub use cleanup::{cleanup_stale, cleanup_stale_with, CleanupReport};
use identity::node_identity;
use v2_parent::prepare_v2_root;

/// Every job cgroup's name starts with this; the rest is
/// `<node pid>-<node start time in clock ticks>-<run id>`, so a later node can
/// tell whether the node that made it is still alive (pid reuse included).
pub const JOB_PREFIX: &str = "oz0-job-";
/// The v2 leaf the node's own processes move into when the node's cgroup
/// becomes a job parent (a v2 cgroup with controllers enabled for its
/// children may hold no process itself).
pub(crate) const NODE_LEAF: &str = "oz0-node";
/// How long `remove` waits for killed processes to be gone.
const REMOVE_WAIT: Duration = Duration::from_secs(5);
/// How long `Drop` waits (best effort).
const DROP_WAIT: Duration = Duration::from_millis(500);
/// Largest run id.
const MAX_RUN_ID: usize = 64;

/// A run id usable in a cgroup name: 1 to 64 of `A-Z a-z 0-9 _ -`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct RunId(String);

impl RunId {
    /// Validates `s`.
    pub fn new(s: &str) -> Result<Self, JobError> {
        if s.is_empty()
            || s.len() > MAX_RUN_ID
            || !s
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(JobError::BadRunId(s.chars().take(80).collect()));
        }
        Ok(RunId(s.to_string()))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// One limit as enforced, for the run's JSON status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Enforced {
    /// Command-line spelling: `--memory`, `--processes`, `--cpu-seconds`.
    pub limit: &'static str,
    /// The value asked for, in the option's unit.
    pub value: u64,
    /// What holds it (files written, or the polling supervisor).
    pub mechanism: String,
}

/// Counters read from the job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct JobStats {
    /// Highest memory use of the job (v2 `memory.peak`, v1
    /// `memory.max_usage_in_bytes`); None where the kernel has no such file.
    pub memory_peak_bytes: Option<u64>,
    /// Processes killed by the kernel's out-of-memory killer inside the job.
    pub oom_kills: u64,
    /// True when the memory limit was hit hard enough to kill.
    pub oom_killed: bool,
    /// Times a fork was refused by the process limit (`pids.events max`).
    pub pids_limit_hits: u64,
    /// Highest number of tasks at once, where the kernel reports it.
    pub pids_peak: Option<u64>,
    /// CPU time of the whole job, microseconds.
    pub cpu_usec: Option<u64>,
}

/// Which limit ended or constrained the run (the node core's, so that
/// every platform's outcome says it the same way).
pub use oz0_core::LimitHit;

/// What the job says about how the run went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobOutcome {
    /// The counters.
    pub stats: JobStats,
    /// Limits in force, and by what.
    pub enforced: Vec<Enforced>,
    /// The limit most likely to have ended the run: CPU time (the supervisor
    /// killed it), else memory (an OOM kill), else processes (a refused fork).
    pub limit_hit: Option<LimitHit>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Version {
    V2,
    V1,
}

/// One cgroup folder of the job.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Dir {
    /// `unified` (v2) or the v1 controller: `memory`, `pids`, `cpuacct`, `freezer`.
    ctl: &'static str,
    path: PathBuf,
}

/// A run's job: its cgroup(s), with the limits written.
pub struct Job {
    fs: Arc<dyn CgroupFs>,
    version: Version,
    dirs: Vec<Dir>,
    name: String,
    enforced: Vec<Enforced>,
    cpu_limit_hit: AtomicBool,
    removed: bool,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("version", &self.version)
            .field("dirs", &self.dirs)
            .field("enforced", &self.enforced)
            .finish()
    }
}

pub(crate) fn io_err(op: &'static str, path: &Path, err: io::Error, fix: String) -> JobError {
    JobError::Io {
        op,
        path: path.to_path_buf(),
        err,
        fix,
    }
}

fn user_fix(fs: &dyn CgroupFs, version: &Version) -> String {
    let user = crate::setup::user_name(fs, fs.euid());
    match version {
        Version::V1 => format!("run `oz0-node setup cgroups --user {user}` once as root"),
        Version::V2 => format!(
            "start the node in a delegated cgroup (systemd `Delegate=yes`), or run \
             `oz0-node setup cgroups --user {user}` once as root"
        ),
    }
}

fn fix_for(fs: &dyn CgroupFs, version: &Version, e: &io::Error, what: &str) -> String {
    if is_denied(e) {
        user_fix(fs, version)
    } else if e.kind() == io::ErrorKind::NotFound {
        format!("this kernel does not offer {what}; use a kernel with that controller, or do not ask for the limit")
    } else {
        format!("check {what} on this host (`oz0-node sandbox check` shows the cgroup mode)")
    }
}

fn kv(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next() == Some(key))
            .then(|| it.next().and_then(|v| v.parse().ok()))
            .flatten()
    })
}

impl Job {
    /// Creates the run's job on the real system. See [`Job::create_with`].
    pub fn create(mode: &JobMode, run_id: &RunId, limits: &Limits) -> Result<Job, JobError> {
        Self::create_with(Arc::new(RealFs), mode, run_id, limits)
    }

    /// Creates the run's job cgroup(s) under `mode` and writes every limit in
    /// `limits`. **Fails closed**: if the mode is unavailable, a limit cannot
    /// be enforced by it, or any write fails, the error is returned and every
    /// folder made so far is removed.
    pub fn create_with(
        fs: Arc<dyn CgroupFs>,
        mode: &JobMode,
        run_id: &RunId,
        limits: &Limits,
    ) -> Result<Job, JobError> {
        limits.validate()?;
        let (pid, start) = node_identity(fs.as_ref()).unwrap_or((std::process::id(), 0));
        let name = format!("{JOB_PREFIX}{pid}-{start}-{}", run_id.as_str());
        let (version, parents) = match mode {
            JobMode::Unavailable { reason, fix } => {
                return Err(JobError::Unavailable {
                    reason: reason.clone(),
                    fix: fix.clone(),
                })
            }
            JobMode::V2 { root } => (Version::V2, vec![("unified", root.clone())]),
            JobMode::V1 {
                memory,
                pids,
                cpuacct,
                freezer,
            } => {
                if limits.cpu_seconds.is_some() && cpuacct.is_none() {
                    return Err(JobError::Unenforceable {
                        limit: "--cpu-seconds",
                        reason: "no cpuacct hierarchy is usable, so the job's CPU time cannot be read".into(),
                        fix: format!(
                            "mount the cpuacct controller and run `oz0-node setup cgroups --user {}` once as root",
                            crate::setup::user_name(fs.as_ref(), fs.euid())
                        ),
                    });
                }
                let mut p = vec![("pids", pids.clone()), ("memory", memory.clone())];
                if let Some(c) = cpuacct {
                    p.push(("cpuacct", c.clone()));
                }
                if let Some(f) = freezer {
                    p.push(("freezer", f.clone()));
                }
                (Version::V1, p)
            }
        };
        if version == Version::V2 {
            let mut wanted = Vec::new();
            if limits.memory_mib.is_some() {
                wanted.push(("memory", "--memory"));
            }
            if limits.processes.is_some() {
                wanted.push(("pids", "--processes"));
            }
            let root = &parents[0].1;
            if !fs.exists(root) {
                // A parent the probe found creatable (we are root): make it.
                if let Err(e) = fs.mkdir(root) {
                    if e.kind() != io::ErrorKind::AlreadyExists {
                        let fix = fix_for(fs.as_ref(), &Version::V2, &e, "the cgroup parent");
                        return Err(io_err("create", root, e, fix));
                    }
                }
            }
            prepare_v2_root(fs.as_ref(), root, &wanted)?;
        }
        let mut job = Job {
            fs,
            version,
            dirs: Vec::new(),
            name,
            enforced: Vec::new(),
            cpu_limit_hit: AtomicBool::new(false),
            removed: false,
        };
        match job.make(&parents, limits) {
            Ok(()) => Ok(job),
            Err(e) => {
                // Nothing was placed yet: the folders are empty and rmdir works.
                job.rmdir_all();
                job.removed = true;
                Err(e)
            }
        }
    }

    fn make(
        &mut self,
        parents: &[(&'static str, PathBuf)],
        limits: &Limits,
    ) -> Result<(), JobError> {
        let fs = Arc::clone(&self.fs);
        let fs = fs.as_ref();
        for (ctl, parent) in parents {
            if !fs.exists(parent) {
                // A v1 parent the probe found creatable (we are root): make it.
                if let Err(e) = fs.mkdir(parent) {
                    if e.kind() != io::ErrorKind::AlreadyExists {
                        let fix = fix_for(fs, &self.version, &e, "the cgroup parent");
                        return Err(io_err("create", parent, e, fix));
                    }
                }
            }
            let dir = parent.join(&self.name);
            if let Err(e) = fs.mkdir(&dir) {
                let fix = fix_for(fs, &self.version, &e, "the cgroup parent");
                return Err(io_err("create", &dir, e, fix));
            }
            self.dirs.push(Dir { ctl, path: dir });
        }
        let v2 = self.version == Version::V2;
        if let Some(mib) = limits.memory_mib {
            let bytes = mib * 1024 * 1024;
            let d = self.dir_for("memory");
            let mut files = Vec::new();
            if v2 {
                self.write_checked(&d.join("memory.max"), &bytes.to_string(), "memory.max")?;
                self.write_checked(&d.join("memory.swap.max"), "0", "memory.swap.max")?;
                self.write_checked(&d.join("memory.oom.group"), "1", "memory.oom.group")?;
                files.extend(["memory.max", "memory.swap.max=0", "memory.oom.group=1"]);
            } else {
                self.write_checked(
                    &d.join("memory.limit_in_bytes"),
                    &bytes.to_string(),
                    "memory.limit_in_bytes",
                )?;
                files.push("memory.limit_in_bytes");
                // memsw (memory + swap) exists only with swap accounting; it must be
                // written after limit_in_bytes (the kernel keeps memsw >= limit).
                let memsw = d.join("memory.memsw.limit_in_bytes");
                if fs.exists(&memsw) {
                    self.write_checked(&memsw, &bytes.to_string(), "memory.memsw.limit_in_bytes")?;
                    files.push("memory.memsw.limit_in_bytes");
                } else if has_swap(fs) {
                    // Without it the job may push the machine into swap
                    // without bound, and --memory would not hold what it says.
                    return Err(JobError::Unenforceable {
                        limit: "--memory",
                        reason: "this machine has swap and cgroup v1 has no swap accounting (no memory.memsw.limit_in_bytes), so the job's swap cannot be bounded".into(),
                        fix: "boot with swapaccount=1 (or cgroup v2), or turn swap off".into(),
                    });
                }
            }
            self.enforced.push(Enforced {
                limit: "--memory",
                value: mib,
                mechanism: format!(
                    "cgroup {} {} in {}",
                    if v2 { "v2" } else { "v1" },
                    files.join(" + "),
                    d.display()
                ),
            });
        }
        if let Some(n) = limits.processes {
            let d = self.dir_for("pids");
            self.write_checked(&d.join("pids.max"), &n.to_string(), "pids.max")?;
            self.enforced.push(Enforced {
                limit: "--processes",
                value: u64::from(n),
                mechanism: format!(
                    "cgroup {} pids.max in {} (counts every task of the run, threads and the sandbox's {} own processes included)",
                    if v2 { "v2" } else { "v1" },
                    d.display(),
                    crate::SANDBOX_TASKS
                ),
            });
        }
        if let Some(s) = limits.cpu_seconds {
            // Refuse now, not after the command has run unlimited.
            if let Err(e) = self.cpu_usage_usec() {
                let (file, d) = self.cpu_file();
                let fix = fix_for(fs, &self.version, &e, file);
                return Err(io_err("read", &d.join(file), e, fix));
            }
            let (file, d) = self.cpu_file();
            self.enforced.push(Enforced {
                limit: "--cpu-seconds",
                value: s,
                mechanism: format!(
                    "supervisor polling {} every {}-{} ms, killing the whole job when over",
                    d.join(file).display(),
                    CPU_POLL_MIN.as_millis(),
                    CPU_POLL_MAX.as_millis()
                ),
            });
        }
        Ok(())
    }

    /// Writes and reads back: a limit that does not read back is not in force.
    fn write_checked(&self, path: &Path, value: &str, what: &str) -> Result<(), JobError> {
        let fs = self.fs.as_ref();
        if let Err(e) = fs.write(path, value) {
            let fix = fix_for(fs, &self.version, &e, what);
            return Err(io_err("write", path, e, fix));
        }
        match fs.read(path) {
            Ok(got) if got.trim() == value => Ok(()),
            Ok(got) => Err(io_err(
                "enforce",
                path,
                io::Error::other(format!("wrote {value}, reads back {}", got.trim())),
                "the kernel changed the limit; check the parent's limits".into(),
            )),
            Err(e) => {
                let fix = fix_for(fs, &self.version, &e, what);
                Err(io_err("read", path, e, fix))
            }
        }
    }

    fn dir_for(&self, ctl: &str) -> PathBuf {
        self.dirs
            .iter()
            .find(|d| d.ctl == ctl || d.ctl == "unified")
            .map(|d| d.path.clone())
            .unwrap_or_default()
    }

    fn has(&self, ctl: &str) -> bool {
        self.dirs.iter().any(|d| d.ctl == ctl || d.ctl == "unified")
    }

    pub(crate) fn cpu_file(&self) -> (&'static str, PathBuf) {
        match self.version {
            Version::V2 => ("cpu.stat", self.dir_for("unified")),
            Version::V1 => ("cpuacct.usage", self.dir_for("cpuacct")),
        }
    }

    /// The job's cgroup folders (one for v2, one per hierarchy for v1).
    pub fn paths(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.path.clone()).collect()
    }

    /// The job's folder name (same in every hierarchy).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `cgroup`-v2 or -v1.
    pub fn version_name(&self) -> &'static str {
        match self.version {
            Version::V2 => "cgroup-v2",
            Version::V1 => "cgroup-v1",
        }
    }

    /// The limits in force, and by what (for the run's JSON status).
    pub fn enforced(&self) -> &[Enforced] {
        &self.enforced
    }

    /// `cgroup.procs` of every hierarchy the job spans.
    pub fn procs_paths(&self) -> Vec<PathBuf> {
        self.dirs
            .iter()
            .map(|d| d.path.join("cgroup.procs"))
            .collect()
    }

    /// Opens every `cgroup.procs` of the job, write-only and close-on-exec, in
    /// the parent. The launcher's forked child writes `"0"` into each (one
    /// `write(2)` per file, async-signal-safe) before it executes, which moves
    /// the child itself; if any write fails, the child must not execute.
    pub fn procs_files(&self) -> io::Result<Vec<std::fs::File>> {
        self.procs_paths()
            .iter()
            .map(|p| self.fs.open_write(p))
            .collect()
    }

    /// Moves an already running process into the job (every hierarchy).
    /// Not fail closed by itself — the process ran before this — so the
    /// launcher uses [`Job::procs_files`]; this serves tests and tools.
    pub fn place_pid(&self, pid: u32) -> Result<(), JobError> {
        for p in self.procs_paths() {
            if let Err(e) = self.fs.write(&p, &pid.to_string()) {
                let fix = fix_for(self.fs.as_ref(), &self.version, &e, "cgroup.procs");
                return Err(io_err("write", &p, e, fix));
            }
        }
        Ok(())
    }

    /// Processes in the job now (including those in any child cgroup).
    pub fn pids(&self) -> Vec<i32> {
        let root = match self.version {
            Version::V2 => self.dir_for("unified"),
            Version::V1 => self.dir_for("pids"),
        };
        let mut out = Vec::new();
        collect_pids(self.fs.as_ref(), &root, &mut out, 0);
        out
    }

    /// True when no process is left in any hierarchy of the job.
    pub fn is_empty(&self) -> bool {
        if self.version == Version::V2 {
            let d = self.dir_for("unified");
            if let Ok(ev) = self.fs.read(&d.join("cgroup.events")) {
                return kv(&ev, "populated") == Some(0);
            }
        }
        self.dirs.iter().all(|d| {
            let mut v = Vec::new();
            collect_pids(self.fs.as_ref(), &d.path, &mut v, 0);
            v.is_empty()
        })
    }

    /// Kills every process of the job. v2: `cgroup.kill` (atomic, also new
    /// forks). v1: freeze (when the freezer is there) so nothing forks or
    /// exits, SIGKILL every process, thaw; then SIGKILL whatever is left until
    /// the job is empty or a bound is reached. Returns once the signals are
    /// sent; [`Job::wait_empty`] waits for the processes to be gone.
    pub fn kill(&self) -> Result<(), JobError> {
        let fs = self.fs.as_ref();
        if self.version == Version::V2 {
            let k = self.dir_for("unified").join("cgroup.kill");
            if fs.exists(&k) {
                return fs.write(&k, "1").map_err(|e| {
                    let fix = fix_for(fs, &self.version, &e, "cgroup.kill");
                    io_err("write", &k, e, fix)
                });
            }
            // Kernels before 5.14: freeze, kill, thaw.
            let f = self.dir_for("unified").join("cgroup.freeze");
            let frozen = fs.exists(&f) && fs.write(&f, "1").is_ok();
            self.kill_listed();
            if frozen {
                let _ = fs.write(&f, "0");
            }
        } else if self.has("freezer") {
            let st = self.dir_for("freezer").join("freezer.state");
            let frozen = fs.write(&st, "FROZEN").is_ok();
            if frozen {
                let until = Instant::now() + Duration::from_secs(1);
                while Instant::now() < until {
                    match fs.read(&st) {
                        Ok(s) if s.trim() == "FREEZING" => {
                            std::thread::sleep(Duration::from_millis(1))
                        }
                        _ => break,
                    }
                }
            }
            self.kill_listed();
            if frozen {
                let _ = fs.write(&st, "THAWED");
            }
        }
        // Without an atomic kill, repeat: a process may have forked between
        // reading cgroup.procs and the signal. pids.max bounds how many there are.
        let until = Instant::now() + Duration::from_secs(2);
        loop {
            if self.kill_listed() == 0 || Instant::now() >= until {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    /// SIGKILLs every listed process; returns how many were listed.
    fn kill_listed(&self) -> usize {
        let pids = self.pids();
        for p in &pids {
            let _ = self.fs.sigkill(*p);
        }
        pids.len()
    }

    /// Waits until no process is left in the job, or `timeout` passes.
    pub fn wait_empty(&self, timeout: Duration) -> Result<(), JobError> {
        let start = Instant::now();
        let mut nap = Duration::from_micros(200);
        loop {
            if self.is_empty() {
                return Ok(());
            }
            if start.elapsed() >= timeout {
                return Err(JobError::NotEmpty {
                    path: self
                        .dirs
                        .first()
                        .map(|d| d.path.clone())
                        .unwrap_or_default(),
                    waited: timeout,
                });
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(20));
        }
    }

    /// Kills what is left, waits for it to be gone, and removes the job's
    /// folders. An error leaves the folders for [`cleanup_stale`].
    pub fn remove(mut self) -> Result<(), JobError> {
        self.removed = true;
        // Nothing can enter an empty job but through us: skip the kill then.
        if !self.is_empty() {
            self.kill()?;
            self.wait_empty(REMOVE_WAIT)?;
        }
        self.rmdir_checked()
    }

    fn rmdir_checked(&self) -> Result<(), JobError> {
        let fs = self.fs.as_ref();
        let mut first = None;
        for d in &self.dirs {
            if let Err((p, e)) = rmdir_tree(fs, &d.path, 0) {
                if first.is_none() {
                    let fix = fix_for(fs, &self.version, &e, "the job cgroup");
                    first = Some(io_err("remove", &p, e, fix));
                }
            }
        }
        first.map_or(Ok(()), Err)
    }

    fn rmdir_all(&self) {
        let _ = self.rmdir_checked();
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        let _ = self.kill();
        let _ = self.wait_empty(DROP_WAIT);
        self.rmdir_all();
    }
}

/// Depth bound for walking child cgroups a job's processes might have made.
const MAX_DEPTH: usize = 16;

fn collect_pids(fs: &dyn CgroupFs, dir: &Path, out: &mut Vec<i32>, depth: usize) {
    out.extend(procs_of(fs, dir));
    if depth < MAX_DEPTH {
        for c in fs.list_dirs(dir).unwrap_or_default() {
            collect_pids(fs, &dir.join(c), out, depth + 1);
        }
    }
}

/// Removes `dir` and its child cgroups, deepest first. A missing folder is fine.
fn rmdir_tree(fs: &dyn CgroupFs, dir: &Path, depth: usize) -> Result<(), (PathBuf, io::Error)> {
    if !fs.exists(dir) {
        return Ok(());
    }
    if depth < MAX_DEPTH {
        for c in fs.list_dirs(dir).unwrap_or_default() {
            rmdir_tree(fs, &dir.join(c), depth + 1)?;
        }
    }
    // A just-emptied cgroup can answer EBUSY for a moment while its last
    // task is released; retry briefly.
    let mut tries = 0;
    loop {
        match fs.rmdir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e)
                if e.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error())
                    && tries < 50 =>
            {
                tries += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err((dir.to_path_buf(), e)),
        }
    }
}

/// Whether the machine has swap (`SwapTotal` above 0 in `/proc/meminfo`);
/// what cannot be read counts as swap.
fn has_swap(fs: &dyn CgroupFs) -> bool {
    let Ok(text) = fs.read(Path::new("/proc/meminfo")) else {
        return true;
    };
    text.lines()
        .find_map(|l| l.strip_prefix("SwapTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .is_none_or(|kib| kib > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids() {
        assert!(RunId::new("r-1_A").is_ok());
        for bad in ["", "a/b", "..", "a b", &"x".repeat(65)] {
            assert!(RunId::new(bad).is_err(), "{bad:?}");
        }
    }
}
