//! `sandbox run` on macOS: one command through the node core's door, in
//! Seatbelt (`oz0_macos::sandbox::Seatbelt`).
//!
//! Before the run, the Seatbelt probe of `sandbox check` must show a
//! profile refusing a read: a Mac where profiles are not enforced runs
//! nothing. The run's confinement is what the self-test
//! (`sandbox check --self-test`) proves on this Mac; this command says so
//! when it is not proven. Type-checked in CI; it has not run on a Mac.

use std::path::Path;
use std::sync::Arc;

use clap::Args;
use oz0_core::exit::Exit;
use oz0_core::{RunIo, RunOptions};
use oz0_macos::check::SeatbeltAnswer;
use oz0_policy::{RunRequest, RunSpec};

use super::host::{self, DataDirArg};

/// `sandbox run` flags.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// --work names a real path: /tmp, /var and /etc are links on macOS
    /// (name /private/…); --memory, --processes and --cpu-seconds are
    /// refused (macOS has no limit for all of a run's processes together).
    #[command(flatten)]
    pub wall: crate::flags::RunFlags,
    /// Give the command NAME=VALUE, or NAME with the value of NAME from this
    /// process's environment. Nothing else from this environment reaches it.
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    pub env: Vec<String>,
    #[command(flatten)]
    pub data: DataDirArg,
    /// Append each egress decision's JSON line to FILE
    /// [default: <data-dir>/egress-audit.jsonl].
    #[arg(long = "audit-log", value_name = "FILE")]
    pub audit_log: Option<std::path::PathBuf>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

fn refuse(msg: impl std::fmt::Display) -> i32 {
    eprintln!("oz0-node: sandbox refused: {msg}");
    Exit::Sandbox.code()
}

/// The spec, checked by the same code as every platform's.
fn spec(a: &RunArgs, data_dir: &Path) -> Result<RunSpec, String> {
    let flags = a.wall.absolute()?;
    let (work, read, write) = flags.paths()?;
    let req = RunRequest {
        work,
        read,
        write,
        env: a
            .env
            .iter()
            .map(|e| crate::flags::env_var(e))
            .collect::<Result<_, _>>()?,
        allow: flags.allow,
        forward: flags.forward,
        limits: a.wall.limits(None),
        data_dir: crate::flags::utf8("--data-dir", data_dir)?,
        allow_unix_sockets: false,
        command: a.command.clone(),
    };
    RunSpec::new(req).map_err(|e| e.to_string())
}

/// Runs `sandbox run`.
pub fn main(a: RunArgs) -> i32 {
    let data_dir = match a.data.resolve() {
        Ok(d) => d,
        Err(e) => return refuse(e),
    };
    let spec = match spec(&a, &data_dir) {
        Ok(s) => s,
        Err(e) => return refuse(e),
    };
    match oz0_macos::probe::seatbelt() {
        SeatbeltAnswer::Denies => {}
        other => {
            let l = oz0_macos::check::seatbelt_lines(&other);
            return refuse(format!(
                "{}; nothing was started. {}",
                l.tier_line,
                l.fix_line.unwrap_or_default()
            ));
        }
    }
    let audit = a
        .audit_log
        .clone()
        .unwrap_or_else(|| data_dir.join("egress-audit.jsonl"));
    // Live runs are recorded in the data directory when there is one;
    // what runs of a killed node left is ended first.
    let recorded = data_dir.exists().then(|| {
        host::sweep(&data_dir);
        data_dir.clone()
    });
    let walls = crate::platform::platform(crate::platform::Settings {
        data_dir: recorded,
        egress: Arc::new(host::egress(audit)),
    });
    let wall = match walls.tier1() {
        Ok(w) => w,
        Err(e) => return refuse(e),
    };
    if !host::proven(&data_dir) {
        eprintln!("oz0-node: warning: no self-test of Seatbelt has passed on this Mac (`oz0-node sandbox check --self-test` says which property fails): this run's confinement is not proven");
    }
    match wall.run(
        &spec,
        RunOptions::new(RunIo::inherit(), host::cancel_on_signals().ok()),
    ) {
        Ok(o) => {
            for w in &o.warnings {
                eprintln!("oz0-node: warning: {w}");
            }
            if o.ended == oz0_core::Ended::Timeout {
                eprintln!("oz0-node: the run's --timeout was reached: killed");
            }
            o.exit_code
        }
        Err(e) => refuse(e),
    }
}
