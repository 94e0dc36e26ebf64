//! The Windows node's tier-0 jobs (the loop, records and reports are
//! `crate::daemon`'s): each started suspended and placed in a kill-on-close
//! job object before it runs, so every process it starts is in it: when its
//! first process ends, or its timeout passes, or its lease is lost, or the
//! node stops, all of them end. Besides the job's variables it gets
//! `SystemRoot` and, when the job names no `PATH`, the system's
//! (`%SystemRoot%\System32;%SystemRoot%`).

use std::fs;
use std::os::windows::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oz0_edge::wire::ShellJob;
use oz0_windows::native::Job;
use oz0_windows::plan::{JobLimits, JOB_LIMIT_KILL_ON_JOB_CLOSE};

use crate::daemon::{End, Started, Tier0};

/// `CREATE_SUSPENDED`: the child runs nothing until it is in its job.
const CREATE_SUSPENDED: u32 = 0x0000_0004;

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
            return End::timed_out();
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
        Ok(s) => End::exited(s.code().unwrap_or(1)),
        Err(e) => End {
            succeeded: false,
            exit_code: None,
            error: Some(format!("cannot wait for the job's process: {e}")),
        },
    }
}

/// Windows' tier-0 runner.
pub struct WindowsTier0;

impl Tier0 for WindowsTier0 {
    fn platform(&self) -> &'static str {
        "Windows"
    }

    fn start(
        &self,
        p: &ShellJob,
        work: &Path,
        out: fs::File,
        err: fs::File,
    ) -> Result<Started, String> {
        let (child, job) = start(p, work, out, err)?;
        let timeout = p.timeout;
        let guard = EndOnDrop(job.clone());
        Ok(Started {
            wait: Box::new(move || wait(child, &job, timeout)),
            guard: Box::new(guard),
        })
    }
}
