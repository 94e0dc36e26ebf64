//! macOS tier 1 and tier 0 as the node core's door (macOS only):
//! [`Seatbelt`] runs one command through `sandbox-exec` with the profile
//! `crate::seatbelt::plan` makes from its spec, and [`Plain`] runs one
//! with no wall (tier 0), its processes still told from all others by a
//! profile that allows everything but the run's mark.
//!
//! Each run gets a TEMP of its own (also `HOME`, [`crate::runs::RunTemp`]),
//! exactly the variables named plus what programs need and, with egress,
//! the proxy's on a loopback TCP port (the profile's one network peer),
//! with the run's token. It starts in a process group of its own. When its
//! first process ends, its timeout passes or it is cancelled, its group is
//! killed and then every process still carrying the run's mark, round after
//! round until none is left (`crate::tree`): a process that started a group
//! or a session of its own and was adopted by launchd still goes with the
//! run. While it may have processes the run is recorded
//! ([`crate::runs::RunRecord`]).
//!
//! Limits Seatbelt cannot hold for a whole run (memory, processes, CPU
//! time) are refused, never silently dropped. `sandbox-exec` fails closed:
//! a profile it cannot apply runs nothing. Type-checked in CI; it has not
//! run on a Mac.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use oz0_core::exit::{exec_failure_code, status_code, Exit};
use oz0_core::{Cancel, Ended, Outcome, Role, RunError, RunIo, RunOptions};
use oz0_egress::EgressService;
use oz0_policy::{AbsPath, RunSpec};
use rustix::event::{poll, PollFd, PollFlags, Timespec};

use crate::native::RunProcesses;
use crate::runs::stdio;
use crate::runs::{new_run_id, RunRecord, RunTemp};
pub use crate::runs::{temp_root, SetupError};
use crate::seatbelt::{plan, tracking_argv, MacHost, ProxyPort};
use crate::tree::{end_run, Membership};

/// How often a run is looked at while it runs.
const TICK: Duration = Duration::from_millis(20);

/// A fault the self-test's tests inject (never set otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The profile carries a rule `sandbox-exec` cannot compile: the run
    /// must never start its command.
    BrokenProfile,
}

/// Tier 1 on macOS.
pub struct Seatbelt {
    /// The node binary, canonical (readable by every run: the probe and
    /// the bridge are this binary).
    pub node_binary: AbsPath,
    /// Where each run's TEMP is made (canonical: `/private/…`).
    pub temp_root: PathBuf,
    /// The node's egress proxy, for runs with `--allow`/`--forward`.
    pub egress: Arc<dyn EgressService>,
    /// A fault to inject (self-test only).
    pub fault: Option<Fault>,
    /// Where live runs are recorded (`<data-dir>/runs`), when the node has
    /// a data directory.
    pub records: Option<PathBuf>,
}

impl Seatbelt {
    /// Tier 1 with this node's binary and temporary folder; its live runs
    /// are recorded in `records` when given.
    pub fn new(
        egress: Arc<dyn EgressService>,
        fault: Option<Fault>,
        records: Option<PathBuf>,
    ) -> Result<Seatbelt, SetupError> {
        Ok(Seatbelt {
            node_binary: node_binary()?,
            temp_root: temp_root()?,
            egress,
            fault,
            records,
        })
    }
}

/// Tier 0 on macOS: no wall, the run's processes still ended together.
pub struct Plain {
    /// Where each run's TEMP is made (canonical).
    pub temp_root: PathBuf,
    /// Where live runs are recorded (`<data-dir>/runs`).
    pub records: Option<PathBuf>,
}

/// This binary's real path.
pub fn node_binary() -> Result<AbsPath, SetupError> {
    let p = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(SetupError::NodeBinary)?;
    p.to_str()
        .and_then(|s| AbsPath::new(s).ok())
        .ok_or_else(|| SetupError::NodeBinaryPath(p.clone()))
}

/// Ends what runs of a killed node left (their records in
/// `<data-dir>/runs`): what each ended, for the log.
pub fn sweep(data_dir: &Path) -> Vec<String> {
    let alive = |pid: i32| {
        rustix::process::Pid::from_raw(pid)
            .is_some_and(|p| rustix::process::test_kill_process(p).is_ok())
    };
    crate::runs::sweep_stale(&crate::runs::records(data_dir), &alive, &mut |m| {
        end_all(0, m)
    })
}

