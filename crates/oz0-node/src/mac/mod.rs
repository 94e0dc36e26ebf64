//! `oz0-node` on macOS.
//!
//! - `sandbox check [--self-test]`: the probes ([`probe`]) ask the Mac:
//!   `sandbox-exec` running a profile of the node's that must refuse one
//!   read, the processor, the macOS version, Apple's `container` and
//!   whether its services answer. Their lines, tier and fix are
//!   `oz0_macos::check::report`, pure code tested on Linux. `--self-test`
//!   runs the eight-property self-test through Seatbelt
//!   (`oz0_macos::wall`).
//! - `sandbox run`: one command in Seatbelt ([`run`],
//!   `oz0_macos::sandbox`).
//! - `sandbox vm`: one tool server in a microVM of Apple's `container`
//!   ([`vm`], `oz0_macos::vm`).
//! - `sandbox probe`: what a process can see and do (the self-test's witness).
//! - `run`, `facts`: the daemon ([`node`]): facts, and tier-0 shell jobs
//!   from an edge through `oz0_macos::sandbox::Plain`.
//!
//! This module is the command line around `oz0_macos`, which owns the
//! walls; the native part is type-checked for macOS in CI; it has not run
//! on a Mac.

use std::ffi::OsString;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use oz0_core::exit::Exit;
use oz0_core::facts::{assemble, SandboxMode};
use oz0_core::Wall;
use oz0_macos::wall::WALL_NAME;
use oz0_policy::facts::Microvm;

mod host;
mod node;
mod run;
mod vm;

/// OZ0 node for macOS: probes this Mac's sandbox (Seatbelt) and microVMs
/// (Apple's container), proves what holds with its self-test, runs
/// commands in Seatbelt, and takes tier-0 work from an edge.
///
/// A tier is reported only when the self-test showed it on this Mac. macOS
/// cannot limit the memory or the processes of a whole run, so the
/// self-test fails at job_limits and a Mac is routed at tier 0; `sandbox
/// check --self-test` shows which properties hold.
#[derive(Debug, Parser)]
#[command(name = "oz0-node", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Top,
}

#[derive(Debug, Subcommand)]
// Parsed once per process; boxing the larger variant would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Top {
    /// Check this Mac's sandbox, run commands and tool servers in it.
    #[command(subcommand)]
    Sandbox(SandboxCmd),
    /// The node daemon: probe, self-test, publish the facts, take work.
    ///
    /// Creates its data directory (0700) and node key (0600) on first
    /// start, probes this Mac, runs the self-test of Seatbelt, writes
    /// <data-dir>/facts.json with the tier it proved, and with --edge
    /// registers with the edge, reports the facts and takes tier-0 shell
    /// jobs, one at a time, with no wall (a job that asks for egress or
    /// limits is refused); every process a job starts ends with it.
    /// Ctrl-C or SIGTERM stops it.
    Run(node::RunArgs),
    /// Print this node's facts (from <data-dir>/facts.json, written by `run`).
    Facts(crate::daemon::FactsArgs),
}

#[derive(Debug, Subcommand)]
// Parsed once per process; boxing the larger variant would buy nothing.
#[allow(clippy::large_enum_variant)]
enum SandboxCmd {
    /// Probe this Mac: which tier it can have, the facts, and the fix.
    ///
    /// Runs a probe profile through /usr/bin/sandbox-exec that must refuse
    /// the read of a file the node made (while the same read without it
    /// works), reads the processor (hw.optional.arm64), the macOS version
    /// (sw_vers), and Apple's container (`container --version`, `container
    /// system status`). Never decides by version whether Seatbelt holds.
    /// Changes nothing, needs no administrator. With --self-test, proves
    /// tier 1 by running the eight-property self-test through Seatbelt
    /// (exit 0 only when all eight hold).
    Check(CheckArgs),
    /// Run one command through sandbox-exec with the node's Seatbelt profile.
    ///
    /// The command sees the system read-only, its work folder, the --write
    /// folders and a TEMP of its own (also HOME) writable, the --read paths
    /// and the node binary readable, never the node's data directory; .git's
    /// hooks and config and agents' settings are read-only and .git and the
    /// writable folders cannot be renamed aside. Its network is only the
    /// node's egress proxy on a loopback port (with --allow or --forward),
    /// which wants the run's token; each decision is a line of
    /// <data-dir>/egress-audit.jsonl. It gets only the variables named.
    /// When its first process ends, or --timeout passes, or this command is
    /// stopped, every process of the run ends, even one that left for a
    /// session of its own (each run's profile marks its processes).
    /// --memory, --processes and --cpu-seconds are refused (macOS cannot
    /// limit a whole run).
    ///
    /// Exit status: the command's own; 128+N if it died of signal N; 124 on
    /// --timeout; 125 if the sandbox refused the run (the command never ran).
    Run(run::RunArgs),
    /// Run one tool server in a microVM of Apple's container (tier 2).
    ///
    /// container run --rm --network none --read-only --cap-drop ALL, as this
    /// user's uid:gid, whole CPUs, the tool's memory, --ulimit nproc, the
    /// work folder at /work; the server's stdin and stdout are this
    /// command's (MCP over stdio). Its variables reach it only through an
    /// env file only this user can read, removed when the tool stops; the
    /// CLI starts with a clean environment. Needs macOS 26 on Apple
    /// silicon and container 1.5.0 or later.
    Vm(vm::VmArgs),
    /// Report what this process can see and do (for use inside a sandbox).
    ///
    /// Prints one JSON object: the result of each --read, --write, --list,
    /// --connect, --proxy-get and --listen you name.
    Probe(crate::witness::ProbeArgs),
}

