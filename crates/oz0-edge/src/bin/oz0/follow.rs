//! Following a job: waiting for its end, `oz0 job logs -f`, and the exit
//! status a job's end gives `oz0`.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::Result;
use oz0_edge::client::OperatorClient;
use oz0_edge::term;
use oz0_edge::wire::JobView;

/// `oz0`'s exit statuses (the README lists them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Status {
    /// Done; a job waited for or followed succeeded.
    Done,
    /// The edge refused or could not be reached; a job failed without an
    /// exit status of its own, or was cancelled.
    Failed,
    /// Bad usage.
    Usage,
    /// A job failed with this exit status (1-255), passed on.
    Job(u8),
    /// A job waited for did not end in time.
    NotEnded,
}

impl From<Status> for std::process::ExitCode {
    fn from(s: Status) -> std::process::ExitCode {
        std::process::ExitCode::from(match s {
            Status::Done => 0,
            Status::Failed => 1,
            Status::Usage => 2,
            Status::Job(c) => c,
            Status::NotEnded => 124,
        })
    }
}

/// A usage error (exit status 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct Usage(pub(super) String);

pub(super) fn usage(why: String) -> anyhow::Error {
    anyhow::Error::new(Usage(why))
}

/// The status a job's state and exit status give.
pub(super) fn job_status(state: &str, exit_code: Option<i64>) -> Status {
    match state {
        "succeeded" => Status::Done,
        "queued" | "leased" => Status::NotEnded,
        "failed" => match exit_code.and_then(|c| u8::try_from(c).ok()) {
            Some(c) if c > 0 => Status::Job(c),
            _ => Status::Failed,
        },
        _ => Status::Failed,
    }
}

/// One line on stderr, `oz0: …`, escaped; a closed stderr is no panic.
pub(super) fn say(msg: &str) {
    let line = format!("oz0: {}\n", term::escape(msg.as_bytes()));
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// Waits until the job ended or `secs` passed, following its output's
/// wakes (the edge answers each look the moment the job ends).
pub(super) async fn wait_job(
    client: &OperatorClient,
    tenant: &str,
    id: &str,
    secs: u64,
) -> Result<JobView> {
    let until = Instant::now() + Duration::from_secs(secs);
    let (mut so, mut se) = (0, 0);
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let wait = u64::try_from(left.as_millis())
            .unwrap_or(u64::MAX)
            .min(oz0_edge::wire::MAX_WAIT_MS);
        let l = client
            .job_logs_after(tenant, id, Some(so), Some(se), wait)
            .await?;
        so = l.stdout_bytes.unwrap_or(0);
        se = l.stderr_bytes.unwrap_or(0);
        let ended = !matches!(l.state.as_deref(), Some("queued" | "leased"));
        if ended || Instant::now() >= until {
            return Ok(client.job(tenant, id).await?);
        }
    }
}

/// Where a follow writes a stream: false once its reader went away.
fn write(err: bool, text: &str) -> bool {
    let r = if err {
        let mut e = std::io::stderr().lock();
        e.write_all(text.as_bytes()).and_then(|()| e.flush())
    } else {
        let mut o = std::io::stdout().lock();
        o.write_all(text.as_bytes()).and_then(|()| o.flush())
    };
    r.is_ok()
}

/// `oz0 job logs -f`: the job's stdout on stdout and its stderr on
/// stderr as its node sends them (escaped unless `raw`), a line on
/// stderr where the edge kept no more of what came between two looks,
/// until the job ends; its status is the job's. A reader that goes away
/// ends the follow.
pub(super) async fn logs(
    client: &OperatorClient,
    tenant: &str,
    id: &str,
    raw: bool,
) -> Result<Status> {
    let (mut so, mut se) = (0i64, 0i64);
    loop {
        let l = client
            .job_logs_after(tenant, id, Some(so), Some(se), oz0_edge::wire::MAX_WAIT_MS)
            .await?;
        for (err, name, tail, from, bytes, after) in [
            (
                false,
                "stdout",
                &l.stdout_tail,
                l.stdout_from,
                l.stdout_bytes,
                so,
            ),
            (
                true,
                "stderr",
                &l.stderr_tail,
                l.stderr_from,
                l.stderr_bytes,
                se,
            ),
        ] {
            if from > after {
                say(&format!(
                    "{} byte(s) of the job's {name} were not kept (the edge keeps the last {} of each stream)",
                    from - after,
                    l.bound_bytes
                ));
            }
            if let Some(t) = tail.as_deref().filter(|t| !t.is_empty()) {
                let shown = if raw {
                    std::borrow::Cow::Borrowed(t)
                } else {
                    term::escape(t.as_bytes())
                };
                if !write(err, &shown) {
                    return Ok(Status::Done);
                }
            }
            let _ = bytes;
        }
        so = l.stdout_bytes.unwrap_or(0).max(so);
        se = l.stderr_bytes.unwrap_or(0).max(se);
        let state = l.state.as_deref().unwrap_or("queued");
        if !matches!(state, "queued" | "leased") {
            let status = job_status(state, l.exit_code);
            if status != Status::Done {
                say(&format!(
                    "job {id} {state}{}",
                    l.exit_code
                        .map(|c| format!(" (exit status {c})"))
                        .unwrap_or_default()
                ));
            }
            return Ok(status);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_end_gives_its_status() {
        assert_eq!(job_status("succeeded", Some(0)), Status::Done);
        assert_eq!(job_status("failed", Some(3)), Status::Job(3));
        assert_eq!(job_status("failed", None), Status::Failed);
        assert_eq!(job_status("failed", Some(-9)), Status::Failed);
        assert_eq!(job_status("failed", Some(300)), Status::Failed);
        assert_eq!(job_status("cancelled", None), Status::Failed);
        assert_eq!(job_status("leased", None), Status::NotEnded);
    }
}
