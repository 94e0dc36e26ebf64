//! The host context: what a node process resolves once for all its runs
//! (its data directory, bubblewrap, its own binary, the job mode, the
//! egress proxy), and the one door to a tier-1 run on Linux. Every caller
//! (`sandbox run`, edge jobs, the self-test, a VM's monitor) runs through
//! [`Tier1::run`], or [`oz0_core::Sandbox::run`] on it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use oz0_core::{Cancel, Fault, Role, RunIo};
use oz0_egress::EgressService;
use oz0_limits::JobMode;
use oz0_policy::AbsPath;
use oz0_policy::RunSpec;

use crate::launch::{self, Launch};
use crate::outcome::{RunOutcome, SandboxError};
use crate::plan::{self, Plan};
use crate::{bwrap, gitlook, host, record};

/// Where a host's parts come from; `None` takes the default.
#[derive(Debug, Clone, Default)]
pub struct HostConfig {
    /// The node's data directory, which no run may see
    /// [default: `$XDG_DATA_HOME/oz0-node` or `~/.local/share/oz0-node`].
    pub data_dir: Option<PathBuf>,
    /// Where run jobs (cgroups) are made [default: probed].
    pub cgroup_root: Option<PathBuf>,
    /// bubblewrap [default: `bwrap` on `PATH`, then `/usr/bin/bwrap`].
    pub bwrap: Option<PathBuf>,
    /// The node binary, bound into each run as its stage [default: this
    /// process's own].
    pub node_exe: Option<PathBuf>,
    /// Where each run's private host folder goes [default:
    /// [`record::scratch_base`]].
    pub scratch: Option<PathBuf>,
}

/// One node process's context for its runs, made once.
///
/// bubblewrap and the job mode are found when a run first needs them and
/// kept once found (a machine fixed after the node started is then seen at
/// the next run); the egress proxy is the one the caller gives, shared by
/// every run.
pub struct Tier1 {
    data_dir: PathBuf,
    node_exe: PathBuf,
    scratch: PathBuf,
    bwrap_flag: Option<PathBuf>,
    cgroup_root: Option<PathBuf>,
    bwrap: Mutex<Option<PathBuf>>,
    jobs: Mutex<Option<JobMode>>,
    egress: Option<Arc<dyn EgressService>>,
    audit_log: Option<PathBuf>,
    git: gitlook::Policy,
}

impl std::fmt::Debug for Tier1 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tier1")
            .field("data_dir", &self.data_dir)
            .field("node_exe", &self.node_exe)
            .field("scratch", &self.scratch)
            .field("egress", &self.egress.is_some())
            .finish_non_exhaustive()
    }
}

/// What one run sets beyond its spec, inside this crate; the rest comes
/// from the host. Callers outside reach a run through
/// [`oz0_core::Sandbox::run`] only.
#[derive(Default)]
pub(crate) struct RunOptions<'a> {
    /// The command's stdio.
    pub io: RunIo,
    /// Fires when the run must be cancelled.
    pub cancel: Option<Cancel>,
    /// Seccomp profile, devices, faults: what the caller adds to the spec.
    pub extras: plan::Extras,
    /// Where the run's job goes, instead of the host's probed mode.
    pub jobs: Option<&'a JobMode>,
}

impl Tier1 {
    /// Resolves the data directory and the node binary; everything else is
    /// found when a run needs it.
    pub fn open(cfg: HostConfig) -> Result<Tier1, SandboxError> {
        let data_dir = host::data_dir(cfg.data_dir.as_deref())?;
        let node_exe = match cfg.node_exe {
            Some(p) => p,
            None => std::env::current_exe().map_err(host::HostError::OwnPath)?,
        };
        Ok(Tier1 {
            data_dir,
            node_exe,
            scratch: cfg.scratch.unwrap_or_else(record::scratch_base),
            bwrap_flag: cfg.bwrap,
            cgroup_root: cfg.cgroup_root,
            bwrap: Mutex::new(None),
            jobs: Mutex::new(None),
            egress: None,
            audit_log: None,
            git: gitlook::Policy::default(),
        })
    }