/// Ends every process of a run: its group, then every process carrying its
/// mark. `None` when all are gone, else why not.
pub fn end_all(pgid: u32, m: &Membership) -> Option<String> {
    // (0: no group to kill, only the marked processes.)
    if let Some(g) = rustix::process::Pid::from_raw(i32::try_from(pgid).unwrap_or(0)) {
        let _ = rustix::process::kill_process_group(g, rustix::process::Signal::KILL);
    }
    let me = i32::try_from(std::process::id()).unwrap_or(0);
    let mut table = match RunProcesses::new(m) {
        Ok(t) => t,
        Err(e) => return Some(e.to_string()),
    };
    end_run(&mut table, me).err().map(|e| e.to_string())
}

/// What [`supervise`] starts.
struct Launch<'a> {
    /// The program and its arguments (`sandbox-exec …`).
    argv: &'a [String],
    /// Its whole environment.
    env: &'a [(String, String)],
    /// Its current folder.
    work: &'a str,
    /// Wall time, seconds.
    timeout: Option<u64>,
    /// How to tell the run's processes.
    membership: &'a Membership,
}

/// Runs `l` as a process group of its own, until its first process ends,
/// its deadline passes or `cancel` fires; then ends every process of the
/// run. The run is recorded in `records` while it may have processes.
fn supervise(
    l: &Launch,
    io: RunIo,
    cancel: Option<Cancel>,
    records: Option<&Path>,
) -> Result<Outcome, RunError> {
    let (argv, env, work, timeout, membership) = (l.argv, l.env, l.work, l.timeout, l.membership);
    let record = records
        .map(|d| RunRecord::write(d, std::process::id(), membership))
        .transpose()?;
    let started = Instant::now();
    let run_id = new_run_id();
    let done = |ended, exit_code, warnings: Vec<String>| Outcome {
        run_id: run_id.clone(),
        ended,
        exit_code,
        duration_ms: started.elapsed().as_millis().try_into().unwrap_or(u64::MAX),
        limit_hit: None,
        warnings,
        report: serde_json::Map::new(),
    };
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(work)
        .stdin(stdio(io.stdin))
        .stdout(stdio(io.stdout))
        .stderr(stdio(io.stderr));
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let reason = format!("cannot execute {}: {e}", argv[0]);
            return Ok(done(
                Ended::NotExecuted { reason },
                exec_failure_code(&e),
                vec![],
            ));
        }
    };
    let pgid = child.id();
    let deadline = timeout.map(|s| started + Duration::from_secs(s));
    // Once the first process has run a moment (sandbox-exec has applied
    // the profile and executed the command), the sandbox must answer that
    // it is the run's: else no process of the run could be told from the
    // others, and one that left the group would outlive the run unseen.
    let mut witnessed = None;
    // How the run ended, and, when it was ended here, what ending all its
    // processes left (so that the table is not swept twice).
    let (ended, code, swept) = loop {
        match child.try_wait() {
            Ok(Some(st)) => break (Ended::Exited, status_code(st), None),
            Ok(None) if witnessed.is_none() && started.elapsed() >= WITNESS_AFTER => {
                witnessed = Some(is_member(pgid, membership));
            }
            Ok(None) => {}
            Err(_) => {
                let left = end_all(pgid, membership);
                let st = child.wait().map(status_code).unwrap_or(1);
                break (Ended::Exited, st, Some(left));
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            let left = end_all(pgid, membership);
            let _ = child.wait();
            break (Ended::Timeout, Exit::Timeout.code(), Some(left));
        }
        let fired = match &cancel {
            Some(c) => {
                let t = Timespec {
                    tv_sec: 0,
                    tv_nsec: TICK.as_nanos().try_into().unwrap_or(0),
                };
                let mut fds = [PollFd::new(&c.0, PollFlags::IN)];
                poll(&mut fds, Some(&t)).unwrap_or(0) > 0 && !fds[0].revents().is_empty()
            }
            None => {
                std::thread::sleep(TICK);
                false
            }
        };
        if fired {
            let left = end_all(pgid, membership);
            let st = child.wait().map(status_code).unwrap_or(1);
            break (Ended::Cancelled, st, Some(left));
        }
    };
    // The first process ended: everything it started goes with it.
    let left = swept.unwrap_or_else(|| end_all(pgid, membership));
    // Kept when processes may be left: the next start of the node tries
    // again.
    if let Some(r) = record.filter(|_| left.is_some()) {
        r.keep();
    }
    let mut warnings: Vec<String> = left
        .map(|e| format!("processes of the run may be left: {e}"))
        .into_iter()
        .collect();
    if witnessed == Some(false) {
        warnings.push("this Mac's sandbox did not tell the run's first process as the run's (sandbox_check): a process of the run that left its process group may outlive it".into());
    }
    Ok(done(ended, code, warnings))
}

