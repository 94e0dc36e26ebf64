//! The Windows node's jobs: tier 0, one at a time.
//!
//! A Windows node is routed at tier 0, so it takes shell jobs of tier 0,
//! and runs each with the node's own permissions: no wall. So, as on Linux
//! with `--sandbox none`, a job that asks for what only a wall enforces
//! (egress, memory, processes, CPU time) is refused, and a tool job (whose
//! server runs only behind a wall) too. What it gets:
//!
//! - a fresh work folder `<work-root>\job-<id>-<attempt>`, its current
//!   folder, removed after the job;
//! - exactly the job's variables, plus `SystemRoot` and, when the job names
//!   no `PATH`, the system's (`%SystemRoot%\System32;%SystemRoot%`); never
//!   the node's own environment;
//! - its output in `<data-dir>\jobs\<id>\stdout` and `stderr`, whose last
//!   64 KiB reach the edge;
//! - a job object (kill-on-close) it is placed in while still suspended, so
//!   every process it starts is in it: when its first process ends, or its
//!   timeout passes, or its lease is lost, or the node stops, all of them
//!   end.

use std::fs;
use std::os::windows::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oz0_edge::client::{ClientError, Completion, Lease, NodeClient};
use oz0_edge::wire::ShellJob;
use oz0_windows::native::Job;
use oz0_windows::plan::{JobLimits, JOB_LIMIT_KILL_ON_JOB_CLOSE};

use super::log;
use crate::record::{safe_id, tail};

/// `CREATE_SUSPENDED`: the child runs nothing until it is in its job.
const CREATE_SUSPENDED: u32 = 0x0000_0004;

/// Where jobs go on this node.
pub struct Jobs {
    /// `<data-dir>\jobs`.
    pub records: PathBuf,
    /// Where each job's work folder is made.
    pub work_root: PathBuf,
}

/// How a job ended.
struct End {
    succeeded: bool,
    exit_code: Option<i32>,
    error: Option<String>,
}

impl End {
    fn refused(why: String) -> End {
        End {
            succeeded: false,
            exit_code: Some(oz0_core::exit::Exit::Sandbox.code()),
            error: Some(why),
        }
    }
}

/// What tier 0 cannot give, named: Err with the refusal.
fn tier0(p: &ShellJob) -> Result<(), String> {
    let mut asks = Vec::new();
    if !p.allow.is_empty() || !p.forward.is_empty() {
        asks.push("egress");
    }
    for (set, name) in [
        (p.memory.is_some(), "memory"),
        (p.processes.is_some(), "processes"),
        (p.cpu_seconds.is_some(), "cpu_seconds"),
        (p.tmp_size.is_some(), "tmp_size"),
    ] {
        if set {
            asks.push(name);
        }
    }
    if asks.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "tier 0 has no wall: it enforces neither job limits nor an egress allowlist, so a job that asks for them ({}) is refused on this Windows node",
            asks.join(", ")
        ))
    }
}

/// The job's command, its variables and its work folder, started suspended
/// and placed in a kill-on-close job, then resumed.
fn start(
    p: &ShellJob,
    work: &Path,
    out: fs::File,
    err: fs::File,
) -> Result<(std::process::Child, Arc<Job>), String> {
    let mut cmd = Command::new(&p.command[0]);
    cmd.args(&p.command[1..])
        .current_dir(work)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .creation_flags(CREATE_SUSPENDED);
    let root = std::env::var_os("SystemRoot").unwrap_or_else(|| "C:\\Windows".into());
    cmd.env("SystemRoot", &root);
    if !p.env.keys().any(|k| k.eq_ignore_ascii_case("PATH")) {
        let r = Path::new(&root);
        let path = std::env::join_paths([r.join("System32"), r.to_path_buf()])
            .map_err(|e| format!("the system PATH: {e}"))?;
        cmd.env("PATH", path);
    }
    for (k, v) in &p.env {
        cmd.env(k, v);
    }
    let job = Job::create(&JobLimits {
        limit_flags: JOB_LIMIT_KILL_ON_JOB_CLOSE,
        job_memory_bytes: None,
        active_processes: None,
        job_user_time_100ns: None,
        ui_restrictions: 0,
    })
    .map_err(|e| format!("cannot make the job's job object: {e}"))?;
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", p.command[0]))?;
    if let Err(e) = job.place_and_resume(child.id()) {
        // Not placed: it never runs.
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!(
            "the job's process could not be placed in its job object ({e}); it never ran"
        ));
    }
    Ok((child, Arc::new(job)))
}

/// Ends every process of a job when dropped: however the job's future
/// ends (its lease lost, the node stopped), nothing of it stays.
struct EndOnDrop(Arc<Job>);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        let _ = self.0.terminate();
    }
}

