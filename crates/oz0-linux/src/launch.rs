//! The launcher: prepares a run, starts bubblewrap, supervises the run to its
//! end and cleans up.
//!
//! One process tree: the command is the first process of a fresh pid
//! namespace under bubblewrap's init. When the command exits, init exits and
//! the kernel kills every process left in the namespace before init's exit is
//! reported, so `run` returns only once all of them are gone. A timeout or a
//! cancel kills init with SIGKILL (same effect). If the node dies, bubblewrap
//! gets SIGKILL (`--die-with-parent`, set from this thread, which lives for the
//! whole run) and init follows it.
//!
//! Nothing secret is on a command line or in bubblewrap's environment:
//! bubblewrap starts with an empty environment and reads its arguments from a
//! memory file (`--args`); the stage reads the command's environment from
//! another. Both are visible inside only as what the run itself is given.

use std::fs::{self, File};
use std::io::{self, Read, Seek, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use oz0_policy::RunSpec;
use rustix::event::{poll, PollFd, PollFlags};
use rustix::process::{pidfd_open, pidfd_send_signal, PidfdFlags, Signal};
use serde::Serialize;

use crate::bwrap;
use crate::host;
use crate::landlock::LandlockReport;
use crate::plan::{self, fds, Placeholder, PlaceholderKind, Plan};
use crate::pool::{Back, Pool, Taken};
use crate::stage::StageConfig;

/// How to launch.
pub struct LaunchOptions<'a> {
    /// bubblewrap.
    pub bwrap: PathBuf,
    /// The node binary to bind as the stage.
    pub node_exe: PathBuf,
    /// Readable when the run must be cancelled (e.g. a signal self-pipe).
    pub cancel: Option<OwnedFd>,
    /// Where the run's private host folder goes (default: [`scratch_base`]).
    pub scratch: Option<PathBuf>,
    /// The node's egress proxy; required when the run has egress.
    pub proxy: Option<&'a oz0_egress::ProxyHandle>,
    /// Where the run's job goes; required when the run has job limits.
    pub jobs: Option<&'a oz0_jobs::JobMode>,
    /// Seccomp profile, devices: what the launcher adds to the spec.
    pub extras: plan::Extras,
    /// Where the command's stdin and stdout go.
    pub stdio: StdioMode,
    /// What the node does with what the run left that host git would run
    /// or follow (see `gitlook`).
    pub git: crate::gitlook::Policy,
}

/// The command's stdin and stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StdioMode {
    /// The caller's (MCP over stdio, interactive use).
    #[default]
    Inherit,
    /// `/dev/null` both (the self-test's runs).
    Null,
}

/// The status of a run killed at its `--timeout` (as `timeout(1)` uses).
pub const EXIT_TIMEOUT: i32 = 124;

/// A finished process's status as a shell reports it: its exit code, or
/// 128+N when signal N ended it.
pub fn status_code(status: std::process::ExitStatus) -> i32 {
    status.code().unwrap_or_else(|| {
        128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0)
    })
}

/// The status of a command that could not be executed, as a shell reports
/// it: 127 when it was not found, else 126.
pub fn exec_failure_code(e: &io::Error) -> i32 {
    if e.kind() == io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "how")]
pub enum Ended {
    /// The command exited (its status is `exit_code`; bubblewrap reports death
    /// by signal N as 128+N).
    Exited,
    /// `--timeout` was reached and the run was killed.
    Timeout,
    /// `--cpu-seconds` was used up and the run was killed.
    CpuTime,
    /// The run was cancelled (the node got a signal).
    Cancelled,
    /// The command could not be executed (not found: 127, otherwise 126).
    NotExecuted {
        /// Why.
        reason: String,
    },
}

/// What a run did and what held it.
#[derive(Debug, Clone, Serialize)]
pub struct RunOutcome {
    /// The run's id.
    pub run_id: String,
    /// How it ended.
    pub ended: Ended,
    /// The command's status (128+N for signal N); 124 on timeout.
    pub exit_code: i32,
    /// Wall time, milliseconds.
    pub duration_ms: u64,
    /// What Landlock enforced.
    pub landlock: Option<LandlockReport>,
    /// The namespaces the run had.
    pub namespaces: Vec<&'static str>,
    /// The seccomp profile and how many rules it has.
    pub seccomp: SeccompSummary,
    /// Protected paths and how each was held.
    pub protected: Vec<plan::Protected>,
    /// The job: limits enforced, counters, the limit hit.
    pub job: Option<JobReport>,
    /// The size of the run's `/tmp` and of its `/dev`.
    pub tmp: plan::TmpfsSize,
    /// The look at git after the run.
    pub git: Option<crate::gitlook::GitLook>,
    /// Egress: the proxy's run socket and the bridge.
    pub egress: Option<EgressReport>,
}

/// The run's job, for the status.
#[derive(Debug, Clone, Serialize)]
pub struct JobReport {
    /// `cgroup_v2` or `cgroup_v1`.
    pub mode: &'static str,
    /// What the job said at the end.
    #[serde(flatten)]
    pub outcome: oz0_jobs::JobOutcome,
    /// How CPU time and wall time were supervised.
    pub supervisor: String,
}

/// The run's egress, for the status.
#[derive(Debug, Clone, Serialize)]
pub struct EgressReport {
    /// The allowlist, canonical.
    pub allow: Vec<String>,
    /// Forwarded node-local ports.
    pub forward: Vec<u16>,
    /// The bridge's port inside the run.
    pub bridge_port: Option<u16>,
}

/// Seccomp, summarised for the status.
#[derive(Debug, Clone, Serialize)]
pub struct SeccompSummary {
    /// Profile name.
    pub profile: crate::seccomp::Profile,
    /// New unix sockets refused to the command (`--allow-unix-sockets` lifts it).
    pub unix_sockets_refused: bool,
    /// Refused system calls.
    pub refused: Vec<&'static str>,
}

