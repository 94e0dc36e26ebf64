//! `oz0-limits` owns the **job** of a run: the cgroup(s) that hold every process
//! of one sandboxed run and enforce its limits as a whole — memory of all
//! processes together, number of tasks, CPU time — and that let the node kill
//! the whole run at once and read what happened (peak memory, out-of-memory
//! kills, process limit hit, CPU used).
//!
//! It covers both kernel layouts found in the field:
//!
//! - **cgroup v2** with a delegated subtree (systemd `Delegate=yes`, or a
//!   subtree made by [`setup_delegation`]): `memory.max`, `memory.swap.max`,
//!   `memory.oom.group`, `pids.max`, `cgroup.kill`, `cpu.stat`;
//! - **cgroup v1** memory + pids (+ cpuacct, + freezer) hierarchies with a
//!   delegated `oz0/<user>` folder: `memory.limit_in_bytes`,
//!   `memory.memsw.limit_in_bytes`, `pids.max`, `cpuacct.usage`.
//!
//! The flow is *probe → create → place → supervise → kill → remove*:
//! [`probe_mode`] asks the system (never assumes) where a job may live and
//! returns a [`JobMode`] plus [`ProbeFacts`] for `sandbox check`;
//! [`Job::create`] makes the run's cgroup(s) and writes every requested limit,
//! **failing closed** (any limit that cannot be written is an error and nothing
//! is left behind); [`Job::procs_files`] hands the launcher the `cgroup.procs`
//! files its forked child writes `0` into before it executes; a
//! [`Supervisor`] enforces CPU seconds (cgroups have no total-CPU-time limit)
//! and the wall-time limit by polling; [`Job::kill`], [`Job::outcome`] and
//! [`Job::remove`] end it. [`cleanup_stale`] removes the jobs of dead nodes.
//!
//! All system access goes through [`CgroupFs`], implemented by [`RealFs`] and
//! by an in-memory `FakeFs` in the unit tests, so the v1 and v2 logic is tested
//! without root and without the host having that layout.
//!
//! # Threat model
//!
//! The processes inside a job are hostile: they may fork as fast as they can,
//! allocate until killed, spin the CPU, or try to leave the job. They cannot
//! write the job's control files (the sandbox does not mount the cgroup tree
//! writable, and the files belong to the node's user), so the limits hold
//! against them; a process can only leave a cgroup by writing to a
//! `cgroup.procs` it can reach, which the sandbox gives it none of. The node
//! itself, its operator and the kernel are trusted. What this crate guards
//! against is *silent weakening*: a limit that was asked for and could not be
//! written, a process that could not be placed, a job that could not be
//! removed — each is an error naming the path and the fix, never a quieter run.
//!
//! # What `--processes N` counts
//!
//! `pids.max = N` counts **every task of the run at once**: processes *and
//! threads*, including the sandbox's own two bubblewrap processes (the outer
//! one and the namespace's pid 1), which are placed in the job before
//! bubblewrap executes. A command therefore gets `N - 2` tasks of its own,
//! itself included: under `--processes 8`, a shell that starts 20 background
//! processes gets the shell plus at most 5 of them (6 processes of the
//! command); the next `fork` fails with `EAGAIN`.

mod detect;
mod error;
#[cfg(test)]
pub mod fake;
mod fs;
mod job;
mod setup;
mod supervisor;

pub use detect::{
    probe_mode, probe_mode_with, CgroupVersion, JobMode, ProbeFacts, ProbeOptions, ProbeResult,
};
pub use error::JobError;
pub use fs::{CgroupFs, RealFs};
pub use job::{
    cleanup_stale, cleanup_stale_with, CleanupReport, Enforced, Job, JobOutcome, JobStats,
    LimitHit, RunId, JOB_PREFIX,
};
pub use setup::{
    remove_delegation, remove_delegation_in, setup_delegation, setup_delegation_in,
    setup_delegation_with, Kept, RemoveReport, SetupMode, SetupReport,
};
pub use supervisor::{Supervisor, Verdict, CPU_POLL_MAX};

/// Tasks the sandbox itself keeps in the job: bubblewrap's outer process and
/// its pid-namespace init. See "What `--processes N` counts" above.
pub const SANDBOX_TASKS: u32 = 2;

/// The root-owned folder under each cgroup hierarchy that holds each
/// user's delegated subtree (`oz0/<user>`).
pub const DELEGATED_DIR: &str = "oz0";

#[cfg(test)]
mod tests;
