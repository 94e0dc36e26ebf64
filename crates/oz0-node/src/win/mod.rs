//! `oz0-node.exe`: the node on Windows.
//!
//! A Windows node runs at sandbox tier 0: the edge routes it at tier 0
//! whatever it proves, so no work that needs tier 1 is sent to it. What it
//! does here:
//!
//! - `sandbox check`: asks Windows what it has, as Microsoft's MXC does
//!   (the API set, `processmodel.dll`'s exports, the PSEC contract and its
//!   features; never the build number), and prints the three lines of
//!   `oz0_windows::check::report`.
//! - `sandbox check --psec`: the same, then the eight-property self-test in
//!   PSEC containers where PSEC is here (see [`wall`] for what this build
//!   can run of it).
//! - `sandbox run`: the PSEC preview, refused without
//!   `OZ0_SANDBOX_PSEC_PREVIEW=1` as on any node without tier 1.
//! - `sandbox proxy`: one run's egress proxy on a loopback port.
//! - `sandbox relay [--remove-profile]`: the relay route's forwarder, and
//!   the removal of its AppContainer profile.
//! - `run`: the node daemon: probe, facts, and with `--edge` registration,
//!   reports and tier-0 shell jobs through `oz0_windows::tier0::JobObject`.
//! - `facts`: what the last `run` wrote.
//! - `plugin call --no-wall`: one call of a plugin's command tool, its
//!   server at tier 0 in a job object ([`plugin`], `crate::tool::windows`).
//!
//! The portable decisions (the probe's facts → lines, tier and fix; the
//! route variable; the relay's ports) are `oz0-windows`' and tested on
//! Linux; this module holds these commands' handlers (their flags are in
//! the one command tree, `cli.rs`), run under Wine in CI
//! (`crates/oz0-node/tests/windows.rs`).

pub mod node;
pub mod plugin;
pub mod proxy;
mod psec_run;
pub mod relay;
pub mod sandbox;
mod status;
pub mod wall;

/// The variable that turns on `sandbox run`'s PSEC preview.
pub const PREVIEW_ENV: &str = "OZ0_SANDBOX_PSEC_PREVIEW";

pub use crate::daemon::log;
pub use crate::flags::DataDirArg;