/// The sandbox refused or failed: the command never ran.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The host could not be examined.
    #[error(transparent)]
    Host(#[from] host::HostError),
    /// No plan.
    #[error(transparent)]
    Plan(#[from] plan::PlanError),
    /// bubblewrap missing or unusable.
    #[error(transparent)]
    Bwrap(#[from] bwrap::BwrapError),
    /// The job could not be made (fail closed).
    #[error("the run's job could not be made, so nothing runs: {0}")]
    Job(String),
    /// The egress proxy could not take the run.
    #[error("the egress proxy could not take the run: {0}")]
    Egress(String),
    /// A limit that this build cannot enforce was asked for.
    #[error("{0} was asked for, and this node cannot enforce it: the run is refused rather than run without it")]
    Unenforceable(&'static str),
    /// Preparing the run failed.
    #[error("preparing the run: {0}")]
    Prepare(String),
    /// bubblewrap failed before the stage ran.
    #[error("bubblewrap could not start the sandbox: {0}")]
    Start(String),
    /// The stage could not complete the sandbox.
    #[error("the sandbox could not be completed: {0}")]
    Stage(String),
}

fn prep<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> SandboxError + '_ {
    move |e| SandboxError::Prepare(format!("{what}: {e}"))
}

/// A new run id: 16 hex digits from the OS random source.
pub fn new_run_id() -> String {
    let mut b = [0u8; 8];
    let _ = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty());
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The run's private host folder; removed on drop.
struct Scratch {
    dir: PathBuf,
    /// When it was made, by the kernel's clock for file changes (its
    /// `ctime`): what the run changes later is stamped no earlier (see
    /// `gitlook`).
    made: std::time::Duration,
}

impl Scratch {
    fn create(base: &Path, run_id: &str) -> Result<Scratch, SandboxError> {
        let dir = base.join(format!("oz0-run-{run_id}"));
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(prep("creating the run's folder"))?;
        let st = rustix::fs::stat(&dir).map_err(prep("the run's folder"))?;
        let made = std::time::Duration::new(st.st_ctime.max(0) as u64, st.st_ctime_nsec as u32);
        Ok(Scratch { dir, made })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        remove_run_dir(&self.dir);
    }
}

fn remove_run_dir(dir: &Path) {
    let _ = fs::remove_dir_all(dir);
}

/// The record of a run in its private folder: who runs it, and the
/// placeholders it will create.
#[derive(Serialize, serde::Deserialize)]
struct RunRecord {
    pid: i32,
    /// The process's start time (clock ticks since boot), so that a reused
    /// pid is not taken for the live run.
    start: u64,
    /// The writable folders the run held (locked): a sweep removes the
    /// placeholders only while it holds them itself, so never those of a
    /// live run that now uses the same names.
    #[serde(default)]
    roots: Vec<PathBuf>,
    placeholders: Vec<Placeholder>,
}

/// `/proc/PID/stat` field 22: the start time, or None if no such process.
fn start_time(pid: i32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces or parentheses: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

const RECORD: &str = "run.json";

fn record_run(
    dir: &Path,
    roots: &[PathBuf],
    placeholders: &[Placeholder],
) -> Result<(), SandboxError> {
    let pid = std::process::id() as i32;
    let rec = RunRecord {
        pid,
        start: start_time(pid).unwrap_or(0),
        roots: roots.to_vec(),
        placeholders: placeholders.to_vec(),
    };
    let text = serde_json::to_vec(&rec).map_err(prep("the run record"))?;
    // The folder was just made, private: the record is new there, and no
    // link is followed to it.
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o600)
        .open(dir.join(RECORD))
        .and_then(|mut f| f.write_all(&text))
        .map_err(prep("the run record"))
}

/// Where a run's private host folder (its record, its proxy socket) goes
/// when the caller names none: `$TMPDIR` when it is set; else a memory file
/// system of this user's or everyone's (`$XDG_RUNTIME_DIR`, `/dev/shm`),
/// where making and removing the folder costs no disk work (on a file
/// system mounted with `discard` and no journal, removing a folder waits for
/// the disk); else `/tmp`.
pub fn scratch_base() -> PathBuf {
    if let Some(t) = std::env::var_os("TMPDIR").filter(|t| !t.is_empty()) {
        return PathBuf::from(t);
    }
    let uid = rustix::process::getuid().as_raw();
    let runtime = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute() && private_dir_of(d, uid));
    runtime
        .or_else(|| Some(PathBuf::from("/dev/shm")).filter(|d| shared_sticky_dir(d)))
        .unwrap_or_else(std::env::temp_dir)
}

/// A real folder (not a link) owned by `uid` that only its owner can enter.
fn private_dir_of(d: &Path, uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    fs::symlink_metadata(d).is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0)
}

/// A real folder (not a link) everyone may create in, with the sticky bit
/// (so no one removes another's entries), as `/tmp` is.
fn shared_sticky_dir(d: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    fs::symlink_metadata(d).is_ok_and(|m| m.is_dir() && shared_sticky(m.mode(), m.uid()))
}

/// Whether a folder of `mode` owned by `uid` is one everyone may create in
/// and no one but its owner may remove another's entries from, owned by
/// root.
fn shared_sticky(mode: u32, uid: u32) -> bool {
    mode & 0o1777 == 0o1777 && uid == 0
}

