//! `oz0-node run` (the node daemon's start) and `oz0-node facts`.

use std::fs;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use oz0_core::facts::{self, SandboxMode};
use oz0_core::{Check, Wall};
use oz0_edge::client::{ClientError, NodeKey};
use oz0_linux::HostConfig;
use oz0_linux::LinuxWall;
use oz0_policy::facts::{Microvm, MicrovmReason, NodeFacts, Oci, OciReason, OciRuntime};

use crate::flags::{DataDirArg, NodeArgs, Sandbox};

use oz0_core::exit::Exit;

/// `facts` flags.
#[derive(Debug, Args)]
pub struct FactsArgs {
    /// json (the document), nfd (Node Feature Discovery features.d file), kv (key=value lines).
    #[arg(long, value_enum, default_value_t = Format::Json)]
    pub format: Format,
    #[command(flatten)]
    pub data: DataDirArg,
}

/// `facts --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// The facts document.
    Json,
    /// Kubernetes Node Feature Discovery local feature file.
    Nfd,
    /// key=value lines.
    Kv,
}

/// The label prefix in NFD feature files.
pub const NFD_PREFIX: &str = "oz0.dev/";

fn log(msg: &str) {
    crate::log::log(msg);
}

/// Why the node key cannot be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeKeyError {
    /// A key of the old raw format could not be moved aside.
    #[error("cannot move the old node key {} aside: {source}: move it yourself", path.display())]
    MoveAside {
        /// The old key.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The key could not be read or made.
    #[error(transparent)]
    Key(#[from] ClientError),
}

impl From<NodeKeyError> for String {
    fn from(e: NodeKeyError) -> String {
        e.to_string()
    }
}

/// Loads the node key, creating it on first start (an ed25519 key from the
/// OS random source, mode 0600 in a 0700 folder): the same key format the
/// edge's client signs with.
pub fn node_key(d: &Path) -> Result<NodeKey, NodeKeyError> {
    let key = d.join("identity").join("node.key");
    let existed = key.exists();
    if existed && fs::metadata(&key).is_ok_and(|m| m.len() == 32) {
        // The raw 32-byte key of earlier versions was never registered
        // anywhere: it is kept aside and a key of the signed format made.
        let aside = key.with_extension("key.raw-v0");
        fs::rename(&key, &aside).map_err(|source| NodeKeyError::MoveAside {
            path: key.clone(),
            source,
        })?;
        log(&format!(
            "moved the old node key aside to {}",
            aside.display()
        ));
        return node_key(d);
    }
    let k = NodeKey::load_or_create(&key)?;
    if !existed {
        log(&format!("created the node key {}", key.display()));
    }
    Ok(k)
}

/// Probes microVMs: only with tier 1 proven, by booting a test VM inside it.
pub fn microvm_state(tier1: bool, host: HostConfig, data_dir: &Path) -> Microvm {
    let removed = oz0_microvm::vmdir::cleanup_stale(&std::env::temp_dir(), data_dir);
    if !removed.is_empty() {
        log(&format!(
            "removed {} stale microVM folder(s)",
            removed.len()
        ));
    }
    let r = oz0_microvm::bootcheck::probe(&oz0_microvm::bootcheck::ProbeOptions::from_env(
        tier1,
        host,
        data_dir.to_path_buf(),
    ));
    if let Some(w) = &r.warning {
        log(&format!("warning: {w}"));
    }
    log(&format!("MicroVMs: {}", r.detail));
    r.microvm
}

/// What the machine proved, assessed once: check, self-test, microVMs.
struct Assessment {
    facts: NodeFacts,
    /// The check's words, to notice a changed machine cheaply.
    check_key: String,
}

struct Assessor {
    mode: SandboxMode,
    wall: LinuxWall,
    data_dir: PathBuf,
    oci: crate::flags::OciArgs,
    image_fault: Option<oz0_linux::image_check::ImageFault>,
}

impl Assessor {
    /// Whether the node runs container tools: with a registry to pull from,
    /// an image cache it can open, and (with a proven tier 1) runs in an
    /// image's root that pass their check.
    fn oci_state(&self, tier1: bool) -> Oci {
        let a = &self.oci;
        if a.registries.is_empty() {
            return Oci::unavailable(OciReason::NoRegistry);
        }
        let max = a.cache_mib.saturating_mul(1 << 20);
        if let Err(e) = oz0_oci::cache::Cache::open(&self.data_dir, max) {
            log(&format!("the image cache cannot be used: {e}"));
            return Oci::unavailable(OciReason::Cache);
        }
        if !tier1 {
            return Oci::unavailable(OciReason::NoTier1);
        }
        // One host for both runtimes' checks: the self-test's (its job
        // mode probed once, its own egress proxy).
        let t = match self.wall.self_test_host() {
            Ok((t, _)) => t,
            Err(e) => {
                log(&format!(
                    "runs in an image's root: the self-test failed: {e}"
                ));
                return Oci::unavailable(OciReason::ImageCheckFailed);
            }
        };
        // The eight properties again, every run in an image's root.
        let tested =
            oz0_linux::image_check::self_test_in_image(&t, &self.data_dir, self.image_fault, |l| {
                log(&format!("In an image's root: {}", l.text()))
            });
        match tested {
            Ok(t) if t.tier() == 1 && self.image_fault.is_none() => {
                log(&format!(
                    "runs in an image's root: the self-test passed ({} checks, {} ms)",
                    t.lines.len(),
                    t.total_ms
                ));
            }
            Ok(t) if t.failed.is_none() => {
                log("runs in an image's root: the self-test passed with a fault injected, so not offered");
                return Oci::unavailable(OciReason::ImageCheckFailed);
            }
            Ok(t) => {
                let at = t.failed.map_or("?", |p| p.as_str());
                log(&format!(
                    "runs in an image's root: the self-test failed at {at}"
                ));
                return Oci::unavailable(OciReason::ImageCheckFailed);
            }
            Err(e) => {
                log(&format!(
                    "runs in an image's root: the self-test cannot run: {e}"
                ));
                return Oci::unavailable(OciReason::ImageCheckFailed);
            }
        }
        let mut runtimes = vec![OciRuntime::Tier1];
        // gVisor where runsc is installed and its own check holds.
        match oz0_linux::gvisor::Gvisor::find(&self.data_dir, t.job_mode().ok()) {
            Err(e) => log(&format!("gVisor: not offered: {e}")),
            Ok(g) => match self.image_check(oz0_linux::image_check::Runs::Gvisor(&g, t.node_exe()))
            {
                Ok(shown) => {
                    log(&format!("gVisor ({}): checked: {shown}", g.version()));
                    runtimes.push(OciRuntime::Gvisor);
                }
                Err(e) => log(&format!(
                    "gVisor ({}): not offered: the check failed: {e}",
                    g.version()
                )),
            },
        }
        Oci {
            ready: true,
            runtimes,
            reason: None,
        }
    }

    /// The witness's check of gVisor runs in an image's root.
    fn image_check(
        &self,
        runs: oz0_linux::image_check::Runs<'_>,
    ) -> Result<String, oz0_core::selftest::Failed> {
        oz0_linux::image_check::ImageCheck {
            runs,
            data_dir: &self.data_dir,
            base: std::env::temp_dir(),
            fault: None,
            no_image: false,
        }
        .run()
    }
}

/// The node's log line about container tools.
fn oci_line(o: &Oci) -> String {
    match (o.ready, o.reason) {
        (true, _) => {
            let r: Vec<&str> = o.runtimes.iter().map(|r| r.as_str()).collect();
            format!("container tools (runtime.oci): ready, in {}", r.join(", "))
        }
        (false, Some(why)) => format!(
            "container tools (runtime.oci): not offered: {}",
            why.words()
        ),
        (false, None) => "container tools (runtime.oci): not offered".into(),
    }
}

fn check_key(c: &Check) -> String {
    format!(
        "{}\n{}\n{}",
        c.headline,
        c.facts_line,
        c.fix.as_deref().unwrap_or("")
    )
}

impl Assessor {
    fn assess(&self) -> Assessment {
        let check = self.wall.check();
        log(&check.headline);
        log(&check.facts_line);
        if let Some(f) = &check.fix {
            log(f);
        }
        let outcome = if self.mode == SandboxMode::Auto {
            crate::check::self_test(&self.wall, &check, |l| log(&l.text()))
        } else {
            log("--sandbox none: no sandbox; work runs with this node's own permissions (tier 0)");
            None
        };
        let tier1 = outcome.as_ref().is_some_and(|o| o.tier() == 1);
        let microvm = match std::env::var("OZ0_MICROVM").as_deref() {
            Ok("off") => Microvm {
                ready: false,
                reason: Some(MicrovmReason::Off),
                pinned: None,
                backend: None,
            },
            _ => microvm_state(tier1, self.wall.host.clone(), &self.data_dir),
        };
        let facts = facts::assemble(
            &check,
            outcome.as_ref(),
            self.mode,
            microvm,
            self.oci_state(tier1),
            env!("CARGO_PKG_VERSION"),
        );
        if let Some(o) = &outcome {
            log(&o.closing(&check.wall_name));
        }
        log(&oci_line(&facts.oci));
        Assessment {
            facts,
            check_key: check_key(&check),
        }
    }

    /// Checks again; only when the check's words changed is the self-test
    /// run again. Returns the new facts when they changed.
    fn recheck(&self, last: &mut Assessment) -> Option<NodeFacts> {
        if check_key(&self.wall.check()) == last.check_key {
            return None;
        }
        log("the machine changed since the last check: probing and self-testing again");
        let next = self.assess();
        let changed = next.facts != last.facts;
        *last = next;
        changed.then(|| last.facts.clone())
    }
}

/// Runs the node daemon: probe, self-test, facts, then (with --edge) work.
pub fn run(a: NodeArgs) -> i32 {
    if a.sandbox == Sandbox::Psec {
        eprintln!("oz0-node: --sandbox psec is Windows-only (Windows 11's process security environment); on Linux use --sandbox auto");
        return Exit::Usage.code();
    }
    let fault = match crate::check::parse_fault(a.inject_fault.as_deref()) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("oz0-node: {e}");
            return Exit::Usage.code();
        }
    };
    let data_dir = match a.host.data.resolve() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("oz0-node: {e}");
            return Exit::Usage.code();
        }
    };
    // The registries and their credentials, checked now: a wrong flag is
    // said at once, not at the first container tool.
    if !a.oci.registries.is_empty() {
        if let Err(e) = oz0_oci::registry::Client::new(&oz0_oci::registry::Options {
            allowed: a.oci.registries.clone(),
            auth_file: a.oci.auth.clone(),
            ca_file: a.oci.ca.clone(),
        }) {
            eprintln!("oz0-node: {e}");
            return Exit::Usage.code();
        }
    }
    // Everything the edge connection needs is checked before the (slow)
    // self-test, so a wrong flag is said at once.
    let edge = match a.daemon.link.edge.as_slice() {
        [] => None,
        urls => match crate::edge::Settings::from_args(urls, &a, &data_dir) {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("oz0-node: {e}");
                return Exit::Usage.code();
            }
        },
    };
    // Held while the node runs: `key rotate` is refused meanwhile.
    let (_held, key) = match crate::private::prepare_data_dir(&data_dir)
        .map_err(String::from)
        .and_then(|_| Ok(crate::key::hold(&data_dir, crate::key::Holder::Run)?))
        .and_then(|h| Ok((h, node_key(&data_dir)?)))
    {
        Ok(hk) => hk,
        Err(e) => {
            eprintln!("oz0-node: {e}");
            return Exit::CheckFailed.code();
        }
    };
    // Signals are taken before anything starts, so a stop is never lost.
    let stop = match signal_stream() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("oz0-node: cannot watch for signals: {e}");
            return Exit::CheckFailed.code();
        }
    };
    let assessor = Assessor {
        mode: match a.sandbox {
            Sandbox::None => SandboxMode::None,
            _ => SandboxMode::Auto,
        },
        wall: crate::platform::platform(crate::platform::Settings {
            fault,
            ..crate::platform::Settings::of(&a.host)
        })
        .into_wall(),
        data_dir: data_dir.clone(),
        oci: a.oci.clone(),
        image_fault: a.inject_image_fault,
    };
    let mut assessment = assessor.assess();
    if let Err(code) = publish(&data_dir, &assessment.facts) {
        return code;
    }
    let Some(settings) = edge else {
        if a.daemon.once {
            return Exit::Ok.code();
        }
        log("ready; SIGTERM or SIGINT stops the node");
        // Without an edge the node only holds its facts.
        let mut buf = [0u8; 1];
        let _ = std::io::Read::read(&mut &stop, &mut buf);
        log("stopping");
        return Exit::Ok.code();
    };
    let facts = assessment.facts.clone();
    let recheck = move || {
        let f = assessor.recheck(&mut assessment)?;
        publish(&assessor.data_dir, &f).ok()?;
        Some(f)
    };
    let stop = crate::edge::readable(stop);
    crate::edge::serve(settings, key, facts, recheck, stop, a.daemon.once)
}

