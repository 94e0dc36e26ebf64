//! `oz0-macos` owns macOS' walls: tier 1 (Seatbelt), tier 0 and tier 2
//! (Apple's container), the portable decisions as data and a thin native
//! part.
//!
//! Portable (tested on Linux):
//! - [`check`]: `sandbox check`'s lines and fix from what the probes
//!   ([`probe`]) found;
//! - [`seatbelt`]: the Seatbelt profile and `sandbox-exec` argument list
//!   generated from a run's spec;
//! - [`container`]: Apple's `container` availability decision and argument
//!   list for one microVM tool server;
//! - [`tree`]: ending a run's every process over a process table;
//! - `runs` (Unix): a run's id, its TEMP, its record on the host and the
//!   sweep of what a killed node left.
//!
//! Native (macOS only, type-checked in CI):
//! - `sandbox`: `Seatbelt` (tier 1) and `Plain` (tier 0) as
//!   `oz0_core::Sandbox`, their launch and supervision;
//! - `wall`: `MacWall`, the probes and the eight-property self-test
//!   through Seatbelt as `oz0_core::Wall`;
//! - `vm`: Apple's container launcher for one tool server;
//! - `native`: the process table and `sandbox_check` (its only `unsafe`).
//!
//! # Threat model
//!
//! The command (or tool server) is hostile; the caller names what it gets.
//! For tier 1 the profile is the boundary: it denies by default, takes every
//! run path as a parameter (never pasted into its text, so no path can add a
//! rule), lets the run write only its work folder, `--write` folders and its
//! TEMP, read only the system, `--read` paths and the node binary, reach only
//! the proxy's port on localhost, and neither write the protected entries
//! (`oz0_policy::protected`, the one list, even when missing) nor remove or
//! rename `.git`, the writable folders or their ancestors. Limits Seatbelt
//! cannot enforce for a whole run (memory, processes, CPU time) are refused,
//! never silently dropped. For tier 2 Apple's VMs run outside tier 1 (they
//! are started by Apple's launchd services); their kernel is the boundary,
//! with no network device, a read-only root, no capabilities, the node's
//! uid:gid, whole CPUs, memory and a process limit, and variables only in a
//! file the node's user alone can read.
//!
//! # What is verified where
//!
//! - **Tested on Linux**: the profile text, parameters, argv and environment
//!   (golden files under `golden/`), that no run path reaches the profile
//!   text, the protections and their parameters, the refusals; the
//!   `container` argument lists (golden), CPU rounding, the env file's rules,
//!   mode 0600 and removal, and the availability table.
//! - **Only type-checked** for `aarch64-apple-darwin` and
//!   `x86_64-apple-darwin`: the native part (the sandboxes' launch and
//!   supervision, the wall, the container launcher, the process table).
//! - **Needs a real macOS 26 machine on Apple silicon**: that `sandbox-exec`
//!   accepts the profile and enforces it as written (in particular that a
//!   rename is refused by `file-write-unlink` on its source, and that the
//!   listed Mach services suffice for common programs), and that
//!   `container` 1.5.0 accepts every flag used here (`--ulimit`, `--tmpfs`,
//!   `--mount … readonly`) and that a proxy socket in a shared folder is
//!   reachable from the guest. None of that is claimed here.

pub mod check;
pub mod container;
pub mod probe;
#[cfg(unix)]
pub mod runs;
pub mod seatbelt;
pub mod tree;

#[cfg(target_os = "macos")]
pub mod native;
#[cfg(target_os = "macos")]
pub mod sandbox;
#[cfg(unix)]
pub mod vm;
#[cfg(target_os = "macos")]
pub mod wall;
