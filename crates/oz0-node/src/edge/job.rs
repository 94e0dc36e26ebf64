//! One job of the edge's on this node: its payload (strict: anything
//! unknown is refused), its spec, its run through the node's sandbox, and
//! its status record.

use std::fs::{self, File};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
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
    #[error("the {0} is not UTF-8")]
    NotUtf8(&'static str),
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
        work: work
            .to_str()
            .ok_or(JobError::NotUtf8("work directory"))?
            .into(),
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
        data_dir: data_dir
            .to_str()
            .ok_or(JobError::NotUtf8("data directory"))?
            .into(),
        allow_unix_sockets: false,
        command: p.command,
    };
    Ok(RunSpec::new(req)?)
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
    cancel: OwnedFd,
) -> Result<JobEnd, JobError> {
    sandbox
        .run(
            spec,
            RunOptions::new(RunIo::files(out, err), Some(Cancel(cancel))),
        )
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
        let w = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut f| f.write_all(format!("{r:#}\n").as_bytes()));
        if let Err(e) = w {
            log(&format!("cannot write {}: {e}", path.display()));
        }
    }
    let path = record.join("status.json");
    let tmp = record.join(".status.json.tmp");
    let r = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(format!("{doc:#}\n").as_bytes()))
        .and_then(|_| fs::rename(&tmp, &path));
    if let Err(e) = r {
        log(&format!("cannot write {}: {e}", path.display()));
    }
}
