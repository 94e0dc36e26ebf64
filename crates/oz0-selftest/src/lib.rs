//! `oz0-selftest` owns what a Linux node says about its wall: [`check`]
//! asks the system what it has (never a version number) and decides the
//! tier and the fix; [`selftest`] proves tier 1 by checking the eight
//! properties (launch, files, egress, ingress, job_limits, fail_closed,
//! protected_paths, environment) through the node's one door to a run;
//! [`wall::LinuxWall`] is both, as the node core asks for them
//! ([`oz0_core::Wall`]).
//!
//! Threat model: the self-test is the node's only evidence for the tier it
//! reports, so each check must be able to fail. Every check runs real
//! sandboxes on this machine, connects only to listeners it opened on
//! loopback, and works in a temporary folder it removes. Faults can be
//! injected (to prove that a check fails); a self-test with a fault injected
//! never reports a tier above 0.

pub mod check;
pub mod selftest;
pub mod wall;

pub use wall::{Fault, LinuxWall};
