//! `oz0-node sandbox check [--self-test] [--json]`.

use std::path::PathBuf;

use clap::Args;
use oz0_policy::facts::Property;
use oz0_selftest::check;
use oz0_selftest::selftest::{self, Config, Layer, Line, Outcome};

use crate::exit::Exit;

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
    /// The node's data directory (its listing and key are checked too)
    /// [default: $XDG_DATA_HOME/oz0-node or ~/.local/share/oz0-node].
    #[arg(long = "data-dir", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Where run jobs (cgroups) are made [default: probed].
    #[arg(long = "cgroup-root", value_name = "DIR")]
    pub cgroup_root: Option<PathBuf>,
    /// The bubblewrap binary [default: bwrap on PATH, then /usr/bin/bwrap].
    #[arg(long, value_name = "PATH")]
    pub bwrap: Option<PathBuf>,
    /// Weaken the self-test's own sandboxes at PROPERTY, to show that the
    /// check fails (the result is then never above tier 0).
    #[arg(long = "inject-fault", value_name = "PROPERTY", hide = true)]
    pub inject_fault: Option<String>,
}

/// A self-test line: `Self-test PROPERTY: ok (MSms); detail` or `failed`.
pub fn line_text(l: &Line) -> String {
    if l.ok {
        format!(
            "Self-test {}: ok ({}ms); {}",
            l.property.as_str(),
            l.ms,
            l.detail
        )
    } else {
        format!(
            "Self-test {}: failed ({}ms): {}",
            l.property.as_str(),
            l.ms,
            l.detail
        )
    }
}

/// The closing line of a self-test.
pub fn closing(o: &Outcome, bwrap: &str) -> String {
    match (o.failed, o.fault_injected) {
        (_, true) => format!(
            "Sandbox: tier 0: a fault was injected into the self-test{}",
            o.failed.map(|p| format!("; it failed at {}", p.as_str())).unwrap_or_default()
        ),
        (None, false) => format!(
            "Sandbox: tier 1: {bwrap} passed the node's self-test ({} checks, {}ms)",
            o.lines.len(),
            o.total_ms
        ),
        (Some(p), false) => format!(
            "Sandbox: tier 0: the self-test failed at {}: `oz0-node sandbox check --self-test` on this node says how",
            p.as_str()
        ),
    }
}

/// What `--inject-fault` names: one property's runs to weaken, or one
/// layer of the sandbox to take away from every run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Weaken this property's runs.
    Property(Property),
    /// Take this layer away.
    Layer(Layer),
}

/// Reads `--inject-fault`'s value.
pub fn parse_fault(s: &str) -> Result<Fault, String> {
    Property::parse(s)
        .map(Fault::Property)
        .or_else(|| Layer::parse(s).map(Fault::Layer))
        .ok_or_else(|| {
            "--inject-fault takes one of: launch, files, egress, ingress, job_limits, fail_closed, protected_paths, environment, or a layer: mounts, landlock, seccomp".into()
        })
}

/// Runs the self-test when the probe found tier 1's mechanisms.
pub fn self_test(
    probe: &check::Probe,
    report: &check::Report,
    data_dir: Option<PathBuf>,
    fault: Option<Fault>,
    on_line: impl FnMut(&Line),
) -> Option<Outcome> {
    let b = probe.bwrap.as_ref().ok().filter(|_| report.tier == 1)?;
    let (job_mode, job_unavailable) = match &probe.job_mode {
        oz0_jobs::JobMode::Unavailable { reason, fix } => (None, Some(format!("{reason} — {fix}"))),
        m => (Some(m.clone()), None),
    };
    let cfg = Config {
        bwrap: b.path.clone(),
        node_exe: std::env::current_exe().unwrap_or_default(),
        data_dir,
        job_mode,
        job_unavailable,
        fault: match fault {
            Some(Fault::Property(p)) => Some(p),
            _ => None,
        },
        layer_fault: match fault {
            Some(Fault::Layer(l)) => Some(l),
            _ => None,
        },
    };
    Some(selftest::run(&cfg, on_line))
}

/// Runs `sandbox check`.
pub fn main(a: CheckArgs) -> i32 {
    if a.psec {
        eprintln!("oz0-node: --psec is the Windows spelling (PSEC is Windows 11's process security environment); on Linux use --self-test");
        return Exit::Usage.code();
    }
    let fault = match a.inject_fault.as_deref().map(parse_fault) {
        None => None,
        Some(Ok(f)) => Some(f),
        Some(Err(e)) => {
            eprintln!("oz0-node: {e}");
            return Exit::Usage.code();
        }
    };
    let data_dir = crate::run::data_dir(a.data_dir.as_deref()).ok();
    let json = a.json;
    let probe = check::probe(a.bwrap.as_deref(), a.cgroup_root.clone());
    let report = check::report(&probe);
    if !json {
        println!("{}", report.headline);
        println!("{}", report.facts_line);
        if let Some(f) = &report.fix {
            println!("{f}");
        }
    }
    let outcome = if a.self_test {
        self_test(&probe, &report, data_dir.clone(), fault, |l| {
            if !json {
                println!("{}", line_text(l));
            }
        })
    } else {
        None
    };
    let bw = probe
        .bwrap
        .as_ref()
        .map(|b| b.version.clone())
        .unwrap_or_else(|_| "bubblewrap".into());
    let tier1 = match &outcome {
        Some(o) => o.tier() == 1,
        None => report.tier == 1,
    };
    let microvm = match std::env::var("OZ0_MICROVM").as_deref() {
        Ok("off") => None,
        _ => data_dir.clone().map(|d| {
            oz0_microvm::probe::probe(&oz0_microvm::probe::ProbeOptions::from_env(
                tier1,
                probe.bwrap.as_ref().ok().map(|b| b.path.clone()),
                std::env::current_exe().unwrap_or_default(),
                d,
            ))
        }),
    };
    let tier = match &outcome {
        Some(o) => o.tier(),
        None if a.self_test => 0,
        None => report.tier,
    };
    if json {
        let doc = serde_json::json!({
            "schema": 1,
            "tier": tier,
            "proven": outcome.as_ref().is_some_and(|o| o.tier() == 1),
            "headline": report.headline,
            "facts_line": report.facts_line,
            "fix_kind": report.fix_kind,
            "fix": report.fix,
            "probe": check::probe_json(&probe),
            "self_test": outcome,
            "microvm": microvm.as_ref().map(|m| serde_json::json!({"facts": m.microvm, "detail": m.detail, "warning": m.warning})),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("serialises")
        );
    } else if let Some(o) = &outcome {
        println!("{}", closing(o, &bw));
        if let Some(l) = o.lines.iter().find(|l| !l.ok) {
            println!(
                "Fix: the self-test failed at {}: {}",
                l.property.as_str(),
                l.detail
            );
        }
    } else if a.self_test {
        println!("Sandbox: tier 0: the self-test cannot run without tier 1's mechanisms (above)");
    }
    if !json {
        match &microvm {
            Some(m) => {
                println!("MicroVMs: {}", m.detail);
                if let Some(w) = &m.warning {
                    println!("Warning: {w}");
                }
            }
            None => println!("MicroVMs: off (OZ0_MICROVM=off)"),
        }
    }
    match (a.self_test, tier) {
        (_, 1) => Exit::Ok.code(),
        _ => Exit::CheckFailed.code(),
    }
}
