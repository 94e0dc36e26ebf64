//! `run` and `facts` on macOS: the node daemon.
//!
//! At start the node makes its data directory (0700) and key (0600),
//! probes this Mac, runs the self-test of Seatbelt (unless
//! `--sandbox none`), logging each check, writes `<data-dir>/facts.json`
//! with the tier the self-test proved (never one it did not), and with
//! `--edge` registers and reports the facts. It takes tier-0 shell jobs one
//! at a time (the one daemon of every platform, `crate::edge`, through
//! `oz0_macos::sandbox::Plain`) until Ctrl-C or SIGTERM: a Mac proves no tier 1 (see
//! `oz0_core::selftest`: macOS cannot limit a whole run's processes or
//! memory), so the edge routes it at tier 0. With Apple's container (and a
//! release key) it also takes microVM tool jobs (`crate::tool::mac`): those
//! VMs are not inside tier 1 on any Mac, so they are offered whatever tier
//! it proved.

use std::path::Path;
use std::sync::Arc;

use clap::{Args, ValueEnum};
use oz0_core::exit::Exit;
use oz0_core::facts::{assemble, SandboxMode};
use oz0_core::Wall;
use oz0_edge::client::NodeKey;
use oz0_policy::facts::NodeFacts;

use super::host;
use crate::daemon::{event_loop, fail, log};
use crate::edge::{PlatformLink, Walls};
use crate::flags::DaemonFlags;
use crate::platform::{platform, Platform, Settings};

/// `run` flags.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// auto: probe this Mac and self-test Seatbelt at start, reporting the
    /// tier it proves; none: no sandbox, no self-test (tier 0).
    #[arg(long, value_enum, default_value_t = Sandbox::Auto)]
    pub sandbox: Sandbox,
    #[command(flatten)]
    pub data: crate::flags::DataDirArg,
    #[command(flatten)]
    pub daemon: DaemonFlags,
    #[command(flatten)]
    pub tools: crate::flags::ToolEnvArg,
}

/// `--sandbox`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Sandbox {
    /// The strongest wall this Mac proves.
    Auto,
    /// No sandbox (tier 0).
    None,
}

/// What `--edge` needs (None without it), and the tier-0 sandbox jobs run
/// behind.
fn edge(a: &RunArgs, data_dir: &Path) -> Result<(Option<crate::edge::Settings>, Walls), String> {
    let temp = oz0_macos::sandbox::temp_root()?;
    let egress: Arc<dyn oz0_egress::EgressService> =
        Arc::new(host::egress(data_dir.join(oz0_egress::AUDIT_LOG_NAME)));
    let walls = platform(Settings {
        data_dir: Some(data_dir.to_path_buf()),
        egress: egress.clone(),
    });
    let overlap = |a: &Path, b: &Path| a.starts_with(b) || b.starts_with(a);
    let settings = crate::edge::Settings::from_daemon(
        &a.daemon,
        data_dir,
        PlatformLink {
            read_token: &|p: &Path| Ok(crate::private::read_token(p)?),
            name: rustix::system::uname()
                .nodename()
                .to_str()
                .ok()
                .map(|h| h.split('.').next().unwrap_or(h).to_ascii_lowercase()),
            temp,
            overlap: &overlap,
            platform: Platform::NAME,
        },
    )
    .map_err(|e| e.to_string())?
    .map(|s| s.with_tool_env(&a.tools.tool_env));
    Ok((
        settings,
        Walls {
            sandbox: walls.tier0()?,
            egress,
        },
    ))
}

