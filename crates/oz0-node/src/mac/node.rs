//! `run` and `facts` on macOS: the node daemon.
//!
//! At start the node makes its data directory (0700) and key (0600),
//! probes this Mac, runs the self-test of Seatbelt (unless
//! `--sandbox none`), logging each check, writes `<data-dir>/facts.json`
//! with the tier the self-test proved (never one it did not), and with
//! `--edge` registers and reports the facts. It takes tier-0 shell jobs one
//! at a time (the shared loop of `crate::daemon`, macOS' runner in
//! `jobs.rs`) until Ctrl-C or SIGTERM: a Mac proves no tier 1 (see
//! `oz0_core::selftest`: macOS cannot limit a whole run's processes or
//! memory), so the edge routes it at tier 0.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use oz0_core::exit::Exit;
use oz0_core::facts::{assemble, SandboxMode};
use oz0_core::Wall;
use oz0_edge::client::{NodeClient, NodeKey, Trust};
use oz0_policy::facts::NodeFacts;

use super::host::{self, DataDirArg};
use super::jobs::MacTier0;
use super::wall::MacWall;
use crate::daemon::{event_loop, fail, log, print_facts, write_facts, Edge, Jobs};

/// `run` flags.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// auto: probe this Mac and self-test Seatbelt at start, reporting the
    /// tier it proves; none: no sandbox, no self-test (tier 0).
    #[arg(long, value_enum, default_value_t = Sandbox::Auto)]
    pub sandbox: Sandbox,
    #[command(flatten)]
    pub data: DataDirArg,
    /// Start, publish the facts, and exit instead of staying up (with
    /// --edge: register and report the facts, then exit).
    #[arg(long)]
    pub once: bool,
    #[command(flatten)]
    pub link: crate::flags::EdgeFlags,
    /// Where each job's fresh work folder is made (never under the data
    /// directory) [default: <temporary folder>/oz0-node-work].
    #[arg(long = "work-root", value_name = "DIR", requires = "edge")]
    pub work_root: Option<PathBuf>,
    /// The name shown on the edge's Nodes page [default: the host name].
    #[arg(long, value_name = "NAME", requires = "edge")]
    pub name: Option<String>,
    /// How long to wait between polls of an empty queue, in milliseconds.
    #[arg(
        long = "poll-ms",
        value_name = "MS",
        default_value_t = 2000,
        hide = true
    )]
    pub poll_ms: u64,
}

/// `--sandbox`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Sandbox {
    /// The strongest wall this Mac proves.
    Auto,
    /// No sandbox (tier 0).
    None,
}

/// `facts` flags.
#[derive(Debug, Args)]
pub struct FactsArgs {
    #[command(flatten)]
    pub data: DataDirArg,
}

fn edge_settings(a: &RunArgs, data_dir: &Path) -> Result<Option<Edge>, String> {
    let Some(url) = &a.link.edge else {
        return Ok(None);
    };
    // --tenant is required with --edge and checked by its parser.
    let tenant = a.link.tenant.clone().unwrap_or_default();
    let trust = match &a.link.edge_ca {
        Some(f) => Trust::CaFile(
            std::path::absolute(f).map_err(|e| format!("--edge-ca {}: {e}", f.display()))?,
        ),
        None => Trust::System,
    };
    NodeClient::with_trust(url, "probe", NodeKey::generate(), &trust)
        .map_err(|e| format!("--edge: {e}"))?;
    let file = a
        .link
        .enrolment_token_file
        .as_deref()
        .ok_or("--edge needs --enrolment-token-file FILE")?;
    let token = crate::private::read_token(file)?;
    let name = match &a.name {
        Some(n) => Some(n.clone()),
        None => rustix::system::uname()
            .nodename()
            .to_str()
            .ok()
            .map(|h| h.split('.').next().unwrap_or(h).to_ascii_lowercase()),
    };
    let temp_root = host::temp_root()?;
    let work_root = match &a.work_root {
        Some(w) => {
            std::path::absolute(w).map_err(|e| format!("--work-root {}: {e}", w.display()))?
        }
        None => temp_root.join("oz0-node-work"),
    };
    if work_root.starts_with(data_dir) || data_dir.starts_with(&work_root) {
        return Err(format!(
            "--work-root {} overlaps the data directory {}, which no job may see: name a folder outside it",
            work_root.display(),
            data_dir.display()
        ));
    }
    Ok(Some(Edge {
        url: url.clone(),
        tenant,
        token,
        name,
        trust,
        jobs: Jobs {
            records: data_dir.join("jobs"),
            work_root,
            runner: Box::new(MacTier0 {
                temp_root,
                data_dir: data_dir.to_path_buf(),
            }),
        },
    }))
}

/// Probes, self-tests unless told not to, and assembles the facts, logging
/// each step.
fn assess(sandbox: Sandbox, data_dir: &Path) -> NodeFacts {
    let egress = Arc::new(host::egress(data_dir.join(oz0_egress::AUDIT_LOG_NAME)));
    let wall = MacWall::probe(Some(data_dir.to_path_buf()), egress);
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
        env!("CARGO_PKG_VERSION"),
    );
    log(&super::microvm_line(&facts.microvm));
    facts
}

/// Runs the node daemon.
pub fn run(a: RunArgs) -> i32 {
    let data_dir = match a.data.resolve() {
        Ok(d) => d,
        Err(e) => return fail(e, Exit::Usage),
    };
    let edge = match edge_settings(&a, &data_dir) {
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
    let facts = assess(a.sandbox, &data_dir);
    match write_facts(&data_dir, &facts) {
        Ok(p) => log(&format!(
            "facts written to {}: tier proven {}, routed {}",
            p.display(),
            facts.tier_proven,
            facts.tier_routed
        )),
        Err(e) => return fail(e, Exit::CheckFailed),
    }
    event_loop(
        edge,
        key,
        facts,
        a.once,
        Duration::from_millis(a.poll_ms.clamp(50, 60_000)),
    )
}

/// Prints the facts `run` wrote.
pub fn facts(a: FactsArgs) -> i32 {
    match a.data.resolve() {
        Ok(d) => print_facts(&d),
        Err(e) => fail(e, Exit::Usage),
    }
}
