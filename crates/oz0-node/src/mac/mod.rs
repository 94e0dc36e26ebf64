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
//! This module holds these commands' handlers (their flags are in the one
//! command tree, `cli.rs`) around `oz0_macos`, which owns the walls; the native part is type-checked for macOS in CI; it has not run
//! on a Mac.

use std::sync::Arc;

use clap::Args;
use oz0_core::exit::Exit;
use oz0_core::facts::{assemble, SandboxMode};
use oz0_core::Wall;
use oz0_macos::wall::WALL_NAME;
use oz0_policy::facts::Microvm;

mod host;
pub mod node;
pub mod run;
pub mod vm;

/// `sandbox check` flags.
#[derive(Debug, Args)]
pub struct CheckArgs {
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

/// `MicroVMs: …`, as the node logs it.
pub fn microvm_line(m: &Microvm) -> String {
    match (m.ready, m.reason) {
        (true, _) => "MicroVMs: Apple's container (each tool server in a VM of its own; not inside tier 1: the guest's kernel is the boundary)".into(),
        (false, Some(r)) => format!("MicroVMs: none: {}", r.words()),
        (false, None) => "MicroVMs: none".into(),
    }
}

/// `sandbox check`.
pub fn check(a: &CheckArgs) -> i32 {
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
