//! One job of the edge's on this node: its payload (strict: anything
//! unknown is refused), its spec, its run through the node's sandbox, and
//! its status record.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use oz0_core::{Cancel, RunIo, RunOptions, Sandbox};
use oz0_edge::wire::ShellJob;
use oz0_policy::{EnvVar, Limits, RunRequest, RunSpec};

use super::log;

/// Why a shell job's run was not made, or did not start.
#[derive(Debug, thiserror::Error)]
pub(super) enum JobError {
    /// A variable a run may not be given.
    #[error("env {name}: {source}")]
    Env {
        /// The variable.
        name: String,
        /// Why.
        source: oz0_policy::env::EnvError,
    },
    /// The work folder's or data directory's path is not UTF-8.
    #[cfg(not(windows))]
    #[error("the {0} is not UTF-8")]
    NotUtf8(&'static str),
    /// The work folder's or data directory's path cannot be a run's.
    #[cfg(windows)]
    #[error("the {0}: {1}")]
    Carry(&'static str, oz0_windows::tier0::CarryError),
    /// The spec was refused.
    #[error(transparent)]
    Spec(#[from] oz0_policy::spec::SpecError),
    /// The sandbox did not run it.
    #[error("{0}")]
    Run(oz0_core::RunError),
}

/// The run of a shell job's payload in `work`.
pub(super) fn spec_for(p: ShellJob, work: &Path, data_dir: &Path) -> Result<RunSpec, JobError> {
    let env = p
        .env
        .iter()
        .map(|(k, v)| {
            EnvVar::new(k, v).map_err(|source| JobError::Env {
                name: k.clone(),
                source,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let req = RunRequest {
        work: carry("work directory", work)?,
        read: vec![],
        write: vec![],
        env,
        allow: p.allow,
        forward: p.forward,
        limits: Limits {
            memory_mib: p.memory,
            processes: p.processes,
            cpu_seconds: p.cpu_seconds,
            timeout_seconds: p.timeout,
            tmp_mib: p.tmp_size,
        },
        data_dir: carry("data directory", data_dir)?,
        allow_unix_sockets: false,
        command: p.command,
    };
    Ok(RunSpec::new(req)?)
}

/// A host path as a run's spec holds it: UTF-8 on Unix, `/C:/a` for
/// Windows' `C:\a`.
#[cfg(not(windows))]
fn carry(what: &'static str, p: &Path) -> Result<String, JobError> {
    Ok(p.to_str().ok_or(JobError::NotUtf8(what))?.into())
}

#[cfg(windows)]
fn carry(what: &'static str, p: &Path) -> Result<String, JobError> {
    oz0_windows::tier0::carry(p).map_err(|e| JobError::Carry(what, e))
}

/// A run's cancel, and what fires it when dropped (the job's lease was
/// lost, the node is stopping): on Unix the other end of a socket pair,
/// on Windows an event.
pub(super) fn cancel_pair() -> std::io::Result<(Cancel, Box<dyn Send>)> {
    #[cfg(unix)]
    {
        /// Cancels the run when dropped (the pair's end closes).
        struct CancelOnDrop(#[allow(dead_code)] std::os::unix::net::UnixStream);
        let (r, w) = std::os::unix::net::UnixStream::pair()?;
        Ok((
            Cancel(std::os::fd::OwnedFd::from(r)),
            Box::new(CancelOnDrop(w)),
        ))
    }
    #[cfg(windows)]
    {
        use oz0_windows::native::CancelEvent;
        /// Cancels the run when dropped.
        struct SetOnDrop(CancelEvent);
        impl Drop for SetOnDrop {
            fn drop(&mut self) {
                self.0.set();
            }
        }
        let e = CancelEvent::new().map_err(std::io::Error::other)?;
        let c = e.cancel().map_err(std::io::Error::other)?;
        Ok((c, Box::new(SetOnDrop(e))))
    }
}

pub(super) use crate::record::safe_id;

pub(super) use crate::outcome::JobEnd;

/// Runs one job to its end (blocking) through the node's sandbox, its
/// output into its files.
pub(super) fn run_job(
    sandbox: &dyn Sandbox,
    spec: &RunSpec,
    out: File,
    err: File,
    cancel: Cancel,
) -> Result<JobEnd, JobError> {
    sandbox
        .run(spec, RunOptions::new(RunIo::files(out, err), Some(cancel)))
        .map(|o| JobEnd::from_outcome(&o))
        .map_err(JobError::Run)
}

pub(super) fn write_status(record: &Path, job: &oz0_edge::wire::LeasedJobView, end: &JobEnd) {
    let doc = serde_json::json!({
        "job_id": job.job_id,
        "attempt": job.attempt,
        "tier": job.tier,
        "origin": job.origin,
        "kind": job.job.kind().as_str(),
        "outcome": end.outcome,
        "exit_code": end.exit_code,
        "succeeded": end.succeeded(),
        "duration_ms": end.duration_ms,
        "reason": end.reason,
        "phases": end.phases,
    });
    if let Some(r) = &end.result {
        let path = record.join("result.json");
        let w = super::files::create_private(&path)
            .and_then(|mut f| f.write_all(format!("{r:#}\n").as_bytes()));
        if let Err(e) = w {
            log(&format!("cannot write {}: {e}", path.display()));
        }
    }
    let path = record.join("status.json");
    let tmp = record.join(".status.json.tmp");
    let r = super::files::create_private(&tmp)
        .and_then(|mut f| f.write_all(format!("{doc:#}\n").as_bytes()))
        .and_then(|_| fs::rename(&tmp, &path));
    if let Err(e) = r {
        log(&format!("cannot write {}: {e}", path.display()));
    }
}