/// Runs the job to its end (on a blocking thread).
fn wait(mut child: std::process::Child, job: &Job, timeout: Option<u64>) -> End {
    let deadline = timeout.map(|s| Instant::now() + Duration::from_secs(s));
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Ok(s),
            Ok(None) => {}
            Err(e) => break Err(e),
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            let _ = job.terminate();
            let _ = child.wait();
            return End {
                succeeded: false,
                exit_code: Some(oz0_core::exit::Exit::Timeout.code()),
                error: Some("the job's timeout was reached".into()),
            };
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // The first process ended: so does every process it started, and the
    // job ends once they are gone.
    let _ = job.terminate();
    let until = Instant::now() + Duration::from_secs(5);
    while job.active_processes().is_ok_and(|n| n > 0) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    match status {
        Ok(s) => {
            let code = s.code().unwrap_or(1);
            End {
                succeeded: code == 0,
                exit_code: Some(code),
                error: None,
            }
        }
        Err(e) => End {
            succeeded: false,
            exit_code: None,
            error: Some(format!("cannot wait for the job's process: {e}")),
        },
    }
}

impl Jobs {
    /// Runs one leased job and reports its end.
    pub async fn take(&self, client: &NodeClient, mut lease: Lease) {
        let job = lease.job.clone();
        let id = job.job_id.clone();
        if !safe_id(&id) {
            log("the edge handed out a job whose id is not plain letters and digits: not run");
            return;
        }
        if job.tier > 0 {
            log(&format!(
                "refused job {id}: it needs tier {} and a Windows node is routed at tier 0; not run, its lease lapses",
                job.tier
            ));
            return;
        }
        log(&format!(
            "took job {id} (tier 0, {} from {}, attempt {})",
            job.kind, job.origin, job.attempt
        ));
        let record = self.records.join(&id);
        let work = self.work_root.join(format!("job-{id}-{}", job.attempt));
        let prepared = (|| -> Result<(ShellJob, fs::File, fs::File), String> {
            if job.kind != "shell" {
                return Err(format!(
                    "a {} job: its server runs only behind a wall, and a Windows node runs at tier 0; not run",
                    job.kind
                ));
            }
            let p = ShellJob::from_value(&job.payload)?;
            tier0(&p)?;
            fs::create_dir_all(&record)
                .map_err(|e| format!("cannot create {}: {e}", record.display()))?;
            let _ = fs::remove_dir_all(&work);
            fs::create_dir_all(&work)
                .map_err(|e| format!("cannot create the work folder {}: {e}", work.display()))?;
            let open = |n: &str| {
                fs::File::create(record.join(n))
                    .map_err(|e| format!("cannot create {}: {e}", record.join(n).display()))
            };
            Ok((p, open("stdout")?, open("stderr")?))
        })();
        let started = Instant::now();
        let end = match prepared
            .and_then(|(p, out, err)| start(&p, &work, out, err).map(|(c, j)| (c, j, p.timeout)))
        {
            Err(e) => {
                log(&format!("job {id} refused: {e}"));
                End::refused(e)
            }
            Ok((child, job_object, timeout)) => {
                let _end = EndOnDrop(job_object.clone());
                let handle = tokio::task::spawn_blocking(move || wait(child, &job_object, timeout));
                match client.run_leased(&mut lease, handle).await {
                    Ok(Ok(end)) => end,
                    Ok(Err(e)) => End {
                        succeeded: false,
                        exit_code: None,
                        error: Some(format!("the job's thread failed: {e}")),
                    },
                    Err(e) => {
                        // Its processes end with `_end`; the lease is gone,
                        // so the result is no one's.
                        log(&format!("job {id} killed: {e}"));
                        let _ = fs::remove_dir_all(&work);
                        return;
                    }
                }
            }
        };
        let _ = fs::remove_dir_all(&work);
        log(&format!(
            "job {id} ended: status {} after {}ms",
            end.exit_code
                .map_or_else(|| "none".into(), |c| c.to_string()),
            started.elapsed().as_millis()
        ));
        let (stdout_tail, stdout_bytes) = tail(&record.join("stdout"));
        let (stderr_tail, stderr_bytes) = tail(&record.join("stderr"));
        let done = Completion {
            succeeded: end.succeeded,
            exit_code: end.exit_code,
            result: None,
            error: end.error,
            stdout_tail,
            stderr_tail,
            stdout_bytes,
            stderr_bytes,
        };
        let mut backoff = Duration::from_secs(1);
        loop {
            match client.finish_job(&lease, &done).await {
                Ok(()) => return,
                Err(e @ (ClientError::LeaseLost { .. } | ClientError::Refused { .. })) => {
                    log(&format!("the edge did not take job {id}'s end: {e}"));
                    return;
                }
                Err(e) if lease.expired() => {
                    log(&format!("job {id}'s end could not reach the edge before its lease lapsed ({e}); the edge hands it out again"));
                    return;
                }
                Err(e) => {
                    log(&format!(
                        "cannot report job {id}'s end: {e}; retrying in {}s",
                        backoff.as_secs()
                    ));
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                }
            }
        }
    }
}
