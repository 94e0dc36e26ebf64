//! `sandbox check` on Windows: the wall is `oz0_windows::wall::WindowsWall`
//! (the PSEC probe as `oz0_core::Wall`); this module prints its lines, the
//! self-test's and the egress route's with `--psec` where the probes found
//! PSEC, and the JSON document.

use crate::platform::{platform, Settings};
use clap::Args;
use oz0_core::exit::Exit;
use oz0_core::{SelfTest, Wall};

/// `sandbox check` flags.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Also run the node's self-test of PSEC (what `run --sandbox psec`
    /// runs at start), in order, stopping at the first check that fails.
    #[arg(long)]
    pub psec: bool,
    /// Linux's spelling of --psec; on Windows the self-test is --psec.
    #[arg(long = "self-test", hide = true)]
    pub self_test: bool,
    /// Print one JSON document instead of lines.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub data: super::DataDirArg,
}

/// Runs `sandbox check`.
pub fn main(a: CheckArgs) -> i32 {
    if a.self_test {
        eprintln!("oz0-node: --self-test is the Linux and macOS spelling; on Windows the self-test of PSEC is `sandbox check --psec`");
        return Exit::Usage.code();
    }
    // The node's data directory, when it has one: the self-test shows no
    // run reaches it.
    let walls = platform(Settings {
        data_dir: a.data.resolve().ok().filter(|d| d.exists()),
        psec: a.psec,
    });
    let wall = walls.wall();
    let check = wall.check();
    let json = a.json;
    if !json {
        println!("{}", check.headline);
        println!("{}", check.facts_line);
        if let Some(f) = &check.fix {
            println!("{f}");
        }
    }
    let outcome = if a.psec {
        wall.self_test(&check, &mut |l| {
            if !json {
                println!("{}", l.text());
            }
        })
    } else {
        None
    };
    let report = wall.report(outcome.as_ref());
    let tier = outcome.as_ref().map_or(0, SelfTest::tier);
    // Where the probes found PSEC: how its runs would reach the proxy.
    let route = if a.psec { wall.route() } else { None };
    let named = std::env::var_os(oz0_windows::route::ROUTE_ENV).is_some();
    if json {
        let doc = serde_json::json!({
            "schema": 1,
            "tier": tier,
            "tier_routed": 0,
            "proven": tier == 1,
            "headline": report.as_ref().map_or(&check.headline, |r| &r.tier_line),
            "facts_line": check.facts_line,
            "fix_kind": report.as_ref().map(|r| &r.fix),
            "fix": report.as_ref().map_or(check.fix.as_ref(), |r| Some(&r.fix_line)),
            "probe": check.probe,
            "self_test": outcome,
            "egress_route": route.as_ref().map(|r| match r {
                Ok(r) => serde_json::json!({ "route": r, "named": named, "relay": relay_lines(*r) }),
                Err(e) => serde_json::json!({ "error": e.to_string() }),
            }),
            "microvm": { "ready": false, "reason": "unsupported", "detail": oz0_policy::facts::WINDOWS_NO_MICROVMS },
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("serialises")
        );
    } else if let (Some(_), Some(r)) = (&outcome, &report) {
        // The closing lines: the report as the self-test left it.
        println!("{}", r.tier_line);
        println!("{}", r.fix_line);
    } else if a.psec {
        println!(
            "Sandbox: tier 0: the self-test of PSEC cannot run: the probes found no PSEC (above)"
        );
    }
    if !json {
        if let Some(r) = &route {
            println!("{}", oz0_windows::wall::route_line(r, named));
            if let Ok(r) = r {
                for l in relay_lines(*r) {
                    println!("{l}");
                }
            }
        }
        println!("MicroVMs: none: {}", oz0_policy::facts::WINDOWS_NO_MICROVMS);
    }
    if tier == 1 {
        Exit::Ok.code()
    } else {
        Exit::CheckFailed.code()
    }
}

/// On the relay route, what `oz0_windows::wall::relay_lines` says of it
/// (the firewall's check and the scoped rule); nothing on the bridge route.
fn relay_lines(route: oz0_windows::route::Route) -> Vec<String> {
    match (route, std::env::current_exe()) {
        (oz0_windows::route::Route::Relay, Ok(me)) => oz0_windows::wall::relay_lines(&me),
        (oz0_windows::route::Route::Relay, Err(e)) => {
            vec![format!("Firewall rule: cannot name the node binary: {e}")]
        }
        (oz0_windows::route::Route::Bridge, _) => Vec::new(),
    }
}