fn publish(data_dir: &Path, facts: &NodeFacts) -> Result<(), i32> {
    match crate::facts_file::write(data_dir, facts) {
        Ok(p) => {
            log(&format!(
                "facts written to {}: tier proven {}, routed {}",
                p.display(),
                facts.tier_proven,
                facts.tier_routed
            ));
            Ok(())
        }
        Err(e) => {
            log(&e.to_string());
            Err(Exit::CheckFailed.code())
        }
    }
}

fn signal_stream() -> std::io::Result<std::os::unix::net::UnixStream> {
    let (r, w) = std::os::unix::net::UnixStream::pair()?;
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::low_level::pipe::register(sig, w.try_clone()?)?;
    }
    Ok(r)
}

/// Prints the facts.
pub fn facts(a: FactsArgs) -> i32 {
    let data_dir = match a.data.resolve() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("oz0-node: {e}");
            return Exit::Usage.code();
        }
    };
    let path = data_dir.join("facts.json");
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("oz0-node: cannot read {}: {e}: start the node once (`oz0-node run --once`) to write them", path.display());
            return Exit::CheckFailed.code();
        }
    };
    let f: NodeFacts = match serde_json::from_str(&text) {
        Ok(f) => f,
        Err(e) => {
            eprintln!(
                "oz0-node: {} is not a facts document of this version: {e}",
                path.display()
            );
            return Exit::CheckFailed.code();
        }
    };
    match a.format {
        Format::Json => crate::out::line(&serde_json::to_string_pretty(&f).expect("serialises")),
        Format::Nfd => crate::out::print(&facts::label_lines(&f, NFD_PREFIX)),
        Format::Kv => crate::out::print(&facts::label_lines(&f, "")),
    }
    Exit::Ok.code()
}
