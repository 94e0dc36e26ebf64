//! `sandbox run` on Windows: the PSEC preview.
//!
//! Refused without `OZ0_SANDBOX_PSEC_PREVIEW=1`, as on any node without
//! tier 1. With it, the flags and the route variable are checked, then
//! Windows is probed: where the probes find no PSEC the run is refused with
//! their reason; where they find it, the command runs in a PSEC container
//! ([`super::psec_run`]). In every refusal nothing is started.

use std::ffi::{OsStr, OsString};

use clap::Args;
use oz0_core::exit::Exit;
use oz0_windows::route::{parse_route_env, ROUTE_ENV};

use super::status::StatusFile;
use super::{DataDirArg, PREVIEW_ENV};
use crate::platform::{platform, Settings};

/// `sandbox run` flags.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub wall: crate::flags::RunFlags,
    /// Give the command NAME=VALUE, or NAME with the value of NAME from this
    /// process's environment. Nothing else from this environment reaches it.
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    pub env: Vec<OsString>,
    /// Write the run's status document to FILE when it is over: how it
    /// ended, its report (the look after it among it), or why it was
    /// refused. FILE's folder is checked and held before the run: no part
    /// of its path may be a link or junction.
    #[arg(long = "json-status", value_name = "FILE")]
    pub json_status: Option<std::path::PathBuf>,
    /// The host network: refused on Windows (a PSEC run reaches the network
    /// only through the egress proxy).
    #[arg(long = "share-net", hide = true)]
    pub share_net: bool,
    #[command(flatten)]
    pub data: DataDirArg,
    /// The command (its full path) and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// Refuses the run: the reason on stderr and, with `--json-status`, in
/// the status document too.
fn refuse_with(status: Option<&StatusFile>, msg: impl std::fmt::Display) -> i32 {
    eprintln!("oz0-node: sandbox refused: {msg}");
    if let Some(s) = status {
        let _ = s.write(&crate::outcome::error_doc(&msg));
    }
    Exit::Sandbox.code()
}

/// Why the PSEC preview is off.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PreviewError {
    /// The preview's variable is not set.
    #[error("this node has no tier 1 (a Windows node runs work at tier 0; Windows' process security environment, PSEC, is a preview): set {PREVIEW_ENV}=1 to evaluate PSEC on this machine, or run the command on a Linux or macOS node")]
    Off,
    /// It is set to something else than 1.
    #[error("{PREVIEW_ENV} must be 1 to turn on the PSEC preview (or unset)")]
    NotOne,
}

/// Whether the preview is on: Err with the refusal when it is not.
pub fn preview(value: Option<&OsStr>) -> Result<(), PreviewError> {
    match value.map(|v| v.to_str()) {
        None => Err(PreviewError::Off),
        Some(Some("1")) => Ok(()),
        Some(_) => Err(PreviewError::NotOne),
    }
}

/// The flags' values that Windows would get: Unicode only, each named.
fn unicode_args(a: &RunArgs) -> Result<(), String> {
    a.wall
        .paths()
        .map_err(|e| format!("{e}, which a PSEC container's paths must be: rename it"))?;
    for e in &a.env {
        if e.to_str().is_none() {
            return Err(format!(
                "--env {} is not valid Unicode, which a Windows environment block must be",
                e.to_string_lossy()
            ));
        }
    }
    for (i, c) in a.command.iter().enumerate() {
        if c.to_str().is_none() {
            return Err(format!(
                "the command's argument {i} ({}) is not valid Unicode, which a Windows command line must be",
                c.to_string_lossy()
            ));
        }
    }
    Ok(())
}

/// Runs `sandbox run`.
pub fn main(a: RunArgs) -> i32 {
    let status = match a.json_status.as_deref().map(StatusFile::open) {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => return refuse_with(None, e),
    };
    let st = status.as_ref();
    if let Err(e) = preview(std::env::var_os(PREVIEW_ENV).as_deref()) {
        return refuse_with(st, e);
    }
    if a.share_net {
        return refuse_with(st,
            "--share-net (the host network) is refused on Windows: a PSEC run reaches the network only through the node's egress proxy (--allow, --forward)",
        );
    }
    if let Err(e) = parse_route_env(std::env::var_os(ROUTE_ENV).as_deref()) {
        return refuse_with(st, e);
    }
    if let Err(e) = unicode_args(&a) {
        return refuse_with(st, e);
    }
    // Refused as a Linux node refuses it (the policy's own words, 125).
    if let Err(e) = oz0_policy::net::Egress::parse(&a.wall.allow, &a.wall.forward) {
        return refuse_with(st, e);
    }
    if !a.wall.work.is_dir() {
        return refuse_with(
            st,
            format!(
                "--work {} is not a folder: make it first",
                a.wall.work.display()
            ),
        );
    }
    let walls = platform(Settings {
        data_dir: None,
        psec: true,
    });
    let wall = walls.wall();
    let probe = match &wall.probe {
        Ok(p) => p,
        Err(e) => return refuse_with(st, format!("the PSEC probe could not ask Windows: {e}")),
    };
    match probe.psec() {
        Err(why) => {
            let r = wall.report(None).expect("the probe answered");
            refuse_with(st, format!(
                "this machine has no PSEC, which the preview runs in ({why}); nothing was started. {}",
                r.fix_line
            ))
        }
        Ok(_) => {
            let r = match request(&a) {
                Ok(r) => r,
                Err(e) => return refuse_with(st, e),
            };
            eprintln!("oz0-node: warning: the PSEC preview: the run's confinement is proven only as far as `sandbox check --psec` shows on this machine (this build's self-test of PSEC stops at egress), so it is not tier 1");
            let psec = match walls.tier1() {
                Ok(p) => p,
                Err(e) => return refuse_with(st, e),
            };
            match super::psec_run::run(r, &*psec) {
                Ok(o) => match &status {
                    Some(s) if !s.write(&crate::outcome::outcome_doc(&o)) => {
                        Exit::StatusUnwritten.code()
                    }
                    _ => o.exit_code,
                },
                Err(e) => refuse_with(st, format!("{e}; nothing is left running")),
            }
        }
    }
}

/// The run as `psec_run` takes it: the flags, the variables named and
/// their values, the data directory.
fn request(a: &RunArgs) -> Result<super::psec_run::Request, String> {
    // Each is Unicode: unicode_args checked it.
    let env = a
        .env
        .iter()
        .map(|e| crate::flags::env_var(e.to_str().unwrap_or_default()))
        .collect::<Result<Vec<_>, _>>()?;
    let flags = a.wall.absolute()?;
    Ok(super::psec_run::Request {
        work: flags.work,
        read: flags.read,
        write: flags.write,
        env,
        limits: a.wall.limits(None),
        allow: a.wall.allow.clone(),
        forward: a.wall.forward.clone(),
        data_dir: a.data.resolve().map_err(|e| e.to_string())?,
        command: a
            .command
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect(),
    })
}