/// `sandbox check` flags.
#[derive(Debug, Args)]
struct CheckArgs {
    /// Also run the eight-property self-test through Seatbelt, in order,
    /// stopping at the first check that fails.
    #[arg(long = "self-test")]
    self_test: bool,
    /// Print one JSON document instead of lines.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    data: host::DataDirArg,
}

/// Parses the command line `args` (the program name first) and runs it;
/// returns the exit status.
pub fn main(args: Vec<OsString>) -> i32 {
    let cli: Cli = match crate::flags::parse(args) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match cli.cmd {
        Top::Sandbox(SandboxCmd::Check(a)) => check(&a),
        Top::Sandbox(SandboxCmd::Run(a)) => run::main(a),
        Top::Sandbox(SandboxCmd::Vm(a)) => vm::main(a),
        Top::Sandbox(SandboxCmd::Probe(a)) => crate::witness::main(a),
        Top::Run(a) => node::run(a),
        Top::Facts(a) => crate::daemon::facts(a),
    }
}

/// `MicroVMs: …`, as the node logs it.
pub fn microvm_line(m: &Microvm) -> String {
    match (m.ready, m.reason) {
        (true, _) => "MicroVMs: Apple's container (each tool server in a VM of its own; not inside tier 1: the guest's kernel is the boundary)".into(),
        (false, Some(r)) => format!("MicroVMs: none: {}", r.words()),
        (false, None) => "MicroVMs: none".into(),
    }
}

fn check(a: &CheckArgs) -> i32 {
    let data_dir = a.data.resolve().ok().filter(|d| d.exists());
    // The self-test's egress check goes through a proxy of its own whose
    // decisions are no one's: nothing is written anywhere.
    let quiet = oz0_egress::LazyProxy::new(Box::new(|| {
        Ok(oz0_egress::ProxyConfig {
            audit: Arc::new(|_: &oz0_egress::AuditRecord| {}),
            ..Default::default()
        })
    }));
    let walls = crate::platform::platform(crate::platform::Settings {
        data_dir,
        egress: Arc::new(quiet),
    });
    let wall = walls.wall();
    let r = oz0_macos::check::report(&wall.probe);
    let c = wall.check();
    if !a.json {
        println!("{}", c.headline);
        println!("{}", c.facts_line);
        if let Some(f) = &c.fix {
            println!("{f}");
        }
    }
    let outcome = if a.self_test {
        let mut print = |l: &oz0_core::Line| {
            if !a.json {
                println!("{}", l.text());
            }
        };
        let t = wall.self_test(&c, &mut print);
        if !a.json {
            match &t {
                Some(t) => println!("{}", t.closing(WALL_NAME)),
                None => {
                    println!("Sandbox: tier 0: the self-test cannot run without Seatbelt (above)")
                }
            }
        }
        t
    } else {
        None
    };
    let facts = assemble(
        &c,
        outcome.as_ref(),
        SandboxMode::Auto,
        wall.microvm(),
        oz0_policy::facts::Oci::unavailable(oz0_policy::facts::OciReason::Unsupported),
        env!("CARGO_PKG_VERSION"),
    );
    if a.json {
        let doc = serde_json::json!({
            "schema": 1,
            "tier": facts.tier_proven,
            "probed_tier": c.tier,
            "proven": outcome.as_ref().is_some_and(|t| t.tier() == 1),
            "headline": c.headline,
            "facts_line": c.facts_line,
            "fix_kind": c.fix_kind,
            "fix": c.fix,
            "probe": wall.probe,
            "self_test": outcome,
            "microvm": { "reason": r.microvm, "detail": r.microvm_line },
            "facts": facts,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("serialises")
        );
    } else {
        println!("{}", r.microvm_line);
    }
    // Exit 0 only for a proven tier 1.
    if facts.tier_proven >= 1 {
        Exit::Ok.code()
    } else {
        Exit::CheckFailed.code()
    }
}