/// Probes, self-tests unless told not to, and assembles the facts, logging
/// each step.
fn assess(sandbox: Sandbox, data_dir: &Path) -> NodeFacts {
    let walls = platform(Settings {
        data_dir: Some(data_dir.to_path_buf()),
        egress: Arc::new(host::egress(data_dir.join(oz0_egress::AUDIT_LOG_NAME))),
    });
    let wall = walls.wall();
    let check = wall.check();
    log(&check.headline);
    log(&check.facts_line);
    if let Some(f) = &check.fix {
        log(f);
    }
    let (mode, outcome) = match sandbox {
        Sandbox::None => (SandboxMode::None, None),
        Sandbox::Auto => (
            SandboxMode::Auto,
            wall.self_test(&check, &mut |l| log(&l.text())),
        ),
    };
    if let Some(t) = &outcome {
        log(&t.closing(&check.wall_name));
    }
    let microvm = wall.microvm();
    let facts = assemble(
        &check,
        outcome.as_ref(),
        mode,
        microvm,
        oz0_policy::facts::Oci::unavailable(oz0_policy::facts::OciReason::Unsupported),
        env!("CARGO_PKG_VERSION"),
    );
    log(&super::microvm_line(&facts.microvm));
    facts
}

/// The Linux node binary Apple's container VMs' bridge runs: other
/// versions' copies under `<data dir>/microvm/guest/` go at start; with
/// microVMs and an edge, the daemon fetches this version's, signed by the
/// release key this build was built with (`OZ0_RELEASE_KEY`), once
/// registered. A build without a key has no microVMs.
fn with_guest(
    edge: Option<crate::edge::Settings>,
    facts: &mut NodeFacts,
    data_dir: &Path,
) -> Option<crate::edge::Settings> {
    let dir = data_dir.join("microvm").join("guest");
    match oz0_edge::release::prune(&dir, env!("CARGO_PKG_VERSION")) {
        Ok(gone) if !gone.is_empty() => log(&format!(
            "removed {} older guest binary folder(s) under {}",
            gone.len(),
            dir.display()
        )),
        Ok(_) => {}
        Err(e) => log(&format!("cannot remove older guest binaries: {e}")),
    }
    if !facts.microvm.ready {
        return edge;
    }
    let key = option_env!("OZ0_RELEASE_KEY").map(oz0_edge::release::parse_public_key);
    match (edge, key) {
        (Some(s), Some(Ok(key))) => Some(s.with_guest(crate::edge::GuestFetch {
            dir,
            key,
            // Apple silicon: the guests are Linux on arm64.
            target: ("linux", "aarch64"),
        })),
        (edge, key) => {
            if !matches!(key, Some(Ok(_))) {
                facts.microvm.ready = false;
                facts.microvm.reason = Some(oz0_policy::facts::MicrovmReason::NoReleaseKey);
                log(&format!(
                    "MicroVMs: none: {}",
                    oz0_policy::facts::MicrovmReason::NoReleaseKey.words()
                ));
            }
            edge
        }
    }
}

/// Runs the node daemon.
pub fn run(a: RunArgs) -> i32 {
    let data_dir = match a.data.resolve() {
        Ok(d) => d,
        Err(e) => return fail(e, Exit::Usage),
    };
    let (edge, walls) = match edge(&a, &data_dir) {
        Ok(e) => e,
        Err(e) => return fail(e, Exit::Usage),
    };
    if let Err(e) = crate::private::prepare_data_dir(&data_dir) {
        return fail(e, Exit::CheckFailed);
    }
    let key = match NodeKey::load_or_create(&data_dir.join("identity").join("node.key")) {
        Ok(k) => k,
        Err(e) => return fail(e, Exit::CheckFailed),
    };
    // Runs of an earlier node process that was killed: end what they left.
    host::sweep(&data_dir);
    let mut facts = assess(a.sandbox, &data_dir);
    let edge = with_guest(edge, &mut facts, &data_dir);
    match crate::facts_file::write(&data_dir, &facts) {
        Ok(p) => log(&format!(
            "facts written to {}: tier proven {}, routed {}",
            p.display(),
            facts.tier_proven,
            facts.tier_routed
        )),
        Err(e) => return fail(e, Exit::CheckFailed),
    }
    event_loop(edge, walls, key, facts, a.daemon.once)
}