/// How old a run folder without a record must be before a sweep takes it
/// for the leftover of a dead node.
const UNRECORDED_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// Removes what runs of dead node processes left in `base`: their
/// placeholders (only if still empty, never through a link) and their
/// private folders. Folders of live runs, or that this user does not own,
/// are left alone, and so is a dead run whose writable folders another
/// live run holds now (which may have made placeholders of its own under
/// the same names); a later sweep takes them. A run sweeps before it looks
/// at its own folders, so that it never takes a dead run's leftovers there
/// for the caller's.
pub fn sweep_stale(base: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    let uid = rustix::process::getuid().as_raw();
    for e in entries.flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().starts_with("oz0-run-") {
            continue;
        }
        let dir = e.path();
        let Ok(meta) = fs::symlink_metadata(&dir) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != uid {
            continue;
        }
        let record = crate::hostfs::open_no_links(&dir.join(RECORD), rustix::fs::OFlags::RDONLY)
            .map(File::from)
            .map_err(io::Error::from)
            .and_then(|f| {
                let mut text = Vec::new();
                f.take(1 << 20).read_to_end(&mut text).map(|_| text)
            });
        let Ok(text) = record else {
            // A node writes its record right after making the folder, before
            // anything of the run exists outside it; a folder still without
            // one after a minute belongs to a node that died in between.
            let age = meta.modified().ok().and_then(|m| m.elapsed().ok());
            if age.is_some_and(|a| a > UNRECORDED_GRACE) {
                remove_run_dir(&dir);
            }
            continue;
        };
        let Ok(rec) = serde_json::from_slice::<RunRecord>(&text) else {
            continue;
        };
        if start_time(rec.pid).is_some_and(|s| s == rec.start) {
            continue;
        }
        // The dead run's folders, held while its placeholders go: one a live
        // run holds now may have placeholders of that run's own under the
        // same names. Then the record waits for a later sweep.
        let Some(_held) = host::lock_folders(&rec.roots) else {
            continue;
        };
        remove_placeholders(&rec.placeholders, None);
        remove_run_dir(&dir);
    }
}

/// Removes the placeholders the node made, if they are still what it made
/// (an empty folder or empty regular file), never following a link: each
/// folder holding placeholders is opened once, without following any link
/// on the way, and the entries are looked at and removed through it. Empty
/// folders go back to `pool` when it can take them.
fn remove_placeholders(ps: &[Placeholder], mut pool: Option<&mut Pool>) {
    use rustix::fs::{statat, unlinkat, AtFlags, FileType};
    let mut folders = crate::hold::Folders::default();
    for p in ps.iter().rev() {
        let Ok((dir, name)) = folders.place(p) else {
            continue;
        };
        if let (PlaceholderKind::Dir, Some(pool)) = (p.kind, pool.as_deref_mut()) {
            match pool.give_back(dir, name, p.path.as_path()) {
                Back::Aside | Back::Leave => continue,
                Back::Remove => {}
            }
        }
        let Ok(st) = statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        let ft = FileType::from_raw_mode(st.st_mode);
        let _ = match p.kind {
            PlaceholderKind::Dir if ft == FileType::Directory => {
                unlinkat(dir, name, AtFlags::REMOVEDIR)
            }
            PlaceholderKind::File if ft == FileType::RegularFile && st.st_size == 0 => {
                unlinkat(dir, name, AtFlags::empty())
            }
            PlaceholderKind::SelfRef
                if ft == FileType::RegularFile && holds_self_ref(dir, name) =>
            {
                unlinkat(dir, name, AtFlags::empty())
            }
            _ => continue,
        };
    }
}

/// Whether `name` in `dir` (not followed if a link) holds exactly
/// [`plan::SELF_REF`], as a `SelfRef` placeholder the node made does.
fn holds_self_ref(dir: &OwnedFd, name: &Path) -> bool {
    use rustix::fs::{openat, Mode, OFlags};
    let Ok(f) = openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    ) else {
        return false;
    };
    let mut buf = [0u8; 8];
    rustix::io::read(&f, &mut buf).is_ok_and(|n| &buf[..n] == plan::SELF_REF)
}

/// Makes the placeholders on the host: an empty folder (moved from `pool`
/// when it can) or an empty file at each place, under its folder opened
/// without following any link. A name that exists meanwhile is left for
/// the stage to check (it must be of the placeholder's kind).
fn make_placeholders(ps: &[Placeholder], pool: &mut Option<Pool>) -> Result<(), String> {
    use rustix::fs::{mkdirat, openat, Mode, OFlags};
    use rustix::io::Errno;
    let mut folders = crate::hold::Folders::default();
    for p in ps {
        let (dir, name) = folders.place(p)?;
        let made = match p.kind {
            PlaceholderKind::Dir => match pool.as_mut().map(|pl| pl.take(dir, name)) {
                Some(Taken::Moved | Taken::Exists) => Ok(()),
                Some(Taken::No) | None => mkdirat(dir, name, Mode::from_raw_mode(0o755)),
            },
            PlaceholderKind::File | PlaceholderKind::SelfRef => openat(
                dir,
                name,
                OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o644),
            )
            .and_then(|f| match p.kind {
                PlaceholderKind::SelfRef => rustix::io::write(&f, plan::SELF_REF).map(drop),
                _ => Ok(()),
            }),
        };
        match made {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(format!("placeholder {}: cannot create it: {e}", p.path)),
        }
    }
    Ok(())
}

/// The placeholders of one run: made while
/// bubblewrap builds the sandbox (the stage waits for the word on
/// [`fds::READY`]), removed once.
struct Holders {
    /// The run's private folder, where the run is recorded.
    record: PathBuf,
    /// The writable folders the run holds.
    roots: Vec<PathBuf>,
    pool: Option<Pool>,
    removed: bool,
    /// The pipe's write end, until the making starts.
    ready: Option<OwnedFd>,
}

impl Holders {
    /// The holders of a run, and the end of the pipe the stage reads.
    fn new(record: &Path, roots: Vec<PathBuf>) -> Result<(Holders, OwnedFd), SandboxError> {
        let (ready_r, ready_w) = pipe()?;
        let holders = Holders {
            record: record.to_path_buf(),
            roots,
            pool: None,
            removed: false,
            ready: Some(ready_w),
        };
        Ok((holders, ready_r))
    }

