//! The eight-property self-test (docs/ARCHITECTURE.md), Linux flavour.
//!
//! Each check runs real sandboxes through the node's one door to a run,
//! [`oz0_core::Sandbox::run`] on Linux's tier 1, with the node binary itself as the probe
//! inside, and judges what the probe reports and what the host sees. The
//! checks run in order and stop at the first failure. The egress,
//! protected-paths and environment verdicts are every platform's
//! (`oz0_core::selftest::parts`); Linux's checks add the proof of each of
//! its layers alone.

use std::fs;
use std::net::{TcpListener, TcpStream};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use oz0_core::selftest;
use oz0_core::{Cancel, Ended, Fault, Line, RunIo, RunOptions, Sandbox, SelfTest as Outcome};
use oz0_linux::{Host, HostConfig};
use oz0_policy::facts::Property;
use oz0_policy::{EnvVar, Limits, RunRequest, RunSpec};

/// The node variable the environment check plants in the node's own
/// environment and looks for inside (every platform's).
pub use oz0_core::selftest::CANARY;

/// What the self-test needs.
pub struct Config {
    /// Where the node's host context comes from: the self-test's runs go
    /// through a host made of it (its node binary is also the probe
    /// inside), with its run folders in the self-test's own folder.
    pub host: HostConfig,
    /// The egress proxy of the egress check's run (the node's own, or one
    /// whose records go nowhere: the check's decisions are no one's).
    pub egress: std::sync::Arc<dyn oz0_egress::EgressService>,
    /// The node's real data directory, when it has one.
    pub data_dir: Option<PathBuf>,
    /// Where jobs go (None: job limits unavailable here).
    pub job_mode: Option<oz0_limits::JobMode>,
    /// Why job limits are unavailable, with the fix.
    pub job_unavailable: Option<String>,
    /// A fault to inject into one property's runs (self-test tests only).
    pub fault: Option<Property>,
    /// A layer to take away from every run (self-test tests only).
    pub layer_fault: Option<Layer>,
}

/// A layer of the sandbox that the self-test's tests can take away from
/// every run of the self-test, to show that the self-test sees that layer
/// go even while the others hold (and names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// The mounts: the stand-in data directory is mounted into the runs.
    Mounts,
    /// Landlock is not applied.
    Landlock,
    /// No seccomp filter.
    Seccomp,
}

impl Layer {
    /// Every layer.
    pub const ALL: [Layer; 3] = [Layer::Mounts, Layer::Landlock, Layer::Seccomp];

    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Mounts => "mounts",
            Layer::Landlock => "landlock",
            Layer::Seccomp => "seccomp",
        }
    }

    /// The layer named `s`.
    pub fn parse(s: &str) -> Option<Layer> {
        Layer::ALL.into_iter().find(|l| l.as_str() == s)
    }
}

type CheckResult = Result<String, String>;

mod files;
mod network;
mod processes;

use files::{check_files, check_protected};
use network::{check_egress, check_environment, check_ingress};
use processes::{check_fail_closed, check_job_limits, check_launch};

struct Ctx<'a> {
    cfg: &'a Config,
    /// The wall the runs go through: the node's host, its run folders in
    /// the self-test's folder.
    host: Host,
    base: PathBuf,
    standin: PathBuf,
    spec_data_dir: String,
    current: Property,
    seq: u32,
}

/// Runs the self-test, calling `on_line` after each check.
pub fn run(cfg: &Config, on_line: impl FnMut(&Line)) -> Outcome {
    // The node's own variable that must never reach a run.
    selftest::plant_canary();
    let faulty = cfg.fault.is_some() || cfg.layer_fault.is_some();
    let ws = match selftest::Workspace::new(&std::env::temp_dir()) {
        Ok(w) => w,
        Err(e) => return selftest::failed_at_start(e, on_line, faulty),
    };
    let host = match Host::open(HostConfig {
        scratch: Some(ws.base.clone()),
        ..cfg.host.clone()
    }) {
        Ok(h) => h,
        Err(e) => {
            return selftest::failed_at_start(
                format!("the node's host context could not be made: {e}"),
                on_line,
                faulty,
            )
        }
    };
    let host = host.with_egress(cfg.egress.clone(), ws.base.join("egress-audit.jsonl"));
    let host = match &cfg.job_mode {
        Some(m) => host.with_job_mode(m.clone()),
        None => host,
    };
    let spec_data_dir = cfg
        .data_dir
        .as_ref()
        .unwrap_or(&ws.standin)
        .display()
        .to_string();
    let mut ctx = Ctx {
        cfg,
        host,
        base: ws.base.clone(),
        standin: ws.standin.clone(),
        spec_data_dir,
        current: Property::Launch,
        seq: 0,
    };
    selftest::sequence(
        |p| {
            ctx.current = p;
            match p {
                Property::Launch => check_launch(&mut ctx),
                Property::Files => check_files(&mut ctx),
                Property::Egress => check_egress(&mut ctx),
                Property::Ingress => check_ingress(&mut ctx),
                Property::JobLimits => check_job_limits(&mut ctx),
                Property::FailClosed => check_fail_closed(&mut ctx),
                Property::ProtectedPaths => check_protected(&mut ctx),
                Property::Environment => check_environment(&mut ctx),
            }
        },
        on_line,
        faulty,
    )
}

