//! `oz0-windows` owns Windows tier 1 (the PSEC preview): what the node asks
//! Windows, what it reports, and what a run in a PSEC container gets.
//!
//! - [`probe`]: the probe's facts as data ([`probe::PsecProbe`]), read in
//!   MXC's order (API set → `processmodel.dll` exports → contract → features →
//!   create/close), never by build number.
//! - [`check`]: `sandbox check`'s three lines and the kind of fix, a pure
//!   function ([`check::report`]) of the facts, `--sandbox psec` and the
//!   self-test. Windows is **routed as tier 0 always**.
//! - [`plan`]: a run's [`oz0_policy::RunSpec`] translated into the PSEC
//!   container request, the job's limits, the environment ([`mod@env`]), the
//!   command line ([`cmdline`]) and the protected entries, as plain data.
//! - [`launch`]: the launch contract (suspended → in a kill-on-close job →
//!   resumed; not placed ⇒ never runs) as a sequence over a trait.
//! - The walls as the node core's door (`oz0_core::Sandbox`): [`psec`]
//!   (tier 1: a PSEC container) and [`tier0`] (no wall: a job object
//!   around every process of the run); both watched to their end by
//!   [`supervise`] (one wait on the first process and the cancel together,
//!   bounded by the timeout); [`wall`]: the probe as `oz0_core::Wall`.
//! - [`route`] and [`relay`]: bridge or relay, decided once and handed on as
//!   `OZ0_SANDBOX_PSEC_ROUTE`; the relay's ports; the firewall facts the
//!   relay route relies on and the scoped rule the node prints.
//! - [`acl`]: who besides the node may read its data directory, from the
//!   access list, and the private list the node gives it.
//! - [`native`]: the only system calls (and the only `unsafe`): the probe,
//!   job objects and access lists, through `windows-sys`.
//!
//! Paths reach this crate through `oz0-policy` as `/X:/folder`
//! ([`winpath::WinPath::to_abs`]) and are parsed back strictly.
//!
//! # Threat model
//!
//! The command in the container is hostile. The caller of `oz0-node` names
//! what a run gets; its values may come from outside events. The plan is the
//! boundary: whatever it lists is what PSEC enforces, so it refuses rather
//! than weakens — a deny path on a build without the deny feature, a path
//! that could alias another (8.3 names, trailing dots, streams, devices,
//! UNC), an overlap with the data directory in another letter case, a
//! variable Windows would see as another (names ignore case), a non-Unicode
//! value, a program named without its full path. An empty environment is
//! never handed to Windows as "no block" (which would inherit the node's).
//! The proxy token travels in the run's environment only, never in the
//! container spec. On the relay route, PSEC does not keep other machines
//! from a listener in the container; Windows Firewall does, and the
//! `ingress` check holds the node to it.
//!
//! # What is verified where
//!
//! - **Tested on Linux** (unit and golden tests): every probe outcome → tier,
//!   facts line and fix kind (each row of the seed's table); the probe's
//!   step order; path parsing and case-insensitive overlap; the plan's
//!   request, limits, environment, command line and protected entries
//!   (golden files under `golden/`), and its refusals; the launch sequence
//!   and each fail-closed path (a recording fake); the route decision; the
//!   relay port allocator; the firewall check; the firewall rule text; the
//!   bytes of the minimal PSEC spec.
//! - **Run under Wine 8.0** (a Windows without PSEC, in CI through
//!   `oz0-node.exe`'s tests): [`native::probe`] reading the edition and
//!   build from the registry and finding the API set not implemented.
//! - **Only type-checked** (for `x86_64-pc-windows-msvc`,
//!   `aarch64-pc-windows-msvc` and `x86_64-pc-windows-gnu`): the rest of
//!   [`native`] — the probe's calls past the API set, job object creation,
//!   and compile-time checks that our job constants equal the system's.
//! - **Needs a real Windows 11 25H2 machine**: that the probe's answers match
//!   the OS, that the minimal spec creates, that the PSEC request as encoded
//!   by a launcher is enforced as listed (files, deny paths, protected
//!   entries, network through bridge or relay, ingress), that job limits
//!   hold, and the eight self-test properties. None of that is claimed here.

pub mod acl;
pub mod check;
pub mod claims;
pub mod cmdline;
pub mod env;
#[cfg(windows)]
pub mod hold;
pub mod launch;
pub mod look;
pub mod native;
pub mod plan;
pub mod probe;
pub mod psec;
pub mod psec_wire;
pub mod relay;
pub mod route;
pub mod supervise;
pub mod tier0;
pub mod utf8;
pub mod wall;
pub mod winpath;
