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
//!
//! The portable decisions (the probe's facts → lines, tier and fix; the
//! route variable; the relay's ports) are `oz0-windows`' and tested on
//! Linux; this module is the command line around them, run under Wine in
//! CI (`crates/oz0-node/tests/windows.rs`).

use std::ffi::OsString;

use clap::{Parser, Subcommand};

mod node;
mod proxy;
mod psec_run;
mod relay;
mod sandbox;
mod wall;

/// The variable that turns on `sandbox run`'s PSEC preview.
pub const PREVIEW_ENV: &str = "OZ0_SANDBOX_PSEC_PREVIEW";

/// OZ0 node for Windows: probes Windows' process security environment
/// (PSEC), reports what it found, and registers with an edge.
///
/// Windows nodes are routed at sandbox tier 0: work that needs tier 1
/// (every job an outside event starts) goes to Linux or macOS nodes.
/// `sandbox check` shows what this machine has; `run --sandbox psec` tests
/// PSEC on this node at start. No command needs an administrator.
#[derive(Debug, Parser)]
#[command(name = "oz0-node", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Top,
}

#[derive(Debug, Subcommand)]
enum Top {
    /// Check this machine's sandbox, and the PSEC preview.
    #[command(subcommand)]
    Sandbox(SandboxCmd),
    /// The node daemon: probe, publish the facts, stay up.
    ///
    /// Creates its data directory and node key on first start, probes
    /// PSEC, writes <data-dir>\facts.json, and with --edge registers with
    /// the edge, reports the facts and takes tier-0 shell jobs, one at a
    /// time, with no wall (a job that asks for egress or limits is
    /// refused). The edge routes a Windows node at tier 0. Ctrl-C stops it.
    Run(node::RunArgs),
    /// Print this node's facts (from <data-dir>\facts.json, written by `run`).
    Facts(crate::daemon::FactsArgs),
}

#[derive(Debug, Subcommand)]
enum SandboxCmd {
    /// Probe this machine: the tier it can have, the facts, and the fix.
    ///
    /// Asks Windows whether the API set
    /// api-win-appmodel-processmodel~securityenvironment is implemented,
    /// whether processmodel.dll (from System32 only) has its exports, which
    /// PSEC contract it supports and which features it reports, and creates
    /// and closes a minimal environment. Never decides by build number,
    /// changes nothing, needs no administrator. With --psec, runs the
    /// node's self-test of PSEC (exit 0 only when all eight checks hold).
    Check(wall::CheckArgs),
    /// Run one command in a PSEC container (a preview: set
    /// OZ0_SANDBOX_PSEC_PREVIEW=1; without it this is refused, as on any
    /// node without tier 1).
    ///
    /// Exit status: the command's own; 124 on --timeout; 125 if the
    /// sandbox refused or could not start the run (the command never ran;
    /// the reason is on stderr).
    Run(sandbox::RunArgs),
    /// Serve one run's egress proxy on a loopback port, until Ctrl-C.
    ///
    /// What a PSEC run reaches through its bridge or relay: every request
    /// needs the run's token (407 without it), a host --allow does not name
    /// gets 403, names under .invalid are refused before any lookup, and
    /// each decision is one JSON line in the audit log. Prints the address
    /// it listens on. Use it to check a machine's proxy and firewall.
    Proxy(proxy::ProxyArgs),
    /// The egress relay of one PSEC run, or --remove-profile.
    ///
    /// Listens on the first free port of 127.0.0.1:47330-47361 (at most 32
    /// relays on a machine) and carries each connection to the run's egress
    /// proxy (--to), which still wants the run's token. The node would start
    /// it in the AppContainer profile oz0.egress-relay; this build starts
    /// no PSEC run, so it runs only by hand. --remove-profile removes that
    /// profile of this user, as an uninstall does.
    Relay(relay::RelayArgs),
}

/// Parses the command line `args` (the program name first) and runs it;
/// returns the exit status.
pub fn main(args: Vec<OsString>) -> i32 {
    let cli: Cli = match crate::flags::parse(args) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match cli.cmd {
        Top::Sandbox(SandboxCmd::Check(a)) => wall::main(a),
        Top::Sandbox(SandboxCmd::Run(a)) => sandbox::main(a),
        Top::Sandbox(SandboxCmd::Proxy(a)) => proxy::main(a),
        Top::Sandbox(SandboxCmd::Relay(a)) => relay::main(a),
        Top::Run(a) => node::run(a),
        Top::Facts(a) => crate::daemon::facts(a),
    }
}

pub use crate::daemon::log;
pub use crate::daemon::DataDirArg;