    /// Serves runs' egress with `service`, which records every decision in
    /// `audit_log` (named in each run's status).
    pub fn with_egress(mut self, service: Arc<dyn EgressService>, audit_log: PathBuf) -> Tier1 {
        self.egress = Some(service);
        self.audit_log = Some(audit_log);
        self
    }

    /// Does `policy` with what runs leave that host git would run.
    pub fn with_git(mut self, policy: gitlook::Policy) -> Tier1 {
        self.git = policy;
        self
    }

    /// Puts runs' jobs in `mode` instead of the probed one (the self-test's
    /// host, which has probed it already).
    pub fn with_job_mode(self, mode: JobMode) -> Tier1 {
        *self.jobs.lock().unwrap_or_else(|e| e.into_inner()) = Some(mode);
        self
    }

    /// The node's data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The node binary.
    pub fn node_exe(&self) -> &Path {
        &self.node_exe
    }

    /// Where egress decisions are recorded, when the host serves egress.
    pub fn audit_log(&self) -> Option<&Path> {
        self.audit_log.as_deref()
    }

    /// The host's egress service, if it has one.
    pub fn egress(&self) -> Option<&dyn EgressService> {
        self.egress.as_deref()
    }

    /// bubblewrap: found on first use (`--bwrap`, `PATH`, `/usr/bin`), and
    /// kept.
    pub fn bwrap(&self) -> Result<PathBuf, SandboxError> {
        let mut kept = self.bwrap.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = kept.as_ref() {
            return Ok(b.clone());
        }
        let path_var = std::env::var("PATH").ok();
        let found = bwrap::find(self.bwrap_flag.as_deref(), path_var.as_deref())?;
        *kept = Some(found.clone());
        Ok(found)
    }

    /// Where runs' jobs go: probed on first use (or `--cgroup-root`) and
    /// kept once a mode is found; the job folders of runs whose node died
    /// are removed then. Refused, with the reason and the fix, when no
    /// cgroup this user can drive is found.
    pub fn job_mode(&self) -> Result<JobMode, SandboxError> {
        let mut kept = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = kept.as_ref() {
            return Ok(m.clone());
        }
        let probed = oz0_limits::probe_mode(&oz0_limits::ProbeOptions {
            cgroup_root: self.cgroup_root.clone(),
            version: None,
        });
        if let JobMode::Unavailable { reason, fix } = probed.mode {
            return Err(SandboxError::NoJob { reason, fix });
        }
        let _ = oz0_limits::cleanup_stale(&probed.mode);
        *kept = Some(probed.mode.clone());
        Ok(probed.mode)
    }

    /// Plans a run without starting it (`--dry-run`).
    pub fn plan(&self, spec: &RunSpec, extras: &plan::Extras) -> Result<Plan, SandboxError> {
        launch::plan_only(spec, &self.node_exe, extras)
    }

    /// Runs `spec` to its end. `Err` means the command never ran.
    pub(crate) fn run(
        &self,
        spec: &RunSpec,
        opts: RunOptions<'_>,
    ) -> Result<RunOutcome, SandboxError> {
        let bwrap = self.bwrap()?;
        let probed;
        let jobs = match (opts.jobs, spec.limits.needs_job()) {
            (Some(j), _) => Some(j),
            (None, true) => {
                probed = self.job_mode()?;
                Some(&probed)
            }
            (None, false) => None,
        };
        launch::run(
            spec,
            Launch {
                bwrap: &bwrap,
                node_exe: &self.node_exe,
                scratch: self.scratch.clone(),
                io: opts.io,
                cancel: opts.cancel,
                egress: self.egress.as_deref(),
                jobs,
                extras: opts.extras,
                git: self.git,
            },
        )
    }
}