/// How long the first process runs before the sandbox is asked about it.
const WITNESS_AFTER: Duration = Duration::from_millis(200);

/// Whether the sandbox tells `pid` as a process of the run.
fn is_member(pid: u32, m: &Membership) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    RunProcesses::new(m).is_ok_and(|mut t| crate::tree::ProcessTable::is_member(&mut t, pid))
}

impl oz0_core::Sandbox for Seatbelt {
    fn tier(&self) -> u8 {
        1
    }

    fn run(&self, spec: &RunSpec, opts: RunOptions) -> Result<Outcome, RunError> {
        let RunOptions {
            io,
            cancel,
            role,
            fault,
        } = opts;
        match role {
            Role::Command => {}
            Role::Monitor(_) => return Err("a VM's monitor does not run in Seatbelt: microVMs run in Apple's container (sandbox vm)".into()),
            _ => return Err(format!("{} does not run in Seatbelt: only Linux tier 1 gives a run an image's root", role.what()).into()),
        }
        // The one fault Seatbelt makes: a profile sandbox-exec cannot
        // compile, which it must refuse to run anything under.
        let broken = match fault {
            None => self.fault == Some(Fault::BrokenProfile),
            Some(oz0_core::Fault::Unconfinable) => true,
            Some(f) => return Err(format!("Seatbelt cannot inject {f:?}").into()),
        };
        let temp = RunTemp::new(&self.temp_root)?;
        let host = MacHost {
            node_binary: self.node_binary.clone(),
            run_temp: temp.abs()?,
        };
        // With egress: the node's proxy for this run on a loopback port.
        let mut lease = None;
        let port = if spec.egress.is_enabled() {
            let token = oz0_egress::Token::generate()?;
            let (l, addr) = self.egress.open_tcp(
                new_run_id(),
                token.clone(),
                spec.egress.clone(),
                (std::net::Ipv4Addr::LOCALHOST, 0).into(),
            )?;
            lease = Some(l);
            Some(ProxyPort {
                port: addr.port(),
                token: token.expose().to_string(),
            })
        } else {
            None
        };
        let mut plan = plan(spec, &host, port.as_ref())?;
        // The run's policy file, made new in its TEMP before it starts.
        let policy = temp.0.join(crate::seatbelt::POLICY_NAME);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&policy)
            .and_then(|mut f| std::io::Write::write_all(&mut f, plan.policy.as_bytes()))
            .map_err(|e| {
                format!(
                    "cannot write the run's policy file {}: {e}",
                    policy.display()
                )
            })?;
        if broken {
            plan.profile.push_str("(oz0-no-such-operation)\n");
            plan.argv[2].clone_from(&plan.profile);
        }
        let o = supervise(
            &Launch {
                argv: &plan.argv,
                env: &plan.env,
                work: spec.work.as_str(),
                timeout: plan.timeout_seconds,
                membership: &plan.membership,
            },
            io,
            cancel,
            self.records.as_deref(),
        );
        drop(lease);
        drop(temp);
        o
    }
}

impl oz0_core::Sandbox for Plain {
    fn tier(&self) -> u8 {
        0
    }

    /// A fault changes nothing here: with no wall, every weakness a fault
    /// would make is there already.
    fn run(&self, spec: &RunSpec, opts: RunOptions) -> Result<Outcome, RunError> {
        let RunOptions {
            io, cancel, role, ..
        } = opts;
        if let Some(why) = oz0_core::tier0::refusal(spec, &role) {
            return Err(why.into());
        }
        let temp = RunTemp::new(&self.temp_root)?;
        let (argv, membership) = tracking_argv(&temp.abs()?, &spec.command);
        let mut env = spec.env_with_path(crate::seatbelt::DEFAULT_PATH);
        // The run is told it has no wall (tier 0).
        env.push((
            oz0_policy::describe::SANDBOX_VAR.into(),
            oz0_policy::describe::NO_WALL_VALUE.into(),
        ));
        let o = supervise(
            &Launch {
                argv: &argv,
                env: &env,
                work: spec.work.as_str(),
                timeout: spec.limits.timeout_seconds,
                membership: &membership,
            },
            io,
            cancel,
            self.records.as_deref(),
        );
        drop(temp);
        o
    }
}