impl Ctx<'_> {
    fn dir(&mut self, tag: &str) -> Result<PathBuf, String> {
        self.seq += 1;
        let d = self.base.join(format!("{}-{tag}", self.seq));
        fs::create_dir(&d).map_err(|e| format!("cannot make {}: {e}", d.display()))?;
        Ok(d)
    }

    fn fault(&self) -> Option<Fault> {
        if let Some(layer) = self.cfg.layer_fault {
            return Some(match layer {
                Layer::Mounts => Fault::Expose(self.standin.display().to_string()),
                Layer::Landlock => Fault::NoLandlock,
                Layer::Seccomp => Fault::NoSeccomp,
            });
        }
        if self.cfg.fault != Some(self.current) {
            return None;
        }
        Some(match self.current {
            Property::Launch => Fault::SharePid,
            Property::Files => Fault::Expose(self.standin.display().to_string()),
            Property::Egress | Property::Ingress => Fault::ShareNet,
            Property::ProtectedPaths => Fault::NoProtectedPaths,
            Property::Environment => Fault::LeakEnv(CANARY.into(), "node-only".into()),
            // Handled by the checks themselves (no job / a writable root).
            Property::JobLimits | Property::FailClosed => return None,
        })
    }

    fn request(&self, work: &Path, command: Vec<String>) -> RunRequest {
        RunRequest {
            work: work.display().to_string(),
            data_dir: self.spec_data_dir.clone(),
            command,
            ..Default::default()
        }
    }

    fn launch(
        &self,
        req: RunRequest,
        cancel: Option<std::os::fd::OwnedFd>,
    ) -> Result<oz0_core::Outcome, String> {
        self.launch_with(req, cancel, self.fault())
    }

    /// A run of the probe with one layer of the sandbox deliberately taken
    /// away (`fault`), to show that another holds on its own.
    fn launch_without(&self, req: RunRequest, fault: Fault) -> Result<oz0_core::Outcome, String> {
        self.launch_with(req, None, Some(fault))
    }

    fn launch_with(
        &self,
        req: RunRequest,
        cancel: Option<std::os::fd::OwnedFd>,
        fault: Option<Fault>,
    ) -> Result<oz0_core::Outcome, String> {
        let spec = RunSpec::new(req).map_err(|e| format!("self-test spec refused: {e}"))?;
        let opts = RunOptions {
            io: RunIo::quiet(),
            cancel: cancel.map(Cancel),
            fault,
            ..Default::default()
        };
        self.host
            .run(&spec, opts)
            .map_err(|e| format!("the sandbox did not start: {e}"))
    }
}

/// The probe's command line in a run: the node binary at `/oz0/oz0-node`.
fn probe_cmd(out: &Path, args: &[&str]) -> Vec<String> {
    selftest::parts::probe_cmd("/oz0/oz0-node", out, args)
}

use selftest::parts::read_report;

fn marker(tag: &str) -> String {
    let mut b = [0u8; 6];
    let _ = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty());
    format!(
        "oz0st-{tag}-{}",
        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
    )
}

/// Host pids whose command line contains `m`.
fn processes_with(m: &str) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(c) = fs::read(format!("/proc/{pid}/cmdline")) {
            if String::from_utf8_lossy(&c).contains(m) {
                out.push(pid);
            }
        }
    }
    out
}

fn kill_all(m: &str) {
    for pid in processes_with(m) {
        if let Some(p) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        }
    }
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}
