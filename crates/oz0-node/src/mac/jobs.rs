//! The macOS node's tier-0 jobs (the loop, records and reports are
//! `crate::daemon`'s): each runs with no wall through [`Plain`], whose
//! profile allows everything but the run's mark, so that every process the
//! job starts, even one that left for a session of its own, is found and
//! ended with it (when its first process ends, its timeout passes, its
//! lease is lost or the node stops).

use std::fs;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use oz0_core::{Cancel, Ended, RunIo, RunOptions, Sandbox};
use oz0_edge::wire::ShellJob;
use oz0_policy::{EnvVar, RunRequest, RunSpec};

use crate::daemon::{End, Started, Tier0};
use oz0_macos::sandbox::Plain;

/// macOS' tier-0 runner.
pub struct MacTier0 {
    /// Where each job's TEMP (and its mark) is made.
    pub temp_root: PathBuf,
    /// The node's data directory (named in the run's spec).
    pub data_dir: PathBuf,
}

/// Cancels the run when dropped.
struct CancelOnDrop(UnixStream);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let _ = self.0.write_all(b"x");
    }
}

fn spec(p: &ShellJob, work: &Path, data_dir: &Path) -> Result<RunSpec, String> {
    let utf8 = |what: &str, p: &Path| crate::flags::utf8(what, p);
    let env = p
        .env
        .iter()
        .map(|(k, v)| EnvVar::new(k, v).map_err(|e| format!("the job's variable {k}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let limits = oz0_policy::Limits {
        timeout_seconds: p.timeout,
        ..Default::default()
    };
    RunSpec::new(RunRequest {
        work: utf8("the work folder", work)?,
        data_dir: utf8("the data directory", data_dir)?,
        env,
        limits,
        command: p.command.clone(),
        ..Default::default()
    })
    .map_err(|e| e.to_string())
}

impl Tier0 for MacTier0 {
    fn platform(&self) -> &'static str {
        "macOS"
    }

    fn start(
        &self,
        p: &ShellJob,
        work: &Path,
        out: fs::File,
        err: fs::File,
    ) -> Result<Started, String> {
        let spec = spec(p, work, &self.data_dir)?;
        let (r, w) =
            UnixStream::pair().map_err(|e| format!("cannot make a cancel channel: {e}"))?;
        let plain = Plain {
            temp_root: self.temp_root.clone(),
            records: Some(oz0_macos::runs::records(&self.data_dir)),
        };
        let wait = move || {
            let io = RunIo::files(out, err);
            match plain.run(&spec, RunOptions::new(io, Some(Cancel(OwnedFd::from(r))))) {
                Ok(o) => match o.ended {
                    Ended::Timeout => End::timed_out(),
                    Ended::NotExecuted { reason } => End {
                        succeeded: false,
                        exit_code: Some(o.exit_code),
                        error: Some(reason),
                    },
                    _ => End::exited(o.exit_code),
                },
                Err(e) => End::refused(e.to_string()),
            }
        };
        Ok(Started {
            wait: Box::new(wait),
            guard: Box::new(CancelOnDrop(w)),
        })
    }
}