    /// Makes `ps` (once bubblewrap is on its way: this thread has nothing
    /// else to do while bubblewrap builds the sandbox) and tells the stage
    /// they are all there, or why not.
    fn start(
        &mut self,
        ps: &[Placeholder],
        data_dir: &Path,
        run_id: &str,
    ) -> Result<(), SandboxError> {
        let Some(ready) = self.ready.take() else {
            return Ok(());
        };
        // Recorded before anything is created, so that a sweep can undo it
        // if this process dies.
        if let Err(e) = record_run(&self.record, &self.roots, ps) {
            let _ = File::from(ready).write_all(e.to_string().as_bytes());
            return Err(e);
        }
        if !ps.is_empty() {
            self.pool = Pool::open(data_dir, run_id);
        }
        let word = match make_placeholders(ps, &mut self.pool) {
            Ok(()) => crate::hold::READY_WORD.to_vec(),
            Err(e) => e.into_bytes(),
        };
        let _ = File::from(ready).write_all(&word);
        // The stage goes on now; meanwhile the pool is tended (used folders
        // removed, fresh ones made) instead of only waiting.
        if let Some(pool) = &mut self.pool {
            pool.tend();
        }
        Ok(())
    }

    /// Removes what was made (once).
    fn remove(&mut self, ps: &[Placeholder]) {
        self.ready = None;
        if !self.removed {
            remove_placeholders(ps, self.pool.as_mut());
            self.removed = true;
        }
    }
}

fn sealed_memfd(name: &str, data: &[u8]) -> Result<OwnedFd, SandboxError> {
    use rustix::fs::{fcntl_add_seals, memfd_create, MemfdFlags, SealFlags};
    let fd = memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
        .map_err(prep("memfd_create"))?;
    let mut f = File::from(fd);
    f.write_all(data).map_err(prep("memfd write"))?;
    f.rewind().map_err(prep("memfd seek"))?;
    fcntl_add_seals(
        &f,
        SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE | SealFlags::SEAL,
    )
    .map_err(prep("memfd seal"))?;
    Ok(OwnedFd::from(f))
}

fn pipe() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(prep("pipe"))
}

/// Plans a run without starting it (for `--dry-run` and tests).
pub fn plan_only(
    spec: &RunSpec,
    node_exe: &Path,
    extras: &plan::Extras,
) -> Result<Plan, SandboxError> {
    let (facts, _) = host::gather(spec, node_exe, false)?;
    Ok(plan::plan(spec, &facts, extras)?)
}

/// Runs `spec` to its end. `Err` means the command never ran.
pub fn run(spec: &RunSpec, opts: LaunchOptions<'_>) -> Result<RunOutcome, SandboxError> {
    if spec.limits.needs_job() && opts.jobs.is_none() {
        let which = if spec.limits.memory_mib.is_some() {
            "--memory"
        } else if spec.limits.processes.is_some() {
            "--processes"
        } else {
            "--cpu-seconds"
        };
        return Err(SandboxError::Unenforceable(which));
    }
    if spec.egress.is_enabled() && opts.proxy.is_none() {
        return Err(SandboxError::Unenforceable("egress (--allow/--forward)"));
    }
    let started = Instant::now();
    let run_id = new_run_id();
    let base = opts.scratch.clone().unwrap_or_else(scratch_base);
    // The node keeps its run records there, and trusts them when it sweeps
    // a dead run's leftovers: never in a folder the run may write.
    let real_base = fs::canonicalize(&base).unwrap_or_else(|_| base.clone());
    if let Some(w) = spec.writable().find(|w| real_base.starts_with(w.as_path())) {
        return Err(SandboxError::Prepare(format!(
            "the node's folder for its run records, {}, lies in {w}, which the run may write: set TMPDIR to a folder outside the run's folders",
            base.display()
        )));
    }
    // Runs of a node that died (SIGKILL) left their placeholders and
    // folders: swept before this run looks at its folders, which may be
    // theirs (a leftover placeholder taken for the caller's own folder would
    // be gone by the time bubblewrap binds it).
    sweep_stale(&base);
    let scratch = Scratch::create(&base, &run_id)?;
    run_in(spec, &opts, started, run_id, scratch)
}

fn run_in(
    spec: &RunSpec,
    opts: &LaunchOptions<'_>,
    started: Instant,
    run_id: String,
    scratch: Scratch,
) -> Result<RunOutcome, SandboxError> {
    // The job first: if it cannot be made, nothing else happens.
    let job = match (spec.limits.needs_job(), opts.jobs) {
        (true, Some(mode)) => {
            let id = oz0_jobs::RunId::new(&run_id).map_err(|e| SandboxError::Job(e.to_string()))?;
            Some(
                oz0_jobs::Job::create(mode, &id, &spec.limits)
                    .map_err(|e| SandboxError::Job(e.to_string()))?,
            )
        }
        _ => None,
    };

    let extras = opts.extras.clone();
    let mut bridge = None;
    let mut egress_guard = None;
    let mut channel = None;
    if let (true, Some(proxy)) = (spec.egress.is_enabled(), opts.proxy) {
        // The proxy serves the run over a channel handed to the stage (no
        // socket file: nothing in the run names a path of the node's).
        let token =
            oz0_egress::Token::generate().map_err(|e| SandboxError::Egress(e.to_string()))?;
        let (guard, theirs) = proxy
            .add_run_channel(run_id.clone(), token.clone(), spec.egress.clone())
            .map_err(|e| SandboxError::Egress(e.to_string()))?;
        bridge = Some(crate::stage::BridgeConfig {
            token: token.expose().to_string(),
        });
        egress_guard = Some(guard);
        channel = Some(theirs);
    }

    // The writable folders stay locked (`held`) until the run is over and
    // its placeholders are gone.
    let (facts, held) = host::gather(spec, &opts.node_exe, true)?;
    let plan = plan::plan(spec, &facts, &extras)?;
    let roots = facts
        .protected
        .iter()
        .map(|f| f.root.to_path_buf())
        .collect();
    let (mut holders, ready) = Holders::new(&scratch.dir, roots)?;
    let result = execute(
        &plan,
        opts,
        &run_id,
        started,
        spec,
        job.as_ref(),
        (bridge, channel),
        (&mut holders, ready),
    );
    holders.remove(&plan.placeholders);
    // Every process of the run is gone and its placeholders too; its
    // folders are still held: the look at what it left for host git.
    let git = result
        .is_ok()
        .then(|| crate::gitlook::look(&held.folders(), scratch.made, opts.git, &run_id));
    drop(held);
    drop(egress_guard);
    let result = result.map(|mut o| {
        o.git = git;
        if let Some(j) = &job {
            o.job = Some(JobReport {
                mode: j.version_name(),
                outcome: j.outcome(),
                supervisor: oz0_jobs::Supervisor::new(&spec.limits, started).describe(),
            });
        }
        if spec.egress.is_enabled() {
            o.egress = Some(EgressReport {
                allow: spec.egress.allow.iter().map(|a| a.to_string()).collect(),
                forward: spec.egress.forward.iter().map(|p| p.get()).collect(),
                bridge_port: o.egress.as_ref().and_then(|e| e.bridge_port),
            });
        }
        o
    });
    if let Some(j) = job {
        // Every process is gone already; this only removes the folders.
        let _ = j.kill();
        let _ = j.remove();
    }
    drop(scratch);
    result
}

