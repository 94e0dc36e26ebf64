//! The launcher: prepares a run, starts bubblewrap, supervises the run to its
//! end and cleans up. Callers reach it through [`crate::Tier1`].
//!
//! One process tree: the command is the first process of a fresh pid
//! namespace under bubblewrap, whose init is the stage. When the command
//! exits, init exits and the kernel kills every process left in the
//! namespace before init's exit is reported, so `run` returns only once all
//! of them are gone. A timeout or a cancel kills init with SIGKILL (same
//! effect). If the node dies, bubblewrap gets SIGKILL (`--die-with-parent`,
//! set from this thread, which lives for the whole run) and init follows it.
//!
//! Nothing secret is on a command line or in bubblewrap's environment:
//! bubblewrap starts with an empty environment and reads its arguments from a
//! memory file (`--args`); the stage reads the command's environment from
//! another. Both are visible inside only as what the run itself is given.
//!
//! Threads: the node's egress proxy may run threads in this process while
//! bubblewrap is started. That is safe: bubblewrap is started by
//! `posix_spawn` (no code of this process runs in the child), or, when it
//! must join a job first, by std's `Command`, whose child between fork and
//! exec only joins the job's cgroups, moves descriptors and sets its death
//! signal (async-signal-safe calls, no allocation, no lock another thread
//! could hold). Every descriptor of this process is close-on-exec, so none
//! of the proxy's sockets reaches bubblewrap.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use oz0_core::exit::{status_code, Exit};
use oz0_core::{Cancel, Ended, RunIo};
use oz0_policy::RunSpec;
use rustix::event::{poll, PollFd, PollFlags};
use rustix::process::{pidfd_open, PidfdFlags, Signal};

use crate::host;
use crate::outcome::{prep, EgressReport, JobReport, RunOutcome, SandboxError, SeccompSummary};
use crate::placeholders::Holders;
use crate::plan::{self, fds, Plan};
use crate::protocol::{self, BridgeConfig, StageConfig, StageReport};
use crate::record::{new_run_id, sweep_stale, Scratch};
use crate::spawn::{kill_tree, pipe, read_child_pid, sealed_memfd, spawn_bwrap};

/// Everything one run is launched with, resolved by the [`crate::Tier1`].
pub(crate) struct Launch<'a> {
    /// bubblewrap.
    pub bwrap: &'a Path,
    /// The node binary to bind as the stage.
    pub node_exe: &'a Path,
    /// Where the run's private host folder goes.
    pub scratch: PathBuf,
    /// The command's stdio.
    pub io: RunIo,
    /// Fires when the run must be cancelled.
    pub cancel: Option<Cancel>,
    /// Serves the run's egress; required when the run has egress.
    pub egress: Option<&'a dyn oz0_egress::EgressService>,
    /// Where the run's job goes; required when the run has job limits.
    pub jobs: Option<&'a oz0_limits::JobMode>,
    /// Seccomp profile, devices: what the launcher adds to the spec.
    pub extras: plan::Extras,
    /// What the node does with what the run left that host git would run
    /// or follow (see `gitlook`).
    pub git: crate::gitlook::Policy,
}

/// Plans a run without starting it (for `--dry-run` and tests).
pub(crate) fn plan_only(
    spec: &RunSpec,
    node_exe: &Path,
    extras: &plan::Extras,
) -> Result<Plan, SandboxError> {
    let image = extras.image.as_ref().map(|i| &i.rootfs);
    let (facts, _) = host::gather(spec, node_exe, image, false)?;
    Ok(plan::plan(spec, &facts, extras)?)
}

/// Runs `spec` to its end. `Err` means the command never ran.
pub(crate) fn run(spec: &RunSpec, opts: Launch<'_>) -> Result<RunOutcome, SandboxError> {
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
    if spec.egress.is_enabled() && opts.egress.is_none() {
        return Err(SandboxError::Unenforceable("egress (--allow/--forward)"));
    }
    let started = Instant::now();
    let run_id = new_run_id();
    let base = opts.scratch.clone();
    // The node keeps its run records there, and trusts them when it sweeps
    // a dead run's leftovers: never in a folder the run may write.
    let real_base = std::fs::canonicalize(&base).unwrap_or_else(|_| base.clone());
    if let Some(w) = spec.writable().find(|w| real_base.starts_with(w.as_path())) {
        return Err(SandboxError::RecordsInWritable {
            base,
            folder: w.to_string(),
        });
    }
    // Runs of a node that died (SIGKILL) left their placeholders and
    // folders: swept before this run looks at its folders, which may be
    // theirs (a leftover placeholder taken for the caller's own folder would
    // be gone by the time bubblewrap binds it). Every run sweeps, not only
    // the first of this process: other node processes share the folder.
    sweep_stale(&base);
    let scratch = Scratch::create(&base, &run_id)?;
    run_in(spec, opts, started, run_id, scratch)
}

