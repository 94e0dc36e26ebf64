//! One command in a PSEC container, through the node core's door
//! (`oz0_windows::psec::Psec`): the preview's `sandbox run` where the
//! probes found PSEC. This module turns the flags into the run's spec
//! (Windows paths carried as `/X:/folder`, checked by the same code as
//! every platform's) and says how the run ended; what the run gets and how
//! it is watched is `oz0_windows::psec`'s. Ctrl-C cancels it
//! (`oz0_windows::native::cancel_on_ctrl_c`).

use std::path::{Path, PathBuf};

use oz0_core::{Ended, RunError, RunIo, RunOptions, Sandbox};
use oz0_policy::{EnvVar, RunRequest, RunSpec, SpecError};
use oz0_windows::winpath::{WinPath, WinPathError};

/// Why nothing ran: each names the flag or the run's refusal.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PsecRunError {
    /// A path that is not Unicode.
    #[error("{flag} {} is not valid Unicode", path.display())]
    NotUnicode {
        /// The flag.
        flag: &'static str,
        /// The path.
        path: PathBuf,
    },
    /// A path that is not a Windows path a container can take.
    #[error("{flag}: {source}")]
    Path {
        /// The flag.
        flag: &'static str,
        /// What is wrong.
        source: WinPathError,
    },
    /// The spec was refused.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// PSEC refused or could not start the run.
    #[error("{0}")]
    Run(RunError),
}

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
    /// `--allow` hosts.
    pub allow: Vec<String>,
    /// `--forward` ports.
    pub forward: Vec<u16>,
    /// The node's data directory.
    pub data_dir: PathBuf,
    /// The command.
    pub command: Vec<String>,
}

fn win(flag: &'static str, p: &Path) -> Result<WinPath, PsecRunError> {
    let s = p.to_str().ok_or_else(|| PsecRunError::NotUnicode {
        flag,
        path: p.to_path_buf(),
    })?;
    WinPath::parse(s).map_err(|source| PsecRunError::Path { flag, source })
}

/// The run's spec: its paths as the spec carries Windows' (`/X:/folder`).
fn spec(r: Request) -> Result<RunSpec, PsecRunError> {
    let abs = |flag: &'static str, p: &Path| win(flag, p).map(|w| w.to_abs().as_str().to_string());
    RunSpec::new(RunRequest {
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
        allow: r.allow,
        forward: r.forward,
        limits: r.limits,
        data_dir: abs("--data-dir", &r.data_dir)?,
        command: r.command,
        ..Default::default()
    })
    .map_err(PsecRunError::from)
}

/// Runs the request through `psec`, saying how it ended: its outcome, or
/// why nothing ran.
pub fn run(r: Request, psec: &dyn Sandbox) -> Result<oz0_core::Outcome, PsecRunError> {
    let spec = spec(r)?;
    let cancel = oz0_windows::native::cancel_on_ctrl_c().ok();
    let o = psec
        .run(&spec, RunOptions::new(RunIo::inherit(), cancel))
        .map_err(PsecRunError::Run)?;
    for w in &o.warnings {
        eprintln!("oz0-node: warning: {w}");
    }
    match &o.ended {
        Ended::Timeout => eprintln!("oz0-node: the run's --timeout was reached: killed"),
        Ended::Cancelled => {
            eprintln!("oz0-node: stopped (Ctrl-C): every process of the run was ended");
        }
        Ended::NotExecuted { reason } => eprintln!("oz0-node: {reason}"),
        _ => {}
    }
    Ok(o)
}