/// Starts the run and waits for it. Removes the placeholders itself as soon
/// as the run's init is gone, which with a pid namespace of the run's own
/// means every process of the run is gone (the kernel ends and reaps them
/// before the init's end is reported), while bubblewrap itself still exits.
#[allow(clippy::too_many_arguments)]
fn execute(
    plan: &Plan,
    opts: &LaunchOptions<'_>,
    run_id: &str,
    started: Instant,
    spec: &RunSpec,
    job: Option<&oz0_jobs::Job>,
    (bridge, channel): (Option<crate::stage::BridgeConfig>, Option<OwnedFd>),
    (holders, ready): (&mut Holders, OwnedFd),
) -> Result<RunOutcome, SandboxError> {
    let own_pid_ns = plan.namespaces.contains(&"--unshare-pid");
    let mut args = Vec::new();
    for a in plan.bwrap_args() {
        args.extend_from_slice(a.as_bytes());
        args.push(0);
    }
    let args_fd = sealed_memfd("oz0-bwrap-args", &args)?;
    let cfg = StageConfig {
        argv: plan.argv.clone(),
        env: plan.env.clone(),
        landlock: plan.landlock.clone(),
        landlock_off: plan.landlock_off,
        seccomp: plan.seccomp,
        seccomp_off: plan.seccomp_off,
        bridge,
        deny_unix_sockets: plan.deny_unix_sockets,
        placeholders: plan.placeholders.clone(),
        expect: plan.expect.clone(),
        holds: plan.holds.clone(),
        mount_points: plan.mount_points.clone(),
        devices: plan.devices.clone(),
        tmp: plan.tmp,
    };
    let cfg_fd = sealed_memfd(
        "oz0-stage",
        &serde_json::to_vec(&cfg).map_err(prep("configuration"))?,
    )?;
    let (json_r, json_w) = pipe()?;
    let (status_r, status_w) = pipe()?;
    let (capture_r, capture_w) = pipe()?;
    let real_stderr =
        rustix::io::fcntl_dupfd_cloexec(io::stderr(), 0).map_err(prep("dup stderr"))?;

    let mut setup = oz0_sys::spawn::ChildSetup::new();
    let pass = |s: &mut oz0_sys::spawn::ChildSetup, fd, n| {
        s.pass_fd(fd, n)
            .map(|_| ())
            .map_err(prep("passing descriptors"))
    };
    pass(&mut setup, args_fd, fds::ARGS)?;
    pass(&mut setup, json_w, fds::JSON_STATUS)?;
    pass(&mut setup, cfg_fd, fds::CONFIG)?;
    pass(&mut setup, status_w, fds::STATUS)?;
    pass(&mut setup, real_stderr, fds::STDERR)?;
    pass(&mut setup, ready, fds::READY)?;
    if let Some(channel) = channel {
        pass(&mut setup, channel, fds::EGRESS)?;
    }
    // bubblewrap joins the job before it executes; if it cannot, it never
    // runs (the spawn fails).
    if let Some(j) = job {
        for f in j
            .procs_files()
            .map_err(|e| SandboxError::Job(e.to_string()))?
        {
            setup.join_cgroup(f);
        }
    }

    let mut child = spawn_bwrap(&opts.bwrap, opts.stdio, capture_w, &setup).map_err(|e| {
        SandboxError::Start(format!("cannot execute {}: {e}", opts.bwrap.display()))
    })?;
    drop(setup);
    // While bubblewrap builds the sandbox: the run's record and the
    // placeholders. A run that cannot be recorded is stopped:
    // its stage, which waits for the word before anything, is told why.
    if let Err(e) = holders.start(&plan.placeholders, spec.data_dir.as_path(), run_id) {
        if let Some(pid) = rustix::process::Pid::from_raw(child.id()) {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
        }
        let _ = child.wait();
        return Err(e);
    }

    // bubblewrap reports its init's pid first; no report means it failed
    // before creating the sandbox.
    let mut json = io::BufReader::new(File::from(json_r));
    let init_pid = read_child_pid(&mut json);
    let init = init_pid.and_then(|p| {
        rustix::process::Pid::from_raw(p).and_then(|pid| pidfd_open(pid, PidfdFlags::empty()).ok())
    });
    let outer = rustix::process::Pid::from_raw(child.id())
        .and_then(|pid| pidfd_open(pid, PidfdFlags::empty()).ok())
        .ok_or_else(|| SandboxError::Start("cannot watch bubblewrap (pidfd_open)".into()))?;

    let mut supervisor = oz0_jobs::Supervisor::new(&spec.limits, started);
    let mut status = File::from(status_r);
    let mut status_buf = Vec::new();
    let mut status_open = true;
    let mut killed: Option<Ended> = None;
    loop {
        let wait = match &killed {
            None => supervisor.next_poll(Instant::now()),
            Some(_) => None,
        };
        let mut pfds = vec![PollFd::new(&outer, PollFlags::IN)];
        if status_open {
            pfds.push(PollFd::new(&status, PollFlags::IN));
        }
        let cancel_idx = opts.cancel.as_ref().map(|c| {
            pfds.push(PollFd::new(c, PollFlags::IN));
            pfds.len() - 1
        });
        let init_idx = match &init {
            Some(fd) if own_pid_ns && !holders.removed => {
                pfds.push(PollFd::new(fd, PollFlags::IN));
                Some(pfds.len() - 1)
            }
            _ => None,
        };
        let ts = wait.map(|d| rustix::event::Timespec {
            tv_sec: d.as_secs() as i64,
            tv_nsec: d.subsec_nanos() as i64,
        });
        match poll(&mut pfds, ts.as_ref()) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(SandboxError::Start(format!("poll: {e}"))),
        }
        let outer_done = !pfds[0].revents().is_empty();
        let status_ready = status_open && !pfds[1].revents().is_empty();
        let cancelled = cancel_idx.is_some_and(|i| !pfds[i].revents().is_empty());
        let init_gone = init_idx.is_some_and(|i| !pfds[i].revents().is_empty());
        drop(pfds);
        if init_gone {
            holders.remove(&plan.placeholders);
        }
        if status_ready {
            let mut buf = [0u8; 4096];
            match status.read(&mut buf) {
                Ok(0) | Err(_) => status_open = false,
                Ok(n) => status_buf.extend_from_slice(&buf[..n]),
            }
        }
        if outer_done {
            break;
        }
        if killed.is_some() {
            continue;
        }
        if cancelled {
            killed = Some(Ended::Cancelled);
        } else {
            // The supervisor kills the job itself on a verdict; a failure to
            // read the job's counters is treated as a verdict (fail closed).
            killed = match supervisor.check(job, Instant::now()) {
                Ok(None) => None,
                Ok(Some(oz0_jobs::Verdict::Timeout { .. })) => Some(Ended::Timeout),
                Ok(Some(oz0_jobs::Verdict::CpuTime { .. })) => Some(Ended::CpuTime),
                Err(e) => {
                    eprintln!("oz0-node: stopping the run: {e}");
                    Some(Ended::Cancelled)
                }
            };
        }
        if killed.is_some() {
            if let Some(j) = job {
                let _ = j.kill();
            }
            kill_tree(init.as_ref(), &outer);
        }
    }
    let exit = child
        .wait()
        .map_err(|e| SandboxError::Start(format!("waiting for bubblewrap: {e}")))?;
    // Whatever the stage wrote before the end.
    let _ = status.read_to_end(&mut status_buf);
    let mut captured = String::new();
    let _ = File::from(capture_r).read_to_string(&mut captured);

    let report = StageReport::parse(&String::from_utf8_lossy(&status_buf));
    if !report.started {
        if let Some(k) = killed {
            if k == Ended::Cancelled {
                return Err(SandboxError::Start(
                    "cancelled before the sandbox started".into(),
                ));
            }
        }
        return Err(SandboxError::Start(bwrap::explain_failure(&captured)));
    }
    if let Some(reason) = report.error {
        return Err(SandboxError::Stage(reason));
    }
    // bubblewrap's own messages after the start (rare) still reach the caller.
    if !captured.trim().is_empty() {
        eprint!("{captured}");
    }
    let code = status_code(exit);
    let (ended, exit_code) = match (killed, report.not_executed) {
        (Some(Ended::Timeout), _) => (Ended::Timeout, EXIT_TIMEOUT),
        (Some(k), _) => (k, code),
        (None, Some((c, reason))) => (Ended::NotExecuted { reason }, c),
        (None, None) => (Ended::Exited, code),
    };
    Ok(RunOutcome {
        run_id: run_id.to_string(),
        ended,
        exit_code,
        duration_ms: started.elapsed().as_millis() as u64,
        landlock: report.landlock,
        namespaces: plan
            .namespaces
            .iter()
            .map(|s| s.trim_start_matches("--unshare-"))
            .collect(),
        seccomp: SeccompSummary {
            profile: plan.seccomp,
            unix_sockets_refused: plan.deny_unix_sockets,
            refused: crate::seccomp::rules(plan.seccomp)
                .iter()
                .map(|r| r.name)
                .collect(),
        },
        protected: plan.protected.clone(),
        job: None,
        tmp: plan.tmp,
        git: None,
        egress: report.bridge_port.map(|p| EgressReport {
            allow: Vec::new(),
            forward: Vec::new(),
            bridge_port: Some(p),
        }),
    })
}

