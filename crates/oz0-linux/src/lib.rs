//! `oz0-linux` owns tier 1 on Linux: it turns a validated [`oz0_policy::RunSpec`]
//! into a plan ([`plan`]), launches it under bubblewrap (`launch`), completes
//! the sandbox from inside with Landlock and seccomp ([`stage`]), and
//! supervises the run's single process tree to its end. [`Tier1`] is the one
//! door to a run: the context a node process makes once, implementing
//! [`oz0_core::Sandbox`]; [`plain::Plain`] is tier 0 (no wall).
//! [`wall::LinuxWall`] is Linux's [`oz0_core::Wall`]: the probes and their
//! verdict ([`check`]) and the one self-test with Linux's proofs of each
//! layer alone ([`selftest`]).
//!
//! Threat model: the command is hostile. It runs as the node's user inside
//! fresh user, pid, ipc, uts, cgroup and network namespaces, with no
//! capabilities, no new privileges, no nested user namespaces, a seccomp
//! filter and Landlock, seeing only the paths the plan mounts. The node's
//! data directory, home directories and other runs' folders are never
//! mounted. What each layer enforced is reported, never assumed. The files
//! that make up this boundary are listed in `docs/ARCHITECTURE.md`.

pub mod bwrap;
pub mod check;
pub mod devfs;
pub mod folder_lock;
pub mod gitlook;
pub mod gvisor;
pub mod hold;
pub mod host;
pub mod hostfs;
pub mod image_check;
pub mod landlock;
mod launch;
pub mod outcome;
mod placeholders;
pub mod plain;
pub mod plan;
pub mod pool;
pub mod protocol;
mod record;
pub mod seccomp;
pub mod selftest;
mod spawn;
pub mod stage;
pub mod systool;
mod tier1;
pub mod userns;
pub mod wall;

pub use outcome::{RunOutcome, SandboxError};
pub use record::{new_run_id, scratch_base, sweep_stale};
pub use tier1::{extras_for, HostConfig, Tier1};
pub use wall::{Fault, LinuxWall};
