//! `oz0-core` is the node core: the one door through which every caller
//! (`sandbox run`, edge jobs, the self-test, a VM's monitor) reaches a run,
//! whatever the platform behind it.
//!
//! - [`Sandbox`]: run one command under a validated [`RunSpec`], with given
//!   stdio ([`RunIo`]) and a cancel handle ([`Cancel`]), returning a typed
//!   [`Outcome`]. Linux tier 1 (bubblewrap, in `oz0-linux`) and tier 0 (no
//!   wall) implement it; a VM per server, Windows PSEC and macOS Seatbelt
//!   are further implementations.
//! - [`Wall`]: what the platform has ([`Check`]) and the proof that its wall
//!   holds ([`SelfTest`]); [`facts::assemble`] turns both into the node's
//!   facts, the same way on every platform.
//! - [`exit`]: the exit statuses, defined once.
//! - [`tier0`]: what a sandbox without a wall refuses, the same on every
//!   platform.
//! - [`selftest`]: the eight-property self-test through any wall, on every
//!   platform.
//!
//! The path of one run through the crates is in `docs/ARCHITECTURE.md`.

pub mod exit;
pub mod facts;
mod run;
pub mod selftest;
pub mod tier0;
mod wall;

pub use run::{
    Cancel, Ended, Fault, ImageRoot, LimitHit, Monitor, Outcome, Role, RunError, RunIo, RunOptions,
    Stdio, IMAGE_WORK,
};
pub use wall::{Check, Line, SelfTest};

use oz0_policy::RunSpec;

/// A wall around runs: runs one command to its end.
pub trait Sandbox: Send + Sync {
    /// The tier of the wall (0: none, 1: an OS sandbox, 2: a microVM).
    fn tier(&self) -> u8;

    /// Runs `spec` to its end, with the options' stdio, killing every
    /// process of the run when their cancel fires. `Err` means the command
    /// never ran (the sandbox refused or could not start it, or cannot hold
    /// what the options ask: a monitor, a fault).
    fn run(&self, spec: &RunSpec, opts: RunOptions) -> Result<Outcome, RunError>;
}

/// What a platform says about its wall.
pub trait Wall {
    /// Asks the system what it has: the tier it could have and, when lower,
    /// what is missing and the fix. Changes nothing, needs no privilege.
    fn check(&self) -> Check;

    /// Proves the tier `check` found by running the self-test through the
    /// real machinery, calling `on_line` after each property. None when the
    /// check found no wall to test.
    fn self_test(&self, check: &Check, on_line: &mut dyn FnMut(&Line)) -> Option<SelfTest>;
}