/// bubblewrap, started one way or the other.
enum Bwrap {
    /// By `posix_spawn` (no job to join before it executes).
    Spawned(i32),
    /// By fork, joining the job in between.
    Forked(std::process::Child),
}

impl Bwrap {
    fn id(&self) -> i32 {
        match self {
            Bwrap::Spawned(pid) => *pid,
            Bwrap::Forked(c) => c.id() as i32,
        }
    }

    fn wait(&mut self) -> io::Result<std::process::ExitStatus> {
        use std::os::unix::process::ExitStatusExt;
        match self {
            Bwrap::Forked(c) => c.wait(),
            Bwrap::Spawned(pid) => loop {
                let p = rustix::process::Pid::from_raw(*pid);
                match rustix::process::waitpid(p, rustix::process::WaitOptions::empty()) {
                    Ok(Some((_, st))) => {
                        return Ok(std::process::ExitStatus::from_raw(st.as_raw()))
                    }
                    Ok(None) => continue,
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => return Err(e.into()),
                }
            },
        }
    }
}

/// Starts bubblewrap with a clean environment, its arguments on a
/// descriptor, stderr into `capture`, and `setup`'s descriptors. Without a
/// job to join, by `posix_spawn`: the C library starts it without copying
/// this process's memory, which a fork does (about a third of a
/// millisecond less per run here).
fn spawn_bwrap(
    bwrap: &Path,
    stdio: StdioMode,
    capture: OwnedFd,
    setup: &oz0_sys::spawn::ChildSetup,
) -> io::Result<Bwrap> {
    if setup.spawnable() {
        use std::os::unix::ffi::OsStrExt;
        let cstr = |b: &[u8]| {
            std::ffi::CString::new(b).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
        };
        let program = cstr(bwrap.as_os_str().as_bytes())?;
        let mut argv = vec![program.clone()];
        for a in Plan::bwrap_command() {
            argv.push(cstr(a.as_bytes())?);
        }
        let std_in_out = match stdio {
            StdioMode::Inherit => oz0_sys::spawn::Stdio::Inherit,
            StdioMode::Null => oz0_sys::spawn::Stdio::Null,
        };
        let fd = rustix::fd::AsRawFd::as_raw_fd(&capture);
        let pid = setup.spawn(
            &program,
            &argv,
            [std_in_out, std_in_out, oz0_sys::spawn::Stdio::Fd(fd)],
        )?;
        return Ok(Bwrap::Spawned(pid));
    }
    let std_in_out = || match stdio {
        StdioMode::Inherit => Stdio::inherit(),
        StdioMode::Null => Stdio::null(),
    };
    let mut cmd = Command::new(bwrap);
    cmd.env_clear()
        .args(Plan::bwrap_command())
        .stdin(std_in_out())
        .stdout(std_in_out())
        .stderr(Stdio::from(capture));
    setup.install(&mut cmd);
    cmd.spawn().map(Bwrap::Forked)
}

