//! One command in a PSEC container: the preview's `sandbox run` where the
//! probes found PSEC.
//!
//! The spec is checked by the same code as every platform's, and
//! translated by `oz0_windows::plan` (the Windows security boundary: what
//! the container may touch is entirely its request). The launcher then:
//!
//! 1. makes the run's TEMP (`%TEMP%\oz0-run-<id>`), removed after;
//! 2. makes each protected entry that is missing as an empty placeholder
//!    (`.git`'s only where `.git` is a folder), removed after when still
//!    empty, and holds every writable folder, its `.git` and its protected
//!    folders open without delete sharing for the run's length, so that
//!    none can be renamed aside;
//! 3. starts the command through `oz0_windows::launch::start`: a job with
//!    the run's limits (kill-on-close), a PSEC environment from the whole
//!    request, the command created suspended inside it, placed in the job,
//!    resumed; any failure leaves nothing running;
//! 4. waits for its first process, `--timeout` or Ctrl-C, then ends every
//!    process of the job.
//!
//! Egress (`--allow`, `--forward`) is refused in this build: the bridge
//! inside a container and the relay in its AppContainer profile are not
//! started yet. Type-checked for Windows in CI; it has not run on a machine
//! with PSEC.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oz0_core::exit::Exit;
use oz0_policy::{EnvVar, RunRequest, RunSpec};
use oz0_windows::hold::{hold, Held};
use oz0_windows::launch;
use oz0_windows::native::PsecLauncher;
use oz0_windows::plan::{plan, WindowsHost};
use oz0_windows::probe::PsecFacts;
use oz0_windows::winpath::WinPath;

/// What the caller asked for, in Windows' terms.
pub struct Request {
    /// The work folder.
    pub work: PathBuf,
    /// `--read` paths.
    pub read: Vec<PathBuf>,
    /// `--write` paths.
    pub write: Vec<PathBuf>,
    /// The run's variables.
    pub env: Vec<EnvVar>,
    /// The limits asked for.
    pub limits: oz0_policy::Limits,
    /// Whether egress was asked for.
    pub egress: bool,
    /// The node's data directory.
    pub data_dir: PathBuf,
    /// The command.
    pub command: Vec<String>,
}

fn win(flag: &str, p: &Path) -> Result<WinPath, String> {
    let s = p
        .to_str()
        .ok_or_else(|| format!("{flag} {} is not valid Unicode", p.display()))?;
    WinPath::parse(s).map_err(|e| format!("{flag}: {e}"))
}

/// Runs the request in a PSEC container of `psec`; the exit status.
pub fn run(r: Request, psec: PsecFacts) -> Result<i32, String> {
    if r.egress {
        return Err("egress (--allow/--forward) for a PSEC run is not in this build: the bridge inside a container and the relay in its AppContainer profile are not started yet; run the command without egress, or on a Linux or macOS node".into());
    }
    let root = std::env::var("SystemRoot").unwrap_or_else(|_| "C:\\Windows".into());
    let node = std::env::current_exe().map_err(|e| format!("cannot name the node binary: {e}"))?;
    let mut made = Held::default();
    let temp = std::env::temp_dir().join(format!(
        "oz0-run-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    fs::create_dir(&temp)
        .map_err(|e| format!("cannot make the run's TEMP {}: {e}", temp.display()))?;
    made.temp = Some(temp.clone());
    let host = WindowsHost {
        system_root: WinPath::parse(&root).map_err(|e| format!("SystemRoot: {e}"))?,
        node_binary: win("the node binary", &node)?,
        run_temp: win("the run's TEMP", &temp)?,
        other_runs: vec![],
    };
    let abs = |flag: &str, p: &Path| win(flag, p).map(|w| w.to_abs().as_str().to_string());
    let spec = RunSpec::new(RunRequest {
        work: abs("--work", &r.work)?,
        read: r
            .read
            .iter()
            .map(|p| abs("--read", p))
            .collect::<Result<_, _>>()?,
        write: r
            .write
            .iter()
            .map(|p| abs("--write", p))
            .collect::<Result<_, _>>()?,
        env: r.env,
        limits: r.limits,
        data_dir: abs("--data-dir", &r.data_dir)?,
        command: r.command,
        ..Default::default()
    })
    .map_err(|e| e.to_string())?;
    let plan = plan(&spec, &host, &psec, None).map_err(|e| e.to_string())?;
    hold(&plan.protected, &plan.hold_open, &mut made)?;
    let mut launcher = PsecLauncher::load().map_err(|e| e.to_string())?;
    let started = launch::start(&mut launcher, &plan).map_err(|e| e.to_string())?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                let _ = rt.block_on(tokio::signal::ctrl_c());
                stop.store(true, Ordering::SeqCst);
            }
        });
    }
    let deadline = plan
        .timeout_seconds
        .map(|s| Instant::now() + Duration::from_secs(s));
    let code = loop {
        match started.child.wait_ms(50) {
            Ok(Some(c)) => break i32::from_ne_bytes(c.to_ne_bytes()),
            Ok(None) => {}
            Err(e) => {
                let _ = started.job.terminate();
                return Err(format!("cannot wait for the run: {e}"));
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            let _ = started.job.terminate();
            eprintln!("oz0-node: the run's --timeout was reached: killed");
            break Exit::Timeout.code();
        }
        if stop.load(Ordering::SeqCst) {
            let _ = started.job.terminate();
            eprintln!("oz0-node: stopped (Ctrl-C): every process of the run was ended");
            break 130;
        }
    };
    // The first process ended: so does every process it started, and the
    // run returns only once they have.
    let _ = started.job.terminate();
    let until = Instant::now() + Duration::from_secs(5);
    while started.job.active_processes().is_ok_and(|n| n > 0) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(started);
    drop(made);
    Ok(code)
}