fn run_in(
    spec: &RunSpec,
    opts: Launch<'_>,
    started: Instant,
    run_id: String,
    scratch: Scratch,
) -> Result<RunOutcome, SandboxError> {
    // The job first: if it cannot be made, nothing else happens.
    let job = match (spec.limits.needs_job(), opts.jobs) {
        (true, Some(mode)) => {
            let id = oz0_limits::RunId::new(&run_id)?;
            Some(oz0_limits::Job::create(mode, &id, &spec.limits)?)
        }
        _ => None,
    };

    let extras = opts.extras.clone();
    let mut bridge = None;
    let mut egress_guard = None;
    let mut channel = None;
    if let (true, Some(proxy)) = (spec.egress.is_enabled(), opts.egress) {
        // The proxy serves the run over a channel handed to the stage (no
        // socket file: nothing in the run names a path of the node's).
        let token = oz0_egress::Token::generate()?;
        let (guard, theirs) =
            proxy.open_channel(run_id.clone(), token.clone(), spec.egress.clone())?;
        bridge = Some(BridgeConfig {
            token: token.expose().to_string(),
        });
        egress_guard = Some(guard);
        channel = Some(theirs);
    }

    // The writable folders stay locked (`held`) until the run is over and
    // its placeholders are gone.
    let image = extras.image.as_ref().map(|i| &i.rootfs);
    let (facts, held) = host::gather(spec, opts.node_exe, image, true)?;
    let plan = plan::plan(spec, &facts, &extras)?;
    let roots = facts
        .protected
        .iter()
        .map(|f| f.root.to_path_buf())
        .collect();
    let (mut holders, ready) = Holders::new(&scratch.dir, scratch.made, roots)?;
    let result = execute(
        &plan,
        &opts,
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
    let git = result.is_ok().then(|| {
        // What the wall kept in place for the run's length (each caller
        // path and protected name that existed: all mount points inside).
        let kept = facts
            .ids
            .iter()
            .map(|(_, id)| (rustix::fs::makedev(id.major, id.minor), id.ino))
            .collect();
        let folders = held.folders();
        let roots: Vec<crate::gitlook::Root<'_>> = folders
            .iter()
            .map(|(path, fd)| crate::gitlook::Root { path, fd })
            .collect();
        // From when the run could change anything (the run's folder's own
        // stamp if the making never started: it counts more, never less).
        let since = holders.since.unwrap_or(scratch.made);
        crate::gitlook::look(&roots, since, opts.git, &run_id, &kept)
    });
    drop(held);
    drop(egress_guard);
    let result = result.map(|mut o| {
        o.git = git;
        if let Some(j) = &job {
            o.job = Some(JobReport {
                mode: j.version_name(),
                outcome: j.outcome(),
                supervisor: oz0_limits::Supervisor::new(&spec.limits, started).describe(),
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
/// before the init's end is reported), while bubblewrap itself still exits;
/// or sooner, when the stage (that init) says it is the run's last process.
#[allow(clippy::too_many_arguments)]
fn execute(
    plan: &Plan,
    opts: &Launch<'_>,
    run_id: &str,
    started: Instant,
    spec: &RunSpec,
    job: Option<&oz0_limits::Job>,
    (bridge, channel): (Option<BridgeConfig>, Option<OwnedFd>),
    (holders, ready): (&mut Holders, OwnedFd),
) -> Result<RunOutcome, SandboxError> {
    let own_pid_ns = plan.namespaces.contains(&plan::Namespace::Pid);
    let wiring = wire(plan, opts, job, (bridge, channel), ready)?;
    let mut child = start(
        plan,
        opts,
        spec,
        run_id,
        holders,
        wiring.setup,
        wiring.capture_w,
    )?;
    // Open until bubblewrap exits: it writes there again when the run ends.
    let mut json = io::BufReader::new(File::from(wiring.json));
    let (init, outer) = watch(&child, &mut json)?;
    let mut status = File::from(wiring.status);
    let mut status_buf = Vec::new();
    let killed = supervise(
        Watch {
            outer: &outer,
            init: init.as_ref().filter(|_| own_pid_ns),
            kill_init: init.as_ref(),
            cancel: opts.cancel.as_ref(),
            job,
        },
        oz0_limits::Supervisor::new(&spec.limits, started),
        (holders, plan),
        (&mut status, &mut status_buf),
    )?;
    let exit = child.wait().map_err(|source| SandboxError::Supervise {
        what: "waiting for bubblewrap",
        source,
    })?;
    // Whatever the stage wrote before the end.
    let _ = status.read_to_end(&mut status_buf);
    let mut captured = String::new();
    let _ = File::from(wiring.capture_r).read_to_string(&mut captured);
    let report = StageReport::parse(&status_buf);
    outcome(plan, opts, run_id, started, exit, report, captured, killed)
}

/// What bubblewrap is started with: its descriptors at their numbers (and
/// the job it joins), and the node's ends of its pipes.
struct Wiring {
    setup: oz0_sys::spawn::ChildSetup,
    /// bubblewrap's JSON status.
    json: OwnedFd,
    /// The stage's report.
    status: OwnedFd,
    /// bubblewrap's own stderr: the node's end, and bubblewrap's.
    capture_r: OwnedFd,
    capture_w: OwnedFd,
}

/// Puts bubblewrap's arguments and the stage's configuration in sealed
/// memory files, makes the protocol's pipes and hands every descriptor to
/// the child at its number ([`fds`]); the job's cgroups too.
fn wire(
    plan: &Plan,
    opts: &Launch<'_>,
    job: Option<&oz0_limits::Job>,
    (bridge, channel): (Option<BridgeConfig>, Option<OwnedFd>),
    ready: OwnedFd,
) -> Result<Wiring, SandboxError> {
    let mut args = Vec::new();
    for a in plan.bwrap_args() {
        args.extend_from_slice(a.as_bytes());
        args.push(0);
    }
    let args_fd = sealed_memfd("oz0-bwrap-args", &args)?;
    let cfg = StageConfig {
        argv: plan.argv.clone(),
        env: plan.env.clone(),
        policy: plan.policy.clone(),
        landlock: plan.landlock.clone(),
        landlock_off: plan.landlock_off,
        seccomp: plan.seccomp,
        seccomp_off: plan.seccomp_off,
        bridge,
        deny_unix_sockets: plan.deny_unix_sockets,
        placeholders: plan.placeholders_inside.clone(),
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
    // The command's stderr, which the stage makes its own (bubblewrap's
    // stderr is captured, to explain a failure to start).
    let run_stderr = match &opts.io.stderr {
        oz0_core::Stdio::Inherit => rustix::io::fcntl_dupfd_cloexec(io::stderr(), 0),
        oz0_core::Stdio::File(f) => rustix::io::fcntl_dupfd_cloexec(f, 0),
        oz0_core::Stdio::Null => rustix::fs::open(
            "/dev/null",
            rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        ),
    }
    .map_err(prep("the run's stderr"))?;

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
    pass(&mut setup, run_stderr, fds::STDERR)?;
    pass(&mut setup, ready, fds::READY)?;
    if let Some(channel) = channel {
        pass(&mut setup, channel, fds::EGRESS)?;
    }
    // bubblewrap joins the job before it executes; if it cannot, it never
    // runs (the spawn fails).
    if let Some(j) = job {
        for f in j.procs_files().map_err(SandboxError::JoinJob)? {
            setup.join_cgroup(f);
        }
    }
    Ok(Wiring {
        setup,
        json: json_r,
        status: status_r,
        capture_r,
        capture_w,
    })
}

/// Starts bubblewrap, then, while it builds the sandbox, records the run
/// and makes its placeholders. A run that cannot be recorded is stopped:
/// its stage, which waits for the word before anything, is told why.
fn start(
    plan: &Plan,
    opts: &Launch<'_>,
    spec: &RunSpec,
    run_id: &str,
    holders: &mut Holders,
    setup: oz0_sys::spawn::ChildSetup,
    capture_w: OwnedFd,
) -> Result<crate::spawn::Bwrap, SandboxError> {
    let io = (&opts.io.stdin, &opts.io.stdout);
    let mut child = spawn_bwrap(opts.bwrap, plan, io, capture_w, &setup).map_err(|source| {
        SandboxError::Exec {
            bwrap: opts.bwrap.to_path_buf(),
            source,
        }
    })?;
    drop(setup);
    if let Err(e) = holders.start(&plan.placeholders, spec.data_dir.as_path(), run_id) {
        if let Some(pid) = rustix::process::Pid::from_raw(child.id()) {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
        }
        let _ = child.wait();
        return Err(e);
    }
    Ok(child)
}

/// Descriptors of the run's init (when bubblewrap reported it) and of
/// bubblewrap itself. bubblewrap reports its init's pid first; no report
/// means it failed before creating the sandbox.
fn watch(
    child: &crate::spawn::Bwrap,
    json: &mut io::BufReader<File>,
) -> Result<(Option<OwnedFd>, OwnedFd), SandboxError> {
    let init_pid = read_child_pid(json);
    let init = init_pid.and_then(|p| {
        rustix::process::Pid::from_raw(p).and_then(|pid| pidfd_open(pid, PidfdFlags::empty()).ok())
    });
    let outer = rustix::process::Pid::from_raw(child.id())
        .and_then(|pid| pidfd_open(pid, PidfdFlags::empty()).ok())
        .ok_or(SandboxError::Supervise {
            what: "cannot watch bubblewrap (pidfd_open)",
            source: io::Error::last_os_error(),
        })?;
    Ok((init, outer))
}

/// What the supervision waits on, and whom it stops.
struct Watch<'a> {
    /// bubblewrap: the run is over when it exits.
    outer: &'a OwnedFd,
    /// The run's init, watched when the run has a pid namespace of its own.
    init: Option<&'a OwnedFd>,
    /// The run's init, killed with bubblewrap.
    kill_init: Option<&'a OwnedFd>,
    cancel: Option<&'a Cancel>,
    job: Option<&'a oz0_limits::Job>,
}

/// Supervises the run until bubblewrap exits: reads the stage's report as it
/// comes, removes the placeholders when the init is gone (or says it is
/// alone: see [`protocol::ends_alone`]), and kills the
/// run on a cancel or a limit. How it was stopped, if it was.
fn supervise(
    w: Watch<'_>,
    mut supervisor: oz0_limits::Supervisor,
    (holders, plan): (&mut Holders, &Plan),
    (status, status_buf): (&mut File, &mut Vec<u8>),
) -> Result<Option<Ended>, SandboxError> {
    let mut status_open = true;
    let mut killed: Option<Ended> = None;
    loop {
        let wait = match &killed {
            None => supervisor.next_poll(Instant::now()),
            Some(_) => None,
        };
        let mut pfds = vec![PollFd::new(w.outer, PollFlags::IN)];
        if status_open {
            pfds.push(PollFd::new(&*status, PollFlags::IN));
        }
        let cancel_idx = w.cancel.map(|c| {
            pfds.push(PollFd::new(&c.0, PollFlags::IN));
            pfds.len() - 1
        });
        let init_idx = match w.init {
            Some(fd) if !holders.removed => {
                pfds.push(PollFd::new(fd, PollFlags::IN));
                Some(pfds.len() - 1)
            }
            _ => None,
        };
        let ts = wait.map(|d| rustix::event::Timespec {
            // A wait beyond what the kernel counts is as long as it counts.
            tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(d.subsec_nanos()),
        });
        match poll(&mut pfds, ts.as_ref()) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => {
                return Err(SandboxError::Supervise {
                    what: "poll",
                    source: e.into(),
                })
            }
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
            // The stage, the init of the run's own pid namespace, says no
            // process of the run is left but itself: the placeholders go
            // now, while the kernel takes the namespaces down.
            if w.init.is_some() && !holders.removed && protocol::ends_alone(status_buf) {
                holders.remove(&plan.placeholders);
            }
        }
        if outer_done {
            break;
        }
        if killed.is_some() {
            continue;
        }
        killed = stop_reason(cancelled, &mut supervisor, w.job);
        if killed.is_some() {
            if let Some(j) = w.job {
                let _ = j.kill();
            }
            kill_tree(w.kill_init, w.outer);
        }
    }
    Ok(killed)
}

/// Why the run must stop now, if it must: a cancel, or the supervisor's
/// verdict. The supervisor kills the job itself on a verdict; a failure to
/// read the job's counters is treated as a verdict (fail closed).
fn stop_reason(
    cancelled: bool,
    supervisor: &mut oz0_limits::Supervisor,
    job: Option<&oz0_limits::Job>,
) -> Option<Ended> {
    if cancelled {
        return Some(Ended::Cancelled);
    }
    match supervisor.check(job, Instant::now()) {
        Ok(None) => None,
        Ok(Some(oz0_limits::Verdict::Timeout { .. })) => Some(Ended::Timeout),
        Ok(Some(oz0_limits::Verdict::CpuTime { .. })) => Some(Ended::CpuTime),
        Err(e) => {
            eprintln!("oz0-node: stopping the run: {e}");
            Some(Ended::Cancelled)
        }
    }
}

/// How a run whose stage started ended, and its status, from what the
/// node saw (`killed`: a limit or a cancel it enforced) and what the stage
/// said; `code` is the run's exit status. The command was started only
/// after the stage said what Landlock enforced (its last word before the
/// command, every restriction in place): a stage that ended before that
/// without a word (killed by the memory limit while it built the sandbox,
/// say) is a failure of the sandbox, never the command's status.
fn how_it_ended(
    killed: Option<Ended>,
    report: &StageReport,
    code: i32,
) -> Result<(Ended, i32), SandboxError> {
    Ok(match (killed, &report.not_executed) {
        (Some(Ended::Timeout), _) => (Ended::Timeout, Exit::Timeout.code()),
        (Some(k), _) => (k, code),
        (None, Some((c, reason))) => (
            Ended::NotExecuted {
                reason: reason.clone(),
            },
            *c,
        ),
        (None, None) if report.landlock.is_none() => {
            return Err(SandboxError::Stage(format!(
                "the stage ended (status {code}) before it started the command, without saying why; a memory limit too small for the sandbox's own start kills it so"
            )))
        }
        (None, None) => (Ended::Exited, code),
    })
}

/// The run's outcome from how it ended: bubblewrap's status, the stage's
/// report, bubblewrap's own messages, and how it was stopped. `Err` when
/// the command never ran.
#[allow(clippy::too_many_arguments)]
fn outcome(
    plan: &Plan,
    opts: &Launch<'_>,
    run_id: &str,
    started: Instant,
    exit: std::process::ExitStatus,
    report: StageReport,
    captured: String,
    killed: Option<Ended>,
) -> Result<RunOutcome, SandboxError> {
    // A run its limit killed while the sandbox was still being made (the
    // start counts toward --cpu-seconds and --timeout) ended at that limit,
    // not in a failure of bubblewrap: it is reported as the limit.
    let limit_before_start = matches!(killed, Some(Ended::Timeout | Ended::CpuTime));
    if !report.started && !limit_before_start {
        if killed == Some(Ended::Cancelled) {
            return Err(SandboxError::CancelledBeforeStart);
        }
        return Err(SandboxError::Start(crate::bwrap::explain_failure(
            &captured,
        )));
    }
    if let Some(reason) = report.error {
        return Err(SandboxError::Stage(reason));
    }
    // bubblewrap's own messages after the start (rare) still reach the
    // run's stderr.
    if !captured.trim().is_empty() {
        match &opts.io.stderr {
            oz0_core::Stdio::Inherit => eprint!("{captured}"),
            oz0_core::Stdio::File(f) => {
                let _ = (&*f).write_all(captured.as_bytes());
            }
            oz0_core::Stdio::Null => {}
        }
    }
    let (ended, exit_code) = how_it_ended(killed, &report, status_code(exit))?;
    Ok(RunOutcome {
        run_id: run_id.to_string(),
        ended,
        exit_code,
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        landlock: report.landlock,
        namespaces: plan.namespaces.iter().map(|n| n.name()).collect(),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The command's status is the run's only once the stage said every
    /// restriction was in place; a stage that ended before is the
    /// sandbox's failure.
    #[test]
    fn a_stage_that_ends_before_the_command_is_no_commands_status() {
        let walled = StageReport {
            started: true,
            landlock: Some(crate::landlock::LandlockReport {
                kernel_abi: 7,
                enforced: "full".into(),
            }),
            ..StageReport::default()
        };
        let (ended, code) = how_it_ended(None, &walled, 3).unwrap();
        assert_eq!((ended, code), (Ended::Exited, 3));
        let cut_short = StageReport {
            started: true,
            ..StageReport::default()
        };
        let e = how_it_ended(None, &cut_short, 137).unwrap_err();
        assert!(
            matches!(&e, SandboxError::Stage(why) if why.contains("status 137")),
            "{e}"
        );
        // A limit the node enforced is said as that limit either way.
        let (ended, _) = how_it_ended(Some(Ended::Timeout), &cut_short, 137).unwrap();
        assert_eq!(ended, Ended::Timeout);
    }
}
