//! `oz0-node` on macOS: `sandbox check` and `sandbox run` ([`run`]).
//!
//! The probes ([`probe`]) ask the Mac: `sandbox-exec` running a profile of
//! the node's that must refuse one read, the processor, the macOS version,
//! Apple's `container` and whether its services answer. Their lines, tier
//! and fix are `oz0_macos::check::report`, pure code tested on Linux. This
//! build has no Seatbelt self-test and runs no work on macOS yet, so it
//! never reports a proven tier here: `--self-test` says so and exits 1.
//! The native part is type-checked for macOS in CI; it has not run on a Mac.

use std::ffi::OsString;

use clap::{Args, Parser, Subcommand};
use oz0_core::exit::Exit;

mod probe;
mod run;

/// OZ0 node for macOS: probes this Mac's sandbox (Seatbelt) and microVMs
/// (Apple's container) and says what is missing and how to fix it.
///
/// This build checks a Mac and runs single commands in Seatbelt
/// (`sandbox run`); it proves no tier on macOS yet.
#[derive(Debug, Parser)]
#[command(name = "oz0-node", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Top,
}

#[derive(Debug, Subcommand)]
enum Top {
    /// Check this Mac's sandbox.
    #[command(subcommand)]
    Sandbox(SandboxCmd),
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
    /// Changes nothing, needs no administrator.
    Check(CheckArgs),
    /// Run one command through sandbox-exec with the node's Seatbelt profile.
    ///
    /// The command sees the system read-only, its work folder, the --write
    /// folders and a TEMP of its own (also HOME) writable, the --read paths
    /// and the node binary readable, never the node's data directory; .git's
    /// hooks and config and agents' settings are read-only and .git and the
    /// writable folders cannot be renamed aside. Its network is only the
    /// node's egress proxy on a loopback port (with --allow or --forward).
    /// It gets only the variables named. When its first process ends, or
    /// --timeout passes, its whole process group is killed. --memory,
    /// --processes and --cpu-seconds are refused (Seatbelt has no limits for
    /// a whole run). Each run first checks that Seatbelt refuses a probe
    /// profile's read; this build has no self-test of the profile on macOS,
    /// so the run's confinement is not proven, and the command says so.
    ///
    /// Exit status: the command's own; 128+N if it died of signal N; 124 on
    /// --timeout; 125 if the sandbox refused the run (the command never ran).
    Run(run::RunArgs),
}

/// `sandbox check` flags.
#[derive(Debug, Args)]
struct CheckArgs {
    /// Also run the eight-property self-test (not in this build on macOS).
    #[arg(long = "self-test")]
    self_test: bool,
    /// Print one JSON document instead of lines.
    #[arg(long)]
    json: bool,
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
    }
}

const NO_SELF_TEST: &str = "Sandbox: tier 0: the self-test of Seatbelt is not in this build of oz0-node, so no tier is proven on macOS";

fn check(a: &CheckArgs) -> i32 {
    let p = probe::probe();
    let r = oz0_macos::check::report(&p);
    if a.json {
        let doc = serde_json::json!({
            "schema": 1,
            "tier": r.tier,
            "proven": false,
            "headline": r.tier_line,
            "facts_line": r.facts_line,
            "fix_kind": r.fix_kind,
            "fix": r.fix_line,
            "probe": p,
            "self_test": a.self_test.then_some(NO_SELF_TEST),
            "microvm": { "reason": r.microvm, "detail": r.microvm_line },
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("serialises")
        );
    } else {
        println!("{}", r.tier_line);
        println!("{}", r.facts_line);
        if let Some(f) = &r.fix_line {
            println!("{f}");
        }
        if a.self_test {
            println!("{NO_SELF_TEST}");
        }
        println!("{}", r.microvm_line);
    }
    // Exit 0 only for a proven tier 1, which this build cannot show here.
    Exit::CheckFailed.code()
}