fn kill_tree(init: Option<&OwnedFd>, outer: &OwnedFd) {
    match init {
        // Killing init makes the kernel kill every process of the namespace.
        Some(fd) => {
            let _ = pidfd_send_signal(fd.as_fd(), Signal::KILL);
        }
        // No init known: bubblewrap's init follows it (PDEATHSIG).
        None => {
            let _ = pidfd_send_signal(outer.as_fd(), Signal::KILL);
        }
    }
}

fn read_child_pid(json: &mut impl io::BufRead) -> Option<i32> {
    let mut line = String::new();
    json.read_line(&mut line).ok()?;
    let v: serde_json::Value = serde_json::from_str(line.trim()).ok()?;
    v.get("child-pid")?.as_i64().map(|p| p as i32)
}

/// What the stage said.
#[derive(Debug, Default, PartialEq, Eq)]
struct StageReport {
    started: bool,
    bridge_port: Option<u16>,
    landlock: Option<LandlockReport>,
    error: Option<String>,
    not_executed: Option<(i32, String)>,
}

impl StageReport {
    fn parse(text: &str) -> StageReport {
        let mut r = StageReport::default();
        for line in text.lines() {
            let (tag, rest) = line.split_once(' ').unwrap_or((line, ""));
            match tag {
                "S" => r.started = true,
                "B" => r.bridge_port = rest.trim().parse().ok(),
                "L" => r.landlock = serde_json::from_str(rest).ok(),
                "E" => r.error = Some(rest.to_string()),
                "X" => {
                    let (code, reason) = rest.split_once(' ').unwrap_or((rest, ""));
                    r.not_executed = Some((code.parse().unwrap_or(126), reason.to_string()));
                }
                _ => {}
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oz0_policy::AbsPath;

    #[test]
    fn stage_report_parsing() {
        let r = StageReport::parse("S\nL {\"kernel_abi\":7,\"enforced\":\"full\"}\n");
        assert!(r.started && r.error.is_none() && r.not_executed.is_none());
        assert_eq!(r.landlock.unwrap().kernel_abi, 7);
        let r = StageReport::parse("S\nE seccomp: nope\n");
        assert_eq!(r.error.as_deref(), Some("seccomp: nope"));
        let r = StageReport::parse("S\nL {}\nX 127 cannot execute \"x\": No such file\n");
        assert_eq!(r.not_executed.unwrap().0, 127);
        assert!(!StageReport::parse("").started);
    }

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("oz0-launch-unit-{tag}-{}", new_run_id()));
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn ph(path: &Path, kind: PlaceholderKind) -> Placeholder {
        Placeholder {
            path: AbsPath::from_path(path).unwrap(),
            kind,
        }
    }

    /// Only what is still an empty placeholder goes; nothing is reached
    /// through a link, in the last component or on the way.
    #[test]
    fn placeholder_removal_takes_only_empty_placeholders_and_follows_no_link() {
        for with_pool in [false, true] {
            let base = tmp(if with_pool { "rm-pool" } else { "rm" });
            let work = base.join("work");
            let elsewhere = base.join("elsewhere");
            fs::create_dir_all(work.join(".git")).unwrap();
            fs::create_dir_all(elsewhere.join(".claude")).unwrap();
            fs::write(elsewhere.join("config"), b"").unwrap();
            fs::create_dir(work.join(".claude")).unwrap();
            fs::write(work.join(".mcp.json"), b"").unwrap();
            fs::write(work.join(".bashrc"), b"written by the run").unwrap();
            fs::create_dir(work.join(".vscode")).unwrap();
            fs::write(work.join(".vscode/settings.json"), b"{}").unwrap();
            std::os::unix::fs::symlink(elsewhere.join(".claude"), work.join(".codex")).unwrap();
            // A parent replaced by a link: nothing under it may be touched.
            std::os::unix::fs::symlink(&elsewhere, work.join("linked")).unwrap();
            let list = [
                ph(&work.join(".claude"), PlaceholderKind::Dir),
                ph(&work.join(".mcp.json"), PlaceholderKind::File),
                ph(&work.join(".bashrc"), PlaceholderKind::File),
                ph(&work.join(".vscode"), PlaceholderKind::Dir),
                ph(&work.join(".codex"), PlaceholderKind::Dir),
                ph(&work.join("linked/.claude"), PlaceholderKind::Dir),
                ph(&work.join("linked/config"), PlaceholderKind::File),
                ph(&work.join(".zshrc"), PlaceholderKind::File),
            ];
            let mut pool = with_pool.then(|| Pool::open(&base.join("data"), "t").unwrap());
            remove_placeholders(&list, pool.as_mut());
            assert!(!work.join(".claude").exists() && !work.join(".mcp.json").exists());
            assert_eq!(
                fs::read(work.join(".bashrc")).unwrap(),
                b"written by the run"
            );
            assert!(work.join(".vscode/settings.json").is_file());
            assert!(fs::symlink_metadata(work.join(".codex")).is_ok());
            assert!(elsewhere.join(".claude").is_dir() && elsewhere.join("config").is_file());
            if with_pool {
                // Only the empty folder went out of the way, to be removed.
                let used = base.join("data").join(crate::pool::POOL_DIR).join("used");
                assert_eq!(fs::read_dir(used).unwrap().count(), 1);
            }
            fs::remove_dir_all(&base).unwrap();
        }
    }

    /// Placeholders are made under folders reached without links, from the
    /// pool when it has spare folders; what exists is left alone; a link on
    /// the way refuses the run.
    #[test]
    fn placeholders_are_made_without_links_and_from_the_pool() {
        let base = tmp("make");
        let (work, data) = (base.join("work"), base.join("data"));
        fs::create_dir_all(&work).unwrap();
        fs::write(work.join(".bashrc"), b"mine").unwrap();
        let list = [
            ph(&work.join(".claude"), PlaceholderKind::Dir),
            ph(&work.join(".codex"), PlaceholderKind::Dir),
            ph(&work.join(".mcp.json"), PlaceholderKind::File),
            ph(&work.join(".bashrc"), PlaceholderKind::File),
        ];
        // First run: the pool is empty, folders are made; removal puts them
        // out of the way, and tending the pool makes fresh ones.
        let mut pool = Pool::open(&data, "a");
        make_placeholders(&list, &mut pool).unwrap();
        assert!(work.join(".claude").is_dir() && work.join(".codex").is_dir());
        assert_eq!(fs::metadata(work.join(".mcp.json")).unwrap().len(), 0);
        assert_eq!(fs::read(work.join(".bashrc")).unwrap(), b"mine");
        remove_placeholders(&list[..3], pool.as_mut());
        let pool_dir = data.join(crate::pool::POOL_DIR);
        let count = |sub: &str| fs::read_dir(pool_dir.join(sub)).unwrap().count();
        assert_eq!(count("used"), 2);
        assert_eq!(fs::read_dir(&work).unwrap().count(), 1);
        pool.as_mut().unwrap().tend();
        let fresh = count("fresh");
        assert_eq!(count("used"), 0);
        // Second run: the folders come from the fresh ones.
        let mut pool = Pool::open(&data, "b");
        make_placeholders(&list, &mut pool).unwrap();
        assert!(work.join(".claude").is_dir() && work.join(".codex").is_dir());
        assert_eq!(count("fresh"), fresh - 2);
        remove_placeholders(&list[..3], pool.as_mut());
        // A link on the way: refused, nothing made through it.
        let elsewhere = base.join("elsewhere");
        fs::create_dir_all(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, work.join("linked")).unwrap();
        let err = make_placeholders(
            &[ph(&work.join("linked/.claude"), PlaceholderKind::Dir)],
            &mut None,
        )
        .unwrap_err();
        assert!(err.contains("linked"), "{err}");
        assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);
        fs::remove_dir_all(&base).unwrap();
    }

    /// A user's runtime folder counts only when it is a real folder of this
    /// user's that no one else may enter; a shared one only with everyone's
    /// write and the sticky bit, owned by root.
    #[test]
    fn scratch_folders_are_checked_before_use() {
        use std::os::unix::fs::PermissionsExt;
        let base = tmp("scratch");
        let uid = rustix::process::getuid().as_raw();
        let private = base.join("private");
        fs::create_dir(&private).unwrap();
        fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).unwrap();
        assert!(private_dir_of(&private, uid));
        assert!(!private_dir_of(&private, uid + 1), "another user's folder");
        fs::set_permissions(&private, fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!private_dir_of(&private, uid), "a folder others may enter");
        fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).unwrap();
        let link = base.join("link");
        std::os::unix::fs::symlink(&private, &link).unwrap();
        assert!(!private_dir_of(&link, uid), "a link");
        assert!(!shared_sticky_dir(&private));
        assert!(!shared_sticky_dir(&link));
        // What makes a shared folder, whatever this host's /tmp is.
        assert!(shared_sticky(0o41777, 0));
        assert!(!shared_sticky(0o40777, 0), "no sticky bit");
        assert!(!shared_sticky(0o41775, 0), "not writable by all");
        assert!(!shared_sticky(0o41777, 1000), "not root's");
        if rustix::process::getuid().is_root() {
            use std::os::unix::fs::PermissionsExt;
            let shared = base.join("shared");
            fs::create_dir(&shared).unwrap();
            fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
            assert!(shared_sticky_dir(&shared));
        }
        fs::remove_dir_all(&base).unwrap();
    }

    /// A folder without a record is a dead node's only after the grace
    /// period: a live node writes its record right after making it.
    #[test]
    fn sweep_takes_unrecorded_folders_only_when_old() {
        let base = tmp("sweep");
        let fresh = base.join("oz0-run-fresh");
        let old = base.join("oz0-run-old");
        let other = base.join("not-a-run");
        for d in [&fresh, &old, &other] {
            fs::create_dir(d).unwrap();
        }
        let long_ago = std::time::SystemTime::now() - UNRECORDED_GRACE * 2;
        for d in [&old, &other] {
            File::open(d).unwrap().set_modified(long_ago).unwrap();
        }
        sweep_stale(&base);
        assert!(fresh.is_dir(), "a fresh folder was taken");
        assert!(!old.exists(), "an old folder without a record was left");
        assert!(other.is_dir(), "a folder not named as a run's was taken");
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn child_pid_from_bwrap_json() {
        let mut r = io::Cursor::new(b"{ \"child-pid\": 4242, \"cgroup-namespace\": 1 }\n".to_vec());
        assert_eq!(read_child_pid(&mut r), Some(4242));
        let mut r = io::Cursor::new(Vec::new());
        assert_eq!(read_child_pid(&mut r), None);
    }
}
