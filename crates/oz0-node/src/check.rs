//! `oz0-node sandbox check [--self-test] [--json]`.

use clap::Args;
use oz0_core::{Check, Line, SelfTest, Wall};
use oz0_linux::wall::UnknownFault;
use oz0_linux::{Fault, LinuxWall};

use crate::flags::HostArgs;
use oz0_core::exit::Exit;

/// `sandbox check` flags.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Also run the eight-property self-test.
    #[arg(long = "self-test")]
    pub self_test: bool,
    /// Windows' spelling of --self-test (PSEC); refused here.
    #[arg(long)]
    pub psec: bool,
    /// Print one JSON document instead of lines.
    #[arg(long)]
    pub json: bool,
    /// The node's data directory (its listing and key are checked too),
    /// jobs and bubblewrap, as the node's runs have them.
    #[command(flatten)]
    pub host: HostArgs,
    /// Weaken the self-test's own sandboxes at PROPERTY, to show that the
    /// check fails (the result is then never above tier 0).
    #[arg(long = "inject-fault", value_name = "PROPERTY", hide = true)]
    pub inject_fault: Option<String>,
}

/// Reads `--inject-fault`'s value.
pub fn parse_fault(s: Option<&str>) -> Result<Option<Fault>, UnknownFault> {
    s.map(str::parse::<Fault>).transpose()
}

/// The self-test, when the check found tier 1's mechanisms.
pub fn self_test(
    wall: &LinuxWall,
    check: &Check,
    mut on_line: impl FnMut(&Line),
) -> Option<SelfTest> {
    wall.self_test(check, &mut on_line)
}

/// Runs `sandbox check`.
pub fn main(a: CheckArgs) -> i32 {
    if a.psec {
        eprintln!("oz0-node: --psec is the Windows spelling (PSEC is Windows 11's process security environment); on Linux use --self-test");
        return Exit::Usage.code();
    }
    let fault = match parse_fault(a.inject_fault.as_deref()) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("oz0-node: {e}");
            return Exit::Usage.code();
        }
    };
    let data_dir = a.host.data.resolve().ok();
    let json = a.json;
    let wall = crate::platform::platform(crate::platform::Settings {
        fault,
        ..crate::platform::Settings::of(&a.host)
    })
    .into_wall();
    let check = wall.check();
    if !json {
        crate::out::line(&check.headline);
        crate::out::line(&check.facts_line);
        if let Some(f) = &check.fix {
            crate::out::line(f);
        }
    }
    let outcome = if a.self_test {
        self_test(&wall, &check, |l| {
            if !json {
                crate::out::line(&l.text());
            }
        })
    } else {
        None
    };
    let tier1 = match &outcome {
        Some(o) => o.tier() == 1,
        None => check.tier == 1,
    };
    let microvm = match std::env::var("OZ0_MICROVM").as_deref() {
        Ok("off") => None,
        _ => data_dir.clone().map(|d| {
            oz0_microvm::bootcheck::probe(&oz0_microvm::bootcheck::ProbeOptions::from_env(
                tier1,
                a.host.config(),
                d,
            ))
        }),
    };
    let tier = match &outcome {
        Some(o) => o.tier(),
        None if a.self_test => 0,
        None => check.tier,
    };
    if json {
        let doc = serde_json::json!({
            "schema": 1,
            "tier": tier,
            "proven": outcome.as_ref().is_some_and(|o| o.tier() == 1),
            "headline": check.headline,
            "facts_line": check.facts_line,
            "fix_kind": check.fix_kind,
            "fix": check.fix,
            "probe": check.probe,
            "self_test": outcome,
            "microvm": microvm.as_ref().map(|m| serde_json::json!({"facts": m.microvm, "detail": m.detail, "warning": m.warning})),
        });
        crate::out::line(&serde_json::to_string_pretty(&doc).expect("serialises"));
    } else if let Some(o) = &outcome {
        crate::out::line(&o.closing(&check.wall_name));
        if let Some(l) = o.lines.iter().find(|l| !l.ok) {
            crate::out::line(&format!(
                "Fix: the self-test failed at {}: {}",
                l.property.as_str(),
                l.detail
            ));
        }
    } else if a.self_test {
        crate::out::line(
            "Sandbox: tier 0: the self-test cannot run without tier 1's mechanisms (above)",
        );
    }
    if !json {
        match &microvm {
            Some(m) => {
                crate::out::line(&format!("MicroVMs: {}", m.detail));
                if let Some(w) = &m.warning {
                    crate::out::line(&format!("Warning: {w}"));
                }
            }
            None => crate::out::line("MicroVMs: off (OZ0_MICROVM=off)"),
        }
    }
    match (a.self_test, tier) {
        (_, 1) => Exit::Ok.code(),
        _ => Exit::CheckFailed.code(),
    }
}
