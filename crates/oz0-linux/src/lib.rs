//! `oz0-linux` owns tier 1 on Linux: it turns a validated [`oz0_policy::RunSpec`]
//! into a plan ([`plan`]), launches it under bubblewrap ([`launch`]), completes
//! the sandbox from inside with Landlock and seccomp ([`stage`]), and
//! supervises the run's single process tree to its end.
//!
//! Threat model: the command is hostile. It runs as the node's user inside
//! fresh user, pid, ipc, uts, cgroup and network namespaces, with no
//! capabilities, no new privileges, no nested user namespaces, a seccomp
//! filter and Landlock, seeing only the paths the plan mounts. The node's
//! data directory, home directories and other runs' folders are never
//! mounted. What each layer enforced is reported, never assumed.

pub mod bwrap;
pub mod devfs;
pub mod gitlook;
pub mod hold;
pub mod host;
pub mod hostfs;
pub mod landlock;
pub mod launch;
pub mod plan;
pub mod pool;
pub mod seccomp;
pub mod stage;
pub mod userns;

pub use launch::{run, Ended, LaunchOptions, RunOutcome, SandboxError, StdioMode};
