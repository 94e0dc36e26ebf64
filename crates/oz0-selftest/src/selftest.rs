//! The eight-property self-test (docs/ARCHITECTURE.md), Linux flavour.
//!
//! Each check runs real sandboxes through the node's one door to a run,
//! [`oz0_linux::Host::run`], with the node binary itself as the probe
//! inside, and judges what the probe reports and what the host sees. The
//! checks run in order and stop at the first failure. The egress,
//! protected-paths and environment verdicts are every platform's
//! (`oz0_core::selftest::parts`); Linux's checks add the proof of each of
//! its layers alone.

use std::fs;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use oz0_core::{Cancel, Ended, Line, RunIo, SelfTest as Outcome};
use oz0_linux::plan::{Extras, Fault};
use oz0_linux::{Host, RunOptions, RunOutcome};
use oz0_policy::facts::Property;
use oz0_policy::{EnvVar, Limits, RunRequest, RunSpec};
use serde_json::Value;

/// The node variable the environment check plants in the node's own
/// environment and looks for inside.
pub const CANARY: &str = "OZ0_SELFTEST_CANARY";

/// What the self-test needs.
pub struct Config<'a> {
    /// The node's host context: its runs go through it (its node binary is
    /// also the probe inside).
    pub host: &'a Host,
    /// The egress proxy of the egress check's run (the node's own, or one
    /// whose records go nowhere: the check's decisions are no one's).
    pub egress: &'a dyn oz0_egress::EgressService,
    /// The node's real data directory, when it has one.
    pub data_dir: Option<PathBuf>,
    /// Where jobs go (None: job limits unavailable here).
    pub job_mode: Option<oz0_jobs::JobMode>,
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
    cfg: &'a Config<'a>,
    base: PathBuf,
    standin: PathBuf,
    spec_data_dir: String,
    current: Property,
    seq: u32,
}

/// A temporary folder removed on drop.
struct Base(PathBuf);
impl Drop for Base {
    fn drop(&mut self) {
        let _ = make_writable(&self.0);
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn make_writable(p: &Path) -> std::io::Result<()> {
    for e in fs::read_dir(p)?.flatten() {
        let path = e.path();
        if let Ok(m) = fs::symlink_metadata(&path) {
            if m.is_dir() {
                let _ = fs::set_permissions(&path, fs::Permissions::from_mode(0o700));
                let _ = make_writable(&path);
            }
        }
    }
    Ok(())
}

/// Runs the self-test, calling `on_line` after each check.
pub fn run(cfg: &Config, mut on_line: impl FnMut(&Line)) -> Outcome {
    let started = Instant::now();
    // The node's own variable that must never reach a run. Set before any
    // thread of the self-test starts.
    if std::env::var_os(CANARY).is_none() {
        std::env::set_var(CANARY, "node-only");
    }
    let mut lines = Vec::new();
    let mut failed = None;
    let base = match make_base() {
        Ok(b) => b,
        Err(e) => {
            let l = Line {
                property: Property::Launch,
                ok: false,
                ms: 0,
                detail: format!("cannot make the self-test's temporary folder: {e}"),
            };
            on_line(&l);
            return Outcome {
                lines: vec![l],
                failed: Some(Property::Launch),
                fault_injected: cfg.fault.is_some() || cfg.layer_fault.is_some(),
                total_ms: 0,
            };
        }
    };
    let standin = base.0.join("standin-data");
    let ok = fs::create_dir_all(standin.join("identity"))
        .and_then(|_| fs::write(standin.join("identity/node.key"), "standin-key"));
    let spec_data_dir = cfg
        .data_dir
        .as_ref()
        .unwrap_or(&standin)
        .display()
        .to_string();
    let mut ctx = Ctx {
        cfg,
        base: base.0.clone(),
        standin,
        spec_data_dir,
        current: Property::Launch,
        seq: 0,
    };
    for p in Property::ALL {
        ctx.current = p;
        let t = Instant::now();
        let r = if let Err(e) = &ok {
            Err(format!("cannot prepare the stand-in data directory: {e}"))
        } else {
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
        };
        let line = Line {
            property: p,
            ok: r.is_ok(),
            ms: u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX),
            detail: match r {
                Ok(d) | Err(d) => d,
            },
        };
        on_line(&line);
        let stop = !line.ok;
        lines.push(line);
        if stop {
            failed = Some(p);
            break;
        }
    }
    drop(base);
    Outcome {
        lines,
        failed,
        fault_injected: cfg.fault.is_some() || cfg.layer_fault.is_some(),
        total_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    }
}

fn make_base() -> std::io::Result<Base> {
    let mut b = [0u8; 6];
    let _ = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty());
    let name: String = b.iter().map(|x| format!("{x:02x}")).collect();
    let p = std::env::temp_dir().join(format!("oz0-selftest-{name}"));
    fs::DirBuilder::new().mode(0o700).create(&p)?;
    Ok(Base(p.canonicalize()?))
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
                Layer::Mounts => Fault::Expose(
                    oz0_policy::AbsPath::from_path(&self.standin).expect("temp dir is UTF-8"),
                ),
                Layer::Landlock => Fault::NoLandlock,
                Layer::Seccomp => Fault::NoSeccomp,
            });
        }
        if self.cfg.fault != Some(self.current) {
            return None;
        }
        Some(match self.current {
            Property::Launch => Fault::SharePid,
            Property::Files => Fault::Expose(
                oz0_policy::AbsPath::from_path(&self.standin).expect("temp dir is UTF-8"),
            ),
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
        proxy: Option<&dyn oz0_egress::EgressService>,
        jobs: Option<&oz0_jobs::JobMode>,
        cancel: Option<std::os::fd::OwnedFd>,
    ) -> Result<RunOutcome, String> {
        self.launch_with(req, proxy, jobs, cancel, self.fault())
    }

    /// A run of the probe with one layer of the sandbox deliberately taken
    /// away (`fault`), to show that another holds on its own.
    fn launch_without(&self, req: RunRequest, fault: Fault) -> Result<RunOutcome, String> {
        self.launch_with(req, None, None, None, Some(fault))
    }

    fn launch_with(
        &self,
        req: RunRequest,
        proxy: Option<&dyn oz0_egress::EgressService>,
        jobs: Option<&oz0_jobs::JobMode>,
        cancel: Option<std::os::fd::OwnedFd>,
        fault: Option<Fault>,
    ) -> Result<RunOutcome, String> {
        let spec = RunSpec::new(req).map_err(|e| format!("self-test spec refused: {e}"))?;
        let extras = Extras {
            fault,
            ..Default::default()
        };
        let opts = RunOptions {
            io: RunIo::quiet(),
            cancel: cancel.map(Cancel),
            extras,
            scratch: Some(self.base.clone()),
            jobs,
            egress: proxy,
        };
        self.cfg
            .host
            .run(&spec, opts)
            .map_err(|e| format!("the sandbox did not start: {e}"))
    }
}

fn probe_cmd(out: &Path, args: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "/oz0/oz0-node",
        "sandbox",
        "probe",
        "--no-syscalls",
        "--out",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.push(out.display().to_string());
    v.extend(args.iter().map(|s| s.to_string()));
    v
}

fn read_report(p: &Path) -> Result<Value, String> {
    let text = fs::read_to_string(p).map_err(|e| format!("the probe wrote no report ({e})"))?;
    serde_json::from_str(&text).map_err(|e| format!("bad probe report: {e}"))
}

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