impl oz0_core::Sandbox for Tier1 {
    fn tier(&self) -> u8 {
        1
    }

    fn run(
        &self,
        spec: &RunSpec,
        opts: oz0_core::RunOptions,
    ) -> Result<oz0_core::Outcome, oz0_core::RunError> {
        let mut extras = extras_for(opts.role)?;
        // A run that cannot be confined: its job goes where no cgroup can
        // be made (a path through a file), so the launcher must refuse it.
        let broken;
        let unconfined_spec;
        let mut spec = spec;
        let mut jobs = None;
        match opts.fault {
            None => {}
            Some(Fault::Unconfinable) => {
                // Through its job: a run without limits is given one.
                if !spec.limits.needs_job() {
                    let mut s = spec.clone();
                    s.limits.processes = Some(1024);
                    unconfined_spec = s;
                    spec = &unconfined_spec;
                }
                broken = unjoinable(&self.job_mode()?);
                jobs = Some(&broken);
            }
            Some(f) => extras.fault = Some(plan_fault(f)?),
        }
        let outcome = Tier1::run(
            self,
            spec,
            RunOptions {
                io: opts.io,
                cancel: opts.cancel,
                extras,
                jobs,
            },
        )?;
        Ok(outcome.into_core(self.audit_log()))
    }
}

/// What tier 1 adds to a run's spec for its role: a VM monitor's devices,
/// system calls, secrets and socket, or an image's root.
pub fn extras_for(role: Role) -> Result<plan::Extras, oz0_policy::path::PathError> {
    let mut extras = plan::Extras::default();
    match role {
        Role::Command => {}
        Role::Monitor(m) => {
            if m.vmm_syscalls {
                extras.profile = crate::seccomp::Profile::Vmm;
            }
            extras.devices = m
                .devices
                .iter()
                .map(|d| AbsPath::new(d))
                .collect::<Result<_, _>>()?;
            extras.egress_socket = m.egress_socket.as_deref().map(AbsPath::new).transpose()?;
            extras.vm_secrets = m.secrets;
        }
        Role::Image(i) => {
            extras.image = Some(plan::ImageRoot {
                rootfs: AbsPath::new(&i.rootfs)?,
                cwd: AbsPath::new(i.cwd.as_deref().unwrap_or(plan::IMAGE_WORK))?,
                user: i.user,
            })
        }
    }
    Ok(extras)
}

/// The Linux form of a self-test's fault.
fn plan_fault(f: Fault) -> Result<plan::Fault, oz0_core::RunError> {
    Ok(match f {
        Fault::SharePid => plan::Fault::SharePid,
        Fault::ShareNet => plan::Fault::ShareNet,
        Fault::Expose(p) => plan::Fault::Expose(AbsPath::new(&p)?),
        Fault::ExposeAt { src, dest } => plan::Fault::ExposeAt {
            src: AbsPath::new(&src)?,
            dest: AbsPath::new(&dest)?,
        },
        Fault::NoProtectedPaths => plan::Fault::NoProtectedPaths,
        Fault::LeakEnv(n, v) => plan::Fault::LeakEnv(n, v),
        Fault::NoLandlock => plan::Fault::NoLandlock,
        Fault::NoSeccomp => plan::Fault::NoSeccomp,
        other => return Err(format!("the Linux wall cannot inject {other:?}").into()),
    })
}

/// `mode` with its job roots where no cgroup can be made.
fn unjoinable(mode: &JobMode) -> JobMode {
    let broken = |p: &Path| p.join("cgroup.procs").join("oz0-unconfinable");
    match mode {
        JobMode::V2 { root } => JobMode::V2 { root: broken(root) },
        JobMode::V1 {
            memory,
            pids,
            cpuacct,
            freezer,
        } => JobMode::V1 {
            memory: broken(memory),
            pids: broken(pids),
            cpuacct: cpuacct.clone(),
            freezer: freezer.clone(),
        },
        other => other.clone(),
    }
}
